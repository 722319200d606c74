/*
 * write_pause.h - work that must wait while the server's writes are paused.
 *
 * CLIENT PAUSE WRITE, FAILOVER and CLUSTER FAILOVER freeze the dataset so a
 * replica can catch up: the server then refuses (and on 7.0 asserts against)
 * any write or replication. Client commands are held back by the server
 * itself; what the module runs on its own -- the timers that end leases,
 * grant waiters and settle timeouts -- must hold back too. A timer that finds
 * writes paused defers its work here; one poll timer, shared by every
 * deferred item, resumes them all in the order they were deferred as soon
 * as the pause ends. The server tells a module of a pause only when asked
 * (RedisModule_AvoidReplicaTraffic, since 6.0), hence the poll.
 */
#ifndef FG_WRITE_PAUSE_H
#define FG_WRITE_PAUSE_H

#include <stdbool.h>

#include "redismodule_api.h"

typedef struct deferred_work deferred_work;
typedef void (*deferred_resume_fn)(RedisModuleCtx *ctx, deferred_work *work);

/* Embedded in the owner's struct; zeroed means "not deferred". */
struct deferred_work {
    deferred_work *prev, *next;
    deferred_resume_fn resume;
    bool deferred;
};

/* Whether writes (and so replication) are paused now. */
bool writes_paused(void);

/* Runs resume(ctx, work) once writes are no longer paused. Deferring work
 * that is already deferred changes nothing. */
void defer_while_paused(RedisModuleCtx *ctx, deferred_work *work, deferred_resume_fn resume);

/* Forgets deferred work (its owner is going away); a no-op otherwise. */
void cancel_deferred(deferred_work *work);

void write_pause_info(RedisModuleInfoCtx *ctx);

#endif
