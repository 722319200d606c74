/*
 * floodgate.h - the floodgate client library (libfloodgate).
 *
 * One API over two backends that run the same algorithms:
 *
 *   redis://[user:password@]host[:port][/db]   the floodgate Redis module
 *   unix:///path/to/redis.sock[?db=N]          the same, over a unix socket
 *   redis+cluster://[user:password@]host:port[,host:port...]
 *                                              the same, on a Redis Cluster
 *   mem:                                       in process, no server (default)
 *
 * A program can start on mem: and move to a server by changing the URL.
 *
 * A server without the module runs the rate limits as server scripts that
 * the library sends (EVALSHA), with the same answers: each connection asks
 * whether the module is loaded, unless the URL says, with ?backend=auto
 * (the default), module or script (unix: "?db=1&backend=script"; on a
 * cluster, for every node). docs/client.md, "Servers without the module".
 *
 * A cluster URL names seed nodes: any one that answers gives the slot map,
 * and each command then goes to the master of its key's slot (hash tags
 * honoured, so "{user1}.a" and "{user1}.b" live on one node). Redirects
 * (MOVED, ASK) during a resharding and failovers are followed by the
 * library; fg_check_batch costs one round trip per node involved. A plain
 * redis:// URL never speaks cluster, even to a cluster node.
 *
 * Handles are opaque. Every call that can fail returns an fg_code and, when
 * given an fg_error, fills it with the code and a message; nothing is kept in
 * global state.
 *
 * Thread safety: one fg_client may be used by many threads at once; every
 * call taking an fg_client is thread-safe, except fg_close, which must be the
 * last call on it. (mem: locks shards of its table; redis: and
 * redis+cluster: serialize the use of their connections.)
 */
#ifndef FLOODGATE_H
#define FLOODGATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FLOODGATE_VERSION_MAJOR 0
#define FLOODGATE_VERSION_MINOR 1
#define FLOODGATE_VERSION_PATCH 0
#define FLOODGATE_VERSION "0.1.0"

typedef struct fg_client fg_client;

/* ------------------------------------------------------------------ errors */

typedef enum fg_code {
    FG_CODE_OK = 0,
    FG_CODE_INVALID,   /* an argument out of range (the server's ERR for bad input) */
    FG_CODE_WRONGTYPE, /* the key holds another kind of state */
    FG_CODE_IO,        /* the server cannot be reached, timed out, or dropped the connection */
    FG_CODE_PROTOCOL,  /* a reply the library did not expect (module missing?) */
    FG_CODE_SERVER,    /* any other error reply from the server */
    FG_CODE_NOMEM,
    FG_CODE_NOT_DURABLE, /* a grant reached fewer replicas than asked; it was released */
    FG_CODE_UNSUPPORTED, /* the backend cannot do this (a lock on a cluster URL, ...) */
} fg_code;

typedef struct fg_error {
    fg_code code;
    char message[256];
} fg_error;

/* A short English name of a code ("io", "wrongtype", ...). */
const char *fg_code_name(fg_code code);

/* ------------------------------------------------------------------ limits */

typedef enum fg_algorithm {
    FG_FIXED_WINDOW,   /* limit per clock-aligned window */
    FG_SLIDING_WINDOW, /* limit per sliding window, estimated from two counters */
    FG_SLIDING_LOG,    /* limit per sliding window, exact (limit <= 100000) */
    FG_TOKEN_BUCKET,   /* capacity tokens, refilled at rate per second */
    FG_LEAKY_BUCKET,   /* capacity units, leaking at rate per second */
    FG_GCRA,           /* rate units per period_ms, at most capacity at once */
} fg_algorithm;

/* A limit, as the module's commands take it (docs/commands.md). */
typedef struct fg_limit {
    fg_algorithm algorithm;
    int64_t limit;    /* limit per window, or the bucket's capacity */
    double window_ms; /* windows: the window; GCRA: the period */
    double rate;      /* token/leaky: units per second; GCRA: units per period */
} fg_limit;

static inline fg_limit fg_fixed_window(int64_t limit, double window_ms) {
    fg_limit l = {FG_FIXED_WINDOW, limit, window_ms, 0};
    return l;
}
static inline fg_limit fg_sliding_window(int64_t limit, double window_ms) {
    fg_limit l = {FG_SLIDING_WINDOW, limit, window_ms, 0};
    return l;
}
static inline fg_limit fg_sliding_log(int64_t limit, double window_ms) {
    fg_limit l = {FG_SLIDING_LOG, limit, window_ms, 0};
    return l;
}
static inline fg_limit fg_token_bucket(int64_t capacity, double refill_per_sec) {
    fg_limit l = {FG_TOKEN_BUCKET, capacity, 0, refill_per_sec};
    return l;
}
static inline fg_limit fg_leaky_bucket(int64_t capacity, double leak_per_sec) {
    fg_limit l = {FG_LEAKY_BUCKET, capacity, 0, leak_per_sec};
    return l;
}
static inline fg_limit fg_gcra(int64_t capacity, double count, double period_ms) {
    fg_limit l = {FG_GCRA, capacity, period_ms, count};
    return l;
}

/* ----------------------------------------------------------------- results */

/* Who decided. */
typedef enum fg_source {
    FG_SOURCE_SERVER,        /* the Redis module */
    FG_SOURCE_MEMORY,        /* the in-process table (mem:) */
    FG_SOURCE_DENIAL_CACHE,  /* a denial remembered until its retry time: no round trip */
    FG_SOURCE_FAILED_OPEN,   /* server unreachable: allowed, by the failure policy */
    FG_SOURCE_FAILED_CLOSED, /* server unreachable: denied, by the failure policy */
    FG_SOURCE_FALLBACK,      /* server unreachable: decided by the in-process table */
    FG_SOURCE_LEASE,         /* units of this client's lease: no round trip (lease_units) */
} fg_source;

typedef struct fg_result {
    bool allowed;
    int64_t limit;          /* capacity in units */
    int64_t remaining;      /* units left after this request */
    int64_t retry_after_ms; /* when denied: wait this long; -1 when allowed or never possible */
    int64_t reset_after_ms; /* until the key is back to full capacity */
    fg_source source;
} fg_result;

/* ----------------------------------------------------------------- clients */

/* What fg_check, fg_peek and fg_check_batch answer when the server cannot be
 * reached (connect error, timeout, lost connection). fg_reset and fg_inspect
 * always return FG_CODE_IO then.
 *
 *   OPEN:     allowed, limit = remaining = the request's limit, retry -1, reset 0.
 *   CLOSED:   denied, limit = the request's limit, remaining 0, retry and reset
 *             FG_FAILED_CLOSED_RETRY_MS.
 *   FALLBACK: an in-process table of this client decides (as mem: would); its
 *             state starts empty and is not merged back into the server.
 *
 * On a cluster, a node is unreachable when it cannot be reached and the map
 * names no other owner for its slots, or the cluster stays down (CLUSTERDOWN)
 * through the library's few retries.
 *
 * An unreachable server does not make fg_open fail: the client connects again
 * at its next call (after a failed connect, not sooner than 100 ms later). */
typedef enum fg_failure_policy {
    FG_ON_FAILURE_ERROR,    /* return FG_CODE_IO (the default) */
    FG_ON_FAILURE_OPEN,     /* allow, with source FG_SOURCE_FAILED_OPEN */
    FG_ON_FAILURE_CLOSED,   /* deny, with source FG_SOURCE_FAILED_CLOSED */
    FG_ON_FAILURE_FALLBACK, /* decide in process, with source FG_SOURCE_FALLBACK */
} fg_failure_policy;

#define FG_FAILED_CLOSED_RETRY_MS 1000

typedef struct fg_options {
    int connect_timeout_ms; /* default 1000 */
    int command_timeout_ms; /* default 1000; a timed-out connection is reopened */
    fg_failure_policy on_failure;
    /* Remember a denial until its retry time and answer that key locally
     * meanwhile (fg_check with the same limit and the same or a larger cost;
     * remaining is the one of the remembered denial). redis: only; a bounded
     * table of recent denials (keys up to 120 bytes); fg_reset forgets the
     * key. Off by default. */
    bool cache_denials;
    /* The in-process clock, microseconds since the epoch; NULL for the
     * system's wall clock. The server always uses its own clock. */
    int64_t (*clock_us)(void *arg);
    void *clock_arg;
    /* Send the in-process clock's time to the server with every request, so
     * that both backends decide at the same instant: for tests, replays and
     * backfills. The server must allow it (floodgate.explicit-time yes). */
    bool send_clock;
    /* Token leases, for FG_TOKEN_BUCKET, FG_LEAKY_BUCKET, FG_GCRA and
     * FG_FIXED_WINDOW on redis: and redis+cluster: (0, the default: off).
     * When fg_check finds no lease of the key and limit with enough units,
     * it asks the server for min(lease_units, limit) units at once, serves
     * the request from them and keeps the rest: the next checks of that key
     * and limit are answered locally (FG_SOURCE_LEASE) until the lease is
     * used up or lease_ms have passed, so a key checked often costs about one
     * round trip per lease_units units. A lease request the server denies
     * is followed by the plain check of the request's cost (a second round
     * trip), so a request that fits is still allowed, and the key is then
     * checked plainly for lease_ms. Unused units go back to the server
     * (FG.REFUND) with the next lease request of the slot, and at fg_close,
     * as far as the bucket cannot have refilled them yet (a later refund
     * would create units; docs/client.md): keep lease_ms at most
     * lease_units / rate, or unused units lower the bucket until it
     * refills. Checks of cost 0 or of more than a lease, fg_peek,
     * fg_check_batch and the sliding algorithms never use leases.
     *
     * The price is precision. Leased units are charged when the lease is
     * taken and may be used up to lease_ms later, so in any interval of
     * length d all clients together admit at most what the server admits in
     * an interval of d + lease_ms: for the bucket family at most
     * rate x lease_ms units beyond the limit; for fixed windows nothing
     * beyond it, as a lease ends with its window. Units that one client
     * holds are not available to the others until it uses or returns them.
     *
     * remaining: from a lease, its units left; on the answer that took a
     * lease, the server's remaining plus the lease's units. A bounded table:
     * one lease per slot of 512 (keys up to 120 bytes; a longer key is
     * checked plainly), a key evicting another gives the evicted units
     * back. fg_reset drops the key's lease. */
    int64_t lease_units;
    int lease_ms; /* the longest a lease lives; default 100 */
} fg_options;

/* Fills the defaults above. */
void fg_options_init(fg_options *opts);

/* Opens a client for `url` (NULL or "" mean "mem:"); `opts` may be NULL.
 * A redis: client connects at once and reconnects by itself later.
 * Returns NULL on failure, with *err filled. */
fg_client *fg_open(const char *url, const fg_options *opts, fg_error *err);
void fg_close(fg_client *client);

/* ---------------------------------------------------------------- decisions */

/* Takes `cost` units (>= 0) of `limit` for `key`, and answers. cost 0 asks
 * without taking anything. */
fg_code fg_check(fg_client *client, const char *key, const fg_limit *limit, int64_t cost,
                 fg_result *out, fg_error *err);

/* The answer fg_check would give, without taking anything or writing. */
fg_code fg_peek(fg_client *client, const char *key, const fg_limit *limit, int64_t cost,
                fg_result *out, fg_error *err);

/* Forgets a key's state; *existed (may be NULL) tells whether it had one. */
fg_code fg_reset(fg_client *client, const char *key, bool *existed, fg_error *err);

/* The stored state of a key as text, e.g. "type=bucket tat_ns=... pttl=1234"
 * (the fields of FG.INSPECT; a slidelog's entries as "entries=ts,count,ts,count"),
 * or "" when the key has none; the same text on every backend.
 * FG_CODE_INVALID when buf is too small. */
fg_code fg_inspect(fg_client *client, const char *key, char *buf, size_t buflen,
                   fg_error *err);

/* One request of a batch. */
typedef struct fg_request {
    const char *key;
    const fg_limit *limit;
    int64_t cost;
    bool peek;
    fg_code code;     /* out: this request's outcome */
    fg_result result; /* out: valid when code is FG_CODE_OK */
} fg_request;

/* Decides many requests in one round trip (pipelined). Returns FG_CODE_OK
 * when the batch ran; each request then has its own code. */
fg_code fg_check_batch(fg_client *client, fg_request *requests, size_t count, fg_error *err);

/* The key of a value a request chose (a header, an argument, an address),
 * as the nginx module and the middlewares build it: "kind:name:value",
 * where kind says what holds the state ("limit_req", "limit_conn",
 * "policy") and name is the zone's or the policy's. The value stands as it
 * is when each byte is printable ASCII other than '~', '{' and '}', else it
 * is '~' and the hex of its bytes: so no value names a key of another
 * kind, name or value, nor picks its cluster slot. Returns the key's
 * length, and writes it with its NUL when that fits in size bytes
 * (FG_REQUEST_KEY_ROOM always does); 0, writing nothing, when kind or name
 * is empty or holds ':', a blank or a byte that is not printable ASCII. */
#define FG_REQUEST_KEY_ROOM(kind_len, name_len, value_len) \
    ((kind_len) + (name_len) + 2 * (value_len) + 4)
size_t fg_request_key(char *out, size_t size, const char *kind, const char *name,
                      const void *value, size_t len);

/* ------------------------------------------------------------------- locks */

/* Locks, read/write locks, semaphores and multi-key locks (docs/locks.md).
 * On redis: and unix: they are held in the server: the lease, the owner,
 * the fencing token and the FIFO queue of waiters are the server's, so a
 * waiting call blocks in the server and is granted the moment the lock is
 * free. mem: runs the same algorithm in process, with the same replies and
 * errors, for the threads of one process: a waiting call blocks its thread
 * (fg_close while a call waits is an error of the caller), and leases run
 * by opts.clock_us. FG_CODE_UNSUPPORTED on redis+cluster:, and for durable
 * mode on mem:.
 *
 * Owners are ids chosen by the caller, not threads: any thread may release
 * what another took, and one thread may act for several owners. */

#define FG_OWNER_ID_LEN 32 /* characters of an id from fg_owner_id */

/* Writes a random owner id (FG_OWNER_ID_LEN hex characters and a NUL) into
 * buf, which holds at least FG_OWNER_ID_LEN + 1 bytes. */
void fg_owner_id(char *buf);

/* Why a renewed lock is lost (the on_lost callback). */
typedef enum fg_lost_reason {
    FG_LOST_NOT_HELD,    /* the server says the owner no longer holds it */
    FG_LOST_UNREACHABLE, /* renewals failed until the lease ended */
    FG_LOST_RENEW_LIMIT, /* renew_max_ms reached: renewal stopped (the lease ends by itself) */
} fg_lost_reason;

typedef struct fg_lock_options {
    int64_t lease_ms; /* default 30000 */
    /* 0 (the default): try once; > 0: wait in the server's queue (mem:: the
     * process's) up to wait_ms; -1: wait with no timeout. */
    int64_t wait_ms;
    bool shared;    /* a read lock (FG.LOCK ... SHARED) */
    bool reentrant; /* FG.LOCK ... REENTRANT */
    /* Keep the lease alive from a background thread of the client: an
     * FG.EXTEND every lease_ms / 3 until the lock is released through this
     * client (fg_unlock, fg_semaphore_release, fg_unlock_multi) or lost. */
    bool renew;
    /* Stop renewing after this long (0: never): a holder stuck in a loop then
     * loses the lock instead of keeping it forever. */
    int64_t renew_max_ms;
    /* Called from the renewal thread when a renewed lock is lost; it must
     * not call back into the client. */
    void (*on_lost)(const char *key, const char *owner, fg_lost_reason why, void *arg);
    void *on_lost_arg;
    /* Durable mode: acknowledge a grant only after WAIT has seen it on
     * this many replicas (0: off), within durable_timeout_ms (default 1000).
     * A grant that reached fewer is released and the call answers
     * FG_CODE_NOT_DURABLE. docs/client.md says what this does and does not
     * protect. */
    int durable_replicas;
    int durable_timeout_ms;
} fg_lock_options;

/* Fills the defaults above. */
void fg_lock_options_init(fg_lock_options *opts);

typedef struct fg_lock_grant {
    bool acquired;
    uint64_t token; /* fencing token; 0 when not acquired */
    int64_t ttl_ms; /* acquired: lease left; not: the soonest it could be granted */
    int64_t holds;  /* the owner's holds (locks), permits (semaphores) or keys (multi) */
} fg_lock_grant;

/* FG.LOCK. `opts` may be NULL (the defaults). Not acquiring is not an error:
 * FG_CODE_OK with out->acquired false. */
fg_code fg_lock(fg_client *client, const char *key, const char *owner, const fg_lock_options *opts,
                fg_lock_grant *out, fg_error *err);

/* FG.UNLOCK: *holds_left (may be NULL) is what the owner still holds, -1
 * when it held nothing. Stops this client's renewal when it reaches 0. */
fg_code fg_unlock(fg_client *client, const char *key, const char *owner, int64_t *holds_left,
                  fg_error *err);

/* FG.EXTEND: *extended (may be NULL) false when the owner holds nothing. */
fg_code fg_extend(fg_client *client, const char *key, const char *owner, int64_t lease_ms,
                  bool *extended, fg_error *err);

/* FG.ACQUIRE and FG.RELEASE (permits 0: all of the owner's). shared and
 * reentrant in opts are ignored. */
fg_code fg_semaphore_acquire(fg_client *client, const char *key, int64_t capacity,
                             const char *owner, int64_t permits, const fg_lock_options *opts,
                             fg_lock_grant *out, fg_error *err);
fg_code fg_semaphore_release(fg_client *client, const char *key, const char *owner,
                             int64_t permits, int64_t *permits_left, fg_error *err);

/* FG.MLOCK and FG.MUNLOCK over `count` keys of one hash slot. */
fg_code fg_lock_multi(fg_client *client, const char *const *keys, size_t count, const char *owner,
                      const fg_lock_options *opts, fg_lock_grant *out, fg_error *err);
fg_code fg_unlock_multi(fg_client *client, const char *const *keys, size_t count,
                        const char *owner, int64_t *released, fg_error *err);

/* ----------------------------------------------------------------- redlock */

/* Redlock over N independent servers (redis: or unix: URLs of servers with
 * the module), as published: the lock is asked of all servers at once
 * (FG.LOCK without WAIT), held when a majority granted it and time is left,
 * and released everywhere otherwise. validity = lease - elapsed - drift,
 * drift = lease * drift_factor + 2 ms. Retries after a random delay.
 *
 * Redlock assumes bounded clock drift and pauses; its token is the largest
 * of the majority's and is monotonic only as far as the servers' clocks are
 * (docs/client.md). Prefer one server with fencing where correctness
 * matters. */
typedef struct fg_redlock fg_redlock;

typedef struct fg_redlock_options {
    int retry_count;       /* attempts after the first; default 3 */
    int retry_delay_ms;    /* default 200 */
    int retry_jitter_ms;   /* +- this, at random; default 100 */
    double drift_factor;   /* default 0.01 */
    int server_timeout_ms; /* per server and attempt; default 50 */
} fg_redlock_options;

void fg_redlock_options_init(fg_redlock_options *opts);

fg_redlock *fg_redlock_open(const char *const *urls, size_t count, const fg_redlock_options *opts,
                            fg_error *err);
void fg_redlock_close(fg_redlock *rl);

typedef struct fg_redlock_grant {
    bool acquired;
    int64_t validity_ms; /* how long the lock may be trusted after the call returns */
    int votes;           /* servers that granted it (on the last attempt) */
    uint64_t token;      /* the largest token of the granting servers (extend: 0) */
} fg_redlock_grant;

fg_code fg_redlock_lock(fg_redlock *rl, const char *key, const char *owner, int64_t lease_ms,
                        fg_redlock_grant *out, fg_error *err);
/* Extends on all servers; *out says whether a majority extended in time. */
fg_code fg_redlock_extend(fg_redlock *rl, const char *key, const char *owner, int64_t lease_ms,
                          fg_redlock_grant *out, fg_error *err);
/* Releases on every server (also those that did not grant it). */
fg_code fg_redlock_unlock(fg_redlock *rl, const char *key, const char *owner, fg_error *err);

/* ------------------------------------------------------------ bloom filters */

/* Bloom filters (docs/bloom.md). On a server, its BF.* commands (the
 * module's, RedisBloom's, or a server script's where it has none:
 * docs/scripts.md); on mem:, an in-process filter per key running the
 * module's code. Items are bytes. */

typedef struct fg_bloom_options {
    double error_rate; /* default 0.01, in (0, 1) */
    int64_t capacity;  /* default 100 */
    int expansion;     /* default 2; 0: non-scaling (adds beyond capacity fail) */
} fg_bloom_options;

/* Fills the defaults above (RedisBloom's). */
void fg_bloom_options_init(fg_bloom_options *opts);

/* BF.RESERVE; an existing key is FG_CODE_INVALID ("ERR item exists"). */
fg_code fg_bf_reserve(fg_client *client, const char *key, const fg_bloom_options *opts,
                      fg_error *err);

/* BF.ADD: *added (may be NULL) true when the item was new. A full
 * non-scaling filter is FG_CODE_INVALID ("ERR non scaling filter is
 * full"). A missing key is created with the defaults. */
fg_code fg_bf_add(fg_client *client, const char *key, const void *item, size_t len, bool *added,
                  fg_error *err);

/* BF.EXISTS: *exists false when the item was certainly never added (or the
 * key is missing). */
fg_code fg_bf_exists(fg_client *client, const char *key, const void *item, size_t len,
                     bool *exists, fg_error *err);

/* BF.MADD and BF.MEXISTS over n items, in one round trip: added[i] /
 * exists[i] for each. A full non-scaling filter stops BF.MADD at the first
 * item that does not fit: FG_CODE_INVALID, with added[] set for the items
 * before it. */
fg_code fg_bf_madd(fg_client *client, const char *key, const void *const *items,
                   const size_t *lens, size_t n, bool *added, fg_error *err);
fg_code fg_bf_mexists(fg_client *client, const char *key, const void *const *items,
                      const size_t *lens, size_t n, bool *exists, fg_error *err);

/* BF.CARD: the distinct items added, estimated (0 for a missing key). */
fg_code fg_bf_card(fg_client *client, const char *key, int64_t *card, fg_error *err);

/* A Bloom filter in the caller's memory, with no client and no key: the
 * same filter as the server's. Not thread-safe: one thread at a time, or a
 * lock around it. */
typedef struct fg_filter fg_filter;

/* NULL on bad options (FG_CODE_INVALID) or no memory, with *err filled. */
fg_filter *fg_filter_new(const fg_bloom_options *opts, fg_error *err);
/* 1 added, 0 maybe present already, -1 full (non-scaling) or no memory. */
int fg_filter_add(fg_filter *filter, const void *item, size_t len);
bool fg_filter_contains(const fg_filter *filter, const void *item, size_t len);
int64_t fg_filter_cardinality(const fg_filter *filter);
/* Bytes of memory the filter holds. */
size_t fg_filter_bytes(const fg_filter *filter);
void fg_filter_free(fg_filter *filter);

/* ---------------------------------------------------------------- policies */

/* Named policies (docs/policies.md): limits applied together, all or
 * nothing, with a penalty box, shadow mode and allow/deny lists, kept in
 * the server (FG.POLICY, FG.CHECK) or, on mem:, in the client's table,
 * decided by the same code. */

#define FG_MAX_POLICY_LIMITS 8

typedef enum fg_list_kind { FG_LIST_EXACT, FG_LIST_BLOOM } fg_list_kind;

typedef struct fg_list_spec {
    fg_list_kind kind; /* default FG_LIST_EXACT */
    double error;      /* FG_LIST_BLOOM: false-positive rate, default 0.001 */
    int64_t capacity;  /* FG_LIST_BLOOM: expected entries, default 10000 */
} fg_list_spec;

typedef struct fg_policy_def {
    size_t nlimits; /* 1 .. FG_MAX_POLICY_LIMITS */
    fg_limit limits[FG_MAX_POLICY_LIMITS]; /* any algorithm but FG_SLIDING_LOG */
    double ban_ms;        /* penalty box: 0 (the default) for none */
    int64_t ban_after;    /* denials that ban; default 1 */
    double ban_within_ms; /* the window they count in; 0: ban_ms */
    bool shadow;          /* decide and count, never deny */
    fg_list_spec allowlist, denylist;
} fg_policy_def;

/* An empty definition with the defaults above (no limits yet). */
void fg_policy_def_init(fg_policy_def *def);

/* FG.POLICY SET: creates or replaces a policy. A name is 1 to 64 letters,
 * digits, '_', '-', '.' or '/'. On redis+cluster: every master gets it. */
fg_code fg_policy_set(fg_client *client, const char *name, const fg_policy_def *def,
                      fg_error *err);

/* FG.POLICY DEL: *deleted (may be NULL) whether there was one. */
fg_code fg_policy_delete(fg_client *client, const char *name, bool *deleted, fg_error *err);

/* A policy as FG.POLICY GET shows it: its definition, which fg_policy_set
 * takes again (a Bloom list with its filter's error and capacity). */
typedef struct fg_policy_info {
    fg_policy_def def;
    int64_t allow_entries, deny_entries;
    int64_t allowed, denied, banned, shadow_denied, waited;
} fg_policy_info;

/* FG.POLICY GET (on redis+cluster: the node of slot 0 answers). */
fg_code fg_policy_get(fg_client *client, const char *name, fg_policy_info *out, fg_error *err);

/* FG.POLICY LIST: *names sorted, each and the array from malloc; free them
 * with fg_policy_names_free. */
fg_code fg_policy_names(fg_client *client, char ***names, size_t *count, fg_error *err);
void fg_policy_names_free(char **names, size_t count);

/* FG.POLICY ALLOW / DENY of n items: *added (may be NULL) how many were new. */
fg_code fg_policy_list_add(fg_client *client, const char *name, bool deny,
                           const void *const *items, const size_t *lens, size_t n,
                           int64_t *added, fg_error *err);

/* Who decided a policy check. */
typedef enum fg_decider {
    FG_BY_LIMIT,     /* limit_index */
    FG_BY_PENALTY,   /* the key is in the penalty box */
    FG_BY_DENYLIST,
    FG_BY_ALLOWLIST,
} fg_decider;

typedef struct fg_policy_result {
    fg_result result; /* as fg_check answers; source FG_SOURCE_SERVER or _MEMORY */
    fg_decider decided_by;
    int limit_index;    /* 0-based, when FG_BY_LIMIT */
    bool shadow_denied; /* shadow mode turned a denial into this allowance */
} fg_policy_result;

/* FG.CHECK: one request of `cost` units for `key` under the policy `name`.
 * `identity` (NULL: the key) is what the lists are checked against. A
 * missing policy is FG_CODE_INVALID ("ERR no such policy 'name'"), unless
 * the client has a policy_loader (fg_set_policy_loader), which is asked for
 * it once; what it gives is set on the server and the check retried. */
fg_code fg_policy_check(fg_client *client, const char *name, const char *key,
                        const char *identity, int64_t cost, fg_policy_result *out,
                        fg_error *err);

/* The same, waiting up to timeout_ms (1 .. 86400000) for the request to be
 * allowed, like Guava's tryAcquire(permits, timeout): in the server's FIFO
 * queue of the key (FG.CHECK ... WAIT), or on mem: in the client's. On
 * timeout the answer is the denial: no units are charged, but it counts
 * towards the penalty as any denial does. A request that could not be
 * allowed within the timeout is answered at once. A waiter whose deadline
 * comes while others wait ahead of it is denied with retry_after 0 (it
 * would fit, but not before them). The call blocks the calling thread
 * only; it uses a connection of its own. */
fg_code fg_policy_acquire(fg_client *client, const char *name, const char *key,
                          const char *identity, int64_t cost, int64_t timeout_ms,
                          fg_policy_result *out, fg_error *err);

/* Asked for a policy the server does not have (from a database, a config
 * service...): fill *def and return true, or return false when there is no
 * such policy. Called from the thread of the check, without locks held. */
typedef bool (*fg_policy_loader)(const char *name, fg_policy_def *def, void *arg);
void fg_set_policy_loader(fg_client *client, fg_policy_loader loader, void *arg);

/* Policies from a config file (libconfig syntax, docs/policies.md "Config
 * files"): each is set as by fg_policy_set, and its listed items added.
 * *applied (may be NULL) is how many; the first invalid entry stops the
 * call with FG_CODE_INVALID and a message naming the file, line and field,
 * before anything is sent. */
fg_code fg_policies_apply_file(fg_client *client, const char *path, size_t *applied,
                               fg_error *err);

/* --------------------------------------------------------- unique counting */

/* Distinct items over time windows (docs/uv.md). On a server, the module's
 * FG.UV* commands; on mem:, an in-process counter per key running the same
 * code, stamped with the client's clock. Counts are HyperLogLog estimates
 * (standard error 0.81%), equal to PFCOUNT of exactly the window's items. */

#define FG_HLL_BYTES 12304 /* a dense Redis HyperLogLog string */

typedef enum fg_time_unit {
    FG_SECONDS = 1,
    FG_MINUTES = 60,
    FG_HOURS = 3600,
    FG_DAYS = 86400,
} fg_time_unit;

/* A window: the last n units ending now, or [start_us, end_us) (unix
 * microseconds, truncated to seconds). */
typedef struct fg_window {
    bool last;
    int64_t n;
    fg_time_unit unit;
    int64_t start_us, end_us;
} fg_window;

static inline fg_window fg_last(int64_t n, fg_time_unit unit) {
    fg_window w = {true, n, unit, 0, 0};
    return w;
}
static inline fg_window fg_between(int64_t start_us, int64_t end_us) {
    fg_window w = {false, 0, FG_SECONDS, start_us, end_us};
    return w;
}

/* A counter's parameters (FG.UVCREATE's options). */
typedef struct fg_distinct_options {
    int64_t span_s;     /* exact sliding windows; default 604800 (7 days) */
    int64_t minutes;    /* minute buckets kept; default 60 */
    int64_t hours;      /* hour buckets kept; default 48 */
    int64_t days;       /* day buckets kept; default 31 */
    int64_t tzoffset_s; /* where hours and days begin; default 0 (UTC) */
} fg_distinct_options;

void fg_distinct_options_init(fg_distinct_options *opts);

/* FG.UVCREATE; an existing key is FG_CODE_INVALID ("ERR key exists"). */
fg_code fg_distinct_create(fg_client *client, const char *key, const fg_distinct_options *opts,
                           fg_error *err);

/* FG.UVADD of n items now, or FG.UVADDAT at at_us when at_us >= 0:
 * *changed (may be NULL) true when the counter changed. A missing key is
 * created with the defaults. */
fg_code fg_distinct_add(fg_client *client, const char *key, const void *const *items,
                        const size_t *lens, size_t n, int64_t at_us, bool *changed,
                        fg_error *err);

/* FG.UVCOUNT over the union of nkeys counters (one hash slot on a
 * cluster): *count, 0 when every key is missing. */
fg_code fg_distinct_count(fg_client *client, const char *const *keys, size_t nkeys,
                          fg_window window, int64_t *count, fg_error *err);

/* FG.UVEXPORT: the union's window as a dense HyperLogLog string. */
fg_code fg_distinct_export(fg_client *client, const char *const *keys, size_t nkeys,
                           fg_window window, uint8_t hll[FG_HLL_BYTES], fg_error *err);

/* ----------------------------------------------------------------- counters */

typedef struct fg_stats {
    uint64_t decisions;       /* answers given, from any source */
    uint64_t round_trips;     /* requests sent to a server (a batch counts once per node) */
    uint64_t denials_cached;  /* answers from the denial cache: round trips saved */
    uint64_t failures;        /* round trips that failed (timeouts, lost connections) */
    uint64_t reconnects;      /* connections reopened */
    uint64_t lease_hits;      /* answers from a lease: round trips saved */
} fg_stats;

void fg_get_stats(fg_client *client, fg_stats *out);

/* ------------------------------------------------------- server scripts */

/* The server scripts as a Redis Functions library (Redis 7.0+), for
 * FUNCTION LOAD [REPLACE]: "#!lua name=floodgate", then one function per
 * command that has a script, named as the command in lower case with '_'
 * for '.' (fg_token, fg_peek, cl_throttle, fg_reset...), and taking the
 * command's arguments after its key: FCALL fg_token 1 key 10 2 COST 3.
 * The client does not need it: on a server without the module it sends
 * the same scripts itself (EVALSHA). The text is the library's own, NUL-
 * terminated; *len (when not NULL) gets its length. */
const char *fg_functions_library(size_t *len);

#ifdef __cplusplus
}
#endif

#endif
