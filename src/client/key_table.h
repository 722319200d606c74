/*
 * key_table.h - the in-process backends' tables of keys (internal).
 *
 * A table is a chained hash table whose buckets double when it holds as
 * many entries, so chains stay short. The nodes are intrusive: an entry
 * starts with its fg_key_node and keeps its key's bytes itself, so a lookup
 * touches one allocation per entry and the table owns nothing but its
 * buckets. A shard is a table and the mutex that guards it: the backends
 * pick a shard by fg_key_hash and hold its mutex around every call.
 *
 * A cursor walks a table bucket by bucket and may remove the node it is
 * at, for sweeps that examine a few entries at a time (see the cursor
 * functions below).
 */
#ifndef FG_KEY_TABLE_H
#define FG_KEY_TABLE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifndef XXH_INLINE_ALL
#define XXH_INLINE_ALL /* compiled in: no libxxhash at run time */
#endif
#include <xxhash.h>

typedef struct fg_key_node {
    struct fg_key_node *next; /* in its bucket */
    uint64_t hash;
    size_t keylen;
    const void *key; /* the entry's own copy */
} fg_key_node;

typedef struct fg_key_table {
    fg_key_node **buckets; /* NULL while empty */
    size_t nbuckets;       /* 0 or a power of two */
    size_t count;
} fg_key_table;

typedef struct fg_key_shard {
    pthread_mutex_t mu;
    fg_key_table table;
} fg_key_shard;

/* The hash of a key (binary-safe; an empty key may be NULL) in every table
 * of keys of the client: the key tables, whose shards take its top bits and
 * buckets its low bits, the rate limits' store, the leases' slots and the
 * denial cache. A table whose keys come from outside may seed it per
 * instance, so that keys that collide in one process do not in the next
 * (mem_store.c does); the others use seed 0.
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

/* The node of the key, or NULL. */
fg_key_node *fg_key_table_find(const fg_key_table *t, uint64_t hash, const void *key, size_t len);

/* Links n (hash, keylen and key set; its key not in the table yet); false,
 * with nothing changed, when memory for more buckets cannot be had. */
bool fg_key_table_insert(fg_key_table *t, fg_key_node *n);

/* Unlinks n, which is in the table, and shrinks the table (see below). */
void fg_key_table_remove(fg_key_table *t, fg_key_node *n);

/* Halves the buckets until the table holds at least an eighth as many
 * nodes (never below the minimum); best effort. */
void fg_key_table_shrink(fg_key_table *t);

/* Frees every node with free_node, then the buckets; the table is empty. */
void fg_key_table_clear(fg_key_table *t, void (*free_node)(fg_key_node *n));

void fg_key_shard_init(fg_key_shard *sh);
void fg_key_shard_destroy(fg_key_shard *sh, void (*free_node)(fg_key_node *n));

/* ---------------------------------------------------------------- cursor */

/* A place in a table: the nodes of one bucket after the first `passed`. A
 * walk takes the node at the cursor, then passes it or removes it, and at
 * the end of a bucket moves on to the next one:
 *
 *     for (fg_key_node *n; (n = fg_key_cursor_node(t, &c)) != NULL;)
 *         if (expired(n)) drop(fg_key_cursor_remove(t, &c));
 *         else fg_key_cursor_pass(&c);
 *     fg_key_cursor_next_bucket(t, &c);
 *
 * A cursor may be kept between walks while the table changes: a node
 * inserted or removed in its bucket meanwhile may make it see a node twice
 * or miss one, and once the table has been resized it starts over at the
 * first bucket. Removing through the cursor leaves the buckets as they are,
 * so that the walk keeps its place: fg_key_table_shrink once it is over. A
 * zeroed cursor is at the first bucket. */
typedef struct fg_key_cursor {
    size_t nbuckets; /* of the table it walks: another size starts over */
    size_t bucket;
    size_t passed; /* nodes of the bucket walked past */
} fg_key_cursor;

/* The node at c, or NULL at the end of its bucket (or in an empty table). */
fg_key_node *fg_key_cursor_node(const fg_key_table *t, fg_key_cursor *c);

/* Walks past the node at c, keeping it. */
static inline void fg_key_cursor_pass(fg_key_cursor *c) { c->passed++; }

/* Unlinks the node at c and returns it; the next node takes its place. */
fg_key_node *fg_key_cursor_remove(fg_key_table *t, fg_key_cursor *c);

/* Moves c to the start of the next bucket; true when it wrapped around to
 * the first one, so that a walk begun there has seen every bucket. */
bool fg_key_cursor_next_bucket(const fg_key_table *t, fg_key_cursor *c);

#endif
