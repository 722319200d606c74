/*
 * remote_limit.c - the rate limits of a client of a server or cluster: one
 * FG.* command per decision on the client's shared connection, or to the
 * master of the key's slot (remote.c). client.c has checked and converted
 * the limit and the cost exactly as the module does.
 *
 * The path of a check:
 *
 *   1. The denial cache may answer a key denied earlier (opt-in), and a
 *      lease of the key may answer from units taken earlier (opt-in;
 *      lease.c): a miss gives back the old lease and asks for a new one in
 *      one round trip.
 *   2. The server decides. An I/O failure (remote.c; a cluster follows
 *      redirects and failovers first) goes to the failure policy, which
 *      turns FG_CODE_IO into an answer (open, closed, or the fallback: the
 *      mem: backend's rate limits, an in-process table of this client's
 *      own) or leaves it as the error.
 *
 * The server uses its own clock unless opts.send_clock appends "AT <us>".
 * fg_reset forgets the key in the fallback table, the denial cache and the
 * leases too; closing gives every unused lease back.
 *
 * A server without the module runs the same commands as scripts (conn.c,
 * scripts.h), whose replies are the module's but that an integer above
 * 2^53 comes as its decimal text: every integer is read either way.
 */
#include "remote_limit.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mem/backend_mem.h"
#include "conn.h"
#include "error.h"
#include "lease.h"
#include "monotonic.h"
#include "remote.h"
#include "text.h"

#define DENIAL_SLOTS     256
#define DENIAL_KEY_MAX   120
#define REFUND_MARGIN_US 1000
#define MAX_REPLY_MS     (INT64_MAX / 1000000) /* the longest duration a reply can hold */

/* A denial remembered until its retry time. until_us == 0: an empty slot. */
typedef struct denial {
    int64_t until_us; /* in the client's clock: retry time of the denial */
    int64_t reset_at_us;
    fg_limit limit;
    int64_t cost;
    int64_t units; /* the reply's limit and remaining */
    int64_t remaining;
    size_t keylen;
    char key[DENIAL_KEY_MAX];
} denial;

/* The rate limits of a client. */
typedef struct limits {
    fg_remote *remote;
    const fg_options *opts;
    fg_counters *counters;
    void *fallback; /* the mem: backend's, when opts.on_failure is FALLBACK */

    pthread_mutex_t cache_lock;
    denial *denials; /* DENIAL_SLOTS, when opts.cache_denials */
    /* Under cache_lock: keys forgotten (reset) so far. A denial decided
     * before a reset must not be cached after it. */
    uint64_t cache_resets;

    fg_lease_table *leases; /* when opts.lease_units */
} limits;

/* ---------------------------------------------------------- denial cache */

static size_t denial_slot(const char *key, size_t len) {
    return (size_t)(fg_key_hash(key, len) % DENIAL_SLOTS);
}

static bool same_limit(const fg_limit *a, const fg_limit *b) {
    return a->algorithm == b->algorithm && a->limit == b->limit && a->window_ms == b->window_ms &&
           a->rate == b->rate;
}

static bool cache_lookup(limits *lim, const char *key, const fg_limit *l, int64_t cost, int64_t now,
                         fg_result *out) {
    size_t len = strlen(key);
    if (lim->denials == NULL || len > DENIAL_KEY_MAX) return false;
    bool hit = false;
    pthread_mutex_lock(&lim->cache_lock);
    denial *d = &lim->denials[denial_slot(key, len)];
    if (d->until_us != 0 && now < d->until_us && d->keylen == len &&
        memcmp(d->key, key, len) == 0 && same_limit(&d->limit, l) && cost >= d->cost) {
        int64_t reset_left = d->reset_at_us - now;
        *out = (fg_result){.allowed = false,
                           .limit = d->units,
                           .remaining = d->remaining,
                           .retry_after_ms = fg_ns_to_ms_ceil((d->until_us - now) * FG_NS_PER_US),
                           .reset_after_ms =
                               fg_ns_to_ms_ceil(reset_left > 0 ? reset_left * FG_NS_PER_US : 0),
                           .source = FG_SOURCE_DENIAL_CACHE};
        hit = true;
    }
    pthread_mutex_unlock(&lim->cache_lock);
    return hit;
}

/* Only denials with a retry time are remembered: -1 (never fits) depends on
 * the cost, and a smaller cost might fit. */
static void cache_store(limits *lim, const char *key, const fg_limit *l, int64_t cost, int64_t now,
                        const fg_result *r, uint64_t resets_before) {
    size_t len = strlen(key);
    if (lim->denials == NULL || len > DENIAL_KEY_MAX || r->allowed || r->retry_after_ms < 0) return;
    pthread_mutex_lock(&lim->cache_lock);
    if (lim->cache_resets != resets_before) {
        pthread_mutex_unlock(&lim->cache_lock);
        return;
    }
    denial *d = &lim->denials[denial_slot(key, len)];
    d->until_us = now + r->retry_after_ms * 1000;
    d->reset_at_us = now + r->reset_after_ms * 1000;
    d->limit = *l;
    d->cost = cost;
    d->units = r->limit;
    d->remaining = r->remaining;
    d->keylen = len;
    memcpy(d->key, key, len);
    pthread_mutex_unlock(&lim->cache_lock);
}

/* The cache's reset count, read before a round trip whose denial may be
 * stored after it. */
static uint64_t cache_resets(limits *lim) {
    if (lim->denials == NULL) return 0;
    pthread_mutex_lock(&lim->cache_lock);
    uint64_t n = lim->cache_resets;
    pthread_mutex_unlock(&lim->cache_lock);
    return n;
}

static void cache_forget(limits *lim, const char *key) {
    size_t len = strlen(key);
    if (lim->denials == NULL || len > DENIAL_KEY_MAX) return;
    pthread_mutex_lock(&lim->cache_lock);
    lim->cache_resets++;
    denial *d = &lim->denials[denial_slot(key, len)];
    if (d->keylen == len && memcmp(d->key, key, len) == 0) d->until_us = 0;
    pthread_mutex_unlock(&lim->cache_lock);
}

/* -------------------------------------------------------------- commands */

static void add_arg(fg_command *cmd, const char *s, size_t len) {
    cmd->argv[cmd->argc] = s;
    cmd->argvlen[cmd->argc] = len;
    cmd->argc++;
}

static void add_str(fg_command *cmd, const char *s) {
    add_arg(cmd, s, strlen(s));
}

static void add_num(fg_command *cmd, int slot, int64_t v) {
    add_arg(cmd, cmd->nums[slot], fg_format_int(cmd->nums[slot], v));
}

/* "AT <us>" last: the checks and FG.PEEK take it when the server allows
 * (FG.RESET and FG.INSPECT do not: they do not depend on the time). */
static void add_clock(const limits *lim, fg_command *cmd, int64_t now) {
    if (!lim->opts->send_clock) return;
    add_str(cmd, "AT");
    add_num(cmd, FG_LIMIT_MAX_ARGS + 1, now);
}

/* "key args...": what every check, peek and refund of a limit names. */
static void add_key_and_limit(fg_command *cmd, const char *key, const fg_limit *l) {
    cmd->key = key;
    cmd->keylen = strlen(key);
    add_arg(cmd, key, cmd->keylen);
    int n = fg_limit_format_args(l, cmd->nums);
    for (int i = 0; i < n; i++)
        add_str(cmd, cmd->nums[i]);
}

static void build_check(const limits *lim, fg_command *cmd, const char *key, const fg_limit *l,
                        int64_t cost, bool peek, int64_t now) {
    cmd->argc = 0;
    if (peek) {
        add_str(cmd, "FG.PEEK");
        add_str(cmd, fg_limit_family_word(l));
    } else {
        add_str(cmd, fg_limit_command(l));
    }
    add_key_and_limit(cmd, key, l);
    if (cost != 1) {
        add_str(cmd, "COST");
        add_num(cmd, FG_LIMIT_MAX_ARGS, cost);
    }
    add_clock(lim, cmd, now);
}

/* FG.REFUND FAMILY key args... COST units: gives back units of l at key. */
static void build_refund(const limits *lim, fg_command *cmd, const char *key, const fg_limit *l,
                         int64_t units, int64_t now) {
    cmd->argc = 0;
    add_str(cmd, "FG.REFUND");
    add_str(cmd, fg_limit_family_word(l));
    add_key_and_limit(cmd, key, l);
    add_str(cmd, "COST");
    add_num(cmd, FG_LIMIT_MAX_ARGS, units);
    add_clock(lim, cmd, now);
}

void fg_remote_limits_refund_command(void *s, const char *key, const fg_limit *l, int64_t units,
                                     int64_t now, fg_command *cmd) {
    build_refund(s, cmd, key, l, units, now);
}

static void build_key_command(fg_command *cmd, const char *name, const char *key) {
    cmd->argc = 0;
    cmd->key = key;
    cmd->keylen = strlen(key);
    add_str(cmd, name);
    add_str(cmd, key);
}

static fg_code unexpected(fg_error *err, const char *what) {
    return fg_set_error(err, FG_CODE_PROTOCOL, "unexpected reply to %s (module not loaded?)", what);
}

/* An integer of a reply: an integer reply, or its decimal text, which is
 * how a server script answers one above 2^53 (Lua's numbers are doubles):
 * as strict as the module's parsing (no sign but '-', no leading zero or
 * space, within int64). */
static bool reply_integer(const redisReply *r, long long *v) {
    if (r->type == REDIS_REPLY_INTEGER) {
        *v = r->integer;
        return true;
    }
    if (r->type != REDIS_REPLY_STRING || r->len < 1 || r->len > 20) return false;
    const char *s = r->str, *digits = s + (s[0] == '-');
    size_t ndigits = r->len - (size_t)(digits - s);
    if (ndigits < 1 || strspn(digits, "0123456789") != ndigits ||
        (digits[0] == '0' && (ndigits > 1 || digits != s)))
        return false;
    errno = 0;
    char *end;
    *v = strtoll(s, &end, 10);
    return errno == 0 && end == s + r->len;
}

/* The five integers of every FG.* check. */
static fg_code parse_decision(const redisReply *r, fg_result *out, fg_error *err) {
    long long v[5];
    if (r->type == REDIS_REPLY_ERROR) return fg_reply_error(r, err);
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 5) return unexpected(err, "a check");
    for (size_t i = 0; i < 5; i++)
        if (!reply_integer(r->element[i], &v[i])) return unexpected(err, "a check");
    if (v[0] != 0 && v[0] != 1) return unexpected(err, "a check");
    /* The module's durations fit 64-bit nanoseconds: anything larger is not
     * its reply, and would overflow the client's microsecond arithmetic. */
    if (v[3] < -1 || v[3] > MAX_REPLY_MS || v[4] < 0 || v[4] > MAX_REPLY_MS)
        return unexpected(err, "a check");
    out->allowed = v[0] == 1;
    out->limit = v[1];
    out->remaining = v[2];
    out->retry_after_ms = v[3];
    out->reset_after_ms = v[4];
    out->source = FG_SOURCE_SERVER;
    return FG_CODE_OK;
}

/* ------------------------------------------------------- failure policy */

/* The failure policy's fallback: the in-process table decides. */
static fg_code fallback(limits *lim, const char *key, const fg_limit *l, const fg_limiter *ml,
                        int64_t cost, bool peek, int64_t now, fg_result *out, fg_error *err) {
    fg_code rc = fg_backend_mem.limits->check(lim->fallback, key, l, ml, cost, peek, now, out, err);
    if (rc == FG_CODE_OK) out->source = FG_SOURCE_FALLBACK;
    return rc;
}

/* The answer the failure policy gives instead of FG_CODE_IO. */
static fg_code on_failure(limits *lim, const char *key, const fg_limit *l, const fg_limiter *ml,
                          int64_t cost, bool peek, int64_t now, fg_result *out, fg_error *err) {
    switch (lim->opts->on_failure) {
    case FG_ON_FAILURE_OPEN:
        *out = (fg_result){true, l->limit, l->limit, -1, 0, FG_SOURCE_FAILED_OPEN};
        return FG_CODE_OK;
    case FG_ON_FAILURE_CLOSED:
        *out = (fg_result){false,
                           l->limit,
                           0,
                           FG_FAILED_CLOSED_RETRY_MS,
                           FG_FAILED_CLOSED_RETRY_MS,
                           FG_SOURCE_FAILED_CLOSED};
        return FG_CODE_OK;
    case FG_ON_FAILURE_FALLBACK: return fallback(lim, key, l, ml, cost, peek, now, out, err);
    case FG_ON_FAILURE_ERROR: break;
    }
    return FG_CODE_IO; /* also for a value outside the enum */
}

/* ------------------------------------------------------------ decisions */

/* A check or peek in two halves (remote_limit.h), which the synchronous
 * path below and the asynchronous client share. */

void fg_remote_limits_command(void *s, fg_limit_call *c, fg_command *cmd) {
    limits *lim = s;
    build_check(lim, cmd, c->key, &c->limit, c->cost, c->peek, c->now);
    c->resets = cache_resets(lim);
}

fg_code fg_remote_limits_answer(void *s, const fg_limit_call *c, const redisReply *reply,
                                fg_result *out, fg_error *err) {
    limits *lim = s;
    if (reply == NULL)
        return on_failure(lim, c->key, &c->limit, &c->ml, c->cost, c->peek, c->now, out, err);
    fg_code rc = parse_decision(reply, out, err);
    if (rc == FG_CODE_OK && !c->peek)
        cache_store(lim, c->key, &c->limit, c->cost, c->now, out, c->resets);
    return rc;
}

bool fg_remote_limits_cached(void *s, const fg_limit_call *c, fg_result *out) {
    limits *lim = s;
    if (c->peek || !cache_lookup(lim, c->key, &c->limit, c->cost, c->now, out)) return false;
    fg_count(&lim->counters->denials_cached, 1);
    return true;
}

/* One check or peek sent to the server. */
static fg_code server_decide(limits *lim, fg_limit_call *c, fg_result *out, fg_error *err) {
    fg_command cmd;
    redisReply *reply;
    fg_code rc;
    fg_remote_limits_command(lim, c, &cmd);
    fg_remote_exchange(lim->remote, &cmd, 1, &reply, &rc, err);
    if (rc == FG_CODE_IO) return fg_remote_limits_answer(lim, c, NULL, out, err);
    if (rc != FG_CODE_OK) return rc;
    rc = fg_remote_limits_answer(lim, c, reply, out, err);
    freeReplyObject(reply);
    return rc;
}

/* ---------------------------------------------------------------- leases */

static int64_t lease_size(const limits *lim, const fg_limit *l) {
    return lim->opts->lease_units < l->limit ? lim->opts->lease_units : l->limit;
}

/* Leases need FG.REFUND, which the sliding families do not have (their
 * units cannot be placed back in time); cost 0 asks without taking, and a
 * cost above the lease could never be served from one. */
static bool leased(const limits *lim, const fg_limit *l, int64_t cost) {
    if (lim->leases == NULL || cost < 1 || cost > lease_size(lim, l)) return false;
    return l->algorithm == FG_TOKEN_BUCKET || l->algorithm == FG_LEAKY_BUCKET ||
           l->algorithm == FG_GCRA || l->algorithm == FG_FIXED_WINDOW;
}

/* A new lease serves until lease_ms from now, and a fixed window's until
 * its window ends: reset_after_ms is that end rounded up to the ms (and the
 * server read its clock after `now`), so one ms less is still inside it. */
static int64_t lease_expiry(const limits *lim, const fg_limit *l, int64_t now, int64_t reset_ms) {
    int64_t end = now + (int64_t)lim->opts->lease_ms * 1000;
    int64_t window_end = now + (reset_ms - 1) * 1000;
    return l->algorithm == FG_FIXED_WINDOW && window_end < end ? window_end : end;
}

/* Stale refunds would admit more than the limit. A bucket forgives all it
 * is owed once it is full again, and the server cannot tell units it
 * forgave from units still owed; a lease's debt cannot be forgiven before
 * the bucket refills it, size emission intervals after it was taken, so
 * only what cannot have refilled goes back. A fixed window's units go back
 * only within their window: later, the count is another window's.
 * REFUND_MARGIN_US covers the time the refund takes to reach the server. */
static int64_t refundable(const fg_lease *ls, int64_t now) {
    int64_t elapsed = now - ls->taken_us + REFUND_MARGIN_US;
    const fg_limit *l = &ls->limit;
    if (l->algorithm == FG_FIXED_WINDOW) return elapsed < (ls->reset_ms - 1) * 1000 ? ls->units : 0;
    double interval_us = l->algorithm == FG_GCRA ? l->window_ms * 1000 / l->rate : 1e6 / l->rate;
    int64_t owed = ls->size - 1 - (int64_t)(elapsed / interval_us);
    return owed < 0 ? 0 : owed < ls->units ? owed : ls->units;
}

/* Refunds of what can go back of leases[0..n) into cmds; returns how many. */
static size_t build_refunds(const limits *lim, fg_command *cmds, fg_lease *leases, size_t n,
                            int64_t now) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        leases[i].units = refundable(&leases[i], now);
        if (leases[i].units > 0)
            build_refund(lim, &cmds[k++], leases[i].key, &leases[i].limit, leases[i].units, now);
    }
    return k;
}

static void free_replies(redisReply **replies, const fg_code *codes, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (codes[i] == FG_CODE_OK) freeReplyObject(replies[i]);
}

/* One round trip: gives back the leases in old[] (best effort: their
 * replies are not needed), then asks for the key's new lease. */
static fg_code request_lease(limits *lim, const char *key, const fg_limit *l, fg_lease *old,
                             size_t nold, int64_t now, fg_result *out, fg_error *err) {
    fg_command cmds[FG_LEASE_RETURNS + 1];
    redisReply *replies[FG_LEASE_RETURNS + 1];
    fg_code codes[FG_LEASE_RETURNS + 1];
    nold = build_refunds(lim, cmds, old, nold, now);
    build_check(lim, &cmds[nold], key, l, lease_size(lim, l), false, now);
    fg_remote_exchange(lim->remote, cmds, nold + 1, replies, codes, err);
    free_replies(replies, codes, nold);
    fg_code rc = codes[nold];
    if (rc != FG_CODE_OK) return rc;
    rc = parse_decision(replies[nold], out, err);
    freeReplyObject(replies[nold]);
    return rc;
}

/* fg_check when leased(): from the key's lease, or with one round trip that
 * takes a new lease and serves the request from it; when the server denies
 * the lease, the plain check decides (a second round trip), and so it does
 * alone for the key's next checks during lease_ms (lease.c). */
static fg_code lease_decide(limits *lim, fg_limit_call *c, fg_result *out, fg_error *err) {
    const char *key = c->key;
    const fg_limit *l = &c->limit;
    int64_t cost = c->cost, now = c->now;
    fg_lease old[FG_LEASE_RETURNS];
    size_t nold, slot;
    switch (fg_lease_take(lim->leases, key, l, cost, now, out, old, &nold, &slot)) {
    case FG_LEASE_HIT: fg_count(&lim->counters->lease_hits, 1); return FG_CODE_OK;
    case FG_LEASE_PLAIN:
    case FG_LEASE_NONE: return server_decide(lim, c, out, err);
    case FG_LEASE_CLAIMED: break;
    }
    fg_result lease;
    fg_code rc = request_lease(lim, key, l, old, nold, now, &lease, err);
    fg_lease mine = {.limit = *l, .size = lease_size(lim, l), .taken_us = now};
    if (rc != FG_CODE_OK) {
        fg_lease_install(lim->leases, slot, key, &mine, 0);
        return rc == FG_CODE_IO ? fg_remote_limits_answer(lim, c, NULL, out, err) : rc;
    }
    if (!lease.allowed) {
        fg_lease_deny(lim->leases, slot, key, l, now + (int64_t)lim->opts->lease_ms * 1000);
        return server_decide(lim, c, out, err);
    }
    mine.units = mine.size - cost;
    mine.reset_ms = lease.reset_after_ms;
    fg_lease_install(lim->leases, slot, key, &mine,
                     lease_expiry(lim, l, now, lease.reset_after_ms));
    *out = lease;
    out->remaining += mine.units; /* this client's units count as remaining too */
    return FG_CODE_OK;
}

/* fg_close: every unused lease back to the server, in one exchange. */
static void give_back_leases(limits *lim) {
    struct {
        fg_lease leases[FG_LEASE_SLOTS];
        fg_command cmds[FG_LEASE_SLOTS];
        redisReply *replies[FG_LEASE_SLOTS];
        fg_code codes[FG_LEASE_SLOTS];
    } *b = malloc(sizeof(*b));
    if (b == NULL) return;
    size_t n = fg_lease_drain(lim->leases, b->leases);
    n = build_refunds(lim, b->cmds, b->leases, n,
                      fg_clock_us(lim->opts->clock_us, lim->opts->clock_arg));
    if (n > 0) {
        fg_remote_exchange(lim->remote, b->cmds, n, b->replies, b->codes, NULL);
        free_replies(b->replies, b->codes, n);
    }
    free(b);
}

/* ---------------------------------------------------------------- checks */

static fg_code check(void *s, const char *key, const fg_limit *l, const fg_limiter *ml,
                     int64_t cost, bool peek, int64_t now, fg_result *out, fg_error *err) {
    limits *lim = s;
    fg_limit_call c = {key, *l, *ml, cost, peek, now, 0};
    if (fg_remote_limits_cached(lim, &c, out)) return FG_CODE_OK;
    if (!peek && leased(lim, l, cost)) return lease_decide(lim, &c, out, err);
    return server_decide(lim, &c, out, err);
}

/* The answers of a batch sent to a server. A request without a reply is
 * answered by the failure policy when it was lost to I/O. The batch fails
 * (returns that code) only when no request could be answered at all, as a
 * single server's batch does when the server is down. */
static fg_code batch_answers(limits *lim, fg_request *reqs, size_t n, const fg_limiter *mls,
                             int64_t now, redisReply **replies, const fg_code *codes) {
    size_t k = 0, sent = 0, unanswered = 0;
    fg_code failure = FG_CODE_OK;
    for (size_t i = 0; i < n; i++) {
        fg_request *r = &reqs[i];
        if (r->code != FG_CODE_OK) continue;
        sent++;
        fg_code rc = codes[k];
        if (rc == FG_CODE_OK) {
            r->code = parse_decision(replies[k], &r->result, NULL);
            freeReplyObject(replies[k]);
        } else {
            r->code = rc == FG_CODE_IO ? on_failure(lim, r->key, r->limit, &mls[i], r->cost,
                                                    r->peek, now, &r->result, NULL)
                                       : rc;
            if (r->code == rc) {
                unanswered++;
                failure = rc;
            }
        }
        k++;
    }
    return unanswered == sent ? failure : FG_CODE_OK;
}

static fg_code batch(void *s, fg_request *reqs, size_t n, const fg_limiter *mls, size_t valid,
                     int64_t now, fg_error *err) {
    limits *lim = s;
    /* calloc: GCC cannot tell that every command gets built. */
    fg_command *cmds = calloc(valid, sizeof(*cmds));
    redisReply **replies = malloc(valid * sizeof(*replies));
    fg_code *codes = malloc(valid * sizeof(*codes));
    fg_code rc = FG_CODE_NOMEM;
    if (cmds == NULL || replies == NULL || codes == NULL) {
        fg_set_error(err, rc, "out of memory");
    } else {
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            if (reqs[i].code == FG_CODE_OK)
                build_check(lim, &cmds[k++], reqs[i].key, reqs[i].limit, reqs[i].cost, reqs[i].peek,
                            now);
        fg_remote_exchange(lim->remote, cmds, valid, replies, codes, err);
        rc = batch_answers(lim, reqs, n, mls, now, replies, codes);
    }
    free(cmds);
    free(replies);
    free(codes);
    return rc;
}

/* One key command to the server, its reply in *reply. */
static fg_code key_command(limits *lim, const char *name, const char *key, redisReply **reply,
                           fg_error *err) {
    fg_command cmd;
    fg_code rc;
    build_key_command(&cmd, name, key);
    fg_remote_exchange(lim->remote, &cmd, 1, reply, &rc, err);
    if (rc == FG_CODE_OK && (*reply)->type == REDIS_REPLY_ERROR) {
        rc = fg_reply_error(*reply, err);
        freeReplyObject(*reply);
    }
    return rc;
}

static bool append_scalar(fg_text *t, const redisReply *r) {
    if (r->type == REDIS_REPLY_INTEGER) {
        fg_text_number(t, r->integer);
    } else if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) {
        fg_text_append(t, r->str, r->len);
    } else {
        return false;
    }
    return true;
}

/* "name=value name=value ...", an array value as "a,b,c". */
static fg_code format_inspect(const redisReply *r, fg_text *t, fg_error *err) {
    if (r->elements % 2 != 0) return unexpected(err, "FG.INSPECT");
    for (size_t i = 0; i < r->elements; i += 2) {
        const redisReply *v = r->element[i + 1];
        if (i > 0) fg_text_append(t, " ", 1);
        if (!append_scalar(t, r->element[i])) return unexpected(err, "FG.INSPECT");
        fg_text_append(t, "=", 1);
        if (v->type != REDIS_REPLY_ARRAY) {
            if (!append_scalar(t, v)) return unexpected(err, "FG.INSPECT");
            continue;
        }
        for (size_t j = 0; j < v->elements; j++) {
            if (j > 0) fg_text_append(t, ",", 1);
            if (!append_scalar(t, v->element[j])) return unexpected(err, "FG.INSPECT");
        }
    }
    return FG_CODE_OK;
}

/* ---------------------------------------------------------- the calls */

static void limits_close(void *s) {
    limits *lim = s;
    if (lim->leases != NULL) give_back_leases(lim);
    fg_lease_table_free(lim->leases);
    free(lim->denials);
    if (lim->fallback != NULL) fg_backend_mem.limits->close(lim->fallback);
    pthread_mutex_destroy(&lim->cache_lock);
    free(lim);
}

static void *limits_open(const fg_backend_args *a) {
    limits *lim = calloc(1, sizeof(*lim));
    if (lim == NULL) return NULL;
    const fg_options *o = a->opts;
    lim->remote = a->shared;
    lim->opts = o;
    lim->counters = a->counters;
    pthread_mutex_init(&lim->cache_lock, NULL);
    if ((o->on_failure == FG_ON_FAILURE_FALLBACK &&
         (lim->fallback = fg_backend_mem.limits->open(a)) == NULL) ||
        (o->cache_denials && (lim->denials = calloc(DENIAL_SLOTS, sizeof(denial))) == NULL) ||
        (o->lease_units > 0 && o->lease_ms > 0 && (lim->leases = fg_lease_table_new()) == NULL)) {
        limits_close(lim);
        return NULL;
    }
    return lim;
}

static fg_code reset(void *s, const char *key, bool *existed, fg_error *err) {
    limits *lim = s;
    redisReply *r;
    bool ignored;
    /* The fallback table forgets the key too: its state is stale once the
     * server has been told to reset. */
    if (lim->fallback != NULL) fg_backend_mem.limits->reset(lim->fallback, key, &ignored, NULL);
    fg_code rc = key_command(lim, "FG.RESET", key, &r, err);
    /* After the server's reset: whatever a check in flight meanwhile
     * decided on the old state is not kept (see the reset counts). */
    cache_forget(lim, key);
    if (lim->leases != NULL) fg_lease_forget(lim->leases, key);
    if (rc != FG_CODE_OK) return rc;
    long long v;
    if (reply_integer(r, &v))
        *existed = v == 1;
    else
        rc = unexpected(err, "FG.RESET");
    freeReplyObject(r);
    return rc;
}

static fg_code inspect(void *s, const char *key, fg_text *t, fg_error *err) {
    redisReply *r;
    fg_code rc = key_command(s, "FG.INSPECT", key, &r, err);
    if (rc != FG_CODE_OK) return rc;
    if (r->type == REDIS_REPLY_ARRAY)
        rc = format_inspect(r, t, err);
    else if (r->type != REDIS_REPLY_NIL)
        rc = unexpected(err, "FG.INSPECT");
    freeReplyObject(r);
    return rc;
}

const fg_limit_ops fg_remote_limits = {limits_open, limits_close, check, batch, reset, inspect};
