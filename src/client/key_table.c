/*
 * key_table.c - the in-process backends' tables of keys (key_table.h).
 */
#include "key_table.h"

#include <stdlib.h>
#include <string.h>

#define MIN_BUCKETS 8

/* ----------------------------------------------------------------- table */

fg_key_node *fg_key_table_find(const fg_key_table *t, uint64_t hash, const void *key, size_t len) {
    if (t->nbuckets == 0) return NULL;
    for (fg_key_node *n = t->buckets[hash & (t->nbuckets - 1)]; n != NULL; n = n->next)
        if (n->hash == hash && n->keylen == len && (len == 0 || memcmp(n->key, key, len) == 0))
            return n;
    return NULL;
}

/* Moves the nodes to n buckets; false, with nothing changed, when they
 * cannot be had. */
static bool rehash(fg_key_table *t, size_t n) {
    fg_key_node **fresh = calloc(n, sizeof(*fresh));
    if (fresh == NULL) return false;
    for (size_t b = 0; b < t->nbuckets; b++)
        for (fg_key_node *node = t->buckets[b], *next; node != NULL; node = next) {
            next = node->next;
            node->next = fresh[node->hash & (n - 1)];
            fresh[node->hash & (n - 1)] = node;
        }
    free(t->buckets);
    t->buckets = fresh;
    t->nbuckets = n;
    return true;
}

/* Doubles the buckets once the table holds as many nodes. */
static bool make_room(fg_key_table *t) {
    if (t->count < t->nbuckets) return true;
    return rehash(t, t->nbuckets ? t->nbuckets * 2 : MIN_BUCKETS);
}

bool fg_key_table_insert(fg_key_table *t, fg_key_node *n) {
    if (!make_room(t)) return false;
    fg_key_node **head = &t->buckets[n->hash & (t->nbuckets - 1)];
    n->next = *head;
    *head = n;
    t->count++;
    return true;
}

/* Where the link to n is: its bucket's head or its predecessor's next. */
static fg_key_node **link_to(const fg_key_table *t, const fg_key_node *n) {
    fg_key_node **at = &t->buckets[n->hash & (t->nbuckets - 1)];
    while (*at != n)
        at = &(*at)->next;
    return at;
}

void fg_key_table_remove(fg_key_table *t, fg_key_node *n) {
    *link_to(t, n) = n->next;
    t->count--;
    fg_key_table_shrink(t);
}

void fg_key_table_shrink(fg_key_table *t) {
    size_t n = t->nbuckets;
    while (t->count * 8 < n && n > MIN_BUCKETS)
        n /= 2;
    /* A failed rehash only leaves the table larger than it needs. */
    if (n != t->nbuckets) rehash(t, n);
}

void fg_key_table_clear(fg_key_table *t, void (*free_node)(fg_key_node *n)) {
    for (size_t b = 0; b < t->nbuckets; b++)
        for (fg_key_node *n = t->buckets[b], *next; n != NULL; n = next) {
            next = n->next;
            free_node(n);
        }
    free(t->buckets);
    memset(t, 0, sizeof(*t));
}

void fg_key_shard_init(fg_key_shard *sh) {
    memset(sh, 0, sizeof(*sh));
    pthread_mutex_init(&sh->mu, NULL);
}

void fg_key_shard_destroy(fg_key_shard *sh, void (*free_node)(fg_key_node *n)) {
    fg_key_table_clear(&sh->table, free_node);
    pthread_mutex_destroy(&sh->mu);
}

/* ---------------------------------------------------------------- cursor */

/* The link to the node at c: NULL-valued at the end of its bucket. */
static fg_key_node **cursor_link(const fg_key_table *t, fg_key_cursor *c) {
    if (c->nbuckets != t->nbuckets) *c = (fg_key_cursor){t->nbuckets, 0, 0};
    if (t->nbuckets == 0) return NULL;
    fg_key_node **at = &t->buckets[c->bucket];
    for (size_t i = 0; i < c->passed && *at != NULL; i++)
        at = &(*at)->next;
    return at;
}

fg_key_node *fg_key_cursor_node(const fg_key_table *t, fg_key_cursor *c) {
    fg_key_node **at = cursor_link(t, c);
    return at == NULL ? NULL : *at;
}

fg_key_node *fg_key_cursor_remove(fg_key_table *t, fg_key_cursor *c) {
    fg_key_node **at = cursor_link(t, c), *n = *at;
    *at = n->next;
    t->count--;
    return n;
}

bool fg_key_cursor_next_bucket(const fg_key_table *t, fg_key_cursor *c) {
    if (c->nbuckets != t->nbuckets || t->nbuckets == 0) {
        *c = (fg_key_cursor){t->nbuckets, 0, 0};
        return true;
    }
    c->bucket = (c->bucket + 1) & (t->nbuckets - 1);
    c->passed = 0;
    return c->bucket == 0;
}
