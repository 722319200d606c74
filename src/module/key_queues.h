/*
 * key_queues.h - the master's queues of blocked clients, one per key, each
 * with a timer: what the lock and policy families (t_lock.c, t_policy.c)
 * share about waiting in the server. The order of a queue and the rules of
 * serving it are the core's (core/wait_queue.h); a family decides for its
 * waiters and answers them.
 *
 * Queues are kept only in the master's memory, in a dict from db + key
 * name: a waiter is a connection, and connections survive neither a
 * restart nor a failover, so queues are not state to persist or replicate.
 * What may let a waiter through without a command on its key -- a lease
 * running out, DEL, expiry, eviction, a waiter ahead leaving -- arms the
 * queue's timer, at once or at the key's next change; no key is written
 * inside an event callback (Redis 7.0 forbids it): the timer does the
 * writing, on a master that still serves the key, and not while writes
 * are paused.
 */
#ifndef FG_KEY_QUEUES_H
#define FG_KEY_QUEUES_H

#include <stdbool.h>
#include <stdint.h>

#include "../core/wait_queue.h"
#include "redismodule_api.h"
#include "write_pause.h"

typedef struct key_queue key_queue;

/* What a family does when a queue's timer fires. */
typedef struct key_queue_family {
    /* Serves q (its database selected) at now_us. */
    void (*serve)(RedisModuleCtx *ctx, key_queue *q, int64_t now_us);
    /* This node can no longer decide for q's key (no longer a master, the
     * key's slot moved): every waiter of q is answered `error`. */
    void (*fail_all)(RedisModuleCtx *ctx, key_queue *q, const char *error);
} key_queue_family;

struct key_queue {
    fg_wait_queue waiters;
    int dbid;
    RedisModuleString *key;
    const struct key_queues *owner;
    RedisModuleTimerID timer;
    bool timer_armed;
    int64_t timer_at_us;  /* when the armed timer fires */
    deferred_work paused; /* its timer fired while writes were paused */
};

typedef struct key_queues {
    RedisModuleDict *by_key;    /* db + key name -> key_queue */
    RedisModuleDict *by_client; /* blocked client handle -> the family's waiter */
    const key_queue_family *family;
} key_queues;

void key_queues_init(key_queues *qs, const key_queue_family *family);

/* The key's queue, or NULL; and NULL before key_queues_init (the family's
 * commands were left out: nobody waits). */
key_queue *key_queue_find(const key_queues *qs, int dbid, RedisModuleString *key);

/* The key's queue, made empty when it has none. */
key_queue *key_queue_get(key_queues *qs, int dbid, RedisModuleString *key);

/* An empty queue goes, its timer with it. */
void key_queue_drop_if_empty(RedisModuleCtx *ctx, key_queue *q);

/* Makes q's timer fire at at_us (at once when at_us <= now_us); an armed
 * timer that fires sooner is kept. */
void key_queue_arm(RedisModuleCtx *ctx, key_queue *q, int64_t at_us, int64_t now_us);

/* Arms every queue to fire at once (a policy changed, keys were swapped);
 * nothing before key_queues_init. */
void key_queues_arm_all(RedisModuleCtx *ctx, key_queues *qs);

/* A waiter left q: the next one may go now, or the empty queue goes. */
void key_queue_after_leave(RedisModuleCtx *ctx, key_queue *q);

/* The family's waiter of a blocked client (NULL: none, e.g. answered
 * already); waiters are tracked from blocking until they are answered or
 * gone. */
void *key_queues_waiter(const key_queues *qs, RedisModuleBlockedClient *bc);
void key_queues_track(key_queues *qs, RedisModuleBlockedClient *bc, void *waiter);
void key_queues_untrack(key_queues *qs, RedisModuleBlockedClient *bc);

/* Why a timer may not decide for q's key here (NULL: it may); selects the
 * queue's database. */
const char *key_queue_cannot_serve(RedisModuleCtx *ctx, key_queue *q);

/* Whether this client may wait: never inside MULTI, a script or
 * RedisModule_Call, and only on a master. */
bool client_can_block(RedisModuleCtx *ctx);

#endif
