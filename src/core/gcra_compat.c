/*
 * gcra_compat.c - the GCRA command that Redis merged for 8.8 and held out of the
 * release, for the servers that do not have it.
 *
 * The command:
 *
 *   GCRA key max_burst tokens_per_period period [TOKENS count]
 *
 * It is the same virtual-scheduling meter as FG.GCRA and CL.THROTTLE
 * (gcra.c explains it): the state is one timestamp, the theoretical arrival
 * time (TAT), every admitted token pushes it one emission interval T
 * further, and a request is admitted while the TAT stays within
 * T * capacity of now. What this file adds is Redis's exact arithmetic, so
 * that a key written by either server answers the same on the other:
 *
 *   now       = the command's time in whole milliseconds, in microseconds
 *   capacity  = max_burst + 1
 *   T         = round(period * 1e6 / tokens_per_period) us, at least 1,
 *               computed in doubles exactly as Redis's GCRA does (x + 0.5, truncated)
 *   variance  = T * capacity;  increment = T * count
 *   new_tat   = max(now, tat) + increment       (tat = now without a key)
 *   diff      = now - (new_tat - variance)
 *
 *   diff < 0: limited. retry_after = ceil(-diff / 1e6) seconds, or -1 when
 *             increment > variance (the request can never fit); ttl = tat -
 *             now; nothing is written.
 *   else:     admitted. ttl = new_tat - now; the key becomes the string
 *             new_tat (decimal microseconds), expiring at new_tat / 1000 ms
 *             rounded up.
 *
 *   remaining   = (variance - ttl) / T when that is > -T, else 0 (C division)
 *   reset_after = ceil(ttl / 1e6) seconds, through a double
 *
 * Where this differs from FG.GCRA and CL.THROTTLE, on purpose (Redis's rules):
 *
 *   - Microseconds, not nanoseconds: T is rounded to the nearest microsecond,
 *     so rates above 1,000,000 per second all become one per microsecond,
 *     and rates that do not divide a second evenly drift by the rounding.
 *   - The time is whole milliseconds, but the key expires at the TAT
 *     rounded up, as Redis's last GCRA before it was held out of 8.8, sets
 *     it: rounded down, the key would be gone (or show a PTTL of 0) while
 *     its TAT is still ahead, as after one token at a sub-millisecond
 *     emission interval, telling whoever reads its TTL that the bucket is
 *     full when it is not.
 *   - Seconds in the reply, rounded up through doubles (beyond 2^53 us the
 *     double rounds first, as in Redis's GCRA). reset_after is computed from the
 *     TAT even when it lies in the past (a refused request whose count
 *     exceeds the capacity, with an old TAT stored without expiry): then it
 *     is negative, or 0, and remaining can exceed the capacity. FG.GCRA
 *     treats a TAT in the past as a full bucket.
 *   - There is no peek (count >= 1), and the state is a plain string that
 *     any client can read, write or corrupt: a value that is not a positive
 *     integer is refused with Redis's errors instead of being replaced.
 *
 * Overflow: T * count, T * capacity and max(now, tat) + increment are
 * checked, in that order, with Redis's two errors. Nothing else can overflow.
 * ttl is >= 0 except when a count above the capacity is refused over a TAT
 * in the past; there variance - ttl = variance + (now - tat) is below
 * increment + now, which the third check bounds.
 */
#include "gcra_compat.h"

#include <math.h>

#include "checked.h"
#include "decision.h"

#define US_PER_SEC 1e6

static const char err_negative[] = "ERR value is out of range, must be positive";
static const char err_count_range[] =
    "ERR value is out of range, value must between 1 and 9223372036854775807";
static const char err_period[] = "ERR period must be > 0 and < 1e12";
static const char err_invalid_key[] = "ERR Invalid GCRA key";
static const char err_negative_tat[] = "ERR Negative time is invalid value for GCRA";
static const char err_time[] = "ERR the time must not be negative"; /* floodgate's own */
static const char err_overflow_tokens[] =
    "ERR GCRA limiting uses microsecond accuracy. Combination of period, tokens_per_period "
    "and TOKENS would cause an overflow";
static const char err_overflow_burst[] =
    "ERR GCRA limiting uses microsecond accuracy. Combination of period, tokens_per_period "
    "and max_burst would cause an overflow";

const char *fg_gcra_compat_set_max_burst(fg_gcra_compat_params *p, int64_t max_burst) {
    if (max_burst < 0) return err_negative;
    p->capacity = max_burst == INT64_MAX ? INT64_MAX : max_burst + 1;
    return NULL;
}

const char *fg_gcra_compat_check_count(int64_t count) {
    return count >= 1 ? NULL : err_count_range;
}

/* Written so that NaN, which the server's reader never lets through, is
 * refused as well. */
const char *fg_gcra_compat_check_period(double period_s) {
    return period_s > 0 && period_s < 1e12 ? NULL : err_period;
}

/* The server's strict integer syntax: "0", or an optional '-', a digit
 * 1-9 and more digits, at most 20 characters, within 64 bits. */
static bool read_strict_integer(const char *s, size_t len, int64_t *out) {
    if (len == 0 || len > 20) return false;
    if (len == 1 && s[0] == '0') {
        *out = 0;
        return true;
    }
    size_t i = s[0] == '-';
    if (i == len || s[i] < '1' || s[i] > '9') return false;
    /* Accumulated negatively: -INT64_MIN does not fit, INT64_MIN does. */
    int64_t v = 0;
    for (; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return false;
        if (!fg_mul(v, 10, &v) || !fg_sub(v, s[i] - '0', &v)) return false;
    }
    if (s[0] == '-') {
        *out = v;
        return true;
    }
    if (v == INT64_MIN) return false;
    *out = -v;
    return true;
}

const char *fg_gcra_compat_read_tat(const char *s, size_t len, int64_t *tat_us) {
    int64_t v;
    if (!read_strict_integer(s, len, &v)) return err_invalid_key;
    if (v <= 0) return err_negative_tat;
    *tat_us = v;
    return NULL;
}

int64_t fg_gcra_compat_now_us(int64_t clock_us) {
    return clock_us / 1000 * 1000;
}

/* The server deletes a key once its expiry is strictly in the past. */
bool fg_gcra_compat_expired(int64_t expire_ms, int64_t now_us) {
    return expire_ms >= 0 && expire_ms < now_us / 1000;
}

int64_t fg_gcra_compat_expire_ms(int64_t tat_us) {
    return fg_us_to_ms_ceil(tat_us);
}

/* T: the period in microseconds shared among the tokens, rounded half up by
 * truncating x + 0.5 (x < 1e18, so the cast is defined), at least 1. */
static int64_t emission_us(const fg_gcra_compat_params *p) {
    double period_us = p->period_s * US_PER_SEC;
    int64_t t = (int64_t)(period_us / (double)p->tokens_per_period + 0.5);
    return t > 0 ? t : 1;
}

/* Whole seconds, rounded up, through a double as Redis's GCRA computes them. */
static int64_t ceil_seconds(int64_t us) {
    return (int64_t)ceil((double)us / US_PER_SEC);
}

/* (variance - ttl) / T when that difference is > -T, else 0. */
static int64_t tokens_left(int64_t variance, int64_t ttl, int64_t emission) {
    int64_t next = variance - ttl;
    return next > -emission ? next / emission : 0;
}

const char *fg_gcra_compat_decide(const fg_gcra_compat_params *p, bool stored, int64_t tat_us,
                                  int64_t now_us, fg_gcra_compat_reply *r, int64_t *new_tat_us) {
    if (now_us < 0) return err_time;
    int64_t emission = emission_us(p), variance, increment, new_tat;
    if (!fg_mul(emission, p->tokens, &increment)) return err_overflow_tokens;
    if (!fg_mul(emission, p->capacity, &variance)) return err_overflow_burst;
    int64_t tat = stored ? tat_us : now_us;
    if (!fg_add(fg_max(now_us, tat), increment, &new_tat)) return err_overflow_tokens;

    /* now - (new_tat - variance), grouped so that no step can overflow:
     * now - new_tat is in [-INT64_MAX, 0] and variance is positive. */
    int64_t diff = (now_us - new_tat) + variance, ttl;
    r->limited = diff < 0;
    if (r->limited) {
        r->retry_after_s = increment <= variance ? ceil_seconds(-diff) : -1;
        ttl = tat - now_us;
    } else {
        r->retry_after_s = -1;
        ttl = new_tat - now_us;
        *new_tat_us = new_tat;
    }
    r->capacity = p->capacity;
    r->remaining = tokens_left(variance, ttl, emission);
    r->reset_after_s = ceil_seconds(ttl);
    return NULL;
}
