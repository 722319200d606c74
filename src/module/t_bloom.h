/*
 * t_bloom.h - the Bloom filter commands (BF.*, RedisBloom 2.4 compatible).
 */
#ifndef FG_T_BLOOM_H
#define FG_T_BLOOM_H

#include "families.h"
#include "redismodule_api.h"

extern const command_spec bloom_commands[];

/* floodgate.bf-commands (auto, yes, no), before RedisModule_LoadConfigs;
 * its value is read once, when the families are registered. */
int bloom_register_config(RedisModuleCtx *ctx);
family_mode bloom_commands_mode(void);
void bloom_info(RedisModuleInfoCtx *ctx);

#endif
