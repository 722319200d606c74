/*
 * policy.c - a policy's limits decided together, its penalty box and shadow
 * mode, and a key's state carried over when the policy's numbers change.
 *
 * Nothing here is a new rate-limit algorithm: each limit is decided by its
 * own core (gcra.c for TOKEN, LEAKY and GCRA, fixed_window.c,
 * sliding_window.c) on its own state, and this file combines the answers.
 *
 *   - All or nothing. Every limit decides the request at the same instant on
 *     its current state. The states they would move to are kept only when
 *     all of them allow: one denial leaves every limit as it was, so a
 *     request refused by a daily quota does not use up the per-second burst.
 *     Every limit is decided even after one has denied; there are at most 8,
 *     and the longest wait needs them all anyway.
 *   - The answer. When denied, the denying limit with the longest wait
 *     decides, since only after that wait would every limit take the
 *     request; a limit the request can never fit (retry -1) comes before any
 *     wait. When allowed, the limit with the fewest units left decides: it is
 *     the one a client has to watch. remaining is the fewest over the limits
 *     and reset_after the longest, both for the state as stored: after a
 *     denial, the limits that allowed answered as if they had been charged,
 *     so they are asked again with a peek. Ties go to the lowest index.
 *   - The penalty box. A denial by a limit counts (cost > 0 only: a peek
 *     never changes anything) in a window opened by the first denial and
 *     lasting within_us; the denial that reaches `after` bans the key for
 *     ban_us and starts the count afresh. A banned key is denied before its
 *     limits are charged, and that denial does not count, or a client that
 *     keeps retrying would stay banned for ever. Its answer: limit 0 (no
 *     limit decided), remaining 0 (nothing may be taken before the ban
 *     ends), retry_after the ban's end, reset_after the later of the ban's
 *     end and the limits' own reset. The denial that bans answers the ban's
 *     end as retry_after when it is later than the limit's own wait, and
 *     every reset_after covers a running ban: waiting less would only meet
 *     the penalty box.
 *   - Shadow mode. Everything is decided, and the state evolves, exactly as
 *     under enforcement. Only the answer becomes an allowance, flagged, with
 *     retry_after -1 as every allowance has; the decider, its limit,
 *     remaining and reset_after stay what enforcement answered, so a trial
 *     run shows which limit (or the penalty box) would have refused.
 *
 * Changing the numbers is lazy: a state records the parameters of each of
 * its limits, so a key is carried over (fg_policy_rescale) at its next check
 * with no pass over the keys. Buckets keep their used units as time, scaled
 * by the ratio of the emission intervals (rounded down, so the change never
 * costs a unit) and capped at the new bucket, so raising a capacity never
 * takes units away and lowering it never leaves a debt. Windows keep their
 * count; a new window length puts it (for the sliding window, its estimate
 * at now, rounded up, previous window included) into the new window that
 * contains now, aligned to the epoch as the window cores align theirs. The
 * trade-off: the carried count holds until that new window ends, which for
 * a longer window may be later than the old window would have ended, and
 * for a shorter one sooner. Either way it is at most one new window, and
 * never more passes than the new limit allows.
 *
 * The penalty's numbers are not recorded in the state, so the caller
 * carries a state over before every decision, and a ban is capped at
 * now + ban_us each time; with unchanged numbers that changes nothing
 * unless the clock stepped back behind the ban's start.
 *
 * The serialized state is versioned, little-endian, and holds exactly the
 * fields that fg_policy_state_storable checks, so a loaded state serializes
 * to the same bytes and a corrupted one is refused whole. Version 2 is
 * packed per algorithm and leaves out the penalty's integers while they
 * are all 0 (most keys: no penalty, or no denial yet), so that a
 * two-limit state is 60 bytes where version 1 took 84; version 1 still
 * loads (and is written again as version 2). The module keeps a key's
 * state in memory in this form too, so that replicating, saving and
 * digesting it copy nothing.
 */

#include "policy.h"

#include <string.h>

#include "checked.h"
#include "params.h"

__extension__ typedef __int128 policy_i128;

#define SERIAL_VERSION    2 /* written */
#define SERIAL_VERSION_V1 1 /* still read: the penalty's integers always there */
/* Version 2's second byte: the number of limits, and this bit when the
 * penalty's three integers follow the limits. */
#define PENALTY_FIELDS 0x80

/* The ranges of params.c: durations up to FG_MAX_DURATION_MS, emission
 * intervals up to (double)INT64_MAX / 2, which is 2^62. */
#define MAX_DURATION_US ((int64_t)(FG_MAX_DURATION_MS * 1000))
#define MAX_EMISSION_NS ((int64_t)1 << 62)

/* ------------------------------------------------------------ the rules */

static bool is_bucket(fg_policy_algorithm a) {
    return a == FG_POLICY_TOKEN || a == FG_POLICY_LEAKY || a == FG_POLICY_GCRA;
}

static bool window_valid(int64_t limit, int64_t window_us) {
    return limit >= 1 && window_us >= 1 && window_us <= MAX_DURATION_US;
}

static bool limit_valid(const fg_policy_limit *l) {
    switch (l->algorithm) {
    case FG_POLICY_TOKEN:
    case FG_POLICY_LEAKY:
    case FG_POLICY_GCRA:
        return l->p.bucket.capacity >= 1 && l->p.bucket.emission_ns >= 1 &&
               l->p.bucket.emission_ns <= MAX_EMISSION_NS;
    case FG_POLICY_FIXED: return window_valid(l->p.fixed.limit, l->p.fixed.window_us);
    case FG_POLICY_SLIDING: return window_valid(l->p.sliding.limit, l->p.sliding.window_us);
    }
    return false;
}

static bool penalty_valid(const fg_policy_penalty *p) {
    if (p->ban_us == 0) return true;
    return p->ban_us >= 1 && p->ban_us <= MAX_DURATION_US && p->after >= 1 &&
           p->after <= FG_POLICY_MAX_AFTER && p->within_us >= 1 && p->within_us <= MAX_DURATION_US;
}

bool fg_policy_name_valid(const char *name, size_t len) {
    if (name == NULL || len < 1 || len > FG_POLICY_NAME_MAX) return false;
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '-' || c == '.' || c == '/';
        if (!ok) return false;
    }
    return true;
}

bool fg_policy_rules_valid(const fg_policy_rules *rules) {
    if (rules == NULL || rules->nlimits < 1 || rules->nlimits > FG_POLICY_MAX_LIMITS) return false;
    for (uint32_t i = 0; i < rules->nlimits; i++)
        if (!limit_valid(&rules->limits[i])) return false;
    return penalty_valid(&rules->penalty);
}

static bool same_limit(const fg_policy_limit *a, const fg_policy_limit *b) {
    if (a->algorithm != b->algorithm) return false;
    switch (a->algorithm) {
    case FG_POLICY_TOKEN:
    case FG_POLICY_LEAKY:
    case FG_POLICY_GCRA:
        return a->p.bucket.emission_ns == b->p.bucket.emission_ns &&
               a->p.bucket.capacity == b->p.bucket.capacity;
    case FG_POLICY_FIXED:
        return a->p.fixed.limit == b->p.fixed.limit && a->p.fixed.window_us == b->p.fixed.window_us;
    case FG_POLICY_SLIDING:
        return a->p.sliding.limit == b->p.sliding.limit &&
               a->p.sliding.window_us == b->p.sliding.window_us;
    }
    return false;
}

/* ------------------------------------------------------------ the state */

static bool fixed_empty(const fg_fixed_state *s) {
    return s->window_start_us == 0 && s->count == 0;
}

static bool sliding_empty(const fg_sliding_state *s) {
    return s->window_start_us == 0 && s->count == 0 && s->prev_count == 0;
}

static bool same_limit_state(const fg_policy_limit_state *a, const fg_policy_limit_state *b) {
    if (!same_limit(&a->limit, &b->limit)) return false;
    switch (a->limit.algorithm) {
    case FG_POLICY_TOKEN:
    case FG_POLICY_LEAKY:
    case FG_POLICY_GCRA: return a->s.tat_ns == b->s.tat_ns;
    case FG_POLICY_FIXED:
        return a->s.fixed.window_start_us == b->s.fixed.window_start_us &&
               a->s.fixed.count == b->s.fixed.count;
    case FG_POLICY_SLIDING:
        return a->s.sliding.window_start_us == b->s.sliding.window_start_us &&
               a->s.sliding.count == b->s.sliding.count &&
               a->s.sliding.prev_count == b->s.sliding.prev_count;
    }
    return false;
}

/* Field by field: the unions and the padding hold bytes nobody wrote. */
static bool same_state(const fg_policy_state *a, const fg_policy_state *b) {
    if (a->nlimits != b->nlimits || a->banned_until_us != b->banned_until_us ||
        a->denials != b->denials || a->denials_start_us != b->denials_start_us)
        return false;
    for (uint32_t i = 0; i < a->nlimits; i++)
        if (!same_limit_state(&a->limits[i], &b->limits[i])) return false;
    return true;
}

/* A full limit: every field of its state 0. */
static void limit_state_init(fg_policy_limit_state *ls, const fg_policy_limit *l) {
    memset(ls, 0, sizeof(*ls));
    ls->limit = *l;
}

void fg_policy_state_init(fg_policy_state *s, const fg_policy_rules *rules) {
    memset(s, 0, sizeof(*s));
    s->nlimits = rules->nlimits;
    for (uint32_t i = 0; i < rules->nlimits; i++)
        limit_state_init(&s->limits[i], &rules->limits[i]);
}

static bool limit_state_storable(const fg_policy_limit_state *ls) {
    if (!limit_valid(&ls->limit)) return false;
    switch (ls->limit.algorithm) {
    case FG_POLICY_TOKEN:
    case FG_POLICY_LEAKY:
    case FG_POLICY_GCRA: return ls->s.tat_ns == 0 || fg_gcra_state_storable(ls->s.tat_ns);
    case FG_POLICY_FIXED: return fixed_empty(&ls->s.fixed) || fg_fixed_state_storable(&ls->s.fixed);
    case FG_POLICY_SLIDING:
        return sliding_empty(&ls->s.sliding) || fg_sliding_state_storable(&ls->s.sliding);
    }
    return false;
}

bool fg_policy_state_storable(const fg_policy_state *s) {
    if (s == NULL || s->nlimits < 1 || s->nlimits > FG_POLICY_MAX_LIMITS) return false;
    for (uint32_t i = 0; i < s->nlimits; i++)
        if (!limit_state_storable(&s->limits[i])) return false;
    /* A count never exceeds `after`, so a larger one (which the next denial
     * would overflow) is no state of ours. */
    return s->banned_until_us >= 0 && s->denials >= 0 && s->denials <= FG_POLICY_MAX_AFTER &&
           s->denials_start_us >= 0 && (s->denials > 0 || s->denials_start_us == 0);
}

static int64_t limit_expires_at_us(const fg_policy_limit_state *ls) {
    switch (ls->limit.algorithm) {
    case FG_POLICY_TOKEN:
    case FG_POLICY_LEAKY:
    case FG_POLICY_GCRA: return fg_gcra_expires_at_us(ls->s.tat_ns);
    case FG_POLICY_FIXED:
        if (ls->s.fixed.count == 0) return 0;
        return fg_fixed_expires_at_us(&ls->s.fixed, &ls->limit.p.fixed);
    case FG_POLICY_SLIDING:
        if (ls->s.sliding.count == 0 && ls->s.sliding.prev_count == 0) return 0;
        return fg_sliding_expires_at_us(&ls->s.sliding, &ls->limit.p.sliding);
    }
    return 0;
}

int64_t fg_policy_wait_ns(const fg_policy_state *cur, const fg_policy_rules *rules,
                          int64_t now_us, int64_t cost, const fg_policy_decision *d) {
    if (!d->banned_now) return d->d.retry_after_ns;
    fg_policy_rules no_penalty = *rules;
    no_penalty.penalty.ban_us = 0;
    fg_policy_decision limits_only;
    fg_policy_state next;
    if (fg_policy_decide(cur, &no_penalty, now_us, cost, &limits_only, &next) != FG_OK) return -1;
    return limits_only.allowed ? 0 : limits_only.d.retry_after_ns;
}

/* The denial count's window is a number of the rules, not of the state. */
int64_t fg_policy_expires_at_us(const fg_policy_state *s, const fg_policy_rules *rules) {
    int64_t at = s->banned_until_us, end;
    for (uint32_t i = 0; i < s->nlimits; i++)
        at = fg_max(at, limit_expires_at_us(&s->limits[i]));
    if (s->denials > 0 && rules->penalty.ban_us > 0) {
        if (__builtin_add_overflow(s->denials_start_us, rules->penalty.within_us, &end))
            end = INT64_MAX;
        at = fg_max(at, end);
    }
    return at;
}

/* ------------------------------------------------------------- deciding */

static fg_status limit_decide(const fg_policy_limit_state *cur, int64_t now_us, int64_t cost,
                              fg_decision *d, fg_policy_limit_state *next) {
    *next = *cur;
    switch (cur->limit.algorithm) {
    case FG_POLICY_TOKEN:
    case FG_POLICY_LEAKY:
    case FG_POLICY_GCRA:
        return fg_gcra_decide(cur->s.tat_ns, &cur->limit.p.bucket, now_us, cost, d,
                              &next->s.tat_ns);
    case FG_POLICY_FIXED:
        return fg_fixed_decide(&cur->s.fixed, &cur->limit.p.fixed, now_us, cost, d, &next->s.fixed);
    case FG_POLICY_SLIDING:
        return fg_sliding_decide(&cur->s.sliding, &cur->limit.p.sliding, now_us, cost, d,
                                 &next->s.sliding);
    }
    return FG_EINVAL;
}

/* What a limit holds, without taking anything. */
static fg_status limit_peek(const fg_policy_limit_state *cur, int64_t now_us, fg_decision *d) {
    fg_policy_limit_state unchanged;
    return limit_decide(cur, now_us, 0, d, &unchanged);
}

static bool state_follows_rules(const fg_policy_state *s, const fg_policy_rules *rules) {
    if (s->nlimits != rules->nlimits) return false;
    for (uint32_t i = 0; i < s->nlimits; i++)
        if (!same_limit(&s->limits[i].limit, &rules->limits[i])) return false;
    return true;
}

static bool banned(const fg_policy_state *s, int64_t now_us) {
    return s->banned_until_us > now_us;
}

/* Whether denial a asks for a longer wait than b: never (-1) is the longest,
 * and the first never found keeps the place. */
static bool waits_longer(const fg_decision *a, const fg_decision *b) {
    if (b->retry_after_ns == -1) return false;
    return a->retry_after_ns == -1 || a->retry_after_ns > b->retry_after_ns;
}

static uint32_t longest_denial(const fg_decision *d, uint32_t n) {
    uint32_t pick = n;
    for (uint32_t i = 0; i < n; i++)
        if (!d[i].allowed && (pick == n || waits_longer(&d[i], &d[pick]))) pick = i;
    return pick;
}

static uint32_t fewest_left(const fg_decision *d, uint32_t n) {
    uint32_t pick = 0;
    for (uint32_t i = 1; i < n; i++)
        if (d[i].remaining < d[pick].remaining) pick = i;
    return pick;
}

/* The answer of the limits, decided by limit `decider`. */
static void answer_by_limit(const fg_decision *d, uint32_t n, uint32_t decider, bool allowed,
                            fg_policy_decision *out) {
    out->allowed = allowed;
    out->decided_by = FG_POLICY_BY_LIMIT;
    out->limit_index = decider;
    out->d.allowed = allowed;
    out->d.limit = d[decider].limit;
    out->d.retry_after_ns = allowed ? -1 : d[decider].retry_after_ns;
    out->d.remaining = d[0].remaining;
    out->d.reset_after_ns = d[0].reset_after_ns;
    for (uint32_t i = 1; i < n; i++) {
        out->d.remaining = fg_min(out->d.remaining, d[i].remaining);
        out->d.reset_after_ns = fg_max(out->d.reset_after_ns, d[i].reset_after_ns);
    }
}

/* A refused request charged nothing, but the limits that allowed it
 * answered as if they had been charged: they are asked again with a peek
 * for what they hold. */
static fg_status describe_uncharged(const fg_policy_state *cur, int64_t now_us, fg_decision *d) {
    for (uint32_t i = 0; i < cur->nlimits; i++) {
        if (!d[i].allowed) continue;
        fg_decision peek;
        fg_status status = limit_peek(&cur->limits[i], now_us, &peek);
        if (status != FG_OK) return status;
        d[i].remaining = peek.remaining;
        d[i].reset_after_ns = peek.reset_after_ns;
    }
    return FG_OK;
}

/* Counts a denial by a limit, and bans the key when it reaches `after`
 * within the counting window. The answer then points at the ban's end. */
static fg_status count_denial(const fg_policy_penalty *p, int64_t now_us, fg_policy_state *s,
                              fg_policy_decision *out) {
    if (p->ban_us == 0) return FG_OK;
    bool window_over =
        s->denials_start_us <= now_us && now_us - s->denials_start_us >= p->within_us;
    if (s->denials == 0 || window_over) {
        s->denials = 0;
        s->denials_start_us = now_us;
    }
    if (++s->denials < p->after) return FG_OK;

    /* ban_us is at most FG_MAX_DURATION_MS: in nanoseconds it fits. */
    int64_t ban_ns = p->ban_us * FG_NS_PER_US;
    if (!fg_add(now_us, p->ban_us, &s->banned_until_us)) return FG_EOVERFLOW;
    s->denials = 0;
    s->denials_start_us = 0;
    out->banned_now = true;
    if (out->d.retry_after_ns != -1) out->d.retry_after_ns = fg_max(out->d.retry_after_ns, ban_ns);
    out->d.reset_after_ns = fg_max(out->d.reset_after_ns, ban_ns);
    return FG_OK;
}

static fg_status decide_by_limits(const fg_policy_state *cur, const fg_policy_rules *rules,
                                  int64_t now_us, int64_t cost, fg_policy_decision *out,
                                  fg_policy_state *next) {
    /* Zeroed: nlimits >= 1 was checked, but not where the compiler sees. */
    fg_decision d[FG_POLICY_MAX_LIMITS] = {{0}};
    fg_policy_limit_state charged[FG_POLICY_MAX_LIMITS];
    uint32_t n = cur->nlimits;
    for (uint32_t i = 0; i < n; i++) {
        fg_status status = limit_decide(&cur->limits[i], now_us, cost, &d[i], &charged[i]);
        if (status != FG_OK) return status;
    }

    uint32_t denier = longest_denial(d, n);
    if (denier == n) {
        for (uint32_t i = 0; i < n; i++)
            next->limits[i] = charged[i];
        answer_by_limit(d, n, fewest_left(d, n), true, out);
        return FG_OK;
    }
    fg_status status = describe_uncharged(cur, now_us, d);
    if (status != FG_OK) return status;
    answer_by_limit(d, n, denier, false, out);
    return cost > 0 ? count_denial(&rules->penalty, now_us, next, out) : FG_OK;
}

/* The penalty box's answer; the limits are only peeked for their reset. */
static fg_status decide_banned(const fg_policy_state *cur, int64_t now_us,
                               fg_policy_decision *out) {
    /* banned_until > now >= 0: the difference fits, its nanoseconds may not
     * (a loaded state may hold any end). */
    int64_t ban_ns, reset_ns;
    if (!fg_mul(cur->banned_until_us - now_us, FG_NS_PER_US, &ban_ns)) return FG_EOVERFLOW;
    reset_ns = ban_ns;
    for (uint32_t i = 0; i < cur->nlimits; i++) {
        fg_decision peek;
        fg_status status = limit_peek(&cur->limits[i], now_us, &peek);
        if (status != FG_OK) return status;
        reset_ns = fg_max(reset_ns, peek.reset_after_ns);
    }
    out->allowed = false;
    out->decided_by = FG_POLICY_BY_PENALTY;
    out->d = (fg_decision){false, 0, 0, ban_ns, reset_ns};
    return FG_OK;
}

static void answer_in_shadow(fg_policy_decision *out) {
    if (out->allowed) return;
    out->allowed = true;
    out->d.allowed = true;
    out->d.retry_after_ns = -1;
    out->shadow_denied = true;
}

static bool decide_args_valid(const fg_policy_state *cur, const fg_policy_rules *rules,
                              int64_t now_us, int64_t cost) {
    return fg_policy_rules_valid(rules) && fg_policy_state_storable(cur) &&
           state_follows_rules(cur, rules) && now_us >= 0 && cost >= 0;
}

/* The decision, on arguments the caller vouches for. */
static fg_status decide(const fg_policy_state *cur, const fg_policy_rules *rules, int64_t now_us,
                        int64_t cost, fg_policy_decision *out, fg_policy_state *next) {
    fg_policy_decision answer;
    fg_policy_state after = *cur;
    memset(&answer, 0, sizeof(answer));

    fg_status status = banned(cur, now_us)
                           ? decide_banned(cur, now_us, &answer)
                           : decide_by_limits(cur, rules, now_us, cost, &answer, &after);
    if (status != FG_OK) return status;
    if (rules->shadow) answer_in_shadow(&answer);
    answer.changed = !same_state(&after, cur);
    *out = answer;
    *next = after;
    return FG_OK;
}

fg_status fg_policy_decide(const fg_policy_state *cur, const fg_policy_rules *rules, int64_t now_us,
                           int64_t cost, fg_policy_decision *out, fg_policy_state *next) {
    if (!decide_args_valid(cur, rules, now_us, cost)) return FG_EINVAL;
    return decide(cur, rules, now_us, cost, out, next);
}

fg_status fg_policy_decide_carried(const fg_policy_state *carried, const fg_policy_rules *rules,
                                   int64_t now_us, int64_t cost, fg_policy_decision *out,
                                   fg_policy_state *next) {
    return decide(carried, rules, now_us, cost, out, next);
}

/* --------------------------------------------------------- carrying over */

/* Start of the epoch-aligned window holding t >= 0, as the window cores
 * align theirs. */
static int64_t window_start(int64_t t, int64_t window_us) {
    return t - t % window_us;
}

static int64_t saturate(policy_i128 v) {
    return v > INT64_MAX ? INT64_MAX : (int64_t)v;
}

/* A bucket's used units are tat - now nanoseconds at the old emission
 * interval; they take that many units' worth of the new one, rounded down,
 * at most the whole new bucket. 0 when nothing is used. The TAT saturates:
 * past the year 2262 no bucket decides anyway. */
static int64_t carry_bucket(int64_t tat_ns, const fg_gcra_params *from, const fg_gcra_params *to,
                            int64_t now_us) {
    policy_i128 now_ns = (policy_i128)now_us * FG_NS_PER_US;
    policy_i128 used = (policy_i128)tat_ns - now_ns;
    if (used <= 0) return 0;
    used = used * to->emission_ns / from->emission_ns;
    policy_i128 whole_bucket = (policy_i128)to->capacity * to->emission_ns;
    if (used > whole_bucket) used = whole_bucket;
    return used == 0 ? 0 : saturate(now_ns + used);
}

/* The count of the window now is judged in (the current one, or a later one
 * after the clock stepped back) moves into the new window containing now. */
static fg_fixed_state carry_fixed(const fg_fixed_state *s, int64_t from_us, int64_t to_us,
                                  int64_t now_us) {
    if (from_us == to_us) return *s;
    fg_fixed_state carried = {0, 0};
    if (s->count > 0 && window_start(s->window_start_us, from_us) >= window_start(now_us, from_us))
        carried = (fg_fixed_state){window_start(now_us, to_us), s->count};
    return carried;
}

/* The sliding window's estimate at now, rounded up, rolled forward as
 * sliding_window.c rolls it. Counts above any limit deny alike, so the sum
 * saturates. */
static int64_t sliding_usage(const fg_sliding_state *s, int64_t window_us, int64_t now_us) {
    int64_t current = window_start(now_us, window_us);
    int64_t stored = window_start(s->window_start_us, window_us);
    int64_t elapsed = now_us - current, count = s->count, prev = s->prev_count;
    if (stored > current) { /* the clock stepped back: the heaviest weight */
        elapsed = 0;
    } else if (current - stored == window_us) { /* the stored window is the previous one */
        prev = count;
        count = 0;
    } else if (stored != current) {
        return 0;
    }
    policy_i128 weighted = ((policy_i128)prev * (window_us - elapsed) + window_us - 1) / window_us;
    return saturate(count + weighted);
}

static fg_sliding_state carry_sliding(const fg_sliding_state *s, int64_t from_us, int64_t to_us,
                                      int64_t now_us) {
    if (from_us == to_us) return *s;
    fg_sliding_state carried = {0, 0, 0};
    int64_t used = sliding_usage(s, from_us, now_us);
    if (used > 0) carried = (fg_sliding_state){window_start(now_us, to_us), used, 0};
    return carried;
}

/* Limit i of the new rules continues the old limit i when the algorithm is
 * the same (NULL: there was none); otherwise it starts full. */
static void carry_limit(const fg_policy_limit_state *old, const fg_policy_limit *l, int64_t now_us,
                        fg_policy_limit_state *out) {
    limit_state_init(out, l);
    if (old == NULL || old->limit.algorithm != l->algorithm) return;
    if (same_limit(&old->limit, l)) {
        *out = *old;
        return;
    }
    switch (l->algorithm) {
    case FG_POLICY_TOKEN:
    case FG_POLICY_LEAKY:
    case FG_POLICY_GCRA:
        out->s.tat_ns = carry_bucket(old->s.tat_ns, &old->limit.p.bucket, &l->p.bucket, now_us);
        break;
    case FG_POLICY_FIXED:
        out->s.fixed =
            carry_fixed(&old->s.fixed, old->limit.p.fixed.window_us, l->p.fixed.window_us, now_us);
        break;
    case FG_POLICY_SLIDING:
        out->s.sliding = carry_sliding(&old->s.sliding, old->limit.p.sliding.window_us,
                                       l->p.sliding.window_us, now_us);
        break;
    }
}

/* A ban keeps its end up to now + ban_us, the count its window; without a
 * penalty both are forgotten (*out starts zeroed). */
static void carry_penalty(const fg_policy_state *cur, const fg_policy_penalty *p, int64_t now_us,
                          fg_policy_state *out) {
    if (p->ban_us == 0) return;
    int64_t longest;
    if (!fg_add(now_us, p->ban_us, &longest)) longest = INT64_MAX;
    out->banned_until_us = fg_min(cur->banned_until_us, longest);
    out->denials = cur->denials;
    out->denials_start_us = cur->denials_start_us;
}

/* Expects a storable cur and valid rules (window lengths are divisors
 * here). The result is built aside, so out may be cur. */
bool fg_policy_rescale(const fg_policy_state *cur, const fg_policy_rules *rules, int64_t now_us,
                       fg_policy_state *out) {
    fg_policy_state carried; /* written up to nlimits, as it is read */
    carried.nlimits = rules->nlimits;
    carried.banned_until_us = carried.denials = carried.denials_start_us = 0;
    for (uint32_t i = 0; i < rules->nlimits; i++) {
        const fg_policy_limit_state *old = i < cur->nlimits ? &cur->limits[i] : NULL;
        carry_limit(old, &rules->limits[i], now_us, &carried.limits[i]);
    }
    carry_penalty(cur, &rules->penalty, now_us, &carried);
    bool changed = !same_state(&carried, cur);
    *out = carried;
    return changed;
}

/* --------------------------------------------------------- serialization */

/* The bytes: the version (u8); the number of limits (u8), with
 * PENALTY_FIELDS set when the penalty's integers follow; for each limit its
 * algorithm (u8), its two parameters and its state (one integer for a
 * bucket, two for a fixed window, three for a sliding window); then, when
 * flagged, the ban's end, the denial count and its window's start.
 * Integers are 64-bit little-endian two's complement, in the order of the
 * structs' fields. Version 1 had no flag and the three integers always. */

static size_t state_words(fg_policy_algorithm a) {
    return is_bucket(a) ? 1 : a == FG_POLICY_FIXED ? 2 : 3;
}

/* A limit's bytes: its algorithm, two parameters and its state. */
static size_t limit_bytes(fg_policy_algorithm a) {
    return 1 + 8 * (2 + state_words(a));
}

#define PENALTY_BYTES (3 * 8)

static bool has_penalty_fields(const fg_policy_state *s) {
    return s->banned_until_us != 0 || s->denials != 0 || s->denials_start_us != 0;
}

size_t fg_policy_state_serialized_size(const fg_policy_state *s) {
    size_t size = 2 + (has_penalty_fields(s) ? PENALTY_BYTES : 0);
    for (uint32_t i = 0; i < s->nlimits; i++)
        size += limit_bytes(s->limits[i].limit.algorithm);
    return size;
}

/* Little-endian through memcpy: one move each on the usual hosts, since a
 * check unpacks and packs the state it keeps in memory this way. */
static uint64_t to_le64(uint64_t v) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return __builtin_bswap64(v);
#else
    return v;
#endif
}

static uint8_t *put_i64(uint8_t *p, int64_t v) {
    uint64_t le = to_le64((uint64_t)v);
    memcpy(p, &le, 8);
    return p + 8;
}

static uint8_t *put_limit(uint8_t *p, const fg_policy_limit_state *ls) {
    const fg_policy_limit *l = &ls->limit;
    *p++ = (uint8_t)l->algorithm;
    switch (l->algorithm) {
    case FG_POLICY_TOKEN:
    case FG_POLICY_LEAKY:
    case FG_POLICY_GCRA:
        p = put_i64(p, l->p.bucket.emission_ns);
        p = put_i64(p, l->p.bucket.capacity);
        return put_i64(p, ls->s.tat_ns);
    case FG_POLICY_FIXED:
        p = put_i64(p, l->p.fixed.limit);
        p = put_i64(p, l->p.fixed.window_us);
        p = put_i64(p, ls->s.fixed.window_start_us);
        return put_i64(p, ls->s.fixed.count);
    case FG_POLICY_SLIDING:
        p = put_i64(p, l->p.sliding.limit);
        p = put_i64(p, l->p.sliding.window_us);
        p = put_i64(p, ls->s.sliding.window_start_us);
        p = put_i64(p, ls->s.sliding.count);
        return put_i64(p, ls->s.sliding.prev_count);
    }
    return p;
}

void fg_policy_state_serialize(const fg_policy_state *s, uint8_t *out) {
    uint8_t *p = out;
    bool penalty = has_penalty_fields(s);
    *p++ = SERIAL_VERSION;
    *p++ = (uint8_t)(s->nlimits | (penalty ? PENALTY_FIELDS : 0));
    for (uint32_t i = 0; i < s->nlimits; i++)
        p = put_limit(p, &s->limits[i]);
    if (!penalty) return;
    p = put_i64(p, s->banned_until_us);
    p = put_i64(p, s->denials);
    put_i64(p, s->denials_start_us);
}

/* Reads what is there; a read past the end yields 0 and marks the input
 * short, which is checked once at the end. */
typedef struct reader {
    const uint8_t *p, *end;
    bool short_input;
} reader;

static uint8_t read_u8(reader *r) {
    if (r->p == r->end) {
        r->short_input = true;
        return 0;
    }
    return *r->p++;
}

static int64_t read_i64(reader *r) {
    if (r->end - r->p < 8) {
        r->short_input = true;
        return 0;
    }
    uint64_t le;
    memcpy(&le, r->p, 8);
    r->p += 8;
    return (int64_t)to_le64(le);
}

/* False for an unknown algorithm: the size of what follows is unknown. */
static bool read_limit(reader *r, fg_policy_limit_state *ls) {
    uint8_t algorithm = read_u8(r);
    if (algorithm > FG_POLICY_SLIDING) return false;
    fg_policy_limit *l = &ls->limit;
    l->algorithm = (fg_policy_algorithm)algorithm;
    switch (l->algorithm) {
    case FG_POLICY_TOKEN:
    case FG_POLICY_LEAKY:
    case FG_POLICY_GCRA:
        l->p.bucket.emission_ns = read_i64(r);
        l->p.bucket.capacity = read_i64(r);
        ls->s.tat_ns = read_i64(r);
        break;
    case FG_POLICY_FIXED:
        l->p.fixed.limit = read_i64(r);
        l->p.fixed.window_us = read_i64(r);
        ls->s.fixed.window_start_us = read_i64(r);
        ls->s.fixed.count = read_i64(r);
        break;
    case FG_POLICY_SLIDING:
        l->p.sliding.limit = read_i64(r);
        l->p.sliding.window_us = read_i64(r);
        ls->s.sliding.window_start_us = read_i64(r);
        ls->s.sliding.count = read_i64(r);
        ls->s.sliding.prev_count = read_i64(r);
        break;
    }
    return true;
}

/* Reads either version into *s (written up to its nlimits, as it is read;
 * a state without penalty integers has them 0); false when the bytes cannot
 * be read as one: a version, a count or an algorithm unknown, or short. A
 * version 2 state that flags penalty integers all 0 is refused, since it
 * would not serialize to the same bytes. */
static bool read_state(reader *r, fg_policy_state *s) {
    s->banned_until_us = s->denials = s->denials_start_us = 0;
    uint8_t version = read_u8(r), count = read_u8(r);
    bool penalty = version == SERIAL_VERSION_V1 || (count & PENALTY_FIELDS);
    if (version == SERIAL_VERSION)
        count &= (uint8_t)~PENALTY_FIELDS;
    else if (version != SERIAL_VERSION_V1)
        return false;
    s->nlimits = count;
    if (s->nlimits < 1 || s->nlimits > FG_POLICY_MAX_LIMITS) return false;
    for (uint32_t i = 0; i < s->nlimits; i++)
        if (!read_limit(r, &s->limits[i])) return false;
    if (penalty) {
        s->banned_until_us = read_i64(r);
        s->denials = read_i64(r);
        s->denials_start_us = read_i64(r);
        if (version == SERIAL_VERSION && !has_penalty_fields(s)) return false;
    }
    return !r->short_input;
}

size_t fg_policy_state_packed_size(const uint8_t *in) {
    bool penalty = in[0] == SERIAL_VERSION_V1 || (in[1] & PENALTY_FIELDS);
    uint32_t nlimits = in[1] & (uint8_t)~PENALTY_FIELDS;
    size_t size = 2;
    for (uint32_t i = 0; i < nlimits; i++)
        size += limit_bytes((fg_policy_algorithm)in[size]);
    return size + (penalty ? PENALTY_BYTES : 0);
}

size_t fg_policy_state_unpack(fg_policy_state *s, const uint8_t *in) {
    /* Bytes serialize wrote from a storable state: they are not checked
     * again, the length only bounds the reads. */
    size_t len = fg_policy_state_packed_size(in);
    reader r = {in, in + len, false};
    read_state(&r, s);
    return len;
}

fg_status fg_policy_state_deserialize(fg_policy_state *s, const uint8_t *in, size_t len) {
    if (in == NULL) return FG_EINVAL;
    reader r = {in, in + len, false};
    fg_policy_state loaded;
    if (!read_state(&r, &loaded) || r.p != r.end || !fg_policy_state_storable(&loaded))
        return FG_EINVAL;
    *s = loaded;
    return FG_OK;
}
