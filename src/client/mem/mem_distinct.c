/*
 * mem_distinct.c - the unique counters of a mem: client: a table of core
 * counters (src/core/uv.c) that answers as the module's FG.UV* commands do
 * (src/module/t_uv.c).
 *
 * distinct.c checks the arguments for every backend, as the module does.
 * What depends on a counter (a LAST window longer than its SPAN, a BETWEEN
 * edge off its grid) is checked here for mem: and by the server otherwise,
 * with the same messages.
 *
 * Time. Where a server reads its clock (FG.UVADD's second, LAST windows'
 * end, FG.UVADDAT's future limit) the table reads the client's, once per
 * call, before taking any lock. With an injected clock, tests can thus
 * place items and windows exactly; fed the same instants, the table and a
 * server hold the very same registers.
 *
 * The table has SHARDS shards (key_table.h), each a mutex and a table of
 * entries (the key's bytes and its counter), as mem_bloom.c. A call holds
 * its key's shard for the whole command. A count of several keys locks all
 * their shards, in ascending order (so two counts never wait on each other
 * in a cycle), and reads every key at one instant, as the server's
 * single-threaded command does; the price is that a count of many keys
 * stops adds to up to every shard while it scans (a scan is ~16K
 * registers per key).
 *
 * Counters are never dropped: a mem: counter lives until fg_close (the API
 * has no DEL), and its memory is bounded by the core (docs/uv.md, "Memory").
 * Unlike a server, counter keys are apart from the other kinds' keys: the
 * same name as a Bloom filter or a limit is no WRONGTYPE.
 */
#include "mem_distinct.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "key_table.h"
#include "monotonic.h"
#include "messages.h"

#define SHARDS      16 /* a power of two, at most 32 (a count's shard mask) */
#define SHARD_SHIFT 60 /* shard = hash >> SHARD_SHIFT */

static const fg_allocator heap = {realloc, free};

/* The server's clock is never out of range; an injected one may be. */
static const char ERR_CLOCK[] = FG_ERR_UV_CLOCK("client");
static const char ERR_NOMEM[] = "out of memory";

typedef struct entry {
    fg_uv uv;
    uint32_t keylen;
    char key[];
} entry;

struct fg_mem_distincts {
    int64_t (*clock_us)(void *arg);
    void *clock_arg;
    fg_key_shard shards[SHARDS];
};

/* ---------------------------------------------------------------- checks */

static fg_code refused(const char *msg, fg_error *err) {
    return fg_set_error(err, FG_CODE_INVALID, "%s", msg);
}

/* ----------------------------------------------------------------- table */

fg_mem_distincts *fg_mem_distincts_new(int64_t (*clock_us)(void *arg), void *clock_arg) {
    fg_mem_distincts *m = calloc(1, sizeof(*m));
    if (m == NULL) return NULL;
    m->clock_us = clock_us;
    m->clock_arg = clock_arg;
    for (size_t i = 0; i < SHARDS; i++)
        fg_key_shard_init(&m->shards[i], FG_KEY_TABLE(entry, keylen, key));
    return m;
}

static void entry_free(void *p) {
    entry *e = p;
    fg_uv_free(&e->uv, &heap);
    free(e);
}

void fg_mem_distincts_free(fg_mem_distincts *m) {
    if (m == NULL) return;
    for (size_t i = 0; i < SHARDS; i++)
        fg_key_shard_destroy(&m->shards[i], entry_free);
    free(m);
}

static int64_t clock_now_us(const fg_mem_distincts *m) {
    return fg_clock_us(m->clock_us, m->clock_arg);
}

static unsigned shard_of(uint64_t hash) {
    return (unsigned)(hash >> SHARD_SHIFT);
}

static entry *find(const fg_key_shard *sh, uint64_t hash, const char *key, size_t len) {
    return fg_key_table_find(&sh->table, hash, key, len);
}

/* A new counter for key in the shard (which must not hold the key), with
 * checked options; NULL when out of memory. */
static entry *insert(fg_key_shard *sh, const char *key, size_t len, uint64_t hash,
                     const fg_distinct_options *o) {
    entry *e = fg_key_entry_new(&sh->table, sizeof(*e), key, len);
    if (e == NULL) return NULL;
    /* Allocates nothing: the counter's memory comes with its first add. */
    fg_uv_init_tiers(&e->uv, o->span_s, o->minutes, o->hours, o->days, o->tzoffset_s);
    if (!fg_key_table_insert(&sh->table, hash, e)) {
        free(e);
        return NULL;
    }
    return e;
}

/* ------------------------------------------------------------- commands */

fg_code fg_mem_uv_create(fg_mem_distincts *m, const char *key, const fg_distinct_options *o,
                         fg_error *err) {
    size_t len = strlen(key);
    uint64_t hash = fg_key_hash(key, len);
    fg_key_shard *sh = &m->shards[shard_of(hash)];
    fg_code rc = FG_CODE_OK;
    pthread_mutex_lock(&sh->mu);
    if (find(sh, hash, key, len) != NULL)
        rc = refused(FG_ERR_UV_EXISTS, err);
    else if (insert(sh, key, len, hash, o) == NULL)
        rc = fg_set_error(err, FG_CODE_NOMEM, ERR_NOMEM);
    pthread_mutex_unlock(&sh->mu);
    return rc;
}

/* The instant of an add: at_us, refused as the module refuses it when too
 * far ahead of the clock, or the clock itself; -1 when refused. */
static int64_t add_instant(const fg_mem_distincts *m, int64_t at_us, fg_error *err) {
    int64_t now = clock_now_us(m);
    if (at_us >= 0) {
        if (at_us - FG_UV_FUTURE_US <= now) return at_us;
        refused(FG_ERR_UV_FUTURE, err);
        return -1;
    }
    if (now >= 0 && now <= FG_UV_MAX_US) return now;
    refused(ERR_CLOCK, err);
    return -1;
}

fg_code fg_mem_uv_add(fg_mem_distincts *m, const char *key, const void *const *items,
                      const size_t *lens, size_t n, int64_t at_us, bool *changed, fg_error *err) {
    static const fg_distinct_options defaults = {FG_UV_DEFAULT_SPAN, FG_UV_DEFAULT_MINUTES,
                                                 FG_UV_DEFAULT_HOURS, FG_UV_DEFAULT_DAYS, 0};
    int64_t us = add_instant(m, at_us, err);
    if (us < 0) return FG_CODE_INVALID;
    int64_t sec = us / FG_UV_US_PER_SEC;
    fg_code rc = FG_CODE_OK;
    size_t len = strlen(key);
    uint64_t hash = fg_key_hash(key, len);
    fg_key_shard *sh = &m->shards[shard_of(hash)];
    bool any = false;
    pthread_mutex_lock(&sh->mu);
    entry *e = find(sh, hash, key, len);
    if (e == NULL && (e = insert(sh, key, len, hash, &defaults)) == NULL)
        rc = fg_set_error(err, FG_CODE_NOMEM, ERR_NOMEM);
    for (size_t i = 0; i < n && rc == FG_CODE_OK; i++) {
        const void *item = lens[i] > 0 ? items[i] : "";
        fg_uv_add_result r = fg_uv_add(&e->uv, fg_uv_hash(item, lens[i]), sec, &heap);
        if (r == FG_UV_NOMEM) rc = fg_set_error(err, FG_CODE_NOMEM, ERR_NOMEM);
        any |= r == FG_UV_CHANGED;
    }
    pthread_mutex_unlock(&sh->mu);
    if (rc == FG_CODE_OK && changed != NULL) *changed = any;
    return rc;
}

/* One counter's registers for the window, or the module's refusal. */
static fg_code window_registers(const entry *e, const fg_uv_window *w, int64_t now,
                                uint8_t regs[FG_UV_REGISTERS], fg_error *err) {
    char msg[sizeof(err->message)];
    if (fg_uv_window_registers(&e->uv, w, now, e->key, e->keylen, regs, msg, sizeof(msg)))
        return FG_CODE_OK;
    return refused(msg, err);
}

/* The shards of the keys, as a bit mask. */
static uint32_t shards_of(const char *const *keys, size_t nkeys) {
    uint32_t mask = 0;
    for (size_t i = 0; i < nkeys; i++)
        mask |= 1u << shard_of(fg_key_hash(keys[i], strlen(keys[i])));
    return mask;
}

static void lock_shards(fg_mem_distincts *m, uint32_t mask) {
    for (unsigned i = 0; i < SHARDS; i++)
        if (mask & (1u << i)) pthread_mutex_lock(&m->shards[i].mu);
}

static void unlock_shards(fg_mem_distincts *m, uint32_t mask) {
    for (unsigned i = SHARDS; i-- > 0;)
        if (mask & (1u << i)) pthread_mutex_unlock(&m->shards[i].mu);
}

fg_code fg_mem_uv_registers(fg_mem_distincts *m, const char *const *keys, size_t nkeys,
                            const fg_uv_window *w, uint8_t regs[FG_UV_REGISTERS],
                            fg_error *err) {
    int64_t now = clock_now_us(m);
    if (w->last && (now < 0 || now > FG_UV_MAX_US)) return refused(ERR_CLOCK, err);
    now /= FG_UV_US_PER_SEC;
    uint8_t part[FG_UV_REGISTERS];
    uint32_t mask = shards_of(keys, nkeys);
    fg_code rc = FG_CODE_OK;
    memset(regs, 0, FG_UV_REGISTERS);
    lock_shards(m, mask);
    for (size_t i = 0; i < nkeys && rc == FG_CODE_OK; i++) {
        size_t len = strlen(keys[i]);
        uint64_t hash = fg_key_hash(keys[i], len);
        const entry *e = find(&m->shards[shard_of(hash)], hash, keys[i], len);
        if (e == NULL) continue; /* missing keys are empty, as in PFCOUNT */
        rc = window_registers(e, w, now, part, err);
        if (rc == FG_CODE_OK) fg_uv_merge_registers(regs, part);
    }
    unlock_shards(m, mask);
    return rc;
}
