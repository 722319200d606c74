/*
 * redlock.c - Redlock over N independent servers (floodgate.h, "redlock").
 *
 * An attempt asks every server at once. FG.LOCK key owner lease is written
 * to every connection before any reply is read, and the replies are read as
 * they come (fg_conn_gather), so an attempt costs about one round trip to
 * the slowest server that answers, and servers that are down or stopped
 * cost server_timeout_ms in all, not each. The request never waits in a
 * server (a waiting server would keep the others' leases running) and is
 * not reentrant (a retry must not count as a second hold).
 *
 * A server that cannot be reached, does not answer in time or answers an
 * error is a no vote. Its connection is closed and opened again by a later
 * call (not sooner than FG_RECONNECT_DELAY_MS after a failed connect).
 * Connecting is sequential, since hiredis 0.14 connects blocking, each with
 * server_timeout_ms; connections stay open between calls.
 *
 * The lock is held when a majority (N/2 + 1) granted it and time is left:
 * validity = lease - elapsed - (lease x drift_factor + 2 ms), elapsed from
 * the attempt's start on the monotonic clock. Otherwise it is released on
 * every server (a reply lost to a timeout may have been a grant) and asked
 * again after retry_delay_ms +- retry_jitter_ms, retry_count times at most.
 *
 * Calls on one fg_redlock are serialized by its mutex.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "conn.h"
#include "error.h"
#include "random_bytes.h"
#include "remote_lock.h"
#include "url.h"

#define DRIFT_FLOOR_MS 2

typedef struct server {
    fg_url addr;
    fg_conn conn;
} server;

struct fg_redlock {
    fg_redlock_options opts;
    fg_conn_config cfg; /* both timeouts: server_timeout_ms */
    fg_net_counters counters;
    pthread_mutex_t lock; /* one call at a time */
    uint64_t rng;         /* xorshift64*, for the jitter */
    size_t n;
    server servers[];
};

/* What the servers answered to one command. */
typedef struct tally {
    int votes;      /* grants, or extensions */
    int answered;   /* replies that were not errors */
    int errors;     /* error replies */
    uint64_t token; /* the largest token granted */
    fg_error error; /* the last error reply */
} tally;

void fg_redlock_options_init(fg_redlock_options *opts) {
    opts->retry_count = 3;
    opts->retry_delay_ms = 200;
    opts->retry_jitter_ms = 100;
    opts->drift_factor = 0.01;
    opts->server_timeout_ms = 50;
}

static fg_code check_options(const fg_redlock_options *o, fg_error *err) {
    if (o->retry_count < 0 || o->retry_delay_ms < 0 || o->retry_jitter_ms < 0)
        return fg_set_error(err, FG_CODE_INVALID,
                            "retry_count, retry_delay_ms and retry_jitter_ms must be 0 or more");
    if (!(o->drift_factor >= 0 && o->drift_factor < 1))
        return fg_set_error(err, FG_CODE_INVALID, "drift_factor must be in [0, 1)");
    if (o->server_timeout_ms < 1)
        return fg_set_error(err, FG_CODE_INVALID, "server_timeout_ms must be 1 or more");
    return FG_CODE_OK;
}

static fg_code parse_urls(fg_redlock *rl, const char *const *urls, fg_error *err) {
    for (size_t i = 0; i < rl->n; i++) {
        fg_url *u = &rl->servers[i].addr;
        fg_error why = {FG_CODE_INVALID, "no URL"};
        if (urls[i] == NULL || fg_url_parse(urls[i], u, &why) != FG_CODE_OK)
            return fg_set_error(err, FG_CODE_INVALID, "server %zu: %s", i + 1, why.message);
        if (u->kind == FG_URL_MEM)
            return fg_set_error(err, FG_CODE_INVALID,
                                "server %zu: Redlock needs redis: or unix: URLs", i + 1);
    }
    return FG_CODE_OK;
}

fg_redlock *fg_redlock_open(const char *const *urls, size_t count, const fg_redlock_options *opts,
                            fg_error *err) {
    if (urls == NULL || count < 1 || count > FG_GATHER_MAX) {
        fg_set_error(err, FG_CODE_INVALID, "Redlock needs 1 to %d server URLs", FG_GATHER_MAX);
        return NULL;
    }
    fg_redlock *rl = calloc(1, sizeof(*rl) + count * sizeof(server));
    if (rl == NULL) {
        fg_set_error(err, FG_CODE_NOMEM, "out of memory");
        return NULL;
    }
    rl->n = count;
    if (opts != NULL)
        rl->opts = *opts;
    else
        fg_redlock_options_init(&rl->opts);
    if (check_options(&rl->opts, err) != FG_CODE_OK || parse_urls(rl, urls, err) != FG_CODE_OK) {
        free(rl);
        return NULL;
    }
    int t = rl->opts.server_timeout_ms;
    rl->cfg = (fg_conn_config){t, t, &rl->counters};
    fg_random_bytes(&rl->rng, sizeof(rl->rng));
    rl->rng |= 1; /* xorshift needs a state other than 0 */
    pthread_mutex_init(&rl->lock, NULL);
    /* Connected now, so that the first lock does not pay for it; servers
     * that are down are tried again by the calls. */
    for (size_t i = 0; i < count; i++)
        fg_conn_ensure(&rl->servers[i].conn, &rl->servers[i].addr, &rl->cfg, NULL);
    return rl;
}

void fg_redlock_close(fg_redlock *rl) {
    if (rl == NULL) return;
    for (size_t i = 0; i < rl->n; i++)
        fg_conn_close(&rl->servers[i].conn);
    pthread_mutex_destroy(&rl->lock);
    free(rl);
}

/* ------------------------------------------------------------- one round */

/* Sends cmd to every server, then gathers their replies (NULL: none). A
 * server without the module that lost lock.lua (a restart, SCRIPT FLUSH)
 * answers NOSCRIPT: it is sent the EVAL form at once, which caches the
 * script again, and its second reply is its vote. */
static void broadcast(fg_redlock *rl, const fg_argv *cmd, redisReply **replies) {
    fg_conn *conns[FG_GATHER_MAX];
    for (size_t i = 0; i < rl->n; i++) {
        server *s = &rl->servers[i];
        bool sent = fg_conn_ensure(&s->conn, &s->addr, &rl->cfg, NULL) == FG_CODE_OK &&
                    fg_conn_append_argv(&s->conn, cmd, NULL) == FG_CODE_OK &&
                    fg_conn_flush(&s->conn, NULL) == FG_CODE_OK;
        conns[i] = sent ? &s->conn : NULL;
    }
    fg_conn_gather(conns, rl->n, replies, rl->opts.server_timeout_ms);
    bool again = false;
    for (size_t i = 0; i < rl->n; i++) {
        bool lost = replies[i] != NULL && fg_reply_noscript(replies[i]);
        if (lost) {
            freeReplyObject(replies[i]);
            replies[i] = NULL;
        }
        conns[i] = lost && fg_conn_append_argv_eval(conns[i], cmd, NULL) == FG_CODE_OK &&
                           fg_conn_flush(conns[i], NULL) == FG_CODE_OK
                       ? conns[i]
                       : NULL;
        again = again || conns[i] != NULL;
    }
    if (!again) return;
    redisReply *second[FG_GATHER_MAX];
    fg_conn_gather(conns, rl->n, second, rl->opts.server_timeout_ms);
    for (size_t i = 0; i < rl->n; i++)
        if (conns[i] != NULL) replies[i] = second[i];
}

/* A grant (FG.LOCK) or an extension (FG.EXTEND answering 1) is a vote. */
static void count_reply(const redisReply *r, bool grants, tally *t) {
    if (r->type == REDIS_REPLY_ERROR) {
        t->errors++;
        fg_reply_error(r, &t->error);
        return;
    }
    t->answered++;
    fg_lock_grant g;
    if (!grants)
        t->votes += r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    else if (fg_parse_grant(r, &g, NULL) == FG_CODE_OK && g.acquired) {
        t->votes++;
        if (g.token > t->token) t->token = g.token;
    }
}

/* One command to every server, its replies counted. */
static void poll_servers(fg_redlock *rl, const char *name, const char *key, const char *owner,
                         int64_t lease_ms, bool grants, tally *t) {
    fg_argv cmd;
    redisReply *replies[FG_GATHER_MAX];
    fg_argv_init(&cmd, name);
    fg_argv_str(&cmd, key);
    fg_argv_str(&cmd, owner);
    if (lease_ms > 0) fg_argv_num(&cmd, lease_ms);
    memset(t, 0, sizeof(*t));
    broadcast(rl, &cmd, replies);
    for (size_t i = 0; i < rl->n; i++)
        if (replies[i] != NULL) {
            count_reply(replies[i], grants, t);
            freeReplyObject(replies[i]);
        }
}

static int majority(const fg_redlock *rl) {
    return (int)(rl->n / 2 + 1);
}

/* The votes of an attempt begun at start_us, as a grant. Error replies from
 * a majority make a failure (bad arguments, a module missing): no attempt
 * can succeed then. */
static fg_code judge(const fg_redlock *rl, const tally *t, int64_t lease_ms, int64_t start_us,
                     fg_redlock_grant *out, fg_error *err) {
    int64_t elapsed_ms = (fg_monotonic_us() - start_us + 999) / 1000;
    int64_t drift_ms = (int64_t)ceil((double)lease_ms * rl->opts.drift_factor) + DRIFT_FLOOR_MS;
    int64_t validity = lease_ms - elapsed_ms - drift_ms;
    out->votes = t->votes;
    out->acquired = t->votes >= majority(rl) && validity > 0;
    out->validity_ms = out->acquired ? validity : 0;
    out->token = out->acquired ? t->token : 0;
    if (t->errors < majority(rl)) return FG_CODE_OK;
    if (err != NULL) *err = t->error;
    return t->error.code;
}

/* ---------------------------------------------------------------- calls */

static fg_code check_call(const fg_redlock *rl, const char *key, const char *owner, fg_error *err) {
    if (rl != NULL && key != NULL && owner != NULL) return FG_CODE_OK;
    return fg_set_error(err, FG_CODE_INVALID, "a Redlock, a key or an owner is missing (NULL)");
}

static fg_code check_lease(int64_t lease_ms, const fg_redlock_grant *out, fg_error *err) {
    if (out == NULL) return fg_set_error(err, FG_CODE_INVALID, "a result is required");
    if (lease_ms < 1) return fg_set_error(err, FG_CODE_INVALID, "lease_ms must be 1 or more");
    return FG_CODE_OK;
}

static uint64_t next_random(fg_redlock *rl) {
    rl->rng ^= rl->rng >> 12;
    rl->rng ^= rl->rng << 25;
    rl->rng ^= rl->rng >> 27;
    return rl->rng * 2685821657736338717ULL;
}

/* retry_delay_ms +- retry_jitter_ms, at random. */
static void pause_before_retry(fg_redlock *rl) {
    int64_t jitter = rl->opts.retry_jitter_ms;
    int64_t ms = rl->opts.retry_delay_ms;
    if (jitter > 0) ms += (int64_t)(next_random(rl) % (uint64_t)(2 * jitter + 1)) - jitter;
    if (ms <= 0) return;
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static void release_everywhere(fg_redlock *rl, const char *key, const char *owner, tally *t) {
    poll_servers(rl, "FG.UNLOCK", key, owner, 0, false, t);
}

fg_code fg_redlock_lock(fg_redlock *rl, const char *key, const char *owner, int64_t lease_ms,
                        fg_redlock_grant *out, fg_error *err) {
    fg_code rc = check_call(rl, key, owner, err);
    if (rc == FG_CODE_OK) rc = check_lease(lease_ms, out, err);
    if (rc != FG_CODE_OK) return rc;
    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&rl->lock);
    for (int attempt = 0; attempt <= rl->opts.retry_count; attempt++) {
        if (attempt > 0) pause_before_retry(rl);
        tally t;
        int64_t start_us = fg_monotonic_us();
        poll_servers(rl, "FG.LOCK", key, owner, lease_ms, true, &t);
        rc = judge(rl, &t, lease_ms, start_us, out, err);
        if (rc == FG_CODE_OK && out->acquired) break;
        release_everywhere(rl, key, owner, &t);
        if (rc != FG_CODE_OK) break;
    }
    pthread_mutex_unlock(&rl->lock);
    return rc;
}

fg_code fg_redlock_extend(fg_redlock *rl, const char *key, const char *owner, int64_t lease_ms,
                          fg_redlock_grant *out, fg_error *err) {
    fg_code rc = check_call(rl, key, owner, err);
    if (rc == FG_CODE_OK) rc = check_lease(lease_ms, out, err);
    if (rc != FG_CODE_OK) return rc;
    memset(out, 0, sizeof(*out));
    tally t;
    pthread_mutex_lock(&rl->lock);
    int64_t start_us = fg_monotonic_us();
    poll_servers(rl, "FG.EXTEND", key, owner, lease_ms, false, &t);
    rc = judge(rl, &t, lease_ms, start_us, out, err);
    pthread_mutex_unlock(&rl->lock);
    return rc;
}

fg_code fg_redlock_unlock(fg_redlock *rl, const char *key, const char *owner, fg_error *err) {
    fg_code rc = check_call(rl, key, owner, err);
    if (rc != FG_CODE_OK) return rc;
    tally t;
    pthread_mutex_lock(&rl->lock);
    release_everywhere(rl, key, owner, &t);
    pthread_mutex_unlock(&rl->lock);
    if (t.answered == (int)rl->n) return FG_CODE_OK;
    if (t.errors > 0) {
        if (err != NULL) *err = t.error;
        return t.error.code;
    }
    return fg_set_error(err, FG_CODE_IO,
                        "%zu of %zu servers did not answer: their holds end with the lease",
                        rl->n - (size_t)t.answered, rl->n);
}
