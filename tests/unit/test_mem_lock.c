/*
 * test_mem_lock.c - the lock calls of floodgate.h on mem: (mem_lock.c), no
 * server: the exact replies and errors of every call (the module's), reentry,
 * read/write locks, semaphore accounting, multi-key locks, leases ended by an
 * injected clock, strict FIFO hand-off between waiting threads, timeouts,
 * grants at a lease end, and renewal.
 *
 * Waiting threads are queued one at a time, in a known order: each is
 * started only once the one before is in the queue (fg_mem_lock_waiters).
 * Threads never call cmocka: they record what they got, and the main thread
 * checks it after joining them.
 */
#include "test_util.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "floodgate.h"
#include "lock.h"
#include "mem/mem_lock.h"

#define MS_US 1000LL
#define T0    1700000000000000LL /* the injected clock's start, us */
#define LONG  60000              /* a lease no test outlives, ms */

/* The first token granted at `us`: the clock's floor. */
#define TOKEN_AT(us) fg_lock_next_token(0, (us))

static _Atomic int64_t fake_now;

static int64_t fake_clock(void *arg) {
    (void)arg;
    return atomic_load(&fake_now);
}

static void advance_ms(int64_t ms) {
    atomic_fetch_add(&fake_now, ms * MS_US);
}

static fg_client *open_with(int64_t (*clock)(void *)) {
    fg_options o;
    fg_options_init(&o);
    o.clock_us = clock;
    atomic_store(&fake_now, T0);
    fg_error err;
    fg_client *c = fg_open("mem:", &o, &err);
    assert_non_null(c);
    return c;
}

static fg_client *open_fake(void) {
    return open_with(fake_clock);
}

static fg_client *open_real(void) {
    return open_with(NULL);
}

static int64_t realtime_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void sleep_ms(int64_t ms) {
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static fg_lock_options opts(int64_t lease_ms) {
    fg_lock_options o;
    fg_lock_options_init(&o);
    o.lease_ms = lease_ms;
    return o;
}

#define expect_grant(g, acquired_, token_, ttl_, holds_)                                           \
    do {                                                                                           \
        fg_lock_grant g_ = (g);                                                                    \
        expect_i64(g_.acquired, (acquired_));                                                      \
        expect_i64(g_.token, (token_));                                                            \
        expect_i64(g_.ttl_ms, (ttl_));                                                             \
        expect_i64(g_.holds, (holds_));                                                            \
    } while (0)

/* Calls that must answer FG_CODE_OK. */
static fg_lock_grant lock(fg_client *c, const char *key, const char *owner, fg_lock_options o) {
    fg_lock_grant g;
    fg_error err;
    fg_code rc = fg_lock(c, key, owner, &o, &g, &err);
    if (rc != FG_CODE_OK) print_error("fg_lock: %s\n", err.message);
    expect_i64(rc, FG_CODE_OK);
    return g;
}

static fg_lock_grant shared(fg_client *c, const char *key, const char *owner, int64_t lease_ms) {
    fg_lock_options o = opts(lease_ms);
    o.shared = true;
    return lock(c, key, owner, o);
}

static fg_lock_grant reenter(fg_client *c, const char *key, const char *owner, int64_t lease_ms) {
    fg_lock_options o = opts(lease_ms);
    o.reentrant = true;
    return lock(c, key, owner, o);
}

static int64_t unlock(fg_client *c, const char *key, const char *owner) {
    int64_t left = 99;
    expect_i64(fg_unlock(c, key, owner, &left, NULL), FG_CODE_OK);
    return left;
}

static fg_lock_grant acquire(fg_client *c, const char *key, int64_t capacity, const char *owner,
                             int64_t permits, int64_t lease_ms) {
    fg_lock_options o = opts(lease_ms);
    fg_lock_grant g;
    fg_error err;
    fg_code rc = fg_semaphore_acquire(c, key, capacity, owner, permits, &o, &g, &err);
    if (rc != FG_CODE_OK) print_error("fg_semaphore_acquire: %s\n", err.message);
    expect_i64(rc, FG_CODE_OK);
    return g;
}

static int64_t release(fg_client *c, const char *key, const char *owner, int64_t permits) {
    int64_t left = 99;
    expect_i64(fg_semaphore_release(c, key, owner, permits, &left, NULL), FG_CODE_OK);
    return left;
}

static fg_lock_grant mlock(fg_client *c, const char *const *keys, size_t n, const char *owner,
                           int64_t lease_ms) {
    fg_lock_options o = opts(lease_ms);
    fg_lock_grant g;
    fg_error err;
    fg_code rc = fg_lock_multi(c, keys, n, owner, &o, &g, &err);
    if (rc != FG_CODE_OK) print_error("fg_lock_multi: %s\n", err.message);
    expect_i64(rc, FG_CODE_OK);
    return g;
}

static int64_t munlock(fg_client *c, const char *const *keys, size_t n, const char *owner) {
    int64_t released = 99;
    expect_i64(fg_unlock_multi(c, keys, n, owner, &released, NULL), FG_CODE_OK);
    return released;
}

static bool extend(fg_client *c, const char *key, const char *owner, int64_t lease_ms) {
    bool extended = false;
    expect_i64(fg_extend(c, key, owner, lease_ms, &extended, NULL), FG_CODE_OK);
    return extended;
}

/* An error with exactly this code and message. */
static void expect_error(fg_code rc, const fg_error *err, fg_code code, const char *message) {
    expect_i64(rc, code);
    expect_i64(err->code, code);
    assert_string_equal(err->message, message);
}

static const char WRONGTYPE[] = "WRONGTYPE Operation against a key holding the wrong kind of value";
static const char UPGRADE[] =
    "ERR owner holds a shared lock: release it before asking for the exclusive lock";

/* ------------------------------------------------------ replies, no wait */

static void test_lock_unlock_extend(void **state) {
    (void)state;
    fg_client *c = open_fake();
    expect_grant(lock(c, "k", "a", opts(1000)), true, TOKEN_AT(T0), 1000, 1);
    expect_grant(lock(c, "k", "b", opts(1000)), false, 0, 1000, 0);
    /* Not reentrant: the owner waits for its own lease like anybody. */
    expect_grant(lock(c, "k", "a", opts(1000)), false, 0, 1000, 0);
    advance_ms(300);
    expect_grant(lock(c, "k", "b", opts(1000)), false, 0, 700, 0);
    expect_i64(unlock(c, "k", "b"), -1);
    expect_i64(unlock(c, "k", "a"), 0);
    expect_i64(unlock(c, "k", "a"), -1);
    expect_i64(unlock(c, "never", "a"), -1);
    /* Tokens: floored by the clock, else one more than the last. */
    expect_grant(lock(c, "k", "b", opts(500)), true, TOKEN_AT(T0 + 300 * MS_US), 500, 1);
    expect_grant(lock(c, "k2", "a", opts(500)), true, TOKEN_AT(T0 + 300 * MS_US) + 1, 500, 1);
    assert_true(extend(c, "k", "b", 2000));
    assert_false(extend(c, "k", "a", 2000));
    assert_false(extend(c, "never", "a", 2000));
    atomic_fetch_add(&fake_now, 500); /* half a millisecond: ttl rounds up */
    expect_grant(lock(c, "k", "a", opts(1000)), false, 0, 2000, 0);
    /* NULL results are allowed. */
    expect_i64(fg_unlock(c, "k", "b", NULL, NULL), FG_CODE_OK);
    expect_i64(fg_extend(c, "k2", "a", 10, NULL, NULL), FG_CODE_OK);
    fg_close(c);
}

static void test_reentrant(void **state) {
    (void)state;
    fg_client *c = open_fake();
    uint64_t t = TOKEN_AT(T0);
    expect_grant(reenter(c, "k", "a", 1000), true, t, 1000, 1);
    advance_ms(100);
    expect_grant(reenter(c, "k", "a", 2000), true, t, 2000, 2);
    /* The lease is the later of the two. */
    expect_grant(reenter(c, "k", "a", 100), true, t, 2000, 3);
    /* A writer may read; its hold stays exclusive. */
    expect_grant(shared(c, "k", "b", 1000), false, 0, 2000, 0);
    fg_lock_options o = opts(1000);
    o.shared = o.reentrant = true;
    expect_grant(lock(c, "k", "a", o), true, t, 2000, 4);
    expect_grant(shared(c, "k", "b", 1000), false, 0, 2000, 0);
    expect_i64(unlock(c, "k", "a"), 3);
    expect_i64(unlock(c, "k", "a"), 2);
    expect_i64(unlock(c, "k", "a"), 1);
    expect_i64(unlock(c, "k", "a"), 0);
    expect_i64(unlock(c, "k", "a"), -1);

    /* A reader asking for the write lock is refused, reentrant or not. */
    expect_grant(shared(c, "r", "a", 1000), true, TOKEN_AT(T0 + 100 * MS_US), 1000, 1);
    fg_error err;
    fg_lock_grant g;
    fg_lock_options up = opts(1000);
    expect_error(fg_lock(c, "r", "a", &up, &g, &err), &err, FG_CODE_INVALID, UPGRADE);
    up.reentrant = true;
    expect_error(fg_lock(c, "r", "a", &up, &g, &err), &err, FG_CODE_INVALID, UPGRADE);
    expect_i64(unlock(c, "r", "a"), 0);
    fg_close(c);
}

static void test_shared_and_exclusive(void **state) {
    (void)state;
    fg_client *c = open_fake();
    expect_grant(shared(c, "s", "r1", 1000), true, TOKEN_AT(T0), 1000, 1);
    advance_ms(10);
    expect_grant(shared(c, "s", "r2", 2000), true, TOKEN_AT(T0 + 10 * MS_US), 2000, 1);
    /* A writer waits for the latest reader's lease. */
    expect_grant(lock(c, "s", "w", opts(1000)), false, 0, 2000, 0);
    expect_i64(unlock(c, "s", "r1"), 0);
    expect_grant(lock(c, "s", "w", opts(1000)), false, 0, 2000, 0);
    expect_i64(unlock(c, "s", "r2"), 0);
    expect_grant(lock(c, "s", "w", opts(1000)), true, TOKEN_AT(T0 + 10 * MS_US) + 1, 1000, 1);
    expect_grant(shared(c, "s", "r3", 1000), false, 0, 1000, 0);
    fg_close(c);
}

static void test_semaphore(void **state) {
    (void)state;
    fg_client *c = open_fake();
    uint64_t ta = TOKEN_AT(T0);
    expect_grant(acquire(c, "sem", 3, "a", 2, 1000), true, ta, 1000, 2);
    advance_ms(100);
    /* One permit short until a's lease ends. */
    expect_grant(acquire(c, "sem", 3, "b", 2, 1000), false, 0, 900, 0);
    uint64_t tb = TOKEN_AT(T0 + 100 * MS_US);
    expect_grant(acquire(c, "sem", 3, "b", 1, 1000), true, tb, 1000, 1);
    expect_grant(acquire(c, "sem", 3, "a", 1, 1000), false, 0, 900, 0);
    expect_i64(release(c, "sem", "a", 1), 1);
    /* An owner adds to its permits; its token stays, its lease is the later. */
    expect_grant(acquire(c, "sem", 3, "a", 1, 2000), true, ta, 2000, 2);
    /* A lower capacity takes nothing away; new grants wait for enough
     * leases to end: b's 1 permit at +1100 ms is not enough, a's 2 at +2100. */
    expect_grant(acquire(c, "sem", 2, "c", 1, 1000), false, 0, 2000, 0);
    expect_i64(release(c, "sem", "a", 0), 0);
    expect_i64(release(c, "sem", "a", 0), -1);
    expect_i64(release(c, "sem", "b", 5), 0); /* more than held: all of it */
    expect_i64(release(c, "none", "b", 0), -1);
    expect_grant(acquire(c, "sem", 2, "c", 2, 1000), true, tb + 1, 1000, 2);

    fg_error err;
    fg_lock_grant g;
    fg_lock_options o = opts(1000);
    int64_t left = 99;
    expect_error(fg_semaphore_acquire(c, "sem", 2, "d", 3, &o, &g, &err), &err, FG_CODE_INVALID,
                 "ERR permits exceed the capacity");
    expect_error(fg_semaphore_acquire(c, "sem", 0, "d", 1, &o, &g, &err), &err, FG_CODE_INVALID,
                 "ERR capacity must be between 1 and 1000000");
    expect_error(fg_semaphore_acquire(c, "sem", 1000001, "d", 1, &o, &g, &err), &err,
                 FG_CODE_INVALID, "ERR capacity must be between 1 and 1000000");
    expect_error(fg_semaphore_acquire(c, "sem", 2, "d", 0, &o, &g, &err), &err, FG_CODE_INVALID,
                 "ERR permits must be between 1 and 1000000");
    /* The module checks capacity, then the owner, then permits. */
    expect_error(fg_semaphore_acquire(c, "sem", 0, "", 0, &o, &g, &err), &err, FG_CODE_INVALID,
                 "ERR capacity must be between 1 and 1000000");
    expect_error(fg_semaphore_acquire(c, "sem", 2, "", 0, &o, &g, &err), &err, FG_CODE_INVALID,
                 "ERR owner must be 1 to 256 bytes");
    expect_error(fg_semaphore_release(c, "sem", "c", -1, &left, &err), &err, FG_CODE_INVALID,
                 "permits must be 0 (all) or more");
    expect_error(fg_semaphore_release(c, "sem", "c", 1000001, &left, &err), &err, FG_CODE_INVALID,
                 "ERR permits must be between 1 and 1000000");
    expect_i64(left, 99);
    expect_i64(release(c, "sem", "c", 1), 1); /* nothing changed */
    fg_close(c);
}

static void test_multi(void **state) {
    (void)state;
    fg_client *c = open_fake();
    const char *abc[] = {"a", "b", "c"}, *cd[] = {"c", "d"}, *abcx[] = {"a", "b", "c", "x"};
    uint64_t t = TOKEN_AT(T0);
    expect_grant(mlock(c, abc, 3, "o", 1000), true, t, 1000, 3);
    /* One token for all keys: a re-entry on one of them shows it. */
    expect_grant(reenter(c, "b", "o", 1000), true, t, 1000, 2);
    expect_i64(unlock(c, "b", "o"), 1);
    /* All or nothing: d is not taken when c is held. */
    expect_grant(mlock(c, cd, 2, "p", 1000), false, 0, 1000, 0);
    expect_grant(lock(c, "d", "q", opts(1000)), true, t + 1, 1000, 1);
    expect_i64(unlock(c, "d", "q"), 0);
    expect_i64(munlock(c, abcx, 4, "o"), 3);
    expect_i64(munlock(c, abcx, 4, "o"), 0);
    expect_grant(mlock(c, cd, 2, "p", 1000), true, t + 2, 1000, 2);
    /* A key the owner reads can never be upgraded: an error, as FG.LOCK's. */
    const char *de[] = {"d", "e"};
    fg_lock_grant g;
    fg_lock_options o = opts(1000);
    fg_error err;
    expect_grant(shared(c, "e", "p", 1000), true, t + 3, 1000, 1);
    expect_error(fg_lock_multi(c, de, 2, "p", &o, &g, &err), &err, FG_CODE_INVALID, UPGRADE);
    expect_i64(unlock(c, "e", "p"), 0);
    /* The keys are ordinary lock keys. */
    assert_true(extend(c, "d", "p", 5000));
    expect_grant(lock(c, "d", "q", opts(1000)), false, 0, 5000, 0);
    expect_i64(unlock(c, "c", "p"), 0);
    expect_i64(munlock(c, cd, 2, "p"), 1);
    fg_close(c);
}

static void test_wrongtype(void **state) {
    (void)state;
    fg_client *c = open_fake();
    fg_error err;
    fg_lock_grant g;
    fg_lock_options o = opts(5000);
    int64_t left = 99;
    expect_grant(lock(c, "k", "a", opts(5000)), true, TOKEN_AT(T0), 5000, 1);
    expect_grant(acquire(c, "s", 2, "a", 1, 5000), true, TOKEN_AT(T0) + 1, 5000, 1);
    expect_error(fg_semaphore_acquire(c, "k", 2, "b", 1, &o, &g, &err), &err, FG_CODE_WRONGTYPE,
                 WRONGTYPE);
    expect_error(fg_lock(c, "s", "b", &o, &g, &err), &err, FG_CODE_WRONGTYPE, WRONGTYPE);
    expect_error(fg_unlock(c, "s", "a", &left, &err), &err, FG_CODE_WRONGTYPE, WRONGTYPE);
    expect_error(fg_semaphore_release(c, "k", "a", 0, &left, &err), &err, FG_CODE_WRONGTYPE,
                 WRONGTYPE);
    expect_i64(left, 99);
    /* Multi-key calls check every type first: an error takes nothing and
     * releases nothing. */
    const char *free_s[] = {"free", "s"}, *k_s[] = {"k", "s"};
    expect_error(fg_lock_multi(c, free_s, 2, "c", &o, &g, &err), &err, FG_CODE_WRONGTYPE,
                 WRONGTYPE);
    expect_i64(unlock(c, "free", "c"), -1);
    expect_error(fg_unlock_multi(c, k_s, 2, "a", &left, &err), &err, FG_CODE_WRONGTYPE, WRONGTYPE);
    expect_grant(lock(c, "k", "b", opts(1000)), false, 0, 5000, 0);
    /* FG.EXTEND works on both kinds. */
    assert_true(extend(c, "s", "a", 6000));
    assert_true(extend(c, "k", "a", 6000));
    /* Once every lease has ended, the key holds nothing of any kind. */
    advance_ms(6000);
    expect_grant(acquire(c, "k", 1, "z", 1, 1000), true, TOKEN_AT(T0 + 6000 * MS_US), 1000, 1);
    expect_grant(lock(c, "s", "z", opts(1000)), true, TOKEN_AT(T0 + 6000 * MS_US) + 1, 1000, 1);
    fg_close(c);
}

static void test_bad_inputs(void **state) {
    (void)state;
    fg_client *c = open_fake();
    fg_error err;
    fg_lock_grant g;
    fg_lock_options o = opts(1000);
    char long_owner[258];
    memset(long_owner, 'o', 257);
    long_owner[257] = '\0';
    const char *owner_msg = "ERR owner must be 1 to 256 bytes";
    const char *lease_msg = "ERR lease_ms must be between 1 and 1000000000000";
    expect_error(fg_lock(c, "k", "", &o, &g, &err), &err, FG_CODE_INVALID, owner_msg);
    expect_error(fg_lock(c, "k", long_owner, &o, &g, &err), &err, FG_CODE_INVALID, owner_msg);
    long_owner[256] = '\0'; /* 256 bytes are fine */
    expect_grant(lock(c, "long", long_owner, opts(1000)), true, TOKEN_AT(T0), 1000, 1);
    o.lease_ms = 0;
    expect_error(fg_lock(c, "k", "a", &o, &g, &err), &err, FG_CODE_INVALID, lease_msg);
    o.lease_ms = 1000000000001LL;
    expect_error(fg_lock(c, "k", "a", &o, &g, &err), &err, FG_CODE_INVALID, lease_msg);
    o = opts(1000);
    o.wait_ms = -2;
    expect_error(fg_lock(c, "k", "a", &o, &g, &err), &err, FG_CODE_INVALID,
                 "wait_ms must be 0 (no wait), -1 (no timeout) or a timeout in ms");
    o.wait_ms = 1000000000001LL;
    expect_error(fg_lock(c, "k", "a", &o, &g, &err), &err, FG_CODE_INVALID,
                 "ERR timeout_ms must be between 0 and 1000000000000");
    o = opts(1000);
    o.durable_replicas = 1;
    expect_error(fg_lock(c, "k", "a", &o, &g, &err), &err, FG_CODE_UNSUPPORTED,
                 "durable mode waits for replicas: mem: has no replicas");
    expect_error(fg_semaphore_acquire(c, "k", 1, "a", 1, &o, &g, &err), &err, FG_CODE_UNSUPPORTED,
                 "durable mode waits for replicas: mem: has no replicas");
    o = opts(1000);
    expect_error(fg_lock(c, NULL, "a", &o, &g, &err), &err, FG_CODE_INVALID,
                 "a key, an owner or a result is missing (NULL)");
    expect_error(fg_extend(c, "long", long_owner, 0, NULL, &err), &err, FG_CODE_INVALID, lease_msg);
    expect_error(fg_unlock(c, "long", "", NULL, &err), &err, FG_CODE_INVALID, owner_msg);

    const char *dup[] = {"x", "y", "x"}, *many[65];
    for (int i = 0; i < 65; i++)
        many[i] = "m";
    expect_error(fg_lock_multi(c, dup, 0, "a", &o, &g, &err), &err, FG_CODE_INVALID,
                 "ERR numkeys must be between 1 and 64");
    expect_error(fg_lock_multi(c, many, 65, "a", &o, &g, &err), &err, FG_CODE_INVALID,
                 "ERR numkeys must be between 1 and 64");
    expect_error(fg_lock_multi(c, dup, 3, "a", &o, &g, &err), &err, FG_CODE_INVALID,
                 "ERR duplicate key");
    expect_error(fg_unlock_multi(c, dup, 3, "a", NULL, &err), &err, FG_CODE_INVALID,
                 "ERR duplicate key");
    expect_error(fg_lock_multi(c, dup, 2, "", &o, &g, &err), &err, FG_CODE_INVALID, owner_msg);
    /* Nothing was taken by any of them. */
    expect_grant(lock(c, "k", "b", opts(1000)), true, TOKEN_AT(T0) + 1, 1000, 1);
    expect_grant(mlock(c, dup, 2, "b", 1000), true, TOKEN_AT(T0) + 2, 1000, 2);
    expect_i64(unlock(c, "long", long_owner), 0);
    fg_close(c);
}

static void test_leases_end_by_the_injected_clock(void **state) {
    (void)state;
    fg_client *c = open_fake();
    expect_grant(lock(c, "k", "a", opts(1000)), true, TOKEN_AT(T0), 1000, 1);
    expect_grant(acquire(c, "s", 1, "a", 1, 1000), true, TOKEN_AT(T0) + 1, 1000, 1);
    advance_ms(999);
    expect_grant(lock(c, "k", "b", opts(1000)), false, 0, 1, 0);
    expect_grant(acquire(c, "s", 1, "b", 1, 1000), false, 0, 1, 0);
    advance_ms(1);
    /* At its end the lease is over: a has lost both. */
    uint64_t t = TOKEN_AT(T0 + 1000 * MS_US);
    expect_grant(lock(c, "k", "b", opts(1000)), true, t, 1000, 1);
    expect_i64(unlock(c, "k", "a"), -1);
    assert_false(extend(c, "k", "a", 1000));
    expect_i64(release(c, "s", "a", 0), -1);
    expect_grant(acquire(c, "s", 1, "b", 1, 1000), true, t + 1, 1000, 1);
    fg_close(c);
}

/* ---------------------------------------------------------------- waiting */

/* A lock call in a thread of its own. */
typedef struct call {
    fg_client *c;
    const char *key;
    const char *const *keys; /* a multi-key lock when set */
    size_t nkeys;
    int64_t capacity, permits; /* a semaphore when capacity > 0 */
    const char *owner;
    fg_lock_options o;
    fg_lock_grant g;
    fg_error err;
    fg_code rc;
    atomic_bool done;
    pthread_t thread;
} call;

static void *run_call(void *arg) {
    call *k = arg;
    if (k->keys != NULL)
        k->rc = fg_lock_multi(k->c, k->keys, k->nkeys, k->owner, &k->o, &k->g, &k->err);
    else if (k->capacity > 0)
        k->rc = fg_semaphore_acquire(k->c, k->key, k->capacity, k->owner, k->permits, &k->o, &k->g,
                                     &k->err);
    else
        k->rc = fg_lock(k->c, k->key, k->owner, &k->o, &k->g, &k->err);
    atomic_store(&k->done, true);
    return NULL;
}

/* Polls until the key has `n` waiters (at most 10 s). */
static void expect_waiters(fg_client *c, const char *key, size_t n) {
    fg_mem_locks *m = fg_client_mem_locks(c);
    for (int i = 0; i < 10000 && fg_mem_lock_waiters(m, key) != n; i++)
        sleep_ms(1);
    expect_i64(fg_mem_lock_waiters(m, key), n);
}

/* Starts a waiting call on k->key (or k->keys) and returns once it is the
 * `position`th waiter of `queue`. */
static void start(call *k, fg_client *c, const char *queue, size_t position) {
    k->c = c;
    atomic_init(&k->done, false);
    assert_int_equal(pthread_create(&k->thread, NULL, run_call, k), 0);
    expect_waiters(c, queue, position);
    assert_false(atomic_load(&k->done));
}

static call waiting(const char *key, const char *owner, int64_t lease_ms, int64_t wait_ms,
                    bool is_shared) {
    call k = {.key = key, .owner = owner, .o = opts(lease_ms)};
    k.o.wait_ms = wait_ms;
    k.o.shared = is_shared;
    return k;
}

static call waiting_permits(const char *key, int64_t capacity, const char *owner, int64_t permits) {
    call k = {.key = key, .capacity = capacity, .owner = owner, .permits = permits};
    k.o = opts(1000);
    k.o.wait_ms = 10000;
    return k;
}

static fg_lock_grant finish(call *k) {
    pthread_join(k->thread, NULL);
    if (k->rc != FG_CODE_OK) print_error("%s: %s\n", k->owner, k->err.message);
    expect_i64(k->rc, FG_CODE_OK);
    return k->g;
}

/* Writers and readers queued W1 R1 R2 W2 behind a holder are granted in
 * that order, the readers together, each at the release that frees them. */
static void test_fifo_hand_off(void **state) {
    (void)state;
    fg_client *c = open_fake();
    uint64_t t = TOKEN_AT(T0);
    expect_grant(lock(c, "q", "h", opts(LONG)), true, t, LONG, 1);
    call k[4] = {waiting("q", "w1", 1000, -1, false), waiting("q", "r1", 2000, -1, true),
                 waiting("q", "r2", 3000, 60000, true), waiting("q", "w2", 4000, -1, false)};
    for (size_t i = 0; i < 4; i++)
        start(&k[i], c, "q", i + 1);
    /* A newcomer never overtakes a waiter, even a reader behind readers. */
    expect_grant(shared(c, "q", "r3", 1000), false, 0, LONG, 0);
    expect_i64(unlock(c, "q", "h"), 0);
    expect_grant(finish(&k[0]), true, t + 1, 1000, 1);
    expect_waiters(c, "q", 3);
    expect_i64(unlock(c, "q", "w1"), 0);
    expect_grant(finish(&k[1]), true, t + 2, 2000, 1);
    expect_grant(finish(&k[2]), true, t + 3, 3000, 1);
    expect_waiters(c, "q", 1);
    expect_i64(unlock(c, "q", "r1"), 0);
    expect_waiters(c, "q", 1);
    assert_false(atomic_load(&k[3].done));
    expect_i64(unlock(c, "q", "r2"), 0);
    expect_grant(finish(&k[3]), true, t + 4, 4000, 1);
    expect_waiters(c, "q", 0);
    fg_close(c);
}

/* A multi-key waiter holds its place in every queue: a newcomer on its free
 * key is refused (only the queue in the way: ttl 0), and one release grants
 * it all keys with one token. */
static void test_fifo_multi(void **state) {
    (void)state;
    fg_client *c = open_fake();
    uint64_t t = TOKEN_AT(T0);
    const char *ab[] = {"a", "b"};
    expect_grant(lock(c, "b", "h", opts(LONG)), true, t, LONG, 1);
    call m = {.keys = ab, .nkeys = 2, .owner = "m", .o = opts(1000)};
    m.o.wait_ms = -1;
    start(&m, c, "a", 1);
    expect_waiters(c, "b", 1);
    expect_grant(lock(c, "a", "n", opts(1000)), false, 0, 0, 0);
    call n = waiting("a", "n", 1000, -1, false);
    start(&n, c, "a", 2);
    expect_i64(unlock(c, "b", "h"), 0);
    expect_grant(finish(&m), true, t + 1, 1000, 2);
    expect_waiters(c, "a", 1);
    expect_i64(munlock(c, ab, 2, "m"), 2);
    expect_grant(finish(&n), true, t + 2, 1000, 1);
    fg_close(c);
}

/* Multi-key waiters keep arrival order: M (a, b) heads a's queue but comes
 * after X (b, c) in b's, so freeing a grants nothing although b is free;
 * X goes first, then M. */
static void test_fifo_multi_order(void **state) {
    (void)state;
    fg_client *c = open_fake();
    uint64_t t = TOKEN_AT(T0);
    const char *bc[] = {"b", "c"}, *ab[] = {"a", "b"};
    expect_grant(lock(c, "a", "h", opts(LONG)), true, t, LONG, 1);
    expect_grant(lock(c, "c", "h", opts(LONG)), true, t + 1, LONG, 1);
    call x = {.keys = bc, .nkeys = 2, .owner = "x", .o = opts(1000)};
    call m = {.keys = ab, .nkeys = 2, .owner = "m", .o = opts(2000)};
    x.o.wait_ms = m.o.wait_ms = -1;
    start(&x, c, "b", 1);
    start(&m, c, "b", 2);
    expect_i64(unlock(c, "a", "h"), 0);
    expect_waiters(c, "a", 1);
    expect_waiters(c, "b", 2);
    assert_false(atomic_load(&m.done));
    expect_i64(unlock(c, "c", "h"), 0);
    expect_grant(finish(&x), true, t + 2, 1000, 2);
    assert_false(atomic_load(&m.done));
    expect_i64(munlock(c, bc, 2, "x"), 2);
    expect_grant(finish(&m), true, t + 3, 2000, 2);
    fg_close(c);
}

/* An owner whose read lock is granted while its multi-key request on the
 * same key waits behind it: the request can never be granted (an upgrade)
 * and fails, as it would have at once. */
static void test_upgrade_while_waiting(void **state) {
    (void)state;
    fg_client *c = open_fake();
    uint64_t t = TOKEN_AT(T0);
    const char *ef[] = {"e", "f"};
    expect_grant(lock(c, "e", "h", opts(LONG)), true, t, LONG, 1);
    call reader = waiting("e", "p", 1000, 10000, true);
    call multi = {.keys = ef, .nkeys = 2, .owner = "p", .o = opts(1000)};
    multi.o.wait_ms = 10000;
    start(&reader, c, "e", 1);
    start(&multi, c, "e", 2);
    expect_i64(unlock(c, "e", "h"), 0);
    expect_grant(finish(&reader), true, t + 1, 1000, 1);
    pthread_join(multi.thread, NULL);
    expect_error(multi.rc, &multi.err, FG_CODE_INVALID, UPGRADE);
    expect_waiters(c, "e", 0);
    expect_waiters(c, "f", 0);
    expect_grant(lock(c, "f", "q", opts(1000)), true, t + 2, 1000, 1);
    fg_close(c);
}

/* A call that waits up to wait_ms answers as a refusal when it passes
 * (ttl_ms: the holder's lease, by the frozen injected clock), and leaves the
 * queue. */
static void test_wait_timeout(void **state) {
    (void)state;
    fg_client *c = open_fake();
    expect_grant(lock(c, "k", "h", opts(LONG)), true, TOKEN_AT(T0), LONG, 1);
    fg_lock_options o = opts(1000);
    o.wait_ms = 100;
    fg_lock_grant g;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    expect_i64(fg_lock(c, "k", "w", &o, &g, NULL), FG_CODE_OK);
    clock_gettime(CLOCK_MONOTONIC, &b);
    expect_grant(g, false, 0, LONG, 0);
    assert_true((b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec) >= 100 * MS);
    expect_waiters(c, "k", 0);
    const char *kx[] = {"k", "x"};
    call m = {.keys = kx, .nkeys = 2, .owner = "m", .o = opts(1000)};
    m.o.wait_ms = 50;
    start(&m, c, "x", 1);
    expect_grant(finish(&m), false, 0, LONG, 0);
    expect_waiters(c, "x", 0);
    expect_grant(lock(c, "x", "n", opts(1000)), true, TOKEN_AT(T0) + 1, 1000, 1);
    fg_close(c);
}

/* A writer that times out at the head of the queue lets the reader behind
 * it join the readers that hold the lock. */
static void test_timeout_at_the_head_serves_the_queue(void **state) {
    (void)state;
    fg_client *c = open_fake();
    expect_grant(shared(c, "k", "h", LONG), true, TOKEN_AT(T0), LONG, 1);
    call w = waiting("k", "w", 1000, 200, false), r = waiting("k", "r", 1000, 10000, true);
    start(&w, c, "k", 1);
    start(&r, c, "k", 2);
    expect_grant(finish(&w), false, 0, LONG, 0);
    expect_grant(finish(&r), true, TOKEN_AT(T0) + 1, 1000, 1);
    fg_close(c);
}

/* With the real clock: a waiter is granted when the holder's lease ends,
 * with no other call on the key (it leaves the queue long before its own
 * wait_ms, whose end would also look at the key). */
static void test_grant_at_lease_end(void **state) {
    (void)state;
    fg_client *c = open_real();
    int64_t before = realtime_us();
    assert_true(lock(c, "k", "a", opts(200)).acquired);
    call b = waiting("k", "b", 1000, 30000, false);
    start(&b, c, "k", 1);
    expect_waiters(c, "k", 0);
    fg_lock_grant g = finish(&b);
    assert_true(g.acquired);
    expect_i64(g.holds, 1);
    assert_true(realtime_us() - before >= 200 * MS_US);
    expect_i64(unlock(c, "k", "a"), -1);
    expect_i64(unlock(c, "k", "b"), 0);
    fg_close(c);
}

/* A lease shortened by fg_extend wakes the waiters, whose sleep was set by
 * the longer one. */
static void test_shorter_lease_wakes_waiters(void **state) {
    (void)state;
    fg_client *c = open_real();
    assert_true(lock(c, "k", "a", opts(LONG)).acquired);
    call b = waiting("k", "b", 1000, 30000, false);
    start(&b, c, "k", 1);
    assert_true(extend(c, "k", "a", 100));
    expect_waiters(c, "k", 0);
    fg_lock_grant g = finish(&b);
    assert_true(g.acquired);
    expect_i64(g.ttl_ms, 1000);
    fg_close(c);
}

/* Waiting semaphore requests, in order: a large one at the head is not
 * overtaken by a small one that would fit. */
static void test_semaphore_queue(void **state) {
    (void)state;
    fg_client *c = open_fake();
    uint64_t t = TOKEN_AT(T0);
    expect_grant(acquire(c, "s", 4, "h", 3, LONG), true, t, LONG, 3);
    call big = waiting_permits("s", 4, "big", 3), small = waiting_permits("s", 4, "small", 1);
    start(&big, c, "s", 1);
    start(&small, c, "s", 2);
    /* One permit is free, but the queue is in the way. */
    expect_grant(acquire(c, "s", 4, "x", 1, 1000), false, 0, 0, 0);
    expect_i64(release(c, "s", "h", 2), 1);
    expect_grant(finish(&big), true, t + 1, 1000, 3);
    expect_waiters(c, "s", 1);
    expect_i64(release(c, "s", "h", 0), 0);
    expect_grant(finish(&small), true, t + 2, 1000, 1);
    fg_close(c);
}

/* Waiters queued on a key that held nothing when they came meet the other
 * kind when served: they fail with WRONGTYPE, as on a server. S (a
 * semaphore) waits on "a" behind M (a lock on a and b), and fails when M
 * gets a; N (a lock on s and z) waits on "s" behind P (a semaphore), which
 * gets s when X, ahead of both, times out. */
static void test_wrongtype_while_waiting(void **state) {
    (void)state;
    fg_client *c = open_fake();
    uint64_t t = TOKEN_AT(T0);
    const char *ab[] = {"a", "b"}, *sb[] = {"s", "b"}, *sz[] = {"s", "z"};
    expect_grant(lock(c, "b", "h", opts(LONG)), true, t, LONG, 1);
    call m = {.keys = ab, .nkeys = 2, .owner = "m", .o = opts(1000)};
    m.o.wait_ms = -1;
    start(&m, c, "a", 1);
    call sem = waiting_permits("a", 2, "sem", 1);
    start(&sem, c, "a", 2);

    call x = {.keys = sb, .nkeys = 2, .owner = "x", .o = opts(1000)};
    x.o.wait_ms = 200;
    start(&x, c, "s", 1);
    call p = waiting_permits("s", 2, "p", 1);
    start(&p, c, "s", 2);
    call n = {.keys = sz, .nkeys = 2, .owner = "n", .o = opts(1000)};
    n.o.wait_ms = 10000;
    start(&n, c, "s", 3);

    expect_grant(finish(&x), false, 0, LONG, 0);
    expect_grant(finish(&p), true, t + 1, 1000, 1);
    pthread_join(n.thread, NULL);
    expect_error(n.rc, &n.err, FG_CODE_WRONGTYPE, WRONGTYPE);
    expect_waiters(c, "z", 0);

    expect_i64(unlock(c, "b", "h"), 0);
    expect_grant(finish(&m), true, t + 2, 1000, 2);
    pthread_join(sem.thread, NULL);
    expect_error(sem.rc, &sem.err, FG_CODE_WRONGTYPE, WRONGTYPE);
    expect_waiters(c, "a", 0);
    fg_close(c);
}

/* Threads taking one lock and one semaphore over and over: the lock
 * excludes (a plain counter, which TSan would flag), the semaphore admits at
 * most its capacity. */
typedef struct hammer {
    fg_client *c;
    char owner[16];
    long *counter;
    atomic_int *inside;
    atomic_int *most;
    int failures;
} hammer;

#define HAMMER_THREADS 4
#define HAMMER_ROUNDS  200

static void *run_hammer(void *arg) {
    hammer *h = arg;
    fg_lock_options o = opts(LONG);
    o.wait_ms = -1;
    fg_lock_grant g;
    int64_t left;
    for (int i = 0; i < HAMMER_ROUNDS; i++) {
        if (fg_lock(h->c, "ctr", h->owner, &o, &g, NULL) != FG_CODE_OK || !g.acquired)
            h->failures++;
        (*h->counter)++;
        if (fg_unlock(h->c, "ctr", h->owner, &left, NULL) != FG_CODE_OK || left != 0) h->failures++;
        if (fg_semaphore_acquire(h->c, "pool", 2, h->owner, 1, &o, &g, NULL) != FG_CODE_OK ||
            !g.acquired)
            h->failures++;
        int now = atomic_fetch_add(h->inside, 1) + 1;
        int most = atomic_load(h->most);
        while (now > most && !atomic_compare_exchange_weak(h->most, &most, now))
            ;
        atomic_fetch_sub(h->inside, 1);
        if (fg_semaphore_release(h->c, "pool", h->owner, 0, &left, NULL) != FG_CODE_OK || left != 0)
            h->failures++;
    }
    return NULL;
}

static void test_threads(void **state) {
    (void)state;
    fg_client *c = open_real();
    long counter = 0;
    atomic_int inside = 0, most = 0;
    hammer h[HAMMER_THREADS];
    pthread_t t[HAMMER_THREADS];
    for (int i = 0; i < HAMMER_THREADS; i++) {
        h[i] = (hammer){c, "", &counter, &inside, &most, 0};
        snprintf(h[i].owner, sizeof(h[i].owner), "t%d", i);
        assert_int_equal(pthread_create(&t[i], NULL, run_hammer, &h[i]), 0);
    }
    for (int i = 0; i < HAMMER_THREADS; i++) {
        pthread_join(t[i], NULL);
        expect_i64(h[i].failures, 0);
    }
    expect_i64(counter, HAMMER_THREADS * HAMMER_ROUNDS);
    assert_true(atomic_load(&most) >= 1 && atomic_load(&most) <= 2);
    expect_waiters(c, "ctr", 0);
    fg_close(c);
}

/* ---------------------------------------------------------------- renewal */

typedef struct lost_log {
    atomic_int calls;
    atomic_int why;
    char key[16], owner[16]; /* written before calls is raised */
} lost_log;

static void on_lost(const char *key, const char *owner, fg_lost_reason why, void *arg) {
    lost_log *l = arg;
    snprintf(l->key, sizeof(l->key), "%s", key);
    snprintf(l->owner, sizeof(l->owner), "%s", owner);
    atomic_store(&l->why, (int)why);
    atomic_fetch_add(&l->calls, 1);
}

static fg_lock_options renewed(int64_t lease_ms, lost_log *log) {
    fg_lock_options o = opts(lease_ms);
    o.renew = true;
    o.on_lost = on_lost;
    o.on_lost_arg = log;
    return o;
}

static void expect_lost(lost_log *log, fg_lost_reason why, const char *key, const char *owner) {
    for (int i = 0; i < 10000 && atomic_load(&log->calls) == 0; i++)
        sleep_ms(1);
    expect_i64(atomic_load(&log->calls), 1);
    expect_i64(atomic_load(&log->why), why);
    assert_string_equal(log->key, key);
    assert_string_equal(log->owner, owner);
}

/* A lease of 1000 ms outlives two and a half of them while renewed (every
 * third of it), on one key, a semaphore and a multi-key lock, until
 * released through the client. A 400 ms lease was lost on a loaded machine
 * (two renewals 133 ms apart missed); this one survives a renewal thread
 * kept from running for 600 ms. */
static void test_renewal_keeps_leases(void **state) {
    (void)state;
    fg_client *c = open_real();
    lost_log log = {0};
    fg_lock_options o = renewed(1000, &log);
    fg_lock_grant g;
    const char *xy[] = {"x", "y"};
    assert_true(lock(c, "k", "a", o).acquired);
    expect_i64(fg_semaphore_acquire(c, "s", 1, "a", 1, &o, &g, NULL), FG_CODE_OK);
    assert_true(g.acquired);
    expect_i64(fg_lock_multi(c, xy, 2, "a", &o, &g, NULL), FG_CODE_OK);
    assert_true(g.acquired);
    sleep_ms(2500);
    assert_false(lock(c, "k", "b", opts(1000)).acquired);
    assert_false(acquire(c, "s", 1, "b", 1, 1000).acquired);
    assert_false(lock(c, "y", "b", opts(1000)).acquired);
    expect_i64(atomic_load(&log.calls), 0);
    expect_i64(unlock(c, "k", "a"), 0);
    expect_i64(release(c, "s", "a", 0), 0);
    expect_i64(munlock(c, xy, 2, "a"), 2);
    sleep_ms(300); /* released: no renewal finds them gone */
    expect_i64(atomic_load(&log.calls), 0);
    fg_close(c);
}

/* An on_lost callback that is still running when the client closes: the
 * close's stop came while the renewal thread was in the callback, without
 * the mutex, and the thread then went to sleep until the next renewal of
 * another lock (20 s away), so fg_close waited for it. alarm() turns the
 * wait into a failure. */
static atomic_int in_callback;

static void slow_on_lost(const char *key, const char *owner, fg_lost_reason why, void *arg) {
    (void)key, (void)owner, (void)why, (void)arg;
    atomic_store(&in_callback, 1);
    sleep_ms(200);
}

static void close_hung(int sig) {
    (void)sig;
    static const char msg[] = "fg_close hung: the renewal thread slept through the stop\n";
    (void)!write(2, msg, sizeof(msg) - 1);
    _exit(1);
}

static void test_close_during_on_lost(void **state) {
    (void)state;
    fg_client *c = open_real();
    fg_lock_options o = opts(300);
    o.renew = true;
    o.on_lost = slow_on_lost;
    o.renew_max_ms = 150; /* lost at its second renewal, found by the plan */
    atomic_store(&in_callback, 0);
    assert_true(lock(c, "k", "a", o).acquired);
    fg_lock_options long_lease = opts(60000);
    long_lease.renew = true;
    assert_true(lock(c, "other", "a", long_lease).acquired);
    for (int i = 0; i < 10000 && !atomic_load(&in_callback); i++)
        sleep_ms(1);
    assert_true(atomic_load(&in_callback));
    signal(SIGALRM, close_hung);
    alarm(10);
    fg_close(c);
    alarm(0);
    signal(SIGALRM, SIG_DFL);
}

/* A renewed lease that ran out anyway (here: the injected clock jumped past
 * it) is reported as not held. */
static void test_renewal_reports_a_lost_lock(void **state) {
    (void)state;
    fg_client *c = open_fake();
    lost_log log = {0};
    assert_true(lock(c, "k", "a", renewed(300, &log)).acquired);
    advance_ms(10000);
    expect_lost(&log, FG_LOST_NOT_HELD, "k", "a");
    expect_i64(unlock(c, "k", "a"), -1);
    fg_close(c);
}

/* renew_max_ms ends the renewal; the last lease then runs out by itself. */
static void test_renewal_limit(void **state) {
    (void)state;
    fg_client *c = open_real();
    lost_log log = {0};
    fg_lock_options o = renewed(200, &log);
    o.renew_max_ms = 300;
    assert_true(lock(c, "k", "a", o).acquired);
    expect_lost(&log, FG_LOST_RENEW_LIMIT, "k", "a");
    o = opts(1000);
    o.wait_ms = 10000;
    fg_lock_grant g;
    expect_i64(fg_lock(c, "k", "b", &o, &g, NULL), FG_CODE_OK);
    assert_true(g.acquired);
    fg_close(c);
}

/* fg_close frees held locks, semaphores and registrations (ASan checks). */
static void test_close_with_everything_held(void **state) {
    (void)state;
    fg_client *c = open_fake();
    lost_log log = {0};
    const char *ab[] = {"a", "b"};
    char key[16];
    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        assert_true(lock(c, key, "o", opts(LONG)).acquired);
    }
    for (int i = 0; i < 100; i += 2) {
        snprintf(key, sizeof(key), "k%d", i);
        expect_i64(unlock(c, key, "o"), 0);
    }
    assert_true(acquire(c, "s", 5, "o", 2, LONG).acquired);
    assert_true(lock(c, "r", "o", renewed(LONG, &log)).acquired);
    assert_true(mlock(c, ab, 2, "o", LONG).acquired);
    fg_close(c);
    expect_i64(atomic_load(&log.calls), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lock_unlock_extend),
        cmocka_unit_test(test_reentrant),
        cmocka_unit_test(test_shared_and_exclusive),
        cmocka_unit_test(test_semaphore),
        cmocka_unit_test(test_multi),
        cmocka_unit_test(test_wrongtype),
        cmocka_unit_test(test_bad_inputs),
        cmocka_unit_test(test_leases_end_by_the_injected_clock),
        cmocka_unit_test(test_fifo_hand_off),
        cmocka_unit_test(test_fifo_multi),
        cmocka_unit_test(test_fifo_multi_order),
        cmocka_unit_test(test_upgrade_while_waiting),
        cmocka_unit_test(test_wait_timeout),
        cmocka_unit_test(test_timeout_at_the_head_serves_the_queue),
        cmocka_unit_test(test_grant_at_lease_end),
        cmocka_unit_test(test_shorter_lease_wakes_waiters),
        cmocka_unit_test(test_semaphore_queue),
        cmocka_unit_test(test_wrongtype_while_waiting),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_renewal_keeps_leases),
        cmocka_unit_test(test_renewal_reports_a_lost_lock),
        cmocka_unit_test(test_close_during_on_lost),
        cmocka_unit_test(test_renewal_limit),
        cmocka_unit_test(test_close_with_everything_held),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
