/*
 * conn.h - one hiredis connection to one server, as libfloodgate uses it
 * (internal): opened on demand with AUTH and SELECT, closed after any I/O
 * failure (a hiredis context is unusable after an error), and not reopened
 * sooner than FG_RECONNECT_DELAY_MS after a failed connect.
 *
 * A single server has one fg_conn; a cluster has one per node (cluster.c).
 * Not thread-safe: the caller holds its own lock.
 *
 * Each connection speaks a dialect, learned as it opens (or the URL's
 * ?backend=): the module's commands, or the server scripts, into which
 * fg_conn_append turns every command that has one (scripts.h). See conn.c.
 */
#ifndef FG_CONN_H
#define FG_CONN_H

#include <hiredis/hiredis.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>

#include "floodgate.h"
#include "limit_args.h"
#include "monotonic.h"
#include "stats.h"
#include "url.h"

#define FG_RECONNECT_DELAY_MS 100
/* FG.PEEK FAMILY key 3 params COST n AT us (the script form's 3 more are
 * fg_conn_append's: FG_SCRIPT_EXTRA_ARGS) */
#define FG_CMD_MAX_ARGS 12

/* How a connection learns its dialect: COMMAND INFO's entry for the module's
 * command is nil without the module; when COMMAND is refused (an ACL user
 * of the module's commands only, a managed server that renamed it), the
 * command without arguments: "ERR unknown command" without the module, an
 * arity error with it, whatever the user may run (Redis checks arity
 * before ACLs), and never a change. */
#define FG_DIALECT_ASK   "COMMAND INFO FG.TOKEN"
#define FG_DIALECT_PROBE "FG.TOKEN"
/* Whether the server has BF.* of its own (RedisBloom, Redis 8, Valkey's
 * Bloom module, or the module's), asked the same two ways, in the same
 * round trip: a connection that speaks scripts then sends BF.* as they
 * are. */
#define FG_BLOOM_ASK   "COMMAND INFO BF.ADD"
#define FG_BLOOM_PROBE "BF.ADD"

/* One command ready for hiredis, with the key it is routed by (a limit's
 * check; the lock calls use fg_argv). */
typedef struct fg_command {
    int argc;
    const char *argv[FG_CMD_MAX_ARGS];
    size_t argvlen[FG_CMD_MAX_ARGS];
    const char *key;
    size_t keylen;
    char nums[FG_LIMIT_MAX_ARGS + 2][FG_ARG_MAX]; /* storage of numeric arguments */
} fg_command;

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
    /* The failed attempt's message, repeated until next_connect: whichever
     * thread then calls hears why, not only that it failed. */
    char last_error[sizeof(((fg_error *)0)->message)];
    fg_code last_code;  /* and its code: a refused AUTH is not a lost server */
    fg_dialect dialect; /* while connected: MODULE or SCRIPT */
    bool own_bloom;     /* while connected: the server has BF.* of its own */
} fg_conn;

/* A command of up to FG_ARGV_MAX arguments, numbers kept in its own
 * storage: the lock calls (FG.MLOCK names up to 64 keys). Built with
 * fg_argv_init, fg_argv_str and fg_argv_num; strings are borrowed. */
#define FG_ARGV_MAX  72
#define FG_ARGV_NUMS 6

typedef struct fg_argv {
    int argc, nnums;
    const char *argv[FG_ARGV_MAX];
    size_t argvlen[FG_ARGV_MAX];
    char nums[FG_ARGV_NUMS][24];
} fg_argv;

void fg_argv_init(fg_argv *a, const char *name);
void fg_argv_str(fg_argv *a, const char *s);
void fg_argv_num(fg_argv *a, int64_t v);

/* An error reply as a code: WRONGTYPE, ERR unknown command (the module is
 * not loaded: FG_CODE_PROTOCOL), ERR (the module's argument errors:
 * FG_CODE_INVALID), anything else (FG_CODE_SERVER). */
fg_code fg_reply_error(const redisReply *r, fg_error *err);

/* The dialect a reply to FG_DIALECT_ASK tells; FG_DIALECT_AUTO when it
 * tells none (an error: FG_DIALECT_PROBE decides). */
fg_dialect fg_dialect_of_ask(const redisReply *r);

/* The dialect a reply to FG_DIALECT_PROBE tells. */
fg_dialect fg_dialect_of_probe(const redisReply *r);

/* Whether r is a NOSCRIPT error: the server lost the script an EVALSHA
 * named (SCRIPT FLUSH, a restart, an eviction on Redis 7.4+). */
bool fg_reply_noscript(const redisReply *r);

/* Connects to `addr` unless connected. FG_CODE_IO when the server cannot be
 * reached; FG_CODE_SERVER when it refuses AUTH or SELECT. */
fg_code fg_conn_ensure(fg_conn *conn, const fg_url *addr, const fg_conn_config *cfg,
                       fg_error *err);

void fg_conn_close(fg_conn *conn);

/* The read and write timeout of a connected conn from now on (0: none), for
 * a command that waits in the server. Closes the connection on failure. */
fg_code fg_conn_set_timeout(fg_conn *conn, int64_t ms, fg_error *err);

/* Buffers one command, as EVALSHA when the connection speaks scripts and
 * the command has one; fg_conn_flush writes everything buffered without
 * waiting for the replies, so that a caller can write to several servers
 * before reading from any. All close the connection on failure.
 * fg_conn_append_eval sends the script as EVAL (after NOSCRIPT). */
fg_code fg_conn_append(fg_conn *conn, const fg_command *cmd, fg_error *err);
fg_code fg_conn_append_eval(fg_conn *conn, const fg_command *cmd, fg_error *err);
fg_code fg_conn_append_argv(fg_conn *conn, const fg_argv *cmd, fg_error *err);
fg_code fg_conn_append_argv_eval(fg_conn *conn, const fg_argv *cmd, fg_error *err);
fg_code fg_conn_flush(fg_conn *conn, fg_error *err);

/* Reads n replies into replies[]. On FG_CODE_OK every reply is set (the
 * caller frees them); on failure none is and the connection is closed. */
fg_code fg_conn_receive(fg_conn *conn, redisReply **replies, size_t n, fg_error *err);

/* After fg_conn_receive of the replies of cmds[0..n), appended in order on
 * conn: the commands answered NOSCRIPT go again as EVAL (which caches the
 * script again), together and in order, in one more round trip counted in
 * counters (may be NULL), their replies taking the NOSCRIPT ones' places.
 * Nothing to do on a connection of the module's. On failure every reply is
 * freed, as fg_conn_receive leaves them. */
fg_code fg_conn_resend_noscript(fg_conn *conn, const fg_command *cmds, size_t n,
                                redisReply **replies, fg_net_counters *counters, fg_error *err);
fg_code fg_conn_resend_noscript_argv(fg_conn *conn, const fg_argv *cmds, size_t n,
                                     redisReply **replies, fg_net_counters *counters,
                                     fg_error *err);

/* One round trip of n commands on conn, connecting first when needed, and
 * counted in cfg's counters (and one more after NOSCRIPT): on FG_CODE_OK
 * every reply is set. */
fg_code fg_conn_exchange(fg_conn *conn, const fg_url *addr, const fg_conn_config *cfg,
                         const fg_argv *cmds, size_t n, redisReply **replies, fg_error *err);

/* Reads one reply from each of n (<= FG_GATHER_MAX) connections whose
 * commands were flushed, in whatever order they answer, until all have or
 * timeout_ms passed (so that a slow server costs no more than the timeout,
 * whatever the others do). replies[i] is NULL for a connection that did not
 * answer in time (it is closed, as its reply may still come) or is NULL. */
#define FG_GATHER_MAX 64

void fg_conn_gather(fg_conn **conns, size_t n, redisReply **replies, int timeout_ms);

/* Waits up to timeout_ms (0: none, but what has come) for one more reply
 * on a connection whose commands were all answered (a subscriber's next
 * message): FG_CODE_OK with *reply NULL when none came in time, the
 * connection kept; FG_CODE_IO when it failed (it is closed). */
fg_code fg_conn_await(fg_conn *conn, redisReply **reply, int timeout_ms, fg_error *err);

#endif
