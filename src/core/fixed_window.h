/*
 * fixed_window.h - a counter per window aligned to the clock.
 */
#ifndef FG_FIXED_WINDOW_H
#define FG_FIXED_WINDOW_H

#include "decision.h"

typedef struct fg_fixed_params {
    int64_t limit;     /* units per window, >= 1 */
    int64_t window_us; /* window length, >= 1 */
} fg_fixed_params;

typedef struct fg_fixed_state {
    int64_t window_start_us; /* start of the window `count` belongs to */
    int64_t count;           /* units admitted in that window; 0 = empty state */
} fg_fixed_state;

/* `cost` >= 0 (0 is a peek). The state changes only when allowed with cost > 0;
 * *next is then the state to store (otherwise a copy of *cur). */
fg_status fg_fixed_decide(const fg_fixed_state *cur, const fg_fixed_params *p,
                          int64_t now_us, int64_t cost, fg_decision *d,
                          fg_fixed_state *next);

/* Gives back `units` (>= 0) taken earlier in the window that `now_us` is
 * judged in; units of an earlier window are gone with it. *refunded is how
 * many came back; *next is the state to store (count 0: the state can go). */
fg_status fg_fixed_refund(const fg_fixed_state *cur, const fg_fixed_params *p, int64_t now_us,
                          int64_t units, fg_fixed_state *next, int64_t *refunded);

/* Whether a state may be stored (and loaded): every state fg_fixed_decide
 * writes. */
bool fg_fixed_state_storable(const fg_fixed_state *s);

/* End of the state's window: when it is empty again. */
int64_t fg_fixed_expires_at_us(const fg_fixed_state *s, const fg_fixed_params *p);

#endif
