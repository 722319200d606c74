/*
 * remote_lock.h - the locks of a client of one server (internal): the
 * module's FG.LOCK, FG.ACQUIRE, FG.MLOCK and their releases, with the spare
 * connections of waiting calls and the renewal thread as their state; and
 * the parsing of a grant, which Redlock shares. See remote_lock.c.
 */
#ifndef FG_REMOTE_LOCK_H
#define FG_REMOTE_LOCK_H

#include <hiredis/hiredis.h>

#include "backend.h"
#include "conn.h"
#include "floodgate.h"

extern const fg_lock_ops fg_remote_locks;

/* A reply [acquired, token, ttl_ms, holds] of FG.LOCK, FG.ACQUIRE or
 * FG.MLOCK, or its error. */
fg_code fg_parse_grant(const redisReply *r, fg_lock_grant *out, fg_error *err);

/* The integer reply of `command` (FG.RELEASE, FG.UNLOCK: what is left). */
fg_code fg_parse_lock_count(const redisReply *r, const char *command, int64_t *out,
                            fg_error *err);

/* FG.EXTEND's reply: whether the owner held the key. */
fg_code fg_parse_extended(const redisReply *r, bool *extended, fg_error *err);

/* The commands, as every remote path sends them (the synchronous calls
 * here, the asynchronous client): FG.ACQUIRE without WAIT, FG.RELEASE
 * (permits 0: all), FG.EXTEND. */
void fg_semaphore_acquire_command(fg_argv *cmd, const char *key, int64_t capacity,
                                  const char *owner, int64_t permits,
                                  const fg_lock_options *o);
void fg_semaphore_release_command(fg_argv *cmd, const char *key, const char *owner,
                                  int64_t permits);
void fg_extend_command(fg_argv *cmd, const char *key, const char *owner, int64_t lease_ms);

#endif
