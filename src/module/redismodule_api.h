/*
 * redismodule_api.h - floodgate's own declarations of the Redis module API.
 *
 * Written from the documented module API (Redis 7.0). The server hands a
 * module its functions by name at load time: every API is a function pointer
 * named RedisModule_<Name>, fetched by fg_api_init() through the GetApi
 * pointer stored in the first field of the load context. Pointers are
 * declared extern here and defined once in redismodule_api.c (GCC 12 builds
 * with -fno-common).
 *
 * APIs in FG_REQUIRED_APIS must exist (Redis >= 7.0.5, any Valkey); APIs in
 * FG_OPTIONAL_APIS are newer and stay NULL on servers that lack them, so
 * callers test them before use.
 */
#ifndef FG_REDISMODULE_API_H
#define FG_REDISMODULE_API_H

#include <stddef.h>
#include <stdint.h>

#include "../core/messages.h"

#define REDISMODULE_OK       0
#define REDISMODULE_ERR      1
#define REDISMODULE_APIVER_1 1

#define REDISMODULE_READ  (1 << 0)
#define REDISMODULE_WRITE (1 << 1)

#define REDISMODULE_KEYTYPE_EMPTY  0
#define REDISMODULE_KEYTYPE_STRING 1
#define REDISMODULE_KEYTYPE_MODULE 6

#define REDISMODULE_POSTPONED_LEN -1
#define REDISMODULE_NO_EXPIRE     -1

#define REDISMODULE_CTX_FLAGS_LUA           (1 << 0)
#define REDISMODULE_CTX_FLAGS_MULTI         (1 << 1)
#define REDISMODULE_CTX_FLAGS_MASTER        (1 << 2)
#define REDISMODULE_CTX_FLAGS_CLUSTER       (1 << 5)
#define REDISMODULE_CTX_FLAGS_MAXMEMORY     (1 << 8)
#define REDISMODULE_CTX_FLAGS_OOM           (1 << 10)
#define REDISMODULE_CTX_FLAGS_REPLICATED    (1 << 12)
#define REDISMODULE_CTX_FLAGS_LOADING       (1 << 13)
#define REDISMODULE_CTX_FLAGS_DENY_BLOCKING (1 << 21)

#define REDISMODULE_NOTIFY_GENERIC (1 << 2)
#define REDISMODULE_NOTIFY_STRING  (1 << 3)
#define REDISMODULE_NOTIFY_EXPIRED (1 << 8)
#define REDISMODULE_NOTIFY_EVICTED (1 << 9)
#define REDISMODULE_NOTIFY_MODULE  (1 << 13)

/* Server events (SubscribeToServerEvent); every one has data version 1. */
#define REDISMODULE_EVENT_PERSISTENCE 1
#define REDISMODULE_EVENT_FLUSHDB     2
#define REDISMODULE_EVENT_LOADING     3
#define REDISMODULE_EVENT_SWAPDB      11
#define REDISMODULE_EVENT_CONFIG      16
#define REDISMODULE_SUBEVENT_FLUSHDB_END 1
#define REDISMODULE_SUBEVENT_PERSISTENCE_AOF_START      1
#define REDISMODULE_SUBEVENT_LOADING_RDB_START  0
#define REDISMODULE_SUBEVENT_LOADING_AOF_START  1
#define REDISMODULE_SUBEVENT_LOADING_REPL_START 2
#define REDISMODULE_SUBEVENT_CONFIG_CHANGE      0

#define REDISMODULE_OPTIONS_HANDLE_IO_ERRORS           (1 << 0)
#define REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED (1 << 1)

#define REDISMODULE_TYPE_METHOD_VERSION 3
#define REDISMODULE_AUX_BEFORE_RDB      (1 << 0)

#define REDISMODULE_CONFIG_DEFAULT   0
#define REDISMODULE_CONFIG_IMMUTABLE (1 << 0)
#define REDISMODULE_CONFIG_MEMORY    (1 << 7)

#define REDISMODULE_ERRORMSG_WRONGTYPE FG_ERR_WRONGTYPE /* the server's own words */

/* Key-spec flags and search types used by SetCommandInfo. */
#define REDISMODULE_CMD_KEY_RO     (1ULL << 0)
#define REDISMODULE_CMD_KEY_RW     (1ULL << 1)
#define REDISMODULE_CMD_KEY_OW     (1ULL << 2)
#define REDISMODULE_CMD_KEY_RM     (1ULL << 3)
#define REDISMODULE_CMD_KEY_ACCESS (1ULL << 4)
#define REDISMODULE_CMD_KEY_UPDATE (1ULL << 5)
#define REDISMODULE_CMD_KEY_INSERT (1ULL << 6)
#define REDISMODULE_CMD_KEY_DELETE (1ULL << 7)

enum {
    REDISMODULE_KSPEC_BS_INVALID = 0,
    REDISMODULE_KSPEC_BS_UNKNOWN,
    REDISMODULE_KSPEC_BS_INDEX,
    REDISMODULE_KSPEC_BS_KEYWORD
};
enum {
    REDISMODULE_KSPEC_FK_OMITTED = 0,
    REDISMODULE_KSPEC_FK_UNKNOWN,
    REDISMODULE_KSPEC_FK_RANGE,
    REDISMODULE_KSPEC_FK_KEYNUM
};
enum {
    REDISMODULE_ARG_TYPE_STRING = 0,
    REDISMODULE_ARG_TYPE_INTEGER,
    REDISMODULE_ARG_TYPE_DOUBLE,
    REDISMODULE_ARG_TYPE_KEY,
    REDISMODULE_ARG_TYPE_PATTERN,
    REDISMODULE_ARG_TYPE_UNIX_TIME,
    REDISMODULE_ARG_TYPE_PURE_TOKEN,
    REDISMODULE_ARG_TYPE_ONEOF,
    REDISMODULE_ARG_TYPE_BLOCK
};
#define REDISMODULE_CMD_ARG_OPTIONAL (1 << 0)
#define REDISMODULE_CMD_ARG_MULTIPLE (1 << 1)

typedef long long mstime_t;
typedef uint64_t RedisModuleTimerID;

typedef struct RedisModuleCtx RedisModuleCtx;
typedef struct RedisModuleCommand RedisModuleCommand;
typedef struct RedisModuleKey RedisModuleKey;
typedef struct RedisModuleString RedisModuleString;
typedef struct RedisModuleIO RedisModuleIO;
typedef struct RedisModuleType RedisModuleType;
typedef struct RedisModuleDigest RedisModuleDigest;
typedef struct RedisModuleInfoCtx RedisModuleInfoCtx;
typedef struct RedisModuleDefragCtx RedisModuleDefragCtx;
typedef struct RedisModuleBlockedClient RedisModuleBlockedClient;
typedef struct RedisModuleCallReply RedisModuleCallReply;
typedef struct RedisModuleDict RedisModuleDict;
typedef struct RedisModuleDictIter RedisModuleDictIter;
typedef struct RedisModuleServerInfoData RedisModuleServerInfoData;
typedef struct RedisModuleUser RedisModuleUser;

typedef struct RedisModuleEvent {
    uint64_t id;
    uint64_t dataver;
} RedisModuleEvent;

/* Data of REDISMODULE_EVENT_CONFIG. */
typedef struct RedisModuleConfigChangeV1 {
    uint64_t version;
    uint32_t num_changes;
    const char **config_names;
} RedisModuleConfigChangeV1;

/* Data of REDISMODULE_EVENT_FLUSHDB. */
typedef struct RedisModuleFlushInfo {
    uint64_t version;
    int32_t sync;
    int32_t dbnum; /* -1: every database */
} RedisModuleFlushInfo;

typedef int (*RedisModuleCmdFunc)(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);
typedef int (*RedisModuleConfigGetBoolFunc)(const char *name, void *privdata);
typedef int (*RedisModuleConfigSetBoolFunc)(const char *name, int val, void *privdata,
                                            RedisModuleString **err);
typedef int (*RedisModuleConfigApplyFunc)(RedisModuleCtx *ctx, void *privdata,
                                          RedisModuleString **err);
typedef long long (*RedisModuleConfigGetNumericFunc)(const char *name, void *privdata);
typedef int (*RedisModuleConfigSetNumericFunc)(const char *name, long long val, void *privdata,
                                               RedisModuleString **err);
typedef int (*RedisModuleConfigGetEnumFunc)(const char *name, void *privdata);
typedef int (*RedisModuleConfigSetEnumFunc)(const char *name, int val, void *privdata,
                                            RedisModuleString **err);
typedef void (*RedisModuleInfoFunc)(RedisModuleInfoCtx *ctx, int for_crash_report);
typedef void (*RedisModuleTimerProc)(RedisModuleCtx *ctx, void *data);
typedef int (*RedisModuleNotificationFunc)(RedisModuleCtx *ctx, int type, const char *event,
                                           RedisModuleString *key);
typedef void (*RedisModuleEventCallback)(RedisModuleCtx *ctx, RedisModuleEvent eid,
                                         uint64_t subevent, void *data);
typedef void (*RedisModuleBlockedFreeFunc)(RedisModuleCtx *ctx, void *privdata);
typedef void (*RedisModuleDisconnectFunc)(RedisModuleCtx *ctx, RedisModuleBlockedClient *bc);

typedef void *(*RedisModuleTypeLoadFunc)(RedisModuleIO *rdb, int encver);
typedef void (*RedisModuleTypeSaveFunc)(RedisModuleIO *rdb, void *value);
typedef void (*RedisModuleTypeRewriteFunc)(RedisModuleIO *aof, RedisModuleString *key, void *value);
typedef size_t (*RedisModuleTypeMemUsageFunc)(const void *value);
typedef void (*RedisModuleTypeDigestFunc)(RedisModuleDigest *digest, void *value);
typedef void (*RedisModuleTypeFreeFunc)(void *value);
typedef int (*RedisModuleTypeAuxLoadFunc)(RedisModuleIO *rdb, int encver, int when);
typedef void (*RedisModuleTypeAuxSaveFunc)(RedisModuleIO *rdb, int when);
typedef size_t (*RedisModuleTypeFreeEffortFunc)(RedisModuleString *key, const void *value);
typedef void (*RedisModuleTypeUnlinkFunc)(RedisModuleString *key, const void *value);
typedef void *(*RedisModuleTypeCopyFunc)(RedisModuleString *fromkey, RedisModuleString *tokey,
                                         const void *value);
typedef int (*RedisModuleTypeDefragFunc)(RedisModuleDefragCtx *ctx, RedisModuleString *key,
                                         void **value);

/* Field order is the server's ABI for method version 3. */
typedef struct RedisModuleTypeMethods {
    uint64_t version;
    RedisModuleTypeLoadFunc rdb_load;
    RedisModuleTypeSaveFunc rdb_save;
    RedisModuleTypeRewriteFunc aof_rewrite;
    RedisModuleTypeMemUsageFunc mem_usage;
    RedisModuleTypeDigestFunc digest;
    RedisModuleTypeFreeFunc free;
    RedisModuleTypeAuxLoadFunc aux_load;
    RedisModuleTypeAuxSaveFunc aux_save;
    int aux_save_triggers;
    RedisModuleTypeFreeEffortFunc free_effort;
    RedisModuleTypeUnlinkFunc unlink;
    RedisModuleTypeCopyFunc copy;
    RedisModuleTypeDefragFunc defrag;
} RedisModuleTypeMethods;

/* Command metadata (COMMAND DOCS, key specs, arity). The version record tells
 * the server the size of our structs, so newer servers can read them. */
typedef struct RedisModuleCommandInfoVersion {
    int version;
    size_t sizeof_historyentry;
    size_t sizeof_keyspec;
    size_t sizeof_arg;
} RedisModuleCommandInfoVersion;

typedef struct RedisModuleCommandHistoryEntry {
    const char *since;
    const char *changes;
} RedisModuleCommandHistoryEntry;

typedef struct RedisModuleCommandKeySpec {
    const char *notes;
    uint64_t flags;
    int begin_search_type;
    union {
        struct {
            int pos;
        } index;
        struct {
            const char *keyword;
            int startfrom;
        } keyword;
    } bs;
    int find_keys_type;
    union {
        struct {
            int lastkey;
            int keystep;
            int limit;
        } range;
        struct {
            int keynumidx;
            int firstkey;
            int keystep;
        } keynum;
    } fk;
} RedisModuleCommandKeySpec;

typedef struct RedisModuleCommandArg {
    const char *name;
    int type;
    int key_spec_index;
    const char *token;
    const char *summary;
    const char *since;
    int flags;
    const char *deprecated_since;
    struct RedisModuleCommandArg *subargs;
    /* Appended in Redis 7.2 without a new info version: 7.2+ reads it, 7.0
     * steps over it by sizeof_arg. Declaring it keeps both reading the
     * arguments where they are. */
    const char *display_text;
} RedisModuleCommandArg;

typedef struct RedisModuleCommandInfo {
    const RedisModuleCommandInfoVersion *version;
    const char *summary;
    const char *complexity;
    const char *since;
    RedisModuleCommandHistoryEntry *history;
    const char *tips;
    int arity;
    RedisModuleCommandKeySpec *key_specs;
    RedisModuleCommandArg *args;
} RedisModuleCommandInfo;

/* X(return type, Name, (parameters)) */
#define FG_REQUIRED_APIS(X)                                                                        \
    X(void *, Alloc, (size_t bytes))                                                               \
    X(void *, TryAlloc, (size_t bytes))                                                            \
    X(void *, Realloc, (void *ptr, size_t bytes))                                                  \
    X(void, Free, (void *ptr))                                                                     \
    X(int, IsModuleNameBusy, (const char *name))                                                   \
    X(RedisModuleUser *, CreateModuleUser, (const char *name))                                     \
    X(int, SetModuleUserACL, (RedisModuleUser * user, const char *acl))                            \
    X(int, FreeModuleUser, (RedisModuleUser * user))                                               \
    X(void, SetModuleAttribs, (RedisModuleCtx * ctx, const char *name, int ver, int apiver))       \
    X(void, SetModuleOptions, (RedisModuleCtx * ctx, int options))                                 \
    X(int, CreateCommand,                                                                          \
      (RedisModuleCtx * ctx, const char *name, RedisModuleCmdFunc cmdfunc, const char *strflags,   \
       int firstkey, int lastkey, int keystep))                                                    \
    X(RedisModuleCommand *, GetCommand, (RedisModuleCtx * ctx, const char *name))                  \
    X(int, SetCommandInfo, (RedisModuleCommand * command, const RedisModuleCommandInfo *info))     \
    X(int, WrongArity, (RedisModuleCtx * ctx))                                                     \
    X(int, ReplyWithLongLong, (RedisModuleCtx * ctx, long long ll))                                \
    X(int, ReplyWithError, (RedisModuleCtx * ctx, const char *err))                                \
    X(int, ReplyWithArray, (RedisModuleCtx * ctx, long len))                                       \
    X(int, ReplyWithMap, (RedisModuleCtx * ctx, long len))                                         \
    X(void, ReplySetArrayLength, (RedisModuleCtx * ctx, long len))                                 \
    X(int, ReplyWithNull, (RedisModuleCtx * ctx))                                                  \
    X(int, ReplyWithCString, (RedisModuleCtx * ctx, const char *buf))                              \
    X(const char *, StringPtrLen, (const RedisModuleString *str, size_t *len))                     \
    X(int, StringToLongLong, (const RedisModuleString *str, long long *ll))                        \
    X(int, StringToDouble, (const RedisModuleString *str, double *d))                              \
    X(RedisModuleString *, CreateString, (RedisModuleCtx * ctx, const char *ptr, size_t len))      \
    X(RedisModuleString *, CreateStringFromLongLong, (RedisModuleCtx * ctx, long long ll))         \
    X(void, FreeString, (RedisModuleCtx * ctx, RedisModuleString * str))                           \
    X(void *, OpenKey, (RedisModuleCtx * ctx, RedisModuleString * keyname, int mode))              \
    X(void, CloseKey, (RedisModuleKey * kp))                                                       \
    X(int, KeyType, (RedisModuleKey * kp))                                                         \
    X(int, DeleteKey, (RedisModuleKey * key))                                                      \
    X(mstime_t, GetExpire, (RedisModuleKey * key))                                                 \
    X(int, SetAbsExpire, (RedisModuleKey * key, mstime_t expire))                                  \
    X(mstime_t, GetAbsExpire, (RedisModuleKey * key))                                              \
    X(char *, StringDMA, (RedisModuleKey * key, size_t * len, int mode))                           \
    X(int, StringTruncate, (RedisModuleKey * key, size_t newlen))                                  \
    X(RedisModuleType *, CreateDataType,                                                           \
      (RedisModuleCtx * ctx, const char *name, int encver, RedisModuleTypeMethods *typemethods))   \
    X(int, ModuleTypeSetValue, (RedisModuleKey * key, RedisModuleType * mt, void *value))          \
    X(int, ModuleTypeReplaceValue,                                                                 \
      (RedisModuleKey * key, RedisModuleType * mt, void *new_value, void **old_value))             \
    X(RedisModuleType *, ModuleTypeGetType, (RedisModuleKey * key))                                \
    X(void *, ModuleTypeGetValue, (RedisModuleKey * key))                                          \
    X(int, StringSet, (RedisModuleKey * key, RedisModuleString * str))                             \
    X(void, SaveSigned, (RedisModuleIO * io, int64_t value))                                       \
    X(int64_t, LoadSigned, (RedisModuleIO * io))                                                   \
    X(void, SaveUnsigned, (RedisModuleIO * io, uint64_t value))                                    \
    X(uint64_t, LoadUnsigned, (RedisModuleIO * io))                                                \
    X(void, SaveDouble, (RedisModuleIO * io, double value))                                        \
    X(double, LoadDouble, (RedisModuleIO * io))                                                    \
    X(void, SaveStringBuffer, (RedisModuleIO * io, const char *str, size_t len))                   \
    X(char *, LoadStringBuffer, (RedisModuleIO * io, size_t *lenptr))                              \
    X(int, IsIOError, (RedisModuleIO * io))                                                        \
    X(void, EmitAOF, (RedisModuleIO * io, const char *cmdname, const char *fmt, ...))              \
    X(void, DigestAddLongLong, (RedisModuleDigest * md, long long ele))                            \
    X(void, DigestAddStringBuffer, (RedisModuleDigest * md, const char *ele, size_t len))          \
    X(void, DigestEndSequence, (RedisModuleDigest * md))                                           \
    X(int, Replicate, (RedisModuleCtx * ctx, const char *cmdname, const char *fmt, ...))           \
    X(int, ReplicateVerbatim, (RedisModuleCtx * ctx))                                              \
    X(int, GetContextFlags, (RedisModuleCtx * ctx))                                                \
    X(int, NotifyKeyspaceEvent,                                                                    \
      (RedisModuleCtx * ctx, int type, const char *event, RedisModuleString *key))                 \
    X(int, SignalModifiedKey, (RedisModuleCtx * ctx, RedisModuleString * keyname))                 \
    X(int, RegisterInfoFunc, (RedisModuleCtx * ctx, RedisModuleInfoFunc cb))                       \
    X(int, InfoAddSection, (RedisModuleInfoCtx * ctx, const char *name))                           \
    X(int, InfoAddFieldLongLong, (RedisModuleInfoCtx * ctx, const char *field, long long value))   \
    X(int, RegisterBoolConfig,                                                                     \
      (RedisModuleCtx * ctx, const char *name, int default_val, unsigned int flags,                \
       RedisModuleConfigGetBoolFunc getfn, RedisModuleConfigSetBoolFunc setfn,                     \
       RedisModuleConfigApplyFunc applyfn, void *privdata))                                        \
    X(int, LoadConfigs, (RedisModuleCtx * ctx))                                                    \
    X(void, Log, (RedisModuleCtx * ctx, const char *level, const char *fmt, ...))                  \
    X(void, LogIOError, (RedisModuleIO * io, const char *levelstr, const char *fmt, ...))       \
    X(int, ReplyWithSimpleString, (RedisModuleCtx * ctx, const char *msg))                         \
    X(int, ReplyWithStringBuffer, (RedisModuleCtx * ctx, const char *buf, size_t len))             \
    X(int, SelectDb, (RedisModuleCtx * ctx, int newid))                                            \
    X(int, GetSelectedDb, (RedisModuleCtx * ctx))                                                  \
    X(RedisModuleBlockedClient *, BlockClient,                                                     \
      (RedisModuleCtx * ctx, RedisModuleCmdFunc reply_callback, RedisModuleCmdFunc timeout_callback, \
       RedisModuleBlockedFreeFunc free_privdata, long long timeout_ms))                            \
    X(int, UnblockClient, (RedisModuleBlockedClient * bc, void *privdata))                         \
    X(int, AbortBlock, (RedisModuleBlockedClient * bc))                                            \
    X(void *, GetBlockedClientPrivateData, (RedisModuleCtx * ctx))                                 \
    X(RedisModuleBlockedClient *, GetBlockedClientHandle, (RedisModuleCtx * ctx))                  \
    X(void, SetDisconnectCallback, (RedisModuleBlockedClient * bc, RedisModuleDisconnectFunc cb))  \
    X(RedisModuleTimerID, CreateTimer,                                                             \
      (RedisModuleCtx * ctx, mstime_t period, RedisModuleTimerProc callback, void *data))          \
    X(int, StopTimer, (RedisModuleCtx * ctx, RedisModuleTimerID id, void **data))                  \
    X(int, SubscribeToKeyspaceEvents,                                                              \
      (RedisModuleCtx * ctx, int types, RedisModuleNotificationFunc callback))                     \
    X(int, SubscribeToServerEvent,                                                                 \
      (RedisModuleCtx * ctx, RedisModuleEvent event, RedisModuleEventCallback callback))           \
    X(RedisModuleDict *, CreateDict, (RedisModuleCtx * ctx))                                       \
    X(void, FreeDict, (RedisModuleCtx * ctx, RedisModuleDict * d))                                 \
    X(uint64_t, DictSize, (RedisModuleDict * d))                                                   \
    X(int, DictSetC, (RedisModuleDict * d, void *key, size_t keylen, void *ptr))                   \
    X(void *, DictGetC, (RedisModuleDict * d, void *key, size_t keylen, int *nokey))               \
    X(int, DictDelC, (RedisModuleDict * d, void *key, size_t keylen, void *oldval))                \
    X(int, DictReplaceC, (RedisModuleDict * d, void *key, size_t keylen, void *ptr))               \
    X(RedisModuleDictIter *, DictIteratorStartC,                                                   \
      (RedisModuleDict * d, const char *op, void *key, size_t keylen))                             \
    X(void *, DictNextC, (RedisModuleDictIter * di, size_t * keylen, void **dataptr))              \
    X(void, DictIteratorStop, (RedisModuleDictIter * di))                                      \
    X(int, IsKeysPositionRequest, (RedisModuleCtx * ctx))                                          \
    X(void, KeyAtPos, (RedisModuleCtx * ctx, int pos))                                             \
    X(void, KeyAtPosWithFlags, (RedisModuleCtx * ctx, int pos, int flags))                         \
    X(int *, GetCommandKeys,                                                                       \
      (RedisModuleCtx * ctx, RedisModuleString **argv, int argc, int *num_keys))                   \
    X(RedisModuleCallReply *, Call, (RedisModuleCtx * ctx, const char *cmdname, const char *fmt, ...)) \
    X(void, FreeCallReply, (RedisModuleCallReply * reply))                                         \
    X(RedisModuleCallReply *, CallReplyArrayElement, (RedisModuleCallReply * reply, size_t idx))   \
    X(const char *, CallReplyStringPtr, (RedisModuleCallReply * reply, size_t * len))              \
    X(int, CreateSubcommand,                                                                       \
      (RedisModuleCommand * parent, const char *name, RedisModuleCmdFunc cmdfunc,                  \
       const char *strflags, int firstkey, int lastkey, int keystep))                              \
    X(int, InfoBeginDictField, (RedisModuleInfoCtx * ctx, const char *name))                       \
    X(int, InfoEndDictField, (RedisModuleInfoCtx * ctx))                                           \
    X(int, InfoAddFieldCString, (RedisModuleInfoCtx * ctx, const char *field, const char *value))  \
    X(void *, Calloc, (size_t nmemb, size_t size))                                                 \
    X(int, AvoidReplicaTraffic, (void))                                                            \
    X(float, GetUsedMemoryRatio, (void))                                                           \
    X(RedisModuleServerInfoData *, GetServerInfo, (RedisModuleCtx * ctx, const char *section))     \
    X(void, FreeServerInfo, (RedisModuleCtx * ctx, RedisModuleServerInfoData * data))              \
    X(unsigned long long, ServerInfoGetFieldUnsigned,                                              \
      (RedisModuleServerInfoData * data, const char *field, int *out_err))                         \
    X(const char *, ServerInfoGetFieldC, (RedisModuleServerInfoData * data, const char *field))    \
    X(int, GetServerVersion, (void))                                                               \
    X(int, RegisterNumericConfig,                                                                  \
      (RedisModuleCtx * ctx, const char *name, long long default_val, unsigned int flags,          \
       long long min, long long max, RedisModuleConfigGetNumericFunc getfn,                        \
       RedisModuleConfigSetNumericFunc setfn, RedisModuleConfigApplyFunc applyfn, void *privdata)) \
    X(int, RegisterEnumConfig,                                                                     \
      (RedisModuleCtx * ctx, const char *name, int default_val, unsigned int flags,                \
       const char **enum_values, const int *int_values, int num_enum_vals,                         \
       RedisModuleConfigGetEnumFunc getfn, RedisModuleConfigSetEnumFunc setfn,                     \
       RedisModuleConfigApplyFunc applyfn, void *privdata))

/* Newer than 7.0: CachedMicroseconds and SetCommandACLCategories (7.2),
 * AddACLCategory and TryCalloc (7.4). */
#define FG_OPTIONAL_APIS(X)                                                                        \
    X(uint64_t, CachedMicroseconds, (void))                                                        \
    X(int, SetCommandACLCategories, (RedisModuleCommand * command, const char *ctgrsflags))        \
    X(int, AddACLCategory, (RedisModuleCtx * ctx, const char *name))                               \
    X(void *, TryCalloc, (size_t nmemb, size_t size))

#define FG_DECLARE_API(ret, name, params) extern ret(*RedisModule_##name) params;
FG_REQUIRED_APIS(FG_DECLARE_API)
FG_OPTIONAL_APIS(FG_DECLARE_API)
#undef FG_DECLARE_API

/* Fetch every API and register the module's name. REDISMODULE_ERR when a
 * required API is missing or the name is taken. */
int fg_api_init(RedisModuleCtx *ctx, const char *name, int ver);

#endif
