/*
 * gcra.c - the Generic Cell Rate Algorithm, virtual-scheduling form.
 *
 * One meter serves four commands. FG.TOKEN (a token bucket of capacity C
 * refilled at r/s), FG.LEAKY (a funnel of capacity C leaking r/s), FG.GCRA
 * and CL.THROTTLE admit exactly the same requests once they are expressed
 * with two numbers:
 *
 *   T   = the emission interval, the time one unit takes to come back (1/r);
 *   DVT = T * capacity, the delay variation tolerance: how far ahead of the
 *         real clock the schedule may run, i.e. the size of the bucket in
 *         units of time.
 *
 * The state is a single timestamp, the theoretical arrival time (TAT): the
 * moment at which the bucket would be full (or the funnel empty) again if no
 * other request came. Every admitted unit pushes the TAT T further:
 *
 *   tat      = stored TAT, or now when there is none
 *   new_tat  = max(now, tat) + T * cost
 *   allowed  = new_tat - DVT <= now       (the schedule runs at most DVT ahead)
 *
 * Seen as a token bucket, (DVT - (tat - now)) / T is the number of tokens
 * left; seen as a funnel, (tat - now) / T is its level. Nothing else is
 * stored, no floating point is involved, and the answer is exact to the
 * nanosecond: everything here is computed in nanoseconds (now_us * 1000) so
 * emission intervals far below a microsecond keep their precision.
 *
 * The answer:
 *
 *   - denied: retry_after = how long until new_tat - DVT reaches now, unless
 *     the cost alone is larger than the bucket (T * cost > DVT): then it can
 *     never fit and retry_after is -1. The TAT is not touched.
 *   - allowed: the new TAT is stored, except for cost 0, which is a peek.
 *   - reset_after = TAT - now (the TAT after the decision), never negative.
 *   - remaining = floor((DVT - reset_after) / T), the whole tokens left.
 *
 * This is, on purpose, the arithmetic of redis-cell 0.5 (limit = max_burst+1,
 * DVT = T * (max_burst + 1)), so CL.THROTTLE answers what redis-cell answers.
 * The differences are all places where redis-cell loses precision or can go
 * wrong: it computes `remaining` from whole microseconds through a double
 * (so it differs when T is not a whole number of microseconds and divides by
 * zero when T < 1 us), and it may report a negative reset_after or more
 * than `limit` remaining for a stored TAT that is already in the past.
 * Here a stored TAT in the past simply means a full bucket.
 *
 * Edge cases:
 *
 *   - A clock that steps back refunds nothing: max(now, tat) keeps the
 *     schedule where it was, and reset_after grows by the step.
 *   - After such a step the TAT may run more than DVT ahead of now, and then
 *     even a peek (cost 0) is denied, with the exact retry_after. Ordinary
 *     traffic never gets there, because an admitted request leaves the TAT
 *     at most DVT ahead.
 *   - T * capacity, T * cost, now * 1000 and the new TAT are overflow
 *     checked (FG_EOVERFLOW). Every other difference is rearranged so that
 *     its operands have the same sign or are bounded, and cannot overflow.
 */

#include "gcra.h"

#include <stddef.h>

#include "checked.h"

/* The request and the parameters, scaled to nanoseconds. */
typedef struct gcra_request {
    int64_t now;       /* now, ns since the epoch */
    int64_t emission;  /* T */
    int64_t tolerance; /* DVT = T * capacity */
    int64_t increment; /* T * cost: how far the request pushes the TAT; only
                          computed when cost <= capacity */
} gcra_request;

static bool gcra_params_valid(const fg_gcra_params *p) {
    return p != NULL && p->emission_ns >= 1 && p->capacity >= 1;
}

/* Checks the arguments and converts them to nanoseconds. A negative stored
 * TAT cannot come from this meter, so it is refused rather than guessed at. */
static fg_status gcra_prepare(int64_t tat_ns, const fg_gcra_params *p, int64_t now_us,
                              int64_t cost, gcra_request *r) {
    if (!gcra_params_valid(p) || now_us < 0 || cost < 0 || tat_ns < 0) return FG_EINVAL;
    r->emission = p->emission_ns;
    if (!fg_mul(now_us, FG_NS_PER_US, &r->now)) return FG_EOVERFLOW;
    if (!fg_mul(p->emission_ns, p->capacity, &r->tolerance)) return FG_EOVERFLOW;
    /* A cost above the capacity never fits; it is answered without forming
     * T * cost, which may not fit in 64 bits. Otherwise T * cost <= DVT. */
    r->increment = cost <= p->capacity ? p->emission_ns * cost : -1;
    return FG_OK;
}

/* Whole units left when the TAT is `ttl` ahead of now: the part of the
 * tolerance not used yet, in units of T, rounded down. ttl >= 0 here, so the
 * result is between 0 and capacity. */
static int64_t gcra_units_left(const gcra_request *r, int64_t ttl) {
    if (ttl >= r->tolerance) return 0;
    return (r->tolerance - ttl) / r->emission;
}

/* A request larger than the whole bucket: denied, and no wait will help. */
static fg_status gcra_never_fits(const gcra_request *r, int64_t tat, int64_t tat_ns,
                                 fg_decision *d, int64_t *next_tat_ns) {
    int64_t ttl = tat - r->now;
    d->allowed = false;
    d->retry_after_ns = -1;
    d->remaining = gcra_units_left(r, ttl);
    d->reset_after_ns = ttl;
    *next_tat_ns = tat_ns;
    return FG_OK;
}

fg_status fg_gcra_decide(int64_t tat_ns, const fg_gcra_params *p, int64_t now_us,
                         int64_t cost, fg_decision *d, int64_t *next_tat_ns) {
    gcra_request r;
    fg_status status = gcra_prepare(tat_ns, p, now_us, cost, &r);
    if (status != FG_OK) return status;

    /* No state, or a TAT already in the past, both mean a full bucket. */
    int64_t tat = fg_max(tat_ns, r.now);
    d->limit = p->capacity;
    if (cost > p->capacity) return gcra_never_fits(&r, tat, tat_ns, d, next_tat_ns);
    int64_t new_tat;
    if (!fg_add(tat, r.increment, &new_tat)) return FG_EOVERFLOW;

    /* diff = now - allow_at = now - (new_tat - DVT). Grouped as
     * (now - new_tat) + DVT: the first term is in [-INT64_MAX, 0] and DVT is
     * positive, so neither step can overflow. */
    int64_t diff = (r.now - new_tat) + r.tolerance;
    int64_t ttl;

    d->allowed = diff >= 0;
    if (d->allowed) {
        d->retry_after_ns = -1;
        ttl = new_tat - r.now;
        *next_tat_ns = cost > 0 ? new_tat : tat_ns;
    } else {
        d->retry_after_ns = -diff;
        ttl = tat - r.now;
        *next_tat_ns = tat_ns;
    }
    d->remaining = gcra_units_left(&r, ttl);
    d->reset_after_ns = ttl;
    return FG_OK;
}

fg_status fg_gcra_refund(int64_t tat_ns, const fg_gcra_params *p, int64_t now_us, int64_t units,
                         int64_t *next_tat_ns, int64_t *refunded) {
    gcra_request r;
    fg_status status = gcra_prepare(tat_ns, p, now_us, 0, &r);
    if (status != FG_OK) return status;
    if (units < 0) return FG_EINVAL;
    /* Nothing is outstanding once the TAT has passed: the bucket is full. */
    int64_t outstanding = tat_ns > r.now ? tat_ns - r.now : 0;
    /* More than a bucket cannot have been taken: capping keeps units * T in
     * range (it is at most DVT). */
    int64_t give = fg_min(units, p->capacity) * r.emission;
    if (give >= outstanding) {
        *refunded = fg_min(units, fg_ceil_div(outstanding, r.emission));
        *next_tat_ns = 0;
    } else {
        *refunded = fg_min(units, p->capacity);
        *next_tat_ns = tat_ns - give;
    }
    return FG_OK;
}

bool fg_gcra_state_storable(int64_t tat_ns) { return tat_ns >= 1; }

/* The TAT rounded up to the microsecond: a key must never expire while its
 * state still holds back a request. */
int64_t fg_gcra_expires_at_us(int64_t tat_ns) {
    if (tat_ns <= 0) return 0;
    return fg_ceil_div(tat_ns, FG_NS_PER_US);
}
