/*
 * conn.h - one hiredis connection to one server, as libfloodgate uses it
 * (internal): opened on demand with AUTH and SELECT, closed after any I/O
 * failure (a hiredis context is unusable after an error), and not reopened
 * sooner than FG_RECONNECT_DELAY_MS after a failed connect.
 *
 * A single server has one fg_conn; a cluster has one per node (cluster.c).
 * Not thread-safe: the caller holds its own lock.
 */
#ifndef FG_CONN_H
#define FG_CONN_H

#include <hiredis/hiredis.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>

#include "floodgate.h"
#include "limit_args.h"
#include "url.h"

#define FG_RECONNECT_DELAY_MS 100
/* FG.PEEK FAMILY key 3 params COST n AT us */
#define FG_CMD_MAX_ARGS 10

/* One command ready for hiredis, with the key it is routed by. */
typedef struct fg_command {
    int argc;
    const char *argv[FG_CMD_MAX_ARGS];
    size_t argvlen[FG_CMD_MAX_ARGS];
    const char *key;
    size_t keylen;
    char nums[FG_LIMIT_MAX_ARGS + 2][FG_ARG_MAX]; /* storage of numeric arguments */
} fg_command;

/* The counters of fg_stats that the network layer moves. */
typedef struct fg_net_counters {
    atomic_uint_fast64_t round_trips, failures, reconnects;
} fg_net_counters;

/* What every connection of a client shares. */
typedef struct fg_conn_config {
    int connect_timeout_ms;
    int command_timeout_ms;
    fg_net_counters *counters;
} fg_conn_config;

typedef struct fg_conn {
    redisContext *ctx;            /* NULL while disconnected */
    bool connected_once;          /* later connections count as reconnects */
    struct timespec next_connect; /* monotonic: no attempt before this */
} fg_conn;

void fg_count(atomic_uint_fast64_t *counter, uint64_t n);

/* Connects to `addr` unless connected. FG_CODE_IO when the server cannot be
 * reached; FG_CODE_SERVER when it refuses AUTH or SELECT. */
fg_code fg_conn_ensure(fg_conn *conn, const fg_url *addr, const fg_conn_config *cfg,
                       fg_error *err);

void fg_conn_close(fg_conn *conn);

/* Buffers one command; fg_conn_flush writes everything buffered without
 * waiting for the replies, so that a caller can write to several servers
 * before reading from any. Both close the connection on failure. */
fg_code fg_conn_append(fg_conn *conn, const fg_command *cmd, fg_error *err);
fg_code fg_conn_flush(fg_conn *conn, fg_error *err);

/* Reads n replies into replies[]. On FG_CODE_OK every reply is set (the
 * caller frees them); on failure none is and the connection is closed. */
fg_code fg_conn_receive(fg_conn *conn, redisReply **replies, size_t n, fg_error *err);

#endif
