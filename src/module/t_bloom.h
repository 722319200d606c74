/*
 * t_bloom.h - the Bloom filter commands (BF.*, RedisBloom 2.4 compatible).
 */
#ifndef FG_T_BLOOM_H
#define FG_T_BLOOM_H

#include "redismodule_api.h"

int bloom_register_commands(RedisModuleCtx *ctx);
void bloom_info(RedisModuleInfoCtx *ctx);

#endif
