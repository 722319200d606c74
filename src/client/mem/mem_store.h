/*
 * mem_store.h - the in-process backend of libfloodgate: the src/core
 * algorithms behind a thread-safe, sharded hash table with expiry of idle keys.
 *
 * It answers exactly what the Redis module answers for the same key, time and
 * request: one family per key (FG.TOKEN, FG.LEAKY, FG.GCRA and CL.THROTTLE all
 * use FG_LIMITER_BUCKET and share its state), denials, peeks and cost 0 change
 * nothing, and a key lives until its state is empty again (the module's TTL),
 * after which it is absent. Times are arguments, in microseconds since the
 * Unix epoch; the store never reads a clock and has no global state.
 *
 * Every function but fg_mem_store_new and fg_mem_store_free may be called from
 * any number of threads at once. Keys are binary-safe byte strings, copied.
 */
#ifndef FG_MEM_STORE_H
#define FG_MEM_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "limiter.h"

typedef struct fg_mem_store fg_mem_store;

typedef enum fg_mem_status {
    FG_MEM_OK,
    FG_MEM_WRONGTYPE, /* the key holds a state of another family */
    FG_MEM_INVALID,   /* parameters, cost or time out of range (core FG_EINVAL) */
    FG_MEM_OVERFLOW,  /* the arithmetic would overflow 64 bits (core FG_EOVERFLOW) */
    FG_MEM_NOMEM,     /* memory for the key or its state could not be had */
} fg_mem_status;

/* A store of `shards` independently locked shards (0: a default of 64),
 * rounded up to a power of two, at most 65536. NULL when out of memory. */
fg_mem_store *fg_mem_store_new(unsigned shards);

/* Frees the store and every key. Not concurrent with any other call. */
void fg_mem_store_free(fg_mem_store *s);

/* Decides whether `cost` units (>= 0) may be taken from `key` at `now_us`
 * under `lim`, and when they are admitted with cost > 0 and !peek, stores the
 * new state with its expiry (the moment the state is empty again). A peek or
 * cost 0 answers the same and writes nothing. An entry whose expiry is
 * <= now_us is absent (and dropped on the way).
 *
 * Only FG_MEM_OK fills *out. On any other status nothing was written. Errors
 * in the parameters win over FG_MEM_WRONGTYPE, as in the module (which parses
 * its arguments before it opens the key). */
fg_mem_status fg_mem_check(fg_mem_store *s, const void *key, size_t keylen,
                           const fg_limiter *lim, int64_t now_us, int64_t cost, bool peek,
                           fg_decision *out);

/* FG.RESET: deletes the key, whatever its family. True when a live key (expiry
 * > now_us) was removed; an expired entry is dropped too but counts as absent. */
bool fg_mem_reset(fg_mem_store *s, const void *key, size_t keylen, int64_t now_us);

/* A copy of a live key's state (what FG.INSPECT shows for a server). */
typedef struct fg_mem_view {
    fg_limiter_family family;
    int64_t expires_us;
    union {
        int64_t tat_ns; /* FG_LIMITER_BUCKET */
        fg_fixed_state fixed;
        fg_sliding_state sliding;
    } state;
} fg_mem_view;

/* Copies the state of `key` if it is live at now_us, and gives a sliding
 * log's entries to each_entry(ts, arg), oldest first (called under the
 * shard's lock: it must not call the store). False when absent or expired. */
bool fg_mem_inspect(fg_mem_store *s, const void *key, size_t keylen, int64_t now_us,
                    fg_mem_view *view, void (*each_entry)(int64_t ts_us, void *arg), void *arg);

/* Incremental sweep: examines at most `max_entries` entries, starting where the
 * previous sweep stopped and going at most once around the store, and frees
 * those whose expiry is <= now_us. Returns how many were removed. SIZE_MAX
 * sweeps the whole store. */
size_t fg_mem_expire(fg_mem_store *s, int64_t now_us, size_t max_entries);

/* Entries held: live ones and expired ones not swept yet. */
size_t fg_mem_size(fg_mem_store *s);

#endif
