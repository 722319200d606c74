/*
 * sliding_window.h - the sliding window counter: the current window's count
 * plus the previous window's count weighted by how much of it still overlaps
 * the sliding window. O(1) memory per key.
 */
#ifndef FG_SLIDING_WINDOW_H
#define FG_SLIDING_WINDOW_H

#include "decision.h"

typedef struct fg_sliding_params {
    int64_t limit;     /* units per sliding window, >= 1 */
    int64_t window_us; /* window length, >= 1 */
} fg_sliding_params;

typedef struct fg_sliding_state {
    int64_t window_start_us; /* start of the current (clock-aligned) window */
    int64_t count;           /* units admitted in the current window */
    int64_t prev_count;      /* units admitted in the window before it */
} fg_sliding_state;

/* Same contract as fg_fixed_decide. */
fg_status fg_sliding_decide(const fg_sliding_state *cur, const fg_sliding_params *p,
                            int64_t now_us, int64_t cost, fg_decision *d,
                            fg_sliding_state *next);

/* Whether a state may be stored (and loaded): every state fg_sliding_decide
 * writes. The two counts are never added, so together they may exceed
 * 64 bits. */
bool fg_sliding_state_storable(const fg_sliding_state *s);

/* When neither counter matters any more. */
int64_t fg_sliding_expires_at_us(const fg_sliding_state *s, const fg_sliding_params *p);

#endif
