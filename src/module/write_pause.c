/*
 * write_pause.c - the list of work deferred while writes are paused, and
 * the one timer that polls for the pause's end (write_pause.h).
 *
 * A 10 ms poll bounds how late deferred work runs after a pause, at a cost
 * of one timer callback per poll however much work waits: per-item timers
 * would wake the server once per queue.
 */
#include "write_pause.h"

#define PAUSE_POLL_MS 10

static deferred_work *head, *tail;
static RedisModuleTimerID poll_timer;
static bool poll_armed;
static long long stat_deferred, stat_waiting;

bool writes_paused(void) {
    return RedisModule_AvoidReplicaTraffic() != 0;
}

static void unlink_work(deferred_work *w) {
    if (w->prev)
        w->prev->next = w->next;
    else
        head = w->next;
    if (w->next)
        w->next->prev = w->prev;
    else
        tail = w->prev;
    w->prev = w->next = NULL;
    w->deferred = false;
    stat_waiting--;
}

static void poll_fired(RedisModuleCtx *ctx, void *data);

static void arm_poll(RedisModuleCtx *ctx) {
    if (poll_armed) return;
    poll_timer = RedisModule_CreateTimer(ctx, PAUSE_POLL_MS, poll_fired, NULL);
    poll_armed = true;
}

/* Resumes the oldest first. A resume may cancel other deferred work (a
 * grant can empty another queue), so the list is re-read after each. */
static void poll_fired(RedisModuleCtx *ctx, void *data) {
    (void)data;
    poll_armed = false;
    while (head) {
        if (writes_paused()) {
            arm_poll(ctx);
            return;
        }
        deferred_work *w = head;
        unlink_work(w);
        w->resume(ctx, w);
    }
}

void defer_while_paused(RedisModuleCtx *ctx, deferred_work *w, deferred_resume_fn resume) {
    if (w->deferred) return;
    w->resume = resume;
    w->deferred = true;
    w->next = NULL;
    w->prev = tail;
    if (tail)
        tail->next = w;
    else
        head = w;
    tail = w;
    stat_deferred++;
    stat_waiting++;
    arm_poll(ctx);
}

void cancel_deferred(deferred_work *w) {
    if (w->deferred) unlink_work(w);
}

void write_pause_info(RedisModuleInfoCtx *ctx) {
    if (RedisModule_InfoAddSection(ctx, "pauses") != REDISMODULE_OK) return;
    RedisModule_InfoAddFieldLongLong(ctx, "writes_paused", writes_paused());
    RedisModule_InfoAddFieldLongLong(ctx, "deferred_during_pauses", stat_deferred);
    RedisModule_InfoAddFieldLongLong(ctx, "deferred_waiting", stat_waiting);
}
