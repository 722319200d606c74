/*
 * mem_lock.h - the lock calls of a mem: client (internal): locks, read/write
 * locks, semaphores and multi-key locks decided in process by the core
 * (src/core/lock.c) with the module's semantics (docs/locks.md), so that a
 * program written against mem: behaves the same on redis://. See
 * mem_lock.c.
 *
 * lock.c calls these after its checks (a client, the arguments given, the
 * options, 1 to 64 keys, and the arguments as the module parses them);
 * they refuse only what mem: cannot do (durable mode). Every function may
 * be called from any number of threads at once, except fg_mem_locks_free.
 */
#ifndef FG_MEM_LOCK_H
#define FG_MEM_LOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "floodgate.h"

typedef struct fg_mem_locks fg_mem_locks;

/* A table whose leases run by clock_us(clock_arg) (microseconds since the
 * epoch; NULL: CLOCK_REALTIME). NULL when out of memory. */
fg_mem_locks *fg_mem_locks_new(int64_t (*clock_us)(void *arg), void *clock_arg);

/* Stops and joins the renewal thread (an on_lost call in progress ends
 * first) and frees everything. No call may be waiting in the table: that is
 * the caller's error, as any call on a client being closed. */
void fg_mem_locks_free(fg_mem_locks *m);

/* backend_mem.c, for tests: the in-process lock table of a mem: client;
 * NULL for any other client, and for NULL. */
fg_mem_locks *fg_client_mem_locks(fg_client *c);

/* The lock calls of floodgate.h, on the table. */
fg_code fg_mem_lock(fg_mem_locks *m, const char *key, const char *owner, const fg_lock_options *o,
                    fg_lock_grant *out, fg_error *err);
fg_code fg_mem_unlock(fg_mem_locks *m, const char *key, const char *owner, int64_t *holds_left,
                      fg_error *err);
fg_code fg_mem_extend(fg_mem_locks *m, const char *key, const char *owner, int64_t lease_ms,
                      bool *extended, fg_error *err);
fg_code fg_mem_semaphore_acquire(fg_mem_locks *m, const char *key, int64_t capacity,
                                 const char *owner, int64_t permits, const fg_lock_options *o,
                                 fg_lock_grant *out, fg_error *err);
fg_code fg_mem_semaphore_release(fg_mem_locks *m, const char *key, const char *owner,
                                 int64_t permits, int64_t *permits_left, fg_error *err);
fg_code fg_mem_lock_multi(fg_mem_locks *m, const char *const *keys, size_t count, const char *owner,
                          const fg_lock_options *o, fg_lock_grant *out, fg_error *err);
fg_code fg_mem_unlock_multi(fg_mem_locks *m, const char *const *keys, size_t count,
                            const char *owner, int64_t *released, fg_error *err);

/* For tests: the calls waiting in the queue of `key` now. */
size_t fg_mem_lock_waiters(fg_mem_locks *m, const char *key);

#endif
