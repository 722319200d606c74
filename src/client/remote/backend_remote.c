/*
 * backend_remote.c - redis:, unix: and redis+cluster:, the backends over the
 * module's commands: which tables they have (backend.h).
 *
 * What the families share is the client's way to its server or cluster
 * (remote.c): one connection, or a cluster's, under one lock. Each family's
 * table is in a file of its own, its functions private to it:
 *
 *   rate limits       remote_limit.c     the failure policy, denial cache,
 *                                        leases
 *   Bloom filters     remote_bloom.c     no state but the connection
 *   unique counters   remote_distinct.c  no state but the connection
 *   locks             remote_lock.c      connections of waiting calls,
 *                                        renewal; not on a cluster
 *   policies          remote_policy.c    connections of waiting checks and of
 *                                        a cluster's masters; the loader
 *
 * The two backends differ only in how commands are routed, which remote.c
 * hides, and in the locks, which redis+cluster: does not have (its message
 * says what to use instead).
 */
#include "backend_remote.h"

#include "remote.h"
#include "remote_bloom.h"
#include "remote_distinct.h"
#include "remote_limit.h"
#include "remote_lock.h"
#include "remote_policy.h"

/* ------------------------------------------------------- the connection */

static void *remote_open(const fg_backend_args *a, fg_error *err) {
    return fg_remote_new(a->url, a->opts, &a->counters->net, err);
}

static fg_code remote_connect(void *shared, fg_error *err) {
    return fg_remote_connect(shared, err);
}

static void remote_close(void *shared) {
    fg_remote_free(shared);
}

static const fg_shared_ops connection = {remote_open, remote_connect, remote_close};

/* ----------------------------------------------------------- the backends */

static const char no_locks[] = "locks are not supported on redis+cluster: URLs (use a redis: URL "
                               "of the master of the lock's slot)";

const fg_backend fg_backend_redis = {.shared = &connection,
                                     .limits = &fg_remote_limits,
                                     .bloom = &fg_remote_blooms,
                                     .distinct = &fg_remote_counters,
                                     .locks = &fg_remote_locks,
                                     .policies = &fg_remote_policies};

const fg_backend fg_backend_cluster = {.without = {[FG_FAMILY_LOCKS] = no_locks},
                                       .shared = &connection,
                                       .limits = &fg_remote_limits,
                                       .bloom = &fg_remote_blooms,
                                       .distinct = &fg_remote_counters,
                                       .policies = &fg_remote_policies};
