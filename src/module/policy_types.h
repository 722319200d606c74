/*
 * policy_types.h - the module data type of a key checked against a policy
 * (fg-plstat): the policy's name and the key's state (core/policy.h), and
 * the payload that carries both through FG.PLSTATE, RDB, AOF rewrite and
 * DEBUG DIGEST.
 *
 * The type's aux data, saved before the keyspace, is the registry of
 * policies (policy_registry.h).
 */
#ifndef FG_POLICY_TYPES_H
#define FG_POLICY_TYPES_H

#include "../core/policy.h"
#include "redismodule_api.h"

extern RedisModuleType *PolicyStateType;

int policy_types_create(RedisModuleCtx *ctx);

/* A stored state: its payload (below), packed. */
typedef struct plstat plstat;

typedef enum plstat_lookup { PLSTAT_EMPTY, PLSTAT_FOUND, PLSTAT_WRONGTYPE } plstat_lookup;
plstat_lookup plstat_lookup_key(RedisModuleKey *key, plstat **out);

/* The state as the core reads it, and the name of its policy. */
void plstat_state(const plstat *v, fg_policy_state *out);
const char *plstat_policy(const plstat *v, size_t *len);

/* Stores a state in a key opened for writing (creating or replacing it) and
 * gives the key its absolute expiry (REDISMODULE_NO_EXPIRE: none); returns
 * the stored value. `held` is the key's value as the caller looked it up,
 * with this name (NULL: the key is empty or replaced): it is rewritten in
 * place when the state's size allows, and not looked up again. */
const plstat *plstat_store(RedisModuleKey *key, plstat *held, const char *name, size_t name_len,
                           const fg_policy_state *s, int64_t expire_ms);

/* Whether storing s where `held` is (NULL: an empty key) takes more memory
 * than held does. */
bool plstat_store_grows(const plstat *held, const fg_policy_state *s);

/* The payload of a stored state, which is the value itself: a version
 * byte, the name's length and bytes, then the core's serialized state. */
const uint8_t *plstat_payload(const plstat *v, size_t *len);

/* Stores a payload (FG.PLSTATE) in a key opened for writing. False, with
 * nothing changed, when the payload is not one this code could have
 * written. */
bool plstat_store_payload(RedisModuleKey *key, const uint8_t *payload, size_t len,
                          int64_t expire_ms);

#endif
