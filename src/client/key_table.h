/*
 * key_table.h - the in-process backends' tables of keys (internal).
 *
 * A shard is a mutex and a chained hash table whose buckets double when it
 * holds as many entries, so chains stay short. The nodes are intrusive: an
 * entry starts with its fg_key_node and keeps its key's bytes itself, so a
 * lookup touches one allocation per entry and the table owns nothing but
 * its buckets. Each backend picks its shards by its own key hash and holds
 * a shard's mutex around every call into it.
 */
#ifndef FG_KEY_TABLE_H
#define FG_KEY_TABLE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct fg_key_node {
    struct fg_key_node *next; /* in its bucket */
    uint64_t hash;
    size_t keylen;
    const char *key; /* the entry's own copy */
} fg_key_node;

typedef struct fg_key_shard {
    pthread_mutex_t mu;
    fg_key_node **buckets; /* NULL while empty */
    size_t nbuckets;       /* 0 or a power of two */
    size_t count;
} fg_key_shard;

void fg_key_shard_init(fg_key_shard *sh);

/* Frees every node with free_node, then the buckets and the mutex. */
void fg_key_shard_destroy(fg_key_shard *sh, void (*free_node)(fg_key_node *n));

/* The node of the key, or NULL. */
fg_key_node *fg_key_shard_find(const fg_key_shard *sh, uint64_t hash, const char *key,
                               size_t len);

/* Links n (hash, keylen and key set; its key not in the shard yet); false,
 * with nothing changed, when memory for more buckets cannot be had. */
bool fg_key_shard_insert(fg_key_shard *sh, fg_key_node *n);

#endif
