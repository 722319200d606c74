/*
 * t_uv.h - unique counting over time windows (FG.UV*, docs/uv.md).
 */
#ifndef FG_T_UV_H
#define FG_T_UV_H

#include "families.h"
#include "redismodule_api.h"

extern const command_spec uv_commands[];
void uv_info(RedisModuleInfoCtx *ctx);

#endif
