/*
 * t_policy.c - policies (docs/policies.md): FG.POLICY SET, DEL, GET, LIST,
 * ALLOW, DENY and UNLIST (subcommands of one container command), FG.CHECK,
 * and the internal FG.PLSTATE.
 *
 * FG.POLICY commands change server state, not keys: they are deterministic,
 * so each is replicated as it was sent, and only when it changed something.
 * The registry itself is policy_registry.c.
 *
 * A check goes: the arguments (any error answers and changes nothing), the
 * policy, the deny list, the allow list, the key, the carrying over of its
 * state to the policy's current rules (fg_policy_rescale), the decision
 * (fg_policy_decide). An "evaluation" holds all of that with the key still
 * open, so that its caller may either settle it -- store the state if it
 * changed, with its absolute expiry, replicate it as FG.PLSTATE key
 * <payload> PXAT <ms>, emit the events, count the answer -- or discard it.
 * A check is never replicated itself: replicas and AOF replay apply states
 * and never read a clock.
 *
 * Waiting follows t_lock.c, whose comments explain the Redis 7.0 pitfalls:
 *
 * - A request denied by its limits or by the penalty box, whose retry_after
 *   is known and within its WAIT timeout, becomes a blocked client in the
 *   FIFO queue of its key; its decision is discarded, so it charges
 *   nothing and counts towards no penalty until its final answer. A WAIT
 *   request that finds others waiting is queued behind them even when it
 *   would fit (no overtaking), unless it is answered at once anyway (a
 *   list decision, a request that can never fit, a wait beyond its
 *   timeout).
 * - Each queue has one module timer, armed at its head's retry time. When
 *   it fires the head is evaluated again, against the policy of that name
 *   as it is then (deleted: ERR no such policy; replaced: the new rules,
 *   carried over): allowed, it is settled and answered, and the next head
 *   is tried; denied with a retry within its deadline, the timer is armed
 *   again; otherwise it is answered with its final denial.
 * - Each waiter has a module timer for its deadline (not the blocked
 *   client's timeout, and no timeout callback, so CLIENT UNBLOCK leaves
 *   waiters alone). At its deadline a waiter gets a final decision: the
 *   head is served; a waiter behind others is denied (its penalty effects
 *   stored), or, when its request would fit but earlier waiters come
 *   first, answered a denial that stores nothing, with retry_after_ms 0.
 * - What may let a waiter through without a check on its key -- DEL,
 *   expiry, FG.PLSTATE, a policy changed, a waiter ahead leaving -- arms
 *   the queue's timer to fire at once (FLUSHDB does not: see
 *   subscribe_events). Keys are written only in timers and commands, never
 *   in event callbacks.
 * - Timers run outside any command: they stop on a server that is no
 *   longer a master (-UNBLOCKED) or no longer serves the key's slot
 *   (-TRYAGAIN), and never write there. No client blocks in MULTI, a
 *   script, RedisModule_Call or on a replica: WAIT is then ignored.
 *
 * Queues live in the master's memory only: a waiter is a connection.
 */
#include "t_policy.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../core/messages.h"
#include "args.h"
#include "clock.h"
#include "effects.h"
#include "key_queues.h"
#include "limiter_types.h"
#include "memory_limits.h"
#include "policy_registry.h"
#include "policy_types.h"
#include "write_pause.h"

#define MAX_WAIT_MS 86400000
#define MAX_AT_US   (INT64_MAX / 1000) /* as the other checks' AT */


/* ============================================================= deciding */

/* One request for a key, from FG.CHECK or from a waiter. */
typedef struct request {
    const char *policy;
    size_t policy_len;
    RedisModuleString *key;
    const char *identity; /* what the lists are asked about: ID, or the key */
    size_t identity_len;
    int64_t cost;
} request;

/* What a client is told: an error, or the seven fields of FG.CHECK. */
typedef struct answer {
    bool is_error;
    char error[POLICY_MSG_MAX];
    fg_policy_answer a;
} answer;

/* A check (core/policy_check.h) with what it needs here: its policy, and
 * the key, open until the check is settled or discarded. */
typedef struct evaluation {
    bool failed;         /* a.error says why */
    policy *p;           /* unless failed */
    RedisModuleKey *key; /* decided by the key's state */
    bool existed;        /* the key held a state */
    plstat *held;        /* that state, of this policy (when existed) */
    fg_policy_eval c;
    answer a; /* the error, else filled when settled */
} evaluation;

static void fail(evaluation *ev, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void fail(evaluation *ev, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ev->a.error, sizeof(ev->a.error), fmt, ap);
    va_end(ap);
    ev->a.is_error = true;
    ev->failed = true;
}

static void close_key(evaluation *ev) {
    if (ev->key) RedisModule_CloseKey(ev->key);
    ev->key = NULL;
}

/* Decides by the key's state; the key stays open. */
static void evaluate_state(RedisModuleCtx *ctx, const request *r, evaluation *ev) {
    policy *p = ev->p;
    ev->key = RedisModule_OpenKey(ctx, r->key, REDISMODULE_READ | REDISMODULE_WRITE);
    plstat *v = NULL;
    plstat_lookup found = plstat_lookup_key(ev->key, &v);
    if (found == PLSTAT_WRONGTYPE) {
        close_key(ev);
        return fail(ev, "%s", REDISMODULE_ERRORMSG_WRONGTYPE);
    }
    fg_policy_state cur;
    if (found == PLSTAT_FOUND) {
        size_t len;
        const char *name = plstat_policy(v, &len);
        if (len != p->name_len || memcmp(name, p->name, len) != 0) {
            close_key(ev);
            return fail(ev, FG_ERR_POLICY_STATE, (int)len, name);
        }
        plstat_state(v, &cur);
        ev->existed = true;
        ev->held = v;
    }
    if (fg_policy_check_state(&ev->c, &p->rules, ev->existed ? &cur : NULL) != FG_OK) {
        close_key(ev);
        return fail(ev, "%s", FG_ERR_OVERFLOW);
    }
}

/* Decides r at now_us, writing nothing. ev->key stays open when the
 * decision came from the key's state. */
static void evaluate(RedisModuleCtx *ctx, const request *r, int64_t now_us, evaluation *ev) {
    /* Field by field: the check's states (a kilobyte) are written before
     * they are read, and this runs on every check. */
    ev->failed = false;
    ev->key = NULL;
    ev->existed = false;
    ev->held = NULL;
    policy *p = ev->p = registry_find(r->policy, r->policy_len);
    if (!p) return fail(ev, FG_ERR_POLICY_MISSING, (int)r->policy_len, r->policy);
    bool on_deny = list_contains(&p->deny, r->identity, r->identity_len);
    bool on_allow = !on_deny && list_contains(&p->allow, r->identity, r->identity_len);
    if (!fg_policy_check_lists(&ev->c, now_us, r->cost, on_deny, on_allow))
        evaluate_state(ctx, r, ev);
}

static void discard(evaluation *ev) {
    close_key(ev);
}

/* "limit:<1..8>", "penalty", "allowlist" or "denylist". */
static const char *decided_by(const fg_policy_answer *a, char limit[8]) {
    switch (a->decided_by) {
    case FG_CHECK_LIMIT:
        /* Without snprintf: this runs on every check. */
        memcpy(limit, "limit:", 6);
        limit[6] = (char)('1' + a->limit_index);
        limit[7] = '\0';
        return limit;
    case FG_CHECK_PENALTY: return "penalty";
    case FG_CHECK_DENYLIST: return "denylist";
    case FG_CHECK_ALLOWLIST: return "allowlist";
    }
    return "";
}

static void reply_answer(RedisModuleCtx *ctx, const answer *a) {
    if (a->is_error) {
        RedisModule_ReplyWithError(ctx, a->error);
        return;
    }
    char limit[8];
    RedisModule_ReplyWithArray(ctx, 7);
    RedisModule_ReplyWithLongLong(ctx, a->a.allowed);
    RedisModule_ReplyWithLongLong(ctx, a->a.limit);
    RedisModule_ReplyWithLongLong(ctx, a->a.remaining);
    RedisModule_ReplyWithLongLong(ctx, a->a.retry_after_ms);
    RedisModule_ReplyWithLongLong(ctx, a->a.reset_after_ms);
    RedisModule_ReplyWithCString(ctx, decided_by(&a->a, limit));
    RedisModule_ReplyWithLongLong(ctx, a->a.shadow_denied);
}

/* ============================================================== settling */

/* The key's absolute expiry for a state neutral at at_us in the decision's
 * time; with AT, counted from the server's clock (as t_ratelimit.c). */
static int64_t expiry_ms(int64_t at_us, int64_t clock_skew_us) {
    int64_t at;
    if (__builtin_add_overflow(at_us, clock_skew_us, &at)) at = INT64_MAX;
    return fg_us_to_ms_ceil(at < 0 ? 0 : at);
}

/* FG.PLSTATE key <payload> PXAT <expire_ms>: the payload is the stored
 * value itself, and "PXAT" a string made once. */
static RedisModuleString *word_pxat;

/* The keys of a policy with a fixed window share its end, their expiry. */
static kept_number state_expiry;

static void replicate_state(RedisModuleCtx *ctx, RedisModuleString *keyname, const plstat *v,
                            int64_t expire_ms) {
    size_t len;
    const uint8_t *payload = plstat_payload(v, &len);
    RedisModule_Replicate(ctx, "FG.PLSTATE", "sbss", keyname, (const char *)payload, len,
                          word_pxat, kept_number_of(&state_expiry, expire_ms));
}

/* Writes the check's new state (a state already neutral at now_us deletes
 * the key instead); whether the key changed. */
static bool store(RedisModuleCtx *ctx, const request *r, evaluation *ev, int64_t now_us,
                  int64_t clock_skew_us) {
    int64_t neutral_at = fg_policy_check_neutral_at(&ev->c);
    if (neutral_at <= now_us) {
        if (!ev->existed) return false;
        RedisModule_DeleteKey(ev->key);
        RedisModule_Replicate(ctx, "DEL", "s", r->key);
        return true;
    }
    int64_t expire_ms = expiry_ms(neutral_at, clock_skew_us);
    const plstat *v = plstat_store(ev->key, ev->existed ? ev->held : NULL, ev->p->name,
                                   ev->p->name_len, &ev->c.next, expire_ms);
    replicate_state(ctx, r->key, v, expire_ms);
    return true;
}

/* Whether settling ev stores a state in more memory than its key held: a
 * state for a key without one, or a larger one. Deleting a state, or
 * rewriting it in place, keeps or frees memory. */
static bool settle_grows(const evaluation *ev, int64_t now_us) {
    return !ev->failed && fg_policy_check_writes(&ev->c) &&
           fg_policy_check_neutral_at(&ev->c) > now_us &&
           plstat_store_grows(ev->existed ? ev->held : NULL, &ev->c.next);
}

/* Makes an evaluation the final answer: its state is stored if it changed,
 * the answer counted, and ev->a filled. */
static void settle(RedisModuleCtx *ctx, const request *r, evaluation *ev, int64_t now_us,
                   int64_t clock_skew_us) {
    if (ev->failed) return;
    const fg_policy_decision *d = &ev->c.d;
    if (fg_policy_check_writes(&ev->c) && store(ctx, r, ev, now_us, clock_skew_us)) {
        RedisModule_SignalModifiedKey(ctx, r->key);
        if (d->allowed && !d->shadow_denied && r->cost > 0)
            RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_MODULE, "fg.check", r->key);
        if (d->banned_now)
            RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_MODULE, "fg.penalty", r->key);
    }
    close_key(ev);
    fg_policy_check_count(&ev->c, &ev->p->counters);
    ev->a.is_error = false;
    fg_policy_check_answer(&ev->c, &ev->a.a);
}

/* ================================================================ queues */

typedef struct waiter {
    fg_waiter base;
    fg_wait_link link;
    RedisModuleBlockedClient *bc;
    request req; /* req.key is its queue's key; req.policy and req.identity point below or into it */
    char policy[POLICY_NAME_MAX];
    char *identity; /* ID's copy; NULL when the key is the identity */
    int64_t deadline_us;
    RedisModuleTimerID deadline;
    bool has_deadline;
    deferred_work paused; /* its deadline passed while writes were paused */
} waiter;

static void serve(RedisModuleCtx *ctx, key_queue *q, int64_t now_us);
static void fail_all_waiters(RedisModuleCtx *ctx, key_queue *q, const char *error);

static const key_queue_family policy_queues = {serve, fail_all_waiters};
static key_queues queues;

static key_queue *queue_of(const waiter *w) {
    return fg_wait_container(w->link.queue, key_queue, waiters);
}

static waiter *waiter_at(fg_waiter *w) {
    return fg_wait_container(w, waiter, base);
}

/* Takes a waiter out of its queue (which stays, possibly empty) and frees it. */
static void waiter_remove(RedisModuleCtx *ctx, waiter *w) {
    if (w->has_deadline) RedisModule_StopTimer(ctx, w->deadline, NULL);
    cancel_deferred(&w->paused);
    fg_waiter_leave(&w->base);
    key_queues_untrack(&queues, w->bc);
    RedisModule_Free(w->identity);
    RedisModule_Free(w);
}

/* Tells a waiter its answer (written by waiter_reply); the waiter is gone
 * afterwards. */
static void waiter_answer(RedisModuleCtx *ctx, waiter *w, const answer *a) {
    answer *copy = RedisModule_Alloc(sizeof(*copy));
    *copy = *a;
    RedisModule_UnblockClient(w->bc, copy);
    waiter_remove(ctx, w);
}

static void waiter_fail(RedisModuleCtx *ctx, waiter *w, const char *error) {
    answer a = {.is_error = true};
    snprintf(a.error, sizeof(a.error), "%s", error);
    waiter_answer(ctx, w, &a);
}

static void fail_all_waiters(RedisModuleCtx *ctx, key_queue *q, const char *error) {
    fg_waiter *head;
    while ((head = fg_wait_head(&q->waiters)) != NULL)
        waiter_fail(ctx, waiter_at(head), error);
}

/* ============================================================== serving */

/* Whether a waiter's evaluation lets it wait on; *wake_us is then when. */
static bool waits_on(const evaluation *ev, int64_t deadline_us, int64_t *wake_us) {
    return !ev->failed && fg_policy_check_waits_on(&ev->c, deadline_us, wake_us);
}

/* The head is allowed or finally denied (answered), or waits on: the
 * queue's timer is armed for its retry. */
static bool try_head(fg_wait_queue *wq, fg_waiter *head, const fg_wait_serving *s) {
    RedisModuleCtx *ctx = s->arg;
    waiter *w = waiter_at(head);
    evaluation ev;
    int64_t wake_us;
    evaluate(ctx, &w->req, s->now_us, &ev);
    if (waits_on(&ev, w->deadline_us, &wake_us)) {
        discard(&ev);
        key_queue_arm(ctx, fg_wait_container(wq, key_queue, waiters), wake_us, s->now_us);
        return false;
    }
    settle(ctx, &w->req, &ev, s->now_us, 0);
    waiter_answer(ctx, w, &ev.a);
    return true;
}

static void settle_queue(fg_wait_queue *wq, const fg_wait_serving *s) {
    key_queue_drop_if_empty(s->arg, fg_wait_container(wq, key_queue, waiters));
}

/* Answers the waiters of q from the head while they are allowed or
 * finally denied. ctx must have q's database selected. */
static void serve(RedisModuleCtx *ctx, key_queue *q, int64_t now_us) {
    fg_wait_queue *wq = &q->waiters;
    fg_wait_serving serving = {try_head, settle_queue, ctx, now_us};
    fg_wait_serve(&wq, 1, &serving);
}

static void deadline_passed(RedisModuleCtx *ctx, void *data);

/* The pause is over: the deadline timer fires again at once. */
static void resume_deadline(RedisModuleCtx *ctx, deferred_work *work) {
    waiter *w = fg_wait_container(work, waiter, paused);
    w->deadline = RedisModule_CreateTimer(ctx, 0, deadline_passed, w);
    w->has_deadline = true;
}

/* The waiter's deadline: its final answer now, or (since that answer may
 * store penalty effects) as soon as a pause of writes ends. */
static void deadline_passed(RedisModuleCtx *ctx, void *data) {
    waiter *w = data;
    key_queue *q = queue_of(w);
    w->has_deadline = false;
    const char *error = key_queue_cannot_serve(ctx, q);
    if (error) {
        waiter_fail(ctx, w, error);
        key_queue_drop_if_empty(ctx, q);
        return;
    }
    if (writes_paused()) {
        defer_while_paused(ctx, &w->paused, resume_deadline);
        return;
    }
    int64_t now_us = wall_clock_us();
    w->deadline_us = now_us; /* so that it does not wait on */
    if (fg_wait_head(&q->waiters) == &w->base) {
        serve(ctx, q, now_us);
        return;
    }
    evaluation ev;
    evaluate(ctx, &w->req, now_us, &ev);
    answer a = {.is_error = false};
    if (!ev.failed && fg_policy_check_yield(&ev.c, false, &a.a, &ev.p->counters)) {
        discard(&ev);
        waiter_answer(ctx, w, &a);
        return;
    }
    settle(ctx, &w->req, &ev, now_us, 0);
    waiter_answer(ctx, w, &ev.a);
}

/* ====================================================== blocked clients */

static int waiter_reply(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    (void)argv, (void)argc;
    reply_answer(ctx, RedisModule_GetBlockedClientPrivateData(ctx));
    return REDISMODULE_OK;
}

static void free_answer(RedisModuleCtx *ctx, void *privdata) {
    (void)ctx;
    RedisModule_Free(privdata);
}

/* Also called when the server unblocks the client itself (a master that
 * becomes a replica answers -UNBLOCKED). */
static void waiter_disconnected(RedisModuleCtx *ctx, RedisModuleBlockedClient *bc) {
    waiter *w = key_queues_waiter(&queues, bc);
    if (!w) return;
    key_queue *q = queue_of(w);
    waiter_remove(ctx, w);
    key_queue_after_leave(ctx, q);
}

/* Blocks the client at the tail of its key's queue (id: its ID, NULL when
 * the key is the identity); first_try_us is when its request could first
 * be allowed, were it alone. */
static void enqueue(RedisModuleCtx *ctx, const request *r, RedisModuleString *id,
                    int64_t timeout_ms, int64_t now_us, int64_t first_try_us) {
    key_queue *q = key_queue_get(&queues, RedisModule_GetSelectedDb(ctx), r->key);
    waiter *w = RedisModule_Alloc(sizeof(*w));
    memset(w, 0, sizeof(*w));
    memcpy(w->policy, r->policy, r->policy_len);
    w->req = (request){w->policy, r->policy_len, q->key, NULL, 0, r->cost};
    if (id) {
        w->identity = RedisModule_Alloc(r->identity_len ? r->identity_len : 1);
        memcpy(w->identity, r->identity, r->identity_len);
        w->req.identity = w->identity;
        w->req.identity_len = r->identity_len;
    } else {
        w->req.identity = RedisModule_StringPtrLen(q->key, &w->req.identity_len);
    }
    w->deadline_us = now_us + timeout_ms * 1000;
    w->bc = RedisModule_BlockClient(ctx, waiter_reply, NULL, free_answer, 0);
    RedisModule_SetDisconnectCallback(w->bc, waiter_disconnected);
    w->deadline = RedisModule_CreateTimer(ctx, timeout_ms, deadline_passed, w);
    w->has_deadline = true;
    key_queues_track(&queues, w->bc, w);
    fg_wait_queue *wq = &q->waiters;
    fg_waiter_join(&w->base, &w->link, &wq, 1);
    if (fg_wait_head(wq) == &w->base) key_queue_arm(ctx, q, first_try_us, now_us);
}

/* ============================================================= FG.CHECK */

typedef struct check_options {
    RedisModuleString *id; /* NULL: the key is the identity */
    int64_t cost;
    int64_t wait_ms; /* 0: no WAIT */
    int64_t at_us;   /* -1: the server's clock */
} check_options;

/* [COST n] [ID identity] [WAIT timeout_ms] [AT unix_us], in any order. */
static int parse_check_options(RedisModuleCtx *ctx, RedisModuleString **argv, int argc,
                               check_options *o) {
    *o = (check_options){NULL, 1, 0, -1};
    enum { OPT_COST, OPT_ID, OPT_WAIT, OPT_AT, OPTIONS };
    static const char *const names[OPTIONS] = {"COST", "ID", "WAIT", "AT"};
    for (int i = 0; i < argc; i += 2) {
        int which = OPT_COST;
        while (which < OPTIONS && !arg_is(argv[i], names[which]))
            which++;
        if (which == OPTIONS)
            return RedisModule_ReplyWithError(ctx, "ERR syntax error: the options are COST n, "
                                                   "ID identity, WAIT timeout_ms and AT unix_us"),
                   0;
        if (i + 1 >= argc) return reply_error_fmt(ctx, ERR_NEEDS_VALUE, names[which]), 0;
        RedisModuleString *v = argv[i + 1];
        switch (which) {
        case OPT_COST:
            if (!parse_integer(ctx, v, "COST", 0, INT64_MAX, &o->cost)) return 0;
            break;
        case OPT_ID: o->id = v; break;
        case OPT_WAIT:
            if (!parse_integer(ctx, v, "WAIT", 1, MAX_WAIT_MS, &o->wait_ms)) return 0;
            break;
        case OPT_AT:
            if (!parse_integer(ctx, v, "AT", 0, MAX_AT_US, &o->at_us)) return 0;
            break;
        }
    }
    if (o->wait_ms && o->at_us >= 0)
        return RedisModule_ReplyWithError(ctx, "ERR WAIT and AT cannot be combined"), 0;
    return 1;
}

/* Whether a server config has a value, read through the server (only when
 * an AOF rewrite starts). */
static bool config_is(RedisModuleCtx *ctx, const char *name, const char *expected) {
    RedisModuleCallReply *reply = RedisModule_Call(ctx, "CONFIG", "cc", "GET", name);
    if (!reply) return false;
    RedisModuleCallReply *value = RedisModule_CallReplyArrayElement(reply, 1);
    size_t len = 0;
    const char *s = value ? RedisModule_CallReplyStringPtr(value, &len) : NULL;
    bool is = s && len == strlen(expected) && memcmp(s, expected, len) == 0;
    RedisModule_FreeCallReply(reply);
    return is;
}

/* Whether a request that may wait does, and from when it may be tried. */
static bool should_wait(const evaluation *ev, bool queued_ahead, int64_t timeout_ms,
                        int64_t *first_try_us) {
    return !ev->failed && fg_policy_check_waits(&ev->c, queued_ahead, timeout_ms, first_try_us);
}

/* FG.CHECK policy key [COST n] [ID identity] [WAIT timeout_ms] [AT unix_us] */
static int check_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc < 3) return RedisModule_WrongArity(ctx);
    request r = {.key = argv[2]};
    r.policy = RedisModule_StringPtrLen(argv[1], &r.policy_len);
    if (!fg_policy_name_valid(r.policy, r.policy_len))
        return RedisModule_ReplyWithError(ctx, FG_ERR_POLICY_NAME);
    check_options o;
    if (!parse_check_options(ctx, argv + 3, argc - 3, &o)) return REDISMODULE_OK;
    if (o.at_us >= 0 && !explicit_time_allowed())
        return RedisModule_ReplyWithError(ctx, ERR_AT_DISABLED);
    r.cost = o.cost;
    r.identity = RedisModule_StringPtrLen(o.id ? o.id : r.key, &r.identity_len);

    int64_t server_now_us = server_clock_us();
    int64_t now_us = o.at_us >= 0 ? o.at_us : server_now_us;
    bool may_wait = o.wait_ms > 0 && client_can_block(ctx);
    key_queue *q = may_wait ? key_queue_find(&queues, RedisModule_GetSelectedDb(ctx), r.key) : NULL;
    evaluation ev;
    evaluate(ctx, &r, now_us, &ev);
    int64_t first_try_us;
    bool waits =
        may_wait && should_wait(&ev, q && fg_wait_busy(&q->waiters), o.wait_ms, &first_try_us);
    /* A waiter, or a state that grows, is refused when memory is full, as
     * Redis refuses a deny-oom command; a timer's settling never is. The
     * state first: with maxmemory set, asking for the memory costs more. */
    if ((waits || settle_grows(&ev, now_us)) && memory_full()) {
        discard(&ev);
        return RedisModule_ReplyWithError(ctx, MEMORY_FULL_ERR);
    }
    if (waits) {
        ev.p->counters.waited++;
        discard(&ev);
        enqueue(ctx, &r, o.id, o.wait_ms, now_us, first_try_us);
        return REDISMODULE_OK;
    }
    settle(ctx, &r, &ev, now_us, server_now_us - now_us);
    reply_answer(ctx, &ev.a);
    return REDISMODULE_OK;
}

/* =========================================================== FG.PLSTATE */

/* FG.PLSTATE key payload [PXAT unix_ms] */
static int plstate_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (!effect_command_allowed(ctx, argv[0])) return REDISMODULE_OK;
    if (argc != 3 && argc != 5) return RedisModule_WrongArity(ctx);
    int64_t expire_ms = REDISMODULE_NO_EXPIRE;
    if (argc == 5) {
        if (!arg_is(argv[3], "PXAT"))
            return RedisModule_ReplyWithError(ctx, "ERR syntax error: the only option is "
                                                   "PXAT unix_ms");
        if (!parse_integer(ctx, argv[4], "PXAT", 0, INT64_MAX / 1000, &expire_ms))
            return REDISMODULE_OK;
    }
    RedisModuleKey *key = RedisModule_OpenKey(ctx, argv[1], REDISMODULE_READ | REDISMODULE_WRITE);
    plstat *v;
    plstat_lookup found = plstat_lookup_key(key, &v);
    if (found == PLSTAT_WRONGTYPE) {
        RedisModule_CloseKey(key);
        return RedisModule_ReplyWithError(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
    }
    size_t len, held_len = 0;
    const char *payload = RedisModule_StringPtrLen(argv[2], &len);
    if (found == PLSTAT_FOUND) plstat_payload(v, &held_len);
    /* A client's payload no longer than the state held keeps memory. */
    if (len > held_len && memory_full()) {
        RedisModule_CloseKey(key);
        return RedisModule_ReplyWithError(ctx, MEMORY_FULL_ERR);
    }
    bool stored = plstat_store_payload(key, (const uint8_t *)payload, len, expire_ms);
    RedisModule_CloseKey(key);
    if (!stored) return RedisModule_ReplyWithError(ctx, "ERR invalid policy state payload");
    RedisModule_ReplicateVerbatim(ctx);
    RedisModule_SignalModifiedKey(ctx, argv[1]);
    RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_MODULE, "fg.plstate", argv[1]);
    key_queue *q = key_queue_find(&queues, RedisModule_GetSelectedDb(ctx), argv[1]);
    if (q) key_queue_arm(ctx, q, 0, 0);
    return RedisModule_ReplyWithSimpleString(ctx, "OK");
}

/* ============================================================ FG.POLICY */

/* The policy named by arg; NULL after replying the error. */
static policy *named_policy(RedisModuleCtx *ctx, RedisModuleString *arg) {
    size_t len;
    const char *name = RedisModule_StringPtrLen(arg, &len);
    if (!fg_policy_name_valid(name, len)) {
        RedisModule_ReplyWithError(ctx, FG_ERR_POLICY_NAME);
        return NULL;
    }
    policy *p = registry_find(name, len);
    if (!p) reply_error_fmt(ctx, FG_ERR_POLICY_MISSING, (int)len, name);
    return p;
}

/* A policy changed: waiters are decided again by what it is now. */
static void policies_changed(RedisModuleCtx *ctx) {
    key_queues_arm_all(ctx, &queues);
}

/* FG.POLICY SET name rule [rule ...] */
static int policy_set_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc < 4) return RedisModule_WrongArity(ctx);
    size_t len;
    const char *name = RedisModule_StringPtrLen(argv[2], &len);
    char msg[POLICY_MSG_MAX];
    policy *p = policy_parse(name, len, argv + 3, argc - 3, msg, sizeof(msg));
    if (!p || !registry_install(p, msg, sizeof(msg))) return RedisModule_ReplyWithError(ctx, msg);
    RedisModule_ReplicateVerbatim(ctx);
    policies_changed(ctx);
    return RedisModule_ReplyWithSimpleString(ctx, "OK");
}

/* FG.POLICY DEL name */
static int policy_del_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 3) return RedisModule_WrongArity(ctx);
    size_t len;
    const char *name = RedisModule_StringPtrLen(argv[2], &len);
    if (!fg_policy_name_valid(name, len)) return RedisModule_ReplyWithError(ctx, FG_ERR_POLICY_NAME);
    bool deleted = registry_delete(name, len);
    if (deleted) {
        RedisModule_ReplicateVerbatim(ctx);
        policies_changed(ctx);
    }
    return RedisModule_ReplyWithLongLong(ctx, deleted);
}

static void reply_word(RedisModuleCtx *ctx, RedisModuleString *word) {
    size_t len;
    const char *s = RedisModule_StringPtrLen(word, &len);
    RedisModule_ReplyWithStringBuffer(ctx, s, len);
}

/* Each LIMIT rule's words: the algorithm, then its numbers as given. */
static void reply_limits(RedisModuleCtx *ctx, const policy *p) {
    RedisModule_ReplyWithArray(ctx, p->rules.nlimits);
    for (uint32_t i = 0; i < p->rules.nlimits; i++) {
        fg_policy_algorithm a = p->rules.limits[i].algorithm;
        int n = policy_algorithm_params(a);
        RedisModule_ReplyWithArray(ctx, 1 + n);
        RedisModule_ReplyWithCString(ctx, policy_algorithm_word(a));
        for (int j = 1; j <= n; j++)
            reply_word(ctx, p->words[p->limit_at[i] + j]);
    }
}

/* [ban_ms, n, window_ms], the defaults filled in; [] without a penalty. */
static void reply_penalty(RedisModuleCtx *ctx, const policy *p) {
    if (p->ban_at < 0) {
        RedisModule_ReplyWithArray(ctx, 0);
        return;
    }
    RedisModule_ReplyWithArray(ctx, 3);
    reply_word(ctx, p->words[p->ban_at]);
    if (p->after_at >= 0)
        reply_word(ctx, p->words[p->after_at]);
    else
        RedisModule_ReplyWithStringBuffer(ctx, "1", 1);
    reply_word(ctx, p->words[p->within_at >= 0 ? p->within_at : p->ban_at]);
}

/* [kind, entries], and a Bloom list's error and capacity (its filter's:
 * a replaced policy keeps a list of the same kind), so that a definition
 * read back can be set again. */
static void reply_list(RedisModuleCtx *ctx, const policy_list *l) {
    bool bloom = l->kind == LIST_BLOOM;
    RedisModule_ReplyWithArray(ctx, bloom ? 4 : 2);
    RedisModule_ReplyWithCString(ctx, list_kind_name(l->kind));
    RedisModule_ReplyWithLongLong(ctx, (long long)list_entries(l));
    if (!bloom) return;
    char error[32]; /* text, as the limits' numbers are (and RESP2 has no double) */
    const fg_bloom *f = &l->bloom->f;
    RedisModule_ReplyWithStringBuffer(ctx, error,
                                      (size_t)snprintf(error, sizeof(error), "%.17g", f->error));
    RedisModule_ReplyWithLongLong(ctx, (long long)f->capacity0);
}

static void reply_counter(RedisModuleCtx *ctx, const char *name, long long value) {
    RedisModule_ReplyWithCString(ctx, name);
    RedisModule_ReplyWithLongLong(ctx, value);
}

/* FG.POLICY GET name */
static int policy_get_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 3) return RedisModule_WrongArity(ctx);
    policy *p = named_policy(ctx, argv[2]);
    if (!p) return REDISMODULE_OK;
    RedisModule_ReplyWithMap(ctx, 11);
    RedisModule_ReplyWithCString(ctx, "name");
    RedisModule_ReplyWithStringBuffer(ctx, p->name, p->name_len);
    RedisModule_ReplyWithCString(ctx, "limits");
    reply_limits(ctx, p);
    RedisModule_ReplyWithCString(ctx, "penalty");
    reply_penalty(ctx, p);
    reply_counter(ctx, "shadow", p->rules.shadow);
    RedisModule_ReplyWithCString(ctx, "allowlist");
    reply_list(ctx, &p->allow);
    RedisModule_ReplyWithCString(ctx, "denylist");
    reply_list(ctx, &p->deny);
    reply_counter(ctx, "allowed", p->counters.allowed);
    reply_counter(ctx, "denied", p->counters.denied);
    reply_counter(ctx, "banned", p->counters.banned);
    reply_counter(ctx, "shadow_denied", p->counters.shadow_denied);
    reply_counter(ctx, "waited", p->counters.waited);
    return REDISMODULE_OK;
}

static void reply_name(policy *p, void *ctx) {
    RedisModule_ReplyWithStringBuffer(ctx, p->name, p->name_len);
}

/* FG.POLICY LIST */
static int policy_list_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    (void)argv;
    if (argc != 2) return RedisModule_WrongArity(ctx);
    RedisModule_ReplyWithArray(ctx, (long)registry_count());
    registry_for_each(reply_name, ctx);
    return REDISMODULE_OK;
}

/* Adds argv[3..] to a list. A Bloom list that cannot grow stops the
 * command there: what was added before is replicated alone. */
static int add_to_list(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, bool deny) {
    if (argc < 4) return RedisModule_WrongArity(ctx);
    policy *p = named_policy(ctx, argv[2]);
    if (!p) return REDISMODULE_OK;
    policy_list *l = deny ? &p->deny : &p->allow;
    long long added = 0;
    const char *refusal = NULL;
    int i = 3;
    for (; i < argc; i++) {
        size_t len;
        const char *item = RedisModule_StringPtrLen(argv[i], &len);
        int r = list_add(l, item, len, &refusal);
        if (r < 0) break;
        added += r;
    }
    if (added > 0) {
        if (i == argc)
            RedisModule_ReplicateVerbatim(ctx);
        else
            RedisModule_Replicate(ctx, "FG.POLICY", "v", argv + 1, (size_t)(i - 1));
        policies_changed(ctx);
    }
    if (i < argc)
        return reply_error_fmt(ctx, FG_ERR_POLICY_LIST_GROW,
                               list_refusal_reason(refusal));
    return RedisModule_ReplyWithLongLong(ctx, added);
}

/* FG.POLICY ALLOW name item [item ...] */
static int policy_allow_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    return add_to_list(ctx, argv, argc, false);
}

/* FG.POLICY DENY name item [item ...] */
static int policy_deny_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    return add_to_list(ctx, argv, argc, true);
}

/* FG.POLICY UNLIST name ALLOW|DENY item [item ...] */
static int policy_unlist_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc < 5) return RedisModule_WrongArity(ctx);
    bool deny = arg_is(argv[3], "DENY");
    if (!deny && !arg_is(argv[3], "ALLOW"))
        return RedisModule_ReplyWithError(ctx, "ERR UNLIST takes ALLOW or DENY");
    policy *p = named_policy(ctx, argv[2]);
    if (!p) return REDISMODULE_OK;
    policy_list *l = deny ? &p->deny : &p->allow;
    if (l->kind == LIST_BLOOM)
        return RedisModule_ReplyWithError(ctx, "ERR a Bloom list cannot remove items");
    long long removed = 0;
    for (int i = 4; i < argc; i++) {
        size_t len;
        const char *item = RedisModule_StringPtrLen(argv[i], &len);
        removed += list_remove(l, item, len);
    }
    if (removed > 0) {
        RedisModule_ReplicateVerbatim(ctx);
        policies_changed(ctx);
    }
    return RedisModule_ReplyWithLongLong(ctx, removed);
}

/* ================================================================ events */

void policy_key_event(RedisModuleCtx *ctx, RedisModuleString *key) {
    key_queue *q = key_queue_find(&queues, RedisModule_GetSelectedDb(ctx), key);
    if (q) key_queue_arm(ctx, q, 0, 0);
}

/* A file or a full sync starts to load: what it holds replaces the
 * registry (its aux data fills it again), and a file without policies
 * leaves none behind. */
static void on_loading(RedisModuleCtx *ctx, RedisModuleEvent eid, uint64_t subevent, void *data) {
    (void)eid, (void)data;
    if (subevent != REDISMODULE_SUBEVENT_LOADING_RDB_START &&
        subevent != REDISMODULE_SUBEVENT_LOADING_AOF_START &&
        subevent != REDISMODULE_SUBEVENT_LOADING_REPL_START)
        return;
    registry_clear();
    key_queues_arm_all(ctx, &queues);
}

/* An AOF rewritten without the RDB preamble has no aux data: the policies
 * would be lost at the next restart. */
static void on_persistence(RedisModuleCtx *ctx, RedisModuleEvent eid, uint64_t subevent,
                           void *data) {
    (void)eid, (void)data;
    if (subevent != REDISMODULE_SUBEVENT_PERSISTENCE_AOF_START || registry_count() == 0) return;
    if (config_is(ctx, "aof-use-rdb-preamble", "no"))
        RedisModule_Log(ctx, "warning",
                        "floodgate: this AOF rewrite has no RDB preamble, so it does not keep "
                        "the %llu policies: they will be lost at restart unless applied again "
                        "(set aof-use-rdb-preamble yes)",
                        (unsigned long long)registry_count());
}

/* ========================================================= registration */

typedef struct subcommand {
    const char *name;
    RedisModuleCmdFunc fn;
    const char *flags;
    const char *usage; /* FG.POLICY HELP's lines: the arguments, what it does */
    const char *does;
} subcommand;

static int policy_help_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);

/* HELP comes last, as the server's own HELP lists it. */
static const subcommand policy_subcommands[] = {
    {"SET", policy_set_command, "write deny-oom", "SET <name> <rule> [<rule> ...]",
     "Creates or replaces a policy. Rules: LIMIT <TOKEN|LEAKY|GCRA|FIXED|SLIDING> <args>, "
     "PENALTY <ban_ms> [AFTER <n>] [WITHIN <window_ms>], SHADOW, "
     "<ALLOWLIST|DENYLIST> <EXACT|BLOOM <error> <capacity>>."},
    {"DEL", policy_del_command, "write", "DEL <name>",
     "Deletes a policy and its lists: 1, or 0 when there was none."},
    {"GET", policy_get_command, "readonly", "GET <name>",
     "Shows a policy's rules, lists and counters as field/value pairs."},
    {"LIST", policy_list_command, "readonly", "LIST", "Lists the names of the policies, sorted."},
    {"ALLOW", policy_allow_command, "write deny-oom", "ALLOW <name> <item> [<item> ...]",
     "Adds items to a policy's allow list: how many were new."},
    {"DENY", policy_deny_command, "write deny-oom", "DENY <name> <item> [<item> ...]",
     "Adds items to a policy's deny list: how many were new."},
    {"UNLIST", policy_unlist_command, "write", "UNLIST <name> <ALLOW|DENY> <item> [<item> ...]",
     "Removes items from a policy's exact allow or deny list: how many were removed."},
    {"HELP", policy_help_command, "readonly fast allow-loading allow-stale", "HELP",
     "Prints this help."},
};

#define POLICY_SUBCOMMANDS (sizeof(policy_subcommands) / sizeof(policy_subcommands[0]))

/* FG.POLICY HELP: the server's unknown-subcommand error points here. Status
 * lines as the server's own HELP subcommands answer: a heading, then each
 * subcommand's arguments and, indented, what it does. */
static int policy_help_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    (void)argv;
    if (argc != 2) return RedisModule_WrongArity(ctx);
    RedisModule_ReplyWithArray(ctx, 1 + 2 * POLICY_SUBCOMMANDS);
    RedisModule_ReplyWithSimpleString(ctx, "FG.POLICY <subcommand> [<arg> ...]. Subcommands are:");
    for (size_t i = 0; i < POLICY_SUBCOMMANDS; i++) {
        const subcommand *s = &policy_subcommands[i];
        char line[256];
        snprintf(line, sizeof(line), "    %s", s->does);
        RedisModule_ReplyWithSimpleString(ctx, s->usage);
        RedisModule_ReplyWithSimpleString(ctx, line);
    }
    return REDISMODULE_OK;
}

void policy_keys_replaced(RedisModuleCtx *ctx) {
    key_queues_arm_all(ctx, &queues);
}

/* Keyspace events, FLUSHDB and SWAPDB reach the waiters through
 * floodgate.c, shared with the locks. */
static int subscribe_events(RedisModuleCtx *ctx) {
    RedisModuleEvent loading = {REDISMODULE_EVENT_LOADING, 1},
                     persistence = {REDISMODULE_EVENT_PERSISTENCE, 1};
    if (RedisModule_SubscribeToServerEvent(ctx, loading, on_loading) != REDISMODULE_OK ||
        RedisModule_SubscribeToServerEvent(ctx, persistence, on_persistence) != REDISMODULE_OK)
        return REDISMODULE_ERR;
    return REDISMODULE_OK;
}

/* The family's commands (families.c checks their names, then creates them).
 * FG.POLICY, without a function, is the parent of the subcommands above. */
#define POLICY_PARENT "FG.POLICY"
const command_spec policy_commands[] = {
    {"FG.CHECK", check_command, "write", 2, 2},
    {"FG.PLSTATE", plstate_command, "write", 1, 1},
    {POLICY_PARENT, NULL, "", 0, 0},
    {0},
};

int policy_commands_created(RedisModuleCtx *ctx) {
    key_queues_init(&queues, &policy_queues);
    word_pxat = RedisModule_CreateString(NULL, "PXAT", 4);
    RedisModuleCommand *parent = RedisModule_GetCommand(ctx, POLICY_PARENT);
    if (!parent) return REDISMODULE_ERR;
    for (size_t i = 0; i < POLICY_SUBCOMMANDS; i++) {
        const subcommand *s = &policy_subcommands[i];
        if (RedisModule_CreateSubcommand(parent, s->name, s->fn, s->flags, 0, 0, 0) !=
            REDISMODULE_OK)
            return REDISMODULE_ERR;
    }
    return subscribe_events(ctx);
}

static void info_policy(policy *p, void *arg) {
    RedisModuleInfoCtx *ctx = arg;
    char field[sizeof("policy_") + POLICY_NAME_MAX];
    snprintf(field, sizeof(field), "policy_%.*s", (int)p->name_len, p->name);
    RedisModule_InfoBeginDictField(ctx, field);
    RedisModule_InfoAddFieldLongLong(ctx, "allowed", p->counters.allowed);
    RedisModule_InfoAddFieldLongLong(ctx, "denied", p->counters.denied);
    RedisModule_InfoAddFieldLongLong(ctx, "banned", p->counters.banned);
    RedisModule_InfoAddFieldLongLong(ctx, "shadow_denied", p->counters.shadow_denied);
    RedisModule_InfoAddFieldLongLong(ctx, "waited", p->counters.waited);
    RedisModule_InfoEndDictField(ctx);
}

void policy_info(RedisModuleInfoCtx *ctx) {
    if (RedisModule_InfoAddSection(ctx, "policies") != REDISMODULE_OK) return;
    RedisModule_InfoAddFieldLongLong(ctx, "policies", (long long)registry_count());
    registry_for_each(info_policy, ctx);
}
