/*
 * t_ratelimit.h - the rate-limit commands.
 */
#ifndef FG_T_RATELIMIT_H
#define FG_T_RATELIMIT_H

#include <stdbool.h>

#include "redismodule_api.h"

int ratelimit_register_commands(RedisModuleCtx *ctx);
extern const char *const ratelimit_command_names[];
int ratelimit_register_configs(RedisModuleCtx *ctx);

/* floodgate.explicit-time: whether checks may take AT unix_us. */
bool ratelimit_explicit_time_allowed(void);
void ratelimit_info(RedisModuleInfoCtx *ctx);

#endif
