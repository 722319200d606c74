/*
 * remote_lock.c - the locks, semaphores and multi-key locks of a client of
 * one server (redis:, unix:): the module's commands (docs/locks.md). lock.c
 * has checked the arguments and options.
 *
 * The server holds everything: owners, leases, tokens and the queue of
 * waiters. This side only chooses a connection, adds the durable and
 * renewal options, and turns replies into results.
 *
 *   - A call that does not wait borrows the client's shared connection for
 *     one round trip (remote.c), like a check.
 *   - A call that waits in the server (wait_ms != 0), and a durable one (its
 *     WAIT blocks too), runs on a connection of its own, so that the other
 *     threads' calls on the client go on meanwhile. Up to SPARE_CONNS such
 *     connections are kept for later waiting calls, the rest closed. The
 *     read timeout is the wait plus command_timeout_ms (none for wait -1):
 *     the server answers when the wait ends, and a client that gives up
 *     first closes the connection, which takes its request out of the queue
 *     (a grant made at that very moment is lost with the reply, and held
 *     until its lease ends).
 *   - Durable mode: "WAIT replicas timeout" follows a grant, pipelined with
 *     the request when the request does not wait (one round trip; the WAIT
 *     then also runs after a refusal, and costs nothing but its reply), sent
 *     after the reply otherwise. A grant seen by fewer replicas is released
 *     on the same connection, and the call answers FG_CODE_NOT_DURABLE.
 *   - Renewal is renewal.c's. Its thread is started before the first
 *     renewed request is sent, so that a failure to start it leaves nothing
 *     held; grants are registered with it, and unlocks through this client
 *     end their registration. Closing stops and joins it.
 */
#include "remote_lock.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "error.h"
#include "remote.h"
#include "renewal.h"

#define SPARE_CONNS 4 /* idle connections kept for waiting calls */

/* The locks of a client of one server. */
typedef struct fg_locks {
    fg_remote *remote; /* its shared connection */
    fg_url addr;
    fg_conn_config cfg;
    pthread_mutex_t lock; /* guards the spares and the renewal pointer */
    fg_conn spares[SPARE_CONNS];
    size_t nspares;
    fg_conn subs[SPARE_CONNS]; /* idle subscriber connections (waiting without the module) */
    size_t nsubs;
    fg_renewal *renewal; /* started with the first renewed request */
} fg_locks;

/* ------------------------------------------------------------- replies */

static fg_code unexpected(fg_error *err, const char *what) {
    return fg_set_error(err, FG_CODE_PROTOCOL, "unexpected reply to %s (module without locks?)",
                        what);
}

fg_code fg_parse_grant(const redisReply *r, fg_lock_grant *out, fg_error *err) {
    if (r->type == REDIS_REPLY_ERROR) return fg_reply_error(r, err);
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 4) return unexpected(err, "a lock request");
    for (size_t i = 0; i < 4; i++)
        if (r->element[i]->type != REDIS_REPLY_INTEGER) return unexpected(err, "a lock request");
    long long acquired = r->element[0]->integer, token = r->element[1]->integer;
    if ((acquired != 0 && acquired != 1) || token < 0) return unexpected(err, "a lock request");
    out->acquired = acquired == 1;
    out->token = (uint64_t)token;
    out->ttl_ms = r->element[2]->integer;
    out->holds = r->element[3]->integer;
    return FG_CODE_OK;
}

static fg_code parse_integer(const redisReply *r, int64_t *out, fg_error *err, const char *what) {
    if (r->type == REDIS_REPLY_ERROR) return fg_reply_error(r, err);
    if (r->type != REDIS_REPLY_INTEGER) return unexpected(err, what);
    *out = r->integer;
    return FG_CODE_OK;
}

fg_code fg_parse_lock_count(const redisReply *r, const char *command, int64_t *out,
                            fg_error *err) {
    return parse_integer(r, out, err, command);
}

fg_code fg_parse_extended(const redisReply *r, bool *extended, fg_error *err) {
    int64_t v = 0;
    fg_code rc = parse_integer(r, &v, err, "FG.EXTEND");
    if (rc == FG_CODE_OK && v != 0 && v != 1) rc = unexpected(err, "FG.EXTEND");
    if (rc == FG_CODE_OK) *extended = v == 1;
    return rc;
}

/* ------------------------------------------------------------- commands */

void fg_semaphore_acquire_command(fg_argv *cmd, const char *key, int64_t capacity,
                                  const char *owner, int64_t permits,
                                  const fg_lock_options *o) {
    fg_argv_init(cmd, "FG.ACQUIRE");
    fg_argv_str(cmd, key);
    fg_argv_num(cmd, capacity);
    fg_argv_str(cmd, owner);
    fg_argv_num(cmd, permits);
    fg_argv_num(cmd, o->lease_ms);
}

void fg_semaphore_release_command(fg_argv *cmd, const char *key, const char *owner,
                                  int64_t permits) {
    fg_argv_init(cmd, "FG.RELEASE");
    fg_argv_str(cmd, key);
    fg_argv_str(cmd, owner);
    if (permits > 0) fg_argv_num(cmd, permits);
}

void fg_extend_command(fg_argv *cmd, const char *key, const char *owner, int64_t lease_ms) {
    fg_argv_init(cmd, "FG.EXTEND");
    fg_argv_str(cmd, key);
    fg_argv_str(cmd, owner);
    fg_argv_num(cmd, lease_ms);
}

/* ------------------------------------------------------------ the locks */

static void *locks_open(const fg_backend_args *a) {
    fg_locks *l = calloc(1, sizeof(*l));
    if (l == NULL) return NULL;
    l->remote = a->shared;
    l->addr = *fg_remote_addr(l->remote);
    l->cfg = *fg_remote_config(l->remote);
    pthread_mutex_init(&l->lock, NULL);
    return l;
}

static void locks_close(void *s) {
    fg_locks *l = s;
    fg_renewal_stop(l->renewal);
    for (size_t i = 0; i < l->nspares; i++)
        fg_conn_close(&l->spares[i]);
    for (size_t i = 0; i < l->nsubs; i++)
        fg_conn_close(&l->subs[i]);
    pthread_mutex_destroy(&l->lock);
    free(l);
}

/* The renewal thread, started now if it is not yet. */
static fg_code start_renewal(fg_locks *l, fg_renewal **out, fg_error *err) {
    pthread_mutex_lock(&l->lock);
    if (l->renewal == NULL) l->renewal = fg_renewal_start(&l->addr, &l->cfg, err);
    *out = l->renewal;
    pthread_mutex_unlock(&l->lock);
    return *out != NULL ? FG_CODE_OK : err != NULL ? err->code : FG_CODE_NOMEM;
}

static fg_renewal *renewal_if_started(fg_locks *l) {
    pthread_mutex_lock(&l->lock);
    fg_renewal *r = l->renewal;
    pthread_mutex_unlock(&l->lock);
    return r;
}

/* ------------------------------------------------------------- channels */

/* The connection of one call: the client's shared one, or its own. */
typedef struct channel {
    fg_locks *locks;
    fg_conn *conn; /* &own when dedicated */
    fg_conn own;
    bool dedicated;
} channel;

static void channel_open(channel *ch, fg_locks *l, bool dedicated) {
    memset(ch, 0, sizeof(*ch));
    ch->locks = l;
    ch->dedicated = dedicated;
    if (!dedicated) {
        ch->conn = fg_remote_take_conn(l->remote);
        return;
    }
    pthread_mutex_lock(&l->lock);
    if (l->nspares > 0) ch->own = l->spares[--l->nspares];
    pthread_mutex_unlock(&l->lock);
    ch->conn = &ch->own;
}

/* One round trip. On a dedicated channel the server may take wait_ms more
 * than command_timeout_ms to answer (-1: any time). */
static fg_code channel_exchange(channel *ch, const fg_argv *cmds, size_t n, redisReply **replies,
                                int64_t wait_ms, fg_error *err) {
    const fg_locks *l = ch->locks;
    if (ch->dedicated) {
        fg_code rc = fg_conn_ensure(ch->conn, &l->addr, &l->cfg, err);
        if (rc == FG_CODE_OK)
            rc = fg_conn_set_timeout(ch->conn,
                                     wait_ms < 0 ? 0 : l->cfg.command_timeout_ms + wait_ms, err);
        if (rc != FG_CODE_OK) {
            if (rc == FG_CODE_IO) fg_count(&l->cfg.counters->failures, 1);
            return rc;
        }
    }
    return fg_conn_exchange(ch->conn, &l->addr, &l->cfg, cmds, n, replies, err);
}

static void channel_close(channel *ch) {
    if (!ch->dedicated) {
        fg_remote_give_conn(ch->locks->remote);
        return;
    }
    fg_locks *l = ch->locks;
    pthread_mutex_lock(&l->lock);
    if (ch->own.ctx != NULL && l->nspares < SPARE_CONNS) {
        l->spares[l->nspares++] = ch->own;
        ch->own.ctx = NULL;
    }
    pthread_mutex_unlock(&l->lock);
    fg_conn_close(&ch->own);
}

/* ------------------------------------------------------------- acquiring */

/* A request that may grant (FG.LOCK, FG.ACQUIRE, FG.MLOCK), followed by the
 * WAIT of durable mode, and the command that undoes its grant. */
typedef struct request {
    fg_argv cmds[2];
    fg_argv undo;
    const char *const *keys;
    size_t nkeys;
    const char *owner;
} request;

static void add_wait(fg_argv *cmd, const fg_lock_options *o) {
    if (o->wait_ms == 0) return;
    fg_argv_str(cmd, "WAIT");
    fg_argv_num(cmd, o->wait_ms < 0 ? 0 : o->wait_ms); /* the server's 0: no timeout */
}

/* Releases the grant of q after a failure `rc` (already in err), and says
 * in err when even that failed. */
static fg_code undo_grant(channel *ch, const request *q, fg_code rc, fg_error *err) {
    redisReply *reply;
    fg_error undo_err;
    fg_code undo = channel_exchange(ch, &q->undo, 1, &reply, 0, &undo_err);
    if (undo == FG_CODE_OK) {
        if (reply->type == REDIS_REPLY_ERROR) undo = fg_reply_error(reply, &undo_err);
        freeReplyObject(reply);
    }
    if (undo != FG_CODE_OK && err != NULL) {
        size_t len = strlen(err->message);
        snprintf(err->message + len, sizeof(err->message) - len,
                 "; releasing the grant failed (%s), it is held until its lease ends",
                 fg_code_name(undo));
    }
    return rc;
}

/* The WAIT reply after a grant: FG_CODE_OK when enough replicas have it. */
static fg_code judge_acks(const redisReply *r, const fg_lock_options *o, fg_error *err) {
    int64_t acks = 0;
    fg_code rc = parse_integer(r, &acks, err, "WAIT");
    if (rc != FG_CODE_OK || acks >= o->durable_replicas) return rc;
    return fg_set_error(err, FG_CODE_NOT_DURABLE,
                        "granted, but only %lld of the %d replicas asked for acknowledged it "
                        "within %d ms: released",
                        (long long)acks, o->durable_replicas, o->durable_timeout_ms);
}

/* Durable mode after a grant: the WAIT's reply (pipelined, or asked now),
 * and the release of a grant that did not reach enough replicas. */
static fg_code make_durable(channel *ch, const request *q, const fg_lock_options *o,
                            redisReply *pipelined, fg_error *err) {
    redisReply *acks = pipelined;
    fg_code rc = FG_CODE_OK;
    if (acks == NULL) rc = channel_exchange(ch, &q->cmds[1], 1, &acks, o->durable_timeout_ms, err);
    if (rc == FG_CODE_OK) {
        rc = judge_acks(acks, o, err);
        freeReplyObject(acks);
    }
    return rc == FG_CODE_OK ? rc : undo_grant(ch, q, rc, err);
}

static void add_keys(fg_argv *cmd, const char *const *keys, size_t count) {
    fg_argv_num(cmd, (int64_t)count);
    for (size_t i = 0; i < count; i++)
        fg_argv_str(cmd, keys[i]);
}

/* ------------------------------------------------- waiting without the module */

/* On a server without the module the request cannot block: lock.lua keeps
 * the queue in the lock's key, and hands the lock to the waiters at its
 * head when it frees, telling each on the key's channel. So a waiting call
 * subscribes to its keys' channels on a connection of its own, then asks
 * with "WAIT <stay>": queue me, or keep my place, for stay ms. Between two
 * asks it waits for its message, at most RECHECK_MS, or until the lease
 * in its way ends (which no command announces): a lost message costs at
 * most that, and a waiter that dies leaves the queue within stay. A call
 * that gives up sends FG.UNWAIT, which gives back a grant handed to it
 * meanwhile. */
#define RECHECK_MS 250

/* A message of lock.lua on a key's channel: "g <token> <ttl_ms> <count>
 * <owner>" (granted), "w <owner>" (a multi-key waiter's turn to ask), "e
 * <owner>\n<why>" (refused). */
typedef enum told { TOLD_NOTHING, TOLD_GRANTED, TOLD_ASK, TOLD_REFUSED } told;

/* What a subscriber's reply tells `owner`. */
static told read_message(const redisReply *r, const char *owner, fg_error *err) {
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[2]->type != REDIS_REPLY_STRING)
        return TOLD_NOTHING;
    const char *m = r->element[2]->str, *end = m + r->element[2]->len;
    size_t olen = strlen(owner);
    if ((m[0] == 'w' || m[0] == 'e') && end - m >= 2) {
        const char *who = m + 2, *stop = m[0] == 'e' ? memchr(who, '\n', (size_t)(end - who)) : end;
        if (stop == NULL || (size_t)(stop - who) != olen || memcmp(who, owner, olen) != 0)
            return TOLD_NOTHING;
        if (m[0] == 'w') return TOLD_ASK;
        fg_set_error(err, FG_CODE_INVALID, "%.*s", (int)(end - stop - 1), stop + 1);
        return TOLD_REFUSED;
    }
    long long token, ttl, count;
    int at = 0;
    if (m[0] != 'g' || sscanf(m, "g %lld %lld %lld %n", &token, &ttl, &count, &at) != 3 ||
        (size_t)(end - (m + at)) != olen || memcmp(m + at, owner, olen) != 0)
        return TOLD_NOTHING;
    return TOLD_GRANTED;
}

static const char *const subscribe_verbs[] = {"SSUBSCRIBE", "SUBSCRIBE"};
static const char *const unsubscribe_verbs[] = {"SUNSUBSCRIBE", "UNSUBSCRIBE"};

/* Subscribes a subscriber connection (a spare one when there is one) to
 * the channels of the request's keys: sharded where the server has it
 * (lock.lua publishes the same way); *verb says which was taken. */
static fg_code subscribe(fg_locks *l, fg_conn *sub, const request *q, size_t *verb,
                         fg_error *err) {
    pthread_mutex_lock(&l->lock);
    if (l->nsubs > 0) *sub = l->subs[--l->nsubs];
    pthread_mutex_unlock(&l->lock);
    fg_code rc = fg_conn_ensure(sub, &l->addr, &l->cfg, err);
    for (size_t v = 0; rc == FG_CODE_OK && v < 2; v++) {
        fg_argv cmd;
        *verb = v;
        fg_argv_init(&cmd, subscribe_verbs[v]);
        for (size_t i = 0; i < q->nkeys; i++)
            fg_argv_str(&cmd, q->keys[i]);
        redisReply *replies[FG_ARGV_MAX];
        rc = fg_conn_append_argv(sub, &cmd, err);
        if (rc == FG_CODE_OK) rc = fg_conn_flush(sub, err);
        if (rc == FG_CODE_OK) rc = fg_conn_receive(sub, replies, 1, err);
        if (rc != FG_CODE_OK) break;
        bool refused = replies[0]->type == REDIS_REPLY_ERROR;
        if (refused) rc = fg_reply_error(replies[0], err);
        freeReplyObject(replies[0]);
        if (refused) continue; /* a server before 7.0: no sharded channels */
        if (q->nkeys > 1) rc = fg_conn_receive(sub, replies, q->nkeys - 1, err);
        for (size_t i = 0; rc == FG_CODE_OK && i + 1 < q->nkeys; i++)
            freeReplyObject(replies[i]);
        return rc;
    }
    return rc;
}

/* Leaves every channel, reading what comes until the server says none is
 * left, and keeps the connection for the next wait; closes it when that
 * fails or enough are kept. */
static void unsubscribe(fg_locks *l, fg_conn *sub, size_t verb) {
    fg_argv cmd;
    fg_argv_init(&cmd, unsubscribe_verbs[verb]);
    bool left = sub->ctx != NULL && fg_conn_append_argv(sub, &cmd, NULL) == FG_CODE_OK &&
                fg_conn_flush(sub, NULL) == FG_CODE_OK;
    while (left) {
        redisReply *r = NULL;
        if (fg_conn_await(sub, &r, l->cfg.command_timeout_ms, NULL) != FG_CODE_OK || r == NULL) {
            left = false;
            break;
        }
        bool last = r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
                    r->element[0]->type == REDIS_REPLY_STRING &&
                    strcasecmp(r->element[0]->str, unsubscribe_verbs[verb]) == 0 &&
                    r->element[2]->type == REDIS_REPLY_INTEGER && r->element[2]->integer == 0;
        freeReplyObject(r);
        if (last) break;
    }
    pthread_mutex_lock(&l->lock);
    if (left && l->nsubs < SPARE_CONNS) {
        l->subs[l->nsubs++] = *sub;
        sub->ctx = NULL;
    }
    pthread_mutex_unlock(&l->lock);
    fg_conn_close(sub);
}

/* A grant's round trip on ch. */
static fg_code exchange_grant(channel *ch, const fg_argv *cmd, fg_lock_grant *out, fg_error *err) {
    redisReply *reply;
    fg_code rc = channel_exchange(ch, cmd, 1, &reply, 0, err);
    if (rc != FG_CODE_OK) return rc;
    rc = fg_parse_grant(reply, out, err);
    freeReplyObject(reply);
    return rc;
}

/* One ask: the request with WAIT's value set to stay_ms. */
static fg_code ask(channel *ch, const request *q, int64_t stay_ms, fg_lock_grant *out,
                   fg_error *err) {
    fg_argv cmd = q->cmds[0];
    char stay[24];
    snprintf(stay, sizeof(stay), "%lld", (long long)stay_ms);
    cmd.argv[cmd.argc - 1] = stay; /* WAIT's value: add_wait put it last */
    cmd.argvlen[cmd.argc - 1] = strlen(stay);
    return exchange_grant(ch, &cmd, out, err);
}

/* The claim of a hold handed to the request: the request with CLAIM in
 * place of its WAIT (lock.lua). */
static fg_code claim(channel *ch, const request *q, fg_lock_grant *out, fg_error *err) {
    fg_argv cmd = q->cmds[0];
    cmd.argc -= 2; /* WAIT and its value: add_wait put them last */
    fg_argv_str(&cmd, "CLAIM");
    return exchange_grant(ch, &cmd, out, err);
}

/* One command answered by an integer, on ch. */
static fg_code channel_integer(channel *ch, const fg_argv *cmd, int64_t *out, fg_error *err) {
    redisReply *reply;
    fg_code rc = channel_exchange(ch, cmd, 1, &reply, 0, err);
    if (rc != FG_CODE_OK) return rc;
    rc = parse_integer(reply, out, err, cmd->argv[0]);
    freeReplyObject(reply);
    return rc;
}

/* Leaves the queues after a wait that timed out. */
static fg_code give_up(channel *ch, const request *q, fg_error *err) {
    fg_argv cmd;
    fg_argv_init(&cmd, "FG.UNWAIT");
    add_keys(&cmd, q->keys, q->nkeys);
    fg_argv_str(&cmd, q->owner);
    int64_t left;
    return channel_integer(ch, &cmd, &left, err);
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* The messages for the request that come within timeout_ms (0: those
 * already here), up to the first that tells it something. */
static told hear(fg_conn *sub, const request *q, int64_t timeout_ms, fg_code *rc,
                 fg_error *err) {
    int64_t until = fg_monotonic_us() + timeout_ms * 1000;
    told t = TOLD_NOTHING;
    while (*rc == FG_CODE_OK && t == TOLD_NOTHING) {
        int64_t left_ms = (until - fg_monotonic_us() + 999) / 1000;
        redisReply *message = NULL;
        *rc = fg_conn_await(sub, &message, left_ms > 0 ? (int)left_ms : 0, err);
        if (message == NULL) break;
        t = read_message(message, q->owner, err);
        freeReplyObject(message);
    }
    if (t == TOLD_REFUSED) *rc = err != NULL ? err->code : FG_CODE_INVALID;
    return t;
}

/* The wait of a request on a server without the module; *granted_us as
 * request_grant's: the sending of the ask (or claim) that was granted.
 *
 * A grant told by message is handed, not given (lock.lua): it lasts only
 * the waiter's stay, or its lease if shorter, until claimed, so the call
 * claims it at once and answers the claim's reply (a write of this
 * connection's too, for durable mode's WAIT). A message proves nothing
 * (any client may publish on the channel): only the claim's reply grants.
 * One that finds the owner still queued was no hand-off, and the wait goes
 * on. One that comes too late (the process was stopped past the hand-off's
 * lease) answers not acquired: the waiter's turn came and went, and it is
 * not queued again behind those it was ahead of. The messages that came
 * meanwhile are read before each ask: a process paused past its nap must
 * claim, not ask anew. */
static fg_code wait_by_script(channel *ch, const request *q, const fg_lock_options *o,
                              fg_lock_grant *out, int64_t *granted_us, fg_error *err) {
    fg_locks *l = ch->locks;
    int64_t deadline = o->wait_ms < 0 ? INT64_MAX : fg_monotonic_us() + o->wait_ms * 1000;
    fg_conn sub = {0};
    size_t verb = 0;
    fg_code rc = subscribe(l, &sub, q, &verb, err);
    told t = TOLD_NOTHING;
    *granted_us = fg_monotonic_us(); /* a hand-off follows the ask sent then */
    while (rc == FG_CODE_OK) {
        if (t == TOLD_NOTHING) t = hear(&sub, q, 0, &rc, err);
        if (rc != FG_CODE_OK) break;
        int64_t sent_us = fg_monotonic_us();
        if (t == TOLD_GRANTED) {
            t = TOLD_NOTHING;
            rc = claim(ch, q, out, err);
            if (rc != FG_CODE_OK || out->holds != -1) { /* granted, or too late */
                if (out->acquired) *granted_us = sent_us;
                break;
            }
        }
        int64_t left_ms = deadline == INT64_MAX ? INT64_MAX : (deadline - sent_us) / 1000;
        int64_t nap_ms = min64(RECHECK_MS, left_ms > 0 ? left_ms : 0);
        rc = ask(ch, q, nap_ms + l->cfg.command_timeout_ms, out, err);
        if (rc != FG_CODE_OK) break;
        *granted_us = sent_us;
        if (out->acquired) break;
        if (left_ms <= 0) {
            rc = give_up(ch, q, err);
            break;
        }
        if (out->ttl_ms > 0) nap_ms = min64(nap_ms, out->ttl_ms); /* a lease in the way ends */
        t = hear(&sub, q, nap_ms, &rc, err);
    }
    if (rc != FG_CODE_OK) *out = (fg_lock_grant){0};
    unsubscribe(l, &sub, verb);
    return rc;
}

/* Sends the request (and its WAIT) on ch and reads the grant; *granted_us
 * is when its lease began at the earliest (monotonic): the request's
 * sending, or for a request that waited, the arrival of its reply (later
 * than the grant by up to one trip). */
static fg_code request_grant(channel *ch, const request *q, const fg_lock_options *o,
                             fg_lock_grant *out, int64_t *granted_us, fg_error *err) {
    bool waits = o->wait_ms != 0, durable = o->durable_replicas > 0;
    if (waits && fg_conn_ensure(ch->conn, &ch->locks->addr, &ch->locks->cfg, err) == FG_CODE_OK &&
        ch->conn->dialect == FG_DIALECT_SCRIPT) {
        fg_code rc = wait_by_script(ch, q, o, out, granted_us, err);
        if (rc != FG_CODE_OK || !out->acquired || !durable) return rc;
        rc = make_durable(ch, q, o, NULL, err);
        if (rc != FG_CODE_OK) *out = (fg_lock_grant){0};
        return rc;
    }
    size_t n = durable && !waits ? 2 : 1;
    int64_t wait_ms = waits ? o->wait_ms : durable ? o->durable_timeout_ms : 0;
    redisReply *replies[2] = {NULL, NULL};
    *granted_us = fg_monotonic_us();
    fg_code rc = channel_exchange(ch, q->cmds, n, replies, wait_ms, err);
    if (waits) *granted_us = fg_monotonic_us();
    if (rc != FG_CODE_OK) return rc;
    rc = fg_parse_grant(replies[0], out, err);
    freeReplyObject(replies[0]);
    if (rc != FG_CODE_OK || !out->acquired || !durable) {
        if (replies[1] != NULL) freeReplyObject(replies[1]);
        return rc;
    }
    rc = make_durable(ch, q, o, replies[1], err);
    if (rc != FG_CODE_OK) *out = (fg_lock_grant){0};
    return rc;
}

static fg_code acquire(fg_locks *l, request *q, const fg_lock_options *o, fg_lock_grant *out,
                       fg_error *err) {
    fg_renewal *renewal = NULL;
    fg_code rc = o->renew ? start_renewal(l, &renewal, err) : FG_CODE_OK;
    if (rc != FG_CODE_OK) return rc;
    if (o->durable_replicas > 0) {
        fg_argv_init(&q->cmds[1], "WAIT");
        fg_argv_num(&q->cmds[1], o->durable_replicas);
        fg_argv_num(&q->cmds[1], o->durable_timeout_ms);
    }
    channel ch;
    channel_open(&ch, l, o->wait_ms != 0 || o->durable_replicas > 0);
    int64_t granted_us;
    rc = request_grant(&ch, q, o, out, &granted_us, err);
    if (rc == FG_CODE_OK && out->acquired && renewal != NULL &&
        (rc = fg_renewal_add(renewal, q->keys, q->nkeys, q->owner, granted_us, o, err)) !=
            FG_CODE_OK) {
        rc = undo_grant(&ch, q, rc, err);
        *out = (fg_lock_grant){0};
    }
    channel_close(&ch);
    return rc;
}

/* ------------------------------------------------------------ releasing */

/* One command answered by an integer, on the shared connection. */
static fg_code shared_integer(fg_locks *l, const fg_argv *cmd, int64_t *out, fg_error *err) {
    channel ch;
    channel_open(&ch, l, false);
    fg_code rc = channel_integer(&ch, cmd, out, err);
    channel_close(&ch);
    return rc;
}

/* An unlock, release or multi-unlock: *left (left may be NULL) is its
 * reply; the keys are no longer renewed when it leaves the owner nothing
 * (0 or less, or always for a multi-unlock). */
static fg_code release(fg_locks *l, const fg_argv *cmd, const char *const *keys, size_t count,
                       const char *owner, bool multi, int64_t *left, fg_error *err) {
    fg_renewal *renewal = renewal_if_started(l);
    fg_unlock_in_flight u;
    int64_t n = 0;
    if (renewal != NULL) fg_renewal_unlock_begin(renewal, &u, keys, count, owner);
    fg_code rc = shared_integer(l, cmd, &n, err);
    if (renewal != NULL) fg_renewal_unlock_end(renewal, &u, rc == FG_CODE_OK && (multi || n <= 0));
    if (rc == FG_CODE_OK && left != NULL) *left = n;
    return rc;
}

/* --------------------------------------------------------------- the calls */

static fg_code lock(void *s, const char *key, const char *owner, const fg_lock_options *o,
                    fg_lock_grant *out, fg_error *err) {
    *out = (fg_lock_grant){0};
    request q = {.keys = &key, .nkeys = 1, .owner = owner};
    fg_argv *cmd = &q.cmds[0];
    fg_argv_init(cmd, "FG.LOCK");
    fg_argv_str(cmd, key);
    fg_argv_str(cmd, owner);
    fg_argv_num(cmd, o->lease_ms);
    if (o->shared) fg_argv_str(cmd, "SHARED");
    if (o->reentrant) fg_argv_str(cmd, "REENTRANT");
    add_wait(cmd, o);
    fg_argv_init(&q.undo, "FG.UNLOCK");
    fg_argv_str(&q.undo, key);
    fg_argv_str(&q.undo, owner);
    return acquire(s, &q, o, out, err);
}

static fg_code semaphore_acquire(void *s, const char *key, int64_t capacity, const char *owner,
                                 int64_t permits, const fg_lock_options *o, fg_lock_grant *out,
                                 fg_error *err) {
    *out = (fg_lock_grant){0};
    request q = {.keys = &key, .nkeys = 1, .owner = owner};
    fg_argv *cmd = &q.cmds[0];
    fg_semaphore_acquire_command(cmd, key, capacity, owner, permits, o);
    add_wait(cmd, o);
    fg_semaphore_release_command(&q.undo, key, owner, permits);
    return acquire(s, &q, o, out, err);
}

static fg_code lock_multi(void *s, const char *const *keys, size_t count, const char *owner,
                          const fg_lock_options *o, fg_lock_grant *out, fg_error *err) {
    *out = (fg_lock_grant){0};
    request q = {.keys = keys, .nkeys = count, .owner = owner};
    fg_argv *cmd = &q.cmds[0];
    fg_argv_init(cmd, "FG.MLOCK");
    add_keys(cmd, keys, count);
    fg_argv_str(cmd, owner);
    fg_argv_num(cmd, o->lease_ms);
    add_wait(cmd, o);
    fg_argv_init(&q.undo, "FG.MUNLOCK");
    add_keys(&q.undo, keys, count);
    fg_argv_str(&q.undo, owner);
    return acquire(s, &q, o, out, err);
}

static fg_code unlock(void *s, const char *key, const char *owner, int64_t *holds_left,
                      fg_error *err) {
    fg_argv cmd;
    fg_argv_init(&cmd, "FG.UNLOCK");
    fg_argv_str(&cmd, key);
    fg_argv_str(&cmd, owner);
    return release(s, &cmd, &key, 1, owner, false, holds_left, err);
}

static fg_code semaphore_release(void *s, const char *key, const char *owner, int64_t permits,
                                 int64_t *permits_left, fg_error *err) {
    fg_argv cmd;
    fg_semaphore_release_command(&cmd, key, owner, permits);
    return release(s, &cmd, &key, 1, owner, false, permits_left, err);
}

static fg_code unlock_multi(void *s, const char *const *keys, size_t count, const char *owner,
                            int64_t *released, fg_error *err) {
    fg_argv cmd;
    fg_argv_init(&cmd, "FG.MUNLOCK");
    add_keys(&cmd, keys, count);
    fg_argv_str(&cmd, owner);
    return release(s, &cmd, keys, count, owner, true, released, err);
}

static fg_code extend(void *s, const char *key, const char *owner, int64_t lease_ms, bool *extended,
                      fg_error *err) {
    fg_argv cmd;
    fg_extend_command(&cmd, key, owner, lease_ms);
    channel ch;
    redisReply *reply;
    channel_open(&ch, s, false);
    fg_code rc = channel_exchange(&ch, &cmd, 1, &reply, 0, err);
    channel_close(&ch);
    if (rc != FG_CODE_OK) return rc;
    bool held = false;
    rc = fg_parse_extended(reply, &held, err);
    freeReplyObject(reply);
    if (rc == FG_CODE_OK && extended != NULL) *extended = held;
    return rc;
}

const fg_lock_ops fg_remote_locks = {
    locks_open,        locks_close,       lock,       unlock,      extend,
    semaphore_acquire, semaphore_release, lock_multi, unlock_multi};
