/*
 * monotonic.c - the client's monotonic clock and timed sleeps
 * (monotonic.h).
 */
#include "monotonic.h"

#include <time.h>

int64_t fg_monotonic_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t fg_clock_us(int64_t (*clock_us)(void *arg), void *arg) {
    if (clock_us != NULL) return clock_us(arg);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void fg_cond_init_monotonic(pthread_cond_t *c) {
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(c, &attr);
    pthread_condattr_destroy(&attr);
}

void fg_sleep_until(pthread_cond_t *c, pthread_mutex_t *mu, int64_t until) {
    if (until == FG_MONOTONIC_NEVER) {
        pthread_cond_wait(c, mu);
        return;
    }
    struct timespec ts = {(time_t)(until / 1000000), (long)(until % 1000000) * 1000};
    pthread_cond_timedwait(c, mu, &ts);
}
