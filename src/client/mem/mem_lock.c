/*
 * mem_lock.c - locks, semaphores and multi-key locks in process (mem:), with
 * the module's semantics (docs/locks.md, src/module/t_lock.c): the same core
 * decides (src/core/lock.c), lock.c refuses bad input with the module's
 * messages, and the calls answer what the server would.
 *
 * The table is a key table (key_table.h) of entries, one per key: the key's
 * holders (a core state) and the FIFO queue of the calls waiting for it. An
 * entry lives while it has holders or waiters or a call is using it (its
 * pins); the last of those to go frees it. One mutex guards the whole table
 * of a client. That is the simple choice rather than the fast one: a call
 * holds it for a hash probe and an O(log holders) decision, but calls on
 * unrelated keys do take turns, where the rate limits' table (mem_store.c)
 * is sharded. Sharding would pay off little here: a multi-key waiter sits
 * in several queues at once, and granting it must see all of them.
 *
 * Time. Leases run by the client's clock (opts.clock_us, microseconds), read
 * once per decision; as in the module, the holders whose lease has ended
 * are pruned before any decision on a key, and a prune serves the key's
 * queue.
 *
 * Waiting. A call that may wait (wait_ms != 0) and is refused joins the
 * queue of each of its keys (core/wait_queue.h: the order and the rules of
 * serving are the core's, as in the module) and blocks on a condition
 * variable of its own. Whatever frees a key serves its queue at once, in
 * the thread that freed it; a granted waiter is told through its
 * condition variable. There is no server timer to notice a lease running
 * out, so a waiting thread sleeps at most until the soonest lease end
 * among its keys (the client's clock converted to the monotonic one when
 * it goes to sleep), then prunes and serves its keys itself: a queue of n
 * waiters costs n wake-ups per lease end, nothing for one process. A clock
 * moved by hand is seen at the next call on the key or the next wake-up.
 * wait_ms is counted on the monotonic clock, like the module's timer.
 *
 * Renewal is renewal.c's thread, as on a server, started with the first
 * renewed grant; it extends through the table (extend_here), under the
 * table's mutex, instead of sending FG.EXTEND. A release marks its keys
 * released in the renewal thread while it holds the mutex, so a renewal
 * that finds a key gone always knows whether the client released it. There
 * is no I/O to fail: on_lost is called with FG_LOST_NOT_HELD (the lease ran
 * out anyway: the thread was starved past it, or an injected clock jumped)
 * or FG_LOST_RENEW_LIMIT, never FG_LOST_UNREACHABLE.
 *
 * Tokens come from one counter per table through fg_lock_next_token, so
 * they are floored by the clock and refused at the ceiling (a grant then
 * fails with the server's "ERR no fencing token left") as the server's are.
 *
 * Unlike a server: lock keys are apart from the rate limits' keys (a lock
 * named like a limit is no WRONGTYPE), there is no durable mode (no
 * replicas: FG_CODE_UNSUPPORTED), and nothing outlives the client.
 */
#include "mem_lock.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "checked.h"
#include "monotonic.h"
#include "error.h"
#include "key_table.h"
#include "lock.h"
#include "messages.h"
#include "wait_queue.h"
#include "renewal.h"

#define MULTI_MAX   FG_WAIT_MAX_QUEUES /* keys of one multi-key lock */
#define NEVER       FG_MONOTONIC_NEVER

static const fg_allocator heap = {realloc, free};

static const char ERR_NOMEM[] = "out of memory";
static const char ERR_NO_TOKEN[] = FG_ERR_LOCK_NO_TOKEN;
static const char ERR_WRONGTYPE[] = FG_ERR_WRONGTYPE;

typedef struct entry {
    fg_lock_state state;
    fg_wait_queue queue;
    uint32_t pins; /* calls using the entry: it is not freed while > 0 */
    uint32_t keylen;
    char key[];
} entry;

/* A blocked call, on its own thread's stack; req.owner is the caller's. */
typedef struct waiter {
    fg_waiter base;
    fg_lock_request req;
    pthread_cond_t wake;
    bool done;
    fg_code rc;
    const char *why; /* rc != FG_CODE_OK: the message */
    fg_lock_grant grant;
    fg_wait_link links[MULTI_MAX];
} waiter;

struct fg_mem_locks {
    pthread_mutex_t mu; /* guards everything below but the clock */
    int64_t (*clock_us)(void *arg);
    void *clock_arg;
    fg_key_table table;
    uint64_t last_token;
    fg_renewal *renewal; /* started with the first renewed grant */
};

/* ------------------------------------------------------------ small parts */

static int64_t clock_now(const fg_mem_locks *m) {
    return fg_clock_us(m->clock_us, m->clock_arg);
}

/* The monotonic time at which the client's clock reads at_us, if it keeps
 * pace with real time from now on. */
static int64_t monotonic_at(int64_t at_us, int64_t now_us, int64_t mono_us) {
    if (at_us <= now_us) return mono_us;
    uint64_t left = (uint64_t)at_us - (uint64_t)now_us;
    return left >= (uint64_t)(NEVER - mono_us) ? NEVER : mono_us + (int64_t)left;
}

static fg_code nomem(fg_error *err) {
    return fg_set_error(err, FG_CODE_NOMEM, "%s", ERR_NOMEM);
}

/* The code of a core message, as the client maps the server's reply. */
static fg_code code_of(const char *why) {
    if (why == ERR_NOMEM) return FG_CODE_NOMEM;
    return strncmp(why, "WRONGTYPE", 9) == 0 ? FG_CODE_WRONGTYPE : FG_CODE_INVALID;
}

static fg_code refuse(const char *why, fg_error *err) {
    return fg_set_error(err, code_of(why), "%s", why);
}

/* FG_CODE_OK when why is NULL, else refuse(why). */
static fg_code refused_if(const char *why, fg_error *err) {
    return why == NULL ? FG_CODE_OK : refuse(why, err);
}

/* lock.c checked the arguments as the module does; durability is ours. */
static fg_code check_not_durable(const fg_lock_options *o, fg_error *err) {
    if (o->durable_replicas == 0) return FG_CODE_OK;
    return fg_set_error(err, FG_CODE_UNSUPPORTED,
                        "durable mode waits for replicas: mem: has no replicas");
}

/* ------------------------------------------------------------- the table */

static void entry_free(void *p) {
    entry *e = p;
    fg_lock_clear(&e->state, &heap);
    free(e);
}

/* The entry of key, pinned, or NULL when there is none (make: a new one,
 * NULL only when out of memory). */
static entry *entry_pin(fg_mem_locks *m, const char *key, bool make) {
    size_t len = strlen(key);
    uint64_t hash = fg_key_hash(key, len);
    entry *e = fg_key_table_find(&m->table, hash, key, len);
    if (e == NULL && make && (e = fg_key_entry_new(&m->table, sizeof(*e), key, len)) != NULL) {
        if (!fg_key_table_insert(&m->table, hash, e)) {
            free(e);
            e = NULL;
        }
    }
    if (e != NULL) e->pins++;
    return e;
}

/* Frees e when nothing keeps it: no holder, no waiter, no call, and not in
 * a serving round. */
static void entry_settle(fg_mem_locks *m, entry *e) {
    if (e->pins > 0 || e->queue.pending || e->state.len > 0 || fg_wait_busy(&e->queue)) return;
    fg_key_table_remove(&m->table, fg_key_hash(e->key, e->keylen), e);
    fg_key_table_shrink(&m->table);
    entry_free(e);
}

static void entry_unpin(fg_mem_locks *m, entry *e) {
    e->pins--;
    entry_settle(m, e);
}

/* Removes the holders whose lease has ended by now. */
static bool prune(entry *e, int64_t now) {
    if (e->state.len == 0 || fg_lock_next_expiry_us(&e->state) > now) return false;
    return fg_lock_prune(&e->state, now, NULL, NULL, &heap) > 0;
}

static bool kind_differs(const entry *e, uint8_t kind) {
    return e->state.len > 0 && e->state.kind != kind;
}

/* The next fencing token, or 0 when none is left (the counter is kept). */
static uint64_t take_token(fg_mem_locks *m, int64_t now) {
    uint64_t token = fg_lock_next_token(m->last_token, now);
    if (token != 0) m->last_token = token;
    return token;
}

/* Puts the holder of a GRANTED or REENTERED decision (a grant takes a fresh
 * token) and describes the grant. NULL, or why nothing changed: no memory
 * (ERR_NOMEM) or no token left. */
static const char *put_holder(fg_mem_locks *m, entry *e, const fg_lock_request *r,
                              fg_lock_decision *d, int64_t now, fg_lock_grant *out) {
    if (d->outcome == FG_LOCK_GRANTED) {
        d->holder.token = take_token(m, now);
        if (d->holder.token == 0) return ERR_NO_TOKEN;
    }
    if (fg_lock_put(&e->state, r->kind, r->capacity, &d->holder, &heap) != FG_OK)
        return ERR_NOMEM;
    *out = (fg_lock_grant){true, d->holder.token, fg_lock_ttl_ms(d->holder.expires_us, now),
                           d->holder.count};
    return NULL;
}

/* Puts the exclusive holder h (decided free on every key) into all n
 * entries with one token; NULL, or why nothing changed, as put_holder. */
static const char *put_everywhere(fg_mem_locks *m, entry *const *es, size_t n,
                                  const fg_lock_holder *h, int64_t now, fg_lock_grant *out) {
    fg_lock_holder put = *h;
    put.token = take_token(m, now);
    if (put.token == 0) return ERR_NO_TOKEN;
    for (size_t i = 0; i < n; i++)
        if (fg_lock_put(&es[i]->state, FG_LOCK_KIND_LOCK, 0, &put, &heap) != FG_OK) {
            while (i-- > 0)
                fg_lock_release(&es[i]->state, put.owner, put.owner_len, 0, &heap);
            return ERR_NOMEM;
        }
    *out = (fg_lock_grant){true, put.token, fg_lock_ttl_ms(put.expires_us, now), (int64_t)n};
    return NULL;
}

/* ---------------------------------------------------------------- queues */

static entry *entry_of(const fg_wait_link *l) {
    return fg_wait_container(l->queue, entry, queue);
}

static waiter *waiter_at(fg_waiter *w) {
    return fg_wait_container(w, waiter, base);
}

/* Tells a waiter its answer (g: a grant, else rc and why); it leaves its
 * queues, and its thread returns once it has the mutex again. */
static void waiter_finish(waiter *w, fg_code rc, const char *why, const fg_lock_grant *g) {
    fg_waiter_leave(&w->base);
    w->done = true;
    w->rc = rc;
    w->why = why;
    if (g != NULL) w->grant = *g;
    pthread_cond_signal(&w->wake);
}

/* Makes the waiters of e look at their leases again. */
static void wake_queue(entry *e) {
    for (fg_wait_link *l = e->queue.head; l != NULL; l = l->next)
        pthread_cond_signal(&waiter_at(l->waiter)->wake);
}

/* --------------------------------------------------------------- serving */

/* Tries the single-key waiter at the head of e. False when it must wait. */
static bool serve_single(fg_mem_locks *m, entry *e, waiter *w, int64_t now) {
    prune(e, now);
    fg_lock_request req = w->req;
    req.queued_ahead = false;
    fg_lock_decision d;
    fg_lock_decide(&e->state, &req, now, &d);
    if (d.outcome == FG_LOCK_BUSY) return false;
    fg_lock_grant g;
    const char *why = d.outcome == FG_LOCK_NEVER ? d.why : put_holder(m, e, &req, &d, now, &g);
    if (why != NULL)
        waiter_finish(w, code_of(why), why, NULL);
    else
        waiter_finish(w, FG_CODE_OK, NULL, &g);
    return true;
}

/* The states of a multi-key request's entries (pruned by now), and
 * whether someone waits for each (NULL: not asked). */
static void states_of(entry *const *es, size_t n, int64_t now, const fg_lock_state **states,
                      bool *queued) {
    for (size_t i = 0; i < n; i++) {
        prune(es[i], now);
        states[i] = &es[i]->state;
        if (queued != NULL) queued[i] = fg_wait_busy(&es[i]->queue);
    }
}

/* A multi-key waiter, at the head of every one of its queues, is granted
 * when every key is free (all keys, one token), and fails when a key can
 * never be granted, as it would have failed at once. */
static bool serve_multi(fg_mem_locks *m, waiter *w, int64_t now) {
    entry *es[MULTI_MAX];
    const fg_lock_state *states[MULTI_MAX];
    size_t n = w->base.nlinks;
    for (size_t i = 0; i < n; i++)
        es[i] = entry_of(&w->links[i]);
    states_of(es, n, now, states, NULL);
    fg_lock_decision d;
    fg_lock_decide_all(states, NULL, n, &w->req, now, &d);
    if (d.outcome == FG_LOCK_BUSY) return false;
    fg_lock_grant g;
    const char *error =
        d.outcome == FG_LOCK_NEVER ? d.why : put_everywhere(m, es, n, &d.holder, now, &g);
    if (error != NULL)
        waiter_finish(w, code_of(error), error, NULL);
    else
        waiter_finish(w, FG_CODE_OK, NULL, &g);
    return true;
}

static bool try_head(fg_wait_queue *q, fg_waiter *head, const fg_wait_serving *s) {
    waiter *w = waiter_at(head);
    return w->base.nlinks > 1 ? serve_multi(s->arg, w, s->now_us)
                              : serve_single(s->arg, fg_wait_container(q, entry, queue), w, s->now_us);
}

static void settle_entry(fg_wait_queue *q, const fg_wait_serving *s) {
    entry_settle(s->arg, fg_wait_container(q, entry, queue));
}

/* Serves the queues of es[0..n), and every queue a multi-key waiter leaves. */
static void serve(fg_mem_locks *m, entry *const *es, size_t n, int64_t now) {
    fg_wait_queue *qs[MULTI_MAX];
    for (size_t i = 0; i < n; i++)
        qs[i] = &es[i]->queue;
    fg_wait_serving serving = {try_head, settle_entry, m, now};
    fg_wait_serve(qs, n, &serving);
}

/* What a lease running out by now changes: the holders go, and the waiters
 * that now fit are granted. */
static void prune_and_serve(fg_mem_locks *m, entry *e, int64_t now) {
    if (prune(e, now) && fg_wait_busy(&e->queue)) serve(m, &e, 1, now);
}

/* ---------------------------------------------------------------- waiting */

/* The soonest lease end among the keys, on the monotonic clock. */
static int64_t next_lease_end(const fg_mem_locks *m, entry *const *es, size_t n) {
    int64_t now = clock_now(m), mono = fg_monotonic_us(), soonest = NEVER;
    for (size_t i = 0; i < n; i++)
        if (es[i]->state.len > 0)
            soonest =
                fg_min(soonest, monotonic_at(fg_lock_next_expiry_us(&es[i]->state), now, mono));
    return soonest;
}

/* The soonest the request could be granted, as a timed-out WAIT answers. */
static int64_t retry_ms(const fg_lock_request *r, entry *const *es, size_t n, int64_t now) {
    int64_t until = 0;
    for (size_t i = 0; i < n; i++)
        until = fg_max(until, fg_lock_busy_until(&es[i]->state, r, now));
    return fg_lock_ttl_ms(until, now);
}

/* Queues the request on the (pinned) entries and blocks until it is
 * answered or wait_ms (-1: no limit) passed. Every wake-up prunes the keys
 * and serves them: a lease that ran out may have freed one. */
static fg_code wait_for_grant(fg_mem_locks *m, entry *const *es, size_t n, const fg_lock_request *r,
                              int64_t wait_ms, fg_lock_grant *out, fg_error *err) {
    waiter w;
    w.req = *r;
    w.done = false;
    fg_cond_init_monotonic(&w.wake);
    fg_wait_queue *qs[MULTI_MAX];
    for (size_t i = 0; i < n; i++)
        qs[i] = &es[i]->queue;
    fg_waiter_join(&w.base, w.links, qs, (uint32_t)n);
    int64_t deadline = wait_ms < 0 ? NEVER : fg_monotonic_us() + wait_ms * 1000;
    while (!w.done) {
        fg_sleep_until(&w.wake, &m->mu, fg_min(deadline, next_lease_end(m, es, n)));
        int64_t now = clock_now(m);
        for (size_t i = 0; i < n && !w.done; i++)
            prune_and_serve(m, es[i], now);
        if (w.done || fg_monotonic_us() < deadline) continue;
        fg_lock_grant timeout = {false, 0, retry_ms(r, es, n, now), 0};
        waiter_finish(&w, FG_CODE_OK, NULL, &timeout);
        serve(m, es, n, now); /* those behind it may fit now */
    }
    pthread_cond_destroy(&w.wake);
    if (w.rc != FG_CODE_OK) return fg_set_error(err, w.rc, "%s", w.why);
    *out = w.grant;
    return FG_CODE_OK;
}

/* --------------------------------------------------------------- renewal */

static bool extend_held(fg_mem_locks *m, const char *key, const char *owner, int64_t lease_us);

/* renewal.c's thread extends through the table, under its mutex. */
static fg_code extend_here(void *arg, const fg_renewal_extension *ext, size_t n, fg_extended *out,
                           int timeout_ms) {
    (void)timeout_ms;
    fg_mem_locks *m = arg;
    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; i < n; i++)
        out[i] = extend_held(m, ext[i].key, ext[i].owner, ext[i].lease_us) ? FG_EXTENDED
                                                                           : FG_NOT_EXTENDED;
    pthread_mutex_unlock(&m->mu);
    return FG_CODE_OK;
}

/* Before a renewed request: the thread, started now if it is not yet, and
 * the registration to keep if the request is granted, so that nothing can
 * fail after the grant. With the mutex. */
static fg_code renewal_prepare(fg_mem_locks *m, const fg_lock_options *o, const char *const *keys,
                               size_t n, const char *owner, fg_renewal_entry **out, fg_error *err) {
    *out = NULL;
    if (!o->renew) return FG_CODE_OK;
    fg_renewal_transport here = {extend_here, m, 0, true};
    if (m->renewal == NULL && (m->renewal = fg_renewal_start_with(&here, err)) == NULL)
        return FG_CODE_NOMEM;
    *out = fg_renewal_prepare(keys, n, owner);
    return *out != NULL ? FG_CODE_OK : nomem(err);
}

/* After the request: g is kept when it was granted, discarded otherwise. */
static void renewal_settle(fg_mem_locks *m, fg_renewal_entry *g, bool granted,
                           const fg_lock_options *o) {
    if (g != NULL && granted)
        fg_renewal_commit(m->renewal, g, fg_monotonic_us(), o);
    else
        fg_renewal_discard(g);
}

/* A release through the client: the keys the owner holds no more are no
 * longer renewed. With the mutex. */
static void renewal_released(fg_mem_locks *m, const char *const *keys, size_t n,
                             const char *owner) {
    if (m->renewal != NULL) fg_renewal_released(m->renewal, keys, n, owner);
}

/* ------------------------------------------------------------- acquiring */

/* FG.LOCK or FG.ACQUIRE on a pruned entry: a grant, an error, or a refusal
 * with *busy_until. */
static fg_code take_one(fg_mem_locks *m, entry *e, fg_lock_request *r, int64_t now,
                        fg_lock_grant *out, int64_t *busy_until, fg_error *err) {
    r->queued_ahead = fg_wait_busy(&e->queue);
    fg_lock_decision d;
    fg_lock_decide(&e->state, r, now, &d);
    switch (d.outcome) {
    case FG_LOCK_GRANTED:
    case FG_LOCK_REENTERED:
        return refused_if(put_holder(m, e, r, &d, now, out), err);
    case FG_LOCK_NEVER: return refuse(d.why, err);
    case FG_LOCK_BUSY: break;
    }
    *busy_until = d.busy_until_us;
    return FG_CODE_OK;
}

/* FG.MLOCK on pruned entries: all keys or none. A key in the way of the
 * request (a holder, or an older waiter) makes it a refusal; a key that can
 * never be granted (a semaphore, the owner's own shared hold) an error. */
static fg_code take_all(fg_mem_locks *m, entry *const *es, size_t n, fg_lock_request *r,
                        int64_t now, fg_lock_grant *out, int64_t *busy_until, fg_error *err) {
    const fg_lock_state *states[MULTI_MAX];
    bool queued[MULTI_MAX];
    states_of(es, n, now, states, queued);
    fg_lock_decision d;
    fg_lock_decide_all(states, queued, n, r, now, &d);
    switch (d.outcome) {
    case FG_LOCK_GRANTED:
    case FG_LOCK_REENTERED: return refused_if(put_everywhere(m, es, n, &d.holder, now, out), err);
    case FG_LOCK_NEVER: return refuse(d.why, err);
    case FG_LOCK_BUSY: break;
    }
    *busy_until = d.busy_until_us;
    return FG_CODE_OK;
}

/* The common path of the three requests that may grant, r to be given its
 * owner and lease (lock.c checked them and the keys). */
static fg_code acquire(fg_mem_locks *m, const char *const *keys, size_t n, bool multi,
                       const char *owner, fg_lock_request *r, const fg_lock_options *o,
                       fg_lock_grant *out, fg_error *err) {
    entry *es[MULTI_MAX];
    size_t pinned = 0;
    fg_renewal_entry *g;
    if (check_not_durable(o, err) != FG_CODE_OK) return FG_CODE_UNSUPPORTED;
    r->owner = owner;
    r->owner_len = strlen(owner);
    r->lease_us = o->lease_ms * 1000;
    *out = (fg_lock_grant){0};
    pthread_mutex_lock(&m->mu);
    fg_code rc = renewal_prepare(m, o, keys, n, r->owner, &g, err);
    for (; rc == FG_CODE_OK && pinned < n; pinned++)
        if ((es[pinned] = entry_pin(m, keys[pinned], true)) == NULL) rc = nomem(err);
    if (rc == FG_CODE_OK) {
        int64_t now = clock_now(m), busy_until = 0;
        for (size_t i = 0; i < n; i++)
            prune_and_serve(m, es[i], now);
        rc = multi ? take_all(m, es, n, r, now, out, &busy_until, err)
                   : take_one(m, es[0], r, now, out, &busy_until, err);
        if (rc == FG_CODE_OK && !out->acquired && o->wait_ms != 0)
            rc = wait_for_grant(m, es, n, r, o->wait_ms, out, err);
        else if (rc == FG_CODE_OK && !out->acquired)
            out->ttl_ms = fg_lock_ttl_ms(busy_until, now);
    }
    while (pinned > 0)
        if (es[--pinned] != NULL) entry_unpin(m, es[pinned]);
    renewal_settle(m, g, rc == FG_CODE_OK && out->acquired, o);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

fg_code fg_mem_lock(fg_mem_locks *m, const char *key, const char *owner, const fg_lock_options *o,
                    fg_lock_grant *out, fg_error *err) {
    fg_lock_request r = {.kind = FG_LOCK_KIND_LOCK,
                         .mode = o->shared ? FG_LOCK_SHARED : FG_LOCK_EXCLUSIVE,
                         .count = 1,
                         .reentrant = o->reentrant};
    return acquire(m, &key, 1, false, owner, &r, o, out, err);
}

fg_code fg_mem_semaphore_acquire(fg_mem_locks *m, const char *key, int64_t capacity,
                                 const char *owner, int64_t permits, const fg_lock_options *o,
                                 fg_lock_grant *out, fg_error *err) {
    fg_lock_request r = {.kind = FG_LOCK_KIND_SEMAPHORE,
                         .mode = FG_LOCK_EXCLUSIVE,
                         .count = permits,
                         .capacity = capacity};
    return acquire(m, &key, 1, false, owner, &r, o, out, err);
}

fg_code fg_mem_lock_multi(fg_mem_locks *m, const char *const *keys, size_t count, const char *owner,
                          const fg_lock_options *o, fg_lock_grant *out, fg_error *err) {
    fg_lock_request r = {.kind = FG_LOCK_KIND_LOCK, .mode = FG_LOCK_EXCLUSIVE, .count = 1};
    return acquire(m, keys, count, true, owner, &r, o, out, err);
}

/* ------------------------------------------------------------ releasing */

/* FG.UNLOCK (count 1) or FG.RELEASE (count permits, 0: all): *left is what
 * the owner still holds, -1 when nothing. */
static fg_code release_one(fg_mem_locks *m, const char *key, uint8_t kind, const char *owner,
                           int64_t count, int64_t *left, fg_error *err) {
    fg_code rc = FG_CODE_OK;
    int64_t held = -1;
    pthread_mutex_lock(&m->mu);
    entry *e = entry_pin(m, key, false);
    if (e != NULL) {
        int64_t now = clock_now(m);
        prune_and_serve(m, e, now);
        if (kind_differs(e, kind))
            rc = refuse(ERR_WRONGTYPE, err);
        else
            held = fg_lock_release(&e->state, owner, strlen(owner), count, &heap);
        /* A semaphore's queue may fit in the permits given back. */
        if (held == 0 || (held > 0 && kind == FG_LOCK_KIND_SEMAPHORE)) serve(m, &e, 1, now);
        entry_unpin(m, e);
    }
    if (rc == FG_CODE_OK && held <= 0) renewal_released(m, &key, 1, owner);
    pthread_mutex_unlock(&m->mu);
    if (rc == FG_CODE_OK && left != NULL) *left = held;
    return rc;
}

fg_code fg_mem_unlock(fg_mem_locks *m, const char *key, const char *owner, int64_t *holds_left,
                      fg_error *err) {
    return release_one(m, key, FG_LOCK_KIND_LOCK, owner, 1, holds_left, err);
}

fg_code fg_mem_semaphore_release(fg_mem_locks *m, const char *key, const char *owner,
                                 int64_t permits, int64_t *permits_left, fg_error *err) {
    return release_one(m, key, FG_LOCK_KIND_SEMAPHORE, owner, permits, permits_left, err);
}

fg_code fg_mem_unlock_multi(fg_mem_locks *m, const char *const *keys, size_t count,
                            const char *owner, int64_t *released, fg_error *err) {
    fg_code rc = FG_CODE_OK;
    entry *es[MULTI_MAX];
    int64_t n = 0;
    pthread_mutex_lock(&m->mu);
    int64_t now = clock_now(m);
    for (size_t i = 0; i < count; i++)
        if ((es[i] = entry_pin(m, keys[i], false)) != NULL) prune_and_serve(m, es[i], now);
    /* Types first, so that an error changes nothing. */
    for (size_t i = 0; i < count && rc == FG_CODE_OK; i++)
        if (es[i] != NULL && kind_differs(es[i], FG_LOCK_KIND_LOCK))
            rc = refuse(ERR_WRONGTYPE, err);
    for (size_t i = 0; i < count && rc == FG_CODE_OK; i++) {
        int64_t left =
            es[i] != NULL ? fg_lock_release(&es[i]->state, owner, strlen(owner), 1, &heap) : -1;
        n += left >= 0;
        if (left == 0) serve(m, &es[i], 1, now);
    }
    for (size_t i = 0; i < count; i++)
        if (es[i] != NULL) entry_unpin(m, es[i]);
    if (rc == FG_CODE_OK) renewal_released(m, keys, count, owner);
    pthread_mutex_unlock(&m->mu);
    if (rc == FG_CODE_OK && released != NULL) *released = n;
    return rc;
}

/* ------------------------------------------------------------- extending */

/* FG.EXTEND's effect: the owner's lease ends lease_us from now. False when
 * the owner holds nothing. With the mutex. */
static bool extend_held(fg_mem_locks *m, const char *key, const char *owner, int64_t lease_us) {
    entry *e = entry_pin(m, key, false);
    if (e == NULL) return false;
    int64_t now = clock_now(m);
    prune_and_serve(m, e, now);
    bool shorter = false;
    bool held = fg_lock_extend(&e->state, owner, strlen(owner), now, lease_us, &shorter) != NULL;
    if (shorter) wake_queue(e); /* their sleep may now be too long */
    entry_unpin(m, e);
    return held;
}

fg_code fg_mem_extend(fg_mem_locks *m, const char *key, const char *owner, int64_t lease_ms,
                      bool *extended, fg_error *err) {
    (void)err;
    pthread_mutex_lock(&m->mu);
    bool held = extend_held(m, key, owner, lease_ms * 1000);
    pthread_mutex_unlock(&m->mu);
    if (extended != NULL) *extended = held;
    return FG_CODE_OK;
}

/* -------------------------------------------------------------- lifecycle */

fg_mem_locks *fg_mem_locks_new(int64_t (*clock_us)(void *arg), void *clock_arg) {
    fg_mem_locks *m = calloc(1, sizeof(*m));
    if (m == NULL) return NULL;
    m->clock_us = clock_us;
    m->clock_arg = clock_arg;
    m->table = FG_KEY_TABLE(entry, keylen, key);
    pthread_mutex_init(&m->mu, NULL);
    return m;
}

void fg_mem_locks_free(fg_mem_locks *m) {
    if (m == NULL) return;
    fg_renewal_stop(m->renewal); /* without the mutex: the thread may wait for it */
    fg_key_table_clear(&m->table, entry_free);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

size_t fg_mem_lock_waiters(fg_mem_locks *m, const char *key) {
    size_t n = 0;
    pthread_mutex_lock(&m->mu);
    entry *e = entry_pin(m, key, false);
    if (e != NULL) {
        n = e->queue.len;
        entry_unpin(m, e);
    }
    pthread_mutex_unlock(&m->mu);
    return n;
}
