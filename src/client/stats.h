/*
 * stats.h - the counters fg_get_stats reads (internal): atomics, moved by
 * the client, its backends and their connections, so that reading them
 * never waits for a connection.
 */
#ifndef FG_STATS_H
#define FG_STATS_H

#include <stdatomic.h>
#include <stdint.h>

/* What the network layer moves (remote/conn.c). */
typedef struct fg_net_counters {
    atomic_uint_fast64_t round_trips, failures, reconnects;
} fg_net_counters;

/* The client's, moved by its backend. */
typedef struct fg_counters {
    atomic_uint_fast64_t decisions, denials_cached, lease_hits;
    fg_net_counters net; /* round trips, failures, reconnects */
} fg_counters;

/* Counts n more; no order with other memory is needed of a statistic. */
static inline void fg_count(atomic_uint_fast64_t *counter, uint64_t n) {
    atomic_fetch_add_explicit(counter, n, memory_order_relaxed);
}

#endif
