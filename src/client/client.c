/*
 * client.c - libfloodgate: one API (include/floodgate.h) over its backends,
 * and the rate limits' calls.
 *
 * A client is a backend (backend.h), picked by the URL (backends.c), and a
 * state per family of calls, which the backend opens at fg_open and closes
 * at fg_close:
 *
 *   mem:                 in process (backend_mem.c): the same core and
 *                        semantics as the module, in tables of the client's
 *                        own (mem_*.c).
 *   redis:, unix:        the module's commands on one server, over a single
 *                        connection that the families share (remote.c), and
 *                        connections of their own for calls that wait in
 *                        the server (backend_remote.c, remote_*.c).
 *   redis+cluster:       the same, each command to the master of its key's
 *                        slot (cluster.c); no locks.
 *
 * The family files (client.c for the rate limits, bloom.c, distinct.c,
 * lock.c, policy.c) check what a call is given the same way on every
 * backend, then call through the backend's table of their family
 * (fg_client_family); none knows which backend it is. For a rate limit:
 *
 *   1. The limit and cost are validated and converted (limit_args.c)
 *      exactly as the module does, so bad input is FG_CODE_INVALID on every
 *      backend, without a round trip.
 *   2. The backend decides: mem: in its store; a server after its denial
 *      cache and leases, with the failure policy for an I/O failure
 *      (remote_limit.c).
 *
 * fg_reset forgets a key's rate limit, or its policy state (on a server,
 * FG.RESET deletes either). Time is read once per call from opts.clock_us
 * (default CLOCK_REALTIME). Counters are atomics, so fg_get_stats never
 * waits for a connection.
 */
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "backends.h"
#include "client.h"
#include "error.h"
#include "floodgate.h"
#include "limit_args.h"
#include "monotonic.h"
#include "request_key.h"

struct fg_client {
    fg_options opts;
    const fg_backend *backend;
    void *shared; /* what the backend's families share */
    /* Each family's table in the backend and the client's state of it,
     * opened by the backend (no state: the backend has no such family). */
    fg_family_ref family[FG_FAMILIES];
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

/* The client's clock: read once per call. */
static int64_t now_us(const fg_client *c) {
    return fg_clock_us(c->opts.clock_us, c->opts.clock_arg);
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

/* Family f of a backend: its table, and the open and close every table
 * starts with (FG_FAMILY_STATE); open is NULL when the backend has none. */
typedef struct family {
    fg_family_ref ref; /* the table, no state yet */
    void *(*open)(const fg_backend_args *a);
    void (*close)(void *s);
} family;

#define NO_FAMILY    ((family){{{NULL}, NULL}, NULL, NULL})
#define FAMILY(m, t) ((t) != NULL ? (family){{{.m = (t)}, NULL}, (t)->open, (t)->close} : NO_FAMILY)

static family family_of(const fg_backend *b, fg_family f) {
    switch (f) {
    case FG_FAMILY_LIMITS: return FAMILY(limits, b->limits);
    case FG_FAMILY_BLOOM: return FAMILY(bloom, b->bloom);
    case FG_FAMILY_DISTINCT: return FAMILY(distinct, b->distinct);
    case FG_FAMILY_LOCKS: return FAMILY(locks, b->locks);
    case FG_FAMILY_POLICIES: return FAMILY(policies, b->policies);
    case FG_FAMILIES: break;
    }
    return NO_FAMILY;
}

fg_code fg_client_family(fg_client *c, fg_family f, fg_family_ref *out, fg_error *err) {
    *out = c->family[f]; /* always set: no caller reads an uninitialized ref */
    if (out->s == NULL)
        return fg_set_error(err, FG_CODE_UNSUPPORTED, "%s", c->backend->without[f]);
    return FG_CODE_OK;
}

/* ------------------------------------------------------------- lifecycle */

/* The backend's shared part, then each family's state, in order. */
static fg_code open_states(fg_client *c, const char *url, fg_error *err) {
    const fg_shared_ops *shared = c->backend->shared;
    fg_backend_args a = {url, &c->opts, &c->counters, NULL};
    if (shared != NULL && (c->shared = shared->open(&a, err)) == NULL)
        return err != NULL ? err->code : FG_CODE_NOMEM;
    a.shared = c->shared;
    for (int f = 0; f < FG_FAMILIES; f++) {
        family fam = family_of(c->backend, (fg_family)f);
        if (fam.open == NULL) continue;
        c->family[f] = fam.ref;
        if ((c->family[f].s = fam.open(&a)) == NULL)
            return fg_set_error(err, FG_CODE_NOMEM, "out of memory");
    }
    /* A server that cannot be reached is no error: the client connects
     * again on its next call. A configuration error is reported now. */
    return shared != NULL ? shared->connect(c->shared, err) : FG_CODE_OK;
}

void fg_close(fg_client *c) {
    if (c == NULL) return;
    for (int f = FG_FAMILIES - 1; f >= 0; f--)
        if (c->family[f].s != NULL) family_of(c->backend, (fg_family)f).close(c->family[f].s);
    if (c->shared != NULL) c->backend->shared->close(c->shared);
    free(c);
}

fg_client *fg_open(const char *url, const fg_options *opts, fg_error *err) {
    const fg_backend *b = fg_backend_for(url, err);
    if (b == NULL) return NULL;
    fg_client *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        fg_set_error(err, FG_CODE_NOMEM, "out of memory");
        return NULL;
    }
    c->backend = b;
    if (opts)
        c->opts = *opts;
    else
        fg_options_init(&c->opts);
    if (open_states(c, url, err) != FG_CODE_OK) {
        fg_close(c);
        return NULL;
    }
    return c;
}

/* ------------------------------------------------------------ rate limits */

static fg_code decide(fg_client *c, const char *key, const fg_limit *l, int64_t cost, bool peek,
                      fg_result *out, fg_error *err) {
    fg_limiter ml;
    fg_family_ref lim;
    if (c == NULL || key == NULL || out == NULL)
        return fg_set_error(err, FG_CODE_INVALID, "client, key and result are required");
    if (fg_limit_convert(l, cost, &ml, err) != FG_CODE_OK) return FG_CODE_INVALID;
    fg_code rc = fg_client_family(c, FG_FAMILY_LIMITS, &lim, err);
    if (rc != FG_CODE_OK) return rc;
    rc = lim.ops.limits->check(lim.s, key, l, &ml, cost, peek, now_us(c), out, err);
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

/* Validates every request: an invalid one gets its code and is not sent. */
static size_t batch_validate(fg_request *reqs, size_t n, fg_limiter *mls) {
    size_t valid = 0;
    for (size_t i = 0; i < n; i++) {
        fg_request *r = &reqs[i];
        r->code =
            r->key == NULL ? FG_CODE_INVALID : fg_limit_convert(r->limit, r->cost, &mls[i], NULL);
        valid += r->code == FG_CODE_OK;
    }
    return valid;
}

fg_code fg_check_batch(fg_client *c, fg_request *reqs, size_t n, fg_error *err) {
    fg_family_ref lim;
    if (c == NULL || (reqs == NULL && n > 0))
        return fg_set_error(err, FG_CODE_INVALID, "client and requests are required");
    if (n == 0) return FG_CODE_OK;
    fg_limiter *mls = malloc(n * sizeof(*mls));
    if (mls == NULL) return fg_set_error(err, FG_CODE_NOMEM, "out of memory");
    size_t valid = batch_validate(reqs, n, mls);
    int64_t now = now_us(c);
    fg_code rc = valid > 0 ? fg_client_family(c, FG_FAMILY_LIMITS, &lim, err) : FG_CODE_OK;
    if (valid > 0 && rc == FG_CODE_OK)
        rc = lim.ops.limits->batch(lim.s, reqs, n, mls, valid, now, err);
    free(mls);
    for (size_t i = 0; i < n; i++)
        if (reqs[i].code == FG_CODE_OK) fg_count(&c->counters.decisions, 1);
    return rc;
}

fg_code fg_reset(fg_client *c, const char *key, bool *existed, fg_error *err) {
    fg_family_ref lim;
    fg_family_ref policies;
    if (c == NULL || key == NULL)
        return fg_set_error(err, FG_CODE_INVALID, "client and key are required");
    bool deleted = false;
    fg_code rc = fg_client_family(c, FG_FAMILY_LIMITS, &lim, err);
    if (rc == FG_CODE_OK) rc = lim.ops.limits->reset(lim.s, key, &deleted, err);
    if (rc != FG_CODE_OK) return rc;
    /* The key may hold a policy's state instead. */
    if (fg_client_family(c, FG_FAMILY_POLICIES, &policies, NULL) == FG_CODE_OK &&
        policies.ops.policies->forget(policies.s, key))
        deleted = true;
    if (existed != NULL) *existed = deleted;
    return FG_CODE_OK;
}

fg_code fg_inspect(fg_client *c, const char *key, char *buf, size_t buflen, fg_error *err) {
    fg_family_ref lim;
    if (c == NULL || key == NULL || buf == NULL || buflen == 0)
        return fg_set_error(err, FG_CODE_INVALID, "client, key and buffer are required");
    buf[0] = '\0';
    fg_text t = {buf, 0, buflen, false};
    fg_code rc = fg_client_family(c, FG_FAMILY_LIMITS, &lim, err);
    if (rc == FG_CODE_OK) rc = lim.ops.limits->inspect(lim.s, key, &t, err);
    if (rc == FG_CODE_OK && t.truncated)
        rc = fg_set_error(err, FG_CODE_INVALID, "fg_inspect: buffer too small");
    if (rc != FG_CODE_OK) buf[0] = '\0';
    return rc;
}

size_t fg_request_key(char *out, size_t size, const char *kind, const char *name,
                      const void *value, size_t len) {
    size_t kind_len = strlen(kind), name_len = strlen(name);
    if (!fg_request_key_name_ok(kind, kind_len) || !fg_request_key_name_ok(name, name_len))
        return 0;
    size_t key_len = fg_request_key_length(kind_len, name_len, value, len);
    if (key_len < size) fg_request_key_write(out, kind, kind_len, name, name_len, value, len);
    return key_len;
}
