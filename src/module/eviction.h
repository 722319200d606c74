/*
 * eviction.h - warnings about eviction policies that void locks and
 * fencing (eviction.c).
 */
#ifndef FG_EVICTION_H
#define FG_EVICTION_H

#include "redismodule_api.h"

/* At load: reads maxmemory-policy and warns when it can evict. */
void eviction_check(RedisModuleCtx *ctx);

/* A REDISMODULE_EVENT_CONFIG change (data: RedisModuleConfigChangeV1). */
void eviction_config_changed(RedisModuleCtx *ctx, void *data);

/* Fields of the locks INFO section: eviction_policy, eviction_unsafe. */
void eviction_info(RedisModuleInfoCtx *ctx);

#endif
