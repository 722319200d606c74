/*
 * policy_types.c - the module data type fg-plstat: the state of a key
 * checked against a policy, and the name of that policy.
 *
 * In memory a state holds only the limits its policy has, followed by the
 * name, in one allocation: a key of a one-limit policy costs about a fifth
 * of the core's fixed-size fg_policy_state. A check expands it, decides,
 * and writes it back in place when the number of limits is unchanged.
 *
 * One payload serves every copy of a state that leaves memory: FG.PLSTATE
 * (replication, AOF), RDB, AOF rewrite and DEBUG DIGEST. It is a version
 * byte, the name's length and bytes, then core/policy.h's serialized state,
 * itself versioned and validated (fg_policy_state_deserialize accepts
 * exactly what fg_policy_state_storable accepts). A payload from RESTORE or
 * a client's FG.PLSTATE is therefore checked whole before anything is
 * stored, and a round trip is byte-identical, so a replica's digest equals
 * its master's.
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
#define PAYLOAD_VERSION  1
#define PAYLOAD_HEAD     2 /* version, name length */

RedisModuleType *PolicyStateType;

struct plstat {
    int64_t banned_until_us;
    int64_t denials;
    int64_t denials_start_us;
    uint8_t nlimits;
    uint8_t name_len;
    fg_policy_limit_state limits[]; /* nlimits, then the name's bytes */
};

static size_t plstat_size(uint32_t nlimits, size_t name_len) {
    return sizeof(plstat) + nlimits * sizeof(fg_policy_limit_state) + name_len;
}

static char *name_of(const plstat *v) {
    return (char *)(v->limits + v->nlimits);
}

const char *plstat_policy(const plstat *v, size_t *len) {
    *len = v->name_len;
    return name_of(v);
}

void plstat_state(const plstat *v, fg_policy_state *out) {
    memset(out, 0, sizeof(*out));
    out->nlimits = v->nlimits;
    memcpy(out->limits, v->limits, v->nlimits * sizeof(fg_policy_limit_state));
    out->banned_until_us = v->banned_until_us;
    out->denials = v->denials;
    out->denials_start_us = v->denials_start_us;
}

static void plstat_fill(plstat *v, const fg_policy_state *s) {
    memcpy(v->limits, s->limits, s->nlimits * sizeof(fg_policy_limit_state));
    v->banned_until_us = s->banned_until_us;
    v->denials = s->denials;
    v->denials_start_us = s->denials_start_us;
}

/* Names are 1 to POLICY_NAME_MAX bytes and states have 1 to
 * FG_POLICY_MAX_LIMITS limits: both fit their byte. */
static plstat *plstat_new(const char *name, size_t name_len, const fg_policy_state *s) {
    plstat *v = RedisModule_Alloc(plstat_size(s->nlimits, name_len));
    v->nlimits = (uint8_t)s->nlimits;
    v->name_len = (uint8_t)name_len;
    plstat_fill(v, s);
    memcpy(name_of(v), name, name_len);
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

void plstat_store(RedisModuleKey *key, const char *name, size_t name_len, const fg_policy_state *s,
                  int64_t expire_ms) {
    plstat *v;
    if (plstat_lookup_key(key, &v) == PLSTAT_FOUND && v->nlimits == s->nlimits &&
        v->name_len == name_len && memcmp(name_of(v), name, name_len) == 0) {
        plstat_fill(v, s);
        RedisModule_SetAbsExpire(key, expire_ms);
        return;
    }
    set_value(key, plstat_new(name, name_len, s), expire_ms);
}

/* ---------------------------------------------------------------- payload */

uint8_t *plstat_payload(const char *name, size_t name_len, const fg_policy_state *s, size_t *len) {
    size_t state_len = fg_policy_state_serialized_size(s);
    *len = PAYLOAD_HEAD + name_len + state_len;
    uint8_t *p = RedisModule_Alloc(*len);
    p[0] = PAYLOAD_VERSION;
    p[1] = (uint8_t)name_len;
    memcpy(p + PAYLOAD_HEAD, name, name_len);
    fg_policy_state_serialize(s, p + PAYLOAD_HEAD + name_len);
    return p;
}

static uint8_t *value_payload(const plstat *v, size_t *len) {
    fg_policy_state s;
    plstat_state(v, &s);
    return plstat_payload(name_of(v), v->name_len, &s, len);
}

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
    size_t len;
    uint8_t *p = value_payload(value, &len);
    RedisModule_SaveStringBuffer(io, (const char *)p, len);
    RedisModule_Free(p);
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
    size_t len;
    uint8_t *p = value_payload(value, &len);
    RedisModule_EmitAOF(io, "FG.PLSTATE", "sb", key, (const char *)p, len);
    RedisModule_Free(p);
}

static void plstat_digest(RedisModuleDigest *md, void *value) {
    size_t len;
    uint8_t *p = value_payload(value, &len);
    RedisModule_DigestAddStringBuffer(md, (const char *)p, len);
    RedisModule_DigestEndSequence(md);
    RedisModule_Free(p);
}

static size_t plstat_mem_usage(const void *value) {
    const plstat *v = value;
    return plstat_size(v->nlimits, v->name_len);
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
