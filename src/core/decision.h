/*
 * decision.h - what every rate-limit algorithm answers.
 *
 * All algorithms take the current time as an argument in microseconds since the
 * Unix epoch and answer with durations in nanoseconds, so that the binding can
 * round to milliseconds or seconds exactly once, always upwards (a client that
 * waits retry_after must never be refused again for rounding).
 */
#ifndef FG_DECISION_H
#define FG_DECISION_H

#include <stdbool.h>
#include <stdint.h>

typedef struct fg_decision {
    bool allowed;
    int64_t limit;          /* capacity in units */
    int64_t remaining;      /* units still available after this decision, >= 0 */
    int64_t retry_after_ns; /* -1 when allowed, or when the cost can never fit */
    int64_t reset_after_ns; /* until the state is back to empty (full capacity) */
} fg_decision;

typedef enum fg_status {
    FG_OK = 0,
    FG_EOVERFLOW, /* the parameters or state would overflow 64-bit arithmetic */
    FG_EINVAL,    /* parameters out of their documented range */
} fg_status;

#define FG_NS_PER_US 1000LL
#define FG_NS_PER_MS 1000000LL
#define FG_NS_PER_SEC 1000000000LL

/* Durations as floodgate replies them: milliseconds rounded up, so that a
 * client that waits them is never early; a negative one (none) is -1. */
static inline int64_t fg_ns_to_ms_ceil(int64_t ns) {
    return ns < 0 ? -1 : ns / FG_NS_PER_MS + (ns % FG_NS_PER_MS > 0);
}

/* Microseconds to milliseconds, rounded up: an expiry or a lease never
 * ends early, a timer never fires before it. */
static inline int64_t fg_us_to_ms_ceil(int64_t us) {
    return us / 1000 + (us % 1000 > 0);
}

#endif
