/*
 * t_ratelimit.h - the rate-limit commands.
 */
#ifndef FG_T_RATELIMIT_H
#define FG_T_RATELIMIT_H

#include "families.h"
#include "redismodule_api.h"

extern const command_spec ratelimit_commands[];
int ratelimit_commands_created(RedisModuleCtx *ctx);
void ratelimit_info(RedisModuleInfoCtx *ctx);

#endif
