/*
 * t_lock.h - the lock, semaphore and fencing commands.
 */
#ifndef FG_T_LOCK_H
#define FG_T_LOCK_H

#include "redismodule_api.h"

/* Registers the commands and subscribes to the keyspace events that free
 * locks. */
int lock_register_commands(RedisModuleCtx *ctx);

/* FLUSHDB or SWAPDB replaced keys: every queue is served soon. */
void lock_keys_replaced(RedisModuleCtx *ctx);
void lock_info(RedisModuleInfoCtx *ctx);

#endif
