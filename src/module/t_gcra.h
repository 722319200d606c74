/*
 * t_gcra.h - GCRA, Redis 8.8's rate-limit command, on servers without it.
 */
#ifndef FG_T_GCRA_H
#define FG_T_GCRA_H

#include "families.h"
#include "redismodule_api.h"

/* The family's command names, NULL-terminated. */
extern const char *const gcra_command_names[];

/* Creates GCRA (families.c checks first that the name is free). */
int gcra_register_commands(RedisModuleCtx *ctx);

/* FAMILY_REGISTER_IF_FREE: a server with its own GCRA (Redis 8.8) is
 * expected, and keeps it; the module loads without ours, with a notice. */
family_mode gcra_commands_mode(void);

#endif
