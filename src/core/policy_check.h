/*
 * policy_check.h - one check of a request against a named policy: the
 * order of its steps, its answer, its counting and whether it waits
 * (docs/policies.md). The module's FG.CHECK (src/module/t_policy.c) and the
 * in-process backend (src/client/mem/mem_policy.c) both run it; they keep the
 * storage (the policies, their lists, the keys' states) and their own way
 * of waiting.
 *
 * The order: the deny list, then the allow list (the caller looks the
 * identity up: lists are storage), then the key's state, carried over to
 * the policy's current rules (fg_policy_rescale), then the decision
 * (fg_policy_decide). A check changes nothing: its caller either settles
 * it -- stores `next` when fg_policy_check_writes says so, counts it,
 * answers it -- or discards it, as a waiter's decisions are until its
 * final answer (it charges nothing and counts towards no penalty while it
 * waits).
 *
 * Waiting. A request that may wait does (fg_policy_check_waits) when its
 * limits or the penalty box deny it with a retry within its timeout, or
 * when it would be allowed while others wait ahead (no overtaking). The
 * head of a queue is checked again at its retry time, and waits on while
 * that retry is still within its deadline. At its deadline a waiter behind
 * others whose request would fit is denied without being charged
 * (fg_policy_check_yield), so that it may try again at once without
 * waiting.
 */
#ifndef FG_POLICY_CHECK_H
#define FG_POLICY_CHECK_H

#include <stdbool.h>
#include <stdint.h>

#include "policy.h"

typedef enum fg_check_by {
    FG_CHECK_BY_LIST,  /* the deny or the allow list */
    FG_CHECK_BY_STATE, /* the key's state under the policy's rules */
} fg_check_by;

typedef struct fg_policy_eval {
    fg_check_by by;
    bool allowlisted; /* BY_LIST: the allow list, else the deny list */
    bool rescaled;    /* BY_STATE: carrying the key's state over changed it */
    int64_t now_us, cost;
    const fg_policy_rules *rules; /* BY_STATE */
    fg_policy_state carried;      /* BY_STATE: the state decided on */
    fg_policy_decision d;         /* BY_STATE */
    fg_policy_state next;         /* BY_STATE: the state to store */
} fg_policy_eval;

typedef enum fg_check_decider {
    FG_CHECK_LIMIT,   /* limit_index */
    FG_CHECK_PENALTY, /* the key is in the penalty box */
    FG_CHECK_DENYLIST,
    FG_CHECK_ALLOWLIST,
} fg_check_decider;

/* What a check answers (FG.CHECK's reply). */
typedef struct fg_policy_answer {
    bool allowed;
    bool shadow_denied;
    int64_t limit, remaining;
    int64_t retry_after_ms; /* -1 when allowed, or when the cost can never fit */
    int64_t reset_after_ms;
    fg_check_decider decided_by;
    uint32_t limit_index; /* 0-based, when FG_CHECK_LIMIT */
} fg_policy_answer;

typedef struct fg_policy_counters {
    int64_t allowed, denied, banned, shadow_denied, waited;
} fg_policy_counters;

/* The lists' step of a check of `cost` units at now_us: true when they
 * decide (the deny list first). The caller passes whether the identity is
 * on each list; on_allow is not looked at when on_deny is set. */
bool fg_policy_check_lists(fg_policy_eval *c, int64_t now_us, int64_t cost, bool on_deny,
                           bool on_allow);

/* The state's step, after lists that did not decide: `stored` is the
 * key's live state under this policy, NULL when it has none; the rules are
 * valid (fg_policy_rules_valid, checked when the policy was set), stored
 * is storable, cost and now_us are >= 0: none of it is checked again.
 * FG_EOVERFLOW when the arithmetic would overflow (nothing is decided). */
fg_status fg_policy_check_state(fg_policy_eval *c, const fg_policy_rules *rules,
                                const fg_policy_state *stored);

/* Whether settling the check stores c->next (a state already neutral at
 * fg_policy_check_neutral_at deletes the key instead). */
bool fg_policy_check_writes(const fg_policy_eval *c);

/* When c->next is neutral again (the key's expiry), µs since the epoch. */
int64_t fg_policy_check_neutral_at(const fg_policy_eval *c);

bool fg_policy_check_allowed(const fg_policy_eval *c);

void fg_policy_check_answer(const fg_policy_eval *c, fg_policy_answer *a);

/* Counts a settled check. */
void fg_policy_check_count(const fg_policy_eval *c, fg_policy_counters *n);

/* Whether a request that may wait (timeout_ms >= 1) waits, queued_ahead
 * telling whether others wait for the key; *first_try_us is then when it
 * may first be allowed. */
bool fg_policy_check_waits(const fg_policy_eval *c, bool queued_ahead, int64_t timeout_ms,
                           int64_t *first_try_us);

/* Whether the head of a queue, checked again, waits on: denied by its
 * limits or the penalty box with a retry by deadline_us; *wake_us is then
 * when to check it again. */
bool fg_policy_check_waits_on(const fg_policy_eval *c, int64_t deadline_us, int64_t *wake_us);

/* At its deadline, a waiter behind others whose request would fit yields:
 * true when it must be answered *a (denied, retry_after_ms 0) with nothing
 * stored and only a denial counted, instead of settling c. */
bool fg_policy_check_yield(const fg_policy_eval *c, bool at_head, fg_policy_answer *a,
                           fg_policy_counters *n);

#endif
