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
 */
#include "conn.h"

#include "error.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
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

/* AUTH and SELECT of a fresh connection. A refusal is not an I/O failure:
 * the server is there and said no. */
static fg_code setup_connection(const fg_url *u, redisContext *ctx, fg_error *err) {
    redisReply *r;
    if (u->has_password) {
        r = u->user[0] ? redisCommand(ctx, "AUTH %s %s", u->user, u->password)
                       : redisCommand(ctx, "AUTH %s", u->password);
        if (r == NULL) return fg_set_error(err, FG_CODE_IO, "AUTH: %s", ctx->errstr);
        fg_code rc = r->type == REDIS_REPLY_ERROR
                         ? fg_set_error(err, FG_CODE_SERVER, "AUTH refused: %s", r->str)
                         : FG_CODE_OK;
        freeReplyObject(r);
        if (rc != FG_CODE_OK) return rc;
    }
    if (u->db > 0) {
        r = redisCommand(ctx, "SELECT %d", u->db);
        if (r == NULL) return fg_set_error(err, FG_CODE_IO, "SELECT: %s", ctx->errstr);
        fg_code rc = r->type == REDIS_REPLY_ERROR
                         ? fg_set_error(err, FG_CODE_SERVER, "SELECT %d refused: %s", u->db, r->str)
                         : FG_CODE_OK;
        freeReplyObject(r);
        if (rc != FG_CODE_OK) return rc;
    }
    return FG_CODE_OK;
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
    fg_code rc = redisSetTimeout(ctx, ms_to_timeval(cfg->command_timeout_ms)) == REDIS_OK
                     ? setup_connection(u, ctx, err)
                     : fg_set_error(err, FG_CODE_IO, "setting the timeout: %s", ctx->errstr);
    if (rc != FG_CODE_OK) {
        redisFree(ctx);
        return rc;
    }
    if (conn->connected_once) fg_count(&cfg->counters->reconnects, 1);
    conn->connected_once = true;
    conn->ctx = ctx;
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
}

fg_code fg_conn_set_timeout(fg_conn *conn, int64_t ms, fg_error *err) {
    if (redisSetTimeout(conn->ctx, ms_to_timeval(ms)) == REDIS_OK) return FG_CODE_OK;
    fg_set_error(err, FG_CODE_IO, "setting the timeout: %s", conn->ctx->errstr);
    fg_conn_close(conn);
    return FG_CODE_IO;
}

static fg_code append_args(fg_conn *conn, int argc, const char *const *argv, const size_t *lens,
                           fg_error *err) {
    /* hiredis 0.14 takes a non-const argv, which it only reads. */
    if (redisAppendCommandArgv(conn->ctx, argc, (const char **)argv, lens) == REDIS_OK)
        return FG_CODE_OK;
    fg_conn_close(conn); /* commands half buffered */
    return fg_set_error(err, FG_CODE_NOMEM, "out of memory");
}

fg_code fg_conn_append(fg_conn *conn, const fg_command *cmd, fg_error *err) {
    return append_args(conn, cmd->argc, cmd->argv, cmd->argvlen, err);
}

fg_code fg_conn_append_argv(fg_conn *conn, const fg_argv *cmd, fg_error *err) {
    return append_args(conn, cmd->argc, cmd->argv, cmd->argvlen, err);
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

fg_code fg_conn_exchange(fg_conn *conn, const fg_url *addr, const fg_conn_config *cfg,
                         const fg_argv *cmds, size_t n, redisReply **replies, fg_error *err) {
    fg_code rc = fg_conn_ensure(conn, addr, cfg, err);
    if (rc == FG_CODE_OK) {
        fg_count(&cfg->counters->round_trips, 1);
        for (size_t i = 0; i < n && rc == FG_CODE_OK; i++)
            rc = fg_conn_append_argv(conn, &cmds[i], err);
        if (rc == FG_CODE_OK) rc = fg_conn_flush(conn, err);
        if (rc == FG_CODE_OK) rc = fg_conn_receive(conn, replies, n, err);
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
