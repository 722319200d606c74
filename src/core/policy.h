/*
 * policy.h - a policy's decision: several limits applied to one request
 * together, all or nothing, with a penalty box and shadow mode, and the
 * carrying over of a key's state when the policy's numbers change
 * (docs/policies.md). Allow and deny lists are the caller's: they decide
 * before this code is reached.
 *
 * A key's state holds, for each limit, the parameters it was computed with
 * and the algorithm's own state (gcra.h, fixed_window.h, sliding_window.h),
 * so a change of the rules is seen, and carried over, at the key's next
 * decision, with no pass over the keys.
 *
 * Times are microseconds since the epoch, passed in; durations answered in
 * nanoseconds, as in decision.h.
 */
#ifndef FG_POLICY_H
#define FG_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "decision.h"
#include "fixed_window.h"
#include "gcra.h"
#include "sliding_window.h"

#define FG_POLICY_MAX_LIMITS 8
#define FG_POLICY_MAX_AFTER 1000000 /* denials that ban, and so denials counted */

/* TOKEN, LEAKY and GCRA share the meter of gcra.h; they are kept apart so
 * that a policy shows the rule it was given and a change of algorithm
 * starts afresh. */
typedef enum fg_policy_algorithm {
    FG_POLICY_TOKEN,
    FG_POLICY_LEAKY,
    FG_POLICY_GCRA,
    FG_POLICY_FIXED,
    FG_POLICY_SLIDING,
} fg_policy_algorithm;

typedef struct fg_policy_limit {
    fg_policy_algorithm algorithm;
    union {
        fg_gcra_params bucket;     /* TOKEN, LEAKY, GCRA */
        fg_fixed_params fixed;     /* FIXED */
        fg_sliding_params sliding; /* SLIDING */
    } p;
} fg_policy_limit;

typedef struct fg_policy_penalty {
    int64_t ban_us;    /* how long a ban lasts; 0: no penalty box */
    int64_t after;     /* denials that ban, 1 .. FG_POLICY_MAX_AFTER */
    int64_t within_us; /* the window they are counted in, >= 1 */
} fg_policy_penalty;

typedef struct fg_policy_rules {
    uint32_t nlimits; /* 1 .. FG_POLICY_MAX_LIMITS */
    fg_policy_limit limits[FG_POLICY_MAX_LIMITS];
    fg_policy_penalty penalty;
    bool shadow; /* decide and count, never deny */
} fg_policy_rules;

typedef struct fg_policy_limit_state {
    fg_policy_limit limit; /* the parameters the state was computed with */
    union {
        int64_t tat_ns;          /* buckets: 0 when full */
        fg_fixed_state fixed;    /* count 0 when empty */
        fg_sliding_state sliding;
    } s;
} fg_policy_limit_state;

typedef struct fg_policy_state {
    uint32_t nlimits;
    fg_policy_limit_state limits[FG_POLICY_MAX_LIMITS];
    int64_t banned_until_us;  /* 0: not banned */
    int64_t denials;          /* denials counted since denials_start_us */
    int64_t denials_start_us; /* start of the counting window (0 when denials is 0) */
} fg_policy_state;

typedef enum fg_policy_decider {
    FG_POLICY_BY_LIMIT,   /* limits[limit_index] */
    FG_POLICY_BY_PENALTY, /* the key was banned */
} fg_policy_decider;

typedef struct fg_policy_decision {
    bool allowed;          /* as answered: true also for a shadow denial */
    bool shadow_denied;    /* shadow mode turned a denial into this allowance */
    bool banned_now;       /* this request's denial put the key in the penalty box */
    bool changed;          /* *next differs from the state passed in: store it */
    fg_policy_decider decided_by;
    uint32_t limit_index;  /* 0-based, when decided by a limit */
    /* limit: the deciding limit's capacity (allowed: the limit with the
     * fewest units left; 0 for the penalty); remaining: the fewest units
     * left over the limits; retry_after_ns: -1 when allowed, else the
     * longest among denying limits (-1 if one can never fit) or the ban's
     * end; reset_after_ns: the longest over the limits. */
    fg_decision d;
} fg_policy_decision;

#define FG_POLICY_NAME_MAX 64

/* Whether a policy name is valid: 1 to FG_POLICY_NAME_MAX letters, digits,
 * '_', '-', '.' or '/' (FG_ERR_POLICY_NAME refuses the others). */
bool fg_policy_name_valid(const char *name, size_t len);

/* Whether rules are usable: 1 .. FG_POLICY_MAX_LIMITS limits with
 * parameters in the ranges of params.h, a penalty that is off (ban_us 0)
 * or has ban_us, after and within_us >= 1. */
bool fg_policy_rules_valid(const fg_policy_rules *rules);

/* An empty state for the rules: every limit full, no ban. */
void fg_policy_state_init(fg_policy_state *s, const fg_policy_rules *rules);

/* The state carried over to `rules` at now_us (docs/policies.md, "Changing
 * a policy's numbers"): limit i continues when the algorithm is the same,
 * buckets keep their used units (capped at the new capacity), windows keep
 * their count (carried into the window containing now when the length
 * changes), a ban keeps its end up to now + ban_us and is lifted without a
 * penalty. A state already computed with `rules` comes out unchanged.
 * True when *out differs from *cur (it must then be stored even if the
 * decision that follows changes nothing). */
bool fg_policy_rescale(const fg_policy_state *cur, const fg_policy_rules *rules, int64_t now_us,
                       fg_policy_state *out);

/* Decides a request of `cost` units (>= 0; 0 is a peek, which changes
 * nothing) at now_us against `cur`, which must have been computed with
 * `rules` (fg_policy_rescale first). On FG_OK, *out holds the answer and
 * *next the state to store (equal to *cur unless out->changed). The limits
 * are charged only when all allow; a denial by a limit counts towards the
 * penalty. FG_EOVERFLOW when an algorithm's arithmetic would overflow;
 * nothing is then decided. */
fg_status fg_policy_decide(const fg_policy_state *cur, const fg_policy_rules *rules,
                           int64_t now_us, int64_t cost, fg_policy_decision *out,
                           fg_policy_state *next);

/* fg_policy_decide without checking its arguments again (FG_EINVAL never
 * comes back): for a check, whose rules were checked when the policy was
 * set, whose cost and time were parsed, and whose state fg_policy_rescale
 * or fg_policy_state_init has just made under these rules. */
fg_status fg_policy_decide_carried(const fg_policy_state *carried, const fg_policy_rules *rules,
                                   int64_t now_us, int64_t cost, fg_policy_decision *out,
                                   fg_policy_state *next);

/* How long a request that `d` denied (decided from `cur` at now_us, as
 * fg_policy_decide did) waits before it may be allowed, when it waits
 * instead of failing: its limits' wait or the running ban's end. A denial
 * that would start a ban does not ban a waiter (it is not denied until its
 * deadline), so that request waits for its limits alone. -1: never. */
int64_t fg_policy_wait_ns(const fg_policy_state *cur, const fg_policy_rules *rules,
                          int64_t now_us, int64_t cost, const fg_policy_decision *d);

/* From when the state is neutral (every limit full, no ban, no denial that
 * counts under `rules`' penalty), in µs since the epoch, rounded up; it may
 * be in the past, and is 0 for a state that never held anything. */
int64_t fg_policy_expires_at_us(const fg_policy_state *s, const fg_policy_rules *rules);

/* Whether a state may be stored and loaded: every state fg_policy_decide
 * and fg_policy_rescale produce from valid rules. */
bool fg_policy_state_storable(const fg_policy_state *s);

/* Serialized state (little-endian, versioned, packed per algorithm):
 * exactly what fg_policy_state_storable accepts, so a round trip of what
 * fg_policy_state_serialize writes is byte-identical. */
size_t fg_policy_state_serialized_size(const fg_policy_state *s);
void fg_policy_state_serialize(const fg_policy_state *s, uint8_t *out);
/* Reads the current version and version 1. FG_EINVAL for a bad length or
 * version, or a state that is not storable; *s is untouched then. */
fg_status fg_policy_state_deserialize(fg_policy_state *s, const uint8_t *in, size_t len);
/* Reads back, unchecked, what fg_policy_state_serialize wrote from a
 * storable state (a copy kept in memory); returns its length, which
 * fg_policy_state_packed_size tells without reading the state. */
size_t fg_policy_state_unpack(fg_policy_state *s, const uint8_t *in);
size_t fg_policy_state_packed_size(const uint8_t *in);

#endif
