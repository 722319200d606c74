/*
 * mem_policy.c - policies in process (mem:), with the module's semantics
 * (docs/policies.md): definitions are checked by policy_def.c, and a check
 * runs the core's steps (core/policy_check.h) as FG.CHECK does.
 *
 * One mutex guards the whole table of a client: the policies, their lists
 * and counters, and the keys' states. That is the simple choice rather
 * than the fast one (mem_lock.c makes it too): a check holds it for a hash
 * probe, two list lookups and a decision over at most eight limits, and
 * checks of unrelated keys take turns. In exchange a check sees a policy,
 * its lists and the key's state at one instant, as on a server, and a
 * waiting request needs no lock order.
 *
 * Keys. A table of entries: the key's state, the name of the policy that
 * wrote it, when it is neutral again (as the module expires the key), and
 * the queue of the requests waiting on it. A state past that instant
 * counts as absent, as a server's expired key does; an entry goes when it
 * holds neither a live state nor waiters, at a store that leaves the state
 * neutral or at an incremental sweep.
 *
 * Lists. An exact list is a hash set of the items' bytes; a Bloom list is
 * a core filter (src/core/bloom.h), scaling as BF.ADD's filters do.
 *
 * Waiting (fg_policy_acquire): whether a request waits, and how a waiter
 * is answered, are the core's rules (core/policy_check.h), as in the
 * module; a waiter blocks on a condition variable of its own in the key's
 * queue (core/wait_queue.h). Only the head decides: it sleeps until its
 * retry time (the client's clock taken to keep pace with the monotonic
 * one) or its deadline, then checks again. The others sleep until their
 * deadline or their turn. Whatever may change an answer wakes the heads: a
 * policy set, deleted or listed to, a reset, a check on the key (a clock
 * moved by hand is seen then, or at the head's next wake-up). Timeouts run
 * on the monotonic clock, like the module's timers.
 *
 * Unlike a server: the keys of policies are apart from the rate limits',
 * the Bloom filters' and the locks' keys (no WRONGTYPE between them), and
 * nothing outlives the client.
 */
#include "mem_policy.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "bloom.h"
#include "monotonic.h"
#include "error.h"
#include "key_table.h"
#include "filter.h"
#include "messages.h"
#include "params.h"
#include "policy_check.h"
#include "wait_queue.h"

#define SWEEP_EVERY     64 /* checks between two sweeps */
#define SWEEP_ENTRIES   16 /* entries examined per sweep */
#define BLOOM_EXPANSION 2

/* The module's messages (src/module/t_policy.c). */
static const char ERR_NOMEM[] = "out of memory";

/* --------------------------------------------------------------- lists */

typedef struct item {
    uint32_t len;
    unsigned char bytes[];
} item;

typedef struct list {
    fg_list_kind kind;
    fg_key_table exact; /* exact: the items */
    fg_bloom bloom;     /* Bloom */
    int64_t entries;    /* items added that were new (as reported) */
} list;

static fg_code list_init(list *l, const fg_list_spec *s, fg_error *err) {
    memset(l, 0, sizeof(*l));
    l->kind = s->kind;
    l->exact = FG_KEY_TABLE(item, len, bytes);
    if (s->kind == FG_LIST_EXACT) return FG_CODE_OK;
    if (fg_bloom_init(&l->bloom, s->error, (uint64_t)s->capacity, BLOOM_EXPANSION, &fg_bf_heap) ==
        FG_OK)
        return FG_CODE_OK;
    return fg_set_error(err, FG_CODE_INVALID, FG_ERR_POLICY_LIST_MAKE, "not enough memory");
}

static void list_free(list *l) {
    fg_key_table_clear(&l->exact, free);
    if (l->kind == FG_LIST_BLOOM) fg_bloom_free(&l->bloom, &fg_bf_heap);
}

static bool exact_has(const list *l, uint64_t hash, const void *bytes, size_t len) {
    return fg_key_table_find(&l->exact, hash, bytes, len) != NULL;
}

static bool list_has(const list *l, const void *bytes, size_t len) {
    uint64_t hash = fg_bf_item_hash(bytes, len);
    if (l->kind == FG_LIST_BLOOM) return fg_bloom_contains(&l->bloom, hash);
    return exact_has(l, hash, bytes, len);
}

/* 1 added, 0 present, -1 out of memory. */
static int exact_add(list *l, const void *bytes, size_t len) {
    uint64_t hash = fg_bf_item_hash(bytes, len);
    if (exact_has(l, hash, bytes, len)) return 0;
    item *it = fg_key_entry_new(&l->exact, sizeof(*it), bytes, len);
    if (it == NULL) return -1;
    if (!fg_key_table_insert(&l->exact, hash, it)) {
        free(it);
        return -1;
    }
    l->entries++;
    return 1;
}

/* Adds n items, stopping at the first that cannot be (the module's
 * errors); *added counts the new ones before it. */
static fg_code list_add(list *l, const void *const *items, const size_t *lens, size_t n,
                        int64_t *added, fg_error *err) {
    for (size_t i = 0; i < n; i++) {
        int r;
        if (l->kind == FG_LIST_EXACT) {
            r = exact_add(l, items[i], lens[i]);
            if (r < 0) return fg_set_error(err, FG_CODE_NOMEM, "%s", ERR_NOMEM);
        } else {
            fg_bloom_add_result b =
                fg_bloom_add(&l->bloom, fg_bf_item_hash(items[i], lens[i]), &fg_bf_heap);
            if (b < 0)
                return fg_set_error(err, FG_CODE_INVALID,
                                    FG_ERR_POLICY_LIST_GROW, "not enough memory");
            r = b == FG_BLOOM_ADDED;
            l->entries += r;
        }
        *added += r;
    }
    return FG_CODE_OK;
}

/* ------------------------------------------------------------ the table */

typedef struct policy {
    struct policy *next; /* sorted by name */
    char name[FG_POLICY_NAME_MAX + 1];
    fg_policy_def def;
    fg_policy_rules rules;
    list allow, deny;
    fg_policy_counters counters;
} policy;

typedef struct entry {
    struct entry *busy_prev, *busy_next; /* among the entries with waiters */
    bool has_state;
    int64_t expires_us;                  /* has_state: when the state is neutral again */
    char policy[FG_POLICY_NAME_MAX + 1]; /* has_state: whose state it is */
    fg_policy_state state;
    fg_wait_queue queue;
    uint32_t keylen;
    char key[];
} entry;

struct fg_mem_policies {
    pthread_mutex_t mu; /* guards everything below but the clock */
    int64_t (*clock_us)(void *arg);
    void *clock_arg;
    policy *policies;
    fg_key_table keys; /* entry by key */
    entry *busy;       /* the entries with waiters */
    uint64_t checks;
};

static int64_t clock_now(const fg_mem_policies *m) {
    return fg_clock_us(m->clock_us, m->clock_arg);
}

fg_mem_policies *fg_mem_policies_new(int64_t (*clock_us)(void *arg), void *clock_arg) {
    fg_mem_policies *m = calloc(1, sizeof(*m));
    if (m == NULL) return NULL;
    m->clock_us = clock_us;
    m->clock_arg = clock_arg;
    m->keys = FG_KEY_TABLE(entry, keylen, key);
    pthread_mutex_init(&m->mu, NULL);
    return m;
}

static void policy_free(policy *p) {
    list_free(&p->allow);
    list_free(&p->deny);
    free(p);
}

/* No thread may wait any more: fg_close is the last call on a client. */
void fg_mem_policies_free(fg_mem_policies *m) {
    if (m == NULL) return;
    for (policy *p = m->policies, *next; p != NULL; p = next) {
        next = p->next;
        policy_free(p);
    }
    fg_key_table_clear(&m->keys, free);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

/* The policy `name`, and where it is or would be linked (sorted). */
static policy *find_policy(fg_mem_policies *m, const char *name, policy ***link) {
    policy **at = &m->policies;
    while (*at != NULL && strcmp((*at)->name, name) < 0)
        at = &(*at)->next;
    if (link != NULL) *link = at;
    return *at != NULL && strcmp((*at)->name, name) == 0 ? *at : NULL;
}

static fg_code no_such_policy(const char *name, fg_error *err) {
    return fg_set_error(err, FG_CODE_INVALID, FG_ERR_POLICY_MISSING, (int)strlen(name), name);
}

static entry *find_entry(const fg_mem_policies *m, const char *key, size_t len, uint64_t hash) {
    return fg_key_table_find(&m->keys, hash, key, len);
}

static entry *add_entry(fg_mem_policies *m, const char *key, size_t len, uint64_t hash) {
    entry *e = fg_key_entry_new(&m->keys, sizeof(*e), key, len);
    if (e == NULL) return NULL;
    if (fg_key_table_insert(&m->keys, hash, e)) return e;
    free(e);
    return NULL;
}

static void remove_entry(fg_mem_policies *m, entry *e) {
    fg_key_table_remove(&m->keys, fg_key_hash(e->key, e->keylen), e);
    fg_key_table_shrink(&m->keys);
    free(e);
}

static bool live(const entry *e, int64_t now) {
    return e != NULL && e->has_state && e->expires_us > now;
}

/* Drops an entry that holds nothing that matters at now. */
static void drop_if_idle(fg_mem_policies *m, entry *e, int64_t now) {
    if (!fg_wait_busy(&e->queue) && !live(e, now)) remove_entry(m, e);
}

/* Frees an entry that holds nothing that matters at *now (a sweep's). */
static bool drop_idle(void *p, void *now) {
    entry *e = p;
    if (fg_wait_busy(&e->queue) || live(e, *(const int64_t *)now)) return false;
    free(e);
    return true;
}

/* Examines a few entries from where the last sweep stopped. */
static void sweep(fg_mem_policies *m, int64_t now) {
    if (++m->checks % SWEEP_EVERY != 0) return;
    size_t budget = SWEEP_ENTRIES;
    fg_key_table_sweep(&m->keys, &budget, drop_idle, &now);
}

typedef struct request request;

/* A blocked request, on its own thread's stack, with its deadlines: on the
 * decisions' clock (whether to wait on) and on the monotonic one (when to
 * give up). */
typedef struct waiting {
    fg_waiter base;
    fg_wait_link link;
    pthread_cond_t wake;
    entry *e;
    const request *r;
    int64_t deadline, deadline_mono;
} waiting;

/* Only the head decides: it looks again. */
static void wake_head(entry *e) {
    fg_waiter *head = fg_wait_head(&e->queue);
    if (head != NULL) pthread_cond_signal(&fg_wait_container(head, waiting, base)->wake);
}

/* Wakes the head of every queue: something they depend on changed. */
static void wake_heads(fg_mem_policies *m) {
    for (entry *e = m->busy; e != NULL; e = e->busy_next)
        wake_head(e);
}

/* --------------------------------------------------------- the policies */

/* The lists of p for def: a list whose kind changes starts empty, the
 * others are kept. Nothing changes on failure. */
static fg_code take_lists(policy *p, bool fresh, const fg_policy_def *def, fg_error *err) {
    bool new_allow = fresh || def->allowlist.kind != p->def.allowlist.kind;
    bool new_deny = fresh || def->denylist.kind != p->def.denylist.kind;
    list allow, deny;
    fg_code rc = new_allow ? list_init(&allow, &def->allowlist, err) : FG_CODE_OK;
    if (rc != FG_CODE_OK) return rc;
    if (new_deny && (rc = list_init(&deny, &def->denylist, err)) != FG_CODE_OK) {
        if (new_allow) list_free(&allow);
        return rc;
    }
    if (new_allow) {
        if (!fresh) list_free(&p->allow);
        p->allow = allow;
    }
    if (new_deny) {
        if (!fresh) list_free(&p->deny);
        p->deny = deny;
    }
    return FG_CODE_OK;
}

fg_code fg_mem_policy_set(fg_mem_policies *m, const char *name, const fg_policy_def *def,
                          const fg_policy_rules *rules, fg_error *err) {
    pthread_mutex_lock(&m->mu);
    policy **link;
    policy *p = find_policy(m, name, &link);
    bool fresh = p == NULL;
    fg_code rc = FG_CODE_OK;
    if (fresh && (p = calloc(1, sizeof(*p))) == NULL)
        rc = fg_set_error(err, FG_CODE_NOMEM, "%s", ERR_NOMEM);
    if (rc == FG_CODE_OK) rc = take_lists(p, fresh, def, err);
    if (rc == FG_CODE_OK) {
        p->def = *def;
        p->rules = *rules;
        if (fresh) {
            strcpy(p->name, name);
            p->next = *link;
            *link = p;
        }
        wake_heads(m);
    } else if (fresh) {
        free(p);
    }
    pthread_mutex_unlock(&m->mu);
    return rc;
}

bool fg_mem_policy_delete(fg_mem_policies *m, const char *name) {
    pthread_mutex_lock(&m->mu);
    policy **link;
    policy *p = find_policy(m, name, &link);
    if (p != NULL) {
        *link = p->next;
        policy_free(p);
        wake_heads(m);
    }
    pthread_mutex_unlock(&m->mu);
    return p != NULL;
}

fg_code fg_mem_policy_list_add(fg_mem_policies *m, const char *name, bool deny,
                               const void *const *items, const size_t *lens, size_t n,
                               int64_t *added, fg_error *err) {
    pthread_mutex_lock(&m->mu);
    policy *p = find_policy(m, name, NULL);
    int64_t count = 0;
    fg_code rc = p == NULL ? no_such_policy(name, err)
                           : list_add(deny ? &p->deny : &p->allow, items, lens, n, &count, err);
    if (count > 0) wake_heads(m);
    pthread_mutex_unlock(&m->mu);
    if (rc == FG_CODE_OK && added != NULL) *added = count;
    return rc;
}

/* ------------------------------------------------------------ decisions */

/* One FG.CHECK. */
struct request {
    const char *name;
    const char *key;
    size_t keylen;
    uint64_t hash;
    const char *identity;
    size_t idlen;
    int64_t cost;
};

/* Checks r at now against the key's entry e (NULL: none), changing
 * nothing (core/policy_check.h); *p is the policy. */
static fg_code decide(fg_mem_policies *m, const entry *e, const request *r, int64_t now,
                      fg_policy_eval *c, policy **p, fg_error *err) {
    if ((*p = find_policy(m, r->name, NULL)) == NULL) return no_such_policy(r->name, err);
    bool on_deny = list_has(&(*p)->deny, r->identity, r->idlen);
    bool on_allow = !on_deny && list_has(&(*p)->allow, r->identity, r->idlen);
    if (fg_policy_check_lists(c, now, r->cost, on_deny, on_allow)) return FG_CODE_OK;
    bool stored = live(e, now);
    if (stored && strcmp(e->policy, r->name) != 0)
        return fg_set_error(err, FG_CODE_INVALID, FG_ERR_POLICY_STATE,
                            (int)strlen(e->policy), e->policy);
    if (fg_policy_check_state(c, &(*p)->rules, stored ? &e->state : NULL) != FG_OK)
        return fg_set_error(err, FG_CODE_INVALID, "%s", FG_ERR_OVERFLOW);
    return FG_CODE_OK;
}

static fg_policy_result result_of(const fg_policy_answer *a) {
    fg_policy_result out = {.result = {.allowed = a->allowed,
                                       .limit = a->limit,
                                       .remaining = a->remaining,
                                       .retry_after_ms = a->retry_after_ms,
                                       .reset_after_ms = a->reset_after_ms,
                                       .source = FG_SOURCE_MEMORY},
                            .shadow_denied = a->shadow_denied};
    switch (a->decided_by) {
    case FG_CHECK_LIMIT:
        out.decided_by = FG_BY_LIMIT;
        out.limit_index = (int)a->limit_index;
        break;
    case FG_CHECK_PENALTY: out.decided_by = FG_BY_PENALTY; break;
    case FG_CHECK_DENYLIST: out.decided_by = FG_BY_DENYLIST; break;
    case FG_CHECK_ALLOWLIST: out.decided_by = FG_BY_ALLOWLIST; break;
    }
    return out;
}

/* Makes c the final answer: the key's state stored when it changed (the
 * entry made when needed, dropped when neither a live state nor waiters
 * remain), the answer counted. *e is the key's entry, or NULL. */
static fg_code commit(fg_mem_policies *m, entry **e, const request *r, const fg_policy_eval *c,
                      policy *p, fg_policy_result *out, fg_error *err) {
    if (fg_policy_check_writes(c)) {
        int64_t expires = fg_policy_check_neutral_at(c);
        bool keep = expires > c->now_us;
        if (*e == NULL && keep && (*e = add_entry(m, r->key, r->keylen, r->hash)) == NULL)
            return fg_set_error(err, FG_CODE_NOMEM, "%s", ERR_NOMEM);
        if (*e != NULL) {
            (*e)->has_state = keep;
            (*e)->expires_us = expires;
            (*e)->state = c->next;
            strcpy((*e)->policy, r->name);
            if (!fg_wait_busy(&(*e)->queue) && !keep) {
                remove_entry(m, *e);
                *e = NULL;
            }
        }
    }
    fg_policy_check_count(c, &p->counters);
    fg_policy_answer a;
    fg_policy_check_answer(c, &a);
    *out = result_of(&a);
    return FG_CODE_OK;
}

/* A check that does not wait: decided and applied at once, ahead of the
 * key's waiters, whose head then looks again (the clock may have moved). */
static fg_code check_now(fg_mem_policies *m, const request *r, int64_t now, fg_policy_result *out,
                         fg_error *err) {
    entry *e = find_entry(m, r->key, r->keylen, r->hash);
    fg_policy_eval c;
    policy *p;
    fg_code rc = decide(m, e, r, now, &c, &p, err);
    if (rc == FG_CODE_OK) rc = commit(m, &e, r, &c, p, out, err);
    if (e != NULL) wake_head(e);
    return rc;
}

/* --------------------------------------------------------------- waiting */

static void enqueue(fg_mem_policies *m, waiting *q) {
    fg_wait_queue *wq = &q->e->queue;
    if (!fg_wait_busy(wq)) {
        entry *e = q->e;
        e->busy_prev = NULL;
        e->busy_next = m->busy;
        if (m->busy != NULL) m->busy->busy_prev = e;
        m->busy = e;
    }
    fg_waiter_join(&q->base, &q->link, &wq, 1);
}

static bool at_head(const waiting *q) {
    return fg_wait_head(&q->e->queue) == &q->base;
}

/* Takes the waiter out of its queue (it was answered or gave up): the
 * next one may go now. */
static void leave(fg_mem_policies *m, waiting *q, int64_t now) {
    fg_waiter_leave(&q->base);
    if (fg_wait_busy(&q->e->queue)) {
        wake_head(q->e);
        return;
    }
    entry *e = q->e;
    if (e->busy_prev != NULL)
        e->busy_prev->busy_next = e->busy_next;
    else
        m->busy = e->busy_next;
    if (e->busy_next != NULL) e->busy_next->busy_prev = e->busy_prev;
    drop_if_idle(m, e, now);
}

/* The final answer at the deadline: the head is decided as it stands; a
 * waiter behind others may yield (policy_check.h). */
static fg_code at_deadline(fg_mem_policies *m, waiting *q, fg_policy_result *out, fg_error *err) {
    int64_t now = clock_now(m);
    fg_policy_eval c;
    policy *p;
    fg_policy_answer a;
    fg_code rc = decide(m, q->e, q->r, now, &c, &p, err);
    if (rc == FG_CODE_OK && fg_policy_check_yield(&c, at_head(q), &a, &p->counters))
        *out = result_of(&a);
    else if (rc == FG_CODE_OK)
        rc = commit(m, &q->e, q->r, &c, p, out, err);
    leave(m, q, now);
    return rc;
}

/* A queued request until it is answered: only the head decides, charged
 * when allowed, answered when denied for good; it sleeps until its retry
 * time (the client's clock taken to keep pace with the monotonic one) or
 * its deadline. The others sleep until their deadline or their turn. */
static fg_code wait_in_queue(fg_mem_policies *m, waiting *q, fg_policy_result *out, fg_error *err) {
    for (;;) {
        int64_t mono = fg_monotonic_us(), until = q->deadline_mono;
        if (mono >= q->deadline_mono) return at_deadline(m, q, out, err);
        if (at_head(q)) {
            fg_policy_eval c;
            policy *p;
            int64_t now = clock_now(m), wake;
            fg_code rc = decide(m, q->e, q->r, now, &c, &p, err);
            if (rc != FG_CODE_OK || !fg_policy_check_waits_on(&c, q->deadline, &wake)) {
                if (rc == FG_CODE_OK) rc = commit(m, &q->e, q->r, &c, p, out, err);
                leave(m, q, now);
                return rc;
            }
            if (wake - now < q->deadline_mono - mono) until = mono + (wake - now);
        }
        fg_sleep_until(&q->wake, &m->mu, until);
    }
}

/* fg_policy_acquire: answered at once unless the check waits
 * (policy_check.h); then in the key's queue. */
static fg_code check_waiting(fg_mem_policies *m, const request *r, int64_t timeout_ms, int64_t now,
                             fg_policy_result *out, fg_error *err) {
    waiting q = {.r = r,
                 .deadline = now + timeout_ms * 1000,
                 .deadline_mono = fg_monotonic_us() + timeout_ms * 1000};
    entry *e = find_entry(m, r->key, r->keylen, r->hash);
    fg_policy_eval c;
    policy *p;
    int64_t first_try;
    fg_code rc = decide(m, e, r, now, &c, &p, err);
    if (rc != FG_CODE_OK) return rc;
    bool queued_ahead = e != NULL && fg_wait_busy(&e->queue);
    if (!fg_policy_check_waits(&c, queued_ahead, timeout_ms, &first_try))
        return commit(m, &e, r, &c, p, out, err);
    if (e == NULL && (e = add_entry(m, r->key, r->keylen, r->hash)) == NULL)
        return fg_set_error(err, FG_CODE_NOMEM, "%s", ERR_NOMEM);
    q.e = e;
    fg_cond_init_monotonic(&q.wake);
    enqueue(m, &q);
    p->counters.waited++;
    rc = wait_in_queue(m, &q, out, err);
    pthread_cond_destroy(&q.wake);
    return rc;
}

fg_code fg_mem_policy_check(fg_mem_policies *m, const char *name, const char *key,
                            const char *identity, int64_t cost, int64_t timeout_ms,
                            fg_policy_result *out, fg_error *err) {
    if (identity == NULL) identity = key;
    request r = {name, key, strlen(key), 0, identity, strlen(identity), cost};
    r.hash = fg_key_hash(key, r.keylen);
    pthread_mutex_lock(&m->mu);
    int64_t now = clock_now(m);
    fg_code rc = timeout_ms > 0 ? check_waiting(m, &r, timeout_ms, now, out, err)
                                : check_now(m, &r, now, out, err);
    sweep(m, clock_now(m));
    pthread_mutex_unlock(&m->mu);
    return rc;
}

bool fg_mem_policy_forget(fg_mem_policies *m, const char *key) {
    size_t len = strlen(key);
    pthread_mutex_lock(&m->mu);
    int64_t now = clock_now(m);
    entry *e = find_entry(m, key, len, fg_key_hash(key, len));
    bool had = live(e, now);
    if (e != NULL) {
        e->has_state = false;
        if (fg_wait_busy(&e->queue))
            wake_head(e);
        else
            remove_entry(m, e);
    }
    pthread_mutex_unlock(&m->mu);
    return had;
}

/* ---------------------------------------------------------- reading back */

fg_code fg_mem_policy_get(fg_mem_policies *m, const char *name, fg_policy_info *out,
                          fg_error *err) {
    pthread_mutex_lock(&m->mu);
    const policy *p = find_policy(m, name, NULL);
    if (p != NULL)
        *out = (fg_policy_info){p->def,
                                p->allow.entries,
                                p->deny.entries,
                                p->counters.allowed,
                                p->counters.denied,
                                p->counters.banned,
                                p->counters.shadow_denied,
                                p->counters.waited};
    pthread_mutex_unlock(&m->mu);
    /* The penalty as a server shows it: the defaults filled in. */
    if (p != NULL && out->def.ban_ms == 0) out->def.ban_after = 1;
    if (p != NULL && out->def.ban_within_ms == 0) out->def.ban_within_ms = out->def.ban_ms;
    return p != NULL ? FG_CODE_OK : no_such_policy(name, err);
}

fg_code fg_mem_policy_names(fg_mem_policies *m, char ***names, size_t *count, fg_error *err) {
    pthread_mutex_lock(&m->mu);
    size_t n = 0;
    for (const policy *p = m->policies; p != NULL; p = p->next)
        n++;
    char **out = calloc(n > 0 ? n : 1, sizeof(*out));
    size_t i = 0;
    for (const policy *p = m->policies; out != NULL && p != NULL; p = p->next, i++)
        if ((out[i] = strdup(p->name)) == NULL) break;
    pthread_mutex_unlock(&m->mu);
    if (out == NULL || i < n) {
        fg_policy_names_free(out, i);
        return fg_set_error(err, FG_CODE_NOMEM, "%s", ERR_NOMEM);
    }
    *names = out;
    *count = n;
    return FG_CODE_OK;
}
