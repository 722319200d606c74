/*
 * t_gcra.h - GCRA, Redis 8.8's rate-limit command, on servers without it.
 */
#ifndef FG_T_GCRA_H
#define FG_T_GCRA_H

#include "redismodule_api.h"

/* The family's command names, NULL-terminated. */
extern const char *const gcra_command_names[];

/* Creates GCRA. REDISMODULE_ERR, logged at notice level, when the server
 * already has a command of that name (Redis 8.8 and later): the server's
 * own then stays, and the module loads without ours. */
int gcra_register_commands(RedisModuleCtx *ctx);

#endif
