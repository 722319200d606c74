/*
 * fuzz_limiters.c - a coverage-guided property test of every core algorithm.
 *
 * The input is read as a script: parameters, then steps of (time delta, cost).
 * Time mostly moves forward and sometimes steps back. After every decision the
 * fuzzer checks what must hold whatever the input:
 *
 *   - the reply is coherent: 0 <= remaining <= limit, retry_after >= -1,
 *     reset_after >= 0, retry_after is -1 exactly when allowed or when the
 *     cost exceeds the limit;
 *   - a denial and a peek change nothing;
 *   - a denied request would be allowed after waiting retry_after (nothing
 *     else happening in between);
 *   - every state written is one the loaders accept (storable);
 *   - nothing is ever over-admitted: a bucket admits at most capacity plus
 *     what refilled since the first admission, a fixed window at most limit
 *     per window, a sliding log at most limit in any window.
 *
 * Build: make fuzz (long run) or make fuzz-smoke (inside make test).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_input.h"
#include "fixed_window.h"
#include "gcra.h"
#include "sliding_log.h"
#include "sliding_window.h"

#define START_US 1700000000000000LL

/* A limit: usually small, sometimes near the 64-bit edge. */
static int64_t take_limit(reader *r) {
    if (take(r, 1) % 8 == 0) return INT64_MAX - take_range(r, 2, 0, 1000);
    return take_range(r, 2, 1, 1000);
}

/* A cost: usually a few units, sometimes up to the whole limit and past it. */
static int64_t take_cost(reader *r, int64_t limit) {
    uint64_t pick = take(r, 1) % 8;
    if (pick == 0) return limit - take_range(r, 1, 0, limit < 100 ? limit - 1 : 100);
    if (pick == 1) return limit < INT64_MAX - 2 ? limit + take_range(r, 1, 1, 2) : INT64_MAX;
    return take_range(r, 1, 0, limit < 3 ? limit : 3);
}

/* Moves time: mostly forward by up to ~2 windows, one step in 16 back. */
static int64_t next_time(reader *r, int64_t now, int64_t scale_us) {
    uint64_t step = take(r, 2);
    int64_t delta = (int64_t)(step % (uint64_t)(2 * scale_us + 1));
    if ((step >> 12) == 0xF) return now - delta / 4;
    return now + delta;
}

static void check_reply(const fg_decision *d, int64_t cost) {
    CHECK(d->remaining >= 0 && d->remaining <= d->limit);
    CHECK(d->reset_after_ns >= 0);
    if (d->allowed) CHECK(d->retry_after_ns == -1);
    else if (cost > d->limit) CHECK(d->retry_after_ns == -1);
    else CHECK(d->retry_after_ns >= 0);
}

static int64_t retry_us(const fg_decision *d) {
    return d->retry_after_ns / 1000 + (d->retry_after_ns % 1000 > 0);
}

static void fuzz_gcra(reader *r) {
    fg_gcra_params p = {take_range(r, 4, 1, 5000000000LL), take_range(r, 2, 1, 1000)};
    bool huge_costs = take(r, 1) % 8 == 0;
    int64_t now = START_US, tat = 0, first = -1, admitted = 0;
    int64_t horizon = now;
    for (int steps = 0; r->left > 0 && steps < 2000; steps++) {
        now = next_time(r, now, p.emission_ns / 1000 + 1);
        int64_t cost = huge_costs ? take_cost(r, INT64_MAX - 3) : take_range(r, 1, 0, p.capacity + 2);
        int64_t next;
        fg_decision d;
        if (fg_gcra_decide(tat, &p, now, cost, &d, &next) != FG_OK) return;
        check_reply(&d, cost);
        if (!d.allowed || cost == 0) CHECK(next == tat);
        if (!d.allowed && d.retry_after_ns >= 0) {
            fg_decision later;
            int64_t ignored;
            CHECK(fg_gcra_decide(tat, &p, now + retry_us(&d), cost, &later, &ignored) == FG_OK);
            CHECK(later.allowed);
        }
        if (d.allowed && cost > 0) {
            CHECK(fg_gcra_state_storable(next));
            if (first < 0) first = now;
            admitted += cost;
            if (now > horizon) horizon = now;
            /* Units admitted never exceed the burst plus what refilled. */
            __int128 refilled = ((__int128)(horizon - first) * 1000) / p.emission_ns;
            CHECK((__int128)admitted <= p.capacity + refilled + 1);
        }
        tat = next;
    }
}

static void fuzz_fixed(reader *r) {
    fg_fixed_params p = {take_limit(r), take_range(r, 4, 1, 100000000)};
    fg_fixed_state s = {0, 0};
    int64_t now = START_US;
    for (int steps = 0; r->left > 0 && steps < 2000; steps++) {
        now = next_time(r, now, p.window_us / 3 + 1);
        int64_t cost = take_cost(r, p.limit);
        fg_fixed_state next;
        fg_decision d;
        if (fg_fixed_decide(&s, &p, now, cost, &d, &next) != FG_OK) return;
        check_reply(&d, cost);
        if (!d.allowed || cost == 0) CHECK(memcmp(&next, &s, sizeof(s)) == 0);
        CHECK(next.count <= p.limit);
        if (d.allowed && cost > 0) CHECK(fg_fixed_state_storable(&next));
        if (!d.allowed && d.retry_after_ns >= 0) {
            fg_decision later;
            fg_fixed_state ignored;
            CHECK(fg_fixed_decide(&s, &p, now + retry_us(&d), cost, &later, &ignored) == FG_OK);
            CHECK(later.allowed);
        }
        s = next;
    }
}

static void fuzz_sliding(reader *r) {
    fg_sliding_params p = {take_limit(r), take_range(r, 4, 1, 100000000)};
    fg_sliding_state s = {0, 0, 0};
    int64_t now = START_US;
    for (int steps = 0; r->left > 0 && steps < 2000; steps++) {
        now = next_time(r, now, p.window_us / 3 + 1);
        int64_t cost = take_cost(r, p.limit);
        fg_sliding_state next;
        fg_decision d;
        if (fg_sliding_decide(&s, &p, now, cost, &d, &next) != FG_OK) return;
        check_reply(&d, cost);
        if (!d.allowed || cost == 0) CHECK(memcmp(&next, &s, sizeof(s)) == 0);
        CHECK(next.count <= p.limit);
        if (d.allowed && cost > 0) CHECK(fg_sliding_state_storable(&next));
        if (!d.allowed && d.retry_after_ns >= 0) {
            fg_decision later;
            fg_sliding_state ignored;
            CHECK(fg_sliding_decide(&s, &p, now + retry_us(&d), cost, &later, &ignored) ==
                  FG_OK);
            CHECK(later.allowed);
        }
        s = next;
    }
}

static void *plain_realloc(void *ptr, size_t size) { return realloc(ptr, size); }
static void plain_free(void *ptr) { free(ptr); }

static void fuzz_slidelog(reader *r) {
    static const fg_allocator alloc = {plain_realloc, plain_free};
    fg_slog_params p = {take_range(r, 2, 1, 200), take_range(r, 4, 1, 100000000)};
    fg_slog log = {NULL, 0, 0, 0};
    int64_t now = START_US;
    for (int steps = 0; r->left > 0 && steps < 2000; steps++) {
        now = next_time(r, now, p.window_us / 3 + 1);
        int64_t cost = take_range(r, 1, 0, p.limit + 2);
        fg_slog_effect e;
        fg_decision d;
        if (fg_slog_decide(&log, &p, now, cost, &d, &e) != FG_OK) break;
        check_reply(&d, cost);
        if (!d.allowed && d.retry_after_ns >= 0) {
            fg_decision later;
            fg_slog_effect ignored;
            CHECK(fg_slog_decide(&log, &p, now + retry_us(&d), cost, &later, &ignored) == FG_OK);
            CHECK(later.allowed);
        }
        if (d.allowed && cost > 0) {
            CHECK(fg_slog_apply(&log, &e, &alloc) == FG_OK);
            /* Entries within one window of the newest never exceed the limit. */
            int64_t newest = fg_slog_at(&log, log.len - 1), in_window = 0;
            for (uint32_t i = 0; i < log.len; i++)
                if (fg_slog_at(&log, i) > newest - p.window_us) in_window++;
            CHECK(in_window <= p.limit);
            CHECK(fg_slog_at(&log, 0) >= 0);
            for (uint32_t i = 1; i < log.len; i++)
                CHECK(fg_slog_at(&log, i - 1) <= fg_slog_at(&log, i));
        }
    }
    fg_slog_free(&log, &alloc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    reader r = {data, size};
    switch (take(&r, 1) % 4) {
    case 0: fuzz_gcra(&r); break;
    case 1: fuzz_fixed(&r); break;
    case 2: fuzz_sliding(&r); break;
    default: fuzz_slidelog(&r); break;
    }
    return 0;
}
