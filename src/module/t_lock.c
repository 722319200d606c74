/*
 * t_lock.c - locks, read/write locks, semaphores, multi-key locks and fenced
 * values (docs/locks.md).
 *
 * The state of a lock is the list of its holders (core/lock.c) in an
 * fg-lockst key whose TTL is the latest lease end, so an abandoned lock goes
 * by itself. What this file adds is time and waiting:
 *
 * - Leases end by the master's clock. Before deciding, a command removes the
 *   holders whose lease has ended ("pruning") and replicates each removal as
 *   FG.UNHOLD; a grant replicates the holder it creates as FG.HOLD, with the
 *   absolute lease end and the token. Replicas and AOF replay never read a
 *   clock, and the fencing counter travels inside every FG.HOLD.
 *
 * - Waiting. A request that cannot be granted and may WAIT becomes a blocked
 *   client in the queue of its key (of each key, for FG.MLOCK): the queues
 *   by key and their timers are key_queues.c's, the order and the rules of
 *   serving (strict FIFO, no overtaking, a multi-key waiter only at the
 *   head of all its queues) core/wait_queue.c's.
 *
 * - Hand-off. Whatever frees a lock serves its queue at once, inside the
 *   command that freed it: the head waiters that now fit are granted there
 *   (their holders written and replicated by that command), and their
 *   blocked clients are only told the result.
 *
 * - What frees a lock without a command on it -- a lease running out, DEL,
 *   FLUSHDB, expiry, eviction, a waiter ahead timing out or disconnecting --
 *   is caught by its queue's timer, armed at the key's next lease end, or
 *   armed to fire at once by the keyspace and server events.
 *
 * - A client that cannot block (inside MULTI, a script, RedisModule_Call)
 *   gets the immediate answer instead of waiting.
 *
 * Costs: a command opens its key once; the dict of queues is consulted only
 * when some queue exists. Deciding, putting and removing a holder cost
 * O(log holders) (core/lock.c), so one command that grants k waiters of a
 * key with h holders costs O(k log(h + k)): each grant is one decision, one
 * put, one FG.HOLD and the key's new expiry.
 *
 * Tokens: a grant takes the next token of the server's counter
 * (fg_lock_next_token); when none is left below FG_LOCK_TOKEN_CEILING the
 * grant is refused with ERR_NO_TOKEN rather than given a token already
 * given. FG.HOLD refuses a token at or above the ceiling, so no replicated
 * or replayed holder can push the counter there either.
 */
#include "t_lock.h"

#include <string.h>

#include "../core/checked.h"
#include "../core/lock.h"
#include "../core/messages.h"
#include "args.h"
#include "clock.h"
#include "effects.h"
#include "key_queues.h"
#include "lock_types.h"
#include "memory_limits.h"
#include "write_pause.h"

#define MAX_MLOCK_KEYS 64

static long long stat_grants, stat_waited_grants, stat_timeouts, stat_waiters, stat_expired;

static const char ERR_NO_TOKEN[] = FG_ERR_LOCK_NO_TOKEN;

/* ================================================================ queues */

/* A waiter's timeout is a module timer, not the blocked client's own: on
 * Redis 7.0 a client granted in the same event-loop turn as its blocking
 * timeout would never be answered. */
typedef struct waiter {
    fg_waiter base;
    RedisModuleBlockedClient *bc;
    fg_lock_request req; /* req.owner points to owner */
    char *owner;
    int64_t since_us;
    RedisModuleTimerID deadline;
    bool has_deadline;
    fg_wait_link links[]; /* one per key */
} waiter;

/* What a waiter is told (its blocked client's privdata). */
typedef struct waiter_answer {
    const char *error; /* NULL for a grant or a timeout */
    long long acquired, token, ttl_ms, holds;
} waiter_answer;

static void serve(RedisModuleCtx *ctx, key_queue *q, int64_t now_us);
static void fail_all_waiters(RedisModuleCtx *ctx, key_queue *q, const char *error);

static const key_queue_family lock_queues = {serve, fail_all_waiters};
static key_queues queues;

static key_queue *queue_of(const fg_wait_link *l) {
    return fg_wait_container(l->queue, key_queue, waiters);
}

static waiter *waiter_at(fg_waiter *w) {
    return fg_wait_container(w, waiter, base);
}

static key_queue *queue_find(int dbid, RedisModuleString *key) {
    return key_queue_find(&queues, dbid, key);
}

/* Takes a waiter out of its queues and the handle dict, and frees it. Its
 * queues stay (possibly empty): the caller settles them. */
static void waiter_remove(RedisModuleCtx *ctx, waiter *w) {
    if (w->has_deadline) RedisModule_StopTimer(ctx, w->deadline, NULL);
    fg_waiter_leave(&w->base);
    key_queues_untrack(&queues, w->bc);
    RedisModule_Free(w->owner);
    RedisModule_Free(w);
    stat_waiters--;
}

static waiter *waiter_of(RedisModuleBlockedClient *bc) {
    return key_queues_waiter(&queues, bc);
}

/* Tells a waiter its answer (the reply is written by waiter_reply). The
 * waiter is gone afterwards. */
static waiter_answer *new_answer(const char *error, long long acquired, long long token,
                                 long long ttl_ms, long long holds) {
    waiter_answer *a = RedisModule_Alloc(sizeof(*a));
    *a = (waiter_answer){error, acquired, token, ttl_ms, holds};
    return a;
}

static void waiter_answer_with(RedisModuleCtx *ctx, waiter *w, const char *error,
                               long long acquired, long long token, long long ttl_ms,
                               long long holds) {
    RedisModule_UnblockClient(w->bc, new_answer(error, acquired, token, ttl_ms, holds));
    waiter_remove(ctx, w);
}

static void waiter_fail(RedisModuleCtx *ctx, waiter *w, const char *error) {
    waiter_answer_with(ctx, w, error, 0, 0, 0, 0);
}

static void waiter_grant(RedisModuleCtx *ctx, waiter *w, uint64_t token, long long ttl_ms,
                         long long holds) {
    stat_waited_grants++;
    waiter_answer_with(ctx, w, NULL, 1, (long long)token, ttl_ms, holds);
}

/* ========================================================== replication */

/* A key changed: WATCH sees it, and keyspace subscribers get `event`. */
static void key_changed(RedisModuleCtx *ctx, RedisModuleString *keyname, const char *event) {
    RedisModule_SignalModifiedKey(ctx, keyname);
    RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_MODULE, event, keyname);
}

/* The words of FG.HOLD, made once (lock_commands_created): an argument
 * given as a string costs a reference count where a C string is copied
 * into a new object on every grant. "1" is a lock's capacity and the usual
 * count. */
static RedisModuleString *word_kind[FG_LOCK_KIND_SEMAPHORE + 1], *word_mode[FG_LOCK_SHARED + 1],
    *word_one;

static void create_replication_words(void) {
    for (uint8_t k = FG_LOCK_KIND_LOCK; k <= FG_LOCK_KIND_SEMAPHORE; k++)
        word_kind[k] = RedisModule_CreateString(NULL, lock_kind_name(k), strlen(lock_kind_name(k)));
    for (uint8_t m = FG_LOCK_EXCLUSIVE; m <= FG_LOCK_SHARED; m++)
        word_mode[m] = RedisModule_CreateString(NULL, lock_mode_name(m), strlen(lock_mode_name(m)));
    word_one = RedisModule_CreateString(NULL, "1", 1);
}

/* FG.HOLD key kind capacity owner mode count expires_us token. owner_arg:
 * the client's owner argument when it asked for this hold, which goes out
 * by reference; NULL makes a copy of the holder's. */
static void replicate_hold(RedisModuleCtx *ctx, RedisModuleString *keyname, const fg_lock_state *s,
                           const fg_lock_holder *h, RedisModuleString *owner_arg) {
    number_arg expires, token;
    format_number(&expires, h->expires_us);
    format_number(&token, (int64_t)h->token);
    RedisModuleString *kind = word_kind[s->kind], *mode = word_mode[h->mode];
    RedisModuleString *owner =
        owner_arg ? owner_arg : RedisModule_CreateString(NULL, h->owner, h->owner_len);
    if (s->capacity == 1 && h->count == 1) {
        RedisModule_Replicate(ctx, "FG.HOLD", "ssssssbb", keyname, kind, word_one, owner, mode,
                              word_one, expires.str, expires.len, token.str, token.len);
    } else {
        number_arg capacity, count;
        format_number(&capacity, s->capacity);
        format_number(&count, h->count);
        RedisModule_Replicate(ctx, "FG.HOLD", "ssbssbbb", keyname, kind, capacity.str,
                              capacity.len, owner, mode, count.str, count.len, expires.str,
                              expires.len, token.str, token.len);
    }
    if (!owner_arg) RedisModule_FreeString(NULL, owner);
}

typedef struct prune_ctx {
    RedisModuleCtx *ctx;
    RedisModuleString *keyname;
} prune_ctx;

static void replicate_unhold(const fg_lock_holder *h, void *arg) {
    prune_ctx *p = arg;
    RedisModule_Replicate(p->ctx, "FG.UNHOLD", "sb", p->keyname, h->owner, (size_t)h->owner_len);
    stat_expired++;
}

/* Removes the holders whose lease has ended, replicating each removal. *s
 * becomes NULL when the key went with its last holder. */
static uint32_t prune(RedisModuleCtx *ctx, RedisModuleKey *key, RedisModuleString *keyname,
                      fg_lock_state **s, int64_t now_us) {
    if (!*s || fg_lock_next_expiry_us(*s) > now_us) return 0;
    prune_ctx p = {ctx, keyname};
    uint32_t n = fg_lock_prune(*s, now_us, replicate_unhold, &p, &module_allocator);
    bool emptied = (*s)->len == 0;
    lockstate_settle(key, *s);
    if (emptied) *s = NULL;
    key_changed(ctx, keyname, "fg.leaseend");
    return n;
}

/* The next fencing token, or 0 when none is left (ERR_NO_TOKEN). */
static uint64_t take_token(int64_t now_us) {
    uint64_t token = fg_lock_next_token(fence_last(), now_us);
    fence_raise(token);
    return token;
}

/* Puts a decided holder into the key (creating the state when the key is
 * empty), gives the key its expiry and replicates the holder. *s is updated
 * to the stored state. */
static fg_status store_holder(RedisModuleCtx *ctx, RedisModuleKey *key, RedisModuleString *keyname,
                              fg_lock_state **s, const fg_lock_request *r, const fg_lock_holder *h,
                              RedisModuleString *owner_arg) {
    if (!*s) {
        *s = lockstate_create();
        RedisModule_ModuleTypeSetValue(key, LockStateType, *s);
    }
    fg_status st = fg_lock_put(*s, r->kind, r->capacity, h, &module_allocator);
    if (st == FG_OK) {
        replicate_hold(ctx, keyname, *s, fg_lock_find(*s, h->owner, h->owner_len), owner_arg);
        key_changed(ctx, keyname, "fg.lock");
    }
    bool emptied = (*s)->len == 0; /* the key goes with its last holder */
    lockstate_settle(key, *s);
    if (emptied) *s = NULL;
    return st;
}

/* ============================================================ deciding */

static const fg_lock_state empty_state;

/* A client's request that adds a holder or a waiter grows memory: refused
 * when memory is full, as Redis refuses a deny-oom command. A re-entry,
 * more permits for a holder and a busy answer keep memory and go on. A
 * waiter granted by a release or a timer is never refused: its wait held
 * the memory its hold takes. */
static bool refused_when_full(const fg_lock_decision *d, bool waits) {
    return (d->outcome == FG_LOCK_GRANTED || (d->outcome == FG_LOCK_BUSY && waits)) &&
           memory_full();
}

/* Stores a decision that grants or re-enters: a grant takes `token`, or the
 * next one when 0. */
static fg_lock_outcome grant_decided(RedisModuleCtx *ctx, RedisModuleKey *key,
                                     RedisModuleString *keyname, fg_lock_state **s,
                                     const fg_lock_request *r, RedisModuleString *owner_arg,
                                     int64_t now_us, fg_lock_decision *d, uint64_t token) {
    if (d->outcome != FG_LOCK_GRANTED && d->outcome != FG_LOCK_REENTERED) return d->outcome;
    if (d->outcome == FG_LOCK_GRANTED) d->holder.token = token ? token : take_token(now_us);
    if (d->outcome == FG_LOCK_GRANTED && d->holder.token == 0) {
        d->outcome = FG_LOCK_NEVER;
        d->why = ERR_NO_TOKEN;
        return d->outcome;
    }
    if (store_holder(ctx, key, keyname, s, r, &d->holder, owner_arg) != FG_OK) {
        d->outcome = FG_LOCK_NEVER;
        d->why = "ERR out of memory or too many holders";
        return d->outcome;
    }
    stat_grants++;
    return d->outcome;
}

/* Decides and, when granted, stores (as grant_decided). */
static fg_lock_outcome decide_and_grant(RedisModuleCtx *ctx, RedisModuleKey *key,
                                        RedisModuleString *keyname, fg_lock_state **s,
                                        const fg_lock_request *r, RedisModuleString *owner_arg,
                                        int64_t now_us, fg_lock_decision *d, uint64_t token) {
    fg_lock_decide(*s ? *s : &empty_state, r, now_us, d);
    return grant_decided(ctx, key, keyname, s, r, owner_arg, now_us, d, token);
}

typedef enum key_status { KEY_OK, KEY_WRONGTYPE } key_status;

/* Opens a lock key for writing and checks that it holds nothing or a state
 * of `kind` (0: any kind). */
static key_status open_lock_key(RedisModuleCtx *ctx, RedisModuleString *keyname, uint8_t kind,
                                RedisModuleKey **key, fg_lock_state **s) {
    *key = RedisModule_OpenKey(ctx, keyname, REDISMODULE_READ | REDISMODULE_WRITE);
    *s = NULL;
    lock_lookup found = lockstate_lookup(*key, s);
    if (found == LOCK_WRONGTYPE || (found == LOCK_FOUND && kind && (*s)->kind != kind)) {
        RedisModule_CloseKey(*key);
        *key = NULL;
        *s = NULL;
        return KEY_WRONGTYPE;
    }
    return KEY_OK;
}

/* ============================================================= serving */

/* Tries the single-key waiter at the head of q. False when it must wait. */
static bool serve_single(const fg_wait_serving *r, key_queue *q, waiter *w) {
    RedisModuleCtx *ctx = r->arg;
    RedisModuleKey *key;
    fg_lock_state *s;
    if (open_lock_key(ctx, q->key, w->req.kind, &key, &s) == KEY_WRONGTYPE) {
        waiter_fail(ctx, w, REDISMODULE_ERRORMSG_WRONGTYPE);
        return true;
    }
    prune(ctx, key, q->key, &s, r->now_us);
    fg_lock_request req = w->req;
    req.queued_ahead = false;
    fg_lock_decision d;
    fg_lock_outcome o = decide_and_grant(ctx, key, q->key, &s, &req, NULL, r->now_us, &d, 0);
    RedisModule_CloseKey(key);
    if (o == FG_LOCK_BUSY) return false;
    if (o == FG_LOCK_NEVER)
        waiter_fail(ctx, w, d.why);
    else
        waiter_grant(ctx, w, d.holder.token, fg_lock_ttl_ms(d.holder.expires_us, r->now_us),
                     d.holder.count);
    return true;
}

/* Opens the n keys of a multi-key request for writing and prunes them:
 * false (nothing opened) when one holds another type. */
static bool open_all(RedisModuleCtx *ctx, RedisModuleString *const *names, int n, int64_t now_us,
                     RedisModuleKey **keys, fg_lock_state **states) {
    for (int i = 0; i < n; i++) {
        if (open_lock_key(ctx, names[i], 0, &keys[i], &states[i]) == KEY_WRONGTYPE) {
            while (i-- > 0)
                RedisModule_CloseKey(keys[i]);
            return false;
        }
        prune(ctx, keys[i], names[i], &states[i], now_us);
    }
    return true;
}

/* Grants a multi-key request decided GRANTED on every key: all keys, with
 * one token. NULL, or why nothing was granted. */
static const char *grant_all(RedisModuleCtx *ctx, RedisModuleString *const *names, int n,
                             RedisModuleKey **keys, fg_lock_state **states,
                             const fg_lock_request *r, int64_t now_us, uint64_t *token) {
    if ((*token = take_token(now_us)) == 0) return ERR_NO_TOKEN;
    fg_lock_request granted = *r;
    granted.queued_ahead = false;
    for (int i = 0; i < n; i++) {
        fg_lock_decision d;
        decide_and_grant(ctx, keys[i], names[i], &states[i], &granted, NULL, now_us, &d,
                         *token);
    }
    return NULL;
}

/* A multi-key waiter, at the head of every one of its queues, is granted
 * when every key is free. A key that can never be granted (another type,
 * an upgrade) fails the whole request, as it would have failed at once. */
static bool serve_multi(const fg_wait_serving *r, waiter *w) {
    RedisModuleCtx *ctx = r->arg;
    int n = (int)w->base.nlinks;
    RedisModuleString *names[MAX_MLOCK_KEYS];
    RedisModuleKey *keys[MAX_MLOCK_KEYS];
    fg_lock_state *states[MAX_MLOCK_KEYS];
    for (int i = 0; i < n; i++)
        names[i] = queue_of(&w->links[i])->key;
    if (!open_all(ctx, names, n, r->now_us, keys, states)) {
        waiter_fail(ctx, w, REDISMODULE_ERRORMSG_WRONGTYPE);
        return true;
    }
    fg_lock_decision d;
    fg_lock_decide_all((const fg_lock_state *const *)states, NULL, (size_t)n, &w->req, r->now_us,
                       &d);
    uint64_t token = 0;
    const char *error = d.outcome == FG_LOCK_NEVER ? d.why : NULL;
    if (d.outcome == FG_LOCK_GRANTED)
        error = grant_all(ctx, names, n, keys, states, &w->req, r->now_us, &token);
    for (int i = 0; i < n; i++)
        RedisModule_CloseKey(keys[i]);
    if (d.outcome == FG_LOCK_BUSY) return false;
    if (error)
        waiter_fail(ctx, w, error);
    else
        waiter_grant(ctx, w, token, fg_lock_ttl_ms(r->now_us + w->req.lease_us, r->now_us), n);
    return true;
}

static bool try_head(fg_wait_queue *wq, fg_waiter *head, const fg_wait_serving *s) {
    waiter *w = waiter_at(head);
    key_queue *q = fg_wait_container(wq, key_queue, waiters);
    return w->base.nlinks > 1 ? serve_multi(s, w) : serve_single(s, q, w);
}

/* After its turn, an empty queue goes; the others wait for their key's next
 * lease end. */
static void settle_queue(fg_wait_queue *wq, const fg_wait_serving *r) {
    RedisModuleCtx *ctx = r->arg;
    key_queue *q = fg_wait_container(wq, key_queue, waiters);
    if (!fg_wait_busy(wq)) {
        key_queue_drop_if_empty(ctx, q);
        return;
    }
    RedisModuleKey *key = RedisModule_OpenKey(ctx, q->key, REDISMODULE_READ);
    fg_lock_state *s = NULL;
    if (lockstate_lookup(key, &s) == LOCK_FOUND && s->len)
        key_queue_arm(ctx, q, fg_lock_next_expiry_us(s), r->now_us);
    RedisModule_CloseKey(key);
}

/* Serves q, and every queue a granted multi-key waiter leaves. ctx must have
 * q's database selected. */
static void serve(RedisModuleCtx *ctx, key_queue *q, int64_t now_us) {
    fg_wait_queue *wq = &q->waiters;
    fg_wait_serving serving = {try_head, settle_queue, ctx, now_us};
    fg_wait_serve(&wq, 1, &serving);
}

/* A lease changed: the key's waiters must look again at its next end (a
 * shorter lease ends sooner than the timer was armed for). */
static void rearm_waiters(RedisModuleCtx *ctx, RedisModuleString *keyname, const fg_lock_state *s,
                          int64_t now_us) {
    key_queue *q = queue_find(RedisModule_GetSelectedDb(ctx), keyname);
    if (q && fg_wait_busy(&q->waiters) && s->len)
        key_queue_arm(ctx, q, fg_lock_next_expiry_us(s), now_us);
}

/* Serves the queue of a key whose holders changed, if it has one. */
static void serve_key(RedisModuleCtx *ctx, RedisModuleString *keyname, int64_t now_us) {
    key_queue *q = queue_find(RedisModule_GetSelectedDb(ctx), keyname);
    if (q) serve(ctx, q, now_us);
}

/* The waiter leaves its queues; those behind it may now fit. `kept` stays
 * even when empty (its caller drops it). */
static void waiter_abandon_but(RedisModuleCtx *ctx, waiter *w, const key_queue *kept) {
    key_queue *qs[MAX_MLOCK_KEYS];
    uint32_t n = w->base.nlinks;
    for (uint32_t i = 0; i < n; i++)
        qs[i] = queue_of(&w->links[i]);
    waiter_remove(ctx, w);
    for (uint32_t i = 0; i < n; i++)
        if (qs[i] != kept) key_queue_after_leave(ctx, qs[i]);
}

static void waiter_abandon(RedisModuleCtx *ctx, waiter *w) {
    waiter_abandon_but(ctx, w, NULL);
}

/* Fails every waiter of q, which stays for its caller to drop; the other
 * queues of multi-key waiters are served soon, by their timers. */
static void fail_all_waiters(RedisModuleCtx *ctx, key_queue *q, const char *error) {
    fg_waiter *head;
    while ((head = fg_wait_head(&q->waiters)) != NULL) {
        waiter *w = waiter_at(head);
        RedisModule_UnblockClient(w->bc, new_answer(error, 0, 0, 0, 0));
        waiter_abandon_but(ctx, w, q);
    }
}

void lock_key_event(RedisModuleCtx *ctx, RedisModuleString *key) {
    key_queue *q = queue_find(RedisModule_GetSelectedDb(ctx), key);
    if (q) key_queue_arm(ctx, q, 0, 0);
}

void lock_keys_replaced(RedisModuleCtx *ctx) {
    key_queues_arm_all(ctx, &queues);
}

/* ===================================================== blocked clients */

static int waiter_reply(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);

static void free_answer(RedisModuleCtx *ctx, void *privdata) {
    (void)ctx;
    if (privdata) RedisModule_Free(privdata);
}

static void waiter_disconnected(RedisModuleCtx *ctx, RedisModuleBlockedClient *bc) {
    waiter *w = waiter_of(bc);
    if (w) waiter_abandon(ctx, w);
}

static void reply_grant(RedisModuleCtx *ctx, long long acquired, long long token, long long ttl_ms,
                        long long holds) {
    RedisModule_ReplyWithArray(ctx, 4);
    RedisModule_ReplyWithLongLong(ctx, acquired);
    RedisModule_ReplyWithLongLong(ctx, token);
    RedisModule_ReplyWithLongLong(ctx, ttl_ms);
    RedisModule_ReplyWithLongLong(ctx, holds);
}

static int waiter_reply(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    (void)argv, (void)argc;
    waiter_answer *a = RedisModule_GetBlockedClientPrivateData(ctx);
    if (!a) {
        reply_grant(ctx, 0, 0, 0, 0);
        return REDISMODULE_OK;
    }
    if (a->error) return RedisModule_ReplyWithError(ctx, a->error);
    reply_grant(ctx, a->acquired, a->token, a->ttl_ms, a->holds);
    return REDISMODULE_OK;
}

/* The soonest a waiter's request could be granted, as FG.LOCK answers it. */
static long long waiter_retry_ms(RedisModuleCtx *ctx, waiter *w, int64_t now_us) {
    int64_t until = 0;
    for (uint32_t i = 0; i < w->base.nlinks; i++) {
        RedisModuleKey *key = RedisModule_OpenKey(ctx, queue_of(&w->links[i])->key, REDISMODULE_READ);
        fg_lock_state *s = NULL;
        if (lockstate_lookup(key, &s) == LOCK_FOUND)
            until = fg_max(until, fg_lock_busy_until(s, &w->req, now_us));
        RedisModule_CloseKey(key);
    }
    return fg_lock_ttl_ms(until, now_us);
}

/* The waiter's deadline passed: it is told it was not granted, and those
 * behind it may now fit. */
static void deadline_passed(RedisModuleCtx *ctx, void *data) {
    waiter *w = data;
    w->has_deadline = false;
    RedisModule_SelectDb(ctx, queue_of(&w->links[0])->dbid);
    long long retry_ms = waiter_retry_ms(ctx, w, wall_clock_us());
    RedisModule_UnblockClient(w->bc, new_answer(NULL, 0, 0, retry_ms, 0));
    stat_timeouts++;
    waiter_abandon(ctx, w);
}

/* Blocks the client in the queues of `keys`. timeout_ms 0: no timeout. */
static void enqueue(RedisModuleCtx *ctx, const fg_lock_request *r, RedisModuleString **keys,
                    int nkeys, int64_t timeout_ms, int64_t now_us) {
    waiter *w = RedisModule_Alloc(sizeof(*w) + (size_t)nkeys * sizeof(fg_wait_link));
    w->req = *r;
    w->owner = RedisModule_Alloc(r->owner_len);
    memcpy(w->owner, r->owner, r->owner_len);
    w->req.owner = w->owner;
    w->since_us = now_us;
    /* No timeout callback, so CLIENT UNBLOCK leaves lock waiters alone: on
     * Redis 7.0 it would discard the reply of a waiter granted in the same
     * event-loop turn. */
    w->bc = RedisModule_BlockClient(ctx, waiter_reply, NULL, free_answer, 0);
    w->has_deadline = timeout_ms > 0;
    if (w->has_deadline) w->deadline = RedisModule_CreateTimer(ctx, timeout_ms, deadline_passed, w);
    RedisModule_SetDisconnectCallback(w->bc, waiter_disconnected);
    key_queues_track(&queues, w->bc, w);
    int dbid = RedisModule_GetSelectedDb(ctx);
    fg_wait_queue *qs[MAX_MLOCK_KEYS];
    for (int i = 0; i < nkeys; i++)
        qs[i] = &key_queue_get(&queues, dbid, keys[i])->waiters;
    fg_waiter_join(&w->base, w->links, qs, (uint32_t)nkeys);
    for (int i = 0; i < nkeys; i++) {
        /* The key's next lease end may free it. */
        RedisModuleKey *key = RedisModule_OpenKey(ctx, keys[i], REDISMODULE_READ);
        fg_lock_state *s = NULL;
        if (lockstate_lookup(key, &s) == LOCK_FOUND && s->len)
            key_queue_arm(ctx, queue_of(&w->links[i]), fg_lock_next_expiry_us(s), now_us);
        RedisModule_CloseKey(key);
    }
    stat_waiters++;
}

/* ============================================================ parsing */

static int parse_owner(RedisModuleCtx *ctx, RedisModuleString *arg, fg_lock_request *r) {
    r->owner = RedisModule_StringPtrLen(arg, &r->owner_len);
    if (r->owner_len < 1 || r->owner_len > FG_LOCK_OWNER_MAX) {
        reply_error_fmt(ctx, FG_ERR_LOCK_OWNER, FG_LOCK_OWNER_MAX);
        return 0;
    }
    return 1;
}

static int parse_lease(RedisModuleCtx *ctx, RedisModuleString *arg, int64_t *lease_us) {
    int64_t ms;
    if (!parse_integer(ctx, arg, "lease_ms", 1, FG_LOCK_MAX_LEASE_MS, &ms)) return 0;
    *lease_us = ms * 1000;
    return 1;
}

typedef struct wait_option {
    bool wait;
    int64_t timeout_ms;
} wait_option;

/* The options after the positional arguments: WAIT timeout_ms always;
 * SHARED and REENTRANT where `mode_options` (FG.LOCK). */
static int parse_lock_options(RedisModuleCtx *ctx, RedisModuleString **argv, int argc,
                              bool mode_options, fg_lock_request *r, wait_option *wo) {
    wo->wait = false;
    wo->timeout_ms = 0;
    for (int i = 0; i < argc; i++) {
        if (mode_options && arg_is(argv[i], "SHARED")) {
            r->mode = FG_LOCK_SHARED;
        } else if (mode_options && arg_is(argv[i], "REENTRANT")) {
            r->reentrant = true;
        } else if (arg_is(argv[i], "WAIT")) {
            if (i + 1 >= argc) return RedisModule_ReplyWithError(ctx, "ERR WAIT needs a timeout_ms"), 0;
            if (!parse_integer(ctx, argv[++i], "timeout_ms", 0, FG_LOCK_MAX_LEASE_MS,
                               &wo->timeout_ms))
                return 0;
            wo->wait = true;
        } else {
            RedisModule_ReplyWithError(ctx, mode_options
                                                ? "ERR syntax error: the options are SHARED, "
                                                  "REENTRANT and WAIT timeout_ms"
                                                : "ERR syntax error: the only option is WAIT "
                                                  "timeout_ms");
            return 0;
        }
    }
    return 1;
}

/* ========================================================== acquiring */

/* The common path of FG.LOCK and FG.ACQUIRE. */
static int acquire(RedisModuleCtx *ctx, RedisModuleString *keyname, RedisModuleString *owner_arg,
                   fg_lock_request *r, const wait_option *wo) {
    int64_t now_us = server_clock_us();
    RedisModuleKey *key;
    fg_lock_state *s;
    if (open_lock_key(ctx, keyname, r->kind, &key, &s) == KEY_WRONGTYPE)
        return RedisModule_ReplyWithError(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
    int dbid = RedisModule_GetSelectedDb(ctx);
    key_queue *q = queue_find(dbid, keyname);
    if (prune(ctx, key, keyname, &s, now_us) && q) {
        /* Leases ended: the waiters come first. */
        RedisModule_CloseKey(key);
        serve(ctx, q, now_us);
        if (open_lock_key(ctx, keyname, r->kind, &key, &s) == KEY_WRONGTYPE)
            return RedisModule_ReplyWithError(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
        q = queue_find(dbid, keyname);
    }
    r->queued_ahead = q && fg_wait_busy(&q->waiters);
    bool waits = wo->wait && client_can_block(ctx);
    fg_lock_decision d;
    fg_lock_decide(s ? s : &empty_state, r, now_us, &d);
    if (refused_when_full(&d, waits)) {
        RedisModule_CloseKey(key);
        return RedisModule_ReplyWithError(ctx, MEMORY_FULL_ERR);
    }
    fg_lock_outcome o = grant_decided(ctx, key, keyname, &s, r, owner_arg, now_us, &d, 0);
    RedisModule_CloseKey(key);
    switch (o) {
    case FG_LOCK_GRANTED:
    case FG_LOCK_REENTERED:
        reply_grant(ctx, 1, (long long)d.holder.token, fg_lock_ttl_ms(d.holder.expires_us, now_us),
                    d.holder.count);
        return REDISMODULE_OK;
    case FG_LOCK_NEVER: return RedisModule_ReplyWithError(ctx, d.why);
    case FG_LOCK_BUSY: break;
    }
    if (waits) {
        enqueue(ctx, r, &keyname, 1, wo->timeout_ms, now_us);
        return REDISMODULE_OK;
    }
    reply_grant(ctx, 0, 0, fg_lock_ttl_ms(d.busy_until_us, now_us), 0);
    return REDISMODULE_OK;
}

/* FG.LOCK key owner lease_ms [SHARED] [REENTRANT] [WAIT timeout_ms] */
static int lock_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc < 4) return RedisModule_WrongArity(ctx);
    fg_lock_request r = {.kind = FG_LOCK_KIND_LOCK, .mode = FG_LOCK_EXCLUSIVE, .count = 1};
    wait_option wo;
    if (!parse_owner(ctx, argv[2], &r) || !parse_lease(ctx, argv[3], &r.lease_us) ||
        !parse_lock_options(ctx, argv + 4, argc - 4, true, &r, &wo))
        return REDISMODULE_OK;
    return acquire(ctx, argv[1], argv[2], &r, &wo);
}

/* FG.ACQUIRE key capacity owner permits lease_ms [WAIT timeout_ms] */
static int acquire_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc < 6) return RedisModule_WrongArity(ctx);
    fg_lock_request r = {.kind = FG_LOCK_KIND_SEMAPHORE, .mode = FG_LOCK_EXCLUSIVE};
    wait_option wo;
    if (!parse_integer(ctx, argv[2], "capacity", 1, FG_LOCK_MAX_CAPACITY, &r.capacity) ||
        !parse_owner(ctx, argv[3], &r) ||
        !parse_integer(ctx, argv[4], "permits", 1, FG_LOCK_MAX_CAPACITY, &r.count) ||
        !parse_lease(ctx, argv[5], &r.lease_us) ||
        !parse_lock_options(ctx, argv + 6, argc - 6, false, &r, &wo))
        return REDISMODULE_OK;
    if (r.count > r.capacity)
        return RedisModule_ReplyWithError(ctx, FG_ERR_LOCK_PERMITS);
    return acquire(ctx, argv[1], argv[3], &r, &wo);
}

/* =========================================================== releasing */

/* After the owner's hold changed: replicate what it is now. The owner goes
 * out as the client's own argument (a reference, not a copy). */
static void replicate_hold_change(RedisModuleCtx *ctx, RedisModuleString *keyname,
                                  fg_lock_state *s, RedisModuleString *owner_arg,
                                  const fg_lock_request *r, int64_t left) {
    if (left > 0)
        replicate_hold(ctx, keyname, s, fg_lock_find(s, r->owner, r->owner_len), owner_arg);
    else
        RedisModule_Replicate(ctx, "FG.UNHOLD", "ss", keyname, owner_arg);
}

/* The common path of FG.UNLOCK and FG.RELEASE. */
static int release(RedisModuleCtx *ctx, RedisModuleString *keyname, uint8_t kind,
                   RedisModuleString *owner_arg, int64_t count) {
    fg_lock_request r;
    if (!parse_owner(ctx, owner_arg, &r)) return REDISMODULE_OK;
    int64_t now_us = server_clock_us();
    RedisModuleKey *key;
    fg_lock_state *s;
    if (open_lock_key(ctx, keyname, kind, &key, &s) == KEY_WRONGTYPE)
        return RedisModule_ReplyWithError(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
    uint32_t pruned = prune(ctx, key, keyname, &s, now_us);
    int64_t left = -1;
    if (s) {
        left = fg_lock_release(s, r.owner, r.owner_len, count, &module_allocator);
        if (left >= 0) {
            replicate_hold_change(ctx, keyname, s, owner_arg, &r, left);
            lockstate_settle(key, s);
            key_changed(ctx, keyname, "fg.unlock");
        }
    }
    RedisModule_CloseKey(key);
    if (pruned || left == 0 || (left > 0 && kind == FG_LOCK_KIND_SEMAPHORE))
        serve_key(ctx, keyname, now_us);
    return RedisModule_ReplyWithLongLong(ctx, left);
}

/* FG.UNLOCK key owner */
static int unlock_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 3) return RedisModule_WrongArity(ctx);
    return release(ctx, argv[1], FG_LOCK_KIND_LOCK, argv[2], 1);
}

/* FG.RELEASE key owner [permits] */
static int release_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 3 && argc != 4) return RedisModule_WrongArity(ctx);
    int64_t permits = 0;
    if (argc == 4 && !parse_integer(ctx, argv[3], "permits", 1, FG_LOCK_MAX_CAPACITY, &permits))
        return REDISMODULE_OK;
    return release(ctx, argv[1], FG_LOCK_KIND_SEMAPHORE, argv[2], permits);
}

/* FG.EXTEND key owner lease_ms */
static int extend_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 4) return RedisModule_WrongArity(ctx);
    fg_lock_request r;
    int64_t lease_us;
    if (!parse_owner(ctx, argv[2], &r) || !parse_lease(ctx, argv[3], &lease_us))
        return REDISMODULE_OK;
    int64_t now_us = server_clock_us();
    RedisModuleKey *key;
    fg_lock_state *s;
    if (open_lock_key(ctx, argv[1], 0, &key, &s) == KEY_WRONGTYPE)
        return RedisModule_ReplyWithError(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
    uint32_t pruned = prune(ctx, key, argv[1], &s, now_us);
    bool shortened;
    const fg_lock_holder *held = fg_lock_extend(s, r.owner, r.owner_len, now_us, lease_us, &shortened);
    if (held) {
        replicate_hold(ctx, argv[1], s, held, argv[2]);
        lockstate_settle(key, s);
        key_changed(ctx, argv[1], "fg.extend");
        rearm_waiters(ctx, argv[1], s, now_us);
    }
    RedisModule_CloseKey(key);
    if (pruned) serve_key(ctx, argv[1], now_us);
    return RedisModule_ReplyWithLongLong(ctx, held != NULL);
}

/* FG.FORCEUNLOCK key */
static int forceunlock_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 2) return RedisModule_WrongArity(ctx);
    int64_t now_us = server_clock_us();
    RedisModuleKey *key;
    fg_lock_state *s;
    if (open_lock_key(ctx, argv[1], 0, &key, &s) == KEY_WRONGTYPE)
        return RedisModule_ReplyWithError(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
    prune(ctx, key, argv[1], &s, now_us);
    long long removed = 0;
    if (s) {
        removed = s->len;
        RedisModule_DeleteKey(key);
        RedisModule_Replicate(ctx, "DEL", "s", argv[1]);
        key_changed(ctx, argv[1], "fg.forceunlock");
    }
    RedisModule_CloseKey(key);
    serve_key(ctx, argv[1], now_us);
    return RedisModule_ReplyWithLongLong(ctx, removed);
}

/* ========================================================== multi-key */

/* Parses "numkeys key [key ...]" at argv[1]; the keys are distinct. */
static int parse_keys(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, int *numkeys) {
    int64_t n;
    if (!parse_integer(ctx, argv[1], "numkeys", 1, MAX_MLOCK_KEYS, &n)) return 0;
    if (n + 2 > argc) return RedisModule_ReplyWithError(ctx, "ERR numkeys is larger than the "
                                                              "number of keys given"), 0;
    for (int i = 0; i < n; i++) {
        size_t ilen;
        const char *ip = RedisModule_StringPtrLen(argv[2 + i], &ilen);
        for (int j = 0; j < i; j++) {
            size_t jlen;
            const char *jp = RedisModule_StringPtrLen(argv[2 + j], &jlen);
            if (ilen == jlen && memcmp(ip, jp, ilen) == 0)
                return RedisModule_ReplyWithError(ctx, FG_ERR_LOCK_DUPLICATE_KEY), 0;
        }
    }
    *numkeys = (int)n;
    return 1;
}

/* Where the keys of "numkeys key [key ...]" are, for cluster routing: Redis
 * 7.0 routes a module command by its legacy key range or by this callback,
 * never by its key specs. */
static int report_numkeys(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    long long n;
    if (argc > 1 && RedisModule_StringToLongLong(argv[1], &n) == REDISMODULE_OK && n > 0)
        for (long long i = 0; i < n && i + 2 < argc; i++)
            RedisModule_KeyAtPos(ctx, (int)(i + 2));
    return REDISMODULE_OK;
}

/* Whether every key holds a lock or nothing (else replies WRONGTYPE): checked
 * before anything is written, so an error changes nothing. */
static bool all_lock_keys(RedisModuleCtx *ctx, RedisModuleString **keys, int n) {
    for (int i = 0; i < n; i++) {
        RedisModuleKey *key;
        fg_lock_state *s;
        if (open_lock_key(ctx, keys[i], FG_LOCK_KIND_LOCK, &key, &s) == KEY_WRONGTYPE) {
            RedisModule_ReplyWithError(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
            return false;
        }
        RedisModule_CloseKey(key);
    }
    return true;
}

/* numkeys key [key ...] then `after` arguments (or more, unless exact):
 * false after replying an error. */
static bool parse_multi(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, int after,
                        bool exact, int *n) {
    if (argc < 3 + after) return RedisModule_WrongArity(ctx), false;
    if (!parse_keys(ctx, argv, argc, n)) return false;
    if (exact ? argc != *n + 2 + after : argc < *n + 2 + after)
        return RedisModule_WrongArity(ctx), false;
    return true;
}

/* FG.MLOCK numkeys key [key ...] owner lease_ms [WAIT timeout_ms] */
static int mlock_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (RedisModule_IsKeysPositionRequest(ctx)) return report_numkeys(ctx, argv, argc);
    int n;
    if (!parse_multi(ctx, argv, argc, 2, false, &n)) return REDISMODULE_OK;
    RedisModuleString **keys = argv + 2;
    fg_lock_request r = {.kind = FG_LOCK_KIND_LOCK, .mode = FG_LOCK_EXCLUSIVE, .count = 1};
    wait_option wo;
    if (!parse_owner(ctx, argv[n + 2], &r) || !parse_lease(ctx, argv[n + 3], &r.lease_us) ||
        !parse_lock_options(ctx, argv + n + 4, argc - n - 4, false, &r, &wo))
        return REDISMODULE_OK;
    int64_t now_us = server_clock_us();
    int dbid = RedisModule_GetSelectedDb(ctx);

    /* Types first; then expired holders go and their waiters are served. */
    if (!all_lock_keys(ctx, keys, n)) return REDISMODULE_OK;
    for (int i = 0; i < n; i++) {
        RedisModuleKey *key;
        fg_lock_state *s;
        open_lock_key(ctx, keys[i], FG_LOCK_KIND_LOCK, &key, &s);
        uint32_t pruned = prune(ctx, key, keys[i], &s, now_us);
        RedisModule_CloseKey(key);
        if (pruned) serve_key(ctx, keys[i], now_us);
    }

    /* Serving waiters may have given a key another kind, and a key the owner
     * reads can never be upgraded: either fails the request at once. */
    RedisModuleKey *opened[MAX_MLOCK_KEYS];
    fg_lock_state *states[MAX_MLOCK_KEYS];
    bool queued[MAX_MLOCK_KEYS];
    if (!open_all(ctx, keys, n, now_us, opened, states))
        return RedisModule_ReplyWithError(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
    for (int i = 0; i < n; i++) {
        key_queue *q = queue_find(dbid, keys[i]);
        queued[i] = q && fg_wait_busy(&q->waiters);
    }
    fg_lock_decision d;
    fg_lock_decide_all((const fg_lock_state *const *)states, queued, (size_t)n, &r, now_us, &d);
    bool waits = wo.wait && client_can_block(ctx);
    uint64_t token = 0;
    const char *error = d.outcome == FG_LOCK_NEVER ? d.why : NULL;
    if (refused_when_full(&d, waits))
        error = MEMORY_FULL_ERR;
    else if (d.outcome == FG_LOCK_GRANTED)
        error = grant_all(ctx, keys, n, opened, states, &r, now_us, &token);
    for (int i = 0; i < n; i++)
        RedisModule_CloseKey(opened[i]);
    bool all_free = d.outcome == FG_LOCK_GRANTED;
    if (error) return RedisModule_ReplyWithError(ctx, error);
    if (all_free) {
        reply_grant(ctx, 1, (long long)token, fg_lock_ttl_ms(now_us + r.lease_us, now_us), n);
    } else if (waits) {
        enqueue(ctx, &r, keys, n, wo.timeout_ms, now_us);
    } else {
        reply_grant(ctx, 0, 0, fg_lock_ttl_ms(d.busy_until_us, now_us), 0);
    }
    return REDISMODULE_OK;
}

/* FG.MUNLOCK numkeys key [key ...] owner */
static int munlock_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (RedisModule_IsKeysPositionRequest(ctx)) return report_numkeys(ctx, argv, argc);
    int n;
    if (!parse_multi(ctx, argv, argc, 1, true, &n)) return REDISMODULE_OK;
    fg_lock_request r;
    if (!parse_owner(ctx, argv[n + 2], &r)) return REDISMODULE_OK;
    if (!all_lock_keys(ctx, argv + 2, n)) return REDISMODULE_OK;
    int64_t now_us = server_clock_us();
    long long released = 0;
    for (int i = 0; i < n; i++) {
        RedisModuleString *keyname = argv[2 + i];
        RedisModuleKey *key;
        fg_lock_state *s;
        open_lock_key(ctx, keyname, FG_LOCK_KIND_LOCK, &key, &s);
        uint32_t pruned = prune(ctx, key, keyname, &s, now_us);
        int64_t left = -1;
        if (s) {
            left = fg_lock_release(s, r.owner, r.owner_len, 1, &module_allocator);
            if (left >= 0) {
                replicate_hold_change(ctx, keyname, s, argv[n + 2], &r, left);
                lockstate_settle(key, s);
                key_changed(ctx, keyname, "fg.unlock");
                released++;
            }
        }
        RedisModule_CloseKey(key);
        if (pruned || left == 0) serve_key(ctx, keyname, now_us);
    }
    return RedisModule_ReplyWithLongLong(ctx, released);
}

/* ======================================================== introspection */

static void reply_holders(RedisModuleCtx *ctx, const fg_lock_state *s, int64_t now_us) {
    long n = 0;
    RedisModule_ReplyWithArray(ctx, REDISMODULE_POSTPONED_LEN);
    for (const fg_lock_holder *h = fg_lock_first(s); h; h = fg_lock_next(h)) {
        if (h->expires_us <= now_us) continue; /* ended; removed at the next write */
        RedisModule_ReplyWithArray(ctx, 5);
        RedisModule_ReplyWithStringBuffer(ctx, h->owner, h->owner_len);
        RedisModule_ReplyWithCString(ctx, lock_mode_name(h->mode));
        RedisModule_ReplyWithLongLong(ctx, h->count);
        RedisModule_ReplyWithLongLong(ctx, fg_lock_ttl_ms(h->expires_us, now_us));
        RedisModule_ReplyWithLongLong(ctx, (long long)h->token);
        n++;
    }
    RedisModule_ReplySetArrayLength(ctx, n);
}

static void reply_waiters(RedisModuleCtx *ctx, const key_queue *q, int64_t now_us) {
    long n = 0;
    RedisModule_ReplyWithArray(ctx, REDISMODULE_POSTPONED_LEN);
    for (const fg_wait_link *l = q ? q->waiters.head : NULL; l; l = l->next, n++) {
        const waiter *w = waiter_at(l->waiter);
        RedisModule_ReplyWithArray(ctx, 4);
        RedisModule_ReplyWithStringBuffer(ctx, w->owner, w->req.owner_len);
        RedisModule_ReplyWithCString(ctx, lock_mode_name(w->req.mode));
        RedisModule_ReplyWithLongLong(ctx, w->req.count);
        RedisModule_ReplyWithLongLong(ctx, (now_us - w->since_us) / 1000);
    }
    RedisModule_ReplySetArrayLength(ctx, n);
}

/* FG.LOCKINFO key */
static int lockinfo_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 2) return RedisModule_WrongArity(ctx);
    int64_t now_us = server_clock_us();
    RedisModuleKey *key = RedisModule_OpenKey(ctx, argv[1], REDISMODULE_READ);
    fg_lock_state *s = NULL;
    lock_lookup found = lockstate_lookup(key, &s);
    RedisModule_CloseKey(key);
    if (found == LOCK_WRONGTYPE) return RedisModule_ReplyWithError(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
    key_queue *q = queue_find(RedisModule_GetSelectedDb(ctx), argv[1]);
    const waiter *head = q ? waiter_at(fg_wait_head(&q->waiters)) : NULL;
    long long used = 0;
    for (const fg_lock_holder *h = fg_lock_first(s); h; h = fg_lock_next(h))
        if (h->expires_us > now_us) used += h->count;
    if (used == 0) s = NULL; /* every lease ended: nothing is held */
    if (!s && !head) return RedisModule_ReplyWithNull(ctx);
    uint8_t kind = s ? s->kind : head->req.kind;
    RedisModule_ReplyWithMap(ctx, 6);
    RedisModule_ReplyWithCString(ctx, "kind");
    RedisModule_ReplyWithCString(ctx, lock_kind_name(kind));
    RedisModule_ReplyWithCString(ctx, "capacity");
    RedisModule_ReplyWithLongLong(ctx, s ? s->capacity : head->req.capacity);
    RedisModule_ReplyWithCString(ctx, "used");
    RedisModule_ReplyWithLongLong(ctx, used);
    RedisModule_ReplyWithCString(ctx, "holders");
    reply_holders(ctx, s, now_us);
    RedisModule_ReplyWithCString(ctx, "waiters");
    reply_waiters(ctx, q, now_us);
    RedisModule_ReplyWithCString(ctx, "next_token");
    RedisModule_ReplyWithLongLong(ctx, (long long)fg_lock_next_token(fence_last(), now_us));
    return REDISMODULE_OK;
}

/* ============================================================ fencing */

static int parse_token(RedisModuleCtx *ctx, RedisModuleString *arg, uint64_t *token) {
    int64_t t;
    if (!parse_integer(ctx, arg, "token", 1, INT64_MAX, &t)) return 0;
    *token = (uint64_t)t;
    return 1;
}

/* Opens a fenced key for writing; *v NULL when empty. 0 after replying
 * WRONGTYPE. */
static int open_fenced(RedisModuleCtx *ctx, RedisModuleString *keyname, RedisModuleKey **key,
                       fenced_value **v) {
    *key = RedisModule_OpenKey(ctx, keyname, REDISMODULE_READ | REDISMODULE_WRITE);
    *v = NULL;
    if (fenced_lookup(*key, v) == LOCK_WRONGTYPE) {
        RedisModule_CloseKey(*key);
        RedisModule_ReplyWithError(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
        return 0;
    }
    return 1;
}

/* A write fenced by the token in argv[2]: it is current when no larger
 * token was seen; a current token is stored (with value, NULL for none)
 * when it is larger, or also when equal where `equal_writes`. */
static int fenced_write(RedisModuleCtx *ctx, RedisModuleString **argv, const char *value,
                        size_t len, bool equal_writes, const char *event) {
    uint64_t token;
    RedisModuleKey *key;
    fenced_value *v;
    if (!parse_token(ctx, argv[2], &token) || !open_fenced(ctx, argv[1], &key, &v))
        return REDISMODULE_OK;
    bool current = !v || token >= v->token;
    bool writes = current && (!v || token > v->token || equal_writes);
    /* A new key or a longer value grows memory; a token, or a value no
     * longer than the one held, is written in its place. */
    if (writes && (!v || (value && (!v->value || len > v->value_len))) && memory_full()) {
        RedisModule_CloseKey(key);
        return RedisModule_ReplyWithError(ctx, MEMORY_FULL_ERR);
    }
    if (writes) {
        fenced_store(key, token, value, len);
        RedisModule_ReplicateVerbatim(ctx);
        key_changed(ctx, argv[1], event);
    }
    RedisModule_CloseKey(key);
    return RedisModule_ReplyWithLongLong(ctx, current);
}

/* FG.FENCE key token */
static int fence_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 3) return RedisModule_WrongArity(ctx);
    return fenced_write(ctx, argv, NULL, 0, false, "fg.fence");
}

/* FG.FSET key token value */
static int fset_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 4) return RedisModule_WrongArity(ctx);
    size_t len;
    const char *value = RedisModule_StringPtrLen(argv[3], &len);
    return fenced_write(ctx, argv, value, len, true, "fg.fset");
}

/* FG.FGET key [token] */
static int fget_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 2 && argc != 3) return RedisModule_WrongArity(ctx);
    uint64_t token = 0;
    RedisModuleKey *key;
    fenced_value *v;
    if ((argc == 3 && !parse_token(ctx, argv[2], &token)) || !open_fenced(ctx, argv[1], &key, &v))
        return REDISMODULE_OK;
    bool current = !v || token >= v->token || argc == 2;
    bool records = argc == 3 && current && (!v || token > v->token);
    if (records && !v && memory_full()) { /* a token for a new key */
        RedisModule_CloseKey(key);
        return RedisModule_ReplyWithError(ctx, MEMORY_FULL_ERR);
    }
    if (records) {
        fenced_store(key, token, NULL, 0);
        fenced_lookup(key, &v);
        RedisModule_Replicate(ctx, "FG.FENCE", "ss", argv[1], argv[2]);
        key_changed(ctx, argv[1], "fg.fence");
    }
    RedisModule_ReplyWithArray(ctx, 3);
    RedisModule_ReplyWithLongLong(ctx, current);
    RedisModule_ReplyWithLongLong(ctx, v ? (long long)v->token : 0);
    if (current && v && v->value)
        RedisModule_ReplyWithStringBuffer(ctx, v->value, v->value_len);
    else
        RedisModule_ReplyWithNull(ctx);
    RedisModule_CloseKey(key);
    return REDISMODULE_OK;
}

/* ===================================================== internal effects */

/* FG.HOLD key kind capacity owner mode count expires_us token */
static int hold_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (!effect_command_allowed(ctx, argv[0])) return REDISMODULE_OK;
    if (argc != 9) return RedisModule_WrongArity(ctx);
    int kind = lock_kind_from_name(argv[2]), mode = lock_mode_from_name(argv[5]);
    if (kind < 0) return RedisModule_ReplyWithError(ctx, "ERR kind must be lock or semaphore");
    if (mode < 0) return RedisModule_ReplyWithError(ctx, "ERR mode must be exclusive or shared");
    fg_lock_request r;
    int64_t capacity, count, expires_us, token;
    /* Tokens stay below the ceiling: a master never sends one it could not
     * grant, and one at the ceiling would leave no token for later grants. */
    if (!parse_integer(ctx, argv[3], "capacity", 0, FG_LOCK_MAX_CAPACITY, &capacity) ||
        !parse_owner(ctx, argv[4], &r) ||
        !parse_integer(ctx, argv[6], "count", 1, FG_LOCK_MAX_REENTRY, &count) ||
        !parse_integer(ctx, argv[7], "expires_us", 1, INT64_MAX, &expires_us) ||
        !parse_integer(ctx, argv[8], "token", 1, FG_LOCK_TOKEN_CEILING - 1, &token))
        return REDISMODULE_OK;
    RedisModuleKey *key;
    fg_lock_state *s;
    if (open_lock_key(ctx, argv[1], 0, &key, &s) == KEY_WRONGTYPE)
        return RedisModule_ReplyWithError(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
    /* A client's new holder grows memory; one replacing the owner's keeps it. */
    if ((!s || !fg_lock_find(s, r.owner, r.owner_len)) && memory_full()) {
        RedisModule_CloseKey(key);
        return RedisModule_ReplyWithError(ctx, MEMORY_FULL_ERR);
    }
    bool created = !s;
    if (created) s = lockstate_create();
    fg_lock_holder h = {(char *)r.owner, (uint32_t)r.owner_len, (uint8_t)mode, count, expires_us,
                        (uint64_t)token};
    fg_status st = fg_lock_put(s, (uint8_t)kind, capacity, &h, &module_allocator);
    if (st != FG_OK) {
        if (created) lockstate_destroy(s);
        RedisModule_CloseKey(key);
        return RedisModule_ReplyWithError(ctx, "ERR invalid holder for this state");
    }
    if (created) RedisModule_ModuleTypeSetValue(key, LockStateType, s);
    lockstate_settle(key, s);
    rearm_waiters(ctx, argv[1], s, server_clock_us());
    RedisModule_CloseKey(key);
    fence_raise((uint64_t)token);
    RedisModule_ReplicateVerbatim(ctx);
    key_changed(ctx, argv[1], "fg.hold");
    return RedisModule_ReplyWithSimpleString(ctx, "OK");
}

/* FG.UNHOLD key owner */
static int unhold_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (!effect_command_allowed(ctx, argv[0])) return REDISMODULE_OK;
    if (argc != 3) return RedisModule_WrongArity(ctx);
    fg_lock_request r;
    if (!parse_owner(ctx, argv[2], &r)) return REDISMODULE_OK;
    RedisModuleKey *key;
    fg_lock_state *s;
    if (open_lock_key(ctx, argv[1], 0, &key, &s) == KEY_WRONGTYPE)
        return RedisModule_ReplyWithError(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
    bool removed = s && fg_lock_release(s, r.owner, r.owner_len, 0, &module_allocator) == 0;
    if (removed) {
        lockstate_settle(key, s);
        RedisModule_ReplicateVerbatim(ctx);
        key_changed(ctx, argv[1], "fg.unhold");
    }
    RedisModule_CloseKey(key);
    if (removed && (RedisModule_GetContextFlags(ctx) & REDISMODULE_CTX_FLAGS_MASTER))
        serve_key(ctx, argv[1], server_clock_us());
    return RedisModule_ReplyWithLongLong(ctx, removed);
}

/* ========================================================= registration */

/* The family's commands (families.c checks their names, then creates them). */
const command_spec lock_commands[] = {
    {"FG.LOCK", lock_command, "write fast", 1, 1},
    {"FG.UNLOCK", unlock_command, "write fast", 1, 1},
    {"FG.ACQUIRE", acquire_command, "write fast", 1, 1},
    {"FG.RELEASE", release_command, "write fast", 1, 1},
    {"FG.MLOCK", mlock_command, "write getkeys-api", 0, 0},
    {"FG.MUNLOCK", munlock_command, "write getkeys-api", 0, 0},
    {"FG.EXTEND", extend_command, "write fast", 1, 1},
    {"FG.FORCEUNLOCK", forceunlock_command, "write", 1, 1},
    {"FG.LOCKINFO", lockinfo_command, "readonly", 1, 1},
    {"FG.FENCE", fence_command, "write fast", 1, 1},
    {"FG.FSET", fset_command, "write fast", 1, 1},
    {"FG.FGET", fget_command, "write fast", 1, 1},
    {"FG.HOLD", hold_command, "write", 1, 1},
    {"FG.UNHOLD", unhold_command, "write", 1, 1},
    {0},
};

int lock_commands_created(RedisModuleCtx *ctx) {
    (void)ctx;
    key_queues_init(&queues, &lock_queues);
    create_replication_words();
    return REDISMODULE_OK;
}

void lock_info(RedisModuleInfoCtx *ctx) {
    if (RedisModule_InfoAddSection(ctx, "locks") != REDISMODULE_OK) return;
    RedisModule_InfoAddFieldLongLong(ctx, "lock_grants", stat_grants);
    RedisModule_InfoAddFieldLongLong(ctx, "lock_waited_grants", stat_waited_grants);
    RedisModule_InfoAddFieldLongLong(ctx, "lock_timeouts", stat_timeouts);
    RedisModule_InfoAddFieldLongLong(ctx, "lock_waiters", stat_waiters);
    RedisModule_InfoAddFieldLongLong(ctx, "lock_expired",
                                     stat_expired + lockstate_leases_ended_with_key());
    RedisModule_InfoAddFieldLongLong(ctx, "lock_next_token",
                                     (long long)fg_lock_next_token(fence_last(), server_clock_us()));
}
