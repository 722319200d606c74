/*
 * policy_check.c - the steps of a policy check and what follows from its
 * decision (policy_check.h). Each function is a few lines: the point is
 * that the module and the in-process backend cannot drift, not that any
 * step is hard.
 */
#include "policy_check.h"

#include <string.h>

bool fg_policy_check_lists(fg_policy_eval *c, int64_t now_us, int64_t cost, bool on_deny,
                           bool on_allow) {
    /* The states are left as they are: only a check BY_STATE reads them,
     * after fg_policy_check_state wrote them. */
    c->now_us = now_us;
    c->cost = cost;
    c->rules = NULL;
    c->rescaled = false;
    c->by = FG_CHECK_BY_LIST;
    c->allowlisted = on_allow && !on_deny;
    return on_deny || on_allow;
}

fg_status fg_policy_check_state(fg_policy_eval *c, const fg_policy_rules *rules,
                                const fg_policy_state *stored) {
    c->by = FG_CHECK_BY_STATE;
    c->rules = rules;
    if (stored != NULL)
        c->rescaled = fg_policy_rescale(stored, rules, c->now_us, &c->carried);
    else
        fg_policy_state_init(&c->carried, rules);
    /* The rules were checked when set, the state carried under them. */
    return fg_policy_decide_carried(&c->carried, rules, c->now_us, c->cost, &c->d, &c->next);
}

bool fg_policy_check_writes(const fg_policy_eval *c) {
    return c->by == FG_CHECK_BY_STATE && (c->rescaled || c->d.changed);
}

int64_t fg_policy_check_neutral_at(const fg_policy_eval *c) {
    return fg_policy_expires_at_us(&c->next, c->rules);
}

bool fg_policy_check_allowed(const fg_policy_eval *c) {
    switch (c->by) {
    case FG_CHECK_BY_LIST: return c->allowlisted;
    case FG_CHECK_BY_STATE: return c->d.allowed;
    }
    return false;
}

static void answer_by_state(const fg_policy_decision *d, fg_policy_answer *a) {
    a->allowed = d->allowed;
    a->shadow_denied = d->shadow_denied;
    a->limit = d->d.limit;
    a->remaining = d->d.remaining;
    a->retry_after_ms = fg_ns_to_ms_ceil(d->d.retry_after_ns);
    a->reset_after_ms = fg_ns_to_ms_ceil(d->d.reset_after_ns);
    switch (d->decided_by) {
    case FG_POLICY_BY_LIMIT:
        a->decided_by = FG_CHECK_LIMIT;
        a->limit_index = d->limit_index;
        break;
    case FG_POLICY_BY_PENALTY: a->decided_by = FG_CHECK_PENALTY; break;
    }
}

void fg_policy_check_answer(const fg_policy_eval *c, fg_policy_answer *a) {
    memset(a, 0, sizeof(*a));
    a->retry_after_ms = -1;
    switch (c->by) {
    case FG_CHECK_BY_LIST:
        a->allowed = c->allowlisted;
        a->decided_by = c->allowlisted ? FG_CHECK_ALLOWLIST : FG_CHECK_DENYLIST;
        break;
    case FG_CHECK_BY_STATE: answer_by_state(&c->d, a); break;
    }
}

void fg_policy_check_count(const fg_policy_eval *c, fg_policy_counters *n) {
    if (fg_policy_check_allowed(c))
        n->allowed++;
    else
        n->denied++;
    if (c->by == FG_CHECK_BY_STATE) {
        n->shadow_denied += c->d.shadow_denied;
        n->banned += c->d.banned_now;
    }
}

/* Allowed, charged and not shadow: a request that would take units. */
static bool would_take(const fg_policy_eval *c) {
    return c->by == FG_CHECK_BY_STATE && c->d.allowed && !c->d.shadow_denied && c->cost > 0;
}

bool fg_policy_check_waits_on(const fg_policy_eval *c, int64_t deadline_us, int64_t *wake_us) {
    if (c->by != FG_CHECK_BY_STATE || c->d.allowed) return false;
    int64_t ns = fg_policy_wait_ns(&c->carried, c->rules, c->now_us, c->cost, &c->d);
    if (ns < 0) return false;
    *wake_us = c->now_us + ns / FG_NS_PER_US + (ns % FG_NS_PER_US > 0);
    return *wake_us <= deadline_us;
}

bool fg_policy_check_waits(const fg_policy_eval *c, bool queued_ahead, int64_t timeout_ms,
                           int64_t *first_try_us) {
    if (c->by != FG_CHECK_BY_STATE) return false;
    *first_try_us = c->now_us;
    if (c->d.allowed) return queued_ahead && would_take(c);
    return fg_policy_check_waits_on(c, c->now_us + timeout_ms * 1000, first_try_us);
}

bool fg_policy_check_yield(const fg_policy_eval *c, bool at_head, fg_policy_answer *a,
                           fg_policy_counters *n) {
    if (at_head || !would_take(c)) return false;
    fg_policy_check_answer(c, a);
    a->allowed = false;
    a->retry_after_ms = 0;
    n->denied++;
    return true;
}
