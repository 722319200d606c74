/*
 * t_ratelimit.h - the rate-limit commands.
 */
#ifndef FG_T_RATELIMIT_H
#define FG_T_RATELIMIT_H

#include "redismodule_api.h"

int ratelimit_register_commands(RedisModuleCtx *ctx);
int ratelimit_register_configs(RedisModuleCtx *ctx);
void ratelimit_info(RedisModuleInfoCtx *ctx);

#endif
