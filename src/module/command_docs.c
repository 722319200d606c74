/*
 * command_docs.c - COMMAND DOCS / COMMAND INFO metadata for every command:
 * summary, complexity, arity (so the server itself refuses a wrong argument
 * count), key specs (so cluster routing, ACLs and COMMAND GETKEYS know each
 * key) and arguments.
 */
#include "command_docs.h"

#include <string.h>

#include "families.h"

static const RedisModuleCommandInfoVersion info_version = {
    1, sizeof(RedisModuleCommandHistoryEntry), sizeof(RedisModuleCommandKeySpec),
    sizeof(RedisModuleCommandArg)};

#define KEY_AT(position, key_flags)                                                                \
    {                                                                                              \
        .flags = (key_flags), .begin_search_type = REDISMODULE_KSPEC_BS_INDEX,                     \
        .bs.index.pos = (position), .find_keys_type = REDISMODULE_KSPEC_FK_RANGE, .fk.range = {    \
            0,                                                                                     \
            1,                                                                                     \
            0                                                                                      \
        }                                                                                          \
    }
#define UPDATES    (REDISMODULE_CMD_KEY_RW | REDISMODULE_CMD_KEY_ACCESS | REDISMODULE_CMD_KEY_UPDATE)
#define READS      (REDISMODULE_CMD_KEY_RO | REDISMODULE_CMD_KEY_ACCESS)
#define OVERWRITES (REDISMODULE_CMD_KEY_OW | REDISMODULE_CMD_KEY_UPDATE)
#define DELETES    (REDISMODULE_CMD_KEY_RM | REDISMODULE_CMD_KEY_DELETE)

static RedisModuleCommandKeySpec updates_key1[] = {KEY_AT(1, UPDATES), {0}};
static RedisModuleCommandKeySpec reads_key1[] = {KEY_AT(1, READS), {0}};
static RedisModuleCommandKeySpec reads_key2[] = {KEY_AT(2, READS), {0}};
static RedisModuleCommandKeySpec updates_key2[] = {KEY_AT(2, UPDATES), {0}};
static RedisModuleCommandKeySpec overwrites_key1[] = {KEY_AT(1, OVERWRITES), {0}};
static RedisModuleCommandKeySpec deletes_key1[] = {KEY_AT(1, DELETES), {0}};
/* Bloom filters: adds insert (and answer from what was there), BF.RESERVE
 * only inserts, BF.LOADCHUNK overwrites bits. */
#define INSERTS (REDISMODULE_CMD_KEY_RW | REDISMODULE_CMD_KEY_INSERT)
#define ADDS    (INSERTS | REDISMODULE_CMD_KEY_ACCESS)
#define LOADS   (REDISMODULE_CMD_KEY_RW | REDISMODULE_CMD_KEY_UPDATE)
static RedisModuleCommandKeySpec adds_key1[] = {KEY_AT(1, ADDS), {0}};
static RedisModuleCommandKeySpec inserts_key1[] = {KEY_AT(1, INSERTS), {0}};
static RedisModuleCommandKeySpec loads_key1[] = {KEY_AT(1, LOADS), {0}};
/* FG.MLOCK / FG.MUNLOCK numkeys key [key ...]: the count is argument 1. */
static RedisModuleCommandKeySpec updates_numkeys[] = {
    {.flags = UPDATES,
     .begin_search_type = REDISMODULE_KSPEC_BS_INDEX,
     .bs.index.pos = 1,
     .find_keys_type = REDISMODULE_KSPEC_FK_KEYNUM,
     .fk.keynum = {0, 1, 1}},
    {0}};

#define KEY_ARG                                                                                    \
    { .name = "key", .type = REDISMODULE_ARG_TYPE_KEY, .key_spec_index = 0 }
#define INT_ARG(n)                                                                                 \
    { .name = (n), .type = REDISMODULE_ARG_TYPE_INTEGER }
#define NUM_ARG(n)                                                                                 \
    { .name = (n), .type = REDISMODULE_ARG_TYPE_DOUBLE }
#define COST_ARG                                                                                   \
    {                                                                                              \
        .name = "cost", .type = REDISMODULE_ARG_TYPE_INTEGER, .token = "COST",                     \
        .flags = REDISMODULE_CMD_ARG_OPTIONAL                                                      \
    }
#define AT_ARG                                                                                     \
    {                                                                                              \
        .name = "unix-time-microseconds", .type = REDISMODULE_ARG_TYPE_INTEGER, .token = "AT",     \
        .flags = REDISMODULE_CMD_ARG_OPTIONAL                                                      \
    }
#define PXAT_ARG                                                                                   \
    {                                                                                              \
        .name = "unix-time-milliseconds", .type = REDISMODULE_ARG_TYPE_UNIX_TIME, .token = "PXAT", \
        .flags = REDISMODULE_CMD_ARG_OPTIONAL                                                      \
    }

static RedisModuleCommandArg throttle_args[] = {KEY_ARG,
                                                INT_ARG("max_burst"),
                                                INT_ARG("count"),
                                                INT_ARG("period"),
                                                {.name = "quantity",
                                                 .type = REDISMODULE_ARG_TYPE_INTEGER,
                                                 .flags = REDISMODULE_CMD_ARG_OPTIONAL},
                                                {0}};
static RedisModuleCommandArg gcra_args[] = {
    KEY_ARG, INT_ARG("capacity"), NUM_ARG("count"), NUM_ARG("period_ms"), COST_ARG, AT_ARG, {0}};
static RedisModuleCommandArg token_args[] = {
    KEY_ARG, INT_ARG("capacity"), NUM_ARG("refill_per_sec"), COST_ARG, AT_ARG, {0}};
static RedisModuleCommandArg leaky_args[] = {
    KEY_ARG, INT_ARG("capacity"), NUM_ARG("leak_per_sec"), COST_ARG, AT_ARG, {0}};
static RedisModuleCommandArg window_args[] = {KEY_ARG,  INT_ARG("limit"), NUM_ARG("window_ms"),
                                              COST_ARG, AT_ARG,           {0}};
static RedisModuleCommandArg peek_families[] = {
    {.name = "fixed", .type = REDISMODULE_ARG_TYPE_PURE_TOKEN, .token = "FIXED"},
    {.name = "sliding", .type = REDISMODULE_ARG_TYPE_PURE_TOKEN, .token = "SLIDING"},
    {.name = "slidelog", .type = REDISMODULE_ARG_TYPE_PURE_TOKEN, .token = "SLIDELOG"},
    {.name = "token", .type = REDISMODULE_ARG_TYPE_PURE_TOKEN, .token = "TOKEN"},
    {.name = "leaky", .type = REDISMODULE_ARG_TYPE_PURE_TOKEN, .token = "LEAKY"},
    {.name = "gcra", .type = REDISMODULE_ARG_TYPE_PURE_TOKEN, .token = "GCRA"},
    {0}};
static RedisModuleCommandArg peek_args[] = {
    {.name = "family", .type = REDISMODULE_ARG_TYPE_ONEOF, .subargs = peek_families},
    KEY_ARG,
    {.name = "arg", .type = REDISMODULE_ARG_TYPE_STRING, .flags = REDISMODULE_CMD_ARG_MULTIPLE},
    COST_ARG,
    AT_ARG,
    {0}};
static RedisModuleCommandArg refund_families[] = {
    {.name = "token", .type = REDISMODULE_ARG_TYPE_PURE_TOKEN, .token = "TOKEN"},
    {.name = "leaky", .type = REDISMODULE_ARG_TYPE_PURE_TOKEN, .token = "LEAKY"},
    {.name = "gcra", .type = REDISMODULE_ARG_TYPE_PURE_TOKEN, .token = "GCRA"},
    {.name = "fixed", .type = REDISMODULE_ARG_TYPE_PURE_TOKEN, .token = "FIXED"},
    {0}};
static RedisModuleCommandArg refund_args[] = {
    {.name = "family", .type = REDISMODULE_ARG_TYPE_ONEOF, .subargs = refund_families},
    KEY_ARG,
    {.name = "arg", .type = REDISMODULE_ARG_TYPE_STRING, .flags = REDISMODULE_CMD_ARG_MULTIPLE},
    {.name = "units", .type = REDISMODULE_ARG_TYPE_INTEGER, .token = "COST"},
    AT_ARG,
    {0}};
static RedisModuleCommandArg key_only_args[] = {KEY_ARG, {0}};
static RedisModuleCommandArg setstate_args[] = {
    KEY_ARG,
    {.name = "type", .type = REDISMODULE_ARG_TYPE_STRING, .flags = REDISMODULE_CMD_ARG_OPTIONAL},
    {.name = "field", .type = REDISMODULE_ARG_TYPE_INTEGER, .flags = REDISMODULE_CMD_ARG_MULTIPLE},
    PXAT_ARG,
    {0}};
static RedisModuleCommandArg logappend_args[] = {
    KEY_ARG, INT_ARG("drop_through_us"), INT_ARG("at_us"), INT_ARG("count"), PXAT_ARG, {0}};
static RedisModuleCommandArg gcra_compat_args[] = {KEY_ARG,
                                                   INT_ARG("max_burst"),
                                                   INT_ARG("tokens_per_period"),
                                                   NUM_ARG("period"),
                                                   {.name = "count",
                                                    .type = REDISMODULE_ARG_TYPE_INTEGER,
                                                    .token = "TOKENS",
                                                    .flags = REDISMODULE_CMD_ARG_OPTIONAL},
                                                   {0}};

#define STR_ARG(n)                                                                                 \
    { .name = (n), .type = REDISMODULE_ARG_TYPE_STRING }
#define FLAG_ARG(n, t)                                                                             \
    {                                                                                              \
        .name = (n), .type = REDISMODULE_ARG_TYPE_PURE_TOKEN, .token = (t),                        \
        .flags = REDISMODULE_CMD_ARG_OPTIONAL                                                      \
    }
#define WAIT_ARG                                                                                   \
    {                                                                                              \
        .name = "timeout_ms", .type = REDISMODULE_ARG_TYPE_INTEGER, .token = "WAIT",               \
        .flags = REDISMODULE_CMD_ARG_OPTIONAL                                                      \
    }
#define KEYS_ARG                                                                                   \
    {                                                                                              \
        .name = "key", .type = REDISMODULE_ARG_TYPE_KEY, .key_spec_index = 0,                      \
        .flags = REDISMODULE_CMD_ARG_MULTIPLE                                                      \
    }

static RedisModuleCommandArg lock_args[] = {KEY_ARG,
                                            STR_ARG("owner"),
                                            INT_ARG("lease_ms"),
                                            FLAG_ARG("shared", "SHARED"),
                                            FLAG_ARG("reentrant", "REENTRANT"),
                                            WAIT_ARG,
                                            {0}};
static RedisModuleCommandArg key_owner_args[] = {KEY_ARG, STR_ARG("owner"), {0}};
static RedisModuleCommandArg acquire_args[] = {KEY_ARG,           INT_ARG("capacity"),
                                               STR_ARG("owner"),  INT_ARG("permits"),
                                               INT_ARG("lease_ms"), WAIT_ARG,
                                               {0}};
static RedisModuleCommandArg release_args[] = {
    KEY_ARG,
    STR_ARG("owner"),
    {.name = "permits", .type = REDISMODULE_ARG_TYPE_INTEGER, .flags = REDISMODULE_CMD_ARG_OPTIONAL},
    {0}};
static RedisModuleCommandArg mlock_args[] = {
    INT_ARG("numkeys"), KEYS_ARG, STR_ARG("owner"), INT_ARG("lease_ms"), WAIT_ARG, {0}};
static RedisModuleCommandArg munlock_args[] = {INT_ARG("numkeys"), KEYS_ARG, STR_ARG("owner"), {0}};
static RedisModuleCommandArg extend_args[] = {KEY_ARG, STR_ARG("owner"), INT_ARG("lease_ms"), {0}};
static RedisModuleCommandArg fence_args[] = {KEY_ARG, INT_ARG("token"), {0}};
static RedisModuleCommandArg fset_args[] = {KEY_ARG, INT_ARG("token"), STR_ARG("value"), {0}};
static RedisModuleCommandArg fget_args[] = {
    KEY_ARG,
    {.name = "token", .type = REDISMODULE_ARG_TYPE_INTEGER, .flags = REDISMODULE_CMD_ARG_OPTIONAL},
    {0}};
static RedisModuleCommandArg hold_args[] = {KEY_ARG,           STR_ARG("kind"),
                                            INT_ARG("capacity"), STR_ARG("owner"),
                                            STR_ARG("mode"),     INT_ARG("count"),
                                            INT_ARG("expires_us"), INT_ARG("token"),
                                            {0}};

static RedisModuleCommandArg bf_reserve_args[] = {KEY_ARG,
                                                  NUM_ARG("error_rate"),
                                                  INT_ARG("capacity"),
                                                  {.name = "expansion",
                                                   .type = REDISMODULE_ARG_TYPE_INTEGER,
                                                   .token = "EXPANSION",
                                                   .flags = REDISMODULE_CMD_ARG_OPTIONAL},
                                                  FLAG_ARG("nonscaling", "NONSCALING"),
                                                  {0}};
static RedisModuleCommandArg bf_item_args[] = {KEY_ARG, STR_ARG("item"), {0}};
static RedisModuleCommandArg bf_items_args[] = {
    KEY_ARG,
    {.name = "item", .type = REDISMODULE_ARG_TYPE_STRING, .flags = REDISMODULE_CMD_ARG_MULTIPLE},
    {0}};
static RedisModuleCommandArg bf_insert_args[] = {KEY_ARG,
                                                 {.name = "capacity",
                                                  .type = REDISMODULE_ARG_TYPE_INTEGER,
                                                  .token = "CAPACITY",
                                                  .flags = REDISMODULE_CMD_ARG_OPTIONAL},
                                                 {.name = "error",
                                                  .type = REDISMODULE_ARG_TYPE_DOUBLE,
                                                  .token = "ERROR",
                                                  .flags = REDISMODULE_CMD_ARG_OPTIONAL},
                                                 {.name = "expansion",
                                                  .type = REDISMODULE_ARG_TYPE_INTEGER,
                                                  .token = "EXPANSION",
                                                  .flags = REDISMODULE_CMD_ARG_OPTIONAL},
                                                 FLAG_ARG("nocreate", "NOCREATE"),
                                                 FLAG_ARG("nonscaling", "NONSCALING"),
                                                 {.name = "item",
                                                  .type = REDISMODULE_ARG_TYPE_STRING,
                                                  .token = "ITEMS",
                                                  .flags = REDISMODULE_CMD_ARG_MULTIPLE},
                                                 {0}};
static RedisModuleCommandArg bf_info_fields[] = {
    {.name = "capacity", .type = REDISMODULE_ARG_TYPE_PURE_TOKEN, .token = "CAPACITY"},
    {.name = "size", .type = REDISMODULE_ARG_TYPE_PURE_TOKEN, .token = "SIZE"},
    {.name = "filters", .type = REDISMODULE_ARG_TYPE_PURE_TOKEN, .token = "FILTERS"},
    {.name = "items", .type = REDISMODULE_ARG_TYPE_PURE_TOKEN, .token = "ITEMS"},
    {.name = "expansion", .type = REDISMODULE_ARG_TYPE_PURE_TOKEN, .token = "EXPANSION"},
    {0}};
static RedisModuleCommandArg bf_info_args[] = {KEY_ARG,
                                               {.name = "single_value",
                                                .type = REDISMODULE_ARG_TYPE_ONEOF,
                                                .flags = REDISMODULE_CMD_ARG_OPTIONAL,
                                                .subargs = bf_info_fields},
                                               {0}};
static RedisModuleCommandArg bf_scandump_args[] = {KEY_ARG, INT_ARG("iterator"), {0}};
static RedisModuleCommandArg bf_loadchunk_args[] = {
    KEY_ARG, INT_ARG("iterator"), STR_ARG("data"), {0}};

/* Unique counters: "key window [key ...]", the further keys from argument
 * 5 (after LAST n unit or BETWEEN start end) to the end; FG.UVSTORE has
 * its destination first. */
#define KEYS_FROM(position, key_flags)                                                             \
    {                                                                                              \
        .flags = (key_flags), .begin_search_type = REDISMODULE_KSPEC_BS_INDEX,                     \
        .bs.index.pos = (position), .find_keys_type = REDISMODULE_KSPEC_FK_RANGE, .fk.range = {    \
            -1,                                                                                    \
            1,                                                                                     \
            0                                                                                      \
        }                                                                                          \
    }
static RedisModuleCommandKeySpec uv_reads_keys[] = {KEY_AT(1, READS), KEYS_FROM(5, READS), {0}};
static RedisModuleCommandKeySpec uv_store_keys[] = {
    KEY_AT(1, OVERWRITES), KEY_AT(2, READS), KEYS_FROM(6, READS), {0}};
static RedisModuleCommandArg uv_units[] = {
    {.name = "seconds", .type = REDISMODULE_ARG_TYPE_PURE_TOKEN, .token = "SECONDS"},
    {.name = "minutes", .type = REDISMODULE_ARG_TYPE_PURE_TOKEN, .token = "MINUTES"},
    {.name = "hours", .type = REDISMODULE_ARG_TYPE_PURE_TOKEN, .token = "HOURS"},
    {.name = "days", .type = REDISMODULE_ARG_TYPE_PURE_TOKEN, .token = "DAYS"},
    {0}};
static RedisModuleCommandArg uv_last[] = {
    INT_ARG("n"), {.name = "unit", .type = REDISMODULE_ARG_TYPE_ONEOF, .subargs = uv_units}, {0}};
static RedisModuleCommandArg uv_between[] = {INT_ARG("start_us"), INT_ARG("end_us"), {0}};
static RedisModuleCommandArg uv_windows[] = {
    {.name = "last", .type = REDISMODULE_ARG_TYPE_BLOCK, .token = "LAST", .subargs = uv_last},
    {.name = "between",
     .type = REDISMODULE_ARG_TYPE_BLOCK,
     .token = "BETWEEN",
     .subargs = uv_between},
    {0}};
#define UV_WINDOW_ARG                                                                              \
    { .name = "window", .type = REDISMODULE_ARG_TYPE_ONEOF, .subargs = uv_windows }
#define UV_MORE_KEYS(spec)                                                                         \
    {                                                                                              \
        .name = "other_key", .type = REDISMODULE_ARG_TYPE_KEY, .key_spec_index = (spec),           \
        .flags = REDISMODULE_CMD_ARG_OPTIONAL | REDISMODULE_CMD_ARG_MULTIPLE                       \
    }
static RedisModuleCommandArg uv_window_args[] = {KEY_ARG, UV_WINDOW_ARG, UV_MORE_KEYS(1), {0}};
static RedisModuleCommandArg uv_store_args[] = {
    {.name = "destination", .type = REDISMODULE_ARG_TYPE_KEY, .key_spec_index = 0},
    {.name = "key", .type = REDISMODULE_ARG_TYPE_KEY, .key_spec_index = 1},
    UV_WINDOW_ARG,
    UV_MORE_KEYS(2),
    {0}};
#define UV_OPTION(n, t)                                                                            \
    {                                                                                              \
        .name = (n), .type = REDISMODULE_ARG_TYPE_INTEGER, .token = (t),                           \
        .flags = REDISMODULE_CMD_ARG_OPTIONAL                                                      \
    }
static RedisModuleCommandArg uv_create_args[] = {KEY_ARG,
                                                 UV_OPTION("seconds", "SPAN"),
                                                 UV_OPTION("minute_buckets", "MINUTES"),
                                                 UV_OPTION("hour_buckets", "HOURS"),
                                                 UV_OPTION("day_buckets", "DAYS"),
                                                 UV_OPTION("seconds", "TZOFFSET"),
                                                 {0}};
static RedisModuleCommandArg uv_add_args[] = {
    KEY_ARG,
    {.name = "item", .type = REDISMODULE_ARG_TYPE_STRING, .flags = REDISMODULE_CMD_ARG_MULTIPLE},
    {0}};
static RedisModuleCommandArg uv_addat_args[] = {
    KEY_ARG,
    INT_ARG("unix_us"),
    {.name = "item", .type = REDISMODULE_ARG_TYPE_STRING, .flags = REDISMODULE_CMD_ARG_MULTIPLE},
    {0}};
static RedisModuleCommandArg uv_load_args[] = {KEY_ARG, STR_ARG("payload"), {0}};

/* Policies: FG.CHECK's key is argument 2; FG.POLICY's subcommands have
 * no keys. */
#define POLICY_ARG                                                                                 \
    { .name = "policy", .type = REDISMODULE_ARG_TYPE_STRING }
#define ITEMS_ARG                                                                                  \
    { .name = "item", .type = REDISMODULE_ARG_TYPE_STRING, .flags = REDISMODULE_CMD_ARG_MULTIPLE }
static RedisModuleCommandArg check_args[] = {
    POLICY_ARG,
    {.name = "key", .type = REDISMODULE_ARG_TYPE_KEY, .key_spec_index = 0},
    COST_ARG,
    {.name = "identity",
     .type = REDISMODULE_ARG_TYPE_STRING,
     .token = "ID",
     .flags = REDISMODULE_CMD_ARG_OPTIONAL},
    WAIT_ARG,
    AT_ARG,
    {0}};
static RedisModuleCommandArg plstate_args[] = {KEY_ARG, STR_ARG("payload"), PXAT_ARG, {0}};
static RedisModuleCommandArg policy_set_args[] = {
    STR_ARG("name"),
    {.name = "rule", .type = REDISMODULE_ARG_TYPE_STRING, .flags = REDISMODULE_CMD_ARG_MULTIPLE},
    {0}};
static RedisModuleCommandArg policy_name_args[] = {STR_ARG("name"), {0}};
static RedisModuleCommandArg policy_items_args[] = {STR_ARG("name"), ITEMS_ARG, {0}};
static RedisModuleCommandArg policy_lists[] = {
    {.name = "allow", .type = REDISMODULE_ARG_TYPE_PURE_TOKEN, .token = "ALLOW"},
    {.name = "deny", .type = REDISMODULE_ARG_TYPE_PURE_TOKEN, .token = "DENY"},
    {0}};
static RedisModuleCommandArg policy_unlist_args[] = {
    STR_ARG("name"),
    {.name = "list", .type = REDISMODULE_ARG_TYPE_ONEOF, .subargs = policy_lists},
    ITEMS_ARG,
    {0}};

typedef struct command_doc {
    const char *name;
    const char *summary;
    const char *complexity;
    int arity;
    RedisModuleCommandKeySpec *keys;
    RedisModuleCommandArg *args;
} command_doc;

static const command_doc docs[] = {
    {"CL.THROTTLE",
     "GCRA rate limit, drop-in for redis-cell: answers limited, limit, "
     "remaining, retry_after and reset_after in seconds",
     "O(1)", -5, updates_key1, throttle_args},
    {"FG.GCRA", "GCRA rate limit: count units per period_ms, at most capacity at once", "O(1)", -5,
     updates_key1, gcra_args},
    {"FG.TOKEN", "Token bucket: capacity tokens refilled continuously at refill_per_sec", "O(1)",
     -4, updates_key1, token_args},
    {"FG.LEAKY", "Leaky bucket (funnel): capacity units leaking at leak_per_sec", "O(1)", -4,
     updates_key1, leaky_args},
    {"FG.FIXED", "Fixed window counter: limit units per clock-aligned window", "O(1)", -4,
     updates_key1, window_args},
    {"FG.SLIDING",
     "Sliding window counter: limit units per sliding window, estimated from "
     "two windows",
     "O(1)", -4, updates_key1, window_args},
    {"FG.SLIDELOG", "Sliding window log: exactly limit units per sliding window",
     "O(1) amortized, O(N) in the entries that leave the window", -4, updates_key1, window_args},
    {"FG.PEEK", "Answers what a rate-limit command would answer, without writing",
     "O(1); O(N) for SLIDELOG", -5, reads_key2, peek_args},
    {"FG.REFUND", "Gives back units taken earlier and not used (a client's lease)", "O(1)", -5,
     updates_key2, refund_args},
    {"FG.RESET", "Deletes a rate-limit key", "O(1)", 2, deletes_key1, key_only_args},
    {"FG.INSPECT", "Shows the stored state of a rate-limit key", "O(1); O(N) for a slidelog", 2,
     reads_key1, key_only_args},
    {"FG.SETSTATE", "Sets a rate-limit state with absolute times (replication and AOF)",
     "O(N) in the fields", -3, overwrites_key1, setstate_args},
    {"FG.LOGAPPEND", "Applies one admitted request to a sliding log (replication)",
     "O(1) amortized", -5, updates_key1, logappend_args},
    {"GCRA",
     "GCRA rate limit as Redis's held-back GCRA: tokens_per_period per period seconds, bursts of "
     "max_burst + 1",
     "O(1)", -5, updates_key1, gcra_compat_args},
    {"FG.LOCK", "Takes a lock (exclusive or shared) with a lease; may wait in FIFO order",
     "O(N) in the holders", -4, updates_key1, lock_args},
    {"FG.UNLOCK", "Releases one hold of a lock; the next waiters get it at once",
     "O(N) in the holders and the waiters granted", 3, updates_key1, key_owner_args},
    {"FG.ACQUIRE", "Takes permits of a semaphore with a lease; may wait in FIFO order",
     "O(N) in the holders", -6, updates_key1, acquire_args},
    {"FG.RELEASE", "Gives back permits of a semaphore; the next waiters get them at once",
     "O(N) in the holders and the waiters granted", -3, updates_key1, release_args},
    {"FG.MLOCK", "Takes exclusive locks on several keys of one slot, all or nothing",
     "O(K) in the keys", -5, updates_numkeys, mlock_args},
    {"FG.MUNLOCK", "Releases locks taken by FG.MLOCK", "O(K) in the keys", -4, updates_numkeys,
     munlock_args},
    {"FG.EXTEND", "Sets the remaining lease of an owner's hold", "O(N) in the holders", 4,
     updates_key1, extend_args},
    {"FG.FORCEUNLOCK", "Removes every holder of a lock or semaphore (administrators)", "O(N)", 2,
     updates_key1, key_only_args},
    {"FG.LOCKINFO", "Shows the holders and the waiters of a lock or semaphore", "O(N)", 2,
     reads_key1, key_only_args},
    {"FG.FENCE", "Records a fencing token for a resource, refusing stale ones", "O(1)", 3,
     updates_key1, fence_args},
    {"FG.FSET", "Stores a value under a fencing token, refusing stale tokens", "O(1)", 4,
     updates_key1, fset_args},
    {"FG.FGET", "Reads a fenced value; with a token, records it first", "O(1)", -2, updates_key1,
     fget_args},
    {"FG.HOLD", "Puts one holder of a lock or semaphore (replication and AOF)",
     "O(N) in the holders", 9, updates_key1, hold_args},
    {"FG.UNHOLD", "Removes one holder of a lock or semaphore (replication)", "O(N) in the holders",
     3, updates_key1, key_owner_args},
    {"BF.RESERVE", "Creates an empty Bloom filter for capacity items at error_rate", "O(1)", -4,
     inserts_key1, bf_reserve_args},
    {"BF.ADD", "Adds an item to a Bloom filter, creating the filter if needed", "O(1)", 3,
     adds_key1, bf_item_args},
    {"BF.MADD", "Adds items to a Bloom filter, creating the filter if needed",
     "O(N) in the items", -3, adds_key1, bf_items_args},
    {"BF.INSERT", "Adds items to a Bloom filter, creating it with the given options if needed",
     "O(N) in the items", -4, adds_key1, bf_insert_args},
    {"BF.EXISTS", "Whether an item may have been added to a Bloom filter", "O(1)", 3, reads_key1,
     bf_item_args},
    {"BF.MEXISTS", "Whether each item may have been added to a Bloom filter", "O(N) in the items",
     -3, reads_key1, bf_items_args},
    {"BF.INFO", "Shows a Bloom filter's capacity, size, levels, items and expansion", "O(1)", -2,
     reads_key1, bf_info_args},
    {"BF.CARD", "Estimates the number of distinct items added to a Bloom filter", "O(1)", 2,
     reads_key1, key_only_args},
    {"BF.DEBUG", "Shows a Bloom filter's items, then each level's size, probes, capacity, "
                 "items and rate",
     "O(L) in the levels", 2, reads_key1, key_only_args},
    {"BF.SCANDUMP", "Dumps a Bloom filter in chunks, for BF.LOADCHUNK",
     "O(N) in the chunk's bytes", 3, reads_key1, bf_scandump_args},
    {"BF.LOADCHUNK", "Restores a Bloom filter from the chunks of BF.SCANDUMP",
     "O(N) in the chunk's bytes", 4, loads_key1, bf_loadchunk_args},
    {"FG.UVCREATE", "Creates a counter of distinct items over time windows", "O(1)", -2,
     inserts_key1, uv_create_args},
    {"FG.UVADD", "Adds items to a unique counter at the server's time", "O(N) in the items", -3,
     adds_key1, uv_add_args},
    {"FG.UVADDAT", "Adds items to a unique counter at a given time", "O(N) in the items", -4,
     adds_key1, uv_addat_args},
    {"FG.UVCOUNT", "Estimates the distinct items of unique counters in a time window",
     "O(N) in the keys", -5, uv_reads_keys, uv_window_args},
    {"FG.UVEXPORT", "Exports unique counters' time window as a HyperLogLog string",
     "O(N) in the keys", -5, uv_reads_keys, uv_window_args},
    {"FG.UVSTORE", "Stores unique counters' time window as a HyperLogLog string",
     "O(N) in the keys", -6, uv_store_keys, uv_store_args},
    {"FG.UVINFO", "Shows a unique counter's parameters and memory", "O(1)", 2, reads_key1,
     key_only_args},
    {"FG.UVLOAD", "Restores a unique counter from its serialized form (AOF rewrite)",
     "O(N) in the payload", 3, inserts_key1, uv_load_args},
    {"FG.CHECK", "Checks a request against a named policy: its limits together, penalty, lists; "
                 "may wait in FIFO order",
     "O(L) in the policy's limits", -3, updates_key2, check_args},
    {"FG.PLSTATE", "Sets the policy state of a key with absolute times (replication and AOF)",
     "O(L) in the state's limits", -3, overwrites_key1, plstate_args},
    {"FG.POLICY", "Manages the named policies of FG.CHECK", "Depends on the subcommand", 0, NULL,
     NULL},
    {"FG.POLICY|SET", "Creates or replaces a policy", "O(R) in the rules", -4, NULL,
     policy_set_args},
    {"FG.POLICY|DEL", "Deletes a policy and its lists", "O(N) in the lists' items", 3, NULL,
     policy_name_args},
    {"FG.POLICY|GET", "Shows a policy's rules, lists and counters", "O(R) in the rules", 3, NULL,
     policy_name_args},
    {"FG.POLICY|LIST", "Lists the names of the policies, sorted", "O(N) in the policies", 2, NULL,
     NULL},
    {"FG.POLICY|ALLOW", "Adds items to a policy's allow list", "O(N) in the items", -4, NULL,
     policy_items_args},
    {"FG.POLICY|DENY", "Adds items to a policy's deny list", "O(N) in the items", -4, NULL,
     policy_items_args},
    {"FG.POLICY|UNLIST", "Removes items from a policy's exact allow or deny list",
     "O(N) in the items", -5, NULL, policy_unlist_args},
    {"FG.POLICY|HELP", "Shows the subcommands of FG.POLICY and their arguments", "O(1)", 2, NULL,
     NULL},
};

int register_command_docs(RedisModuleCtx *ctx) {
    for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++) {
        RedisModuleCommand *cmd = RedisModule_GetCommand(ctx, docs[i].name);
        if (!cmd && family_command_left_out(docs[i].name)) continue;
        RedisModuleCommandInfo info = {
            .version = &info_version,
            .summary = docs[i].summary,
            .complexity = docs[i].complexity,
            .since = "0.1.0",
            .arity = docs[i].arity,
            .key_specs = docs[i].keys,
            .args = docs[i].args,
        };
        if (RedisModule_SetCommandInfo(cmd, &info) != REDISMODULE_OK) return REDISMODULE_ERR;
    }
    return REDISMODULE_OK;
}
