/*
 * clock.h - the server's clock as the commands read it, once per command.
 */
#ifndef FG_CLOCK_H
#define FG_CLOCK_H

#include <stdint.h>
#include <time.h>

#include "redismodule_api.h"

/* Wall-clock microseconds since the epoch: the cached command time where the
 * server offers it (Redis >= 7.2), else the clock itself. Wall time, because
 * every time a command writes is replicated as an absolute instant. */
static inline int64_t server_clock_us(void) {
    if (RedisModule_CachedMicroseconds) return (int64_t)RedisModule_CachedMicroseconds();
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

#endif
