/*
 * t_gcra.h - GCRA, Redis 8.8's rate-limit command, on servers without it.
 */
#ifndef FG_T_GCRA_H
#define FG_T_GCRA_H

#include "families.h"
#include "redismodule_api.h"

extern const command_spec gcra_commands[];
int gcra_commands_created(RedisModuleCtx *ctx);

/* FAMILY_REGISTER_IF_FREE: a server with its own GCRA (Redis 8.8) is
 * expected, and keeps it; the module loads without ours, with a notice. */
family_mode gcra_commands_mode(void);

#endif
