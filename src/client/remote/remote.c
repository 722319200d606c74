/*
 * remote.c - the way of a client to its server or cluster (see remote.h).
 *
 * redis: and unix: have a single hiredis connection (conn.c), guarded by a
 * mutex, because a redisContext is not thread-safe and one connection keeps
 * the order of a caller's requests. redis+cluster: sends each command to the
 * master of its key's slot (cluster.c), under the same mutex. Calls that
 * wait in the server (locks, policies) take connections of their own
 * instead, so that they do not hold this one.
 *
 * Any I/O failure (connect error, timeout, lost connection) closes the
 * connection, and the caller decides what it means (client.c's failure
 * policy, or FG_CODE_IO). The next call connects again: hiredis contexts are
 * unusable after an error, so there is no attempt to recover one. A failed
 * connect delays the next attempt by FG_RECONNECT_DELAY_MS, so that a dead
 * server costs callers nothing more than a failed call in the meantime. A
 * cluster follows redirects and failovers first, and only what stays
 * unanswered is a failure.
 *
 * On a server without the module the connection speaks scripts (conn.c):
 * the same commands go as EVALSHA, and a round trip's commands answered
 * NOSCRIPT go again as EVAL in one more, so a flushed script cache costs
 * one round trip, never an answer.
 */
#include "remote.h"

#include <pthread.h>
#include <stdlib.h>

#include "cluster.h"
#include "error.h"

struct fg_remote {
    pthread_mutex_t lock; /* guards conn and cluster */
    fg_url addr;          /* one server */
    fg_conn conn;         /* one server */
    fg_cluster *cluster;  /* a cluster */
    fg_conn_config cfg;
};

fg_remote *fg_remote_new(const char *url, const fg_options *opts, fg_net_counters *net,
                         fg_error *err) {
    fg_remote *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        fg_set_error(err, FG_CODE_NOMEM, "out of memory");
        return NULL;
    }
    r->cfg = (fg_conn_config){opts->connect_timeout_ms, opts->command_timeout_ms, net};
    pthread_mutex_init(&r->lock, NULL);
    bool ok = fg_cluster_url(url) ? (r->cluster = fg_cluster_new(url, &r->cfg, err)) != NULL
                                  : fg_url_parse(url, &r->addr, err) == FG_CODE_OK;
    if (ok) return r;
    fg_remote_free(r);
    return NULL;
}

void fg_remote_free(fg_remote *r) {
    if (r == NULL) return;
    fg_conn_close(&r->conn);
    fg_cluster_free(r->cluster);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

fg_code fg_remote_connect(fg_remote *r, fg_error *err) {
    pthread_mutex_lock(&r->lock);
    fg_code rc = r->cluster != NULL ? fg_cluster_refresh(r->cluster, err)
                                    : fg_conn_ensure(&r->conn, &r->addr, &r->cfg, err);
    pthread_mutex_unlock(&r->lock);
    return rc == FG_CODE_IO ? FG_CODE_OK : rc;
}

/* Sends n commands in one write to the server and reads their n replies
 * (and those answered NOSCRIPT once more, as EVAL: conn.c). On FG_CODE_OK
 * every reply is set; on failure none is, and an I/O failure has closed
 * the connection. With the lock held. */
static fg_code server_round_trip(fg_remote *r, const fg_command *cmds, size_t n,
                                 redisReply **replies, fg_error *err) {
    fg_code rc = fg_conn_ensure(&r->conn, &r->addr, &r->cfg, err);
    if (rc == FG_CODE_OK) {
        fg_count(&r->cfg.counters->round_trips, 1);
        for (size_t i = 0; i < n && rc == FG_CODE_OK; i++)
            rc = fg_conn_append(&r->conn, &cmds[i], err);
        if (rc == FG_CODE_OK) rc = fg_conn_flush(&r->conn, err);
        if (rc == FG_CODE_OK) rc = fg_conn_receive(&r->conn, replies, n, err);
        if (rc == FG_CODE_OK)
            rc = fg_conn_resend_noscript(&r->conn, cmds, n, replies, r->cfg.counters, err);
    }
    if (rc == FG_CODE_IO) fg_count(&r->cfg.counters->failures, 1);
    return rc;
}

void fg_remote_exchange(fg_remote *r, const fg_command *cmds, size_t n, redisReply **replies,
                        fg_code *codes, fg_error *err) {
    pthread_mutex_lock(&r->lock);
    if (r->cluster != NULL) {
        fg_cluster_run(r->cluster, cmds, n, replies, codes, err);
    } else {
        fg_code rc = server_round_trip(r, cmds, n, replies, err);
        for (size_t i = 0; i < n; i++)
            codes[i] = rc;
    }
    pthread_mutex_unlock(&r->lock);
}

fg_code fg_remote_round_trip(fg_remote *r, const fg_command *cmds, size_t n, redisReply **replies,
                             fg_error *err) {
    fg_code one;
    fg_code *codes = n <= 1 ? &one : malloc(n * sizeof(*codes));
    if (codes == NULL) return fg_set_error(err, FG_CODE_NOMEM, "out of memory");
    fg_remote_exchange(r, cmds, n, replies, codes, err);
    fg_code rc = FG_CODE_OK;
    for (size_t i = 0; i < n && rc == FG_CODE_OK; i++)
        rc = codes[i];
    for (size_t i = 0; i < n && rc != FG_CODE_OK; i++)
        if (codes[i] == FG_CODE_OK) freeReplyObject(replies[i]);
    if (codes != &one) free(codes);
    return rc;
}

fg_dialect fg_remote_dialect(fg_remote *r, fg_error *err) {
    pthread_mutex_lock(&r->lock);
    fg_dialect d = FG_DIALECT_AUTO;
    if (r->cluster != NULL)
        d = fg_cluster_dialect(r->cluster, err);
    else if (fg_conn_ensure(&r->conn, &r->addr, &r->cfg, err) == FG_CODE_OK)
        d = r->conn.dialect;
    pthread_mutex_unlock(&r->lock);
    return d;
}

fg_conn *fg_remote_take_conn(fg_remote *r) {
    pthread_mutex_lock(&r->lock);
    return &r->conn;
}

void fg_remote_give_conn(fg_remote *r) {
    pthread_mutex_unlock(&r->lock);
}

const fg_url *fg_remote_addr(const fg_remote *r) {
    return &r->addr;
}

const fg_conn_config *fg_remote_config(const fg_remote *r) {
    return &r->cfg;
}

void *fg_remote_state(const fg_backend_args *a) {
    return a->shared;
}

void fg_remote_keep(void *s) {
    (void)s; /* the backend closes it, after the families */
}
