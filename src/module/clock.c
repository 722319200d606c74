/*
 * clock.c - floodgate.explicit-time: whether commands may be told the time.
 *
 * Off by default, because a client that picks its own time can pick a
 * fresh fixed window. On, the checks accept `AT unix_us` instead of the
 * server's clock (tests, replays, backfills), and FG.UVADDAT is accepted
 * from clients (effects.c).
 */
#include "clock.h"

static int allowed;

static int get_explicit_time(const char *name, void *privdata) {
    (void)name, (void)privdata;
    return allowed;
}

static int set_explicit_time(const char *name, int value, void *privdata, RedisModuleString **err) {
    (void)name, (void)privdata, (void)err;
    allowed = value;
    return REDISMODULE_OK;
}

bool explicit_time_allowed(void) {
    return allowed;
}

int explicit_time_register_config(RedisModuleCtx *ctx) {
    return RedisModule_RegisterBoolConfig(ctx, "explicit-time", 0, REDISMODULE_CONFIG_DEFAULT,
                                          get_explicit_time, set_explicit_time, NULL, NULL);
}
