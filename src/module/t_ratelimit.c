/*
 * t_ratelimit.c - the rate-limit commands: a thin layer between the protocol
 * and src/core.
 *
 * Every check follows the same path: parse the arguments (any error answers
 * and changes nothing), open the key, read the clock once, let the core
 * decide, and only when the request is admitted with a cost store the new
 * state, give the key its absolute expiry and replicate the state itself
 * (FG.SETSTATE / FG.LOGAPPEND) with absolute times. A replica or an AOF
 * replayed days later therefore holds exactly what the master held, without
 * ever reading its own clock. Denials, peeks and COST 0 write nothing and
 * replicate nothing.
 *
 * The families differ only in their parameters and their core call; they are
 * described by the `limiters` table below.
 */
#include "t_ratelimit.h"

#include <stdio.h>
#include <string.h>

#include "../core/limiter.h"
#include "../core/messages.h"
#include "../core/params.h"
#include "args.h"
#include "clock.h"
#include "effects.h"
#include "limiter_types.h"
#include "memory_limits.h"
#include "policy_types.h"
#include "t_policy.h"

typedef enum reply_style { REPLY_FLOODGATE, REPLY_REDIS_CELL } reply_style;

typedef struct limiter {
    const char *peek_arg; /* its name in FG.PEEK, NULL if not peekable */
    const char *event;    /* keyspace event of an admitted request */
    const char *stat;     /* INFO field prefix */
    fg_limiter_family family;
    int nparams; /* positional arguments after the key */
    int (*parse)(RedisModuleCtx *ctx, RedisModuleString **args, fg_limiter_params *p);
    reply_style style;
    long long allowed, denied;
} limiter;

/* ------------------------------------------------------------- parameters */

/* The raw numbers are parsed here; their ranges and conversions are the
 * core's (core/params.c), shared with the client library. */

static int parse_bucket(RedisModuleCtx *ctx, RedisModuleString **args, fg_limiter_params *p,
                        const char *rate_name) {
    int64_t capacity;
    double rate;
    char msg[FG_PARAM_MSG];
    if (!parse_integer(ctx, args[0], "capacity", INT64_MIN, INT64_MAX, &capacity) ||
        !parse_decimal(ctx, args[1], rate_name, &rate))
        return 0;
    if (!fg_param_bucket(capacity, rate, rate_name, &p->bucket, msg, sizeof(msg)))
        return reply_param_error(ctx, msg);
    return 1;
}

static int parse_token(RedisModuleCtx *ctx, RedisModuleString **args, fg_limiter_params *p) {
    return parse_bucket(ctx, args, p, "refill_per_sec");
}

static int parse_leaky(RedisModuleCtx *ctx, RedisModuleString **args, fg_limiter_params *p) {
    return parse_bucket(ctx, args, p, "leak_per_sec");
}

static int parse_gcra(RedisModuleCtx *ctx, RedisModuleString **args, fg_limiter_params *p) {
    int64_t capacity;
    double count, period_ms;
    char msg[FG_PARAM_MSG];
    if (!parse_integer(ctx, args[0], "capacity", INT64_MIN, INT64_MAX, &capacity) ||
        !parse_decimal(ctx, args[1], "count", &count) ||
        !parse_decimal(ctx, args[2], "period_ms", &period_ms))
        return 0;
    if (!fg_param_gcra(capacity, count, period_ms, &p->bucket, msg, sizeof(msg)))
        return reply_param_error(ctx, msg);
    return 1;
}

/* redis-cell: integers, period in seconds, and its emission interval computed
 * as it does, a double division truncated to whole nanoseconds, so that every
 * answer matches it to the nanosecond. */
static int parse_throttle(RedisModuleCtx *ctx, RedisModuleString **args, fg_limiter_params *p) {
    int64_t max_burst, count, period;
    if (!parse_integer(ctx, args[0], "max_burst", 0, INT64_MAX - 1, &max_burst) ||
        !parse_integer(ctx, args[1], "count", 1, INT64_MAX, &count) ||
        !parse_integer(ctx, args[2], "period", 1, INT64_MAX / FG_NS_PER_SEC, &period))
        return 0;
    double emission = (double)(period * FG_NS_PER_SEC) / (double)count;
    if (emission < 1) {
        RedisModule_ReplyWithError(ctx, "ERR rate too high: count per period must leave at "
                                        "least one nanosecond per unit");
        return 0;
    }
    p->bucket.capacity = max_burst + 1;
    p->bucket.emission_ns = (int64_t)emission;
    return 1;
}

static int parse_window(RedisModuleCtx *ctx, RedisModuleString **args, int64_t max_limit,
                        int64_t *limit, int64_t *window_us) {
    double window_ms;
    char msg[FG_PARAM_MSG];
    if (!parse_integer(ctx, args[0], "limit", INT64_MIN, INT64_MAX, limit) ||
        !parse_decimal(ctx, args[1], "window_ms", &window_ms))
        return 0;
    if (!fg_param_window(*limit, max_limit, window_ms, window_us, msg, sizeof(msg)))
        return reply_param_error(ctx, msg);
    return 1;
}

static int parse_fixed(RedisModuleCtx *ctx, RedisModuleString **args, fg_limiter_params *p) {
    return parse_window(ctx, args, INT64_MAX, &p->fixed.limit, &p->fixed.window_us);
}

static int parse_sliding(RedisModuleCtx *ctx, RedisModuleString **args, fg_limiter_params *p) {
    return parse_window(ctx, args, INT64_MAX, &p->sliding.limit, &p->sliding.window_us);
}

static int parse_slidelog(RedisModuleCtx *ctx, RedisModuleString **args, fg_limiter_params *p) {
    return parse_window(ctx, args, FG_SLOG_MAX_LIMIT, &p->slidelog.limit, &p->slidelog.window_us);
}

enum { THROTTLE, GCRA, TOKEN, LEAKY, FIXED, SLIDING, SLIDELOG, LIMITER_COUNT };

static limiter limiters[LIMITER_COUNT] = {
    [THROTTLE] = {NULL, "cl.throttle", "throttle", FG_LIMITER_BUCKET, 3, parse_throttle,
                  REPLY_REDIS_CELL, 0, 0},
    [GCRA] = {"GCRA", "fg.gcra", "gcra", FG_LIMITER_BUCKET, 3, parse_gcra, REPLY_FLOODGATE, 0, 0},
    [TOKEN] = {"TOKEN", "fg.token", "token", FG_LIMITER_BUCKET, 2, parse_token, REPLY_FLOODGATE, 0, 0},
    [LEAKY] = {"LEAKY", "fg.leaky", "leaky", FG_LIMITER_BUCKET, 2, parse_leaky, REPLY_FLOODGATE, 0, 0},
    [FIXED] = {"FIXED", "fg.fixed", "fixed", FG_LIMITER_FIXED, 2, parse_fixed, REPLY_FLOODGATE, 0, 0},
    [SLIDING] = {"SLIDING", "fg.sliding", "sliding", FG_LIMITER_SLIDING, 2, parse_sliding,
                 REPLY_FLOODGATE, 0, 0},
    [SLIDELOG] = {"SLIDELOG", "fg.slidelog", "slidelog", FG_LIMITER_SLIDELOG, 2, parse_slidelog,
                  REPLY_FLOODGATE, 0, 0},
};

/* ---------------------------------------------------------------- replies */

/* redis-cell's rounding: whole seconds, plus one if any millisecond is left. */
static long long ns_to_cell_seconds(int64_t ns) {
    if (ns < 0) return -1;
    return ns / FG_NS_PER_SEC + ((ns % FG_NS_PER_SEC) / FG_NS_PER_MS > 0);
}

static void reply_decision(RedisModuleCtx *ctx, const fg_decision *d, reply_style style) {
    RedisModule_ReplyWithArray(ctx, 5);
    if (style == REPLY_REDIS_CELL) {
        RedisModule_ReplyWithLongLong(ctx, d->allowed ? 0 : 1);
        RedisModule_ReplyWithLongLong(ctx, d->limit);
        RedisModule_ReplyWithLongLong(ctx, d->remaining);
        RedisModule_ReplyWithLongLong(ctx, ns_to_cell_seconds(d->retry_after_ns));
        RedisModule_ReplyWithLongLong(ctx, ns_to_cell_seconds(d->reset_after_ns));
    } else {
        RedisModule_ReplyWithLongLong(ctx, d->allowed ? 1 : 0);
        RedisModule_ReplyWithLongLong(ctx, d->limit);
        RedisModule_ReplyWithLongLong(ctx, d->remaining);
        RedisModule_ReplyWithLongLong(ctx, fg_ns_to_ms_ceil(d->retry_after_ns));
        RedisModule_ReplyWithLongLong(ctx, fg_ns_to_ms_ceil(d->reset_after_ns));
    }
}

static int reply_status_error(RedisModuleCtx *ctx, fg_status st) {
    return RedisModule_ReplyWithError(ctx,
                                      st == FG_EOVERFLOW ? FG_ERR_OVERFLOW : FG_ERR_INVALID_LIMIT);
}

/* ------------------------------------------------------------ replication */

/* Replication runs on every admitted request, so its arguments are made
 * cheaply: the constant words once at load, the numbers formatted here. */
static RedisModuleString *word_pxat;
static RedisModuleString *word_family[FG_LIMITER_FAMILIES];

/* The keys of one window share its start and its end, their expiry. */
static kept_number window_start, window_end;

/* A bucket's key expires when the bucket is full again: at its TAT, unless
 * AT moved the decision's time (expiry_ms). */
static int64_t bucket_expiry_ms(int64_t tat_ns) {
    return fg_us_to_ms_ceil(fg_gcra_expires_at_us(tat_ns));
}

/* FG.SETSTATE key <tat_ns>, the expiry implied: two arguments where the
 * long form, FG.SETSTATE key bucket <tat_ns> PXAT <expire_ms>, takes five
 * (that form remains for a TAT whose expiry AT moved). */
static void replicate_bucket(RedisModuleCtx *ctx, RedisModuleString *key, int64_t tat_ns,
                             int64_t expire_ms) {
    number_arg tat, ms;
    format_number(&tat, tat_ns);
    if (expire_ms == bucket_expiry_ms(tat_ns)) {
        RedisModule_Replicate(ctx, "FG.SETSTATE", "sb", key, tat.str, tat.len);
        return;
    }
    format_number(&ms, expire_ms);
    RedisModule_Replicate(ctx, "FG.SETSTATE", "ssbsb", key, word_family[FG_LIMITER_BUCKET],
                          tat.str, tat.len, word_pxat, ms.str, ms.len);
}

/* FG.SETSTATE key fixed <window_start_us> <count> PXAT <expire_ms> */
static void replicate_fixed(RedisModuleCtx *ctx, RedisModuleString *key, const fg_fixed_state *s,
                            int64_t expire_ms) {
    number_arg count;
    format_number(&count, s->count);
    RedisModule_Replicate(ctx, "FG.SETSTATE", "sssbss", key, word_family[FG_LIMITER_FIXED],
                          kept_number_of(&window_start, s->window_start_us), count.str, count.len,
                          word_pxat, kept_number_of(&window_end, expire_ms));
}

/* FG.SETSTATE key sliding <window_start_us> <count> <prev_count> PXAT <expire_ms> */
static void replicate_sliding(RedisModuleCtx *ctx, RedisModuleString *key,
                              const fg_sliding_state *s, int64_t expire_ms) {
    number_arg count, prev;
    format_number(&count, s->count);
    format_number(&prev, s->prev_count);
    RedisModule_Replicate(ctx, "FG.SETSTATE", "sssbbss", key, word_family[FG_LIMITER_SLIDING],
                          kept_number_of(&window_start, s->window_start_us), count.str, count.len,
                          prev.str, prev.len, word_pxat, kept_number_of(&window_end, expire_ms));
}

/* FG.LOGAPPEND key drop_through_us at_us count PXAT expire_ms */
static void replicate_log_effect(RedisModuleCtx *ctx, RedisModuleString *key,
                                 const fg_slog_effect *e, int64_t expire_ms) {
    number_arg drop, at, n, ms;
    format_number(&drop, e->drop_through_us);
    format_number(&at, e->at_us);
    format_number(&n, e->count);
    format_number(&ms, expire_ms);
    RedisModule_Replicate(ctx, "FG.LOGAPPEND", "sbbbsb", key, drop.str, drop.len, at.str, at.len,
                          n.str, n.len, word_pxat, ms.str, ms.len);
}

static void create_replication_words(void) {
    word_pxat = RedisModule_CreateString(NULL, "PXAT", 4);
    for (int f = 0; f < FG_LIMITER_FAMILIES; f++) {
        const char *name = family_name((fg_limiter_family)f);
        word_family[f] = RedisModule_CreateString(NULL, name, strlen(name));
    }
}

/* ------------------------------------------------------------ the checks */

typedef struct check {
    RedisModuleCtx *ctx;
    RedisModuleKey *key;
    RedisModuleString *keyname;
    void *value; /* stored state, NULL when the key is empty */
    const fg_limiter_params *params;
    int64_t now_us;        /* the decision's time: the server's clock, or AT */
    int64_t clock_skew_us; /* server clock - now_us: 0 unless AT was given */
    int64_t cost;
    bool commit;          /* false for peeks */
    bool replaces_string; /* the key holds a redis-cell string being converted */
    fg_decision decision;
} check;

/* The key's absolute expiry for a state empty at `empty_at_us` in the
 * decision's time. With AT, the TTL is still the time until the state is
 * empty, counted from the server's clock, so a replayed or backfilled state
 * lives as long as it matters instead of expiring at once. */
static int64_t expiry_ms(const check *c, int64_t empty_at_us) {
    int64_t at;
    if (__builtin_add_overflow(empty_at_us, c->clock_skew_us, &at)) at = INT64_MAX;
    return fg_us_to_ms_ceil(at < 0 ? 0 : at);
}

/* Stores a state of the family but the sliding log, and replicates it.
 * Replicas still hold redis-cell's string: it is deleted there first (the
 * server wraps both commands in MULTI/EXEC). */
static void store_state(check *c, fg_limiter_family family, const fg_limiter_state *s,
                        int64_t expire_ms) {
    if (family == FG_LIMITER_SLIDELOG) return; /* stored as an effect */
    if (c->replaces_string) RedisModule_Replicate(c->ctx, "DEL", "s", c->keyname);
    switch (family) {
    case FG_LIMITER_BUCKET:
        store_bucket(c->key, c->value, s->tat_ns, expire_ms);
        replicate_bucket(c->ctx, c->keyname, s->tat_ns, expire_ms);
        break;
    case FG_LIMITER_FIXED:
        store_fixed(c->key, c->value, &s->fixed, expire_ms);
        replicate_fixed(c->ctx, c->keyname, &s->fixed, expire_ms);
        break;
    case FG_LIMITER_SLIDING:
        store_sliding(c->key, c->value, &s->sliding, expire_ms);
        replicate_sliding(c->ctx, c->keyname, &s->sliding, expire_ms);
        break;
    case FG_LIMITER_SLIDELOG: break;
    }
}

/* Stores and replicates what an admitted request left (core/limiter.h). */
static fg_status store_next(check *c, fg_limiter_family family, const fg_limiter_next *next) {
    int64_t expire_ms = expiry_ms(c, next->empty_at_us);
    if (family != FG_LIMITER_SLIDELOG) {
        store_state(c, family, &next->st, expire_ms);
        return FG_OK;
    }
    fg_status st = store_slidelog_effect(c->key, &next->effect, expire_ms);
    if (st == FG_OK) replicate_log_effect(c->ctx, c->keyname, &next->effect, expire_ms);
    return st;
}

/* Whether storing what an admitted request left grows memory: a state for
 * a key without one (redis-cell's string gives way to a smaller bucket),
 * or a sliding log whose ring is too small for the entries it keeps after
 * the request (limit - remaining of them). Every other state is rewritten
 * in place. */
static bool store_grows(const check *c, fg_limiter_family family) {
    if (c->value == NULL) return !c->replaces_string;
    return family == FG_LIMITER_SLIDELOG &&
           c->decision.limit - c->decision.remaining > ((const fg_slog *)c->value)->cap;
}

/* The stored state as the core reads it: a copy (the sliding log's
 * entries stay where they are). */
static void read_state(fg_limiter_family family, const void *value, fg_limiter_state *s) {
    switch (family) {
    case FG_LIMITER_BUCKET: s->tat_ns = bucket_tat((void *)value); break;
    case FG_LIMITER_FIXED: s->fixed = *(const fg_fixed_state *)value; break;
    case FG_LIMITER_SLIDING: s->sliding = *(const fg_sliding_state *)value; break;
    case FG_LIMITER_SLIDELOG: s->slidelog = *(const fg_slog *)value; break;
    }
}

/* A string left by redis-cell holds its arrival time in decimal ns. */
static bool read_redis_cell_state(RedisModuleKey *key, int64_t *tat_ns) {
    size_t len;
    const char *s = RedisModule_StringDMA(key, &len, REDISMODULE_READ);
    if (s == NULL || len == 0 || len > 19) return false;
    int64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return false;
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, s[i] - '0', &v))
            return false;
    }
    *tat_ns = v;
    return v > 0;
}

static int run_check(RedisModuleCtx *ctx, limiter *lim, RedisModuleString *keyname,
                     RedisModuleString **args, int nargs, bool peek) {
    fg_limiter_params params;
    int64_t cost, at_us = -1;
    if (nargs < lim->nparams) return RedisModule_WrongArity(ctx);
    if (!lim->parse(ctx, args, &params)) return REDISMODULE_OK;
    if (lim->style == REPLY_REDIS_CELL) {
        if (nargs > lim->nparams + 1) return RedisModule_WrongArity(ctx);
        cost = 1;
        if (nargs == lim->nparams + 1 &&
            !parse_integer(ctx, args[lim->nparams], "quantity", 0, INT64_MAX, &cost))
            return REDISMODULE_OK;
    } else if (!parse_options(ctx, args + lim->nparams, nargs - lim->nparams, &cost, &at_us)) {
        return REDISMODULE_OK;
    }
    if (at_us >= 0 && !explicit_time_allowed())
        return RedisModule_ReplyWithError(ctx, ERR_AT_DISABLED);

    check c = {.ctx = ctx,
               .keyname = keyname,
               .params = &params,
               .cost = cost,
               .commit = !peek && cost > 0};
    c.key = RedisModule_OpenKey(ctx, keyname,
                                c.commit ? REDISMODULE_READ | REDISMODULE_WRITE : REDISMODULE_READ);
    int64_t legacy_tat = 0;
    lookup_result found = limiter_lookup(c.key, lim->family, &c.value);
    if (found == LOOKUP_WRONGTYPE && !(lim->style == REPLY_REDIS_CELL &&
                                       RedisModule_KeyType(c.key) == REDISMODULE_KEYTYPE_STRING &&
                                       read_redis_cell_state(c.key, &legacy_tat))) {
        RedisModule_CloseKey(c.key);
        return RedisModule_ReplyWithError(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
    }
    if (found != LOOKUP_FOUND) c.value = NULL;
    c.replaces_string = found == LOOKUP_WRONGTYPE;
    int64_t server_now_us = server_clock_us();
    c.now_us = at_us >= 0 ? at_us : server_now_us;
    c.clock_skew_us = server_now_us - c.now_us;

    fg_limiter_state state = {.tat_ns = legacy_tat};
    if (c.value != NULL) read_state(lim->family, c.value, &state);
    fg_limiter_next next;
    fg_status st = fg_limiter_decide(lim->family, c.value != NULL || legacy_tat != 0 ? &state : NULL,
                                     c.params, c.now_us, c.cost, &c.decision, &next);
    if (st == FG_OK && c.commit && next.store && store_grows(&c, lim->family) && memory_full()) {
        RedisModule_CloseKey(c.key);
        return RedisModule_ReplyWithError(ctx, MEMORY_FULL_ERR);
    }
    if (st == FG_OK && c.commit && next.store) st = store_next(&c, lim->family, &next);
    bool wrote = st == FG_OK && c.commit && next.store;
    RedisModule_CloseKey(c.key);
    if (st != FG_OK) return reply_status_error(ctx, st);

    if (wrote) {
        RedisModule_SignalModifiedKey(ctx, keyname);
        RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_MODULE, lim->event, keyname);
    }
    if (!peek) {
        if (c.decision.allowed)
            lim->allowed++;
        else
            lim->denied++;
    }
    reply_decision(ctx, &c.decision, lim->style);
    return REDISMODULE_OK;
}

#define CHECK_COMMAND(fn, which)                                                                   \
    static int fn(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {                       \
        if (argc < 2) return RedisModule_WrongArity(ctx);                                          \
        return run_check(ctx, &limiters[which], argv[1], argv + 2, argc - 2, false);               \
    }
CHECK_COMMAND(throttle_command, THROTTLE)
CHECK_COMMAND(gcra_command, GCRA)
CHECK_COMMAND(token_command, TOKEN)
CHECK_COMMAND(leaky_command, LEAKY)
CHECK_COMMAND(fixed_command, FIXED)
CHECK_COMMAND(sliding_command, SLIDING)
CHECK_COMMAND(slidelog_command, SLIDELOG)

/* FG.PEEK <family> key args... [COST n] */
static int peek_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc < 3) return RedisModule_WrongArity(ctx);
    for (size_t i = 0; i < LIMITER_COUNT; i++) {
        if (limiters[i].peek_arg && arg_is(argv[1], limiters[i].peek_arg))
            return run_check(ctx, &limiters[i], argv[2], argv + 3, argc - 3, true);
    }
    return RedisModule_ReplyWithError(
        ctx, "ERR unknown family: use FIXED, SLIDING, SLIDELOG, TOKEN, LEAKY or GCRA");
}

/* ------------------------------------------------------------- refunds */

/* Applies a refund to a key that holds `family`; returns the units given back
 * and, when the state changed, stores and replicates it (or deletes it when
 * it is empty again). */
static fg_status refund_state(check *c, fg_limiter_family family, int64_t units, int64_t *refunded) {
    fg_status st;
    bool empty;
    if (family == FG_LIMITER_BUCKET) {
        int64_t tat = bucket_tat(c->value), next;
        st = fg_gcra_refund(tat, &c->params->bucket, c->now_us, units, &next, refunded);
        if (st != FG_OK || *refunded == 0) return st;
        empty = next == 0;
        if (!empty)
            store_state(c, family, &(fg_limiter_state){.tat_ns = next},
                        expiry_ms(c, fg_gcra_expires_at_us(next)));
    } else {
        fg_fixed_state next;
        st = fg_fixed_refund(c->value, &c->params->fixed, c->now_us, units, &next, refunded);
        if (st != FG_OK || *refunded == 0) return st;
        empty = next.count == 0;
        if (!empty)
            store_state(c, family, &(fg_limiter_state){.fixed = next},
                        expiry_ms(c, fg_fixed_expires_at_us(&next, &c->params->fixed)));
    }
    if (empty) {
        RedisModule_DeleteKey(c->key);
        RedisModule_Replicate(c->ctx, "DEL", "s", c->keyname);
    }
    return FG_OK;
}

/* FG.REFUND <TOKEN|LEAKY|GCRA|FIXED> key args... COST n [AT unix_us]: gives
 * back n units taken earlier and not used (a client's lease). */
static int refund_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc < 3) return RedisModule_WrongArity(ctx);
    limiter *lim = NULL;
    for (size_t i = 0; i < LIMITER_COUNT; i++)
        if (limiters[i].peek_arg && arg_is(argv[1], limiters[i].peek_arg)) lim = &limiters[i];
    if (lim == NULL || (lim->family != FG_LIMITER_BUCKET && lim->family != FG_LIMITER_FIXED))
        return RedisModule_ReplyWithError(ctx, "ERR FG.REFUND takes TOKEN, LEAKY, GCRA or FIXED");
    RedisModuleString **args = argv + 3;
    int nargs = argc - 3;
    fg_limiter_params params;
    int64_t units, at_us;
    if (nargs < lim->nparams) return RedisModule_WrongArity(ctx);
    if (!lim->parse(ctx, args, &params) ||
        !parse_options(ctx, args + lim->nparams, nargs - lim->nparams, &units, &at_us))
        return REDISMODULE_OK;
    if (at_us >= 0 && !explicit_time_allowed())
        return RedisModule_ReplyWithError(ctx, ERR_AT_DISABLED);

    check c = {.ctx = ctx, .keyname = argv[2], .params = &params};
    c.key = RedisModule_OpenKey(ctx, c.keyname, REDISMODULE_READ | REDISMODULE_WRITE);
    lookup_result found = limiter_lookup(c.key, lim->family, &c.value);
    if (found == LOOKUP_WRONGTYPE) {
        RedisModule_CloseKey(c.key);
        return RedisModule_ReplyWithError(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
    }
    int64_t server_now_us = server_clock_us(), refunded = 0;
    c.now_us = at_us >= 0 ? at_us : server_now_us;
    c.clock_skew_us = server_now_us - c.now_us;
    fg_status st = found == LOOKUP_FOUND ? refund_state(&c, lim->family, units, &refunded) : FG_OK;
    RedisModule_CloseKey(c.key);
    if (st != FG_OK) return reply_status_error(ctx, st);
    if (refunded > 0) {
        RedisModule_SignalModifiedKey(ctx, argv[2]);
        RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_MODULE, "fg.refund", argv[2]);
    }
    return RedisModule_ReplyWithLongLong(ctx, refunded);
}

/* ---------------------------------------------------- reset and inspect */

/* Which family a key holds; -1 when empty; FG_LIMITER_FAMILIES for a foreign type. */
static int key_family(RedisModuleKey *key, void **value) {
    if (RedisModule_KeyType(key) == REDISMODULE_KEYTYPE_EMPTY) return -1;
    for (int f = 0; f < FG_LIMITER_FAMILIES; f++)
        if (limiter_lookup(key, (fg_limiter_family)f, value) == LOOKUP_FOUND) return f;
    return FG_LIMITER_FAMILIES;
}

/* Whether a key holds a policy's state (FG.CHECK), which FG.RESET also
 * deletes. */
static bool holds_policy_state(RedisModuleKey *key) {
    plstat *v;
    return plstat_lookup_key(key, &v) == PLSTAT_FOUND;
}

/* FG.RESET key */
static int reset_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 2) return RedisModule_WrongArity(ctx);
    RedisModuleKey *key = RedisModule_OpenKey(ctx, argv[1], REDISMODULE_READ | REDISMODULE_WRITE);
    void *value;
    int family = key_family(key, &value);
    bool policy_state = family == FG_LIMITER_FAMILIES && holds_policy_state(key);
    if (policy_state) family = 0;
    if (family == FG_LIMITER_FAMILIES) {
        RedisModule_CloseKey(key);
        return RedisModule_ReplyWithError(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
    }
    if (family >= 0) {
        RedisModule_DeleteKey(key);
        RedisModule_ReplicateVerbatim(ctx);
    }
    RedisModule_CloseKey(key);
    if (family >= 0) {
        RedisModule_SignalModifiedKey(ctx, argv[1]);
        RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_MODULE, "fg.reset", argv[1]);
    }
    if (policy_state) policy_key_event(ctx, argv[1]);
    return RedisModule_ReplyWithLongLong(ctx, family >= 0);
}

static void reply_run(int64_t ts, int64_t count, void *ctx) {
    RedisModule_ReplyWithLongLong(ctx, ts);
    RedisModule_ReplyWithLongLong(ctx, count);
}

static void reply_field(RedisModuleCtx *ctx, const char *name, long long value) {
    RedisModule_ReplyWithCString(ctx, name);
    RedisModule_ReplyWithLongLong(ctx, value);
}

/* FG.INSPECT key: type, the state's fields (as FG.SETSTATE takes them), pttl. */
static int inspect_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 2) return RedisModule_WrongArity(ctx);
    RedisModuleKey *key = RedisModule_OpenKey(ctx, argv[1], REDISMODULE_READ);
    void *value;
    int family = key_family(key, &value);
    if (family < 0) {
        RedisModule_CloseKey(key);
        return RedisModule_ReplyWithNull(ctx);
    }
    if (family == FG_LIMITER_FAMILIES) {
        RedisModule_CloseKey(key);
        return RedisModule_ReplyWithError(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
    }
    static const int field_count[FG_LIMITER_FAMILIES] = {1, 2, 3, 1};
    RedisModule_ReplyWithMap(ctx, 2 + field_count[family]);
    RedisModule_ReplyWithCString(ctx, "type");
    RedisModule_ReplyWithCString(ctx, family_name((fg_limiter_family)family));
    if (family == FG_LIMITER_BUCKET) {
        reply_field(ctx, "tat_ns", bucket_tat(value));
    } else if (family == FG_LIMITER_FIXED) {
        const fg_fixed_state *s = value;
        reply_field(ctx, "window_start_us", s->window_start_us);
        reply_field(ctx, "count", s->count);
    } else if (family == FG_LIMITER_SLIDING) {
        const fg_sliding_state *s = value;
        reply_field(ctx, "window_start_us", s->window_start_us);
        reply_field(ctx, "count", s->count);
        reply_field(ctx, "prev_count", s->prev_count);
    } else {
        RedisModule_ReplyWithCString(ctx, "entries");
        RedisModule_ReplyWithArray(ctx, 2 * (long)slidelog_run_count(value));
        slidelog_for_each_run(value, reply_run, ctx);
    }
    reply_field(ctx, "pttl", RedisModule_GetExpire(key));
    RedisModule_CloseKey(key);
    return REDISMODULE_OK;
}

/* ------------------------------------------------- replication commands */

/* The compact bucket form's expiry, implied by its TAT. */
#define EXPIRES_WHEN_FULL (-2)

/* Splits a trailing "PXAT unix_ms" off the arguments; -1 (no expiry) when
 * absent. */
static int parse_pxat(RedisModuleCtx *ctx, RedisModuleString **argv, int *argc,
                      int64_t *expire_ms) {
    *expire_ms = REDISMODULE_NO_EXPIRE;
    if (*argc >= 2 && arg_is(argv[*argc - 2], "PXAT")) {
        if (!parse_integer(ctx, argv[*argc - 1], "PXAT", 0, INT64_MAX / 1000, expire_ms)) return 0;
        *argc -= 2;
    }
    return 1;
}


/* The slidelog fields are runs "ts_us count", oldest first. */
static int setstate_slidelog(RedisModuleCtx *ctx, RedisModuleKey *key, RedisModuleString **f, int n,
                             int64_t expire_ms) {
    if (n == 0 || n % 2 != 0 || n > 2 * FG_SLOG_MAX_LIMIT) {
        RedisModule_ReplyWithError(ctx, "ERR slidelog takes pairs of ts_us count");
        return 0;
    }
    fg_slog *log = slidelog_create();
    for (int i = 0; i < n; i += 2) {
        fg_slog_effect e = {.drop_through_us = -1};
        if (!parse_integer(ctx, f[i], "ts_us", 0, INT64_MAX, &e.at_us) ||
            !parse_integer(ctx, f[i + 1], "count", 1, FG_SLOG_MAX_LIMIT, &e.count)) {
            slidelog_destroy(log);
            return 0;
        }
        if (fg_slog_apply(log, &e, &module_allocator) != FG_OK) {
            slidelog_destroy(log);
            RedisModule_ReplyWithError(ctx, "ERR slidelog entries must be in time order and "
                                            "at most 100000 in all");
            return 0;
        }
    }
    store_slidelog(key, log, expire_ms);
    return 1;
}

/* Parses the fields of one family and stores them; 0 after replying an
 * error. `held` is the key's value when it holds this family, else NULL. */
static int setstate_fields(RedisModuleCtx *ctx, RedisModuleKey *key, fg_limiter_family family,
                           void *held, RedisModuleString **f, int n, int64_t expire_ms) {
    static const int expected[FG_LIMITER_FAMILIES] = {1, 2, 3, -1};
    if (expected[family] >= 0 && n != expected[family]) {
        reply_error_fmt(ctx, "ERR %s takes %d field(s)", family_name(family), expected[family]);
        return 0;
    }
    if (family == FG_LIMITER_BUCKET) {
        int64_t tat;
        if (!parse_integer(ctx, f[0], "tat_ns", 1, INT64_MAX, &tat)) return 0;
        if (expire_ms == EXPIRES_WHEN_FULL) expire_ms = bucket_expiry_ms(tat);
        store_bucket(key, held, tat, expire_ms);
    } else if (family == FG_LIMITER_FIXED) {
        fg_fixed_state s;
        if (!parse_integer(ctx, f[0], "window_start_us", 0, INT64_MAX, &s.window_start_us) ||
            !parse_integer(ctx, f[1], "count", 1, INT64_MAX, &s.count))
            return 0;
        store_fixed(key, held, &s, expire_ms);
    } else if (family == FG_LIMITER_SLIDING) {
        fg_sliding_state s;
        if (!parse_integer(ctx, f[0], "window_start_us", 0, INT64_MAX, &s.window_start_us) ||
            !parse_integer(ctx, f[1], "count", 0, INT64_MAX, &s.count) ||
            !parse_integer(ctx, f[2], "prev_count", 0, INT64_MAX, &s.prev_count))
            return 0;
        if (!fg_sliding_state_storable(&s)) {
            RedisModule_ReplyWithError(ctx, "ERR sliding state needs count or prev_count > 0");
            return 0;
        }
        store_sliding(key, held, &s, expire_ms);
    } else {
        return setstate_slidelog(ctx, key, f, n, expire_ms);
    }
    return 1;
}

/* FG.SETSTATE key family field... [PXAT unix_ms], or FG.SETSTATE key
 * <tat_ns>: a bucket that expires when full again, as checks leave it. */
static int setstate_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (!effect_command_allowed(ctx, argv[0])) return REDISMODULE_OK;
    int64_t expire_ms = EXPIRES_WHEN_FULL;
    fg_limiter_family family = FG_LIMITER_BUCKET;
    RedisModuleString **fields = argv + 2;
    if (argc < 3) return RedisModule_WrongArity(ctx);
    if (argc > 3) {
        if (!parse_pxat(ctx, argv, &argc, &expire_ms)) return REDISMODULE_OK;
        if (argc < 4) return RedisModule_WrongArity(ctx);
        if (!family_from_name(argv[2], &family))
            return RedisModule_ReplyWithError(
                ctx, "ERR unknown state type: use bucket, fixed, sliding or slidelog");
        fields = argv + 3;
    }
    RedisModuleKey *key = RedisModule_OpenKey(ctx, argv[1], REDISMODULE_READ | REDISMODULE_WRITE);
    /* A key that is empty or holds any floodgate state may be overwritten. */
    void *value = NULL;
    int held = key_family(key, &value);
    if (held == FG_LIMITER_FAMILIES) {
        RedisModule_CloseKey(key);
        return RedisModule_ReplyWithError(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
    }
    /* A client's state of the key's own family is rewritten in place (but a
     * log, made anew); any other allocates. */
    if ((held != (int)family || family == FG_LIMITER_SLIDELOG) && memory_full()) {
        RedisModule_CloseKey(key);
        return RedisModule_ReplyWithError(ctx, MEMORY_FULL_ERR);
    }
    int stored = setstate_fields(ctx, key, family, held == (int)family ? value : NULL, fields,
                                 argc - (int)(fields - argv), expire_ms);
    RedisModule_CloseKey(key);
    if (!stored) return REDISMODULE_OK;
    RedisModule_ReplicateVerbatim(ctx);
    RedisModule_SignalModifiedKey(ctx, argv[1]);
    RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_MODULE, "fg.setstate", argv[1]);
    return RedisModule_ReplyWithCString(ctx, "OK");
}

/* FG.LOGAPPEND key drop_through_us at_us count [PXAT unix_ms] */
static int logappend_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (!effect_command_allowed(ctx, argv[0])) return REDISMODULE_OK;
    int64_t expire_ms;
    fg_slog_effect e;
    if (!parse_pxat(ctx, argv, &argc, &expire_ms)) return REDISMODULE_OK;
    if (argc != 5) return RedisModule_WrongArity(ctx);
    if (!parse_integer(ctx, argv[2], "drop_through_us", INT64_MIN, INT64_MAX, &e.drop_through_us) ||
        !parse_integer(ctx, argv[3], "at_us", 0, INT64_MAX, &e.at_us) ||
        !parse_integer(ctx, argv[4], "count", 1, FG_SLOG_MAX_LIMIT, &e.count))
        return REDISMODULE_OK;
    RedisModuleKey *key = RedisModule_OpenKey(ctx, argv[1], REDISMODULE_READ | REDISMODULE_WRITE);
    void *value = NULL;
    if (limiter_lookup(key, FG_LIMITER_SLIDELOG, &value) == LOOKUP_WRONGTYPE) {
        RedisModule_CloseKey(key);
        return RedisModule_ReplyWithError(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
    }
    /* A client's entries grow memory unless the log's ring has room for them
     * beside those it holds (what the effect drops is not counted first). */
    const fg_slog *log = value;
    if ((!log || log->len + e.count > log->cap) && memory_full()) {
        RedisModule_CloseKey(key);
        return RedisModule_ReplyWithError(ctx, MEMORY_FULL_ERR);
    }
    fg_status st = store_slidelog_effect(key, &e, expire_ms);
    RedisModule_CloseKey(key);
    if (st != FG_OK)
        return RedisModule_ReplyWithError(ctx, "ERR at_us must not be older than the newest "
                                               "entry, and the log holds at most 100000");
    RedisModule_ReplicateVerbatim(ctx);
    RedisModule_SignalModifiedKey(ctx, argv[1]);
    RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_MODULE, "fg.logappend", argv[1]);
    return RedisModule_ReplyWithCString(ctx, "OK");
}

/* ------------------------------------------------------------ registration */

/* The family's commands (families.c checks their names, then creates them). */
const command_spec ratelimit_commands[] = {
    {"CL.THROTTLE", throttle_command, "write fast", 1, 1},
    {"FG.GCRA", gcra_command, "write fast", 1, 1},
    {"FG.TOKEN", token_command, "write fast", 1, 1},
    {"FG.LEAKY", leaky_command, "write fast", 1, 1},
    {"FG.FIXED", fixed_command, "write fast", 1, 1},
    {"FG.SLIDING", sliding_command, "write fast", 1, 1},
    {"FG.SLIDELOG", slidelog_command, "write", 1, 1},
    {"FG.PEEK", peek_command, "readonly", 2, 2},
    {"FG.REFUND", refund_command, "write fast", 2, 2},
    {"FG.RESET", reset_command, "write fast", 1, 1},
    {"FG.INSPECT", inspect_command, "readonly", 1, 1},
    {"FG.SETSTATE", setstate_command, "write", 1, 1},
    {"FG.LOGAPPEND", logappend_command, "write", 1, 1},
    {0},
};

int ratelimit_commands_created(RedisModuleCtx *ctx) {
    (void)ctx;
    create_replication_words();
    return REDISMODULE_OK;
}

void ratelimit_info(RedisModuleInfoCtx *ctx) {
    if (RedisModule_InfoAddSection(ctx, "ratelimit") != REDISMODULE_OK) return;
    char field[64];
    for (size_t i = 0; i < LIMITER_COUNT; i++) {
        snprintf(field, sizeof(field), "%s_allowed", limiters[i].stat);
        RedisModule_InfoAddFieldLongLong(ctx, field, limiters[i].allowed);
        snprintf(field, sizeof(field), "%s_denied", limiters[i].stat);
        RedisModule_InfoAddFieldLongLong(ctx, field, limiters[i].denied);
    }
}
