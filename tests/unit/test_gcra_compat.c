/*
 * test_gcra_compat.c - Redis 8.8's GCRA (core/gcra_compat.c): argument
 * checks and their texts, the stored value, the millisecond clock, the
 * emission interval's rounding, every overflow, the reply's formulas at
 * their rounding edges, and a cross-check against floodgate's own meter
 * (core/gcra.c) under random traffic.
 */
#include "test_util.h"

#include <math.h>
#include <string.h>

#include "gcra.h"
#include "gcra_compat.h"

#define NO_ERROR NULL

static void expect_text(const char *actual, const char *expected) {
    if (expected == NULL) {
        if (actual != NULL) fail_msg("unexpected error: %s", actual);
        return;
    }
    if (actual == NULL) fail_msg("no error, expected: %s", expected);
    assert_string_equal(actual, expected);
}

static fg_gcra_compat_params params(int64_t max_burst, int64_t per_period, double period_s,
                                    int64_t tokens) {
    fg_gcra_compat_params p;
    expect_text(fg_gcra_compat_set_max_burst(&p, max_burst), NO_ERROR);
    p.tokens_per_period = per_period;
    p.period_s = period_s;
    p.tokens = tokens;
    return p;
}

/* One call on a key: `tat` is its value (0: no key), updated as the
 * server would store it. */
static fg_gcra_compat_reply call(int64_t *tat, const fg_gcra_compat_params *p, int64_t now_us) {
    fg_gcra_compat_reply r;
    int64_t next = -42;
    expect_text(fg_gcra_compat_decide(p, *tat != 0, *tat, now_us, &r, &next), NO_ERROR);
    if (r.limited)
        expect_i64(next, -42);
    else
        *tat = next;
    return r;
}

#define expect_reply(r_, limited_, capacity_, remaining_, retry_, reset_)                          \
    do {                                                                                           \
        fg_gcra_compat_reply got_ = (r_);                                                          \
        expect_i64(got_.limited, (limited_));                                                      \
        expect_i64(got_.capacity, (capacity_));                                                    \
        expect_i64(got_.remaining, (remaining_));                                                  \
        expect_i64(got_.retry_after_s, (retry_));                                                  \
        expect_i64(got_.reset_after_s, (reset_));                                                  \
    } while (0)

/* A whole millisecond in 2024, as 8.8's clock gives. */
#define NOW (T2024_US + 123000)
#define SEC_US 1000000LL

static const char overflow_tokens[] =
    "ERR GCRA limiting uses microsecond accuracy. Combination of period, tokens_per_period and "
    "TOKENS would cause an overflow";
static const char overflow_burst[] =
    "ERR GCRA limiting uses microsecond accuracy. Combination of period, tokens_per_period and "
    "max_burst would cause an overflow";

/* ------------------------------------------------------------ arguments */

static void test_max_burst(void **state) {
    (void)state;
    fg_gcra_compat_params p = {.capacity = -7};
    expect_text(fg_gcra_compat_set_max_burst(&p, -1),
                "ERR value is out of range, must be positive");
    expect_i64(p.capacity, -7);
    expect_text(fg_gcra_compat_set_max_burst(&p, INT64_MIN), "ERR value is out of range, must "
                                                             "be positive");
    expect_text(fg_gcra_compat_set_max_burst(&p, 0), NO_ERROR);
    expect_i64(p.capacity, 1);
    expect_text(fg_gcra_compat_set_max_burst(&p, 15), NO_ERROR);
    expect_i64(p.capacity, 16);
    expect_text(fg_gcra_compat_set_max_burst(&p, INT64_MAX - 1), NO_ERROR);
    expect_i64(p.capacity, INT64_MAX);
    expect_text(fg_gcra_compat_set_max_burst(&p, INT64_MAX), NO_ERROR);
    expect_i64(p.capacity, INT64_MAX);
}

static void test_counts(void **state) {
    (void)state;
    const char *range = "ERR value is out of range, value must between 1 and 9223372036854775807";
    expect_text(fg_gcra_compat_check_count(0), range);
    expect_text(fg_gcra_compat_check_count(-1), range);
    expect_text(fg_gcra_compat_check_count(INT64_MIN), range);
    expect_text(fg_gcra_compat_check_count(1), NO_ERROR);
    expect_text(fg_gcra_compat_check_count(INT64_MAX), NO_ERROR);
}

static void test_period(void **state) {
    (void)state;
    const char *range = "ERR period must be > 0 and < 1e12";
    const double refused[] = {0.0, -0.0, -1.0, 1e12, 1e12 + 1, INFINITY, -INFINITY, NAN};
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
        expect_text(fg_gcra_compat_check_period(refused[i]), range);
    const double accepted[] = {5e-324, 1e-9, 0.001, 1.0, 60.5, 999999999999.9999};
    for (size_t i = 0; i < sizeof(accepted) / sizeof(accepted[0]); i++)
        expect_text(fg_gcra_compat_check_period(accepted[i]), NO_ERROR);
}

/* ---------------------------------------------------------- stored value */

static void test_stored_value(void **state) {
    (void)state;
    static const struct {
        const char *s;
        int64_t tat; /* 0: refused */
        const char *err;
    } cases[] = {
        {"1704067200123000", 1704067200123000, NULL},
        {"1", 1, NULL},
        {"9223372036854775807", INT64_MAX, NULL},
        {"0", 0, "ERR Negative time is invalid value for GCRA"},
        {"-5", 0, "ERR Negative time is invalid value for GCRA"},
        {"-9223372036854775808", 0, "ERR Negative time is invalid value for GCRA"},
        {"9223372036854775808", 0, "ERR Invalid GCRA key"},
        {"-9223372036854775809", 0, "ERR Invalid GCRA key"},
        {"99999999999999999999", 0, "ERR Invalid GCRA key"},
        {"000000000000000000001", 0, "ERR Invalid GCRA key"},
        {"", 0, "ERR Invalid GCRA key"},
        {"abc", 0, "ERR Invalid GCRA key"},
        {" 5", 0, "ERR Invalid GCRA key"},
        {"5 ", 0, "ERR Invalid GCRA key"},
        {"+5", 0, "ERR Invalid GCRA key"},
        {"05", 0, "ERR Invalid GCRA key"},
        {"-0", 0, "ERR Invalid GCRA key"},
        {"-", 0, "ERR Invalid GCRA key"},
        {"1.5", 0, "ERR Invalid GCRA key"},
        {"1e6", 0, "ERR Invalid GCRA key"},
        {"12a", 0, "ERR Invalid GCRA key"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int64_t tat = -42;
        expect_text(fg_gcra_compat_read_tat(cases[i].s, strlen(cases[i].s), &tat), cases[i].err);
        expect_i64(tat, cases[i].err ? -42 : cases[i].tat);
    }
    /* The length bounds the read: "123" of "1234". */
    int64_t tat;
    expect_text(fg_gcra_compat_read_tat("1234", 3, &tat), NO_ERROR);
    expect_i64(tat, 123);
    /* A NUL inside the value is a character like any other. */
    expect_text(fg_gcra_compat_read_tat("12\0" "3", 4, &tat), "ERR Invalid GCRA key");
}

/* ----------------------------------------------------------------- time */

static void test_clock_is_whole_milliseconds(void **state) {
    (void)state;
    expect_i64(fg_gcra_compat_now_us(T2024_US + 123456), T2024_US + 123000);
    expect_i64(fg_gcra_compat_now_us(T2024_US + 999), T2024_US);
    expect_i64(fg_gcra_compat_now_us(T2024_US), T2024_US);
    expect_i64(fg_gcra_compat_now_us(0), 0);
}

static void test_expiry(void **state) {
    (void)state;
    /* Rounded up: the key lives until the bucket is full again, also when
     * that is less than a millisecond away. */
    expect_i64(fg_gcra_compat_expire_ms(NOW + 1), NOW / 1000 + 1);
    expect_i64(fg_gcra_compat_expire_ms(NOW + 100), NOW / 1000 + 1);
    expect_i64(fg_gcra_compat_expire_ms(NOW + 2001), NOW / 1000 + 3);
    expect_i64(fg_gcra_compat_expire_ms(NOW + 2999), NOW / 1000 + 3);
    expect_i64(fg_gcra_compat_expire_ms(NOW + 3000), NOW / 1000 + 3);
    /* A key lives through its expiry's millisecond, as the server keeps it. */
    assert_false(fg_gcra_compat_expired(-1, NOW));
    assert_false(fg_gcra_compat_expired(NOW / 1000, NOW));
    assert_false(fg_gcra_compat_expired(NOW / 1000 + 1, NOW));
    assert_true(fg_gcra_compat_expired(NOW / 1000 - 1, NOW));
    assert_true(fg_gcra_compat_expired(0, NOW));
}

static void test_negative_time_refused(void **state) {
    (void)state;
    fg_gcra_compat_params p = params(1, 1, 1, 1);
    fg_gcra_compat_reply r;
    int64_t next;
    expect_text(fg_gcra_compat_decide(&p, false, 0, -1000, &r, &next),
                "ERR the time must not be negative");
    expect_text(fg_gcra_compat_decide(&p, false, 0, 0, &r, &next), NO_ERROR);
    expect_i64(next, SEC_US);
}

/* ------------------------------------------------------------ decisions */

/* max_burst 4, 5 tokens per 10 s: T = 2 s, capacity 5. */
static void test_a_burst_then_the_rate(void **state) {
    (void)state;
    fg_gcra_compat_params p = params(4, 5, 10, 1);
    int64_t tat = 0;
    expect_reply(call(&tat, &p, NOW), 0, 5, 4, -1, 2);
    expect_i64(tat, NOW + 2 * SEC_US);
    for (int64_t i = 2; i <= 5; i++)
        expect_reply(call(&tat, &p, NOW), 0, 5, 5 - i, -1, 2 * i);
    expect_i64(tat, NOW + 10 * SEC_US);
    expect_reply(call(&tat, &p, NOW), 1, 5, 0, 2, 10);
    expect_i64(tat, NOW + 10 * SEC_US);
    /* One millisecond before the token is back, then at it. */
    expect_reply(call(&tat, &p, NOW + 2 * SEC_US - 1000), 1, 5, 0, 1, 9);
    expect_reply(call(&tat, &p, NOW + 2 * SEC_US), 0, 5, 0, -1, 10);
    expect_i64(tat, NOW + 12 * SEC_US);
    /* Idle for the whole period: full again. */
    expect_reply(call(&tat, &p, NOW + 40 * SEC_US), 0, 5, 4, -1, 2);
    expect_i64(tat, NOW + 42 * SEC_US);
}

/* The emission interval in microseconds: the TAT one token moves. */
static int64_t emission_of(double period_s, int64_t per_period) {
    fg_gcra_compat_params p = params(0, per_period, period_s, 1);
    int64_t tat = 0;
    call(&tat, &p, NOW);
    return tat - NOW;
}

static void test_emission_rounds_half_up_to_whole_microseconds(void **state) {
    (void)state;
    expect_i64(emission_of(1, 3), 333333);         /* 333333.33 */
    expect_i64(emission_of(2, 3), 666667);         /* 666666.67 */
    expect_i64(emission_of(5, 2000000), 3);        /* 2.5 rounds up */
    expect_i64(emission_of(3, 2000000), 2);        /* 1.5 rounds up */
    expect_i64(emission_of(7, 2000000), 4);        /* 3.5 rounds up */
    expect_i64(emission_of(1, 2000000), 1);        /* 0.5 rounds up to 1 */
    expect_i64(emission_of(1, 4000000), 1);        /* 0.25 -> 0 -> at least 1 */
    expect_i64(emission_of(1e-9, 1), 1);           /* far below a microsecond */
    expect_i64(emission_of(5e-324, 1), 1);         /* the smallest double */
    expect_i64(emission_of(1, INT64_MAX), 1);      /* the largest rate */
    expect_i64(emission_of(0.0015, 1), 1500);      /* fractional period */
    /* Beyond 2^53 the double's rounding shows, as on 8.8. */
    expect_i64(emission_of(999999999999.0, 1), 999999999999000064);
}

static void test_sub_second_rounding_of_retry_and_reset(void **state) {
    (void)state;
    /* max_burst 0, one token per 1.5 s: T = 1,500,000 us. */
    fg_gcra_compat_params p = params(0, 1, 1.5, 1);
    int64_t tat = 0;
    expect_reply(call(&tat, &p, NOW), 0, 1, 0, -1, 2); /* ttl 1.5 s -> 2 */
    /* Refused 1 ms later: retry 1.499 s -> 2, reset 1.499 s -> 2. */
    expect_reply(call(&tat, &p, NOW + 1000), 1, 1, 0, 2, 2);
    /* At 0.5 s: exactly 1 s to go -> 1 and 1. */
    expect_reply(call(&tat, &p, NOW + 500000), 1, 1, 0, 1, 1);
    /* At 0.501 s: 0.999 s -> 1. */
    expect_reply(call(&tat, &p, NOW + 501000), 1, 1, 0, 1, 1);
    /* At 1.499 s: 1 ms to go -> 1. */
    expect_reply(call(&tat, &p, NOW + 1499000), 1, 1, 0, 1, 1);
    /* At the TAT: admitted, new TAT 1.5 s ahead. */
    expect_reply(call(&tat, &p, NOW + 1500000), 0, 1, 0, -1, 2);
    expect_i64(tat, NOW + 3000000);

    /* T = 1,000,001 us: a reset of 1 s and 1 us rounds to 2. */
    fg_gcra_compat_params q = params(0, 1, 1.000001, 1);
    tat = 0;
    expect_reply(call(&tat, &q, NOW), 0, 1, 0, -1, 2);
    expect_reply(call(&tat, &q, NOW + 1000), 1, 1, 0, 1, 1); /* 999,001 us */
    /* A TAT 1 us after a whole millisecond: at that millisecond 1 us is
     * left, which rounds up to a second for both. */
    tat = NOW + 1;
    expect_reply(call(&tat, &q, NOW), 1, 1, 0, 1, 1);
}

static void test_remaining_rounds_down_and_stops_at_zero(void **state) {
    (void)state;
    /* capacity 10, T = 100 ms. */
    fg_gcra_compat_params p = params(9, 10, 1, 3);
    int64_t tat = 0;
    expect_reply(call(&tat, &p, NOW), 0, 10, 7, -1, 1);
    expect_reply(call(&tat, &p, NOW), 0, 10, 4, -1, 1);
    expect_reply(call(&tat, &p, NOW), 0, 10, 1, -1, 1);
    /* 3 more do not fit: 1 left, retry 200 ms -> 1 s. */
    expect_reply(call(&tat, &p, NOW), 1, 10, 1, 1, 1);
    /* 50 ms later: 1.5 tokens left, still 1 whole. */
    expect_reply(call(&tat, &p, NOW + 50000), 1, 10, 1, 1, 1);
    /* 200 ms later: 3 fit exactly, nothing left. */
    expect_reply(call(&tat, &p, NOW + 200000), 0, 10, 0, -1, 1);
    expect_i64(tat, NOW + 1200000);
    /* A TAT ahead by more than the variance (written by hand): the
     * difference is between -T and 0, and remaining is 0, not -0. */
    tat = NOW + 1000000 + 50000;
    expect_reply(call(&tat, &p, NOW), 1, 10, 0, 1, 2);
    /* Further ahead: a difference below -T is 0 too. */
    tat = NOW + 5000000;
    expect_reply(call(&tat, &p, NOW), 1, 10, 0, 5, 5);
}

static void test_count_above_capacity_never_fits(void **state) {
    (void)state;
    /* capacity 3, T = 1 s, TOKENS 4. */
    fg_gcra_compat_params p = params(2, 1, 1, 4);
    int64_t tat = 0;
    /* No key: tat = now, ttl 0. */
    expect_reply(call(&tat, &p, NOW), 1, 3, 3, -1, 0);
    expect_i64(tat, 0);
    /* A key half used. */
    tat = NOW + 1500000;
    expect_reply(call(&tat, &p, NOW), 1, 3, 1, -1, 2);
    /* A key whose TAT is 2.5 s in the past (no expiry): ttl is negative,
     * reset rounds up to -2 and remaining passes the capacity, as on 8.8. */
    tat = NOW - 2500000;
    expect_reply(call(&tat, &p, NOW), 1, 3, 5, -1, -2);
    /* 0.5 s in the past: ceil(-0.5) is -0, which is 0. */
    tat = NOW - 500000;
    expect_reply(call(&tat, &p, NOW), 1, 3, 3, -1, 0);
    /* Exactly the capacity fits. */
    p.tokens = 3;
    tat = 0;
    expect_reply(call(&tat, &p, NOW), 0, 3, 0, -1, 3);
}

static void test_old_tat_counts_from_now(void **state) {
    (void)state;
    fg_gcra_compat_params p = params(1, 1, 1, 1);
    int64_t tat = NOW - 60 * SEC_US;
    expect_reply(call(&tat, &p, NOW), 0, 2, 1, -1, 1);
    expect_i64(tat, NOW + SEC_US);
}

/* --------------------------------------------------------------- overflow */

static void expect_overflow(const fg_gcra_compat_params *p, bool stored, int64_t tat,
                            int64_t now, const char *text) {
    fg_gcra_compat_reply r = {-9, -9, -9, -9, -9};
    int64_t next = -42;
    expect_text(fg_gcra_compat_decide(p, stored, tat, now, &r, &next), text);
    expect_reply(r, -9, -9, -9, -9, -9);
    expect_i64(next, -42);
}

static void test_overflows(void **state) {
    (void)state;
    /* T = 1e17 us: 92 tokens fit in 64 bits, 93 do not. */
    fg_gcra_compat_params p = params(0, 1, 1e11, 93);
    expect_overflow(&p, false, 0, 0, overflow_tokens);
    /* Both products overflow: TOKENS is checked first. */
    p = params(92, 1, 1e11, 93);
    expect_overflow(&p, false, 0, 0, overflow_tokens);
    /* Only the capacity's. */
    p = params(92, 1, 1e11, 1);
    expect_overflow(&p, false, 0, 0, overflow_burst);
    p = params(91, 1, 1e11, 92);
    fg_gcra_compat_reply r;
    int64_t next;
    expect_text(fg_gcra_compat_decide(&p, false, 0, 0, &r, &next), NO_ERROR);
    expect_i64(next, 9200000000000000000);
    /* The new TAT: from a stored TAT near the end of time ... */
    p = params(5, 1, 1e-4, 1); /* T = 100 us */
    expect_overflow(&p, true, INT64_MAX - 99, NOW, overflow_tokens);
    int64_t tat = INT64_MAX - 100;
    expect_reply(call(&tat, &p, NOW), 1, 6, 0, 9221667969655, 9221667969655);
    expect_overflow(&p, true, INT64_MAX, NOW, overflow_tokens);
    /* ... and from now, with a huge increment that alone fits. */
    p = params(9, 1, 922330000000.0, 10); /* T = 9.2233e17, 10 of them */
    expect_overflow(&p, false, 0, NOW, overflow_tokens);
    expect_text(fg_gcra_compat_decide(&p, false, 0, 1000, &r, &next), NO_ERROR);
    /* The largest capacity with the smallest T fits. */
    p = params(INT64_MAX, 1, 1e-6, 1);
    tat = 0;
    expect_reply(call(&tat, &p, NOW), 0, INT64_MAX, INT64_MAX - 1, -1, 1);
}

/* ------------------------------------------------------ random traffic */

/* Whole microseconds: nanosecond durations of floodgate's meter rounded up
 * to seconds, as 8.8 rounds its microseconds. */
static int64_t ceil_ns_to_s(int64_t ns) {
    if (ns >= 0) return ns / SEC + (ns % SEC != 0);
    return -((-ns) / SEC);
}

/* On traffic where both apply (whole-microsecond T, times in whole ms, a
 * key that expires as the server expires it), 8.8's GCRA and floodgate's
 * meter, two separate implementations, must agree on every answer and
 * every state. */
static void test_agrees_with_the_floodgate_meter(void **state) {
    (void)state;
    test_rng rng = {88};
    int refused = 0, admitted = 0, never_fit = 0;
    for (int scenario = 0; scenario < 400; scenario++) {
        int64_t max_burst = rng_range(&rng, 0, 30);
        int64_t per_period = rng_range(&rng, 1, 50);
        double period_s = (double)rng_range(&rng, 1, 20000) / 1000.0;
        fg_gcra_compat_params p = params(max_burst, per_period, period_s, 1);
        int64_t t_us = (int64_t)(period_s * 1e6 / (double)per_period + 0.5);
        if (t_us < 1) t_us = 1;
        fg_gcra_params meter = {t_us * US, p.capacity};
        int64_t tat = 0, meter_tat = 0, now = NOW;
        for (int step = 0; step < 80; step++) {
            now += rng_range(&rng, 0, 3) * rng_range(&rng, 0, t_us / 1000 + 1) * 1000;
            p.tokens = rng_range(&rng, 0, 8) == 0 ? rng_range(&rng, 1, p.capacity + 3)
                                                  : rng_range(&rng, 1, 2);
            /* The server's expiry deletes the key once its ms is past. */
            if (tat && fg_gcra_compat_expired(fg_gcra_compat_expire_ms(tat), now)) tat = 0;
            fg_gcra_compat_reply r = call(&tat, &p, now);
            fg_decision d;
            int64_t meter_next;
            expect_status(fg_gcra_decide(meter_tat, &meter, now, p.tokens, &d, &meter_next),
                          FG_OK);
            meter_tat = meter_next;
            expect_i64(r.limited, !d.allowed);
            expect_i64(r.capacity, d.limit);
            expect_i64(r.remaining, d.remaining);
            expect_i64(r.retry_after_s,
                       d.retry_after_ns < 0 ? -1 : ceil_ns_to_s(d.retry_after_ns));
            expect_i64(r.reset_after_s, ceil_ns_to_s(d.reset_after_ns));
            if (tat) expect_i64(tat * US, meter_tat);
            if (!r.limited) {
                admitted++;
                /* The key lives until its TAT, rounded up to the ms. */
                expect_i64(fg_gcra_compat_expire_ms(tat), (tat + 999) / 1000);
            } else if (r.retry_after_s < 0) {
                never_fit++;
            } else {
                refused++;
            }
        }
    }
    assert_true(admitted > 5000 && refused > 5000 && never_fit > 200);
}

/* What must hold of any answer from any state that can be stored. */
static void test_properties_from_arbitrary_states(void **state) {
    (void)state;
    test_rng rng = {8808};
    for (int i = 0; i < 200000; i++) {
        fg_gcra_compat_params p =
            params(rng_range(&rng, 0, 100), rng_range(&rng, 1, 1000),
                   (double)rng_range(&rng, 1, 100000000) / 1000.0, rng_range(&rng, 1, 120));
        int64_t now = NOW + rng_range(&rng, 0, 1000000) * 1000;
        bool stored = rng_range(&rng, 0, 3) != 0;
        int64_t tat = stored ? now + rng_range(&rng, -200000000, 200000000) : 0;
        fg_gcra_compat_reply r;
        int64_t next = -42;
        expect_text(fg_gcra_compat_decide(&p, stored, tat, now, &r, &next), NO_ERROR);
        int64_t base = stored && tat > now ? tat : now;
        int64_t emission = emission_of(p.period_s, p.tokens_per_period);
        int64_t variance = emission * p.capacity, increment = emission * p.tokens;
        /* Admitted exactly when the new TAT stays within the variance. */
        expect_i64(r.limited, base + increment - variance > now);
        if (!r.limited) {
            expect_i64(next, base + increment);
            assert_true(r.remaining >= 0 && r.remaining < p.capacity);
            assert_true(r.reset_after_s >= 1);
            /* The answer's reset covers the TAT; the key expires within it. */
            assert_true(now + r.reset_after_s * SEC_US >= next);
        } else {
            expect_i64(next, -42);
            if (p.tokens > p.capacity) {
                expect_i64(r.retry_after_s, -1);
            } else {
                /* Waiting retry_after (whole seconds) is enough ... */
                int64_t later = now + r.retry_after_s * SEC_US;
                assert_true(base + increment - variance <= later);
                /* ... and a second less is not. */
                assert_true(base + increment - variance > later - SEC_US);
            }
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_max_burst),
        cmocka_unit_test(test_counts),
        cmocka_unit_test(test_period),
        cmocka_unit_test(test_stored_value),
        cmocka_unit_test(test_clock_is_whole_milliseconds),
        cmocka_unit_test(test_expiry),
        cmocka_unit_test(test_negative_time_refused),
        cmocka_unit_test(test_a_burst_then_the_rate),
        cmocka_unit_test(test_emission_rounds_half_up_to_whole_microseconds),
        cmocka_unit_test(test_sub_second_rounding_of_retry_and_reset),
        cmocka_unit_test(test_remaining_rounds_down_and_stops_at_zero),
        cmocka_unit_test(test_count_above_capacity_never_fits),
        cmocka_unit_test(test_old_tat_counts_from_now),
        cmocka_unit_test(test_overflows),
        cmocka_unit_test(test_agrees_with_the_floodgate_meter),
        cmocka_unit_test(test_properties_from_arbitrary_states),
    };
    return cmocka_run_group_tests_name("gcra_compat", tests, NULL, NULL);
}
