/*
 * bloom.c - Bloom filters (floodgate.h, "bloom filters"): fg_bf_* on every
 * backend, and the standalone fg_filter.
 *
 * Every call first checks what it is given the same way on every backend,
 * with the module's messages: a client and a key, items, and options
 * (options_check). Bad input is thus FG_CODE_INVALID without a
 * round trip, and a server only ever sees commands it accepts. Then it
 * calls through the Bloom table of the client's backend (backend.h): the
 * client's table on mem: (mem_bloom.c), BF.* commands on a server or
 * cluster (remote_bloom.c).
 *
 * fg_filter is a core filter with memory from malloc: no key, no lock. It
 * is made as mem:'s filters and policy lists are (filter.h, here).
 */
#include <stdlib.h>

#include "backend.h"
#include "client.h"
#include "error.h"
#include "filter.h"
#include "messages.h"
#include "params.h"

const fg_bloom_allocator fg_bf_heap = {{realloc, free}, calloc};

/* In-process filters (filter.h). */

/* Checked options leave fg_bloom_init two reasons to refuse, told apart
 * as the module does: the first level's bits would exceed the core's
 * bound (its geometry cannot be had), or the memory could not be. */
fg_code fg_bloom_create(fg_bloom *f, const fg_bloom_options *o, const fg_bloom_allocator *a,
                        fg_error *err) {
    uint32_t expansion = (uint32_t)o->expansion;
    if (fg_bloom_init(f, o->error_rate, (uint64_t)o->capacity, expansion, a) == FG_OK)
        return FG_CODE_OK;
    uint64_t bytes;
    if (fg_bloom_first_level_bytes(o->error_rate, (uint64_t)o->capacity, expansion, &bytes) != FG_OK)
        return fg_set_error(err, FG_CODE_INVALID, FG_ERR_BF_TOO_BIG);
    return fg_set_error(err, FG_CODE_NOMEM, FG_ERR_BF_NO_FILTER);
}

/* A level that cannot be had is the module's "problem inserting", whether
 * the chain is at its last level or memory ran out. */
fg_code fg_bloom_add_error(fg_bloom_add_result r, fg_error *err) {
    if (r == FG_BLOOM_FULL) return fg_set_error(err, FG_CODE_INVALID, FG_ERR_BF_FULL);
    return fg_set_error(err, FG_CODE_INVALID, FG_ERR_BF_NO_LEVEL);
}

struct fg_filter {
    fg_bloom bloom;
};

void fg_bloom_options_init(fg_bloom_options *opts) {
    opts->error_rate = FG_BF_DEFAULT_ERROR;
    opts->capacity = FG_BF_DEFAULT_CAPACITY;
    opts->expansion = FG_BF_DEFAULT_EXPANSION;
}

/* BF.RESERVE accepts o's values (the module's checks in its order); a
 * filter too big is refused later, by fg_bloom_create. */
static fg_code options_check(const fg_bloom_options *o, fg_error *err) {
    char msg[160];
    if (!fg_param_bloom_error(o->error_rate, msg, sizeof(msg)) ||
        !fg_param_bloom_capacity(o->capacity, msg, sizeof(msg)))
        return fg_set_error(err, FG_CODE_INVALID, "%s", msg);
    if (o->expansion < 0 || o->expansion > FG_BLOOM_MAX_EXPANSION)
        return fg_set_error(err, FG_CODE_INVALID, FG_ERR_BF_BAD_EXPANSION);
    return FG_CODE_OK;
}

/* opts (NULL: the defaults) into *o, checked. */
static fg_code take_options(const fg_bloom_options *opts, fg_bloom_options *o, fg_error *err) {
    if (opts != NULL)
        *o = *opts;
    else
        fg_bloom_options_init(o);
    return options_check(o, err);
}

/* --------------------------------------------------------------- calls */

/* The check every call starts with, a client and a key, and the client's
 * Bloom filters; FG_CODE_UNSUPPORTED when its backend has none. */
static fg_code begin(fg_client *c, const char *key, fg_family_ref *bf, fg_error *err) {
    fg_code rc = fg_require_key(c, key, err);
    return rc != FG_CODE_OK ? rc : fg_client_family(c, FG_FAMILY_BLOOM, bf, err);
}

fg_code fg_bf_reserve(fg_client *c, const char *key, const fg_bloom_options *opts, fg_error *err) {
    fg_bloom_options o;
    fg_family_ref bf;
    fg_code rc = begin(c, key, &bf, err);
    if (rc == FG_CODE_OK) rc = take_options(opts, &o, err);
    return rc != FG_CODE_OK ? rc : bf.ops.bloom->reserve(bf.s, key, &o, err);
}

fg_code fg_bf_add(fg_client *c, const char *key, const void *item, size_t len, bool *added,
                  fg_error *err) {
    fg_family_ref bf;
    fg_code rc = begin(c, key, &bf, err);
    if (rc == FG_CODE_OK) rc = fg_require_items(&item, &len, 1, "bf.add", err);
    return rc != FG_CODE_OK ? rc : bf.ops.bloom->add(bf.s, key, item, len, added, err);
}

fg_code fg_bf_exists(fg_client *c, const char *key, const void *item, size_t len, bool *exists,
                     fg_error *err) {
    fg_family_ref bf;
    fg_code rc = begin(c, key, &bf, err);
    if (rc == FG_CODE_OK) rc = fg_require_items(&item, &len, 1, "bf.exists", err);
    if (rc == FG_CODE_OK) rc = fg_require_result(exists, err);
    return rc != FG_CODE_OK ? rc : bf.ops.bloom->exists(bf.s, key, item, len, exists, err);
}

fg_code fg_bf_madd(fg_client *c, const char *key, const void *const *items, const size_t *lens,
                   size_t n, bool *added, fg_error *err) {
    fg_family_ref bf;
    fg_code rc = begin(c, key, &bf, err);
    if (rc == FG_CODE_OK) rc = fg_require_items(items, lens, n, "bf.madd", err);
    return rc != FG_CODE_OK ? rc : bf.ops.bloom->madd(bf.s, key, items, lens, n, added, err);
}

fg_code fg_bf_mexists(fg_client *c, const char *key, const void *const *items, const size_t *lens,
                      size_t n, bool *exists, fg_error *err) {
    fg_family_ref bf;
    fg_code rc = begin(c, key, &bf, err);
    if (rc == FG_CODE_OK) rc = fg_require_items(items, lens, n, "bf.mexists", err);
    if (rc == FG_CODE_OK) rc = fg_require_result(exists, err);
    return rc != FG_CODE_OK ? rc : bf.ops.bloom->mexists(bf.s, key, items, lens, n, exists, err);
}

fg_code fg_bf_card(fg_client *c, const char *key, int64_t *card, fg_error *err) {
    fg_family_ref bf;
    fg_code rc = begin(c, key, &bf, err);
    if (rc == FG_CODE_OK) rc = fg_require_result(card, err);
    return rc != FG_CODE_OK ? rc : bf.ops.bloom->card(bf.s, key, card, err);
}

/* ---------------------------------------------------------- fg_filter */

fg_filter *fg_filter_new(const fg_bloom_options *opts, fg_error *err) {
    fg_bloom_options o;
    if (take_options(opts, &o, err) != FG_CODE_OK) return NULL;
    fg_filter *f = malloc(sizeof(*f));
    if (f == NULL) {
        fg_set_error(err, FG_CODE_NOMEM, "out of memory");
        return NULL;
    }
    if (fg_bloom_create(&f->bloom, &o, &fg_bf_heap, err) != FG_CODE_OK) {
        free(f);
        return NULL;
    }
    return f;
}

int fg_filter_add(fg_filter *f, const void *item, size_t len) {
    fg_bloom_add_result r = fg_bloom_add(&f->bloom, fg_bf_item_hash(item, len), &fg_bf_heap);
    return r == FG_BLOOM_ADDED ? 1 : r == FG_BLOOM_PRESENT ? 0 : -1;
}

bool fg_filter_contains(const fg_filter *f, const void *item, size_t len) {
    return fg_bloom_contains(&f->bloom, fg_bf_item_hash(item, len));
}

int64_t fg_filter_cardinality(const fg_filter *f) {
    return (int64_t)fg_bloom_cardinality(&f->bloom);
}

size_t fg_filter_bytes(const fg_filter *f) {
    return (size_t)fg_bloom_bytes(&f->bloom);
}

void fg_filter_free(fg_filter *f) {
    if (f == NULL) return;
    fg_bloom_free(&f->bloom, &fg_bf_heap);
    free(f);
}
