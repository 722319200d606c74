/*
 * remote.h - the way of a client to its server (redis:, unix:) or to the
 * masters of its cluster (redis+cluster:), which the remote families share
 * (internal): one connection, or a cluster's, under one lock. See remote.c.
 */
#ifndef FG_REMOTE_H
#define FG_REMOTE_H

#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stddef.h>

#include "backend.h"
#include "conn.h"
#include "floodgate.h"
#include "url.h"

typedef struct fg_remote fg_remote;

/* The way to the server or cluster of `url`, not connected yet: its
 * connections take opts' timeouts and count into net. NULL with err filled
 * (FG_CODE_INVALID, FG_CODE_NOMEM) when it cannot be had. */
fg_remote *fg_remote_new(const char *url, const fg_options *opts, fg_net_counters *net,
                         fg_error *err);
void fg_remote_free(fg_remote *r);

/* fg_open's first contact. FG_CODE_OK when connected, and when the server
 * cannot be reached (err says why; the next call connects again);
 * otherwise a configuration error: a server that refuses AUTH or SELECT, a
 * node without cluster support. */
fg_code fg_remote_connect(fg_remote *r, fg_error *err);

/* Sends n commands and gets their replies: codes[i] is FG_CODE_OK when
 * replies[i] is set (the caller frees it), otherwise why it is not; err
 * tells the last failure. A single server answers all or none; a cluster
 * answers each command from the node of its key (cluster.c). */
void fg_remote_exchange(fg_remote *r, const fg_command *cmds, size_t n, redisReply **replies,
                        fg_code *codes, fg_error *err);

/* The same, all or nothing: on FG_CODE_OK every reply is set, otherwise
 * none is kept and err says the first failure's code. */
fg_code fg_remote_round_trip(fg_remote *r, const fg_command *cmds, size_t n, redisReply **replies,
                             fg_error *err);

/* The dialect of the server, or of the cluster's nodes, connecting when
 * needed (conn.h): FG_DIALECT_AUTO when it cannot be reached (err says
 * why). */
fg_dialect fg_remote_dialect(fg_remote *r, fg_error *err);

/* The shared connection of a client of one server, the caller's alone
 * until fg_remote_give_conn (for commands that are not fg_commands). */
fg_conn *fg_remote_take_conn(fg_remote *r);
void fg_remote_give_conn(fg_remote *r);

/* The server of a client of one server (not of a cluster). */
const fg_url *fg_remote_addr(const fg_remote *r);

/* What every connection of the client takes: the timeouts and counters. */
const fg_conn_config *fg_remote_config(const fg_remote *r);

/* The open and close of a family whose state is the fg_remote itself (the
 * backend's shared part), as its table takes them: the state is the
 * client's fg_remote, and closing it is left to the backend. */
void *fg_remote_state(const fg_backend_args *a);
void fg_remote_keep(void *s);

#endif
