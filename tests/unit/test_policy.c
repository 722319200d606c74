/*
 * test_policy.c - policies: several limits decided all or nothing, the
 * penalty box, shadow mode, carrying a state over to changed numbers, and
 * the serialized state, against exact values and a randomized model.
 */
#include "test_util.h"

#include <string.h>

#include "policy.h"

#define SEC_US    1000000LL
#define MINUTE_US 60000000LL

/* ---------------------------------------------------------------- helpers */

static fg_policy_limit bucket(fg_policy_algorithm a, int64_t capacity, int64_t emission_ns) {
    fg_policy_limit l;
    memset(&l, 0, sizeof(l));
    l.algorithm = a;
    l.p.bucket = (fg_gcra_params){emission_ns, capacity};
    return l;
}

static fg_policy_limit token(int64_t capacity, int64_t emission_ns) {
    return bucket(FG_POLICY_TOKEN, capacity, emission_ns);
}

static fg_policy_limit fixed(int64_t limit, int64_t window_us) {
    fg_policy_limit l;
    memset(&l, 0, sizeof(l));
    l.algorithm = FG_POLICY_FIXED;
    l.p.fixed = (fg_fixed_params){limit, window_us};
    return l;
}

static fg_policy_limit sliding(int64_t limit, int64_t window_us) {
    fg_policy_limit l;
    memset(&l, 0, sizeof(l));
    l.algorithm = FG_POLICY_SLIDING;
    l.p.sliding = (fg_sliding_params){limit, window_us};
    return l;
}

static fg_policy_rules rules_of(uint32_t n, const fg_policy_limit *limits) {
    fg_policy_rules r;
    memset(&r, 0, sizeof(r));
    r.nlimits = n;
    for (uint32_t i = 0; i < n; i++)
        r.limits[i] = limits[i];
    return r;
}

static fg_policy_rules one_limit(fg_policy_limit a) {
    return rules_of(1, &a);
}

static fg_policy_rules two_limits(fg_policy_limit a, fg_policy_limit b) {
    fg_policy_limit l[2] = {a, b};
    return rules_of(2, l);
}

static fg_policy_penalty penalty(int64_t ban_us, int64_t after, int64_t within_us) {
    return (fg_policy_penalty){ban_us, after, within_us};
}

static fg_policy_state fresh(const fg_policy_rules *r) {
    fg_policy_state s;
    fg_policy_state_init(&s, r);
    return s;
}

/* Two storable states are equal when they serialize to the same bytes. */
static bool same_state(const fg_policy_state *a, const fg_policy_state *b) {
    uint8_t ba[512], bb[512];
    size_t na = fg_policy_state_serialized_size(a), nb = fg_policy_state_serialized_size(b);
    assert_true(na <= sizeof(ba) && nb <= sizeof(bb));
    fg_policy_state_serialize(a, ba);
    fg_policy_state_serialize(b, bb);
    return na == nb && memcmp(ba, bb, na) == 0;
}

static void expect_round_trip(const fg_policy_state *s) {
    uint8_t bytes[512], again[512];
    size_t n = fg_policy_state_serialized_size(s);
    assert_true(n <= sizeof(bytes));
    fg_policy_state_serialize(s, bytes);
    fg_policy_state loaded;
    expect_status(fg_policy_state_deserialize(&loaded, bytes, n), FG_OK);
    expect_i64(fg_policy_state_serialized_size(&loaded), n);
    fg_policy_state_serialize(&loaded, again);
    assert_memory_equal(bytes, again, n);
}

/* Decides and stores the new state, as the module would, checking what
 * every answer must respect. */
static fg_policy_decision check(fg_policy_state *s, const fg_policy_rules *r, int64_t now_us,
                                int64_t cost) {
    fg_policy_decision out;
    fg_policy_state next;
    expect_status(fg_policy_decide(s, r, now_us, cost, &out, &next), FG_OK);
    assert_true(fg_policy_state_storable(&next));
    expect_i64(out.changed, !same_state(s, &next));
    expect_i64(out.d.allowed, out.allowed);
    expect_sane(&out.d);
    if (cost == 0) assert_false(out.changed);
    *s = next;
    return out;
}

#define expect_answer(o, allowed_, by_, index_, limit_, remaining_, retry_, reset_)                \
    do {                                                                                           \
        fg_policy_decision o_ = (o);                                                               \
        expect_i64(o_.allowed, (allowed_));                                                        \
        expect_i64(o_.decided_by, (by_));                                                          \
        expect_i64(o_.limit_index, (index_));                                                      \
        expect_i64(o_.d.limit, (limit_));                                                          \
        expect_i64(o_.d.remaining, (remaining_));                                                  \
        expect_i64(o_.d.retry_after_ns, (retry_));                                                 \
        expect_i64(o_.d.reset_after_ns, (reset_));                                                 \
    } while (0)

#define BY_LIMIT   FG_POLICY_BY_LIMIT
#define BY_PENALTY FG_POLICY_BY_PENALTY

/* What limit i holds now, as a peek of the whole policy would see it if it
 * were alone. */
static fg_decision peek_limit(const fg_policy_state *s, uint32_t i, int64_t now_us) {
    fg_policy_rules r = one_limit(s->limits[i].limit);
    fg_policy_state alone = fresh(&r);
    alone.limits[0] = s->limits[i];
    fg_policy_decision out;
    fg_policy_state next;
    expect_status(fg_policy_decide(&alone, &r, now_us, 0, &out, &next), FG_OK);
    return out.d;
}

/* ------------------------------------------------------------- the rules */

static void test_rules_valid(void **state) {
    (void)state;
    fg_policy_rules r = two_limits(token(10, SEC), fixed(5, MINUTE_US));
    assert_true(fg_policy_rules_valid(&r));
    r.penalty = penalty(60 * SEC_US, 3, 10 * SEC_US);
    assert_true(fg_policy_rules_valid(&r));
    assert_false(fg_policy_rules_valid(NULL));

    fg_policy_limit many[FG_POLICY_MAX_LIMITS + 1];
    for (int i = 0; i <= FG_POLICY_MAX_LIMITS; i++)
        many[i] = sliding(i + 1, SEC_US);
    fg_policy_rules m = rules_of(FG_POLICY_MAX_LIMITS, many);
    assert_true(fg_policy_rules_valid(&m));
    m.nlimits = FG_POLICY_MAX_LIMITS + 1;
    assert_false(fg_policy_rules_valid(&m));
    m.nlimits = 0;
    assert_false(fg_policy_rules_valid(&m));

    /* The ranges of params.h. */
    const fg_policy_limit bad[] = {
        token(0, SEC),
        token(10, 0),
        token(10, ((int64_t)1 << 62) + 1),
        bucket(FG_POLICY_LEAKY, -1, SEC),
        bucket(FG_POLICY_GCRA, 1, -5),
        fixed(0, SEC_US),
        fixed(1, 0),
        fixed(1, 1000000000000001LL),
        sliding(-1, SEC_US),
        sliding(1, 1000000000000001LL),
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        fg_policy_rules b = one_limit(bad[i]);
        assert_false(fg_policy_rules_valid(&b));
    }
    const fg_policy_limit edges[] = {
        token(INT64_MAX, 1),
        token(1, (int64_t)1 << 62),
        fixed(INT64_MAX, 1000000000000000LL),
        sliding(1, 1),
    };
    for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]); i++) {
        fg_policy_rules e = one_limit(edges[i]);
        assert_true(fg_policy_rules_valid(&e));
    }
    fg_policy_rules unknown = one_limit(fixed(1, 1));
    unknown.limits[0].algorithm = (fg_policy_algorithm)5;
    assert_false(fg_policy_rules_valid(&unknown));

    /* A penalty is off (ban 0, the rest ignored) or complete. */
    fg_policy_rules p = one_limit(fixed(1, SEC_US));
    p.penalty = penalty(0, 0, -3);
    assert_true(fg_policy_rules_valid(&p));
    const fg_policy_penalty bad_penalties[] = {
        penalty(-1, 1, 1),
        penalty(1, 0, 1),
        penalty(1, 1, 0),
        penalty(1000000000000001LL, 1, 1),
        penalty(1, 1, 1000000000000001LL),
        penalty(1, FG_POLICY_MAX_AFTER + 1, 1),
        penalty(1, INT64_MAX, 1),
    };
    for (size_t i = 0; i < sizeof(bad_penalties) / sizeof(bad_penalties[0]); i++) {
        p.penalty = bad_penalties[i];
        assert_false(fg_policy_rules_valid(&p));
    }
    p.penalty = penalty(1000000000000000LL, FG_POLICY_MAX_AFTER, 1000000000000000LL);
    assert_true(fg_policy_rules_valid(&p));
}

static void test_a_fresh_state_is_full_and_neutral(void **state) {
    (void)state;
    fg_policy_rules r = two_limits(token(10, SEC), sliding(5, MINUTE_US));
    fg_policy_state s = fresh(&r);
    assert_true(fg_policy_state_storable(&s));
    expect_i64(s.nlimits, 2);
    expect_i64(fg_policy_expires_at_us(&s, &r), 0);
    /* The sliding window has fewer units left: it answers. */
    expect_answer(check(&s, &r, T2024_US, 0), true, BY_LIMIT, 1, 5, 5, -1, 0);
    expect_round_trip(&s);
}

static void test_refuses_bad_arguments_and_overflow(void **state) {
    (void)state;
    fg_policy_rules r = two_limits(token(10, SEC), fixed(5, MINUTE_US));
    fg_policy_state s = fresh(&r), next;
    fg_policy_decision out;
    expect_status(fg_policy_decide(&s, &r, T2024_US, -1, &out, &next), FG_EINVAL);
    expect_status(fg_policy_decide(&s, &r, -1, 1, &out, &next), FG_EINVAL);

    /* A state computed with other numbers must be carried over first. */
    fg_policy_rules other = two_limits(token(10, SEC), fixed(6, MINUTE_US));
    expect_status(fg_policy_decide(&s, &other, T2024_US, 1, &out, &next), FG_EINVAL);
    fg_policy_rules fewer = one_limit(token(10, SEC));
    expect_status(fg_policy_decide(&s, &fewer, T2024_US, 1, &out, &next), FG_EINVAL);
    fg_policy_state broken = s;
    broken.denials = -1;
    expect_status(fg_policy_decide(&broken, &r, T2024_US, 1, &out, &next), FG_EINVAL);

    /* A loaded ban may end too far away for nanoseconds; carried over, it
     * ends by now + ban_us. */
    fg_policy_rules banning = one_limit(fixed(5, MINUTE_US));
    banning.penalty = penalty(60 * SEC_US, 1, SEC_US);
    fg_policy_state far = fresh(&banning);
    far.banned_until_us = INT64_MAX;
    expect_status(fg_policy_decide(&far, &banning, T2024_US, 1, &out, &next), FG_EOVERFLOW);
    assert_true(fg_policy_rescale(&far, &banning, T2024_US, &far));
    expect_answer(check(&far, &banning, T2024_US, 1), false, BY_PENALTY, 0, 0, 0, 60 * SEC,
                  60 * SEC);

    /* T * capacity does not fit in 64 bits: nothing is decided, nothing
     * written. */
    fg_policy_rules huge = two_limits(fixed(5, MINUTE_US), token(INT64_MAX, 2));
    fg_policy_state h = fresh(&huge);
    memset(&out, 0x5a, sizeof(out));
    memset(&next, 0x5a, sizeof(next));
    fg_policy_decision out_before = out;
    fg_policy_state next_before = next;
    expect_status(fg_policy_decide(&h, &huge, T2024_US, 1, &out, &next), FG_EOVERFLOW);
    assert_memory_equal(&out, &out_before, sizeof(out));
    assert_memory_equal(&next, &next_before, sizeof(next));
}

/* ------------------------------------------------------ all or nothing */

static void test_a_denial_charges_no_limit(void **state) {
    (void)state;
    fg_policy_rules r = two_limits(token(10, 100 * MS), fixed(3, MINUTE_US));
    fg_policy_state s = fresh(&r);
    const int64_t now = T2024_US + 15 * SEC_US;

    /* The fixed window has fewer units left: it answers. */
    expect_answer(check(&s, &r, now, 1), true, BY_LIMIT, 1, 3, 2, -1, 45 * SEC);
    expect_answer(check(&s, &r, now, 1), true, BY_LIMIT, 1, 3, 1, -1, 45 * SEC);
    expect_answer(check(&s, &r, now, 1), true, BY_LIMIT, 1, 3, 0, -1, 45 * SEC);
    expect_i64(s.limits[0].s.tat_ns, now * US + 300 * MS);
    expect_i64(s.limits[1].s.fixed.count, 3);

    /* The token bucket would take it, the window refuses: the bucket keeps
     * its 7 units and its TAT. */
    fg_policy_state before = s;
    fg_policy_decision o = check(&s, &r, now, 1);
    expect_answer(o, false, BY_LIMIT, 1, 3, 0, 45 * SEC, 45 * SEC);
    assert_false(o.changed);
    assert_true(same_state(&s, &before));
    expect_i64(s.limits[0].s.tat_ns, now * US + 300 * MS);
    expect_decision(peek_limit(&s, 0, now), true, 10, 7, -1, 300 * MS);
}

static void test_a_first_limit_denial_charges_the_second_nothing(void **state) {
    (void)state;
    fg_policy_rules r = two_limits(fixed(1, MINUTE_US), sliding(10, MINUTE_US));
    fg_policy_state s = fresh(&r);
    expect_answer(check(&s, &r, T2024_US, 1), true, BY_LIMIT, 0, 1, 0, -1, 120 * SEC);
    expect_answer(check(&s, &r, T2024_US + 30 * SEC_US, 1), false, BY_LIMIT, 0, 1, 0, 30 * SEC,
                  90 * SEC);
    expect_i64(s.limits[1].s.sliding.count, 1);
    expect_i64(s.limits[1].s.sliding.window_start_us, T2024_US);
}

static void test_the_longest_wait_decides(void **state) {
    (void)state;
    fg_policy_limit l[3] = {token(1, SEC), token(1, 5 * SEC), token(1, 3 * SEC)};
    fg_policy_rules r = rules_of(3, l);
    fg_policy_state s = fresh(&r);
    /* All at 0 left: the first of them answers. */
    expect_answer(check(&s, &r, T2024_US, 1), true, BY_LIMIT, 0, 1, 0, -1, 5 * SEC);
    expect_answer(check(&s, &r, T2024_US, 1), false, BY_LIMIT, 1, 1, 0, 5 * SEC, 5 * SEC);
    /* A second later the first allows again, the others still wait. */
    expect_answer(check(&s, &r, T2024_US + SEC_US, 1), false, BY_LIMIT, 1, 1, 0, 4 * SEC, 4 * SEC);
    expect_answer(check(&s, &r, T2024_US + 5 * SEC_US, 1), true, BY_LIMIT, 0, 1, 0, -1, 5 * SEC);

    /* Equal waits: the lowest index. */
    fg_policy_rules twins = two_limits(token(1, 2 * SEC), token(1, 2 * SEC));
    fg_policy_state t = fresh(&twins);
    check(&t, &twins, T2024_US, 1);
    expect_answer(check(&t, &twins, T2024_US, 1), false, BY_LIMIT, 0, 1, 0, 2 * SEC, 2 * SEC);
}

static void test_a_cost_that_can_never_fit(void **state) {
    (void)state;
    fg_policy_rules r = two_limits(token(10, SEC), fixed(5, MINUTE_US));
    fg_policy_state s = fresh(&r);
    expect_answer(check(&s, &r, T2024_US, 5), true, BY_LIMIT, 1, 5, 0, -1, 60 * SEC);
    /* The bucket would wait 1 s; the window can never take 6. */
    expect_answer(check(&s, &r, T2024_US, 6), false, BY_LIMIT, 1, 5, 0, -1, 60 * SEC);
    /* Both can never: the first. */
    expect_answer(check(&s, &r, T2024_US, 11), false, BY_LIMIT, 0, 10, 0, -1, 60 * SEC);
    expect_decision(peek_limit(&s, 0, T2024_US), true, 10, 5, -1, 5 * SEC);

    /* A wait and a never in the other order: the never still decides. */
    fg_policy_rules rev = two_limits(fixed(5, MINUTE_US), token(10, SEC));
    fg_policy_state v = fresh(&rev);
    check(&v, &rev, T2024_US, 4);
    expect_answer(check(&v, &rev, T2024_US, 7), false, BY_LIMIT, 0, 5, 1, -1, 60 * SEC);
}

static void test_an_allowance_names_the_limit_with_fewest_left(void **state) {
    (void)state;
    fg_policy_limit l[3] = {fixed(100, MINUTE_US), token(10, SEC), sliding(12, MINUTE_US)};
    fg_policy_rules r = rules_of(3, l);
    fg_policy_state s = fresh(&r);
    /* 100 - 4, 10 - 4, 12 - 4: the bucket; reset is the sliding window's
     * next window end. */
    expect_answer(check(&s, &r, T2024_US, 4), true, BY_LIMIT, 1, 10, 6, -1, 120 * SEC);
    /* 10 s later the bucket is full again: the sliding window, with 8. */
    expect_answer(check(&s, &r, T2024_US + 10 * SEC_US, 0), true, BY_LIMIT, 2, 12, 8, -1,
                  110 * SEC);
}

static void test_peeks_change_nothing(void **state) {
    (void)state;
    fg_policy_rules r = two_limits(token(2, SEC), fixed(1, MINUTE_US));
    r.penalty = penalty(60 * SEC_US, 1, 10 * SEC_US);
    fg_policy_state s = fresh(&r);
    fg_policy_state before = s;
    expect_answer(check(&s, &r, T2024_US, 0), true, BY_LIMIT, 1, 1, 1, -1, 0);
    assert_true(same_state(&s, &before));
    check(&s, &r, T2024_US, 1);
    before = s;
    /* A peek on a full window is answered as it stands and counts no
     * denial, even with a penalty after one. */
    fg_policy_decision o = check(&s, &r, T2024_US + SEC_US, 0);
    expect_answer(o, true, BY_LIMIT, 1, 1, 0, -1, 59 * SEC);
    assert_false(o.banned_now);
    assert_true(same_state(&s, &before));
    expect_i64(s.denials, 0);
}

/* -------------------------------------------------------------- penalty */

static void test_penalty_after_n_denials(void **state) {
    (void)state;
    fg_policy_rules r = one_limit(fixed(1, MINUTE_US));
    r.penalty = penalty(60 * SEC_US, 3, 10 * SEC_US);
    fg_policy_state s = fresh(&r);
    const int64_t t = T2024_US;

    expect_answer(check(&s, &r, t + 1 * SEC_US, 1), true, BY_LIMIT, 0, 1, 0, -1, 59 * SEC);
    fg_policy_decision o = check(&s, &r, t + 2 * SEC_US, 1);
    expect_answer(o, false, BY_LIMIT, 0, 1, 0, 58 * SEC, 58 * SEC);
    assert_true(o.changed);
    assert_false(o.banned_now);
    expect_i64(s.denials, 1);
    expect_i64(s.denials_start_us, t + 2 * SEC_US);
    /* The count keeps the state alive until its window ends, past the
     * fixed window's own end. */
    expect_i64(fg_policy_expires_at_us(&s, &r), t + 60 * SEC_US);
    s.limits[0].s.fixed.count = 0;
    expect_i64(fg_policy_expires_at_us(&s, &r), t + 12 * SEC_US);
    s.limits[0].s.fixed.count = 1;
    check(&s, &r, t + 3 * SEC_US, 1);
    expect_i64(s.denials, 2);
    expect_i64(s.denials_start_us, t + 2 * SEC_US);

    /* The third bans, and answers the ban's end, later than the window's. */
    o = check(&s, &r, t + 4 * SEC_US, 1);
    expect_answer(o, false, BY_LIMIT, 0, 1, 0, 60 * SEC, 60 * SEC);
    assert_true(o.banned_now);
    expect_i64(s.banned_until_us, t + 64 * SEC_US);
    expect_i64(s.denials, 0);
    expect_i64(s.denials_start_us, 0);
    expect_i64(fg_policy_expires_at_us(&s, &r), t + 64 * SEC_US);

    /* Banned: the penalty answers, counts nothing, charges nothing, and
     * bans once. Its reset is the later of the ban and the window. */
    fg_policy_state before = s;
    o = check(&s, &r, t + 5 * SEC_US, 1);
    expect_answer(o, false, BY_PENALTY, 0, 0, 0, 59 * SEC, 59 * SEC);
    assert_false(o.banned_now);
    assert_false(o.changed);
    expect_answer(check(&s, &r, t + 5 * SEC_US, 0), false, BY_PENALTY, 0, 0, 0, 59 * SEC, 59 * SEC);
    assert_true(same_state(&s, &before));

    /* In the next window the limit would allow, but the ban holds. */
    expect_answer(check(&s, &r, t + 61 * SEC_US, 1), false, BY_PENALTY, 0, 0, 0, 3 * SEC, 3 * SEC);
    expect_i64(s.limits[0].s.fixed.window_start_us, t);
    /* The ban's last microsecond, then its end. */
    expect_answer(check(&s, &r, t + 64 * SEC_US - 1, 1), false, BY_PENALTY, 0, 0, 0, US, US);
    expect_answer(check(&s, &r, t + 64 * SEC_US, 1), true, BY_LIMIT, 0, 1, 0, -1, 56 * SEC);
}

static void test_the_denial_window_expires(void **state) {
    (void)state;
    fg_policy_rules r = one_limit(fixed(1, MINUTE_US));
    r.penalty = penalty(60 * SEC_US, 3, 10 * SEC_US);
    fg_policy_state s = fresh(&r);
    const int64_t t = T2024_US;
    check(&s, &r, t + 1 * SEC_US, 1);
    check(&s, &r, t + 2 * SEC_US, 1);
    check(&s, &r, t + 12 * SEC_US - 1, 1); /* the window's last microsecond */
    expect_i64(s.denials, 2);
    expect_i64(s.denials_start_us, t + 2 * SEC_US);

    fg_policy_state twin = s;
    /* At start + within the count starts again. */
    fg_policy_decision o = check(&s, &r, t + 12 * SEC_US, 1);
    assert_false(o.banned_now);
    expect_i64(s.denials, 1);
    expect_i64(s.denials_start_us, t + 12 * SEC_US);
    /* Within it, the third bans. */
    o = check(&twin, &r, t + 12 * SEC_US - 1, 1);
    assert_true(o.banned_now);
    expect_i64(twin.banned_until_us, t + 72 * SEC_US - 1);

    check(&s, &r, t + 13 * SEC_US, 1);
    o = check(&s, &r, t + 14 * SEC_US, 1);
    assert_true(o.banned_now);
    expect_i64(s.banned_until_us, t + 74 * SEC_US);
}

static void test_penalty_after_one_and_a_cost_that_never_fits(void **state) {
    (void)state;
    fg_policy_rules r = one_limit(token(5, SEC));
    r.penalty = penalty(30 * SEC_US, 1, 30 * SEC_US);
    fg_policy_state s = fresh(&r);
    /* A request that can never fit is a denial too; its retry stays -1. */
    fg_policy_decision o = check(&s, &r, T2024_US, 6);
    expect_answer(o, false, BY_LIMIT, 0, 5, 5, -1, 30 * SEC);
    assert_true(o.banned_now);
    expect_i64(s.banned_until_us, T2024_US + 30 * SEC_US);
}

static void test_a_ban_shorter_than_the_limit_wait(void **state) {
    (void)state;
    fg_policy_rules r = one_limit(fixed(1, MINUTE_US));
    r.penalty = penalty(10 * SEC_US, 1, 10 * SEC_US);
    fg_policy_state s = fresh(&r);
    check(&s, &r, T2024_US, 1);
    fg_policy_decision o = check(&s, &r, T2024_US + SEC_US, 1);
    expect_answer(o, false, BY_LIMIT, 0, 1, 0, 59 * SEC, 59 * SEC);
    assert_true(o.banned_now);
    /* The penalty answers its own end, and the window's reset. */
    expect_answer(check(&s, &r, T2024_US + 2 * SEC_US, 1), false, BY_PENALTY, 0, 0, 0, 9 * SEC,
                  58 * SEC);
    expect_answer(check(&s, &r, T2024_US + 11 * SEC_US, 1), false, BY_LIMIT, 0, 1, 0, 49 * SEC,
                  49 * SEC);
}

static void test_without_penalty_denials_are_not_counted(void **state) {
    (void)state;
    fg_policy_rules r = one_limit(fixed(1, MINUTE_US));
    fg_policy_state s = fresh(&r);
    check(&s, &r, T2024_US, 1);
    fg_policy_decision o = check(&s, &r, T2024_US, 1);
    assert_false(o.allowed);
    assert_false(o.changed);
    expect_i64(s.denials, 0);
}

/* --------------------------------------------------------------- shadow */

static void test_shadow_mode_answers_allowed_and_evolves_as_enforced(void **state) {
    (void)state;
    fg_policy_rules enforced = two_limits(token(3, SEC), fixed(2, MINUTE_US));
    enforced.penalty = penalty(20 * SEC_US, 2, 10 * SEC_US);
    fg_policy_rules shadow = enforced;
    shadow.shadow = true;
    fg_policy_state e = fresh(&enforced), s = fresh(&shadow);
    const int64_t times[] = {0, 0, 0, 1, 2, 3, 4, 30, 35, 50, 70};
    int shadow_denials = 0, bans = 0;
    for (size_t i = 0; i < sizeof(times) / sizeof(times[0]); i++) {
        int64_t now = T2024_US + times[i] * SEC_US;
        fg_policy_decision de = check(&e, &enforced, now, 1);
        fg_policy_decision ds = check(&s, &shadow, now, 1);
        assert_true(ds.allowed);
        assert_true(ds.d.allowed);
        expect_i64(ds.shadow_denied, !de.allowed);
        assert_false(de.shadow_denied);
        expect_i64(ds.decided_by, de.decided_by);
        expect_i64(ds.limit_index, de.limit_index);
        expect_i64(ds.banned_now, de.banned_now);
        expect_i64(ds.changed, de.changed);
        expect_i64(ds.d.limit, de.d.limit);
        expect_i64(ds.d.remaining, de.d.remaining);
        expect_i64(ds.d.retry_after_ns, -1);
        if (!de.allowed) assert_true(de.d.retry_after_ns > 0);
        expect_i64(ds.d.reset_after_ns, de.d.reset_after_ns);
        assert_true(same_state(&e, &s));
        shadow_denials += ds.shadow_denied;
        bans += ds.banned_now;
    }
    /* Two allowed; denied at 0 (the window is full) and 1 (which bans until
     * 21); the ban holds at 2, 3 and 4; at 30 the window is still full
     * (count 1), at 35 it bans until 55, which holds at 50; at 70 a new
     * window allows. */
    expect_i64(shadow_denials, 8);
    expect_i64(bans, 2);
    expect_i64(s.banned_until_us, T2024_US + 55 * SEC_US);
    expect_i64(s.limits[1].s.fixed.count, 1);
    expect_i64(s.limits[1].s.fixed.window_start_us, T2024_US + MINUTE_US);
}

/* ------------------------------------------------------------- carrying */

/* Carries s over to r at now, checks the result is storable and stays put
 * when carried over again. */
static bool carry(fg_policy_state *s, const fg_policy_rules *r, int64_t now_us) {
    fg_policy_state out, again;
    bool changed = fg_policy_rescale(s, r, now_us, &out);
    assert_true(fg_policy_state_storable(&out));
    expect_i64(changed, !same_state(s, &out));
    assert_false(fg_policy_rescale(&out, r, now_us, &again));
    assert_true(same_state(&out, &again));
    *s = out;
    return changed;
}

static void test_a_bucket_keeps_its_used_units(void **state) {
    (void)state;
    fg_policy_rules r = one_limit(token(10, SEC));
    fg_policy_state s = fresh(&r);
    check(&s, &r, T2024_US, 7);
    fg_policy_state used = s;

    fg_policy_rules bigger = one_limit(token(100, SEC));
    assert_true(carry(&s, &bigger, T2024_US));
    expect_i64(s.limits[0].limit.p.bucket.capacity, 100);
    expect_i64(s.limits[0].s.tat_ns, T2024_US * US + 7 * SEC);
    expect_decision(peek_limit(&s, 0, T2024_US), true, 100, 93, -1, 7 * SEC);

    /* Below what was used: empty, not in debt, and refilling from there. */
    s = used;
    fg_policy_rules smaller = one_limit(token(5, SEC));
    assert_true(carry(&s, &smaller, T2024_US));
    expect_i64(s.limits[0].s.tat_ns, T2024_US * US + 5 * SEC);
    expect_decision(peek_limit(&s, 0, T2024_US), true, 5, 0, -1, 5 * SEC);
    expect_decision(peek_limit(&s, 0, T2024_US + SEC_US), true, 5, 1, -1, 4 * SEC);

    /* The same kind of bucket under another name starts full. */
    s = used;
    fg_policy_rules leaky = one_limit(bucket(FG_POLICY_LEAKY, 10, SEC));
    assert_true(carry(&s, &leaky, T2024_US));
    expect_i64(s.limits[0].limit.algorithm, FG_POLICY_LEAKY);
    expect_i64(s.limits[0].s.tat_ns, 0);
}

static void test_a_rate_change_keeps_used_units(void **state) {
    (void)state;
    fg_policy_rules r = one_limit(token(10, 100 * MS));
    fg_policy_state s = fresh(&r);
    check(&s, &r, T2024_US, 7);
    fg_policy_rules faster = one_limit(token(10, 50 * MS));
    carry(&s, &faster, T2024_US);
    expect_i64(s.limits[0].s.tat_ns, T2024_US * US + 350 * MS);
    expect_decision(peek_limit(&s, 0, T2024_US), true, 10, 3, -1, 350 * MS);

    /* Half a unit refilled: 6.5 units used at 1 s become 6.5 at 2 s. */
    fg_policy_rules g = one_limit(bucket(FG_POLICY_GCRA, 10, SEC));
    fg_policy_state u = fresh(&g);
    check(&u, &g, T2024_US, 7);
    fg_policy_rules slower = one_limit(bucket(FG_POLICY_GCRA, 10, 2 * SEC));
    const int64_t now = T2024_US + SEC_US / 2;
    carry(&u, &slower, now);
    expect_i64(u.limits[0].s.tat_ns, now * US + 13 * SEC);
    expect_decision(peek_limit(&u, 0, now), true, 10, 3, -1, 13 * SEC);

    /* Used time is scaled rounding down: 1 ns at 3 ns per unit is 2/3 ns
     * at 2 ns per unit, so nothing is used any more. */
    fg_policy_rules fine = one_limit(token(10, 3));
    fg_policy_state f = fresh(&fine);
    f.limits[0].s.tat_ns = T2024_US * US + 1;
    fg_policy_rules finer = one_limit(token(10, 2));
    carry(&f, &finer, T2024_US);
    expect_i64(f.limits[0].s.tat_ns, 0);

    /* A bucket already full again comes out without state. */
    fg_policy_state v = fresh(&r);
    check(&v, &r, T2024_US, 1);
    carry(&v, &faster, T2024_US + SEC_US);
    expect_i64(v.limits[0].s.tat_ns, 0);
}

static void test_a_fixed_window_keeps_its_count(void **state) {
    (void)state;
    fg_policy_rules r = one_limit(fixed(10, MINUTE_US));
    fg_policy_state s = fresh(&r);
    const int64_t now = T2024_US + 15 * SEC_US;
    check(&s, &r, now, 8);
    fg_policy_state used = s;

    /* The same window: the count stays, the new limit applies to it. */
    fg_policy_rules lower = one_limit(fixed(5, MINUTE_US));
    assert_true(carry(&s, &lower, now));
    expect_i64(s.limits[0].s.fixed.window_start_us, T2024_US);
    expect_i64(s.limits[0].s.fixed.count, 8);
    expect_answer(check(&s, &lower, now, 1), false, BY_LIMIT, 0, 5, 0, 45 * SEC, 45 * SEC);
    s = used;
    fg_policy_rules higher = one_limit(fixed(20, MINUTE_US));
    carry(&s, &higher, now);
    expect_answer(check(&s, &higher, now, 0), true, BY_LIMIT, 0, 20, 12, -1, 45 * SEC);

    /* A shorter window: the count moves into the one holding now. */
    s = used;
    fg_policy_rules shorter = one_limit(fixed(10, 10 * SEC_US));
    carry(&s, &shorter, now);
    expect_i64(s.limits[0].s.fixed.window_start_us, T2024_US + 10 * SEC_US);
    expect_i64(s.limits[0].s.fixed.count, 8);
    expect_answer(check(&s, &shorter, now, 0), true, BY_LIMIT, 0, 10, 2, -1, 5 * SEC);
    expect_answer(check(&s, &shorter, T2024_US + 20 * SEC_US, 0), true, BY_LIMIT, 0, 10, 10, -1, 0);

    /* A longer one. */
    s = used;
    fg_policy_rules longer = one_limit(fixed(10, 2 * MINUTE_US));
    carry(&s, &longer, now);
    expect_i64(s.limits[0].s.fixed.window_start_us, T2024_US);
    expect_i64(s.limits[0].s.fixed.count, 8);

    /* The same window length keeps even a window that has ended: the core
     * sees it as empty anyway. */
    s = used;
    carry(&s, &lower, T2024_US + 2 * MINUTE_US);
    expect_i64(s.limits[0].s.fixed.window_start_us, T2024_US);
    expect_i64(s.limits[0].s.fixed.count, 8);
    expect_answer(check(&s, &lower, T2024_US + 2 * MINUTE_US, 0), true, BY_LIMIT, 0, 5, 5, -1, 0);

    /* Another length carries nothing from a window that has ended. */
    s = used;
    carry(&s, &shorter, T2024_US + MINUTE_US);
    expect_i64(s.limits[0].s.fixed.window_start_us, 0);
    expect_i64(s.limits[0].s.fixed.count, 0);
}

static void test_a_sliding_window_folds_its_estimate(void **state) {
    (void)state;
    fg_policy_rules r = one_limit(sliding(20, MINUTE_US));
    fg_policy_state s = fresh(&r);
    s.limits[0].s.sliding = (fg_sliding_state){T2024_US, 3, 10};
    fg_policy_state used = s;

    /* 45 s into the window: 10 * 15 / 60 = 2.5, rounded up, plus 3. */
    fg_policy_rules half = one_limit(sliding(20, 30 * SEC_US));
    const int64_t now = T2024_US + 45 * SEC_US;
    carry(&s, &half, now);
    expect_i64(s.limits[0].s.sliding.window_start_us, T2024_US + 30 * SEC_US);
    expect_i64(s.limits[0].s.sliding.count, 6);
    expect_i64(s.limits[0].s.sliding.prev_count, 0);

    /* Same window, other limit: untouched. */
    s = used;
    fg_policy_rules lower = one_limit(sliding(4, MINUTE_US));
    carry(&s, &lower, now);
    expect_i64(s.limits[0].s.sliding.window_start_us, T2024_US);
    expect_i64(s.limits[0].s.sliding.count, 3);
    expect_i64(s.limits[0].s.sliding.prev_count, 10);

    /* The stored window is the previous one: its count weighs 45 / 60. */
    s = used;
    s.limits[0].s.sliding = (fg_sliding_state){T2024_US - MINUTE_US, 5, 2};
    carry(&s, &half, T2024_US + 15 * SEC_US);
    expect_i64(s.limits[0].s.sliding.window_start_us, T2024_US);
    expect_i64(s.limits[0].s.sliding.count, 4);

    /* Older than that: nothing. */
    s = used;
    s.limits[0].s.sliding = (fg_sliding_state){T2024_US - 2 * MINUTE_US, 5, 2};
    carry(&s, &half, T2024_US + 15 * SEC_US);
    expect_i64(s.limits[0].s.sliding.window_start_us, 0);
    expect_i64(s.limits[0].s.sliding.count, 0);
    expect_i64(s.limits[0].s.sliding.prev_count, 0);

    /* A clock behind the stored window: both counts at full weight. */
    s = used;
    carry(&s, &half, T2024_US - 10 * SEC_US);
    expect_i64(s.limits[0].s.sliding.window_start_us, T2024_US - 30 * SEC_US);
    expect_i64(s.limits[0].s.sliding.count, 13);
}

static void test_a_changed_algorithm_starts_full(void **state) {
    (void)state;
    fg_policy_rules r = two_limits(fixed(10, MINUTE_US), token(10, SEC));
    fg_policy_state s = fresh(&r);
    check(&s, &r, T2024_US, 4);
    fg_policy_rules swapped = two_limits(sliding(10, MINUTE_US), bucket(FG_POLICY_GCRA, 10, SEC));
    carry(&s, &swapped, T2024_US);
    expect_i64(s.limits[0].limit.algorithm, FG_POLICY_SLIDING);
    expect_i64(s.limits[0].s.sliding.count, 0);
    expect_i64(s.limits[1].limit.algorithm, FG_POLICY_GCRA);
    expect_i64(s.limits[1].s.tat_ns, 0);
    expect_i64(fg_policy_expires_at_us(&s, &swapped), 0);
}

static void test_limits_added_and_removed(void **state) {
    (void)state;
    fg_policy_rules r = two_limits(token(10, SEC), fixed(10, MINUTE_US));
    fg_policy_state s = fresh(&r);
    check(&s, &r, T2024_US, 4);
    fg_policy_state used = s;

    fg_policy_rules first = one_limit(token(10, SEC));
    carry(&s, &first, T2024_US);
    expect_i64(s.nlimits, 1);
    expect_i64(s.limits[0].s.tat_ns, T2024_US * US + 4 * SEC);

    fg_policy_limit l[3] = {token(10, SEC), fixed(10, MINUTE_US), sliding(3, SEC_US)};
    fg_policy_rules three = rules_of(3, l);
    s = used;
    carry(&s, &three, T2024_US);
    expect_i64(s.nlimits, 3);
    expect_i64(s.limits[0].s.tat_ns, T2024_US * US + 4 * SEC);
    expect_i64(s.limits[1].s.fixed.count, 4);
    expect_i64(s.limits[2].s.sliding.count, 0);
    expect_answer(check(&s, &three, T2024_US, 0), true, BY_LIMIT, 2, 3, 3, -1, 60 * SEC);
}

static void test_a_ban_is_capped_or_lifted(void **state) {
    (void)state;
    fg_policy_rules r = one_limit(fixed(1, MINUTE_US));
    r.penalty = penalty(60 * SEC_US, 1, 10 * SEC_US);
    fg_policy_state s = fresh(&r);
    check(&s, &r, T2024_US, 1);
    check(&s, &r, T2024_US, 1);
    expect_i64(s.banned_until_us, T2024_US + 60 * SEC_US);
    fg_policy_state banned = s;

    fg_policy_rules shorter = r;
    shorter.penalty = penalty(10 * SEC_US, 1, 10 * SEC_US);
    assert_true(carry(&s, &shorter, T2024_US + 5 * SEC_US));
    expect_i64(s.banned_until_us, T2024_US + 15 * SEC_US);

    s = banned;
    fg_policy_rules longer = r;
    longer.penalty = penalty(120 * SEC_US, 5, 50 * SEC_US);
    assert_false(carry(&s, &longer, T2024_US + 5 * SEC_US));
    expect_i64(s.banned_until_us, T2024_US + 60 * SEC_US);

    s = banned;
    fg_policy_rules none = r;
    none.penalty = penalty(0, 0, 0);
    assert_true(carry(&s, &none, T2024_US + 5 * SEC_US));
    expect_i64(s.banned_until_us, 0);
    expect_answer(check(&s, &none, T2024_US + 5 * SEC_US, 1), false, BY_LIMIT, 0, 1, 0, 55 * SEC,
                  55 * SEC);

    /* A running count is kept under a new penalty, forgotten without one. */
    fg_policy_rules counting = r;
    counting.penalty = penalty(60 * SEC_US, 3, 10 * SEC_US);
    fg_policy_state c = fresh(&counting);
    check(&c, &counting, T2024_US, 1);
    check(&c, &counting, T2024_US + SEC_US, 1);
    expect_i64(c.denials, 1);
    fg_policy_state counted = c;
    assert_false(carry(&c, &longer, T2024_US + 2 * SEC_US));
    expect_i64(c.denials, 1);
    expect_i64(c.denials_start_us, T2024_US + SEC_US);
    c = counted;
    assert_true(carry(&c, &none, T2024_US + 2 * SEC_US));
    expect_i64(c.denials, 0);
    expect_i64(c.denials_start_us, 0);
}

static void test_unchanged_rules_change_nothing(void **state) {
    (void)state;
    fg_policy_limit l[4] = {token(10, SEC), fixed(3, MINUTE_US), sliding(5, 10 * SEC_US),
                            bucket(FG_POLICY_LEAKY, 4, 250 * MS)};
    fg_policy_rules r = rules_of(4, l);
    r.penalty = penalty(30 * SEC_US, 2, 5 * SEC_US);
    fg_policy_state s = fresh(&r);
    for (int i = 0; i < 12; i++) {
        int64_t now = T2024_US + i * 700 * 1000LL;
        fg_policy_state out;
        assert_false(fg_policy_rescale(&s, &r, now, &out));
        assert_true(same_state(&s, &out));
        check(&s, &r, now, 1 + i % 2);
    }
    assert_true(s.banned_until_us > 0);
    /* The result may be written over its input. */
    fg_policy_rules other = r;
    other.limits[0] = token(20, SEC);
    fg_policy_state before = s;
    const int64_t later = T2024_US + 8 * SEC_US;
    /* 3 units taken before the ban, refilled by now. */
    expect_i64(s.limits[0].s.tat_ns, T2024_US * US + 3 * SEC);
    assert_true(fg_policy_rescale(&s, &other, later, &s));
    expect_i64(s.limits[0].limit.p.bucket.capacity, 20);
    expect_i64(s.limits[0].s.tat_ns, 0);
    expect_i64(s.limits[1].s.fixed.count, before.limits[1].s.fixed.count);
    expect_i64(s.banned_until_us, before.banned_until_us);
}

/* ------------------------------------------------------------ expiring */

static void test_expires_when_everything_is_neutral(void **state) {
    (void)state;
    fg_policy_limit l[3] = {token(10, SEC), fixed(3, MINUTE_US), sliding(5, MINUTE_US)};
    fg_policy_rules r = rules_of(3, l);
    fg_policy_state s = fresh(&r);
    expect_i64(fg_policy_expires_at_us(&s, &r), 0);

    s.limits[0].s.tat_ns = T2024_US * US + 7 * SEC + 1; /* rounded up */
    expect_i64(fg_policy_expires_at_us(&s, &r), T2024_US + 7 * SEC_US + 1);
    s.limits[1].s.fixed = (fg_fixed_state){T2024_US, 2};
    expect_i64(fg_policy_expires_at_us(&s, &r), T2024_US + MINUTE_US);
    s.limits[2].s.sliding = (fg_sliding_state){T2024_US, 0, 2};
    expect_i64(fg_policy_expires_at_us(&s, &r), T2024_US + MINUTE_US);
    s.limits[2].s.sliding = (fg_sliding_state){T2024_US, 1, 2};
    expect_i64(fg_policy_expires_at_us(&s, &r), T2024_US + 2 * MINUTE_US);
    s.banned_until_us = T2024_US + 5 * MINUTE_US;
    expect_i64(fg_policy_expires_at_us(&s, &r), T2024_US + 5 * MINUTE_US);

    /* After real traffic: the last unit of the bucket. */
    fg_policy_rules b = one_limit(token(10, 3 * MS / 2));
    fg_policy_state t = fresh(&b);
    check(&t, &b, T2024_US, 3);
    expect_i64(fg_policy_expires_at_us(&t, &b), T2024_US + 4500);
}

/* -------------------------------------------------------- serialization */

/* A state of every shape: a bucket, a fixed and a sliding window, a ban
 * and a count. 2 + 25 + 33 + 41 + 24 bytes (the penalty's integers are
 * there since they are not all 0). */
static fg_policy_state sample_state(void) {
    fg_policy_limit l[3] = {token(10, SEC), fixed(3, MINUTE_US), sliding(5, MINUTE_US)};
    fg_policy_rules r = rules_of(3, l);
    fg_policy_state s = fresh(&r);
    s.limits[0].s.tat_ns = T2024_US * US + 123;
    s.limits[1].s.fixed = (fg_fixed_state){T2024_US, 2};
    s.limits[2].s.sliding = (fg_sliding_state){T2024_US, 1, 4};
    s.banned_until_us = T2024_US + 99;
    s.denials = 2;
    s.denials_start_us = T2024_US + 7;
    return s;
}

#define SAMPLE_SIZE 125
/* Offsets in the sample's bytes. */
#define AT_BUCKET  2
#define AT_FIXED   (AT_BUCKET + 25)
#define AT_SLIDING (AT_FIXED + 33)
#define AT_PENALTY (AT_SLIDING + 41)

static void put_i64(uint8_t *p, int64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)((uint64_t)v >> (8 * i));
}

static void test_serialized_layout(void **state) {
    (void)state;
    fg_policy_state s = sample_state();
    assert_true(fg_policy_state_storable(&s));
    expect_i64(fg_policy_state_serialized_size(&s), SAMPLE_SIZE);
    uint8_t b[SAMPLE_SIZE], expected[SAMPLE_SIZE];
    fg_policy_state_serialize(&s, b);

    memset(expected, 0, sizeof(expected));
    expected[0] = 2;        /* version */
    expected[1] = 3 | 0x80; /* nlimits, and the penalty's integers follow */
    expected[AT_BUCKET] = FG_POLICY_TOKEN;
    put_i64(expected + AT_BUCKET + 1, SEC);
    put_i64(expected + AT_BUCKET + 9, 10);
    put_i64(expected + AT_BUCKET + 17, T2024_US * US + 123);
    expected[AT_FIXED] = FG_POLICY_FIXED;
    put_i64(expected + AT_FIXED + 1, 3);
    put_i64(expected + AT_FIXED + 9, MINUTE_US);
    put_i64(expected + AT_FIXED + 17, T2024_US);
    put_i64(expected + AT_FIXED + 25, 2);
    expected[AT_SLIDING] = FG_POLICY_SLIDING;
    put_i64(expected + AT_SLIDING + 1, 5);
    put_i64(expected + AT_SLIDING + 9, MINUTE_US);
    put_i64(expected + AT_SLIDING + 17, T2024_US);
    put_i64(expected + AT_SLIDING + 25, 1);
    put_i64(expected + AT_SLIDING + 33, 4);
    put_i64(expected + AT_PENALTY, T2024_US + 99);
    put_i64(expected + AT_PENALTY + 8, 2);
    put_i64(expected + AT_PENALTY + 16, T2024_US + 7);
    assert_memory_equal(b, expected, SAMPLE_SIZE);

    fg_policy_state loaded;
    expect_status(fg_policy_state_deserialize(&loaded, b, SAMPLE_SIZE), FG_OK);
    assert_true(same_state(&loaded, &s));
    expect_i64(loaded.limits[2].s.sliding.prev_count, 4);
    expect_round_trip(&s);
}

/* Loads bytes that must be refused, and checks *s was not touched. */
static void expect_refused(const uint8_t *b, size_t len) {
    fg_policy_state s, before;
    memset(&s, 0x3c, sizeof(s));
    memcpy(&before, &s, sizeof(s));
    expect_status(fg_policy_state_deserialize(&s, b, len), FG_EINVAL);
    assert_memory_equal(&s, &before, sizeof(s));
}

static void expect_loads(const uint8_t *b, size_t len) {
    fg_policy_state s;
    uint8_t again[512];
    expect_status(fg_policy_state_deserialize(&s, b, len), FG_OK);
    expect_i64(fg_policy_state_serialized_size(&s), len);
    fg_policy_state_serialize(&s, again);
    assert_memory_equal(b, again, len);
}

/* The sample with one 64-bit field replaced. */
static void expect_field(size_t at, int64_t v, bool loads) {
    fg_policy_state s = sample_state();
    uint8_t b[SAMPLE_SIZE];
    fg_policy_state_serialize(&s, b);
    put_i64(b + at, v);
    if (loads)
        expect_loads(b, SAMPLE_SIZE);
    else
        expect_refused(b, SAMPLE_SIZE);
}

static void expect_byte(size_t at, uint8_t v, bool loads) {
    fg_policy_state s = sample_state();
    uint8_t b[SAMPLE_SIZE];
    fg_policy_state_serialize(&s, b);
    b[at] = v;
    if (loads)
        expect_loads(b, SAMPLE_SIZE);
    else
        expect_refused(b, SAMPLE_SIZE);
}

static void test_corrupt_fields_are_refused(void **state) {
    (void)state;
    expect_byte(0, 0, false); /* version */
    expect_byte(0, 1, false); /* version 1 has no flag in its count */
    expect_byte(0, 3, false);
    expect_byte(1, 3, false); /* no penalty flagged: its bytes left over */
    expect_byte(1, 0, false); /* nlimits */
    expect_byte(1, 2, false);
    expect_byte(1, 4, false);
    expect_byte(1, 9, false);
    expect_byte(AT_BUCKET, 5, false); /* algorithm */
    expect_byte(AT_BUCKET, 255, false);
    expect_byte(AT_BUCKET, FG_POLICY_LEAKY, true);
    expect_byte(AT_BUCKET, FG_POLICY_GCRA, true);
    /* The last limit read with a shorter state leaves bytes over. (Earlier
     * in the payload such a change may well read as another valid state:
     * the every-byte test covers those.) */
    expect_byte(AT_SLIDING, FG_POLICY_FIXED, false);
    expect_byte(AT_SLIDING, FG_POLICY_TOKEN, false);

    expect_field(AT_BUCKET + 1, 0, false); /* emission_ns */
    expect_field(AT_BUCKET + 1, -1, false);
    expect_field(AT_BUCKET + 1, ((int64_t)1 << 62) + 1, false);
    expect_field(AT_BUCKET + 1, (int64_t)1 << 62, true);
    expect_field(AT_BUCKET + 9, 0, false); /* capacity */
    expect_field(AT_BUCKET + 9, INT64_MIN, false);
    expect_field(AT_BUCKET + 17, -1, false); /* tat */
    expect_field(AT_BUCKET + 17, 0, true);

    expect_field(AT_FIXED + 1, 0, false); /* limit */
    expect_field(AT_FIXED + 9, 0, false); /* window */
    expect_field(AT_FIXED + 9, 1000000000000001LL, false);
    expect_field(AT_FIXED + 9, 1000000000000000LL, true);
    expect_field(AT_FIXED + 17, -1, false); /* start */
    expect_field(AT_FIXED + 25, -1, false); /* count */
    expect_field(AT_FIXED + 25, 0, false);  /* empty, with a start */

    expect_field(AT_SLIDING + 1, -1, false);
    expect_field(AT_SLIDING + 9, 0, false);
    expect_field(AT_SLIDING + 17, -1, false);
    expect_field(AT_SLIDING + 25, -1, false);
    expect_field(AT_SLIDING + 33, -1, false);
    expect_field(AT_SLIDING + 25, 0, true); /* only the previous window */

    expect_field(AT_PENALTY, -1, false); /* banned_until */
    expect_field(AT_PENALTY, 0, true);
    expect_field(AT_PENALTY + 8, -1, false);  /* denials */
    expect_field(AT_PENALTY + 8, 0, false);   /* a start without denials */
    /* A count above any `after`: the next denial would overflow it. */
    expect_field(AT_PENALTY + 8, FG_POLICY_MAX_AFTER + 1, false);
    expect_field(AT_PENALTY + 8, INT64_MAX, false);
    expect_field(AT_PENALTY + 8, FG_POLICY_MAX_AFTER, true);
    expect_field(AT_PENALTY + 16, -1, false); /* start */
    expect_field(AT_PENALTY + 16, 0, true);
    {
        /* Flagged, but all 0: written without them, so not ours. */
        fg_policy_state z = sample_state();
        uint8_t zb[SAMPLE_SIZE];
        fg_policy_state_serialize(&z, zb);
        memset(zb + AT_PENALTY, 0, 24);
        expect_refused(zb, SAMPLE_SIZE);
    }

    /* Empty states are all zeros. */
    fg_policy_state s = sample_state();
    uint8_t b[SAMPLE_SIZE];
    s.limits[1].s.fixed = (fg_fixed_state){0, 0};
    s.limits[2].s.sliding = (fg_sliding_state){0, 0, 0};
    s.denials = 0;
    s.denials_start_us = 0;
    fg_policy_state_serialize(&s, b);
    expect_loads(b, SAMPLE_SIZE);
    put_i64(b + AT_SLIDING + 17, 5);
    expect_refused(b, SAMPLE_SIZE);

    expect_refused(b, 0);
    fg_policy_state untouched;
    expect_status(fg_policy_state_deserialize(&untouched, NULL, 0), FG_EINVAL);
}

/* The penalty's integers are left out while all 0: a bucket and a fixed
 * window, the two-limit policy of the benchmarks, take 60 bytes. */
static void test_a_state_without_penalty_leaves_its_fields_out(void **state) {
    (void)state;
    fg_policy_limit l[2] = {token(10, SEC), fixed(3, MINUTE_US)};
    fg_policy_rules r = rules_of(2, l);
    fg_policy_state s = fresh(&r);
    s.limits[0].s.tat_ns = T2024_US * US + 123;
    s.limits[1].s.fixed = (fg_fixed_state){T2024_US, 2};
    expect_i64(fg_policy_state_serialized_size(&s), 60);
    uint8_t b[60];
    fg_policy_state_serialize(&s, b);
    expect_i64(b[0], 2);
    expect_i64(b[1], 2); /* no flag */
    expect_loads(b, 60);
    fg_policy_state loaded;
    expect_i64(fg_policy_state_unpack(&loaded, b), 60);
    expect_i64(fg_policy_state_packed_size(b), 60);
    assert_true(same_state(&loaded, &s));
    for (size_t len = 0; len < 60; len++)
        expect_refused(b, len);
}

/* Version 1 (an older release's RDB files, AOF and FG.PLSTATE effects):
 * the penalty's three integers always there, no flag. It loads, and is
 * written again in the current version. */
static void test_version_1_still_loads(void **state) {
    (void)state;
    fg_policy_state s = sample_state();
    uint8_t v1[SAMPLE_SIZE], v2[SAMPLE_SIZE];
    fg_policy_state_serialize(&s, v1);
    v1[0] = 1;
    v1[1] = 3;
    fg_policy_state loaded;
    expect_status(fg_policy_state_deserialize(&loaded, v1, SAMPLE_SIZE), FG_OK);
    assert_true(same_state(&loaded, &s));
    fg_policy_state_serialize(&loaded, v2);
    expect_i64(v2[0], 2);
    expect_i64(fg_policy_state_packed_size(v1), SAMPLE_SIZE);
    for (size_t len = 0; len < SAMPLE_SIZE; len++)
        expect_refused(v1, len);

    /* Without a penalty, version 1 still wrote 24 zero bytes. */
    fg_policy_state quiet = sample_state();
    quiet.banned_until_us = quiet.denials = quiet.denials_start_us = 0;
    uint8_t q1[SAMPLE_SIZE];
    fg_policy_state_serialize(&quiet, q1);
    expect_i64(fg_policy_state_serialized_size(&quiet), SAMPLE_SIZE - 24);
    q1[0] = 1;
    q1[1] = 3;
    memset(q1 + AT_PENALTY, 0, 24);
    expect_status(fg_policy_state_deserialize(&loaded, q1, SAMPLE_SIZE), FG_OK);
    assert_true(same_state(&loaded, &quiet));
    expect_i64(fg_policy_state_serialized_size(&loaded), SAMPLE_SIZE - 24);
    expect_refused(q1, SAMPLE_SIZE - 24);
}

static void test_truncated_and_extended_payloads_are_refused(void **state) {
    (void)state;
    fg_policy_state s = sample_state();
    uint8_t b[SAMPLE_SIZE + 1];
    fg_policy_state_serialize(&s, b);
    b[SAMPLE_SIZE] = 0;
    for (size_t len = 0; len < SAMPLE_SIZE; len++)
        expect_refused(b, len);
    expect_refused(b, SAMPLE_SIZE + 1);
    expect_loads(b, SAMPLE_SIZE);
}

/* Every byte changed in several ways: refused untouched, or loaded into a
 * state that gives back exactly these bytes. */
static void test_every_mutated_byte_is_refused_or_round_trips(void **state) {
    (void)state;
    fg_policy_state s = sample_state();
    uint8_t original[SAMPLE_SIZE], b[SAMPLE_SIZE];
    fg_policy_state_serialize(&s, original);
    const uint8_t flips[] = {0x01, 0x02, 0x10, 0x80, 0xff};
    int refused = 0, loaded = 0;
    for (size_t i = 0; i < SAMPLE_SIZE; i++) {
        for (size_t f = 0; f < sizeof(flips); f++) {
            memcpy(b, original, SAMPLE_SIZE);
            b[i] ^= flips[f];
            fg_policy_state out, before;
            memset(&out, 0x77, sizeof(out));
            memcpy(&before, &out, sizeof(out));
            if (fg_policy_state_deserialize(&out, b, SAMPLE_SIZE) == FG_OK) {
                expect_loads(b, SAMPLE_SIZE);
                loaded++;
            } else {
                assert_memory_equal(&out, &before, sizeof(out));
                refused++;
            }
        }
    }
    /* Every top byte of a 64-bit field flipped by 0x80 makes it negative,
     * which no field accepts: 3 + 4 + 5 + 3 such fields, and more. */
    assert_true(refused >= 15);
    assert_true(loaded > 0);
}

/* ------------------------------------------------------- a random model */

typedef struct charge {
    int64_t at_us, cost;
} charge;

#define MAX_STEPS 160

static fg_policy_limit random_limit(test_rng *rng) {
    switch (rng_range(rng, 0, 4)) {
    case 0: return token(rng_range(rng, 1, 8), rng_range(rng, 1, 2000) * MS / 4);
    case 1: return bucket(FG_POLICY_LEAKY, rng_range(rng, 1, 8), rng_range(rng, 1, 2000) * MS);
    case 2: return bucket(FG_POLICY_GCRA, rng_range(rng, 1, 8), rng_range(rng, 1, 3000000));
    case 3: return fixed(rng_range(rng, 1, 10), rng_range(rng, 1, 5000) * 1000);
    default: return sliding(rng_range(rng, 1, 10), rng_range(rng, 1, 5000) * 1000);
    }
}

static fg_policy_rules random_rules(test_rng *rng) {
    fg_policy_limit l[FG_POLICY_MAX_LIMITS];
    uint32_t n = (uint32_t)rng_range(rng, 1, 4);
    for (uint32_t i = 0; i < n; i++)
        l[i] = random_limit(rng);
    fg_policy_rules r = rules_of(n, l);
    if (rng_range(rng, 0, 1))
        r.penalty = penalty(rng_range(rng, 1, 3000) * 1000, rng_range(rng, 1, 4),
                            rng_range(rng, 1, 5000) * 1000);
    r.shadow = rng_range(rng, 0, 4) == 0;
    assert_true(fg_policy_rules_valid(&r));
    return r;
}

/* Limit l alone never admits more than its own rule: a bucket no more than
 * its capacity plus what refilled over any interval, a window no more than
 * its limit in any window (the sliding one also counting the previous
 * window by its weight). `h` are the charges since the rules took effect,
 * in time order, the last one just made. */
static void expect_within_the_limit(const fg_policy_limit *l, const charge *h, int n) {
    int64_t now = h[n - 1].at_us;
    if (l->algorithm == FG_POLICY_FIXED || l->algorithm == FG_POLICY_SLIDING) {
        int64_t limit = l->p.fixed.limit, w = l->p.fixed.window_us;
        int64_t start = now - now % w, current = 0, previous = 0;
        for (int k = 0; k < n; k++) {
            if (h[k].at_us >= start)
                current += h[k].cost;
            else if (h[k].at_us >= start - w)
                previous += h[k].cost;
        }
        assert_true(current <= limit);
        if (l->algorithm == FG_POLICY_SLIDING)
            assert_true((__int128)previous * (w - (now - start)) + (__int128)current * w <=
                        (__int128)limit * w);
        return;
    }
    int64_t units = 0;
    for (int k = n - 1; k >= 0; k--) {
        units += h[k].cost;
        int64_t refilled = (now - h[k].at_us) * US / l->p.bucket.emission_ns;
        assert_true(units <= l->p.bucket.capacity + refilled);
    }
}

/* The penalty, modelled on its own from the requests' outcomes. */
typedef struct penalty_model {
    int64_t banned_until, denials, start;
} penalty_model;

static bool model_count_denial(penalty_model *m, const fg_policy_penalty *p, int64_t now) {
    if (p->ban_us == 0) return false;
    if (m->denials == 0 || now - m->start >= p->within_us) {
        m->denials = 0;
        m->start = now;
    }
    if (++m->denials < p->after) return false;
    m->banned_until = now + p->ban_us;
    m->denials = 0;
    m->start = 0;
    return true;
}

static void expect_same_limit_state(const fg_policy_limit_state *a,
                                    const fg_policy_limit_state *b) {
    fg_policy_rules r = one_limit(a->limit);
    fg_policy_state sa = fresh(&r), sb = fresh(&r);
    sa.limits[0] = *a;
    sb.limits[0] = *b;
    assert_true(same_state(&sa, &sb));
}

/* One request: the policy against each limit alone and the penalty model. */
static fg_policy_decision model_step(fg_policy_state *s, const fg_policy_rules *r,
                                     fg_policy_limit_state *solo, penalty_model *m, int64_t now,
                                     int64_t cost, charge *h, int *nh) {
    fg_policy_state cur = *s;
    fg_decision alone[FG_POLICY_MAX_LIMITS];
    fg_policy_limit_state alone_next[FG_POLICY_MAX_LIMITS];
    bool all_allow = true;
    for (uint32_t i = 0; i < r->nlimits; i++) {
        expect_same_limit_state(&solo[i], &cur.limits[i]);
        fg_policy_rules one = one_limit(r->limits[i]);
        fg_policy_state st = fresh(&one), nx;
        st.limits[0] = solo[i];
        fg_policy_decision o;
        expect_status(fg_policy_decide(&st, &one, now, cost, &o, &nx), FG_OK);
        alone[i] = o.d;
        alone_next[i] = nx.limits[0];
        all_allow = all_allow && o.d.allowed;
    }

    bool was_banned = m->banned_until > now;
    fg_policy_decision out = check(s, r, now, cost);
    bool enforced_allow = !was_banned && all_allow;
    expect_i64(out.allowed, enforced_allow || r->shadow);
    expect_i64(out.shadow_denied, !enforced_allow && r->shadow);
    expect_i64(out.decided_by, was_banned ? BY_PENALTY : BY_LIMIT);

    if (enforced_allow) {
        int64_t fewest = INT64_MAX;
        for (uint32_t i = 0; i < r->nlimits; i++) {
            if (alone[i].remaining < fewest) fewest = alone[i].remaining;
            if (cost > 0) solo[i] = alone_next[i];
        }
        expect_i64(out.d.remaining, fewest);
        expect_i64(alone[out.limit_index].remaining, fewest);
        if (cost > 0) {
            h[(*nh)++] = (charge){now, cost};
            for (uint32_t i = 0; i < r->nlimits; i++)
                expect_within_the_limit(&r->limits[i], h, *nh);
        }
    } else if (!was_banned) {
        /* The decider denied, and waits at least as long as any other. */
        const fg_decision *dd = &alone[out.limit_index];
        assert_false(dd->allowed);
        for (uint32_t i = 0; i < r->nlimits; i++)
            if (!alone[i].allowed && dd->retry_after_ns != -1)
                assert_true(alone[i].retry_after_ns != -1 &&
                            alone[i].retry_after_ns <= dd->retry_after_ns);
        bool bans = cost > 0 && model_count_denial(m, &r->penalty, now);
        expect_i64(out.banned_now, bans);
        expect_i64(out.d.limit, dd->limit);
        if (r->shadow)
            expect_i64(out.d.retry_after_ns, -1);
        else if (!bans)
            expect_i64(out.d.retry_after_ns, dd->retry_after_ns);
        else
            assert_true(out.d.retry_after_ns == -1 ||
                        out.d.retry_after_ns >= r->penalty.ban_us * US);
    } else {
        expect_i64(out.d.retry_after_ns, r->shadow ? -1 : (m->banned_until - now) * US);
    }
    for (uint32_t i = 0; i < r->nlimits; i++)
        expect_same_limit_state(&solo[i], &s->limits[i]);
    expect_i64(s->banned_until_us, m->banned_until);
    expect_i64(s->denials, m->denials);
    expect_i64(s->denials_start_us, m->start);
    expect_round_trip(s);
    return out;
}

static void test_random_traffic_against_each_limit_alone(void **state) {
    (void)state;
    test_rng rng = {20240101};
    static charge history[MAX_STEPS];
    int requests = 0, charged = 0, bans = 0, rescales = 0;
    for (int scenario = 0; scenario < 300; scenario++) {
        fg_policy_rules r = random_rules(&rng);
        fg_policy_state s = fresh(&r);
        fg_policy_limit_state solo[FG_POLICY_MAX_LIMITS];
        memcpy(solo, s.limits, sizeof(solo));
        penalty_model m = {0, 0, 0};
        int64_t now = T2024_US + rng_range(&rng, 0, 10 * SEC_US);
        int nh = 0;

        for (int step = 0; step < MAX_STEPS; step++) {
            now += rng_range(&rng, 0, 3) == 0 ? 0 : rng_range(&rng, 1, 400000);
            if (rng_range(&rng, 0, 40) == 0) {
                fg_policy_rules next = rng_range(&rng, 0, 1) ? random_rules(&rng) : r;
                next.limits[0] = random_limit(&rng);
                carry(&s, &next, now);
                expect_round_trip(&s);
                assert_true(s.banned_until_us <= now + next.penalty.ban_us ||
                            next.penalty.ban_us == 0);
                r = next;
                memcpy(solo, s.limits, sizeof(solo));
                m = (penalty_model){s.banned_until_us, s.denials, s.denials_start_us};
                nh = 0;
                rescales++;
            }
            int64_t cost = rng_range(&rng, 0, 4);
            fg_policy_decision o = model_step(&s, &r, solo, &m, now, cost, history, &nh);
            requests++;
            charged += o.allowed && !o.shadow_denied && cost > 0;
            bans += o.banned_now;
            int64_t expires = fg_policy_expires_at_us(&s, &r);
            assert_true(expires == 0 || expires >= s.banned_until_us);
        }
    }
    /* The scenarios reach every case. */
    assert_true(charged > 1000);
    assert_true(bans > 50);
    assert_true(rescales > 500);
    assert_true(requests == 300 * MAX_STEPS);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rules_valid),
        cmocka_unit_test(test_a_fresh_state_is_full_and_neutral),
        cmocka_unit_test(test_refuses_bad_arguments_and_overflow),
        cmocka_unit_test(test_a_denial_charges_no_limit),
        cmocka_unit_test(test_a_first_limit_denial_charges_the_second_nothing),
        cmocka_unit_test(test_the_longest_wait_decides),
        cmocka_unit_test(test_a_cost_that_can_never_fit),
        cmocka_unit_test(test_an_allowance_names_the_limit_with_fewest_left),
        cmocka_unit_test(test_peeks_change_nothing),
        cmocka_unit_test(test_penalty_after_n_denials),
        cmocka_unit_test(test_the_denial_window_expires),
        cmocka_unit_test(test_penalty_after_one_and_a_cost_that_never_fits),
        cmocka_unit_test(test_a_ban_shorter_than_the_limit_wait),
        cmocka_unit_test(test_without_penalty_denials_are_not_counted),
        cmocka_unit_test(test_shadow_mode_answers_allowed_and_evolves_as_enforced),
        cmocka_unit_test(test_a_bucket_keeps_its_used_units),
        cmocka_unit_test(test_a_rate_change_keeps_used_units),
        cmocka_unit_test(test_a_fixed_window_keeps_its_count),
        cmocka_unit_test(test_a_sliding_window_folds_its_estimate),
        cmocka_unit_test(test_a_changed_algorithm_starts_full),
        cmocka_unit_test(test_limits_added_and_removed),
        cmocka_unit_test(test_a_ban_is_capped_or_lifted),
        cmocka_unit_test(test_unchanged_rules_change_nothing),
        cmocka_unit_test(test_expires_when_everything_is_neutral),
        cmocka_unit_test(test_serialized_layout),
        cmocka_unit_test(test_corrupt_fields_are_refused),
        cmocka_unit_test(test_a_state_without_penalty_leaves_its_fields_out),
        cmocka_unit_test(test_version_1_still_loads),
        cmocka_unit_test(test_truncated_and_extended_payloads_are_refused),
        cmocka_unit_test(test_every_mutated_byte_is_refused_or_round_trips),
        cmocka_unit_test(test_random_traffic_against_each_limit_alone),
    };
    return cmocka_run_group_tests_name("policy", tests, NULL, NULL);
}
