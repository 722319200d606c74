/*
 * key_queues.c - queues of blocked clients by key, with a timer each
 * (key_queues.h).
 */
#include "key_queues.h"

#include <string.h>

#include "../core/decision.h"
#include "clock.h"
#include "key_dict.h"

void key_queues_init(key_queues *qs, const key_queue_family *family) {
    qs->by_key = RedisModule_CreateDict(NULL);
    qs->by_client = RedisModule_CreateDict(NULL);
    qs->family = family;
}

void *key_queues_waiter(const key_queues *qs, RedisModuleBlockedClient *bc) {
    return RedisModule_DictGetC(qs->by_client, &bc, sizeof(bc), NULL);
}

void key_queues_track(key_queues *qs, RedisModuleBlockedClient *bc, void *waiter) {
    RedisModule_DictSetC(qs->by_client, &bc, sizeof(bc), waiter);
}

void key_queues_untrack(key_queues *qs, RedisModuleBlockedClient *bc) {
    RedisModule_DictDelC(qs->by_client, &bc, sizeof(bc), NULL);
}

key_queue *key_queue_find(const key_queues *qs, int dbid, RedisModuleString *key) {
    return qs->by_key ? key_dict_get(qs->by_key, dbid, key) : NULL;
}

key_queue *key_queue_get(key_queues *qs, int dbid, RedisModuleString *key) {
    key_queue *q = key_queue_find(qs, dbid, key);
    if (q) return q;
    q = RedisModule_Alloc(sizeof(*q));
    memset(q, 0, sizeof(*q));
    q->dbid = dbid;
    q->owner = qs;
    size_t klen;
    const char *k = RedisModule_StringPtrLen(key, &klen);
    q->key = RedisModule_CreateString(NULL, k, klen);
    key_dict_set(qs->by_key, dbid, key, q);
    return q;
}

static void disarm(RedisModuleCtx *ctx, key_queue *q) {
    if (q->timer_armed) RedisModule_StopTimer(ctx, q->timer, NULL);
    q->timer_armed = false;
}

void key_queue_drop_if_empty(RedisModuleCtx *ctx, key_queue *q) {
    if (fg_wait_busy(&q->waiters)) return;
    disarm(ctx, q);
    cancel_deferred(&q->paused);
    key_dict_del(q->owner->by_key, q->dbid, q->key);
    RedisModule_FreeString(NULL, q->key);
    RedisModule_Free(q);
}

static void timer_fired(RedisModuleCtx *ctx, void *data);

void key_queue_arm(RedisModuleCtx *ctx, key_queue *q, int64_t at_us, int64_t now_us) {
    if (q->timer_armed && q->timer_at_us <= at_us) return;
    disarm(ctx, q);
    int64_t wait_us = at_us > now_us ? at_us - now_us : 0;
    q->timer = RedisModule_CreateTimer(ctx, (mstime_t)fg_us_to_ms_ceil(wait_us), timer_fired, q);
    q->timer_armed = true;
    q->timer_at_us = at_us;
}

void key_queues_arm_all(RedisModuleCtx *ctx, key_queues *qs) {
    if (!qs->by_key || RedisModule_DictSize(qs->by_key) == 0) return;
    RedisModuleDictIter *it = RedisModule_DictIteratorStartC(qs->by_key, "^", NULL, 0);
    key_queue *q;
    while (RedisModule_DictNextC(it, NULL, (void **)&q))
        key_queue_arm(ctx, q, 0, 0);
    RedisModule_DictIteratorStop(it);
}

void key_queue_after_leave(RedisModuleCtx *ctx, key_queue *q) {
    if (fg_wait_busy(&q->waiters))
        key_queue_arm(ctx, q, 0, 0);
    else
        key_queue_drop_if_empty(ctx, q);
}

/* Whether this node still serves the key's slot. A timer runs outside any
 * command, so nothing routed it: after MIGRATE (or a resharding) took the
 * key away, deciding here would grant twice. RedisModule_Call checks the
 * slot and fails when another node serves it. */
static bool key_served_here(RedisModuleCtx *ctx, RedisModuleString *keyname) {
    if (!(RedisModule_GetContextFlags(ctx) & REDISMODULE_CTX_FLAGS_CLUSTER)) return true;
    RedisModuleCallReply *reply = RedisModule_Call(ctx, "EXISTS", "s", keyname);
    if (!reply) return false;
    RedisModule_FreeCallReply(reply);
    return true;
}

const char *key_queue_cannot_serve(RedisModuleCtx *ctx, key_queue *q) {
    if (!(RedisModule_GetContextFlags(ctx) & REDISMODULE_CTX_FLAGS_MASTER))
        return "UNBLOCKED the server is no longer a master";
    RedisModule_SelectDb(ctx, q->dbid);
    if (!key_served_here(ctx, q->key))
        return "TRYAGAIN the key moved to another node: ask the node that serves it";
    return NULL;
}

/* The pause is over: the queue's timer fires again at once. */
static void resume_after_pause(RedisModuleCtx *ctx, deferred_work *work) {
    key_queue *q = fg_wait_container(work, key_queue, paused);
    key_queue_arm(ctx, q, 0, 0);
}

/* Serving writes, so it waits out a pause of writes; failing the waiters of
 * a node that can no longer serve them writes nothing and happens at once. */
static void timer_fired(RedisModuleCtx *ctx, void *data) {
    key_queue *q = data;
    q->timer_armed = false;
    const char *error = key_queue_cannot_serve(ctx, q);
    if (error) {
        q->owner->family->fail_all(ctx, q, error);
        key_queue_drop_if_empty(ctx, q);
        return;
    }
    if (writes_paused()) {
        defer_while_paused(ctx, &q->paused, resume_after_pause);
        return;
    }
    q->owner->family->serve(ctx, q, wall_clock_us());
}

bool client_can_block(RedisModuleCtx *ctx) {
    int flags = RedisModule_GetContextFlags(ctx);
    if (flags & (REDISMODULE_CTX_FLAGS_MULTI | REDISMODULE_CTX_FLAGS_LUA |
                 REDISMODULE_CTX_FLAGS_DENY_BLOCKING | REDISMODULE_CTX_FLAGS_REPLICATED))
        return false;
    return (flags & REDISMODULE_CTX_FLAGS_MASTER) != 0;
}
