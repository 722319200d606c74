/*
 * effects.h - who may send the effect commands (effects.c).
 */
#ifndef FG_EFFECTS_H
#define FG_EFFECTS_H

#include <stdbool.h>

#include "redismodule_api.h"

/* Called first by every effect command: true when it may run (replication
 * link, AOF loading, or floodgate.enable-effect-commands); otherwise the
 * refusal is replied and nothing may change. */
bool effect_command_allowed(RedisModuleCtx *ctx, RedisModuleString *name);

/* The same for FG.UVADDAT, which clients also use to backfill at a time
 * of their choosing: floodgate.explicit-time allows it too. */
bool timed_effect_allowed(RedisModuleCtx *ctx, RedisModuleString *name);

/* floodgate.enable-effect-commands, before RedisModule_LoadConfigs. */
int effects_register_config(RedisModuleCtx *ctx);

#endif
