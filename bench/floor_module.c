/*
 * floor_module.c - the floor of a floodgate hot path through the module API
 * (bench/hot_paths.py builds it into build/bench/ and loads it beside
 * floodgate on its own benchmark server; it is never built by make nor
 * installed).
 *
 * Each FLOOR.* command takes the arguments of the floodgate command it
 * stands for, decides nothing and touches no key, replies the same shape
 * with the same typical values, and replicates the same effect command
 * with the same number of arguments -- all of them strings made once at
 * load, so nothing is formatted or allocated by the module. What floodgate
 * costs above this is its own: parsing, the key, the decision, formatting.
 *
 * Each FLOOR.*.KEYED command (FLOOR.KEYED for FG.TOKEN) is that floor plus
 * the key's write as floodgate's command does it: it opens the key, sets a
 * value of a module type (the server allocates its object, as it does for
 * floodgate's states) or replaces it or updates it in place, gives it the
 * command's own absolute expiry, signals it and sends a keyspace event.
 * The expiry is the command's because it decides how long keys live: at
 * full speed FG.TOKEN's keys expire and are made again (key churn), which
 * a key that never expires would hide; they read the one or two numbers
 * that expiry needs and no other. What is left above these floors is the
 * rest of parsing, the decision and formatting. The values, one type per
 * layout as floodgate has:
 *   floortat1  an end in ms kept in the pointer itself (nothing allocated),
 *              pushed by one emission interval per request as a bucket's
 *              theoretical arrival time is: FG.TOKEN, CL.THROTTLE;
 *   floorfix1  a 16-byte window start and count: FG.FIXED;
 *   floorchk1  a policy state of the payload's 64 bytes: FG.CHECK;
 *   floorlck1  a 40-byte lock (lease end, owner): FG.LOCK, and
 *              FLOOR.UNLOCK.KEYED deletes it as FG.UNLOCK does.
 * They are never persisted by the benchmark; their callbacks only keep a
 * save or a load from crashing or corrupting anything.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, for clock.h */

#include <string.h>

#include "clock.h"
#include "redismodule_api.h"

#define ENCVER      1
#define PAYLOAD_LEN 64 /* w_payload's length */
#define DAY_MS      86400000LL

static RedisModuleString *w_fixed, *w_pxat, *w_lock, *w_exclusive, *w_one, *w_tat,
    *w_ms, *w_start, *w_count, *w_payload, *w_expires, *w_token;
static RedisModuleType *tat_type, *fixed_type, *check_type, *lock_type;

typedef struct {
    int64_t window_start_ms;
    int64_t count;
} fixed_value;

typedef struct {
    int64_t expires_ms;
    char owner[32]; /* the owner's first 32 bytes */
} lock_value;

static RedisModuleString *word(const char *s, size_t len) {
    return RedisModule_CreateString(NULL, s, len);
}
#define WORD(s) word(s, sizeof(s) - 1)

static void reply_ints(RedisModuleCtx *ctx, const long long *v, int n) {
    RedisModule_ReplyWithArray(ctx, n);
    for (int i = 0; i < n; i++)
        RedisModule_ReplyWithLongLong(ctx, v[i]);
}

/* ------------------------------------------------------------ the values */

/* An end in the pointer: nothing to free, nothing allocated to count. */
static void *tat_load(RedisModuleIO *io, int encver) {
    if (encver != ENCVER) return NULL;
    return (void *)(uintptr_t)RedisModule_LoadSigned(io);
}

static void tat_save(RedisModuleIO *io, void *value) {
    RedisModule_SaveSigned(io, (int64_t)(uintptr_t)value);
}

static size_t tat_mem_usage(const void *value) {
    (void)value;
    return 0;
}

static void tat_free(void *value) {
    (void)value;
}

/* An allocated value is a block of its type's size, saved as a string; the
 * loaded buffer is allocated by RedisModule_Alloc, so it is the value. */
static void *block_load(RedisModuleIO *io, int encver, size_t size) {
    if (encver != ENCVER) return NULL;
    size_t len = 0;
    char *v = RedisModule_LoadStringBuffer(io, &len);
    if (v && len == size) return v;
    RedisModule_Free(v);
    return NULL;
}

static void block_free(void *value) {
    RedisModule_Free(value);
}

#define BLOCK_CALLBACKS(name, size)                                                                \
    static void *name##_load(RedisModuleIO *io, int encver) {                                      \
        return block_load(io, encver, size);                                                       \
    }                                                                                              \
    static void name##_save(RedisModuleIO *io, void *value) {                                      \
        RedisModule_SaveStringBuffer(io, value, size);                                             \
    }                                                                                              \
    static size_t name##_mem_usage(const void *value) {                                            \
        (void)value;                                                                               \
        return size;                                                                               \
    }
BLOCK_CALLBACKS(fixed, sizeof(fixed_value))
BLOCK_CALLBACKS(check, PAYLOAD_LEN)
BLOCK_CALLBACKS(lock, sizeof(lock_value))

/* No command restores a floor's value, so an AOF rewrite leaves the key
 * out; without this callback 7.0 would crash rewriting without the RDB
 * preamble. */
static void no_aof_rewrite(RedisModuleIO *io, RedisModuleString *key, void *value) {
    (void)io, (void)key, (void)value;
}

static RedisModuleType *create_type(RedisModuleCtx *ctx, const char *name,
                                    RedisModuleTypeLoadFunc load, RedisModuleTypeSaveFunc save,
                                    RedisModuleTypeMemUsageFunc mem_usage,
                                    RedisModuleTypeFreeFunc free_value) {
    RedisModuleTypeMethods m = {.version = REDISMODULE_TYPE_METHOD_VERSION,
                                .rdb_load = load,
                                .rdb_save = save,
                                .aof_rewrite = no_aof_rewrite,
                                .mem_usage = mem_usage,
                                .free = free_value};
    return RedisModule_CreateDataType(ctx, name, ENCVER, &m);
}

/* -------------------------------------------------------------- the key */

static int64_t now_ms(void) {
    return server_clock_us() / 1000;
}

/* A number argument, min if it is none, kept between min and 10^12 so that
 * no sum or product of them overflows (the floor checks nothing else). */
static long long number(RedisModuleString *s, long long min) {
    long long v;
    if (RedisModule_StringToLongLong(s, &v) != REDISMODULE_OK || v < min) return min;
    return v < 1000000000000LL ? v : 1000000000000LL;
}

/* Opens the key for the write. *held is its value of type t, NULL when it
 * is empty; a value of any other type is refused as floodgate refuses it
 * (NULL returned, WRONGTYPE replied). */
static RedisModuleKey *open_key(RedisModuleCtx *ctx, RedisModuleString *name, RedisModuleType *t,
                                void **held) {
    RedisModuleKey *key = RedisModule_OpenKey(ctx, name, REDISMODULE_READ | REDISMODULE_WRITE);
    int type = RedisModule_KeyType(key);
    *held = NULL;
    if (type == REDISMODULE_KEYTYPE_EMPTY) return key;
    if (type == REDISMODULE_KEYTYPE_MODULE && RedisModule_ModuleTypeGetType(key) == t) {
        *held = RedisModule_ModuleTypeGetValue(key);
        return key;
    }
    RedisModule_CloseKey(key);
    RedisModule_ReplyWithError(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
    return NULL;
}

/* What follows every write: the key closed, signalled, announced. */
static void written(RedisModuleCtx *ctx, RedisModuleString *name, RedisModuleKey *key) {
    RedisModule_CloseKey(key);
    RedisModule_SignalModifiedKey(ctx, name);
    RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_MODULE, "floor", name);
}

/* Pushes the end in the key by interval_ms from no earlier than now, as a
 * bucket's theoretical arrival time, and expires the key then, as a bucket
 * is full again then. */
static int push_end(RedisModuleCtx *ctx, RedisModuleString *name, long long interval_ms) {
    void *held;
    RedisModuleKey *key = open_key(ctx, name, tat_type, &held);
    if (!key) return REDISMODULE_ERR;
    int64_t end = (int64_t)(uintptr_t)held, now = now_ms();
    end = (end > now ? end : now) + interval_ms;
    if (held)
        RedisModule_ModuleTypeReplaceValue(key, tat_type, (void *)(uintptr_t)end, NULL);
    else
        RedisModule_ModuleTypeSetValue(key, tat_type, (void *)(uintptr_t)end);
    RedisModule_SetAbsExpire(key, end);
    written(ctx, name, key);
    return REDISMODULE_OK;
}

/* Copies the value into the key's block, allocated if the key is empty, and
 * expires the key at expire_ms. */
static int store_block(RedisModuleCtx *ctx, RedisModuleString *name, RedisModuleType *t,
                       const void *value, size_t size, int64_t expire_ms) {
    void *held;
    RedisModuleKey *key = open_key(ctx, name, t, &held);
    if (!key) return REDISMODULE_ERR;
    if (!held) {
        held = RedisModule_Alloc(size);
        RedisModule_ModuleTypeSetValue(key, t, held);
    }
    memcpy(held, value, size);
    RedisModule_SetAbsExpire(key, expire_ms);
    written(ctx, name, key);
    return REDISMODULE_OK;
}

/* ----------------------------------------------------------- the floors */

/* FLOOR.BUCKET key capacity rate: FG.TOKEN's reply and a bucket's effect,
 * FG.SETSTATE key <tat_ns>. */
static int bucket_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 4) return RedisModule_WrongArity(ctx);
    static const long long r[5] = {1, 1000000, 999983, 0, 17};
    reply_ints(ctx, r, 5);
    RedisModule_Replicate(ctx, "FG.SETSTATE", "ss", argv[1], w_tat);
    return REDISMODULE_OK;
}

/* FLOOR.KEYED key capacity rate: FLOOR.BUCKET and the bucket's key, one
 * emission interval (1000/rate ms) further per request. */
static int keyed_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 4) return RedisModule_WrongArity(ctx);
    if (push_end(ctx, argv[1], 1000 / number(argv[3], 1)) != REDISMODULE_OK) return REDISMODULE_OK;
    return bucket_command(ctx, argv, argc);
}

/* FLOOR.THROTTLE key max_burst count period: CL.THROTTLE's. */
static int throttle_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 5) return RedisModule_WrongArity(ctx);
    static const long long r[5] = {0, 101, 84, -1, 17};
    reply_ints(ctx, r, 5);
    RedisModule_Replicate(ctx, "FG.SETSTATE", "ss", argv[1], w_tat);
    return REDISMODULE_OK;
}

/* FLOOR.THROTTLE.KEYED key max_burst count period: FLOOR.THROTTLE and the
 * bucket's key, period*1000/count ms further per request. */
static int throttle_keyed_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 5) return RedisModule_WrongArity(ctx);
    long long interval = number(argv[4], 0) * 1000 / number(argv[3], 1);
    if (push_end(ctx, argv[1], interval) != REDISMODULE_OK) return REDISMODULE_OK;
    return throttle_command(ctx, argv, argc);
}

/* FLOOR.FIXED key limit window_ms: FG.FIXED's, FG.SETSTATE fixed. */
static int fixed_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 4) return RedisModule_WrongArity(ctx);
    static const long long r[5] = {1, 100000, 99983, 0, 43200000};
    reply_ints(ctx, r, 5);
    RedisModule_Replicate(ctx, "FG.SETSTATE", "ssssss", argv[1], w_fixed, w_start, w_count, w_pxat,
                          w_ms);
    return REDISMODULE_OK;
}

/* FLOOR.FIXED.KEYED key limit window_ms: FLOOR.FIXED and the window's key,
 * its count updated in place while the window lasts, expiring with it. */
static int fixed_keyed_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 4) return RedisModule_WrongArity(ctx);
    long long window = number(argv[3], 1);
    void *held;
    RedisModuleKey *key = open_key(ctx, argv[1], fixed_type, &held);
    if (!key) return REDISMODULE_OK;
    int64_t start = now_ms() / window * window;
    fixed_value *v = held;
    if (!v) {
        v = RedisModule_Alloc(sizeof(*v));
        RedisModule_ModuleTypeSetValue(key, fixed_type, v);
    }
    v->count = v != held || v->window_start_ms != start ? 1 : v->count + 1;
    v->window_start_ms = start;
    RedisModule_SetAbsExpire(key, start + window);
    written(ctx, argv[1], key);
    return fixed_command(ctx, argv, argc);
}

/* FLOOR.CHECK policy key: FG.CHECK's seven fields, FG.PLSTATE key payload PXAT ms. */
static int check_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 3) return RedisModule_WrongArity(ctx);
    RedisModule_ReplyWithArray(ctx, 7);
    RedisModule_ReplyWithLongLong(ctx, 1);
    RedisModule_ReplyWithLongLong(ctx, 100000);
    RedisModule_ReplyWithLongLong(ctx, 99983);
    RedisModule_ReplyWithLongLong(ctx, 0);
    RedisModule_ReplyWithLongLong(ctx, 17);
    RedisModule_ReplyWithCString(ctx, "limit:1");
    RedisModule_ReplyWithLongLong(ctx, 0);
    RedisModule_Replicate(ctx, "FG.PLSTATE", "ssss", argv[2], w_payload, w_pxat, w_ms);
    return REDISMODULE_OK;
}

/* FLOOR.CHECK.KEYED policy key: FLOOR.CHECK and the policy state's key,
 * the payload copied in. p2 (hot_paths.py) is a TOKEN rule and a FIXED
 * rule over a day whose limit is never reached, so its key lives until the
 * day's window ends: that is the expiry. */
static int check_keyed_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 3) return RedisModule_WrongArity(ctx);
    const char *payload = RedisModule_StringPtrLen(w_payload, NULL);
    if (store_block(ctx, argv[2], check_type, payload, PAYLOAD_LEN,
                    (now_ms() / DAY_MS + 1) * DAY_MS) != REDISMODULE_OK)
        return REDISMODULE_OK;
    return check_command(ctx, argv, argc);
}

/* FLOOR.LOCK key owner lease_ms: FG.LOCK's reply, FG.HOLD's eight arguments. */
static int lock_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 4) return RedisModule_WrongArity(ctx);
    static const long long r[4] = {1, 12345, 30000, 1};
    reply_ints(ctx, r, 4);
    RedisModule_Replicate(ctx, "FG.HOLD", "ssssssss", argv[1], w_lock, w_one, argv[2], w_exclusive,
                          w_one, w_expires, w_token);
    return REDISMODULE_OK;
}

/* FLOOR.LOCK.KEYED key owner lease_ms: FLOOR.LOCK and the lock's key,
 * holding the owner until the lease ends. */
static int lock_keyed_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 4) return RedisModule_WrongArity(ctx);
    lock_value v = {.expires_ms = now_ms() + number(argv[3], 1)};
    size_t len;
    const char *owner = RedisModule_StringPtrLen(argv[2], &len);
    memcpy(v.owner, owner, len < sizeof(v.owner) ? len : sizeof(v.owner));
    if (store_block(ctx, argv[1], lock_type, &v, sizeof(v), v.expires_ms) != REDISMODULE_OK)
        return REDISMODULE_OK;
    return lock_command(ctx, argv, argc);
}

/* FLOOR.UNLOCK key owner: FG.UNLOCK's reply, FG.UNHOLD key owner. */
static int unlock_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 3) return RedisModule_WrongArity(ctx);
    RedisModule_ReplyWithLongLong(ctx, 0);
    RedisModule_Replicate(ctx, "FG.UNHOLD", "ss", argv[1], argv[2]);
    return REDISMODULE_OK;
}

/* FLOOR.UNLOCK.KEYED key owner: FLOOR.UNLOCK and the lock's key deleted
 * (its value freed), as releasing the last hold deletes it. */
static int unlock_keyed_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 3) return RedisModule_WrongArity(ctx);
    void *held;
    RedisModuleKey *key = open_key(ctx, argv[1], lock_type, &held);
    if (!key) return REDISMODULE_OK;
    if (held) {
        RedisModule_DeleteKey(key);
        written(ctx, argv[1], key);
    } else {
        RedisModule_CloseKey(key);
    }
    return unlock_command(ctx, argv, argc);
}

__attribute__((visibility("default"))) int RedisModule_OnLoad(RedisModuleCtx *ctx,
                                                              RedisModuleString **argv, int argc) {
    (void)argv, (void)argc;
    if (fg_api_init(ctx, "floor", 1) != REDISMODULE_OK) return REDISMODULE_ERR;
    tat_type = create_type(ctx, "floortat1", tat_load, tat_save, tat_mem_usage, tat_free);
    fixed_type = create_type(ctx, "floorfix1", fixed_load, fixed_save, fixed_mem_usage, block_free);
    check_type = create_type(ctx, "floorchk1", check_load, check_save, check_mem_usage, block_free);
    lock_type = create_type(ctx, "floorlck1", lock_load, lock_save, lock_mem_usage, block_free);
    if (!tat_type || !fixed_type || !check_type || !lock_type) return REDISMODULE_ERR;
    w_fixed = WORD("fixed");
    w_pxat = WORD("PXAT");
    w_lock = WORD("lock");
    w_exclusive = WORD("exclusive");
    w_one = WORD("1");
    w_tat = WORD("1795000000123456789");
    w_ms = WORD("1795000000124");
    w_start = WORD("1794960000000000");
    w_count = WORD("17");
    w_expires = WORD("1795000030000000");
    w_token = WORD("123456");
    w_payload = WORD("0123456789012345678901234567890123456789012345678901234567890123");
    static const struct {
        const char *name;
        int (*fn)(RedisModuleCtx *, RedisModuleString **, int);
        int key;
    } cmds[] = {{"FLOOR.BUCKET", bucket_command, 1},
                {"FLOOR.KEYED", keyed_command, 1},
                {"FLOOR.THROTTLE", throttle_command, 1},
                {"FLOOR.THROTTLE.KEYED", throttle_keyed_command, 1},
                {"FLOOR.FIXED", fixed_command, 1},
                {"FLOOR.FIXED.KEYED", fixed_keyed_command, 1},
                {"FLOOR.CHECK", check_command, 2},
                {"FLOOR.CHECK.KEYED", check_keyed_command, 2},
                {"FLOOR.LOCK", lock_command, 1},
                {"FLOOR.LOCK.KEYED", lock_keyed_command, 1},
                {"FLOOR.UNLOCK", unlock_command, 1},
                {"FLOOR.UNLOCK.KEYED", unlock_keyed_command, 1}};
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
        if (RedisModule_CreateCommand(ctx, cmds[i].name, cmds[i].fn, "write deny-oom fast",
                                      cmds[i].key, cmds[i].key, 1) != REDISMODULE_OK)
            return REDISMODULE_ERR;
    return REDISMODULE_OK;
}
