/*
 * sliding_log.h - the exact sliding window: one timestamp per admitted unit.
 */
#ifndef FG_SLIDING_LOG_H
#define FG_SLIDING_LOG_H

#include <stddef.h>

#include "allocator.h"
#include "decision.h"

/* The log costs 8 bytes per admitted unit still in the window, so the limit
 * is bounded; larger limits belong to the sliding window counter. */
#define FG_SLOG_MAX_LIMIT 100000

typedef struct fg_slog {
    int64_t *ts;   /* ring buffer of admission times (us), oldest at head */
    uint32_t head; /* index of the oldest entry */
    uint32_t len;  /* entries in use */
    uint32_t cap;  /* entries allocated */
} fg_slog;

typedef struct fg_slog_params {
    int64_t limit;     /* units per window, 1 .. FG_SLOG_MAX_LIMIT */
    int64_t window_us; /* window length, >= 1 */
} fg_slog_params;

/* What an allowed request changes: drop every entry <= drop_through_us, then
 * append `count` entries stamped `at_us`. Replicas apply the same effect. */
typedef struct fg_slog_effect {
    int64_t drop_through_us;
    int64_t at_us;
    int64_t count;
} fg_slog_effect;

/* Read-only decision. Entries newer than now (a clock that stepped back) still
 * count. When allowed with cost > 0, *e is the effect to apply; otherwise *e
 * is a no-op (count 0, drops nothing) and nothing needs to be written. */
fg_status fg_slog_decide(const fg_slog *log, const fg_slog_params *p, int64_t now_us,
                         int64_t cost, fg_decision *d, fg_slog_effect *e);

/* Apply an effect. FG_EINVAL if at_us is older than the newest entry kept or
 * the log would exceed FG_SLOG_MAX_LIMIT entries; FG_EOVERFLOW if memory
 * cannot be had. The log is unchanged on error. */
fg_status fg_slog_apply(fg_slog *log, const fg_slog_effect *e, const fg_allocator *a);

/* Entry i (0 = oldest) of the log. */
int64_t fg_slog_at(const fg_slog *log, uint32_t i);

/* Newest entry + window: when the log is empty again. 0 for an empty log. */
int64_t fg_slog_expires_at_us(const fg_slog *log, const fg_slog_params *p);

void fg_slog_free(fg_slog *log, const fg_allocator *a);

#endif
