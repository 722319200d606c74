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
 * FLOOR.KEYED is FLOOR.BUCKET plus what any write of a key with a TTL
 * costs through the API: it opens the key, sets it (a string made once)
 * with an absolute expiry, signals it and sends a keyspace event, as
 * floodgate's checks do; what is left above it is parsing, the decision
 * and formatting.
 */
#include "redismodule_api.h"

static RedisModuleString *w_bucket, *w_fixed, *w_pxat, *w_lock, *w_exclusive, *w_one, *w_tat,
    *w_ms, *w_start, *w_count, *w_payload, *w_expires, *w_token;

static RedisModuleString *word(const char *s, size_t len) {
    return RedisModule_CreateString(NULL, s, len);
}
#define WORD(s) word(s, sizeof(s) - 1)

static void reply_ints(RedisModuleCtx *ctx, const long long *v, int n) {
    RedisModule_ReplyWithArray(ctx, n);
    for (int i = 0; i < n; i++)
        RedisModule_ReplyWithLongLong(ctx, v[i]);
}

/* FLOOR.BUCKET key capacity rate: FG.TOKEN's reply and FG.SETSTATE bucket. */
static int bucket_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 4) return RedisModule_WrongArity(ctx);
    static const long long r[5] = {1, 1000000, 999983, 0, 17};
    reply_ints(ctx, r, 5);
    RedisModule_Replicate(ctx, "FG.SETSTATE", "sssss", argv[1], w_bucket, w_tat, w_pxat, w_ms);
    return REDISMODULE_OK;
}

/* FLOOR.KEYED key capacity rate: FLOOR.BUCKET and the key's write. */
static int keyed_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 4) return RedisModule_WrongArity(ctx);
    RedisModuleKey *key = RedisModule_OpenKey(ctx, argv[1], REDISMODULE_READ | REDISMODULE_WRITE);
    if (RedisModule_KeyType(key) == REDISMODULE_KEYTYPE_EMPTY) RedisModule_StringSet(key, w_tat);
    RedisModule_SetAbsExpire(key, 4102444800000LL);
    RedisModule_CloseKey(key);
    RedisModule_SignalModifiedKey(ctx, argv[1]);
    RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_MODULE, "floor", argv[1]);
    return bucket_command(ctx, argv, argc);
}

/* FLOOR.THROTTLE key max_burst count period: CL.THROTTLE's. */
static int throttle_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 5) return RedisModule_WrongArity(ctx);
    static const long long r[5] = {0, 101, 84, -1, 17};
    reply_ints(ctx, r, 5);
    RedisModule_Replicate(ctx, "FG.SETSTATE", "sssss", argv[1], w_bucket, w_tat, w_pxat, w_ms);
    return REDISMODULE_OK;
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

/* FLOOR.LOCK key owner lease_ms: FG.LOCK's reply, FG.HOLD's eight arguments. */
static int lock_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 4) return RedisModule_WrongArity(ctx);
    static const long long r[4] = {1, 12345, 30000, 1};
    reply_ints(ctx, r, 4);
    RedisModule_Replicate(ctx, "FG.HOLD", "ssssssss", argv[1], w_lock, w_one, argv[2], w_exclusive,
                          w_one, w_expires, w_token);
    return REDISMODULE_OK;
}

/* FLOOR.UNLOCK key owner: FG.UNLOCK's reply, FG.UNHOLD key owner. */
static int unlock_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 3) return RedisModule_WrongArity(ctx);
    RedisModule_ReplyWithLongLong(ctx, 0);
    RedisModule_Replicate(ctx, "FG.UNHOLD", "ss", argv[1], argv[2]);
    return REDISMODULE_OK;
}

__attribute__((visibility("default"))) int RedisModule_OnLoad(RedisModuleCtx *ctx,
                                                              RedisModuleString **argv, int argc) {
    (void)argv, (void)argc;
    if (fg_api_init(ctx, "floor", 1) != REDISMODULE_OK) return REDISMODULE_ERR;
    w_bucket = WORD("bucket");
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
    } cmds[] = {{"FLOOR.BUCKET", bucket_command, 1},     {"FLOOR.KEYED", keyed_command, 1},
                {"FLOOR.THROTTLE", throttle_command, 1},
                {"FLOOR.FIXED", fixed_command, 1},       {"FLOOR.CHECK", check_command, 2},
                {"FLOOR.LOCK", lock_command, 1},         {"FLOOR.UNLOCK", unlock_command, 1}};
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
        if (RedisModule_CreateCommand(ctx, cmds[i].name, cmds[i].fn, "write deny-oom fast",
                                      cmds[i].key, cmds[i].key, 1) != REDISMODULE_OK)
            return REDISMODULE_ERR;
    return REDISMODULE_OK;
}
