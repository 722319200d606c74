/*
 * effects.c - who may send the effect commands.
 *
 * A command that decides (a check, a grant, a lease end) replicates what it
 * wrote, not itself: FG.SETSTATE, FG.LOGAPPEND, FG.HOLD, FG.UNHOLD,
 * FG.PLSTATE, FG.UVADDAT; an AOF rewrite emits states the same way, and
 * FG.UVLOAD. These commands write a state as given, past the algorithms:
 * from a client, FG.HOLD forges a holder and pins the fencing counter,
 * FG.SETSTATE refills a drained bucket. So each calls
 * effect_command_allowed() first, which lets through the replication link
 * (REPLICATED) and AOF loading (LOADING), and clients only while an
 * operator enables floodgate.enable-effect-commands for a repair or a
 * migration.
 *
 * The module's own paths are unaffected: on the master an effect is only
 * propagated (also from MULTI and scripts, whose effects are what is
 * replicated), and replicas and AOF replay run it under those flags.
 *
 * FG.UVADDAT is also the clients' way to backfill a counter at a time of
 * their choosing, which floodgate.explicit-time allows as it allows AT.
 */
#include "effects.h"

#include "args.h"
#include "clock.h"

static int effects_enabled;

static bool from_master_or_aof(RedisModuleCtx *ctx) {
    return RedisModule_GetContextFlags(ctx) &
           (REDISMODULE_CTX_FLAGS_REPLICATED | REDISMODULE_CTX_FLAGS_LOADING);
}

static bool refuse(RedisModuleCtx *ctx, RedisModuleString *name, const char *why) {
    size_t len;
    const char *s = RedisModule_StringPtrLen(name, &len);
    reply_error_fmt(ctx, "ERR %.*s %s", (int)len, s, why);
    return false;
}

bool effect_command_allowed(RedisModuleCtx *ctx, RedisModuleString *name) {
    if (effects_enabled || from_master_or_aof(ctx)) return true;
    return refuse(ctx, name,
                  "is an effect command, for replication and AOF loading: CONFIG SET "
                  "floodgate.enable-effect-commands yes allows it from clients");
}

bool timed_effect_allowed(RedisModuleCtx *ctx, RedisModuleString *name) {
    if (effects_enabled || explicit_time_allowed() || from_master_or_aof(ctx))
        return true;
    return refuse(ctx, name,
                  "takes its time from the client: CONFIG SET floodgate.explicit-time yes "
                  "allows it");
}

static int get_enabled(const char *name, void *privdata) {
    (void)name, (void)privdata;
    return effects_enabled;
}

static int set_enabled(const char *name, int value, void *privdata, RedisModuleString **err) {
    (void)name, (void)privdata, (void)err;
    effects_enabled = value;
    return REDISMODULE_OK;
}

int effects_register_config(RedisModuleCtx *ctx) {
    return RedisModule_RegisterBoolConfig(ctx, "enable-effect-commands", 0,
                                          REDISMODULE_CONFIG_DEFAULT, get_enabled, set_enabled,
                                          NULL, NULL);
}
