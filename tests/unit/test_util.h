/*
 * test_util.h - helpers shared by the unit tests of the core algorithms.
 *
 * Header-only and static: every test binary includes it once.
 */
#ifndef FG_TEST_UTIL_H
#define FG_TEST_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "decision.h"

/* cmocka compares integers as unsigned; these print signed values, which
 * matters for the -1 of retry_after. */
#define expect_i64(actual, expected)                                              \
    do {                                                                          \
        int64_t actual_ = (int64_t)(actual), expected_ = (int64_t)(expected);     \
        if (actual_ != expected_) {                                               \
            print_error("%s = %lld, expected %lld\n", #actual, (long long)actual_, \
                        (long long)expected_);                                    \
            fail();                                                               \
        }                                                                         \
    } while (0)

#define expect_status(call, expected) expect_i64((call), (expected))

/* An answer in one line: allowed, limit, remaining, retry_after, reset_after.
 * `d` is evaluated once, so it may be a call that changes a state. */
#define expect_decision(d, allowed_, limit_, remaining_, retry_, reset_) \
    do {                                                                 \
        fg_decision d_ = (d);                                            \
        expect_i64(d_.allowed, (allowed_));                              \
        expect_i64(d_.limit, (limit_));                                  \
        expect_i64(d_.remaining, (remaining_));                          \
        expect_i64(d_.retry_after_ns, (retry_));                         \
        expect_i64(d_.reset_after_ns, (reset_));                         \
    } while (0)

#define US 1000LL           /* one microsecond in ns */
#define MS 1000000LL        /* one millisecond in ns */
#define SEC 1000000000LL    /* one second in ns */

/* A realistic time: 2024-01-01T00:00:00Z in microseconds. */
#define T2024_US 1704067200000000LL

/* splitmix64: a small deterministic generator, so every run tests the same
 * "random" cases and a failure can be replayed. */
typedef struct test_rng {
    uint64_t s;
} test_rng;

static inline uint64_t rng_next(test_rng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* Uniform-ish in [lo, hi] (the modulo bias is irrelevant here). */
static inline int64_t rng_range(test_rng *r, int64_t lo, int64_t hi) {
    uint64_t span = (uint64_t)(hi - lo) + 1;
    return lo + (int64_t)(rng_next(r) % span);
}

/* A wait in whole microseconds that covers a retry_after in ns: what a
 * client (or the binding rounding upwards) would wait. */
static inline int64_t wait_us_for(int64_t retry_after_ns) {
    return retry_after_ns / US + (retry_after_ns % US != 0);
}

/* The invariants every answer must respect, whatever the algorithm. */
static inline void expect_sane(const fg_decision *d) {
    assert_true(d->remaining >= 0);
    assert_true(d->remaining <= d->limit);
    assert_true(d->reset_after_ns >= 0);
    if (d->allowed) expect_i64(d->retry_after_ns, -1);
    if (!d->allowed) assert_true(d->retry_after_ns == -1 || d->retry_after_ns > 0);
}

#endif
