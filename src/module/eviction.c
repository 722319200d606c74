/*
 * eviction.c - warnings about eviction policies that void locks and
 * fencing.
 *
 * No module API pins a key, so under memory pressure the server may evict
 * a held lock (granting it to the next waiter while its holder still
 * believes it holds it), a fenced value (a stale token then writes again)
 * or a rate-limit state (a drained limit starts full). allkeys-* policies
 * may evict any of them; volatile-* policies evict keys with a TTL, which
 * every lock has (its latest lease end) and every limiter state too, and
 * volatile-ttl takes them before any key without a TTL. Only
 * noeviction keeps them. The module cannot refuse a policy, so it says so:
 * a warning in the log at load and at every CONFIG SET of an evicting
 * maxmemory-policy, and INFO fields an operator's checks can alert on
 * (docs/security.md).
 */
#include "eviction.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static char policy[32] = "unknown";

static bool policy_evicts(void) {
    return strcmp(policy, "noeviction") != 0;
}

static void read_policy(RedisModuleCtx *ctx) {
    RedisModuleServerInfoData *info = RedisModule_GetServerInfo(ctx, "memory");
    if (!info) return;
    const char *value = RedisModule_ServerInfoGetFieldC(info, "maxmemory_policy");
    if (value) snprintf(policy, sizeof(policy), "%s", value);
    RedisModule_FreeServerInfo(ctx, info);
}

/* What the current policy may take away, for the warning. */
static const char *evicted_by_policy(void) {
    if (strncmp(policy, "allkeys-", 8) == 0)
        return "held locks (a waiter is then granted a lock its holder still believes it "
               "holds), fenced values (a stale token then writes again) and rate-limit states";
    if (strcmp(policy, "volatile-ttl") == 0)
        return "held locks and rate-limit states before any key without a TTL, the nearest "
               "lease end first (a waiter is then granted a lock its holder still believes it "
               "holds)";
    return "held locks (a waiter is then granted a lock its holder still believes it holds) "
           "and rate-limit states";
}

void eviction_check(RedisModuleCtx *ctx) {
    read_policy(ctx);
    if (policy_evicts())
        RedisModule_Log(ctx, "warning",
                        "floodgate: maxmemory-policy %s can evict %s; use noeviction where "
                        "floodgate keeps locks (docs/security.md)",
                        policy, evicted_by_policy());
}

void eviction_config_changed(RedisModuleCtx *ctx, void *data) {
    const RedisModuleConfigChangeV1 *change = data;
    for (uint32_t i = 0; i < change->num_changes; i++)
        if (strcmp(change->config_names[i], "maxmemory-policy") == 0) {
            eviction_check(ctx);
            return;
        }
}

void eviction_info(RedisModuleInfoCtx *ctx) {
    RedisModule_InfoAddFieldCString(ctx, "eviction_policy", policy);
    RedisModule_InfoAddFieldLongLong(ctx, "eviction_unsafe", policy_evicts());
}
