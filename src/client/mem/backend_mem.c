/*
 * backend_mem.c - mem:, the in-process backend: its tables (backend.h),
 * thin adapters over the client's own tables of keys, which decide with
 * the core and answer as the module does:
 *
 *   rate limits       mem_store.c; idle keys are swept here a few at a time,
 *                     and FG.INSPECT's text is written here from the store's
 *                     view of a key. A remote client with the fallback
 *                     failure policy opens this table too (remote_limit.c).
 *   Bloom filters     mem_bloom.c
 *   unique counters   mem_distinct.c; the count and the HLL string are made
 *                     here from the union's registers, as the module makes
 *                     them
 *   locks             mem_lock.c
 *   policies          mem_policy.c, and the client's loader (fg_loader)
 *
 * Nothing is shared between the families: each table is its own, with its
 * own locks, and the client's clock (opts.clock_us) is given to those that
 * read the time.
 */
#include "backend_mem.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "error.h"
#include "mem_bloom.h"
#include "mem_distinct.h"
#include "mem_lock.h"
#include "mem_policy.h"
#include "mem_store.h"
#include "messages.h"
#include "monotonic.h"

#define SWEEP_EVERY   64 /* decisions between two expiry sweeps */
#define SWEEP_ENTRIES 64 /* entries examined per sweep */

/* ------------------------------------------------------------ rate limits */

/* The rate limits of a client: the store, and the count of decisions that
 * paces its expiry sweeps. */
typedef struct limits {
    fg_mem_store *store;
    const fg_options *opts;
    atomic_uint_fast64_t sweep_tick;
} limits;

static void *limits_open(const fg_backend_args *a) {
    limits *lim = calloc(1, sizeof(*lim));
    if (lim == NULL) return NULL;
    lim->opts = a->opts;
    if ((lim->store = fg_mem_store_new(0)) == NULL) {
        free(lim);
        return NULL;
    }
    return lim;
}

static void limits_close(void *s) {
    limits *lim = s;
    fg_mem_store_free(lim->store);
    free(lim);
}

static int64_t now_us(const limits *lim) {
    return fg_clock_us(lim->opts->clock_us, lim->opts->clock_arg);
}

static fg_code mem_error(fg_mem_status st, fg_error *err) {
    switch (st) {
    case FG_MEM_WRONGTYPE: return fg_set_error(err, FG_CODE_WRONGTYPE, FG_ERR_WRONGTYPE);
    case FG_MEM_OVERFLOW: return fg_set_error(err, FG_CODE_INVALID, FG_ERR_OVERFLOW);
    case FG_MEM_NOMEM: return fg_set_error(err, FG_CODE_NOMEM, "out of memory");
    case FG_MEM_OK:
    case FG_MEM_INVALID: break;
    }
    return fg_set_error(err, FG_CODE_INVALID, FG_ERR_INVALID_LIMIT);
}

static void result_from_decision(const fg_decision *d, fg_result *out) {
    out->allowed = d->allowed;
    out->limit = d->limit;
    out->remaining = d->remaining;
    out->retry_after_ms = fg_ns_to_ms_ceil(d->retry_after_ns);
    out->reset_after_ms = fg_ns_to_ms_ceil(d->reset_after_ns);
    out->source = FG_SOURCE_MEMORY;
}

/* Idle keys are dropped a few at a time, so that no call pays for a full
 * sweep and a table of one-off keys does not grow without bound. */
static void maybe_sweep(limits *lim, int64_t now) {
    uint64_t tick = atomic_fetch_add_explicit(&lim->sweep_tick, 1, memory_order_relaxed);
    if (tick % SWEEP_EVERY == 0) fg_mem_expire(lim->store, now, SWEEP_ENTRIES);
}

static fg_code check(void *s, const char *key, const fg_limit *l, const fg_limiter *ml,
                     int64_t cost, bool peek, int64_t now, fg_result *out, fg_error *err) {
    limits *lim = s;
    fg_decision d;
    (void)l;
    fg_mem_status st = fg_mem_check(lim->store, key, strlen(key), ml, now, cost, peek, &d);
    maybe_sweep(lim, now);
    if (st != FG_MEM_OK) return mem_error(st, err);
    result_from_decision(&d, out);
    return FG_CODE_OK;
}

static fg_code batch(void *s, fg_request *reqs, size_t n, const fg_limiter *mls, size_t valid,
                     int64_t now, fg_error *err) {
    (void)valid;
    (void)err;
    for (size_t i = 0; i < n; i++)
        if (reqs[i].code == FG_CODE_OK)
            reqs[i].code = check(s, reqs[i].key, reqs[i].limit, &mls[i], reqs[i].cost, reqs[i].peek,
                                 now, &reqs[i].result, NULL);
    return FG_CODE_OK;
}

static fg_code reset(void *s, const char *key, bool *existed, fg_error *err) {
    limits *lim = s;
    (void)err;
    *existed = fg_mem_reset(lim->store, key, strlen(key), now_us(lim));
    return FG_CODE_OK;
}

/* A sliding log's entries as runs "ts,count,...", as the server shows them;
 * only a log calls back, so the first entry also writes the log's type. */
typedef struct run_text {
    fg_text *t;
    int64_t ts, count;
} run_text;

static void flush_run(run_text *r) {
    if (r->count == 0) return;
    fg_text_number(r->t, r->ts);
    fg_text_append(r->t, ",", 1);
    fg_text_number(r->t, r->count);
}

static void add_log_entry(int64_t ts, void *arg) {
    run_text *r = arg;
    if (r->count > 0 && ts == r->ts) {
        r->count++;
        return;
    }
    if (r->count == 0)
        fg_text_append(r->t, "slidelog entries=", 17);
    else {
        flush_run(r);
        fg_text_append(r->t, ",", 1);
    }
    r->ts = ts;
    r->count = 1;
}

static void append_field(fg_text *t, const char *name, int64_t value) {
    fg_text_append(t, " ", 1);
    fg_text_append(t, name, strlen(name));
    fg_text_append(t, "=", 1);
    fg_text_number(t, value);
}

/* The in-process state, in the text FG.INSPECT gives on a server. */
static fg_code inspect(void *s, const char *key, fg_text *t, fg_error *err) {
    limits *lim = s;
    int64_t now = now_us(lim);
    fg_mem_view v;
    run_text runs = {t, 0, 0};
    (void)err;
    fg_text_append(t, "type=", 5);
    if (!fg_mem_inspect(lim->store, key, strlen(key), now, &v, add_log_entry, &runs)) {
        t->len = 0;
        t->buf[0] = '\0';
        t->truncated = false; /* no state is "", whatever the buffer's size */
        return FG_CODE_OK;
    }
    switch (v.family) {
    case FG_LIMITER_BUCKET:
        fg_text_append(t, "bucket", 6);
        append_field(t, "tat_ns", v.state.tat_ns);
        break;
    case FG_LIMITER_FIXED:
        fg_text_append(t, "fixed", 5);
        append_field(t, "window_start_us", v.state.fixed.window_start_us);
        append_field(t, "count", v.state.fixed.count);
        break;
    case FG_LIMITER_SLIDING:
        fg_text_append(t, "sliding", 7);
        append_field(t, "window_start_us", v.state.sliding.window_start_us);
        append_field(t, "count", v.state.sliding.count);
        append_field(t, "prev_count", v.state.sliding.prev_count);
        break;
    case FG_LIMITER_SLIDELOG: flush_run(&runs); break;
    }
    append_field(t, "pttl", (v.expires_us - now + 999) / 1000);
    return FG_CODE_OK;
}

static const fg_limit_ops limit_ops = {limits_open, limits_close, check, batch, reset, inspect};

/* --------------------------------------------------------- Bloom filters */

static void *blooms_open(const fg_backend_args *a) {
    (void)a;
    return fg_mem_blooms_new();
}

static void blooms_close(void *s) {
    fg_mem_blooms_free(s);
}

static fg_code bf_reserve(void *s, const char *key, const fg_bloom_options *o, fg_error *err) {
    return fg_mem_bf_reserve(s, key, o, err);
}

static fg_code bf_add(void *s, const char *key, const void *item, size_t len, bool *added,
                      fg_error *err) {
    return fg_mem_bf_add(s, key, &item, &len, 1, added, err);
}

static fg_code bf_madd(void *s, const char *key, const void *const *items, const size_t *lens,
                       size_t n, bool *added, fg_error *err) {
    return fg_mem_bf_add(s, key, items, lens, n, added, err);
}

static fg_code bf_exists(void *s, const char *key, const void *item, size_t len, bool *exists,
                         fg_error *err) {
    (void)err;
    fg_mem_bf_exists(s, key, &item, &len, 1, exists);
    return FG_CODE_OK;
}

static fg_code bf_mexists(void *s, const char *key, const void *const *items, const size_t *lens,
                          size_t n, bool *exists, fg_error *err) {
    (void)err;
    fg_mem_bf_exists(s, key, items, lens, n, exists);
    return FG_CODE_OK;
}

static fg_code bf_card(void *s, const char *key, int64_t *card, fg_error *err) {
    (void)err;
    *card = fg_mem_bf_card(s, key);
    return FG_CODE_OK;
}

static const fg_bloom_ops blooms = {blooms_open, blooms_close, bf_reserve, bf_add,
                                    bf_madd,     bf_exists,    bf_mexists, bf_card};

/* ------------------------------------------------------- unique counters */

static void *counters_open(const fg_backend_args *a) {
    return fg_mem_distincts_new(a->opts->clock_us, a->opts->clock_arg);
}

static void counters_close(void *s) {
    fg_mem_distincts_free(s);
}

static fg_code uv_create(void *s, const char *key, const fg_distinct_options *o, fg_error *err) {
    return fg_mem_uv_create(s, key, o, err);
}

static fg_code uv_add(void *s, const char *key, const void *const *items, const size_t *lens,
                      size_t n, int64_t at_us, bool *changed, fg_error *err) {
    return fg_mem_uv_add(s, key, items, lens, n, at_us, changed, err);
}

static fg_code uv_union(void *s, const char *const *keys, size_t nkeys, const fg_window *w,
                        const fg_uv_window *range, int64_t *count, uint8_t *hll, fg_error *err) {
    uint8_t regs[FG_UV_REGISTERS];
    (void)w;
    fg_code rc = fg_mem_uv_registers(s, keys, nkeys, range, regs, err);
    if (rc != FG_CODE_OK) return rc;
    if (count != NULL)
        *count = (int64_t)fg_uv_estimate(regs);
    else
        fg_uv_to_redis_hll(regs, hll);
    return FG_CODE_OK;
}

static const fg_distinct_ops counters = {counters_open, counters_close, uv_create, uv_add,
                                         uv_union};

/* ------------------------------------------------------------------ locks */

static void *locks_open(const fg_backend_args *a) {
    return fg_mem_locks_new(a->opts->clock_us, a->opts->clock_arg);
}

static void locks_close(void *s) {
    fg_mem_locks_free(s);
}

static fg_code lock(void *s, const char *key, const char *owner, const fg_lock_options *o,
                    fg_lock_grant *out, fg_error *err) {
    return fg_mem_lock(s, key, owner, o, out, err);
}

static fg_code unlock(void *s, const char *key, const char *owner, int64_t *holds_left,
                      fg_error *err) {
    return fg_mem_unlock(s, key, owner, holds_left, err);
}

static fg_code extend(void *s, const char *key, const char *owner, int64_t lease_ms, bool *extended,
                      fg_error *err) {
    return fg_mem_extend(s, key, owner, lease_ms, extended, err);
}

static fg_code semaphore_acquire(void *s, const char *key, int64_t capacity, const char *owner,
                                 int64_t permits, const fg_lock_options *o, fg_lock_grant *out,
                                 fg_error *err) {
    return fg_mem_semaphore_acquire(s, key, capacity, owner, permits, o, out, err);
}

static fg_code semaphore_release(void *s, const char *key, const char *owner, int64_t permits,
                                 int64_t *permits_left, fg_error *err) {
    return fg_mem_semaphore_release(s, key, owner, permits, permits_left, err);
}

static fg_code lock_multi(void *s, const char *const *keys, size_t count, const char *owner,
                          const fg_lock_options *o, fg_lock_grant *out, fg_error *err) {
    return fg_mem_lock_multi(s, keys, count, owner, o, out, err);
}

static fg_code unlock_multi(void *s, const char *const *keys, size_t count, const char *owner,
                            int64_t *released, fg_error *err) {
    return fg_mem_unlock_multi(s, keys, count, owner, released, err);
}

static const fg_lock_ops locks = {
    locks_open,        locks_close,       lock,       unlock,      extend,
    semaphore_acquire, semaphore_release, lock_multi, unlock_multi};

/* mem_lock.h, for tests: the lock table of a client whose locks are
 * this backend's. */
fg_mem_locks *fg_client_mem_locks(fg_client *c) {
    fg_family_ref l;
    if (c == NULL || fg_client_family(c, FG_FAMILY_LOCKS, &l, NULL) != FG_CODE_OK) return NULL;
    return l.ops.locks == &locks ? l.s : NULL;
}

/* --------------------------------------------------------------- policies */

/* The policies of a client: the table, and the client's loader. */
typedef struct policies {
    fg_mem_policies *table;
    fg_loader loader;
} policies;

static void *policies_open(const fg_backend_args *a) {
    policies *p = calloc(1, sizeof(*p));
    if (p == NULL) return NULL;
    if ((p->table = fg_mem_policies_new(a->opts->clock_us, a->opts->clock_arg)) == NULL) {
        free(p);
        return NULL;
    }
    pthread_mutex_init(&p->loader.lock, NULL);
    return p;
}

static void policies_close(void *s) {
    policies *p = s;
    fg_mem_policies_free(p->table);
    pthread_mutex_destroy(&p->loader.lock);
    free(p);
}

static fg_code set_policy(void *s, const char *name, const fg_policy_def *def,
                          const fg_policy_rules *rules, fg_error *err) {
    policies *p = s;
    return fg_mem_policy_set(p->table, name, def, rules, err);
}

static fg_code delete_policy(void *s, const char *name, bool *had, fg_error *err) {
    policies *p = s;
    (void)err;
    *had = fg_mem_policy_delete(p->table, name);
    return FG_CODE_OK;
}

static fg_code list_add(void *s, const char *name, bool deny, const void *const *items,
                        const size_t *lens, size_t n, int64_t *added, fg_error *err) {
    policies *p = s;
    return fg_mem_policy_list_add(p->table, name, deny, items, lens, n, added, err);
}

static fg_code check_policy(void *s, const fg_policy_request *q, fg_policy_result *out,
                            fg_error *err) {
    policies *p = s;
    return fg_mem_policy_check(p->table, q->name, q->key, q->identity, q->cost,
                               q->waits ? q->timeout_ms : 0, out, err);
}

static fg_code get_policy(void *s, const char *name, fg_policy_info *out, fg_error *err) {
    policies *p = s;
    return fg_mem_policy_get(p->table, name, out, err);
}

static fg_code list_names(void *s, char ***names, size_t *count, fg_error *err) {
    policies *p = s;
    return fg_mem_policy_names(p->table, names, count, err);
}

static bool forget(void *s, const char *key) {
    policies *p = s;
    return fg_mem_policy_forget(p->table, key);
}

static fg_loader *loader_of(void *s) {
    policies *p = s;
    return &p->loader;
}

static const fg_policy_ops policy_ops = {policies_open, policies_close, set_policy, delete_policy,
                                         list_add,      check_policy,   get_policy, list_names,
                                         forget,        loader_of};

/* ------------------------------------------------------------ the backend */

const fg_backend fg_backend_mem = {.limits = &limit_ops,
                                   .bloom = &blooms,
                                   .distinct = &counters,
                                   .locks = &locks,
                                   .policies = &policy_ops};
