/*
 * command_docs.h - command metadata for COMMAND DOCS and key specs.
 */
#ifndef FG_COMMAND_DOCS_H
#define FG_COMMAND_DOCS_H

#include "redismodule_api.h"

/* After the commands are created: sets arity, key specs and docs. */
int register_command_docs(RedisModuleCtx *ctx);

#endif
