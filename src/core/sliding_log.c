/*
 * sliding_log.c - the sliding window log: the exact sliding window.
 *
 * The key keeps one timestamp (microseconds) per admitted unit, oldest first.
 * A unit stamped ts counts at time now while ts > now - window, so a request
 * of `cost` units is admitted when counted + cost <= limit. Nothing is
 * estimated: at every microsecond at most `limit` units were admitted within
 * the last `window` microseconds.
 *
 * Trade-offs: exactness costs 8 bytes per admitted unit still in the window,
 * so the limit is bounded by FG_SLOG_MAX_LIMIT (800 kB per key at most); the
 * sliding window counter does the same job in 24 bytes, approximately.
 *
 * Storage: a ring buffer of int64 timestamps (head = oldest). Admitting
 * appends at the tail, expiring drops from the head, both O(1) per entry,
 * and the timestamps are kept in non-decreasing order, so the first counted
 * entry is found by binary search. The ring grows geometrically through the
 * caller's allocator, never beyond FG_SLOG_MAX_LIMIT entries, and shrinks
 * once it is three quarters empty, so a burst does not pin its memory.
 *
 * Deciding and changing are separate so that a replica or the AOF can replay
 * an admission exactly: fg_slog_decide only reads and describes the change as
 * an effect (drop every entry <= now - window, append `cost` entries stamped
 * now), and fg_slog_apply performs it. Apply validates the effect and does
 * all of its allocation before it touches the log, so a failed apply leaves
 * the log as it was.
 *
 * The answer:
 *
 *   - remaining = limit - counted after the decision, at least 0.
 *   - retry_after: with k = counted + cost - limit units too many, the k
 *     oldest counted entries must leave the window; the k-th leaves at
 *     ts_k + window. That is exact: one microsecond earlier it still counts.
 *     -1 when cost > limit.
 *   - reset_after = newest + window - now, when the last entry leaves.
 *
 * Edge cases:
 *
 *   - A clock that stepped back leaves entries newer than now. They still
 *     count (a step back never grants capacity), and new entries are stamped
 *     with the newest time rather than now, keeping the log ordered.
 *   - cost 0 is a peek and produces no effect.
 *   - A limit lowered below what the log holds just denies, remaining 0.
 *   - When the request is not to be written, *e is a no-op effect (count 0,
 *     drops nothing), so applying it anyway is harmless.
 */

#include "sliding_log.h"

#include <string.h>

#include "checked.h"

/* The smallest ring allocated, and the floor below which it never shrinks. */
#define SLOG_MIN_CAP 2u

static bool slog_params_valid(const fg_slog_params *p) {
    return p != NULL && p->limit >= 1 && p->limit <= FG_SLOG_MAX_LIMIT && p->window_us >= 1;
}

/* The fields must describe a ring: entries within the allocation, no entries
 * without one, and never more than the limit allows. */
static bool slog_shape_valid(const fg_slog *log) {
    if (log == NULL) return false;
    if (log->cap == 0) return log->len == 0;
    return log->ts != NULL && log->head < log->cap && log->len <= log->cap &&
           log->len <= FG_SLOG_MAX_LIMIT;
}

/* Slot of entry i (0 = oldest); i <= cap, so head + i cannot wrap twice. */
static uint32_t slog_slot(const fg_slog *log, uint32_t i) {
    uint32_t slot = log->head + i;
    return slot >= log->cap ? slot - log->cap : slot;
}

int64_t fg_slog_at(const fg_slog *log, uint32_t i) {
    if (log == NULL || i >= log->len) return 0;
    return log->ts[slog_slot(log, i)];
}

static int64_t slog_newest(const fg_slog *log) {
    return log->ts[slog_slot(log, log->len - 1)];
}

/* How many leading entries are <= t. The log is in non-decreasing order, so
 * they are a prefix and a binary search finds its end. */
static uint32_t slog_count_through(const fg_slog *log, int64_t t) {
    uint32_t lo = 0, hi = log->len;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (fg_slog_at(log, mid) <= t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* ---------------------------------------------------------------- decide */

/* Nanoseconds from now until `until_us`, which is after now. */
static fg_status slog_ns_until(int64_t until_us, int64_t now_us, int64_t *ns) {
    return fg_mul(until_us - now_us, FG_NS_PER_US, ns) ? FG_OK : FG_EOVERFLOW;
}

/* When the denied request would fit: once the k-th oldest counted entry has
 * left the window, k being how many units are too many. */
static fg_status slog_retry_after(const fg_slog *log, const fg_slog_params *p, int64_t now_us,
                                  uint32_t first_counted, int64_t counted, int64_t cost,
                                  int64_t *ns) {
    if (cost > p->limit) {
        *ns = -1;
        return FG_OK;
    }
    /* 1 <= excess <= counted: denied means counted + cost > limit, and
     * cost <= limit. */
    int64_t excess = counted + cost - p->limit, leaves_at;
    int64_t ts = fg_slog_at(log, first_counted + (uint32_t)(excess - 1));
    if (!fg_add(ts, p->window_us, &leaves_at)) return FG_EOVERFLOW;
    return slog_ns_until(leaves_at, now_us, ns);
}

fg_status fg_slog_decide(const fg_slog *log, const fg_slog_params *p, int64_t now_us,
                         int64_t cost, fg_decision *d, fg_slog_effect *e) {
    if (!slog_params_valid(p) || !slog_shape_valid(log) || now_us < 0 || cost < 0)
        return FG_EINVAL;

    /* now >= 0 and window >= 1, so this cannot overflow. */
    int64_t horizon = now_us - p->window_us;
    uint32_t first_counted = slog_count_through(log, horizon);
    int64_t counted = (int64_t)(log->len - first_counted);
    bool allowed = counted <= p->limit && cost <= p->limit - counted;
    bool writes = allowed && cost > 0;
    int64_t stamp = log->len > 0 ? fg_max(now_us, slog_newest(log)) : now_us;
    int64_t counted_after = writes ? counted + cost : counted;
    int64_t retry_ns = -1, reset_ns = 0;

    if (!allowed &&
        slog_retry_after(log, p, now_us, first_counted, counted, cost, &retry_ns) != FG_OK)
        return FG_EOVERFLOW;
    if (counted_after > 0) {
        int64_t newest = writes ? stamp : slog_newest(log), empty_at;
        if (!fg_add(newest, p->window_us, &empty_at)) return FG_EOVERFLOW;
        if (slog_ns_until(empty_at, now_us, &reset_ns) != FG_OK) return FG_EOVERFLOW;
    }

    d->allowed = allowed;
    d->limit = p->limit;
    d->remaining = fg_max(p->limit - counted_after, 0);
    d->retry_after_ns = retry_ns;
    d->reset_after_ns = reset_ns;

    e->drop_through_us = writes ? horizon : INT64_MIN;
    e->at_us = stamp;
    e->count = writes ? cost : 0;
    return FG_OK;
}

/* ----------------------------------------------------------------- apply */

/* Grows the ring to hold at least `needed` entries. Only the allocation can
 * fail, and then the log is untouched (realloc keeps the old block). On
 * success the entries are where they were, the wrapped part moved so that
 * the ring is contiguous modulo the new capacity. */
static fg_status slog_grow(fg_slog *log, uint32_t needed, const fg_allocator *a) {
    uint32_t cap = log->cap < SLOG_MIN_CAP / 2 ? SLOG_MIN_CAP : log->cap * 2;
    if (cap < needed) cap = needed;
    if (cap > FG_SLOG_MAX_LIMIT) cap = FG_SLOG_MAX_LIMIT;

    int64_t *ts = a->realloc(log->ts, (size_t)cap * sizeof(*ts));
    if (ts == NULL) return FG_EOVERFLOW;

    /* A wrapped ring has its oldest entries at [head, old cap): slide them
     * to the end of the larger block so the ring stays contiguous. */
    if (log->len > log->cap - log->head) {
        uint32_t oldest_part = log->cap - log->head;
        uint32_t new_head = cap - oldest_part;
        memmove(ts + new_head, ts + log->head, (size_t)oldest_part * sizeof(*ts));
        log->head = new_head;
    }
    log->ts = ts;
    log->cap = cap;
    return FG_OK;
}

/* Moves the entries to the start of the block (head = 0). Only used when the
 * ring is at most half full, which guarantees that the two parts of a
 * wrapped ring can be moved one after the other without overlapping. */
static void slog_linearize(fg_slog *log) {
    uint32_t oldest_part = log->cap - log->head;
    if (log->len <= oldest_part) {
        memmove(log->ts, log->ts + log->head, (size_t)log->len * sizeof(*log->ts));
    } else {
        uint32_t newest_part = log->len - oldest_part;
        memmove(log->ts + oldest_part, log->ts, (size_t)newest_part * sizeof(*log->ts));
        memmove(log->ts, log->ts + log->head, (size_t)oldest_part * sizeof(*log->ts));
    }
    log->head = 0;
}

/* Gives memory back once the ring is three quarters empty (an empty log
 * keeps no block at all). Best effort: if the smaller block cannot be had
 * the log keeps the larger one, which is still correct. */
static void slog_maybe_shrink(fg_slog *log, const fg_allocator *a) {
    if (log->len == 0 && log->ts != NULL) {
        a->free(log->ts);
        memset(log, 0, sizeof(*log));
        return;
    }
    if (log->cap <= SLOG_MIN_CAP || log->len > log->cap / 4) return;

    uint32_t cap = log->len * 2 < SLOG_MIN_CAP ? SLOG_MIN_CAP : log->len * 2;
    slog_linearize(log);
    int64_t *ts = a->realloc(log->ts, (size_t)cap * sizeof(*ts));
    if (ts == NULL) return;
    log->ts = ts;
    log->cap = cap;
}

static void slog_drop_oldest(fg_slog *log, uint32_t n) {
    log->head = n == log->len ? 0 : slog_slot(log, n);
    log->len -= n;
}

static void slog_append(fg_slog *log, int64_t at_us, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) log->ts[slog_slot(log, log->len + i)] = at_us;
    log->len += n;
}

fg_status fg_slog_apply(fg_slog *log, const fg_slog_effect *e, const fg_allocator *a) {
    if (!slog_shape_valid(log) || e == NULL || a == NULL || e->count < 0) return FG_EINVAL;
    /* Timestamps are times since the epoch; refusing negative ones also makes
     * the no-op effect (drop through INT64_MIN) drop nothing. */
    if (e->count > 0 && e->at_us < 0) return FG_EINVAL;

    uint32_t dropped = slog_count_through(log, e->drop_through_us);
    uint32_t kept = log->len - dropped;
    if (e->count > FG_SLOG_MAX_LIMIT - (int64_t)kept) return FG_EINVAL;
    /* Appending older than what stays would break the order. */
    if (e->count > 0 && kept > 0 && e->at_us < slog_newest(log)) return FG_EINVAL;

    uint32_t added = (uint32_t)e->count;
    if (kept + added > log->cap && slog_grow(log, kept + added, a) != FG_OK)
        return FG_EOVERFLOW;

    slog_drop_oldest(log, dropped);
    slog_append(log, e->at_us, added);
    slog_maybe_shrink(log, a);
    return FG_OK;
}

/* ------------------------------------------------------------- lifetime */

int64_t fg_slog_expires_at_us(const fg_slog *log, const fg_slog_params *p) {
    int64_t at;
    if (log == NULL || log->len == 0) return 0;
    return fg_add(slog_newest(log), p->window_us, &at) ? at : INT64_MAX;
}

void fg_slog_free(fg_slog *log, const fg_allocator *a) {
    if (log->ts != NULL) a->free(log->ts);
    memset(log, 0, sizeof(*log));
}
