/*
 * monotonic.h - the client's clocks (internal): the decisions' clock (the
 * caller's opts.clock_us, else CLOCK_REALTIME), and microseconds on
 * CLOCK_MONOTONIC, for timeouts, deadlines and renewal schedules, which
 * must not move when the wall clock is set; and sleeping on a condition
 * variable until such an instant.
 */
#ifndef FG_MONOTONIC_H
#define FG_MONOTONIC_H

#include <pthread.h>
#include <stdint.h>

#define FG_MONOTONIC_NEVER INT64_MAX /* no deadline */

int64_t fg_monotonic_us(void);

/* The decisions' time in µs since the epoch: clock_us(arg), or
 * CLOCK_REALTIME when clock_us is NULL. */
int64_t fg_clock_us(int64_t (*clock_us)(void *arg), void *arg);

/* A condition variable whose timed waits run on the monotonic clock. */
void fg_cond_init_monotonic(pthread_cond_t *c);

/* Waits on c (mu held) until signalled or the monotonic instant `until`
 * (FG_MONOTONIC_NEVER: no limit). Wake-ups may be spurious: callers look
 * again. */
void fg_sleep_until(pthread_cond_t *c, pthread_mutex_t *mu, int64_t until);

#endif
