/*
 * conn.c - one hiredis connection to one server (see conn.h).
 *
 * fg_conn_gather reads the replies of several servers at once with poll()
 * and hiredis' reader, instead of one blocking read after another, so that
 * Redlock's round trips overlap and a stopped server costs one timeout, not
 * one per server.
 *
 * A failed connect says where and why ("cannot connect to 127.0.0.1:1:
 * Connection refused"). A call within FG_RECONNECT_DELAY_MS of it does not
 * try again: it repeats that message (the conn's last_error), whichever
 * thread made the attempt.
 *
 * Dialects. A server without the module (a managed Redis) runs the rate
 * limits as the server scripts (scripts.h), and the family files build the
 * module's commands either way: the connection tells them apart. As it
 * opens it asks whether the module is loaded (FG_DIALECT_ASK, pipelined
 * behind AUTH and SELECT: no round trip more but when there are none),
 * unless the URL says (?backend=module|script); every connection learns
 * again, since the server behind an address may have changed. One that
 * speaks scripts sends each command that has a script as EVALSHA. A server
 * that lost the script answers NOSCRIPT, which changed nothing: the
 * commands of the round trip so answered go again as EVAL, in one more
 * round trip (fg_conn_resend_noscript), and the server caches the script
 * again.
 *
 * A server may have BF.* of its own without the module (RedisBloom, Redis
 * 8's bundled Bloom, a managed Valkey's Bloom module): the same round trip
 * asks (FG_BLOOM_ASK) unless the URL says module, and a connection that
 * speaks scripts sends BF.* as they are to such a server, ?backend=script
 * included: its filters are the server's own type, which the script could
 * not read (WRONGTYPE), and its commands are faster.
 */
#include "conn.h"

#include "error.h"
#include "scripts.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void fg_argv_init(fg_argv *a, const char *name) {
    a->argc = a->nnums = 0;
    fg_argv_str(a, name);
}

void fg_argv_str(fg_argv *a, const char *s) {
    a->argv[a->argc] = s;
    a->argvlen[a->argc] = strlen(s);
    a->argc++;
}

void fg_argv_num(fg_argv *a, int64_t v) {
    char *num = a->nums[a->nnums++];
    a->argvlen[a->argc] = (size_t)snprintf(num, sizeof(a->nums[0]), "%" PRId64, v);
    a->argv[a->argc++] = num;
}

fg_code fg_reply_error(const redisReply *r, fg_error *err) {
    fg_code code = FG_CODE_SERVER;
    if (strncmp(r->str, "WRONGTYPE", 9) == 0)
        code = FG_CODE_WRONGTYPE;
    else if (strncmp(r->str, "ERR unknown command", 19) == 0)
        code = FG_CODE_PROTOCOL;
    else if (strncmp(r->str, "ERR ", 4) == 0)
        code = FG_CODE_INVALID;
    return fg_set_error(err, code, "%s", r->str);
}

static struct timeval ms_to_timeval(int64_t ms) {
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    return tv;
}

static bool before(const struct timespec *a, const struct timespec *b) {
    return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

fg_dialect fg_dialect_of_ask(const redisReply *r) {
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 1) return FG_DIALECT_AUTO;
    if (r->element[0]->type == REDIS_REPLY_NIL) return FG_DIALECT_SCRIPT;
    return r->element[0]->type == REDIS_REPLY_ARRAY ? FG_DIALECT_MODULE : FG_DIALECT_AUTO;
}

fg_dialect fg_dialect_of_probe(const redisReply *r) {
    bool unknown = r->type == REDIS_REPLY_ERROR && strncmp(r->str, "ERR unknown command", 19) == 0;
    return unknown ? FG_DIALECT_SCRIPT : FG_DIALECT_MODULE;
}

bool fg_reply_noscript(const redisReply *r) {
    return r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0;
}

/* The commands of a fresh connection's set-up. */
typedef enum setup_step { SETUP_AUTH, SETUP_SELECT, SETUP_ASK, SETUP_BLOOM } setup_step;

static const char *const setup_names[] = {"AUTH", "SELECT", "COMMAND INFO", "COMMAND INFO"};

/* A reply of the set-up: a refusal is not an I/O failure (the server is
 * there and said no). Whether BF.ADD is a command is told as whether
 * FG.TOKEN is (*bloom MODULE: it is, SCRIPT: it is not). */
static fg_code judge_setup(const fg_url *u, const redisReply *r, setup_step step,
                           fg_dialect *dialect, fg_dialect *bloom, fg_error *err) {
    if (step == SETUP_ASK || step == SETUP_BLOOM) {
        *(step == SETUP_ASK ? dialect : bloom) = fg_dialect_of_ask(r);
        return FG_CODE_OK;
    }
    if (r->type != REDIS_REPLY_ERROR) return FG_CODE_OK;
    if (step == SETUP_AUTH) return fg_set_error(err, FG_CODE_SERVER, "AUTH refused: %s", r->str);
    return fg_set_error(err, FG_CODE_SERVER, "SELECT %d refused: %s", u->db, r->str);
}

/* Appends the set-up's commands: AUTH, SELECT, the questions of the
 * dialect and of the server's own BF.*, those needed; returns how many. */
static int append_setup(const fg_url *u, redisContext *ctx, setup_step *steps) {
    int n = 0, ok = REDIS_OK;
    if (u->has_password) {
        ok = u->user[0] ? redisAppendCommand(ctx, "AUTH %s %s", u->user, u->password)
                        : redisAppendCommand(ctx, "AUTH %s", u->password);
        steps[n++] = SETUP_AUTH;
    }
    if (ok == REDIS_OK && u->db > 0) {
        ok = redisAppendCommand(ctx, "SELECT %d", u->db);
        steps[n++] = SETUP_SELECT;
    }
    if (ok == REDIS_OK && u->dialect == FG_DIALECT_AUTO) {
        ok = redisAppendCommand(ctx, FG_DIALECT_ASK);
        steps[n++] = SETUP_ASK;
    }
    if (ok == REDIS_OK && u->dialect != FG_DIALECT_MODULE) {
        ok = redisAppendCommand(ctx, FG_BLOOM_ASK);
        steps[n++] = SETUP_BLOOM;
    }
    return ok == REDIS_OK ? n : -1;
}

/* Probes the server with a command that changes nothing (FG_DIALECT_PROBE,
 * FG_BLOOM_PROBE): whether it is one, as fg_dialect_of_probe tells. */
static fg_code probe(redisContext *ctx, const char *command, fg_dialect *out, fg_error *err) {
    redisReply *r = redisCommand(ctx, command);
    if (r == NULL) return fg_set_error(err, FG_CODE_IO, "%s: %s", command, ctx->errstr);
    *out = fg_dialect_of_probe(r);
    freeReplyObject(r);
    return FG_CODE_OK;
}

/* AUTH, SELECT and the questions of the dialect and of BF.*, in one round
 * trip; the first refusal is the answer. A probe only when COMMAND is
 * refused, BF.ADD's only on a connection that speaks scripts. */
static fg_code setup_connection(const fg_url *u, redisContext *ctx, fg_dialect *dialect,
                                bool *own_bloom, fg_error *err) {
    setup_step steps[4];
    redisReply *r[4];
    int n = append_setup(u, ctx, steps);
    if (n < 0) return fg_set_error(err, FG_CODE_NOMEM, "out of memory");
    for (int i = 0; i < n; i++)
        if (redisGetReply(ctx, (void **)&r[i]) != REDIS_OK) {
            while (i > 0)
                freeReplyObject(r[--i]);
            return fg_set_error(err, FG_CODE_IO, "%s: %s", setup_names[steps[0]], ctx->errstr);
        }
    fg_code rc = FG_CODE_OK;
    fg_dialect bloom = FG_DIALECT_AUTO;
    *dialect = u->dialect;
    for (int i = 0; i < n; i++) {
        if (rc == FG_CODE_OK) rc = judge_setup(u, r[i], steps[i], dialect, &bloom, err);
        freeReplyObject(r[i]);
    }
    if (rc == FG_CODE_OK && *dialect == FG_DIALECT_AUTO)
        rc = probe(ctx, FG_DIALECT_PROBE, dialect, err);
    if (rc == FG_CODE_OK && *dialect == FG_DIALECT_SCRIPT && bloom == FG_DIALECT_AUTO)
        rc = probe(ctx, FG_BLOOM_PROBE, &bloom, err);
    *own_bloom = bloom == FG_DIALECT_MODULE;
    return rc;
}

static fg_code connect_failed(const fg_url *u, const char *why, fg_error *err) {
    if (u->kind == FG_URL_UNIX)
        return fg_set_error(err, FG_CODE_IO, "cannot connect to %.160s: %.60s", u->path, why);
    return fg_set_error(err, FG_CODE_IO,
                        strchr(u->host, ':') ? "cannot connect to [%.160s]:%d: %.60s"
                                             : "cannot connect to %.160s:%d: %.60s",
                        u->host, u->port, why);
}

static fg_code open_connection(fg_conn *conn, const fg_url *u, const fg_conn_config *cfg,
                               fg_error *err) {
    struct timeval tv = ms_to_timeval(cfg->connect_timeout_ms);
    redisContext *ctx = u->kind == FG_URL_TCP ? redisConnectWithTimeout(u->host, u->port, tv)
                                              : redisConnectUnixWithTimeout(u->path, tv);
    if (ctx == NULL) return fg_set_error(err, FG_CODE_NOMEM, "out of memory");
    if (ctx->err) {
        connect_failed(u, ctx->errstr, err);
        redisFree(ctx);
        return FG_CODE_IO;
    }
    fg_dialect dialect = FG_DIALECT_AUTO;
    bool own_bloom = false;
    fg_code rc = redisSetTimeout(ctx, ms_to_timeval(cfg->command_timeout_ms)) == REDIS_OK
                     ? setup_connection(u, ctx, &dialect, &own_bloom, err)
                     : fg_set_error(err, FG_CODE_IO, "setting the timeout: %s", ctx->errstr);
    if (rc != FG_CODE_OK) {
        redisFree(ctx);
        return rc;
    }
    if (conn->connected_once) fg_count(&cfg->counters->reconnects, 1);
    conn->connected_once = true;
    conn->ctx = ctx;
    conn->dialect = dialect;
    conn->own_bloom = own_bloom;
    return FG_CODE_OK;
}

fg_code fg_conn_ensure(fg_conn *conn, const fg_url *addr, const fg_conn_config *cfg,
                       fg_error *err) {
    if (conn->ctx != NULL) return FG_CODE_OK;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (before(&now, &conn->next_connect))
        return fg_set_error(err, conn->last_code, "%s", conn->last_error);
    fg_error failed; /* err may be NULL, and last_error needs the message */
    fg_code rc = open_connection(conn, addr, cfg, &failed);
    if (rc == FG_CODE_OK) return rc;
    snprintf(conn->last_error, sizeof(conn->last_error), "%s", failed.message);
    conn->last_code = rc;
    long ns = now.tv_nsec + FG_RECONNECT_DELAY_MS * 1000000L;
    conn->next_connect.tv_sec = now.tv_sec + ns / 1000000000L;
    conn->next_connect.tv_nsec = ns % 1000000000L;
    return fg_set_error(err, rc, "%s", failed.message);
}

void fg_conn_close(fg_conn *conn) {
    if (conn->ctx != NULL) redisFree(conn->ctx);
    conn->ctx = NULL;
    conn->dialect = FG_DIALECT_AUTO; /* the next connection learns again */
    conn->own_bloom = false;
}

fg_code fg_conn_set_timeout(fg_conn *conn, int64_t ms, fg_error *err) {
    if (redisSetTimeout(conn->ctx, ms_to_timeval(ms)) == REDIS_OK) return FG_CODE_OK;
    fg_set_error(err, FG_CODE_IO, "setting the timeout: %s", conn->ctx->errstr);
    fg_conn_close(conn);
    return FG_CODE_IO;
}

_Static_assert(FG_CMD_MAX_ARGS <= FG_ARGV_MAX, "append_args' room holds any command");

/* A command as hiredis takes it: an fg_command's or an fg_argv's. */
typedef struct args {
    int argc;
    const char *const *argv;
    const size_t *lens;
} args;

static args command_args(const void *cmds, size_t i) {
    const fg_command *c = (const fg_command *)cmds + i;
    return (args){c->argc, c->argv, c->argvlen};
}

static args argv_args(const void *cmds, size_t i) {
    const fg_argv *c = (const fg_argv *)cmds + i;
    return (args){c->argc, c->argv, c->argvlen};
}

/* Whether a command that has a script goes as it is all the same: the
 * server's own BF.*. */
static bool servers_own(const fg_conn *conn, args a) {
    const fg_script_route *rt;
    return conn->own_bloom && fg_script_for(a.argc, a.argv, a.lens, &rt) != NULL &&
           strcmp(rt->family, FG_SCRIPT_BLOOM) == 0;
}

/* Buffers a command, in its script form (EVALSHA, or EVAL) when the
 * connection speaks scripts and the command has one. */
static fg_code append_args(fg_conn *conn, args a, bool eval, fg_error *err) {
    const char *sargv[FG_ARGV_MAX + FG_SCRIPT_EXTRA_ARGS];
    size_t slens[FG_ARGV_MAX + FG_SCRIPT_EXTRA_ARGS];
    char nkeys[FG_SCRIPT_NKEYS_MAX];
    if (conn->dialect == FG_DIALECT_SCRIPT && !servers_own(conn, a)) {
        int n = fg_script_args(a.argc, a.argv, a.lens, eval, sargv, slens, nkeys);
        if (n > 0) a = (args){n, sargv, slens};
    }
    /* hiredis 0.14 takes a non-const argv, which it only reads. */
    if (redisAppendCommandArgv(conn->ctx, a.argc, (const char **)a.argv, a.lens) == REDIS_OK)
        return FG_CODE_OK;
    fg_conn_close(conn); /* commands half buffered */
    return fg_set_error(err, FG_CODE_NOMEM, "out of memory");
}

fg_code fg_conn_append(fg_conn *conn, const fg_command *cmd, fg_error *err) {
    return append_args(conn, command_args(cmd, 0), false, err);
}

fg_code fg_conn_append_eval(fg_conn *conn, const fg_command *cmd, fg_error *err) {
    return append_args(conn, command_args(cmd, 0), true, err);
}

fg_code fg_conn_append_argv(fg_conn *conn, const fg_argv *cmd, fg_error *err) {
    return append_args(conn, argv_args(cmd, 0), false, err);
}

fg_code fg_conn_append_argv_eval(fg_conn *conn, const fg_argv *cmd, fg_error *err) {
    return append_args(conn, argv_args(cmd, 0), true, err);
}

fg_code fg_conn_flush(fg_conn *conn, fg_error *err) {
    int done = 0;
    while (!done)
        if (redisBufferWrite(conn->ctx, &done) != REDIS_OK) {
            fg_set_error(err, FG_CODE_IO, "%s", conn->ctx->errstr);
            fg_conn_close(conn);
            return FG_CODE_IO;
        }
    return FG_CODE_OK;
}

fg_code fg_conn_receive(fg_conn *conn, redisReply **replies, size_t n, fg_error *err) {
    for (size_t got = 0; got < n; got++) {
        void *r;
        if (redisGetReply(conn->ctx, &r) != REDIS_OK) {
            fg_set_error(err, FG_CODE_IO, "%s", conn->ctx->errstr);
            while (got > 0)
                freeReplyObject(replies[--got]);
            fg_conn_close(conn); /* unread replies or a broken context */
            return FG_CODE_IO;
        }
        replies[got] = r;
    }
    return FG_CODE_OK;
}

/* The NOSCRIPT replies' commands again as EVAL (fg_conn_resend_noscript). */
static fg_code resend_noscript(fg_conn *conn, const void *cmds, args (*at)(const void *, size_t),
                               size_t n, redisReply **replies, fg_net_counters *counters,
                               fg_error *err) {
    size_t again = 0;
    for (size_t i = 0; i < n && conn->dialect == FG_DIALECT_SCRIPT; i++)
        again += fg_reply_noscript(replies[i]);
    if (again == 0) return FG_CODE_OK;
    redisReply **fresh = malloc(again * sizeof(*fresh));
    fg_code rc = fresh != NULL ? FG_CODE_OK : fg_set_error(err, FG_CODE_NOMEM, "out of memory");
    if (counters != NULL) fg_count(&counters->round_trips, 1);
    for (size_t i = 0; i < n && rc == FG_CODE_OK; i++)
        if (fg_reply_noscript(replies[i])) rc = append_args(conn, at(cmds, i), true, err);
    if (rc == FG_CODE_OK) rc = fg_conn_flush(conn, err);
    if (rc == FG_CODE_OK) rc = fg_conn_receive(conn, fresh, again, err);
    for (size_t i = 0, k = 0; i < n; i++) {
        if (rc == FG_CODE_OK && !fg_reply_noscript(replies[i])) continue;
        freeReplyObject(replies[i]);
        if (rc == FG_CODE_OK) replies[i] = fresh[k++];
    }
    free(fresh);
    return rc;
}

fg_code fg_conn_resend_noscript(fg_conn *conn, const fg_command *cmds, size_t n,
                                redisReply **replies, fg_net_counters *counters, fg_error *err) {
    return resend_noscript(conn, cmds, command_args, n, replies, counters, err);
}

fg_code fg_conn_resend_noscript_argv(fg_conn *conn, const fg_argv *cmds, size_t n,
                                     redisReply **replies, fg_net_counters *counters,
                                     fg_error *err) {
    return resend_noscript(conn, cmds, argv_args, n, replies, counters, err);
}

fg_code fg_conn_exchange(fg_conn *conn, const fg_url *addr, const fg_conn_config *cfg,
                         const fg_argv *cmds, size_t n, redisReply **replies, fg_error *err) {
    fg_code rc = fg_conn_ensure(conn, addr, cfg, err);
    if (rc == FG_CODE_OK) {
        fg_count(&cfg->counters->round_trips, 1);
        for (size_t i = 0; i < n && rc == FG_CODE_OK; i++)
            rc = fg_conn_append_argv(conn, &cmds[i], err);
        if (rc == FG_CODE_OK) rc = fg_conn_flush(conn, err);
        if (rc == FG_CODE_OK) rc = fg_conn_receive(conn, replies, n, err);
        if (rc == FG_CODE_OK)
            rc = fg_conn_resend_noscript_argv(conn, cmds, n, replies, cfg->counters, err);
    }
    if (rc == FG_CODE_IO) fg_count(&cfg->counters->failures, 1);
    return rc;
}

/* A reply already read from conn's socket, if any: false when the
 * connection failed (it is closed then). */
static bool take_buffered(fg_conn *conn, redisReply **reply) {
    void *r = NULL;
    if (redisGetReplyFromReader(conn->ctx, &r) != REDIS_OK) {
        fg_conn_close(conn);
        return false;
    }
    *reply = r;
    return true;
}

/* Reads what arrived on a socket that poll() found readable. */
static void read_ready(fg_conn *conn, redisReply **reply) {
    if (redisBufferRead(conn->ctx) != REDIS_OK)
        fg_conn_close(conn);
    else
        take_buffered(conn, reply);
}

fg_code fg_conn_await(fg_conn *conn, redisReply **reply, int timeout_ms, fg_error *err) {
    int64_t deadline = fg_monotonic_us() + (int64_t)timeout_ms * 1000;
    *reply = NULL;
    while (conn->ctx != NULL && take_buffered(conn, reply) && *reply == NULL) {
        int64_t left_ms = (deadline - fg_monotonic_us() + 999) / 1000;
        struct pollfd fd = {.fd = conn->ctx->fd, .events = POLLIN};
        int ready = poll(&fd, 1, left_ms > 0 ? (int)left_ms : 0); /* 0: what has come */
        if (ready < 0 && errno != EINTR) break;
        if (ready == 0 && left_ms <= 0) return FG_CODE_OK;
        if (ready > 0 && redisBufferRead(conn->ctx) != REDIS_OK) break;
    }
    if (*reply != NULL) return FG_CODE_OK;
    fg_conn_close(conn);
    return fg_set_error(err, FG_CODE_IO, "the connection to the server failed while waiting");
}

void fg_conn_gather(fg_conn **conns, size_t n, redisReply **replies, int timeout_ms) {
    struct pollfd fds[FG_GATHER_MAX];
    size_t owner[FG_GATHER_MAX]; /* fds[k] is conns[owner[k]] */
    int64_t deadline = fg_monotonic_us() + (int64_t)timeout_ms * 1000;
    for (size_t i = 0; i < n; i++)
        replies[i] = NULL;
    for (;;) {
        size_t waiting = 0;
        for (size_t i = 0; i < n; i++) {
            fg_conn *c = conns[i];
            if (c == NULL || c->ctx == NULL || replies[i] != NULL) continue;
            if (!take_buffered(c, &replies[i]) || replies[i] != NULL) continue;
            fds[waiting] = (struct pollfd){.fd = c->ctx->fd, .events = POLLIN};
            owner[waiting++] = i;
        }
        int64_t left_ms = (deadline - fg_monotonic_us() + 999) / 1000;
        if (waiting == 0 || left_ms <= 0) break;
        if (poll(fds, waiting, (int)left_ms) < 0 && errno != EINTR) break;
        for (size_t k = 0; k < waiting; k++)
            if (fds[k].revents != 0) read_ready(conns[owner[k]], &replies[owner[k]]);
    }
    for (size_t i = 0; i < n; i++)
        if (conns[i] != NULL && replies[i] == NULL) fg_conn_close(conns[i]);
}
