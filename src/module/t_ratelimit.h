/*
 * t_ratelimit.h - the rate-limit commands.
 */
#ifndef FG_T_RATELIMIT_H
#define FG_T_RATELIMIT_H

#include <stdbool.h>

#include "families.h"
#include "redismodule_api.h"

extern const command_spec ratelimit_commands[];
int ratelimit_commands_created(RedisModuleCtx *ctx);
int ratelimit_register_configs(RedisModuleCtx *ctx);

/* floodgate.explicit-time: whether checks may take AT unix_us. */
bool ratelimit_explicit_time_allowed(void);
void ratelimit_info(RedisModuleInfoCtx *ctx);

#endif
