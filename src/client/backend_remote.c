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

/* The state of a family that has none but the connection. */
static void *connection(const fg_backend_args *a) {
    return a->shared;
}

static void keep_connection(void *s) {
    (void)s;
}

/* ------------------------------------------------------------ the tables */

static const fg_bloom_ops blooms = {
    {connection, keep_connection}, fg_remote_bf_reserve, fg_remote_bf_add, fg_remote_bf_madd,
    fg_remote_bf_exists,           fg_remote_bf_mexists, fg_remote_bf_card};

static const fg_distinct_ops counters = {
    {connection, keep_connection}, fg_remote_uv_create, fg_remote_uv_add, fg_remote_uv_union};

const fg_backend fg_backend_redis = {.open = remote_open,
                                     .connect = remote_connect,
                                     .close = remote_close,
                                     .bloom = &blooms,
                                     .distinct = &counters};

const fg_backend fg_backend_cluster = {.open = remote_open,
                                       .connect = remote_connect,
                                       .close = remote_close,
                                       .bloom = &blooms,
                                       .distinct = &counters};
