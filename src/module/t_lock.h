/*
 * t_lock.h - the lock, semaphore and fencing commands.
 */
#ifndef FG_T_LOCK_H
#define FG_T_LOCK_H

#include "redismodule_api.h"

/* Registers the commands and subscribes to the events that free locks. */
int lock_register_commands(RedisModuleCtx *ctx);
void lock_info(RedisModuleInfoCtx *ctx);

#endif
