/*
 * conn.c - one hiredis connection to one server (see conn.h).
 */
#include "conn.h"

void fg_count(atomic_uint_fast64_t *counter, uint64_t n) {
    atomic_fetch_add_explicit(counter, n, memory_order_relaxed);
}

static struct timeval ms_to_timeval(int ms) {
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
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

static fg_code open_connection(fg_conn *conn, const fg_url *u, const fg_conn_config *cfg,
                               fg_error *err) {
    struct timeval tv = ms_to_timeval(cfg->connect_timeout_ms);
    redisContext *ctx = u->kind == FG_URL_TCP ? redisConnectWithTimeout(u->host, u->port, tv)
                                              : redisConnectUnixWithTimeout(u->path, tv);
    if (ctx == NULL) return fg_set_error(err, FG_CODE_NOMEM, "out of memory");
    if (ctx->err) {
        fg_set_error(err, FG_CODE_IO, "connect: %s", ctx->errstr);
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
        return fg_set_error(err, FG_CODE_IO, "not connected (the last connect failed)");
    fg_code rc = open_connection(conn, addr, cfg, err);
    if (rc != FG_CODE_OK) {
        long ns = now.tv_nsec + FG_RECONNECT_DELAY_MS * 1000000L;
        conn->next_connect.tv_sec = now.tv_sec + ns / 1000000000L;
        conn->next_connect.tv_nsec = ns % 1000000000L;
    }
    return rc;
}

void fg_conn_close(fg_conn *conn) {
    if (conn->ctx != NULL) redisFree(conn->ctx);
    conn->ctx = NULL;
}

fg_code fg_conn_append(fg_conn *conn, const fg_command *cmd, fg_error *err) {
    /* hiredis 0.14 takes a non-const argv, which it only reads. */
    if (redisAppendCommandArgv(conn->ctx, cmd->argc, (const char **)cmd->argv, cmd->argvlen) ==
        REDIS_OK)
        return FG_CODE_OK;
    fg_conn_close(conn); /* commands half buffered */
    return fg_set_error(err, FG_CODE_NOMEM, "out of memory");
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
