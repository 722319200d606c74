/*
 * floodgate.c - the module's entry point: API handshake, data types,
 * configs, commands, their metadata, and the INFO sections.
 *
 * The data types come first and always register, so that RDB files load
 * whatever happens to the commands. The configs come next, since one of
 * them decides which commands to create. The commands are created family
 * by family (families.c): a family whose names another module or the
 * server already has is left out, and the module loads without it.
 */
#include "bloom_types.h"
#include "clock.h"
#include "command_acl.h"
#include "command_docs.h"
#include "effects.h"
#include "eviction.h"
#include "families.h"
#include "limiter_types.h"
#include "lock_types.h"
#include "memory_limits.h"
#include "policy_types.h"
#include "redismodule_api.h"
#include "t_bloom.h"
#include "t_gcra.h"
#include "t_lock.h"
#include "t_policy.h"
#include "t_ratelimit.h"
#include "t_uv.h"
#include "uv_types.h"
#include "write_pause.h"

#define FLOODGATE_MODULE_VERSION 100 /* 0.1.0 */

_Static_assert(sizeof(void *) == 8, "the bucket state lives in a 64-bit value slot");

/* One row per family; the INFO field of each is its name. */
static command_family families[] = {
    {.name = "ratelimit",
     .commands = ratelimit_commands,
     .commands_created = ratelimit_commands_created},
    {.name = "locks", .commands = lock_commands, .commands_created = lock_commands_created},
    {.name = "bloom", .commands = bloom_commands, .mode = bloom_commands_mode},
    {.name = "uv", .commands = uv_commands},
    {.name = "policies", .commands = policy_commands, .commands_created = policy_commands_created},
    {.name = "gcra",
     .commands = gcra_commands,
     .commands_created = gcra_commands_created,
     .mode = gcra_commands_mode},
    {0},
};

static void info_callback(RedisModuleInfoCtx *ctx, int for_crash_report) {
    (void)for_crash_report;
    families_info(ctx);
    ratelimit_info(ctx);
    lock_info(ctx);
    eviction_info(ctx); /* fields of the locks section */
    bloom_info(ctx);
    uv_info(ctx);
    policy_info(ctx);
    write_pause_info(ctx);
}

/* FLUSHDB and SWAPDB replace keys under the lock and policy waiters. A
 * module has one callback per server event (a second subscription
 * replaces the first), so the families share this one. */
static void on_keys_replaced(RedisModuleCtx *ctx, RedisModuleEvent eid, uint64_t subevent,
                             void *data) {
    (void)data;
    if (eid.id == REDISMODULE_EVENT_FLUSHDB && subevent != REDISMODULE_SUBEVENT_FLUSHDB_END) return;
    lock_keys_replaced(ctx);
    policy_keys_replaced(ctx);
}

/* DEL, expiry, eviction and other generic events may free a key with
 * waiters. One subscription serves both families: each costs the server a
 * module context per event. */
static int on_key_event(RedisModuleCtx *ctx, int type, const char *event, RedisModuleString *key) {
    (void)type, (void)event;
    lock_key_event(ctx, key);
    policy_key_event(ctx, key);
    return REDISMODULE_OK;
}

/* CONFIG SET of a server config (one subscription per event, as above). */
static void on_config_change(RedisModuleCtx *ctx, RedisModuleEvent eid, uint64_t subevent,
                             void *data) {
    (void)eid;
    if (subevent == REDISMODULE_SUBEVENT_CONFIG_CHANGE) eviction_config_changed(ctx, data);
}

static int subscribe_key_events(RedisModuleCtx *ctx) {
    RedisModuleEvent flush = {REDISMODULE_EVENT_FLUSHDB, 1}, swap = {REDISMODULE_EVENT_SWAPDB, 1};
    if (RedisModule_SubscribeToServerEvent(ctx, flush, on_keys_replaced) != REDISMODULE_OK ||
        RedisModule_SubscribeToServerEvent(ctx, swap, on_keys_replaced) != REDISMODULE_OK ||
        RedisModule_SubscribeToKeyspaceEvents(
            ctx, REDISMODULE_NOTIFY_GENERIC | REDISMODULE_NOTIFY_EXPIRED | REDISMODULE_NOTIFY_EVICTED,
            on_key_event) != REDISMODULE_OK)
        return REDISMODULE_ERR;
    return REDISMODULE_OK;
}

__attribute__((visibility("default"))) int RedisModule_OnLoad(RedisModuleCtx *ctx,
                                                              RedisModuleString **argv, int argc) {
    (void)argv, (void)argc;
    if (fg_api_init(ctx, "floodgate", FLOODGATE_MODULE_VERSION) != REDISMODULE_OK)
        return REDISMODULE_ERR;
    /* Short RDB reads become errors we handle, not server panics; and keys
     * are signalled as modified only when a command really changes them. */
    RedisModule_SetModuleOptions(ctx, REDISMODULE_OPTIONS_HANDLE_IO_ERRORS |
                                          REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED);
    if (limiter_types_create(ctx) != REDISMODULE_OK || lock_types_create(ctx) != REDISMODULE_OK ||
        bloom_types_create(ctx) != REDISMODULE_OK || uv_types_create(ctx) != REDISMODULE_OK ||
        policy_types_create(ctx) != REDISMODULE_OK) {
        RedisModule_Log(ctx, "warning", "floodgate: could not create the data types");
        return REDISMODULE_ERR;
    }
    /* Configs (floodgate.<name>) take their values from the command line or
     * redis.conf at LoadConfigs, before the commands: floodgate.bf-commands
     * decides some of them. */
    if (explicit_time_register_config(ctx) != REDISMODULE_OK ||
        memory_limits_register_configs(ctx) != REDISMODULE_OK ||
        effects_register_config(ctx) != REDISMODULE_OK ||
        bloom_register_config(ctx) != REDISMODULE_OK ||
        RedisModule_LoadConfigs(ctx) != REDISMODULE_OK)
        return REDISMODULE_ERR;
    families_register(ctx, families);
    if (register_command_docs(ctx) != REDISMODULE_OK ||
        register_command_acl(ctx) != REDISMODULE_OK) {
        RedisModule_Log(ctx, "warning", "floodgate: could not register the commands' metadata");
        return REDISMODULE_ERR;
    }
    /* The server's own configs are watched from here. */
    RedisModuleEvent config = {REDISMODULE_EVENT_CONFIG, 1};
    if (RedisModule_RegisterInfoFunc(ctx, info_callback) != REDISMODULE_OK ||
        subscribe_key_events(ctx) != REDISMODULE_OK ||
        RedisModule_SubscribeToServerEvent(ctx, config, on_config_change) != REDISMODULE_OK)
        return REDISMODULE_ERR;
    eviction_check(ctx);
    return REDISMODULE_OK;
}
