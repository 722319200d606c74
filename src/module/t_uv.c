/*
 * t_uv.c - unique counting over time windows: the FG.UV* commands
 * (docs/uv.md; the algorithm in core/uv.h and docs/design-uv.md).
 *
 * Time. The core counts whole seconds; commands speak unix microseconds
 * and truncate them. An add reads the server's clock once and is
 * replicated as FG.UVADDAT with that instant and only the items that
 * changed the counter, so replicas and AOF replay never read a clock and
 * reach the master's exact state (every change in the core depends only on
 * the state, the item's hash and the second). FG.UVADDAT refuses instants
 * more than a minute ahead of the clock, which would move the counter's
 * newest second and prune its history, except in the master's stream and
 * while loading, where the master has already decided; other clients may
 * send it at all only with floodgate.explicit-time (effects.c).
 *
 * Windows. LAST n unit ends at the server's current second and must fit in
 * each counter's SPAN; BETWEEN is cut into buckets by the core and refused,
 * naming the edge and the key's grid, when an edge is off that grid:
 * rounding it would count another window than the one asked for. A union of
 * keys is the maximum of their registers, exact for any mix of grids since
 * each key's part is exact. Missing keys are empty, as in PFCOUNT.
 *
 * Keys of the multi-key commands sit before and after the window (key LAST
 * n unit key ...), which no legacy key range expresses: Redis 7.0 routes
 * module commands by the getkeys callback, so they report their keys there;
 * the key specs (command_docs.c) describe the same positions.
 */
#include "t_uv.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "../core/messages.h"
#include "args.h"
#include "clock.h"
#include "effects.h"
#include "memory_limits.h"
#include "uv_types.h"

#define WINDOW_ARGS      3 /* LAST n unit | BETWEEN start end */
#define REFUSAL_MAX      256 /* reply_error_fmt's room: refusals are cut as it cuts them */

static const char ERR_WINDOW[] = "ERR window must be LAST n unit or BETWEEN start_us end_us";

static long long stat_items_added, stat_windows_counted;

/* ================================================================ windows */

static int64_t unit_seconds(RedisModuleString *arg) {
    static const struct {
        const char *plural, *singular;
        int64_t seconds;
    } units[] = {{"SECONDS", "SECOND", 1},
                 {"MINUTES", "MINUTE", 60},
                 {"HOURS", "HOUR", 3600},
                 {"DAYS", "DAY", 86400}};
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
        if (arg_is(arg, units[i].plural) || arg_is(arg, units[i].singular)) return units[i].seconds;
    return 0;
}

/* Reads "LAST n unit" or "BETWEEN start_us end_us" at args[0..2]. */
static int parse_window(RedisModuleCtx *ctx, RedisModuleString **args, fg_uv_window *w) {
    int64_t a, b;
    if (arg_is(args[0], "LAST")) {
        if (!parse_integer(ctx, args[1], "n", 1, FG_UV_MAX_SPAN, &a)) return 0;
        int64_t unit = unit_seconds(args[2]);
        if (unit == 0) return RedisModule_ReplyWithError(ctx, FG_ERR_UV_UNIT), 0;
        *w = (fg_uv_window){.last = true, .seconds = a * unit};
        return 1;
    }
    if (!arg_is(args[0], "BETWEEN")) return RedisModule_ReplyWithError(ctx, ERR_WINDOW), 0;
    if (!parse_integer(ctx, args[1], "start_us", 0, FG_UV_MAX_US + 1, &a) ||
        !parse_integer(ctx, args[2], "end_us", 0, FG_UV_MAX_US + 1, &b))
        return 0;
    *w = (fg_uv_window){.last = false, .start = a / FG_UV_US_PER_SEC, .end = b / FG_UV_US_PER_SEC};
    if (w->start >= w->end) return RedisModule_ReplyWithError(ctx, FG_ERR_UV_ORDER), 0;
    return 1;
}

/* One counter's registers for the window, into regs. Replies and returns 0
 * when the window does not fit the counter. */
static int window_registers(RedisModuleCtx *ctx, RedisModuleString *keyname, const fg_uv *uv,
                            const fg_uv_window *w, int64_t now, uint8_t *regs) {
    char refusal[REFUSAL_MAX];
    size_t len;
    const char *name = RedisModule_StringPtrLen(keyname, &len);
    if (fg_uv_window_registers(uv, w, now, name, len, regs, refusal, sizeof(refusal))) return 1;
    RedisModule_ReplyWithError(ctx, refusal);
    return 0;
}

/* The union of the keys' windows into regs (zero when every key is
 * missing). Replies and returns 0 on a wrong type or a window that does not
 * fit. */
static int union_registers(RedisModuleCtx *ctx, RedisModuleString **keys, int nkeys,
                           const fg_uv_window *w, uint8_t regs[FG_UV_REGISTERS]) {
    int64_t now = server_clock_us() / FG_UV_US_PER_SEC;
    uint8_t part[FG_UV_REGISTERS];
    if (w->last && (now < 0 || now > FG_UV_MAX_SECOND))
        return RedisModule_ReplyWithError(ctx, FG_ERR_UV_CLOCK("server")), 0;
    bool filled = false; /* the first counter found writes regs directly */
    for (int i = 0; i < nkeys; i++) {
        RedisModuleKey *key = RedisModule_OpenKey(ctx, keys[i], REDISMODULE_READ);
        fg_uv *uv = NULL;
        uv_lookup found = uv_lookup_key(key, &uv);
        int ok = found != UV_WRONGTYPE;
        if (!ok) RedisModule_ReplyWithError(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
        if (ok && found == UV_FOUND) {
            ok = window_registers(ctx, keys[i], uv, w, now, filled ? part : regs);
            if (ok && filled) fg_uv_merge_registers(regs, part);
            filled = filled || ok;
        }
        RedisModule_CloseKey(key);
        if (!ok) return 0;
    }
    if (!filled) memset(regs, 0, FG_UV_REGISTERS);
    stat_windows_counted++;
    return 1;
}

/* The keys of "key window [key ...]" starting at argv[at]: argv[at] and
 * argv[at + 4 ..]. Gathered in `keys` (argc entries are enough). */
static int gather_keys(RedisModuleString **argv, int argc, int at, RedisModuleString **keys) {
    int n = 0;
    keys[n++] = argv[at];
    for (int i = at + 1 + WINDOW_ARGS; i < argc; i++) keys[n++] = argv[i];
    return n;
}

/* The registers of "key window [key ...]" at argv[at]; 0 when it replied an
 * error. */
static int read_window(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, int at,
                       uint8_t regs[FG_UV_REGISTERS]) {
    fg_uv_window w;
    if (!parse_window(ctx, argv + at + 1, &w)) return 0;
    RedisModuleString **keys = RedisModule_Alloc(sizeof(*keys) * (size_t)argc);
    int nkeys = gather_keys(argv, argc, at, keys);
    int ok = union_registers(ctx, keys, nkeys, &w, regs);
    RedisModule_Free(keys);
    return ok;
}

/* For cluster routing, ACLs and COMMAND GETKEYS: argv[1 .. at], then the
 * keys after the window; all are read, but FG.UVSTORE's destination. The
 * server asks here when the key specs fail, as for a single key (argc 5),
 * and plain KeyAtPos would demand write access to a key it only reads. */
static int report_window_keys(RedisModuleCtx *ctx, int argc, int at) {
    const int reads = REDISMODULE_CMD_KEY_RO | REDISMODULE_CMD_KEY_ACCESS,
              stores = REDISMODULE_CMD_KEY_OW | REDISMODULE_CMD_KEY_UPDATE;
    for (int i = 1; i <= at && i < argc; i++)
        RedisModule_KeyAtPosWithFlags(ctx, i, i < at ? stores : reads);
    for (int i = at + 1 + WINDOW_ARGS; i < argc; i++)
        RedisModule_KeyAtPosWithFlags(ctx, i, reads);
    return REDISMODULE_OK;
}

/* ================================================================= reads */

/* FG.UVCOUNT key window [key ...] */
static int count_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (RedisModule_IsKeysPositionRequest(ctx)) return report_window_keys(ctx, argc, 1);
    if (argc < 2 + WINDOW_ARGS) return RedisModule_WrongArity(ctx);
    uint8_t regs[FG_UV_REGISTERS];
    if (!read_window(ctx, argv, argc, 1, regs)) return REDISMODULE_OK;
    return RedisModule_ReplyWithLongLong(ctx, (long long)fg_uv_estimate(regs));
}

/* FG.UVEXPORT key window [key ...] */
static int export_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (RedisModule_IsKeysPositionRequest(ctx)) return report_window_keys(ctx, argc, 1);
    if (argc < 2 + WINDOW_ARGS) return RedisModule_WrongArity(ctx);
    uint8_t regs[FG_UV_REGISTERS], hll[FG_UV_HLL_BYTES];
    if (!read_window(ctx, argv, argc, 1, regs)) return REDISMODULE_OK;
    fg_uv_to_redis_hll(regs, hll);
    return RedisModule_ReplyWithStringBuffer(ctx, (const char *)hll, sizeof(hll));
}

/* FG.UVINFO key */
static int info_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 2) return RedisModule_WrongArity(ctx);
    RedisModuleKey *key = RedisModule_OpenKey(ctx, argv[1], REDISMODULE_READ);
    fg_uv *uv = NULL;
    switch (uv_lookup_key(key, &uv)) {
    case UV_WRONGTYPE: RedisModule_ReplyWithError(ctx, REDISMODULE_ERRORMSG_WRONGTYPE); break;
    case UV_EMPTY: RedisModule_ReplyWithError(ctx, "ERR no such key"); break;
    case UV_FOUND: {
        const struct {
            const char *name;
            long long value;
        } fields[] = {
            {"span", uv->span},
            {"minutes", uv->tiers[0].count},
            {"hours", uv->tiers[1].count},
            {"days", uv->tiers[2].count},
            {"tzoffset", uv->tzoffset},
            {"newest_us", uv->entries ? uv->newest * FG_UV_US_PER_SEC : 0},
            {"entries", (long long)uv->entries},
            {"buckets", (long long)uv->buckets},
            {"bytes", (long long)fg_uv_bytes(uv)},
        };
        size_t n = sizeof(fields) / sizeof(fields[0]);
        RedisModule_ReplyWithMap(ctx, (long)n);
        for (size_t i = 0; i < n; i++) {
            RedisModule_ReplyWithSimpleString(ctx, fields[i].name);
            RedisModule_ReplyWithLongLong(ctx, fields[i].value);
        }
        break;
    }
    }
    RedisModule_CloseKey(key);
    return REDISMODULE_OK;
}

/* ================================================================ writes */

static void key_changed(RedisModuleCtx *ctx, RedisModuleString *keyname, const char *event) {
    RedisModule_SignalModifiedKey(ctx, keyname);
    RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_MODULE, event, keyname);
}

/* Whether `at_us` comes from a master that has decided already (its
 * replication stream, or the AOF being loaded). */
static bool decided_elsewhere(RedisModuleCtx *ctx) {
    return RedisModule_GetContextFlags(ctx) &
           (REDISMODULE_CTX_FLAGS_REPLICATED | REDISMODULE_CTX_FLAGS_LOADING);
}

/* Adds argv[2 + skip ..] at `at_us` to the counter of argv[1] (created with
 * the defaults when missing), replies 1/0, and replicates FG.UVADDAT with
 * the items that changed it. */
static int add_items(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, int skip,
                     int64_t at_us) {
    RedisModuleKey *key = RedisModule_OpenKey(ctx, argv[1], REDISMODULE_READ | REDISMODULE_WRITE);
    fg_uv *uv = NULL;
    uv_lookup found = uv_lookup_key(key, &uv);
    if (found == UV_WRONGTYPE) {
        RedisModule_CloseKey(key);
        return RedisModule_ReplyWithError(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
    }
    if (found == UV_EMPTY) {
        uv = uv_create(FG_UV_DEFAULT_SPAN, FG_UV_DEFAULT_MINUTES, FG_UV_DEFAULT_HOURS,
                       FG_UV_DEFAULT_DAYS, 0);
        RedisModule_ModuleTypeSetValue(key, UvType, uv);
    }
    RedisModuleString **items = argv + 2 + skip;
    int n = argc - 2 - skip, changed = 0;
    int64_t sec = at_us / FG_UV_US_PER_SEC;
    /* argv is the server's: the items to replicate are gathered aside. */
    RedisModuleString **sent = RedisModule_Alloc(sizeof(*sent) * (size_t)n);
    for (int i = 0; i < n; i++) {
        size_t len;
        const char *item = RedisModule_StringPtrLen(items[i], &len);
        if (fg_uv_add(uv, fg_uv_hash(item, len), sec, &uv_allocator) == FG_UV_CHANGED)
            sent[changed++] = items[i];
    }
    stat_items_added += n;
    if (changed > 0) {
        RedisModule_Replicate(ctx, "FG.UVADDAT", "slv", argv[1], (long long)at_us, sent,
                              (size_t)changed);
        key_changed(ctx, argv[1], "fg.uvadd");
    }
    RedisModule_Free(sent);
    RedisModule_CloseKey(key);
    return RedisModule_ReplyWithLongLong(ctx, changed > 0);
}

/* FG.UVADD key item [item ...] */
static int add_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc < 3) return RedisModule_WrongArity(ctx);
    int64_t now_us = server_clock_us();
    if (now_us < 0 || now_us > FG_UV_MAX_US)
        return RedisModule_ReplyWithError(ctx, FG_ERR_UV_CLOCK("server"));
    return add_items(ctx, argv, argc, 0, now_us);
}

/* FG.UVADDAT key unix_us item [item ...] */
static int addat_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (!timed_effect_allowed(ctx, argv[0])) return REDISMODULE_OK;
    if (argc < 4) return RedisModule_WrongArity(ctx);
    int64_t at_us;
    if (!parse_integer(ctx, argv[2], "unix_us", 0, FG_UV_MAX_US, &at_us)) return REDISMODULE_OK;
    if (!decided_elsewhere(ctx) && at_us > server_clock_us() + FG_UV_FUTURE_US)
        return RedisModule_ReplyWithError(ctx, FG_ERR_UV_FUTURE);
    /* A client's add is refused when memory is full, as FG.UVADD is (deny-oom);
     * the master's and the AOF's are applied. */
    if (memory_full()) return RedisModule_ReplyWithError(ctx, MEMORY_FULL_ERR);
    return add_items(ctx, argv, argc, 1, at_us);
}

/* FG.UVCREATE's options (core/uv.h's table), each at most once. */
static int parse_create(RedisModuleCtx *ctx, RedisModuleString **argv, int argc,
                        int64_t value[FG_UV_OPTIONS]) {
    const fg_uv_option *options = fg_uv_options;
    bool given[FG_UV_OPTIONS] = {false};
    for (int o = 0; o < FG_UV_OPTIONS; o++)
        value[o] = options[o].fallback;
    for (int i = 2; i < argc; i += 2) {
        int o = 0;
        while (o < FG_UV_OPTIONS && !arg_is(argv[i], options[o].name)) o++;
        if (o == FG_UV_OPTIONS) {
            size_t len;
            const char *arg = RedisModule_StringPtrLen(argv[i], &len);
            return reply_error_fmt(ctx, "ERR unknown option '%.*s'",
                                   (int)(len < FG_UV_NAME_SHOWN ? len : FG_UV_NAME_SHOWN), arg),
                   0;
        }
        if (given[o]) return reply_error_fmt(ctx, ERR_GIVEN_TWICE, options[o].name), 0;
        if (i + 1 == argc) return reply_error_fmt(ctx, ERR_NEEDS_VALUE, options[o].name), 0;
        if (!parse_integer(ctx, argv[i + 1], options[o].name, options[o].min, options[o].max,
                           &value[o]))
            return 0;
        given[o] = true;
    }
    if (!fg_uv_tzoffset_valid(value[FG_UV_OPT_TZOFFSET]))
        return RedisModule_ReplyWithError(ctx, FG_ERR_UV_TZOFFSET), 0;
    return 1;
}

/* FG.UVCREATE key [SPAN s] [MINUTES n] [HOURS n] [DAYS n] [TZOFFSET s] */
static int create_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc < 2) return RedisModule_WrongArity(ctx);
    int64_t value[FG_UV_OPTIONS];
    if (!parse_create(ctx, argv, argc, value)) return REDISMODULE_OK;
    RedisModuleKey *key = RedisModule_OpenKey(ctx, argv[1], REDISMODULE_READ | REDISMODULE_WRITE);
    if (RedisModule_KeyType(key) != REDISMODULE_KEYTYPE_EMPTY) {
        RedisModule_ReplyWithError(ctx, FG_ERR_UV_EXISTS);
    } else {
        fg_uv *uv = uv_create(value[FG_UV_OPT_SPAN], value[FG_UV_OPT_MINUTES],
                              value[FG_UV_OPT_HOURS], value[FG_UV_OPT_DAYS],
                              value[FG_UV_OPT_TZOFFSET]);
        RedisModule_ModuleTypeSetValue(key, UvType, uv);
        RedisModule_ReplicateVerbatim(ctx);
        key_changed(ctx, argv[1], "fg.uvcreate");
        RedisModule_ReplyWithSimpleString(ctx, "OK");
    }
    RedisModule_CloseKey(key);
    return REDISMODULE_OK;
}

/* FG.UVLOAD key payload */
static int load_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (!effect_command_allowed(ctx, argv[0])) return REDISMODULE_OK;
    if (argc != 3) return RedisModule_WrongArity(ctx);
    /* A client's counter is a new key: refused when memory is full. */
    if (memory_full()) return RedisModule_ReplyWithError(ctx, MEMORY_FULL_ERR);
    RedisModuleKey *key = RedisModule_OpenKey(ctx, argv[1], REDISMODULE_READ | REDISMODULE_WRITE);
    size_t len;
    const char *payload = RedisModule_StringPtrLen(argv[2], &len);
    fg_uv *uv;
    if (RedisModule_KeyType(key) != REDISMODULE_KEYTYPE_EMPTY) {
        RedisModule_ReplyWithError(ctx, FG_ERR_UV_EXISTS);
    } else if ((uv = uv_decode(payload, len)) == NULL) {
        RedisModule_ReplyWithError(ctx, "ERR bad payload");
    } else {
        RedisModule_ModuleTypeSetValue(key, UvType, uv);
        RedisModule_ReplicateVerbatim(ctx);
        key_changed(ctx, argv[1], "fg.uvload");
        RedisModule_ReplyWithSimpleString(ctx, "OK");
    }
    RedisModule_CloseKey(key);
    return REDISMODULE_OK;
}

/* FG.UVSTORE destination key window [key ...]: the union's HLL string into
 * destination (any old value replaced, as SET does), replicated as that SET
 * since the window depends on the clock. */
static int store_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (RedisModule_IsKeysPositionRequest(ctx)) return report_window_keys(ctx, argc, 2);
    if (argc < 3 + WINDOW_ARGS) return RedisModule_WrongArity(ctx);
    uint8_t regs[FG_UV_REGISTERS], hll[FG_UV_HLL_BYTES];
    if (!read_window(ctx, argv, argc, 2, regs)) return REDISMODULE_OK;
    fg_uv_to_redis_hll(regs, hll);
    RedisModuleString *value = RedisModule_CreateString(ctx, (const char *)hll, sizeof(hll));
    RedisModuleKey *dest = RedisModule_OpenKey(ctx, argv[1], REDISMODULE_WRITE);
    RedisModule_StringSet(dest, value);
    RedisModule_CloseKey(dest);
    RedisModule_Replicate(ctx, "SET", "ss", argv[1], value);
    RedisModule_FreeString(ctx, value);
    key_changed(ctx, argv[1], "fg.uvstore");
    return RedisModule_ReplyWithLongLong(ctx, (long long)fg_uv_estimate(regs));
}

/* ========================================================= registration */

/* The family's commands (families.c checks their names, then creates them),
 * in lower case: the server's arity errors quote them. A key range of 0, 0:
 * the getkeys callback reports the keys. */
const command_spec uv_commands[] = {
    {"fg.uvcreate", create_command, "write deny-oom", 1, 1},
    {"fg.uvadd", add_command, "write deny-oom", 1, 1},
    {"fg.uvaddat", addat_command, "write", 1, 1},
    {"fg.uvcount", count_command, "readonly getkeys-api", 0, 0},
    {"fg.uvexport", export_command, "readonly getkeys-api", 0, 0},
    {"fg.uvstore", store_command, "write deny-oom getkeys-api", 0, 0},
    {"fg.uvinfo", info_command, "readonly fast", 1, 1},
    {"fg.uvload", load_command, "write", 1, 1},
    {0},
};

void uv_info(RedisModuleInfoCtx *ctx) {
    if (RedisModule_InfoAddSection(ctx, "uv") != REDISMODULE_OK) return;
    RedisModule_InfoAddFieldLongLong(ctx, "uv_items_added", stat_items_added);
    RedisModule_InfoAddFieldLongLong(ctx, "uv_windows_counted", stat_windows_counted);
}
