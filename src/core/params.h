/*
 * params.h - the numbers of the commands, checked and converted into core
 * parameters: one set of rules for the server and the library, so both
 * refuse the same inputs with the same words (messages.h) and round the
 * same way.
 *
 * Each function returns true, or false with an "ERR ..." message that names
 * the argument, written into msg (at most msglen bytes).
 */
#ifndef FG_PARAMS_H
#define FG_PARAMS_H

#include <stdbool.h>
#include <stddef.h>

#include "gcra.h"

#define FG_MAX_DURATION_MS 1e12
#define FG_MAX_RATE_PER_SEC 1e9
#define FG_MAX_GCRA_COUNT 1e18

/* An integer in [min, max]. */
bool fg_param_integer(int64_t v, const char *name, int64_t min, int64_t max, char *msg,
                      size_t msglen);

/* A finite number in (0, max]. */
bool fg_param_number(double v, const char *name, double max, char *msg, size_t msglen);

/* Milliseconds (fractions allowed) as whole microseconds, at least 1 us. */
bool fg_param_duration_us(double ms, const char *name, int64_t *us, char *msg, size_t msglen);

/* A window limit: `limit` in [1, max_limit], `window_ms` as microseconds. */
bool fg_param_window(int64_t limit, int64_t max_limit, double window_ms, int64_t *window_us,
                     char *msg, size_t msglen);

/* Token and leaky buckets: capacity, and a rate per second as nanoseconds
 * per unit (rounded to the nearest, at least 1). */
bool fg_param_bucket(int64_t capacity, double rate_per_sec, const char *rate_name,
                     fg_gcra_params *p, char *msg, size_t msglen);

/* GCRA: capacity, and count units per period_ms as nanoseconds per unit. */
bool fg_param_gcra(int64_t capacity, double count, double period_ms, fg_gcra_params *p,
                   char *msg, size_t msglen);

/* BF.RESERVE's error rate, then its capacity, each with RedisBloom's words
 * (messages.h); a NaN error rate is a bad one, as text that is no number.
 * The caller checks them in that order, each after reading it. */
bool fg_param_bloom_error(double error, char *msg, size_t msglen);
bool fg_param_bloom_capacity(int64_t capacity, char *msg, size_t msglen);

/* The error rate of a policy's Bloom list: a number in
 * [FG_BLOOM_MIN_ERROR, 1). */
bool fg_param_list_error(double error, char *msg, size_t msglen);

#endif
