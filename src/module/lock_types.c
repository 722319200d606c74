/*
 * lock_types.c - the module data types of locks and fenced values, and the
 * server's fencing counter.
 *
 *   fg-lockst  a lock or semaphore (core/lock.h): kind, capacity, and its
 *              holders in grant order.
 *   fg-fenced  the highest fencing token a resource has seen, and its value
 *              (possibly none).
 *
 * Persistence: RDB stores every field under encoding version 1; loaders
 * refuse other versions. RESTORE hands rdb_load bytes anyone may have
 * written, so the loader bounds every count before allocating anything,
 * allocates holders only as they are actually read (a payload that claims
 * 100000 holders and ends after one costs one holder), and puts each
 * through fg_lock_put, which refuses what breaks a rule of a stored state
 * (O(log holders) each: a state of any size loads in O(n log n)). A
 * duplicate owner is the one thing fg_lock_put would hide (it replaces):
 * the loader refuses it first. On refusal everything is freed.
 *
 * Tokens stay below FG_LOCK_TOKEN_CEILING (2^53) everywhere: fg_lock_put
 * refuses a holder at or above it, and so does the loader of the counter.
 * A payload that raised the counter there would leave no token for any
 * later grant (docs/locks.md, "Fencing tokens"); refusing it makes RESTORE
 * answer an error and a file with it fail to load, as any invalid value
 * does. Fenced values (fg-fenced) never touch the counter, so they keep the
 * full range 1 .. 2^63-1 that FG.FENCE accepts (tokens of other systems
 * may be that large).
 *
 * The fencing counter is module aux data saved before the keyspace, so a
 * replica's full sync and a restart from RDB continue it. It is only ever
 * raised: loading an older file or FLUSHALL leaves a higher counter alone.
 * Every lock state loaded raises it to its holders' tokens too, so that the
 * counter stays above every token in the keyspace even when a key arrives
 * by RESTORE (MIGRATE, a cluster resharding) from a server whose clock ran
 * ahead: the next grant on the key still gets a greater token.
 * An AOF rewritten without RDB preamble has no aux data: after it, the
 * counter is what the FG.HOLD commands of the held locks raise it to, and
 * the clock floor of fg_lock_next_token covers the rest.
 */
#include "lock_types.h"

#include "clock.h"

#include <string.h>
#include <strings.h>

#include "limiter_types.h"

#define ENCODING_VERSION 1 /* of both types, and of the aux data */
#define FENCED_TOKEN_MAX ((uint64_t)INT64_MAX)

RedisModuleType *LockStateType;
RedisModuleType *FencedType;

static uint64_t fence_counter;

uint64_t fence_last(void) {
    return fence_counter;
}

void fence_raise(uint64_t token) {
    if (token > fence_counter) fence_counter = token;
}

/* ------------------------------------------------------------------ names */

static const char *const kind_names[] = {
    [FG_LOCK_KIND_LOCK] = "lock", [FG_LOCK_KIND_SEMAPHORE] = "semaphore"};
static const char *const mode_names[] = {
    [FG_LOCK_EXCLUSIVE] = "exclusive", [FG_LOCK_SHARED] = "shared"};
#define NAME_COUNT(names) ((int)(sizeof(names) / sizeof(names[0])))

/* Stored states only hold known kinds and modes; "?" is never emitted. */
const char *lock_kind_name(uint8_t kind) {
    return kind < NAME_COUNT(kind_names) && kind_names[kind] ? kind_names[kind] : "?";
}

const char *lock_mode_name(uint8_t mode) {
    return mode < NAME_COUNT(mode_names) ? mode_names[mode] : "?";
}

static int index_of_name(const char *const *names, int count, RedisModuleString *name) {
    size_t len;
    const char *s = RedisModule_StringPtrLen(name, &len);
    for (int i = 0; i < count; i++) {
        if (names[i] && strlen(names[i]) == len && strncasecmp(names[i], s, len) == 0) return i;
    }
    return -1;
}

int lock_kind_from_name(RedisModuleString *name) {
    return index_of_name(kind_names, NAME_COUNT(kind_names), name);
}

int lock_mode_from_name(RedisModuleString *name) {
    return index_of_name(mode_names, NAME_COUNT(mode_names), name);
}

/* ---------------------------------------------------------------- lookups */

static lock_lookup lookup(RedisModuleKey *key, RedisModuleType *type) {
    int keytype = RedisModule_KeyType(key);
    if (keytype == REDISMODULE_KEYTYPE_EMPTY) return LOCK_EMPTY;
    if (keytype != REDISMODULE_KEYTYPE_MODULE || RedisModule_ModuleTypeGetType(key) != type)
        return LOCK_WRONGTYPE;
    return LOCK_FOUND;
}

lock_lookup lockstate_lookup(RedisModuleKey *key, fg_lock_state **out) {
    lock_lookup found = lookup(key, LockStateType);
    if (found == LOCK_FOUND) *out = RedisModule_ModuleTypeGetValue(key);
    return found;
}

lock_lookup fenced_lookup(RedisModuleKey *key, fenced_value **out) {
    lock_lookup found = lookup(key, FencedType);
    if (found == LOCK_FOUND) *out = RedisModule_ModuleTypeGetValue(key);
    return found;
}

/* ------------------------------------------------------------- lock state */

fg_lock_state *lockstate_create(void) {
    fg_lock_state *s = RedisModule_Alloc(sizeof(*s));
    memset(s, 0, sizeof(*s));
    return s;
}

void lockstate_destroy(void *state) {
    fg_lock_clear(state, &module_allocator);
    RedisModule_Free(state);
}

void lockstate_settle(RedisModuleKey *key, fg_lock_state *s) {
    if (s->len == 0)
        RedisModule_DeleteKey(key); /* frees s */
    else
        RedisModule_SetAbsExpire(key, fg_us_to_ms_ceil(fg_lock_expires_at_us(s)));
}

/* Holds whose lease had ended when the server removed their key (its own
 * expiry, usually: the key's TTL is the latest lease end, so the server
 * tends to remove a lock that nobody released before floodgate prunes it). */
static long long leases_ended_with_key;

long long lockstate_leases_ended_with_key(void) {
    return leases_ended_with_key;
}

static void lockstate_unlink(RedisModuleString *key, const void *value) {
    (void)key;
    const fg_lock_state *s = value;
    if (s->len && fg_lock_expires_at_us(s) <= server_clock_us()) leases_ended_with_key += s->len;
}

/* Appends a holder as read or copied: refused (0) when its owner holds
 * already or fg_lock_put refuses it. */
static int append_holder(fg_lock_state *s, uint8_t kind, int64_t capacity,
                         const fg_lock_holder *h) {
    if (fg_lock_find(s, h->owner, h->owner_len)) return 0;
    return fg_lock_put(s, kind, capacity, h, &module_allocator) == FG_OK;
}

/* RDB layout: kind, capacity, holder count, then per holder its owner,
 * mode, count, lease end and token. */
static void lockstate_rdb_save(RedisModuleIO *io, void *value) {
    const fg_lock_state *s = value;
    RedisModule_SaveUnsigned(io, s->kind);
    RedisModule_SaveSigned(io, s->capacity);
    RedisModule_SaveUnsigned(io, s->len);
    for (const fg_lock_holder *h = fg_lock_first(s); h; h = fg_lock_next(h)) {
        RedisModule_SaveStringBuffer(io, h->owner, h->owner_len);
        RedisModule_SaveUnsigned(io, h->mode);
        RedisModule_SaveSigned(io, h->count);
        RedisModule_SaveSigned(io, h->expires_us);
        RedisModule_SaveUnsigned(io, h->token);
    }
}

/* Reads one holder into s, of `kind` and `capacity`. Fields are bounded
 * before they are narrowed; fg_lock_put checks the rest. */
static int load_holder(RedisModuleIO *io, fg_lock_state *s, uint8_t kind, int64_t capacity) {
    size_t owner_len = 0;
    char *owner = RedisModule_LoadStringBuffer(io, &owner_len);
    if (RedisModule_IsIOError(io)) return 0; /* owner is NULL */
    uint64_t mode = RedisModule_LoadUnsigned(io);
    int64_t count = RedisModule_LoadSigned(io);
    int64_t expires_us = RedisModule_LoadSigned(io);
    uint64_t token = RedisModule_LoadUnsigned(io);
    int fine = !RedisModule_IsIOError(io) && owner_len >= 1 && owner_len <= FG_LOCK_OWNER_MAX &&
               mode <= FG_LOCK_SHARED;
    if (fine) {
        fg_lock_holder h = {.owner = owner,
                            .owner_len = (uint32_t)owner_len,
                            .mode = (uint8_t)mode,
                            .count = count,
                            .expires_us = expires_us,
                            .token = token};
        fine = append_holder(s, kind, capacity, &h);
    }
    RedisModule_Free(owner);
    return fine;
}

static void *lockstate_rdb_load(RedisModuleIO *io, int encver) {
    if (encver != ENCODING_VERSION) return NULL;
    uint64_t kind = RedisModule_LoadUnsigned(io);
    int64_t capacity = RedisModule_LoadSigned(io);
    uint64_t holders = RedisModule_LoadUnsigned(io);
    /* A state without holders is never stored: the key goes with its last. */
    if (RedisModule_IsIOError(io) || kind > UINT8_MAX || holders < 1 ||
        holders > FG_LOCK_MAX_HOLDERS)
        return NULL;
    fg_lock_state *s = lockstate_create();
    for (uint64_t i = 0; i < holders; i++) {
        if (!load_holder(io, s, (uint8_t)kind, capacity)) {
            lockstate_destroy(s);
            return NULL;
        }
    }
    for (const fg_lock_holder *h = fg_lock_first(s); h; h = fg_lock_next(h))
        fence_raise(h->token);
    return s;
}

/* One FG.HOLD per holder, in grant order (the server appends PEXPIREAT). */
static void lockstate_aof_rewrite(RedisModuleIO *io, RedisModuleString *key, void *value) {
    const fg_lock_state *s = value;
    for (const fg_lock_holder *h = fg_lock_first(s); h; h = fg_lock_next(h)) {
        RedisModule_EmitAOF(io, "FG.HOLD", "sclbclll", key, lock_kind_name(s->kind),
                            (long long)s->capacity, h->owner, (size_t)h->owner_len,
                            lock_mode_name(h->mode), (long long)h->count, (long long)h->expires_us,
                            (long long)h->token);
    }
}

static size_t lockstate_mem_usage(const void *value) {
    const fg_lock_state *s = value;
    return sizeof(*s) + fg_lock_memory(s);
}

/* Sequences are combined regardless of their order, so each holder's
 * position is part of its sequence: grant order is state too. */
static void lockstate_digest(RedisModuleDigest *md, void *value) {
    const fg_lock_state *s = value;
    RedisModule_DigestAddLongLong(md, s->kind);
    RedisModule_DigestAddLongLong(md, s->capacity);
    RedisModule_DigestEndSequence(md);
    long long i = 0;
    for (const fg_lock_holder *h = fg_lock_first(s); h; h = fg_lock_next(h), i++) {
        RedisModule_DigestAddLongLong(md, i);
        RedisModule_DigestAddStringBuffer(md, h->owner, h->owner_len);
        RedisModule_DigestAddLongLong(md, h->mode);
        RedisModule_DigestAddLongLong(md, h->count);
        RedisModule_DigestAddLongLong(md, h->expires_us);
        RedisModule_DigestAddLongLong(md, (long long)h->token);
        RedisModule_DigestEndSequence(md);
    }
}

static char *copy_bytes(const char *bytes, size_t len) {
    char *dup = RedisModule_Alloc(len);
    memcpy(dup, bytes, len);
    return dup;
}

static void *lockstate_copy(RedisModuleString *from, RedisModuleString *to, const void *value) {
    (void)from, (void)to;
    const fg_lock_state *s = value;
    fg_lock_state *dup = lockstate_create();
    /* Holders of a stored state, in their order: every put appends (the
     * module's allocator never returns NULL). */
    for (const fg_lock_holder *h = fg_lock_first(s); h; h = fg_lock_next(h))
        fg_lock_put(dup, s->kind, s->capacity, h, &module_allocator);
    return dup;
}

/* The fencing counter, saved once per RDB file before the keyspace. */
static void fence_aux_save(RedisModuleIO *io, int when) {
    (void)when;
    RedisModule_SaveUnsigned(io, fence_counter);
}

static int fence_aux_load(RedisModuleIO *io, int encver, int when) {
    (void)when;
    if (encver != ENCODING_VERSION) return REDISMODULE_ERR;
    uint64_t last = RedisModule_LoadUnsigned(io);
    if (RedisModule_IsIOError(io)) return REDISMODULE_ERR;
    if (last >= FG_LOCK_TOKEN_CEILING) {
        RedisModule_LogIOError(io, "warning",
                               "fencing counter %llu at or above the ceiling of 2^53: refused",
                               (unsigned long long)last);
        return REDISMODULE_ERR;
    }
    fence_raise(last);
    return REDISMODULE_OK;
}

/* ----------------------------------------------------------- fenced value */

static fenced_value *fenced_create(void) {
    fenced_value *f = RedisModule_Alloc(sizeof(*f));
    memset(f, 0, sizeof(*f));
    return f;
}

static void fenced_free(void *value) {
    fenced_value *f = value;
    RedisModule_Free(f->value);
    RedisModule_Free(f);
}

static void fenced_set_value(fenced_value *f, const char *value, size_t value_len) {
    char *dup = copy_bytes(value, value_len);
    RedisModule_Free(f->value);
    f->value = dup;
    f->value_len = value_len;
}

/* Updated in place when the key holds one: the key keeps its TTL. */
void fenced_store(RedisModuleKey *key, uint64_t token, const char *value, size_t value_len) {
    fenced_value *f = NULL;
    if (fenced_lookup(key, &f) != LOCK_FOUND) {
        f = fenced_create();
        RedisModule_ModuleTypeSetValue(key, FencedType, f);
    }
    f->token = token;
    if (value) fenced_set_value(f, value, value_len);
}

/* RDB layout: token, whether a value exists (0 or 1), then the value. */
static void fenced_rdb_save(RedisModuleIO *io, void *value) {
    const fenced_value *f = value;
    RedisModule_SaveUnsigned(io, f->token);
    RedisModule_SaveUnsigned(io, f->value != NULL);
    if (f->value) RedisModule_SaveStringBuffer(io, f->value, f->value_len);
}

static void *fenced_rdb_load(RedisModuleIO *io, int encver) {
    if (encver != ENCODING_VERSION) return NULL;
    uint64_t token = RedisModule_LoadUnsigned(io);
    uint64_t has_value = RedisModule_LoadUnsigned(io);
    if (RedisModule_IsIOError(io) || token < 1 || token > FENCED_TOKEN_MAX || has_value > 1)
        return NULL;
    fenced_value *f = fenced_create();
    f->token = token;
    if (has_value) {
        f->value = RedisModule_LoadStringBuffer(io, &f->value_len);
        if (RedisModule_IsIOError(io)) { /* f->value is NULL */
            fenced_free(f);
            return NULL;
        }
    }
    return f;
}

static void fenced_aof_rewrite(RedisModuleIO *io, RedisModuleString *key, void *value) {
    const fenced_value *f = value;
    if (f->value)
        RedisModule_EmitAOF(io, "FG.FSET", "slb", key, (long long)f->token, f->value, f->value_len);
    else
        RedisModule_EmitAOF(io, "FG.FENCE", "sl", key, (long long)f->token);
}

static size_t fenced_mem_usage(const void *value) {
    const fenced_value *f = value;
    return sizeof(*f) + f->value_len;
}

static void fenced_digest(RedisModuleDigest *md, void *value) {
    const fenced_value *f = value;
    RedisModule_DigestAddLongLong(md, (long long)f->token);
    RedisModule_DigestAddLongLong(md, f->value != NULL);
    if (f->value) RedisModule_DigestAddStringBuffer(md, f->value, f->value_len);
    RedisModule_DigestEndSequence(md);
}

static void *fenced_copy(RedisModuleString *from, RedisModuleString *to, const void *value) {
    (void)from, (void)to;
    const fenced_value *f = value;
    fenced_value *dup = fenced_create();
    dup->token = f->token;
    if (f->value) fenced_set_value(dup, f->value, f->value_len);
    return dup;
}

/* -------------------------------------------------------------- registry */

int lock_types_create(RedisModuleCtx *ctx) {
    RedisModuleTypeMethods lock_methods = {.version = REDISMODULE_TYPE_METHOD_VERSION,
                                           .rdb_load = lockstate_rdb_load,
                                           .rdb_save = lockstate_rdb_save,
                                           .aof_rewrite = lockstate_aof_rewrite,
                                           .mem_usage = lockstate_mem_usage,
                                           .digest = lockstate_digest,
                                           .free = lockstate_destroy,
                                           .aux_load = fence_aux_load,
                                           .aux_save = fence_aux_save,
                                           .aux_save_triggers = REDISMODULE_AUX_BEFORE_RDB,
                                           .unlink = lockstate_unlink,
                                           .copy = lockstate_copy};
    RedisModuleTypeMethods fenced_methods = {.version = REDISMODULE_TYPE_METHOD_VERSION,
                                             .rdb_load = fenced_rdb_load,
                                             .rdb_save = fenced_rdb_save,
                                             .aof_rewrite = fenced_aof_rewrite,
                                             .mem_usage = fenced_mem_usage,
                                             .digest = fenced_digest,
                                             .free = fenced_free,
                                             .copy = fenced_copy};
    LockStateType = RedisModule_CreateDataType(ctx, "fg-lockst", ENCODING_VERSION, &lock_methods);
    FencedType = RedisModule_CreateDataType(ctx, "fg-fenced", ENCODING_VERSION, &fenced_methods);
    return LockStateType && FencedType ? REDISMODULE_OK : REDISMODULE_ERR;
}
