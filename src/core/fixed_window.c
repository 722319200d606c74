/*
 * fixed_window.c - the fixed window counter.
 *
 * Time is cut into windows of `window_us` aligned to the Unix epoch (a window
 * starts at every multiple of window_us), and each key counts the units it
 * admitted in the window it is in. A request of `cost` units is admitted when
 * count + cost <= limit; the count starts again from zero in the next window.
 *
 * The state is two integers, the window start and the count. A count of 0 is
 * the empty state whatever its window start says.
 *
 * Trade-offs: it is the cheapest algorithm and the easiest to explain, and
 * all keys with the same window reset at the same moment. The price is the
 * boundary burst: `limit` units at the very end of one window and `limit`
 * more at the start of the next make 2 * limit within a few microseconds.
 * FG.SLIDING and FG.SLIDELOG exist for when that matters.
 *
 * Edge cases:
 *
 *   - A stored window older than the current one is stale: the counter is
 *     fresh, without any write needed to reset it.
 *   - A stored window newer than the current one means the clock stepped
 *     back. The stored window and its count are kept as they are, so a step
 *     back never grants extra capacity; retry_after then points at the end of
 *     that stored window, which is in the future.
 *   - A stored start that is not on the window grid (the key was used with
 *     another window length, or set by hand) is first moved down to the grid,
 *     so that every window ends on the grid and retry_after stays exact.
 *   - cost > limit can never fit: denied with retry_after -1.
 *   - cost 0 is a peek: it is answered like any request and writes nothing.
 *   - A stored count above the limit (the limit was lowered) just denies
 *     until the window ends; remaining is clamped to 0.
 *   - count + cost is overflow checked (an overflow cannot fit the limit), and
 *     so are the window end and the conversions to nanoseconds.
 */

#include "fixed_window.h"

#include <stddef.h>

#include "checked.h"

/* The window a request falls in and what it already holds. */
typedef struct fixed_window {
    int64_t start;
    int64_t end;
    int64_t count;
} fixed_window;

static bool fixed_params_valid(const fg_fixed_params *p) {
    return p != NULL && p->limit >= 1 && p->window_us >= 1;
}

/* Start of the window holding t (t >= 0): windows start at multiples of
 * window_us since the epoch. */
static int64_t fixed_window_start(int64_t t, int64_t window_us) {
    return t - t % window_us;
}

/* Finds the window `now_us` is judged in: the epoch-aligned window holding
 * now, or the stored one if the clock stepped back behind it. A negative
 * stored start is older than any window and needs no aligning. */
static fg_status fixed_current_window(const fg_fixed_state *cur, const fg_fixed_params *p,
                                      int64_t now_us, fixed_window *w) {
    int64_t aligned = fixed_window_start(now_us, p->window_us);
    int64_t stored = cur->window_start_us;
    if (stored > 0) stored = fixed_window_start(stored, p->window_us);

    if (cur->count == 0 || stored < aligned) {
        w->start = aligned;
        w->count = 0;
    } else {
        w->start = stored;
        w->count = cur->count;
    }
    if (!fg_add(w->start, p->window_us, &w->end)) return FG_EOVERFLOW;
    return FG_OK;
}

/* Nanoseconds from now until the window ends. The end is always after now:
 * the aligned window contains now and a stored window kept after a step
 * back starts after now. */
static fg_status fixed_time_to_end(const fixed_window *w, int64_t now_us, int64_t *ns) {
    return fg_mul(w->end - now_us, FG_NS_PER_US, ns) ? FG_OK : FG_EOVERFLOW;
}

fg_status fg_fixed_decide(const fg_fixed_state *cur, const fg_fixed_params *p,
                          int64_t now_us, int64_t cost, fg_decision *d,
                          fg_fixed_state *next) {
    if (!fixed_params_valid(p) || cur == NULL || cur->count < 0 || now_us < 0 || cost < 0)
        return FG_EINVAL;

    fixed_window w;
    int64_t to_end_ns, count_after;
    if (fixed_current_window(cur, p, now_us, &w) != FG_OK) return FG_EOVERFLOW;
    if (fixed_time_to_end(&w, now_us, &to_end_ns) != FG_OK) return FG_EOVERFLOW;

    bool allowed = fg_add(w.count, cost, &count_after) && count_after <= p->limit;
    if (!allowed) count_after = w.count;

    d->allowed = allowed;
    d->limit = p->limit;
    d->remaining = fg_max(p->limit - count_after, 0);
    d->retry_after_ns = (allowed || cost > p->limit) ? -1 : to_end_ns;
    d->reset_after_ns = count_after > 0 ? to_end_ns : 0;

    *next = *cur;
    if (allowed && cost > 0) {
        next->window_start_us = w.start;
        next->count = count_after;
    }
    return FG_OK;
}

fg_status fg_fixed_refund(const fg_fixed_state *cur, const fg_fixed_params *p, int64_t now_us,
                          int64_t units, fg_fixed_state *next, int64_t *refunded) {
    if (!fixed_params_valid(p) || cur == NULL || cur->count < 0 || now_us < 0 || units < 0)
        return FG_EINVAL;
    fixed_window w;
    if (fixed_current_window(cur, p, now_us, &w) != FG_OK) return FG_EOVERFLOW;
    /* The window's count is the stored one only while the stored window is
     * the one now is judged in; otherwise it has reset and holds nothing. */
    *refunded = fg_min(units, w.count);
    *next = *cur;
    if (*refunded > 0) {
        next->window_start_us = w.start;
        next->count = w.count - *refunded;
    }
    return FG_OK;
}

/* Saturates instead of overflowing: a window ending past the year 292277
 * cannot expire anyway. */
int64_t fg_fixed_expires_at_us(const fg_fixed_state *s, const fg_fixed_params *p) {
    int64_t end;
    if (!fg_add(s->window_start_us, p->window_us, &end)) return INT64_MAX;
    return end;
}

bool fg_fixed_state_storable(const fg_fixed_state *s) {
    return s->window_start_us >= 0 && s->count >= 1;
}
