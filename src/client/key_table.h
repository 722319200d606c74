/*
 * key_table.h - the in-process backends' table of keys (internal), the one
 * hash table of the client, as Redis has one dict.c.
 *
 * Open addressing with linear probing over slots {hash, entry *}: a probe
 * compares hashes in the slots and touches no entry but the one it finds,
 * which matters when every check misses the cache (the rate limits' store
 * with a million keys). The table grows by rehash at 3/4 load and shrinks
 * below 1/8 (see fg_key_table_shrink); a removal shifts the rest of its
 * cluster back instead of leaving a tombstone, so probes stay short after
 * heavy churn.
 *
 * An entry is the user's own allocation, with no node in it: the table
 * knows where an entry keeps its key's length (a uint32_t) and its bytes
 * from the offsets it was made with (FG_KEY_TABLE), so the rate limits'
 * entries stay 37 bytes and the key. The table owns its slots, never the
 * entries; moving slots leaves the entries where they are, so a pointer to
 * an entry stays good until it is removed.
 *
 * A shard is a table and the mutex that guards it: the backends pick a
 * shard by the top bits of fg_key_hash and hold its mutex around every
 * call; the slot comes from the low bits. The store (mem_store.c) shards
 * its tables itself, under spinlocks.
 */
#ifndef FG_KEY_TABLE_H
#define FG_KEY_TABLE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifndef XXH_INLINE_ALL
#define XXH_INLINE_ALL /* compiled in: no libxxhash at run time */
#endif
#include <xxhash.h>

typedef struct fg_key_slot {
    uint64_t hash;
    void *entry; /* NULL: an empty slot */
} fg_key_slot;

typedef struct fg_key_table {
    fg_key_slot *slots; /* NULL while cap == 0 */
    size_t cap;         /* 0 or a power of two >= 8 */
    size_t count;
    size_t cursor;      /* where the next sweep starts */
    size_t swept;       /* slots the current round of sweeps has gone past */
    uint32_t keylen_at; /* where an entry keeps its key's length (uint32_t) */
    uint32_t key_at;    /* and its key's bytes */
} fg_key_table;

/* An empty table of entries of `type`, whose key's length is the uint32_t
 * member `keylen` and whose bytes the member `key`. */
#define FG_KEY_TABLE(type, keylen, key) \
    ((fg_key_table){.keylen_at = offsetof(type, keylen), .key_at = offsetof(type, key)})

typedef struct fg_key_shard {
    pthread_mutex_t mu;
    fg_key_table table;
} fg_key_shard;

/* The hash of a key (binary-safe; an empty key may be NULL) in every table
 * of keys of the client: the key tables, whose shards take its top bits and
 * slots its low bits, the leases' slots and the denial cache. A table whose
 * keys come from outside may seed it per instance, so that keys that
 * collide in one process do not in the next (mem_store.c does); the others
 * use seed 0.
 *
 * XXH3 (libxxhash-dev), compiled in and inlined: a check of the store on a
 * hot key costs about 300 instructions, of which the hash of a short key
 * takes about 30, and a call would add to it. */
static inline uint64_t fg_key_hash_seeded(const void *key, size_t len, uint64_t seed) {
    return XXH3_64bits_withSeed(len > 0 ? key : "", len, seed);
}

static inline uint64_t fg_key_hash(const void *key, size_t len) {
    return fg_key_hash_seeded(key, len, 0);
}

/* The key of an entry of t: its length and its bytes. */
static inline uint32_t fg_key_len(const fg_key_table *t, const void *entry) {
    return *(const uint32_t *)((const char *)entry + t->keylen_at);
}

static inline const void *fg_key_bytes(const fg_key_table *t, const void *entry) {
    return (const char *)entry + t->key_at;
}

/* The entry of the key, or NULL. Inline: it is most of a check of the
 * store. */
static inline void *fg_key_table_find(const fg_key_table *t, uint64_t hash, const void *key,
                                      size_t len) {
    if (t->cap == 0) return NULL;
    size_t mask = t->cap - 1;
    for (size_t i = hash & mask;; i = (i + 1) & mask) {
        const fg_key_slot *sl = &t->slots[i];
        if (sl->entry == NULL) return NULL;
        if (sl->hash == hash && fg_key_len(t, sl->entry) == len &&
            (len == 0 || memcmp(fg_key_bytes(t, sl->entry), key, len) == 0))
            return sl->entry;
    }
}

/* A new entry of `size` bytes (zeroed) followed by the key's, with the key
 * set where t looks for it; NULL when memory cannot be had or the key is
 * longer than 4 GiB. */
void *fg_key_entry_new(const fg_key_table *t, size_t size, const void *key, size_t len);

/* Adds an entry whose key is not in the table yet, under its key's hash;
 * false, with nothing changed, when memory for more slots cannot be had. */
bool fg_key_table_insert(fg_key_table *t, uint64_t hash, void *entry);

/* Takes out an entry that is in the table under hash (the caller frees it).
 * The table keeps its size: fg_key_table_shrink when the removals are over. */
void fg_key_table_remove(fg_key_table *t, uint64_t hash, const void *entry);

/* Gives memory back once the table is less than 1/8 full: to a table at
 * most half full, never below 8 slots (an empty table that is used again
 * does not allocate them again; fg_key_table_clear frees them). Best
 * effort. */
void fg_key_table_shrink(fg_key_table *t);

/* Frees every entry with free_entry, then the slots; the table is empty. */
void fg_key_table_clear(fg_key_table *t, void (*free_entry)(void *entry));

/* Sweeps from where the last sweep stopped, for tables whose entries go
 * idle: gives each entry it meets to drop(entry, arg), which frees the
 * entry and returns true when it is to go, false when it stays, until
 * *budget entries were met (it counts them down) or the sweep is done,
 * then shrinks the table. Done is either of:
 *   - this sweep went all the way round the table: every entry was judged
 *     now (a sweep that resumes half way round must not trust the entries
 *     an earlier one judged at an earlier time);
 *   - the round begun by earlier sweeps came full circle: small budgets
 *     make progress across calls.
 * A resize starts a new round from the first slot. */
bool fg_key_table_sweep(fg_key_table *t, size_t *budget, bool (*drop)(void *entry, void *arg),
                        void *arg);

void fg_key_shard_init(fg_key_shard *sh, fg_key_table empty);
void fg_key_shard_destroy(fg_key_shard *sh, void (*free_entry)(void *entry));

#endif
