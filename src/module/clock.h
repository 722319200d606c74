/*
 * clock.h - the server's clock: as commands read it, and as timers must.
 */
#ifndef FG_CLOCK_H
#define FG_CLOCK_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "redismodule_api.h"

/* Wall-clock microseconds since the epoch, read now. Wall time, because
 * every time a command writes is replicated as an absolute instant. Lease
 * ends and waiter timeouts read this one: outside a command, a cached time
 * is only as fresh as the server chose to make it (7.2+ refreshes it for
 * module timers; nothing promises so), and a stale one would make a timer
 * wait again for a lease that has ended. */
static inline int64_t wall_clock_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* A command's time: the server's cached time where it offers one (Redis
 * 7.2+, Valkey), which stands still through a script, MULTI/EXEC or a
 * command called from a module, as the server's own commands see it; else
 * the clock itself (7.0). docs/time.md says what this means to callers. */
static inline int64_t server_clock_us(void) {
    if (RedisModule_CachedMicroseconds) return (int64_t)RedisModule_CachedMicroseconds();
    return wall_clock_us();
}

/* floodgate.explicit-time (clock.c): whether commands may take `AT unix_us`. */
bool explicit_time_allowed(void);
int explicit_time_register_config(RedisModuleCtx *ctx);

/* The refusal of AT while floodgate.explicit-time is off. */
#define ERR_AT_DISABLED "ERR AT is disabled: CONFIG SET floodgate.explicit-time yes allows it"

#endif
