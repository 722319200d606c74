/*
 * backend_mem.c - mem:, the in-process backend: its tables (backend.h) over
 * the client's own tables of keys, which decide with the core and answer
 * as the module does (mem_*.c).
 *
 *   Bloom filters     mem_bloom.c
 *   unique counters   mem_distinct.c; the count and the HLL string are made
 *                     here from the union's registers, as the module makes
 *                     them
 *
 * Nothing is shared between the families: each table is its own, with its
 * own locks, and the client's clock (opts.clock_us) is given to those that
 * read the time.
 */
#include "backend_mem.h"

#include <pthread.h>
#include <stdlib.h>

#include "client.h"
#include "mem_bloom.h"
#include "mem_distinct.h"
#include "mem_lock.h"
#include "mem_policy.h"

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
    void *s;
    return c != NULL && fg_client_family(c, FG_FAMILY_LOCKS, &s, NULL) == &locks ? s : NULL;
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

static fg_code check(void *s, const fg_policy_request *q, fg_policy_result *out, fg_error *err) {
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
                                         list_add,      check,          get_policy, list_names,
                                         forget,        loader_of};

/* ------------------------------------------------------------ the backend */

const fg_backend fg_backend_mem = {
    .bloom = &blooms, .distinct = &counters, .locks = &locks, .policies = &policy_ops};
