/*
 * client.c - libfloodgate: one API (include/floodgate.h) over three backends.
 *
 * mem: decides in process with fg_mem_store, the same core and semantics as
 * the module. redis: sends one FG.* command per decision over a single hiredis
 * connection (conn.c); the connection is guarded by a mutex, because a
 * redisContext is not thread-safe and one connection keeps the order of a
 * caller's requests. redis+cluster: sends each command to the master of its
 * key's slot (cluster.c), under the same mutex.
 *
 * The path of a decision:
 *
 *   1. The limit and cost are validated and converted (limit_args.c) exactly as
 *      the module does, so bad input is FG_CODE_INVALID on every backend,
 *      without a round trip.
 *   2. On a server, the denial cache may answer a key denied earlier (opt-in),
 *      and a lease of the key may answer from units taken earlier (opt-in;
 *      lease.c): a miss gives back the old lease and asks for a new one in
 *      one round trip.
 *   3. The backend decides. On a server, any I/O failure (connect error,
 *      timeout, lost connection) closes the connection, and the failure
 *      policy turns FG_CODE_IO into an answer (open, closed, fallback to an
 *      in-process table) or leaves it as the error. The next call connects
 *      again: hiredis contexts are unusable after an error, so there is no
 *      attempt to recover one. A failed connect delays the next attempt by
 *      FG_RECONNECT_DELAY_MS, so that a dead server costs callers nothing
 *      more than a failed call in the meantime. A cluster follows redirects
 *      and failovers first, and only what stays unanswered goes to the policy.
 *
 * Locks, semaphores and their renewal are lock.c's: a client of one server
 * owns an fg_locks (client.h), and lends it the shared connection for calls
 * that do not wait in the server; a mem: client owns an in-process table
 * (mem_lock.c) that lock.c hands its calls to. redis+cluster: has neither.
 * Bloom filters are bloom.c's: a mem: client owns their table (mem_bloom.c),
 * and on a server they use exchange() like the checks. Unique counters are
 * distinct.c's, the same way (mem_distinct.c), and named policies policy.c's
 * (an fg_policies of every client: its loader, the mem: table, the
 * connections of waiting checks).
 *
 * Time is read once per call from opts.clock_us (default CLOCK_REALTIME). The
 * server uses its own clock unless opts.send_clock appends "AT <us>".
 * Counters are atomics, so fg_get_stats never waits for the connection.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend_mem.h"
#include "backend_remote.h"
#include "backends.h"
#include "client.h"
#include "cluster.h"
#include "conn.h"
#include "error.h"
#include "floodgate.h"
#include "lease.h"
#include "limit_args.h"
#include "mem_store.h"
#include "messages.h"
#include "remote.h"
#include "url.h"

#define SWEEP_EVERY      64 /* mem: decisions between two expiry sweeps */
#define SWEEP_ENTRIES    64 /* entries examined per sweep */
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

typedef enum backend { BACKEND_MEM, BACKEND_SERVER, BACKEND_CLUSTER } backend;

struct fg_client {
    fg_options opts;
    backend kind;
    fg_mem_store *store; /* mem:, or a server with FG_ON_FAILURE_FALLBACK */
    atomic_uint_fast64_t sweep_tick;
    fg_remote *remote; /* a server or a cluster: the way to it */

    pthread_mutex_t cache_lock;
    denial *denials; /* DENIAL_SLOTS, when opts.cache_denials on a server */
    /* Under cache_lock: keys forgotten (reset) so far. A denial decided
     * before a reset must not be cached after it. */
    uint64_t cache_resets;

    fg_lease_table *leases; /* when opts.lease_units on a server */

    const fg_backend *backend;
    void *shared;             /* what the backend's families share */
    void *state[FG_FAMILIES]; /* each family's, opened by the backend */
    fg_counters counters;
};

/* ------------------------------------------------------------ small parts */

const char *fg_code_name(fg_code code) {
    switch (code) {
    case FG_CODE_OK: return "ok";
    case FG_CODE_INVALID: return "invalid";
    case FG_CODE_WRONGTYPE: return "wrongtype";
    case FG_CODE_IO: return "io";
    case FG_CODE_PROTOCOL: return "protocol";
    case FG_CODE_SERVER: return "server";
    case FG_CODE_NOMEM: return "nomem";
    case FG_CODE_NOT_DURABLE: return "not_durable";
    case FG_CODE_UNSUPPORTED: return "unsupported";
    }
    return "unknown";
}

void fg_options_init(fg_options *opts) {
    memset(opts, 0, sizeof(*opts));
    opts->connect_timeout_ms = 1000;
    opts->command_timeout_ms = 1000;
    opts->on_failure = FG_ON_FAILURE_ERROR;
    opts->lease_ms = 100;
}

static int64_t now_us(const fg_client *c) {
    if (c->opts.clock_us) return c->opts.clock_us(c->opts.clock_arg);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* --------------------------------------------------------------- mem: path */

static fg_code mem_error(fg_mem_status st, fg_error *err) {
    switch (st) {
    case FG_MEM_WRONGTYPE: return fg_set_error(err, FG_CODE_WRONGTYPE, FG_ERR_WRONGTYPE);
    case FG_MEM_OVERFLOW: return fg_set_error(err, FG_CODE_INVALID, FG_ERR_OVERFLOW);
    case FG_MEM_NOMEM: return fg_set_error(err, FG_CODE_NOMEM, "out of memory");
    case FG_MEM_OK:
    case FG_MEM_INVALID: break;
    }
    return fg_set_error(err, FG_CODE_INVALID, FG_ERR_INVALID_LIMIT);
}

static void result_from_decision(const fg_decision *d, fg_source source, fg_result *out) {
    out->allowed = d->allowed;
    out->limit = d->limit;
    out->remaining = d->remaining;
    out->retry_after_ms = fg_ns_to_ms_ceil(d->retry_after_ns);
    out->reset_after_ms = fg_ns_to_ms_ceil(d->reset_after_ns);
    out->source = source;
}

/* Idle keys are dropped a few at a time, so that no call pays for a full
 * sweep and a table of one-off keys does not grow without bound. */
static void mem_maybe_sweep(fg_client *c, int64_t now) {
    uint64_t tick = atomic_fetch_add_explicit(&c->sweep_tick, 1, memory_order_relaxed);
    if (tick % SWEEP_EVERY == 0) fg_mem_expire(c->store, now, SWEEP_ENTRIES);
}

static fg_code mem_decide(fg_client *c, const char *key, const fg_mem_limit *ml, int64_t now,
                          int64_t cost, bool peek, fg_source source, fg_result *out,
                          fg_error *err) {
    fg_decision d;
    fg_mem_status st = fg_mem_check(c->store, key, strlen(key), ml, now, cost, peek, &d);
    mem_maybe_sweep(c, now);
    if (st != FG_MEM_OK) return mem_error(st, err);
    result_from_decision(&d, source, out);
    return FG_CODE_OK;
}

/* ---------------------------------------------------------- denial cache */

static size_t denial_slot(const char *key, size_t len) {
    return (size_t)(fg_key_hash(key, len) % DENIAL_SLOTS);
}

static bool same_limit(const fg_limit *a, const fg_limit *b) {
    return a->algorithm == b->algorithm && a->limit == b->limit && a->window_ms == b->window_ms &&
           a->rate == b->rate;
}

static bool cache_lookup(fg_client *c, const char *key, const fg_limit *l, int64_t cost,
                         int64_t now, fg_result *out) {
    size_t len = strlen(key);
    if (c->denials == NULL || len > DENIAL_KEY_MAX) return false;
    bool hit = false;
    pthread_mutex_lock(&c->cache_lock);
    denial *d = &c->denials[denial_slot(key, len)];
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
    pthread_mutex_unlock(&c->cache_lock);
    return hit;
}

/* Only denials with a retry time are remembered: -1 (never fits) depends on
 * the cost, and a smaller cost might fit. */
static void cache_store(fg_client *c, const char *key, const fg_limit *l, int64_t cost, int64_t now,
                        const fg_result *r, uint64_t resets_before) {
    size_t len = strlen(key);
    if (c->denials == NULL || len > DENIAL_KEY_MAX || r->allowed || r->retry_after_ms < 0) return;
    pthread_mutex_lock(&c->cache_lock);
    if (c->cache_resets != resets_before) {
        pthread_mutex_unlock(&c->cache_lock);
        return;
    }
    denial *d = &c->denials[denial_slot(key, len)];
    d->until_us = now + r->retry_after_ms * 1000;
    d->reset_at_us = now + r->reset_after_ms * 1000;
    d->limit = *l;
    d->cost = cost;
    d->units = r->limit;
    d->remaining = r->remaining;
    d->keylen = len;
    memcpy(d->key, key, len);
    pthread_mutex_unlock(&c->cache_lock);
}

/* The cache's reset count, read before a round trip whose denial may be
 * stored after it. */
static uint64_t cache_resets(fg_client *c) {
    if (c->denials == NULL) return 0;
    pthread_mutex_lock(&c->cache_lock);
    uint64_t n = c->cache_resets;
    pthread_mutex_unlock(&c->cache_lock);
    return n;
}

static void cache_forget(fg_client *c, const char *key) {
    size_t len = strlen(key);
    if (c->denials == NULL || len > DENIAL_KEY_MAX) return;
    pthread_mutex_lock(&c->cache_lock);
    c->cache_resets++;
    denial *d = &c->denials[denial_slot(key, len)];
    if (d->keylen == len && memcmp(d->key, key, len) == 0) d->until_us = 0;
    pthread_mutex_unlock(&c->cache_lock);
}

/* ------------------------------------------------------------ round trips */

static void exchange(fg_client *c, const fg_command *cmds, size_t n, redisReply **replies,
                     fg_code *codes, fg_error *err) {
    fg_remote_exchange(c->remote, cmds, n, replies, codes, err);
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
    int len = snprintf(cmd->nums[slot], FG_ARG_MAX, "%lld", (long long)v);
    add_arg(cmd, cmd->nums[slot], (size_t)len);
}

/* "AT <us>" last: the checks and FG.PEEK take it when the server allows
 * (FG.RESET and FG.INSPECT do not: they do not depend on the time). */
static void add_clock(const fg_client *c, fg_command *cmd, int64_t now) {
    if (!c->opts.send_clock) return;
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

static void build_check(const fg_client *c, fg_command *cmd, const char *key, const fg_limit *l,
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
    add_clock(c, cmd, now);
}

/* FG.REFUND FAMILY key args... COST units: gives back a lease's unused units. */
static void build_refund(const fg_client *c, fg_command *cmd, const fg_lease *lease, int64_t now) {
    cmd->argc = 0;
    add_str(cmd, "FG.REFUND");
    add_str(cmd, fg_limit_family_word(&lease->limit));
    add_key_and_limit(cmd, lease->key, &lease->limit);
    add_str(cmd, "COST");
    add_num(cmd, FG_LIMIT_MAX_ARGS, lease->units);
    add_clock(c, cmd, now);
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

/* The five integers of every FG.* check. */
static fg_code parse_decision(const redisReply *r, fg_result *out, fg_error *err) {
    if (r->type == REDIS_REPLY_ERROR) return fg_reply_error(r, err);
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 5) return unexpected(err, "a check");
    for (size_t i = 0; i < 5; i++)
        if (r->element[i]->type != REDIS_REPLY_INTEGER) return unexpected(err, "a check");
    long long allowed = r->element[0]->integer;
    if (allowed != 0 && allowed != 1) return unexpected(err, "a check");
    /* The module's durations fit 64-bit nanoseconds: anything larger is not
     * its reply, and would overflow the client's microsecond arithmetic. */
    long long retry = r->element[3]->integer, reset = r->element[4]->integer;
    if (retry < -1 || retry > MAX_REPLY_MS || reset < 0 || reset > MAX_REPLY_MS)
        return unexpected(err, "a check");
    out->allowed = allowed == 1;
    out->limit = r->element[1]->integer;
    out->remaining = r->element[2]->integer;
    out->retry_after_ms = r->element[3]->integer;
    out->reset_after_ms = r->element[4]->integer;
    out->source = FG_SOURCE_SERVER;
    return FG_CODE_OK;
}

/* ------------------------------------------------------- failure policy */

/* The answer the failure policy gives instead of FG_CODE_IO. */
static fg_code on_failure(fg_client *c, const char *key, const fg_limit *l, const fg_mem_limit *ml,
                          int64_t cost, bool peek, int64_t now, fg_result *out, fg_error *err) {
    switch (c->opts.on_failure) {
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
    case FG_ON_FAILURE_FALLBACK:
        return mem_decide(c, key, ml, now, cost, peek, FG_SOURCE_FALLBACK, out, err);
    case FG_ON_FAILURE_ERROR: break;
    }
    return FG_CODE_IO; /* also for a value outside the enum */
}

/* ------------------------------------------------------------ decisions */

/* One check or peek sent to the server. */
static fg_code server_decide(fg_client *c, const char *key, const fg_limit *l,
                             const fg_mem_limit *ml, int64_t cost, bool peek, int64_t now,
                             fg_result *out, fg_error *err) {
    fg_command cmd;
    redisReply *reply;
    fg_code rc;
    build_check(c, &cmd, key, l, cost, peek, now);
    uint64_t resets = cache_resets(c);
    exchange(c, &cmd, 1, &reply, &rc, err);
    if (rc == FG_CODE_IO) return on_failure(c, key, l, ml, cost, peek, now, out, err);
    if (rc != FG_CODE_OK) return rc;
    rc = parse_decision(reply, out, err);
    freeReplyObject(reply);
    if (rc == FG_CODE_OK && !peek) cache_store(c, key, l, cost, now, out, resets);
    return rc;
}

/* ---------------------------------------------------------------- leases */

static int64_t lease_size(const fg_client *c, const fg_limit *l) {
    return c->opts.lease_units < l->limit ? c->opts.lease_units : l->limit;
}

/* Leases need FG.REFUND, which the sliding families do not have (their
 * units cannot be placed back in time); cost 0 asks without taking, and a
 * cost above the lease could never be served from one. */
static bool leased(const fg_client *c, const fg_limit *l, int64_t cost) {
    if (c->leases == NULL || cost < 1 || cost > lease_size(c, l)) return false;
    return l->algorithm == FG_TOKEN_BUCKET || l->algorithm == FG_LEAKY_BUCKET ||
           l->algorithm == FG_GCRA || l->algorithm == FG_FIXED_WINDOW;
}

/* A new lease serves until lease_ms from now, and a fixed window's until
 * its window ends: reset_after_ms is that end rounded up to the ms (and the
 * server read its clock after `now`), so one ms less is still inside it. */
static int64_t lease_expiry(const fg_client *c, const fg_limit *l, int64_t now, int64_t reset_ms) {
    int64_t end = now + (int64_t)c->opts.lease_ms * 1000;
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
static size_t build_refunds(const fg_client *c, fg_command *cmds, fg_lease *leases, size_t n,
                            int64_t now) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        leases[i].units = refundable(&leases[i], now);
        if (leases[i].units > 0) build_refund(c, &cmds[k++], &leases[i], now);
    }
    return k;
}

static void free_replies(redisReply **replies, const fg_code *codes, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (codes[i] == FG_CODE_OK) freeReplyObject(replies[i]);
}

/* One round trip: gives back the leases in old[] (best effort: their
 * replies are not needed), then asks for the key's new lease. */
static fg_code request_lease(fg_client *c, const char *key, const fg_limit *l, fg_lease *old,
                             size_t nold, int64_t now, fg_result *out, fg_error *err) {
    fg_command cmds[FG_LEASE_RETURNS + 1];
    redisReply *replies[FG_LEASE_RETURNS + 1];
    fg_code codes[FG_LEASE_RETURNS + 1];
    nold = build_refunds(c, cmds, old, nold, now);
    build_check(c, &cmds[nold], key, l, lease_size(c, l), false, now);
    exchange(c, cmds, nold + 1, replies, codes, err);
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
static fg_code lease_decide(fg_client *c, const char *key, const fg_limit *l,
                            const fg_mem_limit *ml, int64_t cost, int64_t now, fg_result *out,
                            fg_error *err) {
    fg_lease old[FG_LEASE_RETURNS];
    size_t nold, slot;
    switch (fg_lease_take(c->leases, key, l, cost, now, out, old, &nold, &slot)) {
    case FG_LEASE_HIT: fg_count(&c->counters.lease_hits, 1); return FG_CODE_OK;
    case FG_LEASE_PLAIN:
    case FG_LEASE_NONE: return server_decide(c, key, l, ml, cost, false, now, out, err);
    case FG_LEASE_CLAIMED: break;
    }
    fg_result lease;
    fg_code rc = request_lease(c, key, l, old, nold, now, &lease, err);
    fg_lease mine = {.limit = *l, .size = lease_size(c, l), .taken_us = now};
    if (rc != FG_CODE_OK) {
        fg_lease_install(c->leases, slot, key, &mine, 0);
        return rc == FG_CODE_IO ? on_failure(c, key, l, ml, cost, false, now, out, err) : rc;
    }
    if (!lease.allowed) {
        fg_lease_deny(c->leases, slot, key, l, now + (int64_t)c->opts.lease_ms * 1000);
        return server_decide(c, key, l, ml, cost, false, now, out, err);
    }
    mine.units = mine.size - cost;
    mine.reset_ms = lease.reset_after_ms;
    fg_lease_install(c->leases, slot, key, &mine, lease_expiry(c, l, now, lease.reset_after_ms));
    *out = lease;
    out->remaining += mine.units; /* this client's units count as remaining too */
    return FG_CODE_OK;
}

/* fg_close: every unused lease back to the server, in one exchange. */
static void give_back_leases(fg_client *c) {
    struct {
        fg_lease leases[FG_LEASE_SLOTS];
        fg_command cmds[FG_LEASE_SLOTS];
        redisReply *replies[FG_LEASE_SLOTS];
        fg_code codes[FG_LEASE_SLOTS];
    } *b = malloc(sizeof(*b));
    if (b == NULL) return;
    size_t n = fg_lease_drain(c->leases, b->leases);
    n = build_refunds(c, b->cmds, b->leases, n, now_us(c));
    if (n > 0) {
        exchange(c, b->cmds, n, b->replies, b->codes, NULL);
        free_replies(b->replies, b->codes, n);
    }
    free(b);
}

/* ------------------------------------------------------------ decisions */

static fg_code redis_decide(fg_client *c, const char *key, const fg_limit *l,
                            const fg_mem_limit *ml, int64_t cost, bool peek, int64_t now,
                            fg_result *out, fg_error *err) {
    if (!peek && cache_lookup(c, key, l, cost, now, out)) {
        fg_count(&c->counters.denials_cached, 1);
        return FG_CODE_OK;
    }
    if (!peek && leased(c, l, cost)) return lease_decide(c, key, l, ml, cost, now, out, err);
    return server_decide(c, key, l, ml, cost, peek, now, out, err);
}

static fg_code decide(fg_client *c, const char *key, const fg_limit *l, int64_t cost, bool peek,
                      fg_result *out, fg_error *err) {
    fg_mem_limit ml;
    if (c == NULL || key == NULL || out == NULL)
        return fg_set_error(err, FG_CODE_INVALID, "client, key and result are required");
    if (fg_limit_convert(l, cost, &ml, err) != FG_CODE_OK) return FG_CODE_INVALID;
    int64_t now = now_us(c);
    fg_code rc = c->kind == BACKEND_MEM
                     ? mem_decide(c, key, &ml, now, cost, peek, FG_SOURCE_MEMORY, out, err)
                     : redis_decide(c, key, l, &ml, cost, peek, now, out, err);
    if (rc == FG_CODE_OK) fg_count(&c->counters.decisions, 1);
    return rc;
}

fg_code fg_check(fg_client *c, const char *key, const fg_limit *limit, int64_t cost, fg_result *out,
                 fg_error *err) {
    return decide(c, key, limit, cost, false, out, err);
}

fg_code fg_peek(fg_client *c, const char *key, const fg_limit *limit, int64_t cost, fg_result *out,
                fg_error *err) {
    return decide(c, key, limit, cost, true, out, err);
}

/* ----------------------------------------------------------------- batch */

/* Validates every request: an invalid one gets its code and is not sent. */
static size_t batch_validate(fg_request *reqs, size_t n, fg_mem_limit *mls) {
    size_t valid = 0;
    for (size_t i = 0; i < n; i++) {
        fg_request *r = &reqs[i];
        r->code =
            r->key == NULL ? FG_CODE_INVALID : fg_limit_convert(r->limit, r->cost, &mls[i], NULL);
        valid += r->code == FG_CODE_OK;
    }
    return valid;
}

static void batch_mem(fg_client *c, fg_request *reqs, size_t n, const fg_mem_limit *mls,
                      int64_t now) {
    for (size_t i = 0; i < n; i++)
        if (reqs[i].code == FG_CODE_OK)
            reqs[i].code = mem_decide(c, reqs[i].key, &mls[i], now, reqs[i].cost, reqs[i].peek,
                                      FG_SOURCE_MEMORY, &reqs[i].result, NULL);
}

/* The answers of a batch sent to a server. A request without a reply is
 * answered by the failure policy when it was lost to I/O. The batch fails
 * (returns that code) only when no request could be answered at all, as a
 * single server's batch does when the server is down. */
static fg_code batch_answers(fg_client *c, fg_request *reqs, size_t n, const fg_mem_limit *mls,
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
            r->code = rc == FG_CODE_IO ? on_failure(c, r->key, r->limit, &mls[i], r->cost, r->peek,
                                                    now, &r->result, NULL)
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

static fg_code batch_redis(fg_client *c, fg_request *reqs, size_t n, const fg_mem_limit *mls,
                           size_t valid, int64_t now, fg_error *err) {
    fg_command *cmds = malloc(valid * sizeof(*cmds));
    redisReply **replies = malloc(valid * sizeof(*replies));
    fg_code *codes = malloc(valid * sizeof(*codes));
    fg_code rc = FG_CODE_NOMEM;
    if (cmds == NULL || replies == NULL || codes == NULL) {
        fg_set_error(err, rc, "out of memory");
    } else {
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            if (reqs[i].code == FG_CODE_OK)
                build_check(c, &cmds[k++], reqs[i].key, reqs[i].limit, reqs[i].cost, reqs[i].peek,
                            now);
        exchange(c, cmds, valid, replies, codes, err);
        rc = batch_answers(c, reqs, n, mls, now, replies, codes);
    }
    free(cmds);
    free(replies);
    free(codes);
    return rc;
}

fg_code fg_check_batch(fg_client *c, fg_request *reqs, size_t n, fg_error *err) {
    if (c == NULL || (reqs == NULL && n > 0))
        return fg_set_error(err, FG_CODE_INVALID, "client and requests are required");
    if (n == 0) return FG_CODE_OK;
    fg_mem_limit *mls = malloc(n * sizeof(*mls));
    if (mls == NULL) return fg_set_error(err, FG_CODE_NOMEM, "out of memory");
    size_t valid = batch_validate(reqs, n, mls);
    int64_t now = now_us(c);
    fg_code rc = FG_CODE_OK;
    if (c->kind == BACKEND_MEM)
        batch_mem(c, reqs, n, mls, now);
    else if (valid > 0)
        rc = batch_redis(c, reqs, n, mls, valid, now, err);
    free(mls);
    for (size_t i = 0; i < n; i++)
        if (reqs[i].code == FG_CODE_OK) fg_count(&c->counters.decisions, 1);
    return rc;
}

/* ------------------------------------------------------ reset and inspect */

/* One key command to the server, its reply in *reply. */
static fg_code key_command(fg_client *c, const char *name, const char *key, redisReply **reply,
                           fg_error *err) {
    fg_command cmd;
    fg_code rc;
    build_key_command(&cmd, name, key);
    exchange(c, &cmd, 1, reply, &rc, err);
    if (rc == FG_CODE_OK && (*reply)->type == REDIS_REPLY_ERROR) {
        rc = fg_reply_error(*reply, err);
        freeReplyObject(*reply);
    }
    return rc;
}

fg_code fg_reset(fg_client *c, const char *key, bool *existed, fg_error *err) {
    if (c == NULL || key == NULL)
        return fg_set_error(err, FG_CODE_INVALID, "client and key are required");
    bool deleted = false;
    fg_code rc = FG_CODE_OK;
    /* The fallback table forgets the key too: its state is stale once the
     * server has been told to reset. */
    if (c->store != NULL) deleted = fg_mem_reset(c->store, key, strlen(key), now_us(c));
    void *ps;
    const fg_policy_ops *pol = fg_client_family(c, FG_FAMILY_POLICIES, &ps, NULL);
    if (pol != NULL && pol->forget(ps, key)) deleted = true;
    if (c->kind != BACKEND_MEM) {
        redisReply *r;
        rc = key_command(c, "FG.RESET", key, &r, err);
        /* After the server's reset: whatever a check in flight meanwhile
         * decided on the old state is not kept (see the reset counts). */
        cache_forget(c, key);
        if (c->leases != NULL) fg_lease_forget(c->leases, key);
        if (rc != FG_CODE_OK) return rc;
        if (r->type == REDIS_REPLY_INTEGER)
            deleted = r->integer == 1;
        else
            rc = unexpected(err, "FG.RESET");
        freeReplyObject(r);
    }
    if (rc == FG_CODE_OK && existed != NULL) *existed = deleted;
    return rc;
}

typedef struct text {
    char *buf;
    size_t len, cap;
    bool truncated;
} text;

static void append(text *t, const char *s, size_t len) {
    if (t->len + len >= t->cap) {
        t->truncated = true;
        return;
    }
    memcpy(t->buf + t->len, s, len);
    t->len += len;
    t->buf[t->len] = '\0';
}

static bool append_scalar(text *t, const redisReply *r) {
    char num[24];
    if (r->type == REDIS_REPLY_INTEGER) {
        int n = snprintf(num, sizeof(num), "%lld", r->integer);
        append(t, num, (size_t)n);
    } else if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) {
        append(t, r->str, r->len);
    } else {
        return false;
    }
    return true;
}

/* "name=value name=value ...", an array value as "a,b,c". */
static fg_code format_inspect(const redisReply *r, text *t, fg_error *err) {
    if (r->elements % 2 != 0) return unexpected(err, "FG.INSPECT");
    for (size_t i = 0; i < r->elements; i += 2) {
        const redisReply *v = r->element[i + 1];
        if (i > 0) append(t, " ", 1);
        if (!append_scalar(t, r->element[i])) return unexpected(err, "FG.INSPECT");
        append(t, "=", 1);
        if (v->type != REDIS_REPLY_ARRAY) {
            if (!append_scalar(t, v)) return unexpected(err, "FG.INSPECT");
            continue;
        }
        for (size_t j = 0; j < v->elements; j++) {
            if (j > 0) append(t, ",", 1);
            if (!append_scalar(t, v->element[j])) return unexpected(err, "FG.INSPECT");
        }
    }
    if (t->truncated) return fg_set_error(err, FG_CODE_INVALID, "fg_inspect: buffer too small");
    return FG_CODE_OK;
}

/* A sliding log's entries as runs "ts,count,...", as the server shows them;
 * only a log calls back, so the first entry also writes the log's type. */
typedef struct run_text {
    text *t;
    int64_t ts, count;
} run_text;

static void append_number(text *t, int64_t v) {
    char num[24];
    int n = snprintf(num, sizeof(num), "%lld", (long long)v);
    append(t, num, (size_t)n);
}

static void flush_run(run_text *r) {
    if (r->count == 0) return;
    append_number(r->t, r->ts);
    append(r->t, ",", 1);
    append_number(r->t, r->count);
}

static void add_log_entry(int64_t ts, void *arg) {
    run_text *r = arg;
    if (r->count > 0 && ts == r->ts) {
        r->count++;
        return;
    }
    if (r->count == 0)
        append(r->t, "slidelog entries=", 17);
    else {
        flush_run(r);
        append(r->t, ",", 1);
    }
    r->ts = ts;
    r->count = 1;
}

static void append_field(text *t, const char *name, int64_t value) {
    append(t, " ", 1);
    append(t, name, strlen(name));
    append(t, "=", 1);
    append_number(t, value);
}

/* The in-process state, in the text fg_inspect gives for a server. */
static void inspect_memory(fg_client *c, const char *key, text *t) {
    int64_t now = now_us(c);
    fg_mem_view v;
    run_text runs = {t, 0, 0};
    append(t, "type=", 5);
    if (!fg_mem_inspect(c->store, key, strlen(key), now, &v, add_log_entry, &runs)) {
        t->len = 0;
        t->buf[0] = '\0';
        t->truncated = false; /* no state is "", whatever the buffer's size */
        return;
    }
    if (v.family == FG_MEM_BUCKET) {
        append(t, "bucket", 6);
        append_field(t, "tat_ns", v.state.tat_ns);
    } else if (v.family == FG_MEM_FIXED) {
        append(t, "fixed", 5);
        append_field(t, "window_start_us", v.state.fixed.window_start_us);
        append_field(t, "count", v.state.fixed.count);
    } else if (v.family == FG_MEM_SLIDING) {
        append(t, "sliding", 7);
        append_field(t, "window_start_us", v.state.sliding.window_start_us);
        append_field(t, "count", v.state.sliding.count);
        append_field(t, "prev_count", v.state.sliding.prev_count);
    } else {
        flush_run(&runs);
    }
    append_field(t, "pttl", (v.expires_us - now + 999) / 1000);
}

fg_code fg_inspect(fg_client *c, const char *key, char *buf, size_t buflen, fg_error *err) {
    if (c == NULL || key == NULL || buf == NULL || buflen == 0)
        return fg_set_error(err, FG_CODE_INVALID, "client, key and buffer are required");
    buf[0] = '\0';
    if (c->kind == BACKEND_MEM) {
        text t = {buf, 0, buflen, false};
        inspect_memory(c, key, &t);
        if (!t.truncated) return FG_CODE_OK;
        buf[0] = '\0';
        return fg_set_error(err, FG_CODE_INVALID, "fg_inspect: buffer too small");
    }
    redisReply *r;
    fg_code rc = key_command(c, "FG.INSPECT", key, &r, err);
    if (rc != FG_CODE_OK) return rc;
    text t = {buf, 0, buflen, false};
    if (r->type == REDIS_REPLY_ARRAY)
        rc = format_inspect(r, &t, err);
    else if (r->type != REDIS_REPLY_NIL)
        rc = unexpected(err, "FG.INSPECT");
    freeReplyObject(r);
    if (rc != FG_CODE_OK) buf[0] = '\0';
    return rc;
}

/* ------------------------------------------------------------- lifecycle */

static fg_client *client_new(backend kind, const fg_options *opts) {
    fg_client *c = calloc(1, sizeof(*c));
    if (c == NULL) return NULL;
    c->kind = kind;
    if (opts)
        c->opts = *opts;
    else
        fg_options_init(&c->opts);
    bool needs_store = kind == BACKEND_MEM || c->opts.on_failure == FG_ON_FAILURE_FALLBACK;
    bool needs_cache = kind != BACKEND_MEM && c->opts.cache_denials;
    bool needs_leases = kind != BACKEND_MEM && c->opts.lease_units > 0 && c->opts.lease_ms > 0;
    if ((needs_store && (c->store = fg_mem_store_new(0)) == NULL) ||
        (needs_cache && (c->denials = calloc(DENIAL_SLOTS, sizeof(denial))) == NULL) ||
        (needs_leases && (c->leases = fg_lease_table_new()) == NULL)) {
        fg_mem_store_free(c->store);
        free(c->denials);
        free(c);
        return NULL;
    }
    pthread_mutex_init(&c->cache_lock, NULL);
    return c;
}

/* Family f of a backend: its table, and the open and close every table
 * starts with; all NULL when the backend has none. */
typedef struct family {
    const void *table;
    void *(*open)(const fg_backend_args *a);
    void (*close)(void *s);
} family;

#define FAMILY(t) ((t) != NULL ? (family){(t), (t)->open, (t)->close} : (family){NULL, NULL, NULL})

static family family_of(const fg_backend *b, fg_family f) {
    switch (f) {
    case FG_FAMILY_BLOOM: return FAMILY(b->bloom);
    case FG_FAMILY_DISTINCT: return FAMILY(b->distinct);
    case FG_FAMILY_LOCKS: return FAMILY(b->locks);
    case FG_FAMILY_POLICIES: return FAMILY(b->policies);
    case FG_FAMILY_LIMITS:
    case FG_FAMILIES: break;
    }
    return (family){NULL, NULL, NULL};
}

/* The backend's shared part, then each family's state, in order. */
static fg_code open_states(fg_client *c, const char *url, fg_error *err) {
    const fg_shared_ops *shared = c->backend->shared;
    fg_backend_args a = {url, &c->opts, &c->counters, NULL};
    if (shared != NULL && (c->shared = shared->open(&a, err)) == NULL)
        return err != NULL ? err->code : FG_CODE_NOMEM;
    a.shared = c->shared;
    for (int f = 0; f < FG_FAMILIES; f++) {
        family fam = family_of(c->backend, (fg_family)f);
        if (fam.table != NULL && (c->state[f] = fam.open(&a)) == NULL)
            return fg_set_error(err, FG_CODE_NOMEM, "out of memory");
    }
    return FG_CODE_OK;
}

/* The client of a URL, not connected yet. */
static fg_client *client_for(const char *url, const fg_options *opts, fg_error *err) {
    const fg_backend *b = fg_backend_for(url, err);
    if (b == NULL) return NULL;
    backend kind = b == &fg_backend_cluster ? BACKEND_CLUSTER
                   : b == &fg_backend_mem   ? BACKEND_MEM
                                            : BACKEND_SERVER;
    fg_client *c = client_new(kind, opts);
    if (c == NULL) {
        fg_set_error(err, FG_CODE_NOMEM, "out of memory");
        return NULL;
    }
    c->backend = b;
    if (open_states(c, url, err) != FG_CODE_OK) {
        fg_close(c);
        return NULL;
    }
    c->remote = c->shared;
    return c;
}

fg_client *fg_open(const char *url, const fg_options *opts, fg_error *err) {
    fg_client *c = client_for(url, opts, err);
    if (c == NULL || c->kind == BACKEND_MEM) return c;
    /* An unreachable server is not fatal: the client connects again on its
     * next call. A server that refuses AUTH or SELECT, or a cluster node
     * without cluster support, is a configuration error, reported now. */
    if (fg_remote_connect(c->remote, err) != FG_CODE_OK) {
        fg_close(c);
        return NULL;
    }
    return c;
}

void fg_close(fg_client *c) {
    if (c == NULL) return;
    if (c->leases != NULL) give_back_leases(c);
    fg_lease_table_free(c->leases);
    for (int f = FG_FAMILIES - 1; f >= 0; f--) {
        family fam = family_of(c->backend, (fg_family)f);
        if (c->state[f] != NULL) fam.close(c->state[f]);
    }
    if (c->shared != NULL) c->backend->shared->close(c->shared);
    fg_mem_store_free(c->store);
    free(c->denials);
    pthread_mutex_destroy(&c->cache_lock);
    free(c);
}

void fg_get_stats(fg_client *c, fg_stats *out) {
    out->decisions = atomic_load(&c->counters.decisions);
    out->round_trips = atomic_load(&c->counters.net.round_trips);
    out->denials_cached = atomic_load(&c->counters.denials_cached);
    out->failures = atomic_load(&c->counters.net.failures);
    out->reconnects = atomic_load(&c->counters.net.reconnects);
    out->lease_hits = atomic_load(&c->counters.lease_hits);
}

/* --------------------------------------------------------------- families */

const void *fg_client_family(fg_client *c, fg_family f, void **state, fg_error *err) {
    const void *table = family_of(c->backend, f).table;
    if (table == NULL) {
        fg_set_error(err, FG_CODE_UNSUPPORTED, "%s", c->backend->without[f]);
        return NULL;
    }
    *state = c->state[f];
    return table;
}
