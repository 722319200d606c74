/*
 * backend.h - what a backend of libfloodgate is (internal): a table of
 * operations per family of calls, through which the family files reach
 * it, the shape hiredis gives its transports (redisContextFuncs).
 *
 * The public calls of floodgate.h live in one file per family: client.c
 * (rate limits), bloom.c, distinct.c, lock.c and policy.c. Each checks
 * what it is given exactly as the module would, the same way whatever the
 * backend, and then calls through its family's table in the client's
 * backend (client.h's fg_client_family); none of them knows which backend
 * it is. A backend is an fg_backend in a file of its own: backend_mem.c
 * (mem:, its tables over the in-process mem_*.c) and backend_remote.c
 * (redis:, unix:, redis+cluster:, the tables of remote_*.c, over the
 * module's commands). backends.c picks one by the URL.
 *
 * At fg_open the backend opens what its families share (fg_shared_ops: a
 * remote client's connections), then one state per family, in the order
 * of fg_family; fg_close closes them in the reverse order, the shared part
 * last. Every operation may be called from any number of threads at once,
 * except close.
 *
 * Types only: no file of code goes with this header.
 */
#ifndef FG_BACKEND_H
#define FG_BACKEND_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "floodgate.h"
#include "limit_args.h"
#include "policy.h"
#include "stats.h"
#include "text.h"
#include "uv.h"

/* The families of calls, in the order a client opens their states. */
typedef enum fg_family {
    FG_FAMILY_LIMITS,   /* fg_check, fg_peek, fg_check_batch, fg_reset, fg_inspect */
    FG_FAMILY_BLOOM,    /* fg_bf_* */
    FG_FAMILY_DISTINCT, /* fg_distinct_* */
    FG_FAMILY_LOCKS,    /* fg_lock, fg_semaphore_*, fg_*_multi, fg_extend */
    FG_FAMILY_POLICIES, /* fg_policy_* */
    FG_FAMILIES
} fg_family;

/* What a backend opens its states with: fg_open's URL and the client's
 * options and counters (both live as long as the client), and what the
 * families share (NULL until the backend's open has made it). */
typedef struct fg_backend_args {
    const char *url;
    const fg_options *opts;
    fg_counters *counters;
    void *shared;
} fg_backend_args;

/* The start of every family's table: the open and close of its state of
 * one client, made at fg_open (NULL when out of memory) and freed at
 * fg_close. */
#define FG_FAMILY_STATE                                                                            \
    void *(*open)(const fg_backend_args *a);                                                       \
    void (*close)(void *s)

/* Rate limits, of a limit checked and converted (ml; limit_args.c), at
 * the client's time `now`: a check or peek (fg_check, fg_peek); the
 * requests of a batch whose code is FG_CODE_OK (valid >= 1 of them, mls[i]
 * converted), each answered in its code and result, the call failing only
 * when none could be; FG.RESET of a key (*existed: whether it had a
 * state); FG.INSPECT's text of a key's state ("" when none; fg_inspect
 * refuses a truncated one). */
typedef struct fg_limit_ops {
    FG_FAMILY_STATE;
    fg_code (*check)(void *s, const char *key, const fg_limit *l, const fg_limiter *ml,
                     int64_t cost, bool peek, int64_t now, fg_result *out, fg_error *err);
    fg_code (*batch)(void *s, fg_request *reqs, size_t n, const fg_limiter *mls, size_t valid,
                     int64_t now, fg_error *err);
    fg_code (*reset)(void *s, const char *key, bool *existed, fg_error *err);
    fg_code (*inspect)(void *s, const char *key, fg_text *t, fg_error *err);
} fg_limit_ops;

/* Bloom filters: BF.RESERVE, BF.ADD, BF.MADD, BF.EXISTS, BF.MEXISTS and
 * BF.CARD of checked arguments (n >= 1 items, options checked). */
typedef struct fg_bloom_ops {
    FG_FAMILY_STATE;
    fg_code (*reserve)(void *s, const char *key, const fg_bloom_options *o, fg_error *err);
    fg_code (*add)(void *s, const char *key, const void *item, size_t len, bool *added,
                   fg_error *err);
    fg_code (*madd)(void *s, const char *key, const void *const *items, const size_t *lens,
                    size_t n, bool *added, fg_error *err);
    fg_code (*exists)(void *s, const char *key, const void *item, size_t len, bool *exists,
                      fg_error *err);
    fg_code (*mexists)(void *s, const char *key, const void *const *items, const size_t *lens,
                       size_t n, bool *exists, fg_error *err);
    fg_code (*card)(void *s, const char *key, int64_t *card, fg_error *err);
} fg_bloom_ops;

/* Unique counters: FG.UVCREATE, FG.UVADD (at_us < 0) or FG.UVADDAT, and
 * the union of nkeys >= 1 keys over a window, given as the caller gave it
 * (w) and as FG.UVCOUNT converts it (range): its estimated count (count
 * not NULL) or its HLL string (FG.UVEXPORT). */
typedef struct fg_distinct_ops {
    FG_FAMILY_STATE;
    fg_code (*create)(void *s, const char *key, const fg_distinct_options *o, fg_error *err);
    fg_code (*add)(void *s, const char *key, const void *const *items, const size_t *lens, size_t n,
                   int64_t at_us, bool *changed, fg_error *err);
    fg_code (*union_of)(void *s, const char *const *keys, size_t nkeys, const fg_window *w,
                        const fg_uv_window *range, int64_t *count, uint8_t *hll, fg_error *err);
} fg_distinct_ops;

/* Locks, semaphores and multi-key locks of checked arguments: a key (or 1
 * to 64 keys), an owner, a result where there is one, options checked. */
typedef struct fg_lock_ops {
    FG_FAMILY_STATE;
    fg_code (*lock)(void *s, const char *key, const char *owner, const fg_lock_options *o,
                    fg_lock_grant *out, fg_error *err);
    fg_code (*unlock)(void *s, const char *key, const char *owner, int64_t *holds_left,
                      fg_error *err);
    fg_code (*extend)(void *s, const char *key, const char *owner, int64_t lease_ms, bool *extended,
                      fg_error *err);
    fg_code (*semaphore_acquire)(void *s, const char *key, int64_t capacity, const char *owner,
                                 int64_t permits, const fg_lock_options *o, fg_lock_grant *out,
                                 fg_error *err);
    fg_code (*semaphore_release)(void *s, const char *key, const char *owner, int64_t permits,
                                 int64_t *permits_left, fg_error *err);
    fg_code (*lock_multi)(void *s, const char *const *keys, size_t count, const char *owner,
                          const fg_lock_options *o, fg_lock_grant *out, fg_error *err);
    fg_code (*unlock_multi)(void *s, const char *const *keys, size_t count, const char *owner,
                            int64_t *released, fg_error *err);
} fg_lock_ops;

/* The policy loader of a client (fg_set_policy_loader) and its lock: every
 * backend's policy state keeps one, which policy.c sets and asks. */
typedef struct fg_loader {
    pthread_mutex_t lock;
    fg_policy_loader fn;
    void *arg;
} fg_loader;

/* One FG.CHECK: fg_policy_check, or fg_policy_acquire, which waits up to
 * timeout_ms. */
typedef struct fg_policy_request {
    const char *name, *key, *identity;
    int64_t cost;
    bool waits;
    int64_t timeout_ms; /* WAIT's, when waits */
} fg_policy_request;

/* Named policies, of a checked name: FG.POLICY SET (a checked definition,
 * and the core's rules of it), DEL (*had: whether there was one), ALLOW or
 * DENY of n >= 1 items, FG.CHECK of a checked request, GET and LIST (the
 * names from malloc, for fg_policy_names_free). forget: fg_reset of a key
 * that holds a policy's state, whether it had a live one (a server's
 * FG.RESET forgets it itself). loader: the state's fg_loader. */
typedef struct fg_policy_ops {
    FG_FAMILY_STATE;
    fg_code (*set)(void *s, const char *name, const fg_policy_def *def,
                   const fg_policy_rules *rules, fg_error *err);
    fg_code (*del)(void *s, const char *name, bool *had, fg_error *err);
    fg_code (*list_add)(void *s, const char *name, bool deny, const void *const *items,
                        const size_t *lens, size_t n, int64_t *added, fg_error *err);
    fg_code (*check)(void *s, const fg_policy_request *q, fg_policy_result *out, fg_error *err);
    fg_code (*get)(void *s, const char *name, fg_policy_info *out, fg_error *err);
    fg_code (*names)(void *s, char ***names, size_t *count, fg_error *err);
    bool (*forget)(void *s, const char *key);
    fg_loader *(*loader)(void *s);
} fg_policy_ops;

/* What the families of a client share (a remote client's connections):
 * opened before their states (NULL when err says why not), closed after
 * them; connect is fg_open's first contact, which fails on a configuration
 * error only. */
typedef struct fg_shared_ops {
    void *(*open)(const fg_backend_args *a, fg_error *err);
    fg_code (*connect)(void *shared, fg_error *err);
    void (*close)(void *shared);
} fg_shared_ops;

/* A backend: what its families share (NULL: nothing), and a table per
 * family, in the order of fg_family. A family whose table is NULL is one
 * the backend does not have: its calls answer FG_CODE_UNSUPPORTED with
 * the backend's message in `without`, which says what to use instead. */
typedef struct fg_backend {
    const fg_shared_ops *shared;
    const char *without[FG_FAMILIES];
    const fg_limit_ops *limits;
    const fg_bloom_ops *bloom;
    const fg_distinct_ops *distinct;
    const fg_lock_ops *locks;
    const fg_policy_ops *policies;
} fg_backend;

#endif
