/*
 * mem_policy.c - policies in process (mem:), with the module's semantics
 * (docs/policies.md): the same checks refuse a definition with the same
 * messages, the same core decides (src/core/policy.h), and FG.CHECK's
 * order is kept: deny list, allow list, then the key's state, carried over
 * to the policy's current rules before every decision.
 *
 * One mutex guards the whole table of a client: the policies, their lists
 * and counters, and the keys' states. That is the simple choice rather
 * than the fast one (mem_lock.c makes it too): a check holds it for a hash
 * probe, two list lookups and a decision over at most eight limits, and
 * checks of unrelated keys take turns. In exchange a check sees a policy,
 * its lists and the key's state at one instant, as on a server, and a
 * waiting request needs no lock order.
 *
 * Keys. A chained hash table of entries: the key's state, the name of the
 * policy that wrote it, when it is neutral again (as the module expires
 * the key: fg_policy_expires_at_us, by the rules it was stored under), and
 * the FIFO
 * queue of the requests waiting on it. A state past that instant counts as
 * absent, as a server's expired key does; an entry goes when it holds
 * neither a live state nor waiters, at a store that leaves the state
 * neutral or at an incremental sweep.
 *
 * Lists. An exact list is a hash set of the items' bytes; a Bloom list is
 * a core filter (src/core/bloom.h), scaling as BF.ADD's filters do.
 *
 * Waiting (fg_policy_acquire) follows the module's t_policy.c rule for
 * rule. A request that limits or the penalty box deny, and that could be
 * allowed within its timeout, joins the key's queue and blocks on a
 * condition variable of its own; so does one that would be allowed while
 * others wait ahead (no overtaking). Its decisions while it waits are
 * discarded: it charges nothing and counts towards no penalty until its
 * final answer. Only the head of a queue is decided: it sleeps until its
 * retry time (the client's clock taken to keep pace with the monotonic
 * one) or its deadline, then decides again; allowed, it is charged and the
 * next one goes; denied for good (beyond its deadline, a list, a policy
 * deleted), it is answered as a check would be. The others sleep until
 * their deadline or their turn; one whose deadline comes while it would
 * fit behind others is denied with retry_after_ms 0 and nothing stored. A
 * check that does not wait is decided at once, ahead of the queue.
 * Whatever may change an answer wakes the heads: a policy set, deleted or
 * listed to, a reset, a check on the key (with an injected clock, a clock
 * moved by hand is seen then, or at the head's next wake-up). Timeouts run
 * on the monotonic clock, like the module's timers.
 *
 * Unlike a server: the keys of policies are apart from the rate limits',
 * the Bloom filters' and the locks' keys (no WRONGTYPE between them), and
 * nothing outlives the client.
 */
#include "mem_policy.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bloom.h"
#include "conn.h"       /* fg_monotonic_us */
#include "error.h"
#include "key_table.h"
#include "limit_args.h" /* fg_limit_convert */
#include "mem_bloom.h"  /* fg_bf_item_hash */
#include "params.h"

#define MIN_BUCKETS     16u /* the key table never shrinks below this */
#define SWEEP_EVERY     64 /* checks between two sweeps */
#define SWEEP_BUCKETS   16 /* buckets examined per sweep */
#define BLOOM_EXPANSION 2
#define MSG_MAX         160

/* The module's messages (src/module/t_policy.c). */
static const char ERR_NAME[] =
    "ERR policy name must be 1 to 64 letters, digits, '_', '-', '.' or '/'";
static const char ERR_NLIMITS[] = "ERR a policy needs 1 to 8 LIMIT rules";
static const char ERR_ALGORITHMS[] = "(TOKEN, LEAKY, GCRA, FIXED, SLIDING)";
static const char ERR_OVERFLOW[] = "ERR overflow: these parameters exceed 64-bit time arithmetic";
static const char ERR_NO_LIST[] = "ERR the Bloom list cannot be made: not enough memory";
static const char ERR_NOMEM[] = "out of memory";

/* -------------------------------------------------------------- checks */

static bool name_char(char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '_' || ch == '-' || ch == '.' || ch == '/';
}

fg_code fg_policy_name_check(const char *name, fg_error *err) {
    size_t len = name != NULL ? strlen(name) : 0;
    bool ok = len >= 1 && len <= FG_POLICY_NAME_MAX;
    for (size_t i = 0; ok && i < len; i++)
        ok = name_char(name[i]);
    return ok ? FG_CODE_OK : fg_set_error(err, FG_CODE_INVALID, "%s", ERR_NAME);
}

fg_code fg_policy_limit_convert(const fg_limit *l, fg_policy_limit *out, fg_error *err) {
    if (l->algorithm == FG_SLIDING_LOG)
        return fg_set_error(err, FG_CODE_INVALID, "ERR unknown algorithm 'SLIDELOG' %s",
                            ERR_ALGORITHMS);
    fg_mem_limit ml;
    if (fg_limit_convert(l, 0, &ml, err) != FG_CODE_OK) return FG_CODE_INVALID;
    switch (l->algorithm) {
    case FG_TOKEN_BUCKET: out->algorithm = FG_POLICY_TOKEN; break;
    case FG_LEAKY_BUCKET: out->algorithm = FG_POLICY_LEAKY; break;
    case FG_GCRA: out->algorithm = FG_POLICY_GCRA; break;
    case FG_FIXED_WINDOW: out->algorithm = FG_POLICY_FIXED; break;
    case FG_SLIDING_WINDOW: out->algorithm = FG_POLICY_SLIDING; break;
    case FG_SLIDING_LOG: return FG_CODE_INVALID; /* refused above */
    }
    if (ml.family == FG_MEM_BUCKET)
        out->p.bucket = ml.p.bucket;
    else if (ml.family == FG_MEM_FIXED)
        out->p.fixed = ml.p.fixed;
    else
        out->p.sliding = ml.p.sliding;
    return FG_CODE_OK;
}

fg_code fg_policy_penalty_convert(double ban_ms, int64_t after, double within_ms,
                                  fg_policy_penalty *out, fg_error *err) {
    char msg[MSG_MAX];
    *out = (fg_policy_penalty){0, 0, 0}; /* off, as the module parses no PENALTY */
    if (ban_ms == 0) return FG_CODE_OK;
    if (!fg_param_duration_us(ban_ms, "ban_ms", &out->ban_us, msg, sizeof(msg)) ||
        !fg_param_integer(after, "AFTER", 1, FG_POLICY_MAX_AFTER, msg, sizeof(msg)) ||
        (within_ms != 0 &&
         !fg_param_duration_us(within_ms, "WITHIN", &out->within_us, msg, sizeof(msg))))
        return fg_set_error(err, FG_CODE_INVALID, "%s", msg);
    out->after = after;
    if (within_ms == 0) out->within_us = out->ban_us;
    return FG_CODE_OK;
}

fg_code fg_list_spec_check(const fg_list_spec *s, const char *rule, fg_error *err) {
    char msg[MSG_MAX];
    if (s->kind == FG_LIST_EXACT) return FG_CODE_OK;
    if (s->kind != FG_LIST_BLOOM)
        return fg_set_error(err, FG_CODE_INVALID, "ERR %s takes EXACT or BLOOM error capacity",
                            rule);
    if (!isfinite(s->error))
        return fg_set_error(err, FG_CODE_INVALID, "ERR error must be a number");
    if (!(s->error >= FG_BLOOM_MIN_ERROR && s->error < 1))
        return fg_set_error(err, FG_CODE_INVALID,
                            "ERR error must be at least 1e-09 and less than 1");
    if (!fg_param_integer(s->capacity, "capacity", 1, FG_BLOOM_MAX_CAPACITY, msg, sizeof(msg)))
        return fg_set_error(err, FG_CODE_INVALID, "%s", msg);
    return FG_CODE_OK;
}

fg_code fg_policy_def_convert(const fg_policy_def *def, fg_policy_rules *out, fg_error *err) {
    if (def->nlimits < 1 || def->nlimits > FG_MAX_POLICY_LIMITS)
        return fg_set_error(err, FG_CODE_INVALID, "%s", ERR_NLIMITS);
    memset(out, 0, sizeof(*out));
    out->nlimits = (uint32_t)def->nlimits;
    for (size_t i = 0; i < def->nlimits; i++)
        if (fg_policy_limit_convert(&def->limits[i], &out->limits[i], err) != FG_CODE_OK)
            return FG_CODE_INVALID;
    if (fg_policy_penalty_convert(def->ban_ms, def->ban_after, def->ban_within_ms, &out->penalty,
                                  err) != FG_CODE_OK ||
        fg_list_spec_check(&def->allowlist, "ALLOWLIST", err) != FG_CODE_OK ||
        fg_list_spec_check(&def->denylist, "DENYLIST", err) != FG_CODE_OK)
        return FG_CODE_INVALID;
    out->shadow = def->shadow;
    return FG_CODE_OK;
}

fg_code fg_policy_request_check(int64_t cost, bool waits, int64_t timeout_ms, fg_error *err) {
    char msg[MSG_MAX];
    if (!fg_param_integer(cost, "COST", 0, INT64_MAX, msg, sizeof(msg)) ||
        (waits &&
         !fg_param_integer(timeout_ms, "WAIT", 1, FG_POLICY_MAX_WAIT_MS, msg, sizeof(msg))))
        return fg_set_error(err, FG_CODE_INVALID, "%s", msg);
    return FG_CODE_OK;
}

/* --------------------------------------------------------------- lists */

typedef struct item {
    fg_key_node node; /* first: a node is its item */
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
    if (s->kind == FG_LIST_EXACT) return FG_CODE_OK;
    if (fg_bloom_init(&l->bloom, s->error, (uint64_t)s->capacity, BLOOM_EXPANSION, &fg_bf_heap) ==
        FG_OK)
        return FG_CODE_OK;
    return fg_set_error(err, FG_CODE_INVALID, "%s", ERR_NO_LIST);
}

static void item_free(fg_key_node *n) {
    free(n);
}

static void list_free(list *l) {
    fg_key_table_clear(&l->exact, item_free);
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
    item *it = malloc(sizeof(*it) + len);
    if (it == NULL) return -1;
    if (len > 0) memcpy(it->bytes, bytes, len);
    it->node = (fg_key_node){NULL, hash, len, it->bytes};
    if (!fg_key_table_insert(&l->exact, &it->node)) {
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
                                    "ERR the Bloom list cannot grow: not enough memory");
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
    int64_t allowed, denied, banned, shadow_denied, waited;
} policy;

/* A blocked request, on its own thread's stack. */
typedef struct waiter {
    struct waiter *next;
    pthread_cond_t wake;
} waiter;

typedef struct entry {
    struct entry *next; /* in its bucket */
    uint64_t hash;
    bool has_state;
    int64_t expires_us;                  /* has_state: when the state is neutral again */
    char policy[FG_POLICY_NAME_MAX + 1]; /* has_state: whose state it is */
    fg_policy_state state;
    waiter *head, *tail; /* the queue, oldest first */
    size_t keylen;
    char key[];
} entry;

struct fg_mem_policies {
    pthread_mutex_t mu; /* guards everything below but the clock */
    int64_t (*clock_us)(void *arg);
    void *clock_arg;
    policy *policies;
    entry **buckets;
    size_t nbuckets; /* a power of two */
    size_t count;
    size_t queues; /* entries with waiters */
    size_t sweep_at;
    uint64_t checks;
};

static int64_t clock_now(const fg_mem_policies *m) {
    if (m->clock_us) return m->clock_us(m->clock_arg);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

fg_mem_policies *fg_mem_policies_new(int64_t (*clock_us)(void *arg), void *clock_arg) {
    fg_mem_policies *m = calloc(1, sizeof(*m));
    if (m == NULL || (m->buckets = calloc(MIN_BUCKETS, sizeof(entry *))) == NULL) {
        free(m);
        return NULL;
    }
    m->nbuckets = MIN_BUCKETS;
    m->clock_us = clock_us;
    m->clock_arg = clock_arg;
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
    for (size_t b = 0; b < m->nbuckets; b++)
        for (entry *e = m->buckets[b], *next; e != NULL; e = next) {
            next = e->next;
            free(e);
        }
    free(m->buckets);
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
    return fg_set_error(err, FG_CODE_INVALID, "ERR no such policy '%s'", name);
}

static entry *find_entry(const fg_mem_policies *m, const char *key, size_t len, uint64_t hash) {
    for (entry *e = m->buckets[hash & (m->nbuckets - 1)]; e != NULL; e = e->next)
        if (e->hash == hash && e->keylen == len && memcmp(e->key, key, len) == 0) return e;
    return NULL;
}

/* Doubles the buckets when the table holds as many entries; a failure to
 * grow only makes chains longer. */
static void grow(fg_mem_policies *m) {
    if (m->count < m->nbuckets) return;
    size_t n = m->nbuckets * 2;
    entry **fresh = calloc(n, sizeof(*fresh));
    if (fresh == NULL) return;
    for (size_t b = 0; b < m->nbuckets; b++)
        for (entry *e = m->buckets[b], *next; e != NULL; e = next) {
            next = e->next;
            e->next = fresh[e->hash & (n - 1)];
            fresh[e->hash & (n - 1)] = e;
        }
    free(m->buckets);
    m->buckets = fresh;
    m->nbuckets = n;
    m->sweep_at = 0;
}

static entry *add_entry(fg_mem_policies *m, const char *key, size_t len, uint64_t hash) {
    entry *e = calloc(1, sizeof(*e) + len);
    if (e == NULL) return NULL;
    grow(m);
    e->hash = hash;
    e->keylen = len;
    memcpy(e->key, key, len);
    entry **head = &m->buckets[hash & (m->nbuckets - 1)];
    e->next = *head;
    *head = e;
    m->count++;
    return e;
}

static void remove_entry(fg_mem_policies *m, entry *e) {
    entry **at = &m->buckets[e->hash & (m->nbuckets - 1)];
    while (*at != e)
        at = &(*at)->next;
    *at = e->next;
    m->count--;
    free(e);
}

static bool live(const entry *e, int64_t now) {
    return e != NULL && e->has_state && e->expires_us > now;
}

/* Drops an entry that holds nothing that matters at now. */
static void drop_if_idle(fg_mem_policies *m, entry *e, int64_t now) {
    if (e->head == NULL && !live(e, now)) remove_entry(m, e);
}

/* Examines a few buckets from where the last sweep stopped. */
static void sweep(fg_mem_policies *m, int64_t now) {
    if (++m->checks % SWEEP_EVERY != 0) return;
    for (size_t i = 0; i < SWEEP_BUCKETS; i++) {
        m->sweep_at = (m->sweep_at + 1) & (m->nbuckets - 1);
        for (entry *e = m->buckets[m->sweep_at], *next; e != NULL; e = next) {
            next = e->next;
            drop_if_idle(m, e, now);
        }
    }
}

/* Wakes the head of every queue: something they depend on changed. */
static void wake_heads(fg_mem_policies *m) {
    for (size_t b = 0; m->queues > 0 && b < m->nbuckets; b++)
        for (entry *e = m->buckets[b]; e != NULL; e = e->next)
            if (e->head != NULL) pthread_cond_signal(&e->head->wake);
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
typedef struct request {
    const char *name;
    const char *key;
    size_t keylen;
    uint64_t hash;
    const char *identity;
    size_t idlen;
    int64_t cost;
} request;

typedef enum verdict { BY_LIST, BY_STATE } verdict;

/* A decision taken and not yet applied (the module's evaluation):
 * commit() stores its state and counts it. */
typedef struct outcome {
    verdict kind;
    policy *p;
    bool allowlisted;     /* BY_LIST */
    bool rescaled;        /* BY_STATE: carrying the key's state over changed it */
    fg_policy_state carried; /* BY_STATE: the state decided on */
    fg_policy_decision d;    /* BY_STATE */
    fg_policy_state next;    /* BY_STATE */
    int64_t now, cost;
} outcome;

/* Decides r at now against the key's entry e (NULL: none), changing
 * nothing: the lists, then the key's state carried over to the rules. */
static fg_code decide(fg_mem_policies *m, const entry *e, const request *r, int64_t now, outcome *o,
                      fg_error *err) {
    memset(o, 0, sizeof(*o));
    o->now = now;
    o->cost = r->cost;
    policy *p = o->p = find_policy(m, r->name, NULL);
    if (p == NULL) return no_such_policy(r->name, err);
    bool denied = list_has(&p->deny, r->identity, r->idlen);
    if (denied || list_has(&p->allow, r->identity, r->idlen)) {
        o->kind = BY_LIST;
        o->allowlisted = !denied;
        return FG_CODE_OK;
    }
    if (live(e, now)) {
        if (strcmp(e->policy, r->name) != 0)
            return fg_set_error(err, FG_CODE_INVALID, "ERR key holds the state of policy '%s'",
                                e->policy);
        o->rescaled = fg_policy_rescale(&e->state, &p->rules, now, &o->carried);
    } else {
        fg_policy_state_init(&o->carried, &p->rules);
    }
    if (fg_policy_decide(&o->carried, &p->rules, now, r->cost, &o->d, &o->next) != FG_OK)
        return fg_set_error(err, FG_CODE_INVALID, "%s", ERR_OVERFLOW);
    o->kind = BY_STATE;
    return FG_CODE_OK;
}

static fg_policy_result answer_of(const outcome *o) {
    fg_policy_result a = {.result = {.retry_after_ms = -1, .source = FG_SOURCE_MEMORY}};
    if (o->kind == BY_LIST) {
        a.result.allowed = o->allowlisted;
        a.decided_by = o->allowlisted ? FG_BY_ALLOWLIST : FG_BY_DENYLIST;
        return a;
    }
    const fg_policy_decision *d = &o->d;
    a.result.allowed = d->allowed;
    a.result.limit = d->d.limit;
    a.result.remaining = d->d.remaining;
    a.result.retry_after_ms = d->allowed ? -1 : fg_ns_to_ms_ceil(d->d.retry_after_ns);
    a.result.reset_after_ms = fg_ns_to_ms_ceil(d->d.reset_after_ns);
    a.shadow_denied = d->shadow_denied;
    a.decided_by = d->decided_by == FG_POLICY_BY_PENALTY ? FG_BY_PENALTY : FG_BY_LIMIT;
    a.limit_index = d->decided_by == FG_POLICY_BY_PENALTY ? 0 : (int)d->limit_index;
    return a;
}

static void count(const outcome *o) {
    policy *p = o->p;
    bool allowed = o->kind == BY_LIST ? o->allowlisted : o->d.allowed;
    if (allowed)
        p->allowed++;
    else
        p->denied++;
    if (o->kind == BY_STATE) {
        p->shadow_denied += o->d.shadow_denied;
        p->banned += o->d.banned_now;
    }
}

/* Makes o the final answer: the key's state stored when it changed (the
 * entry made when needed, dropped when neither a live state nor waiters
 * remain), the answer counted. *e is the key's entry, or NULL. */
static fg_code commit(fg_mem_policies *m, entry **e, const request *r, const outcome *o,
                      fg_policy_result *out, fg_error *err) {
    if (o->kind == BY_STATE && (o->rescaled || o->d.changed)) {
        int64_t expires = fg_policy_expires_at_us(&o->next, &o->p->rules);
        bool keep = expires > o->now;
        if (*e == NULL && keep && (*e = add_entry(m, r->key, r->keylen, r->hash)) == NULL)
            return fg_set_error(err, FG_CODE_NOMEM, "%s", ERR_NOMEM);
        if (*e != NULL) {
            (*e)->has_state = keep;
            (*e)->expires_us = expires;
            (*e)->state = o->next;
            strcpy((*e)->policy, r->name);
            if ((*e)->head == NULL && !keep) {
                remove_entry(m, *e);
                *e = NULL;
            }
        }
    }
    count(o);
    *out = answer_of(o);
    return FG_CODE_OK;
}

/* A check that does not wait: decided and applied at once, ahead of the
 * key's waiters, whose head then looks again (the clock may have moved). */
static fg_code check_now(fg_mem_policies *m, const request *r, int64_t now, fg_policy_result *out,
                         fg_error *err) {
    entry *e = find_entry(m, r->key, r->keylen, r->hash);
    outcome o;
    fg_code rc = decide(m, e, r, now, &o, err);
    if (rc == FG_CODE_OK) rc = commit(m, &e, r, &o, out, err);
    if (e != NULL && e->head != NULL) pthread_cond_signal(&e->head->wake);
    return rc;
}

/* --------------------------------------------------------------- waiting */

static void cond_init_monotonic(pthread_cond_t *c) {
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(c, &attr);
    pthread_condattr_destroy(&attr);
}

static void sleep_until(pthread_cond_t *c, pthread_mutex_t *mu, int64_t until) {
    struct timespec ts = {(time_t)(until / 1000000), (long)(until % 1000000) * 1000};
    pthread_cond_timedwait(c, mu, &ts);
}

/* How long a denied request would wait (-1: never), as the module has it:
 * a denial that would ban waits for its limits alone. */
static int64_t wait_ns(const outcome *o) {
    return fg_policy_wait_ns(&o->carried, &o->p->rules, o->now, o->cost, &o->d);
}

/* Whether a request that may wait does: denied by its limits or the
 * penalty box with a wait within its timeout, or allowed while others
 * wait ahead of it (it must not overtake them). */
static bool should_wait(const outcome *o, bool queued_ahead, int64_t cost, int64_t timeout_ms) {
    if (o->kind != BY_STATE) return false;
    if (o->d.allowed) return queued_ahead && !o->d.shadow_denied && cost > 0;
    int64_t ns = wait_ns(o);
    return ns >= 0 && fg_ns_to_ms_ceil(ns) <= timeout_ms;
}

/* Whether a head's decision lets it wait on: a denial by its limits or the
 * penalty box that may end by deadline (the decision's clock); *wake is
 * then when. */
static bool waits_on(const outcome *o, int64_t deadline, int64_t *wake) {
    if (o->kind != BY_STATE || o->d.allowed) return false;
    int64_t ns = wait_ns(o);
    if (ns < 0) return false;
    *wake = o->now + ns / FG_NS_PER_US + (ns % FG_NS_PER_US > 0);
    return *wake <= deadline;
}

/* A blocked request and its deadlines: on the decisions' clock (whether to
 * wait on) and on the monotonic one (when to give up). */
typedef struct waiting {
    waiter w;
    entry *e;
    const request *r;
    int64_t deadline, deadline_mono;
} waiting;

static void enqueue(fg_mem_policies *m, waiting *q) {
    entry *e = q->e;
    q->w.next = NULL;
    if (e->head == NULL) {
        e->head = &q->w;
        m->queues++;
    } else {
        e->tail->next = &q->w;
    }
    e->tail = &q->w;
}

/* Takes the waiter out of its queue (it was answered or gave up): the
 * next one may go now. */
static void leave(fg_mem_policies *m, waiting *q, int64_t now) {
    entry *e = q->e;
    waiter **at = &e->head, *prev = NULL;
    while (*at != &q->w) {
        prev = *at;
        at = &(*at)->next;
    }
    *at = q->w.next;
    if (e->tail == &q->w) e->tail = prev;
    if (e->head == NULL) {
        m->queues--;
        drop_if_idle(m, e, now);
    } else if (prev == NULL) {
        pthread_cond_signal(&e->head->wake);
    }
}

/* The final answer at the deadline: the head is decided as it stands; a
 * waiter behind others is denied as a check would be, or, when its request
 * would fit but earlier waiters come first, denied with retry_after_ms 0,
 * charged nothing and stored nothing. */
static fg_code at_deadline(fg_mem_policies *m, waiting *q, fg_policy_result *out, fg_error *err) {
    int64_t now = clock_now(m);
    bool head = q->e->head == &q->w;
    outcome o;
    fg_code rc = decide(m, q->e, q->r, now, &o, err);
    if (rc == FG_CODE_OK && !head && o.kind == BY_STATE && o.d.allowed && !o.d.shadow_denied &&
        q->r->cost > 0) {
        o.p->denied++;
        *out = answer_of(&o);
        out->result.allowed = false;
        out->result.retry_after_ms = 0;
    } else if (rc == FG_CODE_OK) {
        rc = commit(m, &q->e, q->r, &o, out, err);
    }
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
        if (q->e->head == &q->w) {
            outcome o;
            int64_t now = clock_now(m), wake;
            fg_code rc = decide(m, q->e, q->r, now, &o, err);
            if (rc != FG_CODE_OK || !waits_on(&o, q->deadline, &wake)) {
                if (rc == FG_CODE_OK) rc = commit(m, &q->e, q->r, &o, out, err);
                leave(m, q, now);
                return rc;
            }
            if (wake - now < q->deadline_mono - mono) until = mono + (wake - now);
        }
        sleep_until(&q->w.wake, &m->mu, until);
    }
}

/* fg_policy_acquire: answered at once unless should_wait(); then in the
 * key's queue. */
static fg_code check_waiting(fg_mem_policies *m, const request *r, int64_t timeout_ms, int64_t now,
                             fg_policy_result *out, fg_error *err) {
    waiting q = {.r = r,
                 .deadline = now + timeout_ms * 1000,
                 .deadline_mono = fg_monotonic_us() + timeout_ms * 1000};
    entry *e = find_entry(m, r->key, r->keylen, r->hash);
    outcome o;
    fg_code rc = decide(m, e, r, now, &o, err);
    if (rc != FG_CODE_OK) return rc;
    if (!should_wait(&o, e != NULL && e->head != NULL, r->cost, timeout_ms))
        return commit(m, &e, r, &o, out, err);
    if (e == NULL && (e = add_entry(m, r->key, r->keylen, r->hash)) == NULL)
        return fg_set_error(err, FG_CODE_NOMEM, "%s", ERR_NOMEM);
    q.e = e;
    cond_init_monotonic(&q.w.wake);
    enqueue(m, &q);
    o.p->waited++;
    rc = wait_in_queue(m, &q, out, err);
    pthread_cond_destroy(&q.w.wake);
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
        if (e->head != NULL)
            pthread_cond_signal(&e->head->wake);
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
        *out = (fg_policy_info){p->def,    p->allow.entries, p->deny.entries,  p->allowed,
                                p->denied, p->banned,        p->shadow_denied, p->waited};
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
