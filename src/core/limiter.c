/*
 * limiter.c - one call over the rate-limit families, so that the module's
 * commands and the in-process store decide, store and expire a key by the
 * same rules: a request changes the state only when it is admitted with a
 * cost (a bucket's arrival time may even stay put then: nothing to write),
 * and the key lives until its state is empty again.
 *
 * Adding a family is a case here and a case in each place that stores a
 * state (the switches list every family, so the compiler names them).
 */
#include "limiter.h"

#include "checked.h"

static fg_status decide_bucket(const fg_limiter_state *cur, const fg_gcra_params *p,
                               int64_t now_us, int64_t cost, fg_decision *d, fg_limiter_next *n) {
    int64_t tat = cur != NULL ? cur->tat_ns : 0;
    fg_status st = fg_gcra_decide(tat, p, now_us, cost, d, &n->st.tat_ns);
    n->store = st == FG_OK && cost > 0 && d->allowed && n->st.tat_ns != tat;
    if (n->store) n->empty_at_us = fg_gcra_expires_at_us(n->st.tat_ns);
    return st;
}

static fg_status decide_fixed(const fg_limiter_state *cur, const fg_fixed_params *p,
                              int64_t now_us, int64_t cost, fg_decision *d, fg_limiter_next *n) {
    static const fg_fixed_state empty = {0, 0};
    fg_status st = fg_fixed_decide(cur != NULL ? &cur->fixed : &empty, p, now_us, cost, d,
                                   &n->st.fixed);
    n->store = st == FG_OK && cost > 0 && d->allowed;
    if (n->store) n->empty_at_us = fg_fixed_expires_at_us(&n->st.fixed, p);
    return st;
}

static fg_status decide_sliding(const fg_limiter_state *cur, const fg_sliding_params *p,
                                int64_t now_us, int64_t cost, fg_decision *d,
                                fg_limiter_next *n) {
    static const fg_sliding_state empty = {0, 0, 0};
    fg_status st = fg_sliding_decide(cur != NULL ? &cur->sliding : &empty, p, now_us, cost, d,
                                     &n->st.sliding);
    n->store = st == FG_OK && cost > 0 && d->allowed;
    if (n->store) n->empty_at_us = fg_sliding_expires_at_us(&n->st.sliding, p);
    return st;
}

/* The effect appends at its at_us, the log's newest entry after it. */
static fg_status decide_slidelog(const fg_limiter_state *cur, const fg_slog_params *p,
                                 int64_t now_us, int64_t cost, fg_decision *d,
                                 fg_limiter_next *n) {
    static const fg_slog empty = {NULL, 0, 0, 0};
    fg_status st = fg_slog_decide(cur != NULL ? &cur->slidelog : &empty, p, now_us, cost, d,
                                  &n->effect);
    n->store = st == FG_OK && cost > 0 && d->allowed;
    if (n->store && !fg_add(n->effect.at_us, p->window_us, &n->empty_at_us))
        n->empty_at_us = INT64_MAX;
    return st;
}

fg_status fg_limiter_decide(fg_limiter_family family, const fg_limiter_state *cur,
                            const fg_limiter_params *p, int64_t now_us, int64_t cost,
                            fg_decision *d, fg_limiter_next *next) {
    next->store = false;
    switch (family) {
    case FG_LIMITER_BUCKET: return decide_bucket(cur, &p->bucket, now_us, cost, d, next);
    case FG_LIMITER_FIXED: return decide_fixed(cur, &p->fixed, now_us, cost, d, next);
    case FG_LIMITER_SLIDING: return decide_sliding(cur, &p->sliding, now_us, cost, d, next);
    case FG_LIMITER_SLIDELOG: return decide_slidelog(cur, &p->slidelog, now_us, cost, d, next);
    }
    return FG_EINVAL;
}
