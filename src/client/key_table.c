/*
 * key_table.c - the in-process backends' tables of keys (key_table.h).
 */
#include "key_table.h"

#include <stdlib.h>
#include <string.h>

#define MIN_BUCKETS 8

void fg_key_shard_init(fg_key_shard *sh) {
    memset(sh, 0, sizeof(*sh));
    pthread_mutex_init(&sh->mu, NULL);
}

void fg_key_shard_destroy(fg_key_shard *sh, void (*free_node)(fg_key_node *n)) {
    for (size_t b = 0; b < sh->nbuckets; b++)
        for (fg_key_node *n = sh->buckets[b], *next; n != NULL; n = next) {
            next = n->next;
            free_node(n);
        }
    free(sh->buckets);
    pthread_mutex_destroy(&sh->mu);
}

fg_key_node *fg_key_shard_find(const fg_key_shard *sh, uint64_t hash, const char *key,
                               size_t len) {
    if (sh->nbuckets == 0) return NULL;
    for (fg_key_node *n = sh->buckets[hash & (sh->nbuckets - 1)]; n != NULL; n = n->next)
        if (n->hash == hash && n->keylen == len && memcmp(n->key, key, len) == 0) return n;
    return NULL;
}

/* Doubles the buckets once the shard holds as many nodes. */
static bool make_room(fg_key_shard *sh) {
    if (sh->count < sh->nbuckets) return true;
    size_t n = sh->nbuckets ? sh->nbuckets * 2 : MIN_BUCKETS;
    fg_key_node **fresh = calloc(n, sizeof(*fresh));
    if (fresh == NULL) return false;
    for (size_t b = 0; b < sh->nbuckets; b++)
        for (fg_key_node *node = sh->buckets[b], *next; node != NULL; node = next) {
            next = node->next;
            node->next = fresh[node->hash & (n - 1)];
            fresh[node->hash & (n - 1)] = node;
        }
    free(sh->buckets);
    sh->buckets = fresh;
    sh->nbuckets = n;
    return true;
}

bool fg_key_shard_insert(fg_key_shard *sh, fg_key_node *n) {
    if (!make_room(sh)) return false;
    fg_key_node **head = &sh->buckets[n->hash & (sh->nbuckets - 1)];
    n->next = *head;
    *head = n;
    sh->count++;
    return true;
}
