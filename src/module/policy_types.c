/*
 * policy_types.c - the module data type fg-plstat: the state of a key
 * checked against a policy, and the name of that policy.
 *
 * One payload serves every copy of a state, in memory and out of it:
 * FG.PLSTATE (replication, AOF), RDB, AOF rewrite and DEBUG DIGEST all
 * take the key's value as it is. It is a version byte, the name's length
 * and bytes, then core/policy.h's serialized state, itself versioned,
 * packed per algorithm and validated (fg_policy_state_deserialize accepts
 * exactly what fg_policy_state_storable accepts). A two-limit state of a
 * two-byte name is 64 bytes, one allocation of jemalloc's 64-byte class
 * (the expanded struct of the previous release took 130, in the 160-byte
 * class). A check unpacks it, decides, and packs the new state back in
 * place when its size is unchanged; replicating it formats and allocates
 * nothing.
 *
 * A payload from RESTORE, an RDB file or a client's FG.PLSTATE is checked
 * whole before anything is stored and packed again in the current
 * version, so the core's version 1 (an older release's RDB files and AOF)
 * still loads; a round trip of the current version is byte-identical, so a
 * replica's digest equals its master's.
 *
 * AOF rewrite emits FG.PLSTATE without PXAT: the server appends the key's
 * PEXPIREAT itself, with the TTL the key really has (a state decided with
 * AT keeps the TTL counted from the server's clock).
 *
 * The aux data of this type is the registry of policies, saved before the
 * keyspace (policy_registry.c): every RDB file carries it, even when no key
 * holds a policy state, so that loading a file replaces the registry.
 */
#include "policy_types.h"

#include <string.h>

#include "policy_registry.h"

#define ENCODING_VERSION 1 /* of the type and of its aux data */
#define PAYLOAD_VERSION  1 /* of the wrapper; the state has its own */
#define PAYLOAD_HEAD     2 /* version, name length */

RedisModuleType *PolicyStateType;

/* The payload itself. */
struct plstat {
    uint8_t version;
    uint8_t name_len;
    uint8_t bytes[]; /* the name, then the serialized state */
};

static const uint8_t *state_of(const plstat *v) {
    return v->bytes + v->name_len;
}

static size_t payload_len(const plstat *v) {
    return PAYLOAD_HEAD + v->name_len + fg_policy_state_packed_size(state_of(v));
}

const char *plstat_policy(const plstat *v, size_t *len) {
    *len = v->name_len;
    return (const char *)v->bytes;
}

void plstat_state(const plstat *v, fg_policy_state *out) {
    fg_policy_state_unpack(out, state_of(v));
}

const uint8_t *plstat_payload(const plstat *v, size_t *len) {
    *len = payload_len(v);
    return (const uint8_t *)v;
}

/* Names are 1 to POLICY_NAME_MAX bytes: the length fits its byte. */
static plstat *plstat_new(const char *name, size_t name_len, const fg_policy_state *s) {
    plstat *v = RedisModule_Alloc(PAYLOAD_HEAD + name_len + fg_policy_state_serialized_size(s));
    v->version = PAYLOAD_VERSION;
    v->name_len = (uint8_t)name_len;
    memcpy(v->bytes, name, name_len);
    fg_policy_state_serialize(s, v->bytes + name_len);
    return v;
}

plstat_lookup plstat_lookup_key(RedisModuleKey *key, plstat **out) {
    int type = RedisModule_KeyType(key);
    if (type == REDISMODULE_KEYTYPE_EMPTY) return PLSTAT_EMPTY;
    if (type != REDISMODULE_KEYTYPE_MODULE || RedisModule_ModuleTypeGetType(key) != PolicyStateType)
        return PLSTAT_WRONGTYPE;
    *out = RedisModule_ModuleTypeGetValue(key);
    return PLSTAT_FOUND;
}

static void set_value(RedisModuleKey *key, plstat *v, int64_t expire_ms) {
    RedisModule_ModuleTypeSetValue(key, PolicyStateType, v);
    RedisModule_SetAbsExpire(key, expire_ms);
}

bool plstat_store_grows(const plstat *held, const fg_policy_state *s) {
    return !held ||
           fg_policy_state_serialized_size(s) > fg_policy_state_packed_size(state_of(held));
}

const plstat *plstat_store(RedisModuleKey *key, plstat *held, const char *name, size_t name_len,
                           const fg_policy_state *s, int64_t expire_ms) {
    if (held && fg_policy_state_packed_size(state_of(held)) == fg_policy_state_serialized_size(s)) {
        fg_policy_state_serialize(s, held->bytes + held->name_len);
        RedisModule_SetAbsExpire(key, expire_ms);
        return held;
    }
    plstat *v = plstat_new(name, name_len, s);
    set_value(key, v, expire_ms);
    return v;
}

/* ---------------------------------------------------------------- payload */

/* NULL when the bytes are not a payload this code could have written. */
static plstat *payload_decode(const uint8_t *p, size_t len) {
    if (len < PAYLOAD_HEAD || p[0] != PAYLOAD_VERSION) return NULL;
    size_t name_len = p[1];
    if (len < PAYLOAD_HEAD + name_len ||
        !fg_policy_name_valid((const char *)p + PAYLOAD_HEAD, name_len))
        return NULL;
    fg_policy_state s;
    const uint8_t *state = p + PAYLOAD_HEAD + name_len;
    if (fg_policy_state_deserialize(&s, state, len - PAYLOAD_HEAD - name_len) != FG_OK) return NULL;
    return plstat_new((const char *)p + PAYLOAD_HEAD, name_len, &s);
}

bool plstat_store_payload(RedisModuleKey *key, const uint8_t *payload, size_t len,
                          int64_t expire_ms) {
    plstat *v = payload_decode(payload, len);
    if (!v) return false;
    set_value(key, v, expire_ms);
    return true;
}

/* ------------------------------------------------------------- callbacks */

static void plstat_free(void *value) {
    RedisModule_Free(value);
}

static void plstat_rdb_save(RedisModuleIO *io, void *value) {
    RedisModule_SaveStringBuffer(io, value, payload_len(value));
}

static void *plstat_rdb_load(RedisModuleIO *io, int encver) {
    if (encver != ENCODING_VERSION) return NULL;
    size_t len = 0;
    char *p = RedisModule_LoadStringBuffer(io, &len);
    if (RedisModule_IsIOError(io)) return NULL; /* p is NULL */
    plstat *v = payload_decode((const uint8_t *)p, len);
    RedisModule_Free(p);
    return v;
}

static void plstat_aof_rewrite(RedisModuleIO *io, RedisModuleString *key, void *value) {
    RedisModule_EmitAOF(io, "FG.PLSTATE", "sb", key, (const char *)value, payload_len(value));
}

static void plstat_digest(RedisModuleDigest *md, void *value) {
    RedisModule_DigestAddStringBuffer(md, value, payload_len(value));
    RedisModule_DigestEndSequence(md);
}

static size_t plstat_mem_usage(const void *value) {
    return payload_len(value);
}

static void *plstat_copy(RedisModuleString *from, RedisModuleString *to, const void *value) {
    (void)from, (void)to;
    size_t size = plstat_mem_usage(value);
    plstat *dup = RedisModule_Alloc(size);
    memcpy(dup, value, size);
    return dup;
}

static void registry_save(RedisModuleIO *io, int when) {
    (void)when;
    registry_aux_save(io);
}

static int registry_load(RedisModuleIO *io, int encver, int when) {
    (void)when;
    if (encver != ENCODING_VERSION) return REDISMODULE_ERR;
    return registry_aux_load(io);
}

int policy_types_create(RedisModuleCtx *ctx) {
    RedisModuleTypeMethods methods = {.version = REDISMODULE_TYPE_METHOD_VERSION,
                                      .rdb_load = plstat_rdb_load,
                                      .rdb_save = plstat_rdb_save,
                                      .aof_rewrite = plstat_aof_rewrite,
                                      .mem_usage = plstat_mem_usage,
                                      .digest = plstat_digest,
                                      .free = plstat_free,
                                      .aux_load = registry_load,
                                      .aux_save = registry_save,
                                      .aux_save_triggers = REDISMODULE_AUX_BEFORE_RDB,
                                      .copy = plstat_copy};
    PolicyStateType = RedisModule_CreateDataType(ctx, "fg-plstat", ENCODING_VERSION, &methods);
    return PolicyStateType ? REDISMODULE_OK : REDISMODULE_ERR;
}
