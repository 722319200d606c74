/*
 * gcra.h - the virtual-scheduling meter behind GCRA, the token bucket, the
 * leaky bucket (funnel) and CL.THROTTLE.
 *
 * The whole state is one timestamp, the theoretical arrival time (TAT) in
 * nanoseconds since the epoch: the moment at which the bucket is full again.
 * 0 means "no state" (a full bucket). See gcra.c for the derivation.
 */
#ifndef FG_GCRA_H
#define FG_GCRA_H

#include "decision.h"

typedef struct fg_gcra_params {
    int64_t emission_ns; /* T: time for one unit to come back, >= 1 */
    int64_t capacity;    /* units that may be taken at once, >= 1 */
} fg_gcra_params;

/* Decide whether `cost` units (>= 0; 0 is a peek) may be taken at `now_us`.
 * `tat_ns` is the stored state (0 when none). On FG_OK, *d holds the answer
 * and *next_tat_ns the state to store; the state changes only when the
 * request is allowed with cost > 0. Returns FG_EINVAL for parameters out of
 * range and FG_EOVERFLOW when T * capacity, T * cost or the TAT overflows. */
fg_status fg_gcra_decide(int64_t tat_ns, const fg_gcra_params *p, int64_t now_us,
                         int64_t cost, fg_decision *d, int64_t *next_tat_ns);

/* Gives back `units` (>= 0) taken earlier and not used (a lease's leftover):
 * the TAT moves back by units * T, but never before now, since units that
 * have refilled already cannot be given back twice. *refunded is how many
 * units came back (rounded up); *next_tat_ns is the TAT to store, or 0 when
 * the bucket is full again (the state can go). */
fg_status fg_gcra_refund(int64_t tat_ns, const fg_gcra_params *p, int64_t now_us, int64_t units,
                         int64_t *next_tat_ns, int64_t *refunded);

/* Whether a TAT may be stored (and loaded): every TAT fg_gcra_decide writes. */
bool fg_gcra_state_storable(int64_t tat_ns);

/* When a stored TAT is back to neutral, in microseconds since the epoch
 * (rounded up, so a key never expires before its state is empty). */
int64_t fg_gcra_expires_at_us(int64_t tat_ns);

#endif
