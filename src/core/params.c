/*
 * params.c - the ranges and conversions of the commands' numbers.
 *
 * Windows are whole microseconds, emission intervals whole nanoseconds (the
 * nearest), and every product is bounded before it is converted, so no
 * double ever reaches an integer it does not fit.
 */
#include "params.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>

#include "bloom.h"
#include "messages.h"

static bool refuse(char *msg, size_t msglen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static bool refuse(char *msg, size_t msglen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (msglen > 0) vsnprintf(msg, msglen, fmt, ap);
    va_end(ap);
    return false;
}

bool fg_param_integer(int64_t v, const char *name, int64_t min, int64_t max, char *msg,
                      size_t msglen) {
    if (v >= min && v <= max) return true;
    return refuse(msg, msglen, "ERR %s must be between %lld and %lld", name, (long long)min,
                  (long long)max);
}

bool fg_param_number(double v, const char *name, double max, char *msg, size_t msglen) {
    if (!isfinite(v)) return refuse(msg, msglen, FG_ERR_NOT_A_NUMBER, name);
    if (v > 0 && v <= max) return true;
    return refuse(msg, msglen, "ERR %s must be greater than 0 and at most %g", name, max);
}

bool fg_param_duration_us(double ms, const char *name, int64_t *us, char *msg, size_t msglen) {
    if (!fg_param_number(ms, name, FG_MAX_DURATION_MS, msg, msglen)) return false;
    double rounded = round(ms * 1000.0);
    if (rounded < 1)
        return refuse(msg, msglen, "ERR %s must be at least 0.001 (one microsecond)", name);
    *us = (int64_t)rounded;
    return true;
}

bool fg_param_window(int64_t limit, int64_t max_limit, double window_ms, int64_t *window_us,
                     char *msg, size_t msglen) {
    return fg_param_integer(limit, "limit", 1, max_limit, msg, msglen) &&
           fg_param_duration_us(window_ms, "window_ms", window_us, msg, msglen);
}

bool fg_param_bucket(int64_t capacity, double rate_per_sec, const char *rate_name,
                     fg_gcra_params *p, char *msg, size_t msglen) {
    if (!fg_param_integer(capacity, "capacity", 1, INT64_MAX, msg, msglen) ||
        !fg_param_number(rate_per_sec, rate_name, FG_MAX_RATE_PER_SEC, msg, msglen))
        return false;
    double ns = (double)FG_NS_PER_SEC / rate_per_sec;
    if (ns > (double)INT64_MAX / 2) return refuse(msg, msglen, "ERR %s is too slow", rate_name);
    p->capacity = capacity;
    p->emission_ns = ns < 1 ? 1 : (int64_t)(ns + 0.5);
    return true;
}

bool fg_param_gcra(int64_t capacity, double count, double period_ms, fg_gcra_params *p,
                   char *msg, size_t msglen) {
    if (!fg_param_integer(capacity, "capacity", 1, INT64_MAX, msg, msglen) ||
        !fg_param_number(count, "count", FG_MAX_GCRA_COUNT, msg, msglen) ||
        !fg_param_number(period_ms, "period_ms", FG_MAX_DURATION_MS, msg, msglen))
        return false;
    double ns = period_ms * (double)FG_NS_PER_MS / count;
    if (ns > (double)INT64_MAX / 2)
        return refuse(msg, msglen, "ERR count is too small for period_ms: the emission "
                                   "interval overflows 64-bit nanoseconds");
    if (ns < 0.5)
        return refuse(msg, msglen, "ERR rate too high: count per period_ms must leave at least "
                                   "one nanosecond per unit");
    p->capacity = capacity;
    p->emission_ns = (int64_t)(ns + 0.5);
    return true;
}

bool fg_param_bloom_error(double error, char *msg, size_t msglen) {
    if (isnan(error)) return refuse(msg, msglen, FG_ERR_BF_BAD_ERROR_RATE);
    if (!(error > 0 && error < 1)) return refuse(msg, msglen, FG_ERR_BF_ERROR_RANGE);
    if (error < FG_BLOOM_MIN_ERROR) return refuse(msg, msglen, FG_ERR_BF_ERROR_MIN);
    return true;
}

bool fg_param_bloom_capacity(int64_t capacity, char *msg, size_t msglen) {
    if (capacity < 1) return refuse(msg, msglen, FG_ERR_BF_CAPACITY_MIN);
    if (capacity > FG_BLOOM_MAX_CAPACITY)
        return refuse(msg, msglen, FG_ERR_BF_CAPACITY_MAX, (long long)FG_BLOOM_MAX_CAPACITY);
    return true;
}

bool fg_param_list_error(double error, char *msg, size_t msglen) {
    if (!isfinite(error)) return refuse(msg, msglen, FG_ERR_NOT_A_NUMBER, "error");
    if (!(error >= FG_BLOOM_MIN_ERROR && error < 1))
        return refuse(msg, msglen, FG_ERR_POLICY_LIST_ERROR);
    return true;
}
