/*
 * t_gcra.h - GCRA, the rate-limit command Redis held out of 8.8, on servers
 * without it.
 */
#ifndef FG_T_GCRA_H
#define FG_T_GCRA_H

#include "families.h"
#include "redismodule_api.h"

extern const command_spec gcra_commands[];
int gcra_commands_created(RedisModuleCtx *ctx);

/* FAMILY_REGISTER_IF_FREE: a server with its own GCRA (a future Redis,
 * or one built with ENABLE_GCRA) keeps it; the module loads without ours, with a notice. */
family_mode gcra_commands_mode(void);

#endif
