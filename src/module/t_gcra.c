/*
 * t_gcra.c - GCRA, the rate-limit command Redis merged for 8.8 and then
 * held out of the release (docs/commands.md "GCRA"):
 *
 *   GCRA key max_burst tokens_per_period period [TOKENS count]
 *
 * Everything that command decides is core/gcra_compat.c's; this file reads
 * the arguments the way the server's own readers do, and keeps the state
 * where Redis's first design kept it: a plain string holding the TAT in
 * decimal microseconds, expiring at the TAT in milliseconds (rounded up,
 * as Redis's last design did). An admitted request writes it and
 * replicates `SET key <tat> PXAT <ms>`, with keyspace events "set" then
 * "expire"; a refusal writes and replicates nothing. So any server applies
 * what it replicates, and a key travels by replication, MIGRATE,
 * DUMP/RESTORE or an AOF to any server, with or without the module.
 *
 * Writes are in place: once a key holds a raw string of the TAT's length,
 * the new digits are copied over the old ones, and nothing is allocated.
 * Raw, because the module API decodes any other encoding of a string on
 * every read (RedisModule_StringDMA); an integer-encoded value (what SET,
 * RESTORE or a replica's load make) is decoded once, then stays raw.
 *
 * floodgate's one addition: where floodgate.explicit-time allows it, a last
 * `AT unix_us` decides at that time (truncated to the millisecond, as the
 * command's clock is), so tests can replay its semantics at chosen times. A
 * key that has expired by then counts as absent, as the server's expiry
 * would have it at that time. Without the config the grammar is Redis's.
 */
#include "t_gcra.h"

#include <string.h>

#include "../core/gcra_compat.h"
#include "args.h"
#include "clock.h"

static RedisModuleString *word_pxat; /* made once: replication runs per admission */

/* ---------------------------------------------------------- arguments */

static int refuse(RedisModuleCtx *ctx, const char *err) {
    RedisModule_ReplyWithError(ctx, err);
    return 0;
}

static int accepted(RedisModuleCtx *ctx, const char *err) {
    return err == NULL ? 1 : refuse(ctx, err);
}

/* Numbers as the server's own readers take them (the module API uses the
 * same functions), with their replies. */
static int read_integer_arg(RedisModuleCtx *ctx, RedisModuleString *arg, int64_t *out) {
    long long v;
    if (RedisModule_StringToLongLong(arg, &v) != REDISMODULE_OK)
        return refuse(ctx, FG_GCRA_COMPAT_ERR_NOT_INTEGER);
    *out = v;
    return 1;
}

/* Most periods are whole seconds: the integer reader is far cheaper, and
 * both readers give the correctly rounded double of an integer. */
static int read_double_arg(RedisModuleCtx *ctx, RedisModuleString *arg, double *out) {
    long long whole;
    if (RedisModule_StringToLongLong(arg, &whole) == REDISMODULE_OK) {
        *out = (double)whole;
        return 1;
    }
    if (RedisModule_StringToDouble(arg, out) != REDISMODULE_OK)
        return refuse(ctx, FG_GCRA_COMPAT_ERR_NOT_FLOAT);
    return 1;
}

/* Redis's arguments, checked in its order; 0 once an error is replied. */
static int parse_arguments(RedisModuleCtx *ctx, RedisModuleString **argv, int argc,
                           fg_gcra_compat_params *p) {
    int64_t max_burst;
    if (!read_integer_arg(ctx, argv[2], &max_burst) ||
        !accepted(ctx, fg_gcra_compat_set_max_burst(p, max_burst)) ||
        !read_integer_arg(ctx, argv[3], &p->tokens_per_period) ||
        !accepted(ctx, fg_gcra_compat_check_count(p->tokens_per_period)) ||
        !read_double_arg(ctx, argv[4], &p->period_s) ||
        !accepted(ctx, fg_gcra_compat_check_period(p->period_s)))
        return 0;
    p->tokens = 1;
    if (argc == FG_GCRA_COMPAT_MIN_ARGS) return 1;
    if (!arg_is(argv[5], "TOKENS")) return refuse(ctx, FG_GCRA_COMPAT_ERR_SYNTAX);
    if (argc == FG_GCRA_COMPAT_MIN_ARGS + 1) return refuse(ctx, FG_GCRA_COMPAT_ERR_NO_TOKENS);
    return read_integer_arg(ctx, argv[6], &p->tokens) &&
           accepted(ctx, fg_gcra_compat_check_count(p->tokens));
}

/* Takes a last `AT unix_us` off the arguments where the config allows it;
 * *at_us stays -1 otherwise. 0 once an error is replied. */
static int take_explicit_time(RedisModuleCtx *ctx, RedisModuleString **argv, int *argc,
                              int64_t *at_us) {
    if (!explicit_time_allowed() || *argc < FG_GCRA_COMPAT_MIN_ARGS + 2 ||
        !arg_is(argv[*argc - 2], "AT"))
        return 1;
    /* The latest time whose nanoseconds fit in 64 bits, as for FG.* */
    if (!parse_integer(ctx, argv[*argc - 1], "AT", 0, INT64_MAX / 1000, at_us)) return 0;
    *argc -= 2;
    return 1;
}

/* -------------------------------------------------------------- state */

/* The stored TAT: *stored is false for no key, and, at an explicit time,
 * for a key that has expired by then (at the server's time, the server's
 * own lookup has deleted it). NULL, or the error to reply. */
static const char *read_state(RedisModuleKey *key, int64_t now_us, bool explicit_time, bool *stored,
                              int64_t *tat_us) {
    int type = RedisModule_KeyType(key);
    *stored = type != REDISMODULE_KEYTYPE_EMPTY &&
              !(explicit_time && fg_gcra_compat_expired(RedisModule_GetAbsExpire(key), now_us));
    if (!*stored) return NULL;
    if (type != REDISMODULE_KEYTYPE_STRING) return REDISMODULE_ERRORMSG_WRONGTYPE;
    size_t len;
    const char *value = RedisModule_StringDMA(key, &len, REDISMODULE_READ);
    return fg_gcra_compat_read_tat(value, len, tat_us);
}

/* Sets the key to the digits, replacing whatever it held (see the top
 * comment for why in place), and its expiry. */
static void store_digits(RedisModuleKey *key, const number_arg *digits, int64_t expire_ms) {
    size_t len = 0;
    char *buf = NULL;
    if (RedisModule_KeyType(key) == REDISMODULE_KEYTYPE_STRING)
        buf = RedisModule_StringDMA(key, &len, REDISMODULE_WRITE);
    if (buf == NULL || len != digits->len) {
        RedisModule_DeleteKey(key);
        RedisModule_StringTruncate(key, digits->len);
        buf = RedisModule_StringDMA(key, &len, REDISMODULE_WRITE);
    }
    memcpy(buf, digits->str, digits->len);
    RedisModule_SetAbsExpire(key, expire_ms);
}

/* The admitted request's effect, stored and replicated as Redis's GCRA does. */
static void store_tat(RedisModuleCtx *ctx, RedisModuleKey *key, RedisModuleString *keyname,
                      int64_t tat_us) {
    number_arg tat, ms;
    int64_t expire_ms = fg_gcra_compat_expire_ms(tat_us);
    format_number(&tat, tat_us);
    format_number(&ms, expire_ms);
    store_digits(key, &tat, expire_ms);
    RedisModule_Replicate(ctx, "SET", "sbsb", keyname, tat.str, tat.len, word_pxat, ms.str, ms.len);
}

/* ------------------------------------------------------------ command */

static void reply(RedisModuleCtx *ctx, const fg_gcra_compat_reply *r) {
    RedisModule_ReplyWithArray(ctx, 5);
    RedisModule_ReplyWithLongLong(ctx, r->limited);
    RedisModule_ReplyWithLongLong(ctx, r->capacity);
    RedisModule_ReplyWithLongLong(ctx, r->remaining);
    RedisModule_ReplyWithLongLong(ctx, r->retry_after_s);
    RedisModule_ReplyWithLongLong(ctx, r->reset_after_s);
}

/* GCRA key max_burst tokens_per_period period [TOKENS count] [AT unix_us] */
static int gcra_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    fg_gcra_compat_params p;
    int64_t at_us = -1;
    if (!take_explicit_time(ctx, argv, &argc, &at_us)) return REDISMODULE_OK;
    if (argc < FG_GCRA_COMPAT_MIN_ARGS || argc > FG_GCRA_COMPAT_MAX_ARGS)
        return RedisModule_WrongArity(ctx);
    if (!parse_arguments(ctx, argv, argc, &p)) return REDISMODULE_OK;

    int64_t now_us = fg_gcra_compat_now_us(at_us >= 0 ? at_us : server_clock_us());
    RedisModuleKey *key = RedisModule_OpenKey(ctx, argv[1], REDISMODULE_READ | REDISMODULE_WRITE);
    bool stored;
    int64_t tat_us = 0, new_tat_us;
    fg_gcra_compat_reply r;
    const char *err = read_state(key, now_us, at_us >= 0, &stored, &tat_us);
    if (err == NULL) err = fg_gcra_compat_decide(&p, stored, tat_us, now_us, &r, &new_tat_us);
    bool admitted = err == NULL && !r.limited;
    if (admitted) store_tat(ctx, key, argv[1], new_tat_us);
    RedisModule_CloseKey(key);
    if (err != NULL) return RedisModule_ReplyWithError(ctx, err);

    if (admitted) {
        RedisModule_SignalModifiedKey(ctx, argv[1]);
        RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_STRING, "set", argv[1]);
        RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_GENERIC, "expire", argv[1]);
    }
    reply(ctx, &r);
    return REDISMODULE_OK;
}

/* In lower case: the server's arity error names the command as it was
 * registered, and Redis's GCRA says 'gcra'. */
const command_spec gcra_commands[] = {
    {"gcra", gcra_command, "write deny-oom fast", 1, 1},
    {0},
};

int gcra_commands_created(RedisModuleCtx *ctx) {
    (void)ctx;
    if (word_pxat == NULL) word_pxat = RedisModule_CreateString(NULL, "PXAT", 4);
    return REDISMODULE_OK;
}

family_mode gcra_commands_mode(void) {
    return FAMILY_REGISTER_IF_FREE;
}
