/*
 * key_dict.h - a dict from a key of a database (db number + key name) to a
 * pointer: how the waiting queues of locks and policies are found.
 */
#ifndef FG_KEY_DICT_H
#define FG_KEY_DICT_H

#include "redismodule_api.h"

/* The value for the key, NULL when none. */
void *key_dict_get(RedisModuleDict *d, int dbid, RedisModuleString *key);
void key_dict_set(RedisModuleDict *d, int dbid, RedisModuleString *key, void *value);
void key_dict_del(RedisModuleDict *d, int dbid, RedisModuleString *key);

#endif
