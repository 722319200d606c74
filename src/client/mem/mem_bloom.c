/*
 * mem_bloom.c - the Bloom filters of a mem: client: a table of core filters
 * (src/core/bloom.c) that answers as the module's BF.* commands do.
 *
 * The table has SHARDS shards (key_table.h), each a mutex and a table of
 * entries (the key's bytes and its filter), picked by the top bits of the
 * key's hash. A call holds its shard's mutex for the whole command, so that
 * BF.MADD and BF.MEXISTS are atomic as on a server, and a filter is never
 * read while a level is being added to it. Items are hashed under the
 * mutex too: that costs a critical section as long as the items are, and
 * saves a buffer of hashes per call.
 *
 * Filters are never dropped: a mem: filter lives until fg_close, as a
 * server's lives until DEL (which the API has no call for). BF.RESERVE
 * allocates the filter, however large, outside the mutex, and checks again
 * under it that no other thread created the key meanwhile.
 *
 * Unlike a server: Bloom keys are apart from the rate limits' and the
 * locks' keys (the same name in both is no WRONGTYPE), and nothing
 * outlives the client.
 */
#include "mem_bloom.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "key_table.h"
#include "messages.h"

#define SHARDS      16 /* a power of two */
#define SHARD_SHIFT 60 /* shard = hash >> SHARD_SHIFT */

static const char ERR_NOMEM[] = "out of memory";

typedef struct entry {
    fg_bloom bloom;
    uint32_t keylen;
    char key[];
} entry;

struct fg_mem_blooms {
    fg_key_shard shards[SHARDS];
};

/* --------------------------------------------------------------- table */

fg_mem_blooms *fg_mem_blooms_new(void) {
    fg_mem_blooms *m = calloc(1, sizeof(*m));
    if (m == NULL) return NULL;
    for (size_t i = 0; i < SHARDS; i++)
        fg_key_shard_init(&m->shards[i], FG_KEY_TABLE(entry, keylen, key));
    return m;
}

static void entry_free(void *p) {
    entry *e = p;
    fg_bloom_free(&e->bloom, &fg_bf_heap);
    free(e);
}

void fg_mem_blooms_free(fg_mem_blooms *m) {
    if (m == NULL) return;
    for (size_t i = 0; i < SHARDS; i++)
        fg_key_shard_destroy(&m->shards[i], entry_free);
    free(m);
}

/* A key's shard, locked, and its hash. */
static fg_key_shard *lock_shard(fg_mem_blooms *m, const char *key, size_t len, uint64_t *hash) {
    *hash = fg_key_hash(key, len);
    fg_key_shard *sh = &m->shards[*hash >> SHARD_SHIFT];
    pthread_mutex_lock(&sh->mu);
    return sh;
}

static entry *find(const fg_key_shard *sh, uint64_t hash, const char *key, size_t len) {
    return fg_key_table_find(&sh->table, hash, key, len);
}

/* ------------------------------------------------------------ commands */

fg_code fg_mem_bf_reserve(fg_mem_blooms *m, const char *key, const fg_bloom_options *o,
                          fg_error *err) {
    size_t len = strlen(key);
    uint64_t hash;
    fg_key_shard *sh = lock_shard(m, key, len, &hash);
    bool exists = find(sh, hash, key, len) != NULL;
    pthread_mutex_unlock(&sh->mu);
    if (exists) return fg_set_error(err, FG_CODE_INVALID, FG_ERR_BF_EXISTS);

    entry *e = fg_key_entry_new(&sh->table, sizeof(*e), key, len);
    if (e == NULL) return fg_set_error(err, FG_CODE_NOMEM, ERR_NOMEM);
    fg_code rc = fg_bloom_create(&e->bloom, o, &fg_bf_heap, err);
    if (rc != FG_CODE_OK) {
        free(e);
        return rc;
    }
    pthread_mutex_lock(&sh->mu);
    if (find(sh, hash, key, len) != NULL)
        rc = fg_set_error(err, FG_CODE_INVALID, FG_ERR_BF_EXISTS);
    else if (!fg_key_table_insert(&sh->table, hash, e))
        rc = fg_set_error(err, FG_CODE_NOMEM, ERR_NOMEM);
    pthread_mutex_unlock(&sh->mu);
    if (rc != FG_CODE_OK) entry_free(e);
    return rc;
}

/* The key's entry, created with the defaults when missing (shard locked). */
static fg_code find_or_create(fg_key_shard *sh, const char *key, size_t len, uint64_t hash, entry **out,
                              fg_error *err) {
    static const fg_bloom_options defaults = {FG_BF_DEFAULT_ERROR, FG_BF_DEFAULT_CAPACITY,
                                              FG_BF_DEFAULT_EXPANSION};
    if ((*out = find(sh, hash, key, len)) != NULL) return FG_CODE_OK;
    entry *e = fg_key_entry_new(&sh->table, sizeof(*e), key, len);
    if (e == NULL) return fg_set_error(err, FG_CODE_NOMEM, ERR_NOMEM);
    fg_code rc = fg_bloom_create(&e->bloom, &defaults, &fg_bf_heap, err);
    if (rc != FG_CODE_OK) {
        free(e);
        return rc;
    }
    if (!fg_key_table_insert(&sh->table, hash, e)) {
        entry_free(e);
        return fg_set_error(err, FG_CODE_NOMEM, ERR_NOMEM);
    }
    *out = e;
    return FG_CODE_OK;
}

fg_code fg_mem_bf_add(fg_mem_blooms *m, const char *key, const void *const *items,
                      const size_t *lens, size_t n, bool *added, fg_error *err) {
    size_t len = strlen(key);
    uint64_t hash;
    fg_key_shard *sh = lock_shard(m, key, len, &hash);
    entry *e;
    fg_code rc = find_or_create(sh, key, len, hash, &e, err);
    for (size_t i = 0; i < n && rc == FG_CODE_OK; i++) {
        fg_bloom_add_result r =
            fg_bloom_add(&e->bloom, fg_bf_item_hash(items[i], lens[i]), &fg_bf_heap);
        if (r < 0)
            rc = fg_bloom_add_error(r, err);
        else if (added != NULL)
            added[i] = r == FG_BLOOM_ADDED;
    }
    pthread_mutex_unlock(&sh->mu);
    return rc;
}

void fg_mem_bf_exists(fg_mem_blooms *m, const char *key, const void *const *items,
                      const size_t *lens, size_t n, bool *exists) {
    size_t len = strlen(key);
    uint64_t hash;
    fg_key_shard *sh = lock_shard(m, key, len, &hash);
    const entry *e = find(sh, hash, key, len);
    for (size_t i = 0; i < n; i++)
        exists[i] = e != NULL && fg_bloom_contains(&e->bloom, fg_bf_item_hash(items[i], lens[i]));
    pthread_mutex_unlock(&sh->mu);
}

int64_t fg_mem_bf_card(fg_mem_blooms *m, const char *key) {
    size_t len = strlen(key);
    uint64_t hash;
    fg_key_shard *sh = lock_shard(m, key, len, &hash);
    const entry *e = find(sh, hash, key, len);
    int64_t card = e != NULL ? (int64_t)fg_bloom_cardinality(&e->bloom) : 0;
    pthread_mutex_unlock(&sh->mu);
    return card;
}
