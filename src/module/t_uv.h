/*
 * t_uv.h - unique counting over time windows (FG.UV*, docs/uv.md).
 */
#ifndef FG_T_UV_H
#define FG_T_UV_H

#include "redismodule_api.h"

int uv_register_commands(RedisModuleCtx *ctx);
extern const char *const uv_command_names[];
void uv_info(RedisModuleInfoCtx *ctx);

#endif
