/*
 * limiter.h - the rate-limit algorithms behind one call: a family, its
 * parameters and its stored state in, the decision and what to store out.
 */
#ifndef FG_LIMITER_H
#define FG_LIMITER_H

#include "fixed_window.h"
#include "gcra.h"
#include "sliding_log.h"
#include "sliding_window.h"

/* A family is how the state is kept; token, leaky, GCRA and CL.THROTTLE
 * are one family (one arrival time), told apart by their parameters. */
typedef enum fg_limiter_family {
    FG_LIMITER_BUCKET,   /* token, leaky, GCRA, CL.THROTTLE: one arrival time */
    FG_LIMITER_FIXED,    /* fixed window counter */
    FG_LIMITER_SLIDING,  /* sliding window counter */
    FG_LIMITER_SLIDELOG, /* sliding window log */
} fg_limiter_family;

#define FG_LIMITER_FAMILIES 4

typedef union fg_limiter_params {
    fg_gcra_params bucket;
    fg_fixed_params fixed;
    fg_sliding_params sliding;
    fg_slog_params slidelog;
} fg_limiter_params;

/* A limit as the core decides it. */
typedef struct fg_limiter {
    fg_limiter_family family;
    fg_limiter_params p;
} fg_limiter;

typedef union fg_limiter_state {
    int64_t tat_ns; /* 0: full */
    fg_fixed_state fixed;
    fg_sliding_state sliding;
    fg_slog slidelog;
} fg_limiter_state;

/* What a decision leaves to store: the next state, or for the sliding log
 * the effect to apply (and replicate), which spares copying the log. */
typedef struct fg_limiter_next {
    bool store;          /* admitted with a cost, and the state changed */
    int64_t empty_at_us; /* store: when the stored state is empty again */
    fg_limiter_state st; /* store, but for the sliding log */
    fg_slog_effect effect; /* store, for the sliding log */
} fg_limiter_next;

/* Decides `cost` units (>= 0) at now_us on state `cur` of the family (NULL:
 * the empty state), changing nothing. The core's statuses: FG_EINVAL for
 * parameters or cost out of range, FG_EOVERFLOW for arithmetic that would. */
fg_status fg_limiter_decide(fg_limiter_family family, const fg_limiter_state *cur,
                            const fg_limiter_params *p, int64_t now_us, int64_t cost,
                            fg_decision *d, fg_limiter_next *next);

#endif
