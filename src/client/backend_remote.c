/*
 * backend_remote.c - redis:, unix: and redis+cluster:, the backends over
 * the module's commands: their tables (backend.h).
 *
 * What the families share is the client's way to its server or cluster
 * (remote.c): one connection, or a cluster's, under one lock. Each family's
 * calls are in a file of its own:
 *
 *   Bloom filters     remote_bloom.c     no state but the connection
 *   unique counters   remote_distinct.c  no state but the connection
 *
 * The two backends differ only in how commands are routed, which remote.c
 * hides.
 */
#include "backend_remote.h"

#include "remote.h"
#include "remote_bloom.h"
#include "remote_distinct.h"
#include "remote_lock.h"

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

const fg_backend fg_backend_redis = {.open = remote_open,
                                     .connect = remote_connect,
                                     .close = remote_close,
                                     .bloom = &fg_remote_blooms,
                                     .distinct = &fg_remote_counters,
                                     .locks = &fg_remote_locks};

const fg_backend fg_backend_cluster = {.open = remote_open,
                                       .connect = remote_connect,
                                       .close = remote_close,
                                       .bloom = &fg_remote_blooms,
                                       .distinct = &fg_remote_counters,
                                       .without = {[FG_FAMILY_LOCKS] =
                                                       "locks are not supported on "
                                                       "redis+cluster: URLs (use a redis: URL "
                                                       "of the master of the lock's slot)"}};
