/*
 * t_policy.h - the policy commands: FG.POLICY, FG.CHECK and FG.PLSTATE.
 */
#ifndef FG_T_POLICY_H
#define FG_T_POLICY_H

#include "families.h"
#include "redismodule_api.h"

extern const command_spec policy_commands[];
/* Creates FG.POLICY's subcommands and subscribes to the events that
 * concern waiters and the registry. */
int policy_commands_created(RedisModuleCtx *ctx);
void policy_info(RedisModuleInfoCtx *ctx);

/* FLUSHDB or SWAPDB replaced keys: waiters are decided again soon. */
void policy_keys_replaced(RedisModuleCtx *ctx);

/* A keyspace event on a key, or FG.RESET deleting it (the module's own
 * events are not subscribed to: every admitted check raises one): its
 * waiters are decided again soon. */
void policy_key_event(RedisModuleCtx *ctx, RedisModuleString *key);

#endif
