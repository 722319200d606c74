/*
 * command_acl.h - the ACL categories of every command (command_acl.c).
 */
#ifndef FG_COMMAND_ACL_H
#define FG_COMMAND_ACL_H

#include "redismodule_api.h"

/* After the commands are created, in RedisModule_OnLoad: puts each command
 * in its categories where the server has them (Redis >= 7.2); nothing on
 * older servers. */
int register_command_acl(RedisModuleCtx *ctx);

#endif
