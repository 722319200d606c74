/*
 * test_lock.c - locks, read/write locks and semaphores (core/lock.c): every
 * outcome at chosen times with exact values, the holder list and its
 * memory, the storable rules one by one, fencing tokens, a model that
 * replays random traffic, and the cost of large states counted in index
 * nodes visited (the state's `steps` counter), never timed.
 *
 * The allocator moves every block and can fail on demand, and every test
 * must give back all it took.
 */
#include "test_heap.h"
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checked.h"
#include "lock.h"

#define SEC_US 1000000LL
#define T0 T2024_US

static const char UPGRADE[] =
    "ERR owner holds a shared lock: release it before asking for the exclusive lock";
static const char LIMIT[] = "ERR reentrancy limit reached";
static const char OVER[] = "ERR permits exceed the capacity";
static const char INVALID[] = "ERR invalid lock request";
static const char WRONGTYPE[] = "WRONGTYPE Operation against a key holding the wrong kind of value";

/* ------------------------------------------------------------- helpers */

static fg_lock_request lock_req(const char *owner, uint8_t mode) {
    return (fg_lock_request){
        .kind = FG_LOCK_KIND_LOCK,
        .mode = mode,
        .owner = owner,
        .owner_len = strlen(owner),
        .count = 1,
        .lease_us = 10 * SEC_US,
    };
}

static fg_lock_request sem_req(const char *owner, int64_t count, int64_t capacity) {
    return (fg_lock_request){
        .kind = FG_LOCK_KIND_SEMAPHORE,
        .mode = FG_LOCK_EXCLUSIVE,
        .owner = owner,
        .owner_len = strlen(owner),
        .count = count,
        .capacity = capacity,
        .lease_us = 10 * SEC_US,
    };
}

static fg_lock_decision decide(const fg_lock_state *s, const fg_lock_request *r, int64_t now) {
    fg_lock_decision d;
    memset(&d, 0x5A, sizeof(d));
    fg_lock_decide(s, r, now, &d);
    return d;
}

/* Decides, expects a grant or a re-entry, and puts the holder as the
 * module would: a fresh token for a grant, the kept one for a re-entry. */
static fg_lock_decision take(fg_lock_state *s, const fg_lock_request *r, int64_t now,
                             uint64_t token) {
    fg_lock_decision d = decide(s, r, now);
    assert_true(d.outcome == FG_LOCK_GRANTED || d.outcome == FG_LOCK_REENTERED);
    fg_lock_holder h = d.holder;
    if (d.outcome == FG_LOCK_GRANTED) {
        expect_i64(h.token, 0);
        h.token = token;
    }
    int64_t capacity = r->kind == FG_LOCK_KIND_SEMAPHORE ? r->capacity : 0;
    expect_status(fg_lock_put(s, r->kind, capacity, &h, &alloc), FG_OK);
    assert_true(fg_lock_state_storable(s));
    return d;
}

static void take_lock(fg_lock_state *s, const char *owner, uint8_t mode, int64_t now,
                      int64_t lease_us, uint64_t token) {
    fg_lock_request r = lock_req(owner, mode);
    r.lease_us = lease_us;
    expect_i64(take(s, &r, now, token).outcome, FG_LOCK_GRANTED);
}

static void take_permits(fg_lock_state *s, const char *owner, int64_t count, int64_t capacity,
                         int64_t now, int64_t lease_us, uint64_t token) {
    fg_lock_request r = sem_req(owner, count, capacity);
    r.lease_us = lease_us;
    expect_i64(take(s, &r, now, token).outcome, FG_LOCK_GRANTED);
}

/* The i-th holder in grant order. */
static const fg_lock_holder *holder_at(const fg_lock_state *s, uint32_t i) {
    assert_true(i < s->len);
    const fg_lock_holder *h = fg_lock_first(s);
    while (i-- > 0) h = fg_lock_next(h);
    assert_non_null(h);
    return h;
}

static void expect_holder(const fg_lock_state *s, uint32_t i, const char *owner, uint8_t mode,
                          int64_t count, int64_t expires_us, uint64_t token) {
    const fg_lock_holder *h = holder_at(s, i);
    expect_i64(h->owner_len, strlen(owner));
    assert_memory_equal(h->owner, owner, h->owner_len);
    expect_i64(h->mode, mode);
    expect_i64(h->count, count);
    expect_i64(h->expires_us, expires_us);
    expect_i64(h->token, token);
}

static void expect_busy(fg_lock_decision d, int64_t until_us) {
    expect_i64(d.outcome, FG_LOCK_BUSY);
    expect_i64(d.busy_until_us, until_us);
    assert_null(d.why);
    assert_null(d.holder.owner);
}

static void expect_never(fg_lock_decision d, const char *why) {
    expect_i64(d.outcome, FG_LOCK_NEVER);
    assert_non_null(d.why);
    assert_string_equal(d.why, why);
    expect_i64(d.busy_until_us, 0);
    assert_null(d.holder.owner);
}

/* The holder a decision describes, field by field. */
static void expect_decided(fg_lock_decision d, fg_lock_outcome outcome, const fg_lock_request *r,
                           uint8_t mode, int64_t count, int64_t expires_us, uint64_t token) {
    expect_i64(d.outcome, outcome);
    assert_ptr_equal(d.holder.owner, r->owner);
    expect_i64(d.holder.owner_len, r->owner_len);
    expect_i64(d.holder.mode, mode);
    expect_i64(d.holder.count, count);
    expect_i64(d.holder.expires_us, expires_us);
    expect_i64(d.holder.token, token);
    expect_i64(d.busy_until_us, 0);
    assert_null(d.why);
}

/* A deep copy of a state (outside the test heap), to check that a call
 * changed nothing: its fields, and each holder's address and contents. */
typedef struct snapshot {
    fg_lock_state s;
    const fg_lock_holder *at[64];
    fg_lock_holder holders[64];
    char owners[64][FG_LOCK_OWNER_MAX];
} snapshot;

static snapshot *take_snapshot(const fg_lock_state *s) {
    snapshot *snap = calloc(1, sizeof(*snap));
    assert_non_null(snap);
    assert_true(s->len <= 64);
    snap->s = *s;
    uint32_t i = 0;
    for (const fg_lock_holder *h = fg_lock_first(s); h != NULL; h = fg_lock_next(h), i++) {
        snap->at[i] = h;
        snap->holders[i] = *h;
        memcpy(snap->owners[i], h->owner, h->owner_len);
    }
    expect_i64(i, s->len);
    return snap;
}

static void expect_unchanged(const fg_lock_state *s, snapshot *snap) {
    expect_i64(s->kind, snap->s.kind);
    expect_i64(s->capacity, snap->s.capacity);
    expect_i64(s->used, snap->s.used);
    expect_i64(s->len, snap->s.len);
    expect_i64(s->grants, snap->s.grants);
    assert_ptr_equal(s->first, snap->s.first);
    assert_ptr_equal(s->last, snap->s.last);
    assert_ptr_equal(s->by_owner, snap->s.by_owner);
    assert_ptr_equal(s->by_end, snap->s.by_end);
    assert_true(s->len == 0 || fg_lock_state_storable(s));
    for (uint32_t i = 0; i < s->len; i++) {
        const fg_lock_holder *h = holder_at(s, i), *was = &snap->holders[i];
        assert_ptr_equal(h, snap->at[i]);
        assert_ptr_equal(h->owner, was->owner);
        expect_i64(h->owner_len, was->owner_len);
        assert_memory_equal(h->owner, snap->owners[i], h->owner_len);
        expect_i64(h->mode, was->mode);
        expect_i64(h->count, was->count);
        expect_i64(h->expires_us, was->expires_us);
        expect_i64(h->token, was->token);
    }
    free(snap);
}

/* ----------------------------------------------------- exclusive locks */

static void test_a_free_lock_is_granted(void **state) {
    (void)state;
    fg_lock_state s = {0};
    fg_lock_request r = lock_req("alice", FG_LOCK_EXCLUSIVE);
    expect_decided(decide(&s, &r, T0), FG_LOCK_GRANTED, &r, FG_LOCK_EXCLUSIVE, 1,
                   T0 + 10 * SEC_US, 0);
    /* No state at all is the same as an empty one. */
    expect_decided(decide(NULL, &r, T0), FG_LOCK_GRANTED, &r, FG_LOCK_EXCLUSIVE, 1,
                   T0 + 10 * SEC_US, 0);
    r.mode = FG_LOCK_SHARED;
    expect_decided(decide(&s, &r, T0 + 1), FG_LOCK_GRANTED, &r, FG_LOCK_SHARED, 1,
                   T0 + 1 + 10 * SEC_US, 0);

    take(&s, &r, T0, 7);
    expect_i64(s.kind, FG_LOCK_KIND_LOCK);
    expect_i64(s.capacity, 0);
    expect_i64(s.used, 1);
    expect_i64(s.len, 1);
    expect_holder(&s, 0, "alice", FG_LOCK_SHARED, 1, T0 + 10 * SEC_US, 7);
    fg_lock_clear(&s, &alloc);
}

static void test_a_held_lock_is_busy_until_its_lease_ends(void **state) {
    (void)state;
    fg_lock_state s = {0};
    take_lock(&s, "alice", FG_LOCK_EXCLUSIVE, T0, 30 * SEC_US, 1);
    fg_lock_request bob = lock_req("bob", FG_LOCK_EXCLUSIVE);
    expect_busy(decide(&s, &bob, T0 + 5 * SEC_US), T0 + 30 * SEC_US);
    bob.mode = FG_LOCK_SHARED;
    expect_busy(decide(&s, &bob, T0 + 5 * SEC_US), T0 + 30 * SEC_US);
    bob.reentrant = true; /* bob holds nothing: reentrant changes nothing */
    expect_busy(decide(&s, &bob, T0 + 5 * SEC_US), T0 + 30 * SEC_US);
    /* One microsecond before the end; then pruned at the end: granted. */
    expect_busy(decide(&s, &bob, T0 + 30 * SEC_US - 1), T0 + 30 * SEC_US);
    expect_i64(fg_lock_prune(&s, T0 + 30 * SEC_US, NULL, NULL, &alloc), 1);
    expect_i64(decide(&s, &bob, T0 + 30 * SEC_US).outcome, FG_LOCK_GRANTED);
    fg_lock_clear(&s, &alloc);
}

/* What a refused request answers as its retry time: the head's view,
 * whoever waits ahead; nothing for an empty state or another kind. */
static void test_busy_until_is_the_heads_view(void **state) {
    (void)state;
    fg_lock_state s = {0};
    fg_lock_request bob = lock_req("bob", FG_LOCK_EXCLUSIVE);
    expect_i64(fg_lock_busy_until(NULL, &bob, T0), 0);
    expect_i64(fg_lock_busy_until(&s, &bob, T0), 0);
    take_lock(&s, "alice", FG_LOCK_EXCLUSIVE, T0, 30 * SEC_US, 1);
    bob.queued_ahead = true;
    expect_i64(fg_lock_busy_until(&s, &bob, T0 + SEC_US), T0 + 30 * SEC_US);
    fg_lock_request alice = lock_req("alice", FG_LOCK_EXCLUSIVE);
    alice.reentrant = true; /* would re-enter: not busy */
    expect_i64(fg_lock_busy_until(&s, &alice, T0 + SEC_US), 0);
    fg_lock_request sem = sem_req("carol", 1, 2);
    expect_i64(fg_lock_busy_until(&s, &sem, T0 + SEC_US), 0);
    fg_lock_clear(&s, &alloc);
    /* A reader behind a queue would share with the readers as its head. */
    take_lock(&s, "alice", FG_LOCK_SHARED, T0, 30 * SEC_US, 1);
    fg_lock_request dave = lock_req("dave", FG_LOCK_SHARED);
    dave.queued_ahead = true;
    expect_i64(decide(&s, &dave, T0).outcome, FG_LOCK_BUSY);
    expect_i64(fg_lock_busy_until(&s, &dave, T0), 0);
    fg_lock_clear(&s, &alloc);
}

/* FG.EXTEND: the lease ends lease_us from now, sooner or later, and the
 * lease order follows. */
static void test_extend_moves_the_lease_either_way(void **state) {
    (void)state;
    fg_lock_state s = {0};
    bool shortened = true;
    assert_null(fg_lock_extend(&s, "alice", 5, T0, SEC_US, &shortened));
    take_lock(&s, "alice", FG_LOCK_SHARED, T0, 30 * SEC_US, 1);
    take_lock(&s, "bob", FG_LOCK_SHARED, T0, 20 * SEC_US, 2);
    expect_i64(fg_lock_next_expiry_us(&s), T0 + 20 * SEC_US);
    const fg_lock_holder *h = fg_lock_extend(&s, "alice", 5, T0 + SEC_US, 5 * SEC_US, &shortened);
    assert_ptr_equal(h, holder_at(&s, 0));
    assert_true(shortened);
    expect_holder(&s, 0, "alice", FG_LOCK_SHARED, 1, T0 + 6 * SEC_US, 1);
    expect_i64(fg_lock_next_expiry_us(&s), T0 + 6 * SEC_US);
    expect_i64(fg_lock_expires_at_us(&s), T0 + 20 * SEC_US);
    assert_non_null(fg_lock_extend(&s, "alice", 5, T0 + 2 * SEC_US, 60 * SEC_US, &shortened));
    assert_false(shortened);
    expect_i64(fg_lock_expires_at_us(&s), T0 + 62 * SEC_US);
    assert_null(fg_lock_extend(&s, "carol", 5, T0, SEC_US, &shortened));
    assert_true(fg_lock_state_storable(&s));
    fg_lock_clear(&s, &alloc);
}

/* Replies round the time left up to the millisecond, and never go below 0
 * or overflow. */
static void test_ttl_ms_rounds_up(void **state) {
    (void)state;
    expect_i64(fg_lock_ttl_ms(T0, T0), 0);
    expect_i64(fg_lock_ttl_ms(T0 - 1, T0), 0);
    expect_i64(fg_lock_ttl_ms(T0 + 1, T0), 1);
    expect_i64(fg_lock_ttl_ms(T0 + 1000, T0), 1);
    expect_i64(fg_lock_ttl_ms(T0 + 1001, T0), 2);
    expect_i64(fg_lock_ttl_ms(INT64_MAX, -1000), INT64_MAX / 1000);
}

/* ------------------------------------------------------ readers/writers */

static void test_readers_share_and_a_writer_waits_for_the_last(void **state) {
    (void)state;
    fg_lock_state s = {0};
    take_lock(&s, "r1", FG_LOCK_SHARED, T0, 20 * SEC_US, 1);
    take_lock(&s, "r2", FG_LOCK_SHARED, T0, 50 * SEC_US, 2);
    take_lock(&s, "r3", FG_LOCK_SHARED, T0, 5 * SEC_US, 3);
    expect_i64(s.used, 3);
    fg_lock_request w = lock_req("w", FG_LOCK_EXCLUSIVE);
    expect_busy(decide(&s, &w, T0 + 1), T0 + 50 * SEC_US);
    /* Another reader is welcome. */
    fg_lock_request r4 = lock_req("r4", FG_LOCK_SHARED);
    expect_decided(decide(&s, &r4, T0 + 1), FG_LOCK_GRANTED, &r4, FG_LOCK_SHARED, 1,
                   T0 + 1 + 10 * SEC_US, 0);
    /* The latest reader leaves first: the writer now waits for r1. */
    expect_i64(fg_lock_release(&s, "r2", 2, 1, &alloc), 0);
    expect_busy(decide(&s, &w, T0 + 1), T0 + 20 * SEC_US);
    fg_lock_clear(&s, &alloc);
}

static void test_a_writer_holds_off_readers(void **state) {
    (void)state;
    fg_lock_state s = {0};
    take_lock(&s, "w", FG_LOCK_EXCLUSIVE, T0, 8 * SEC_US, 9);
    fg_lock_request r = lock_req("r", FG_LOCK_SHARED);
    expect_busy(decide(&s, &r, T0 + 3), T0 + 8 * SEC_US);
    fg_lock_clear(&s, &alloc);
}

/* ----------------------------------------------------------------- FIFO */

static void test_someone_waiting_ahead_keeps_a_newcomer_out(void **state) {
    (void)state;
    fg_lock_state s = {0};
    fg_lock_request r = lock_req("newcomer", FG_LOCK_EXCLUSIVE);
    r.queued_ahead = true;
    /* Free lock, older waiter: only the queue is in the way. */
    expect_busy(decide(&s, &r, T0), 0);
    expect_busy(decide(NULL, &r, T0), 0);
    /* Readers hold, a writer waits: a new reader does not overtake it. */
    take_lock(&s, "r1", FG_LOCK_SHARED, T0, 10 * SEC_US, 1);
    r.mode = FG_LOCK_SHARED;
    expect_busy(decide(&s, &r, T0), 0);
    r.queued_ahead = false;
    expect_i64(decide(&s, &r, T0).outcome, FG_LOCK_GRANTED);
    /* Holders in the way and a queue: the holders' lease end. */
    r.mode = FG_LOCK_EXCLUSIVE;
    r.queued_ahead = true;
    expect_busy(decide(&s, &r, T0), T0 + 10 * SEC_US);
    fg_lock_clear(&s, &alloc);
}

static void test_a_reentry_ignores_the_queue(void **state) {
    (void)state;
    fg_lock_state s = {0};
    take_lock(&s, "alice", FG_LOCK_EXCLUSIVE, T0, 10 * SEC_US, 5);
    fg_lock_request r = lock_req("alice", FG_LOCK_EXCLUSIVE);
    r.reentrant = true;
    r.queued_ahead = true;
    expect_decided(decide(&s, &r, T0 + 1), FG_LOCK_REENTERED, &r, FG_LOCK_EXCLUSIVE, 2,
                   T0 + 1 + 10 * SEC_US, 5);
    /* Without reentrant the queue (and its own hold) is in the way. */
    r.reentrant = false;
    expect_busy(decide(&s, &r, T0 + 1), T0 + 10 * SEC_US);
    fg_lock_clear(&s, &alloc);
}

/* ----------------------------------------------------------- reentrancy */

static void test_reentry_counts_and_keeps_the_later_lease(void **state) {
    (void)state;
    fg_lock_state s = {0};
    take_lock(&s, "alice", FG_LOCK_EXCLUSIVE, T0, 60 * SEC_US, 11);
    fg_lock_request r = lock_req("alice", FG_LOCK_EXCLUSIVE);
    r.reentrant = true;
    /* A shorter lease keeps the current end. */
    r.lease_us = 5 * SEC_US;
    fg_lock_decision d = take(&s, &r, T0 + SEC_US, 99);
    expect_decided(d, FG_LOCK_REENTERED, &r, FG_LOCK_EXCLUSIVE, 2, T0 + 60 * SEC_US, 11);
    expect_holder(&s, 0, "alice", FG_LOCK_EXCLUSIVE, 2, T0 + 60 * SEC_US, 11);
    /* A longer one moves it. */
    r.lease_us = 100 * SEC_US;
    d = take(&s, &r, T0 + 2 * SEC_US, 99);
    expect_decided(d, FG_LOCK_REENTERED, &r, FG_LOCK_EXCLUSIVE, 3, T0 + 102 * SEC_US, 11);
    expect_holder(&s, 0, "alice", FG_LOCK_EXCLUSIVE, 3, T0 + 102 * SEC_US, 11);
    expect_i64(s.used, 3);
    expect_i64(s.len, 1);
    /* Each unlock removes one hold. */
    expect_i64(fg_lock_release(&s, "alice", 5, 1, &alloc), 2);
    expect_i64(s.used, 2);
    expect_i64(fg_lock_release(&s, "alice", 5, 1, &alloc), 1);
    expect_i64(fg_lock_release(&s, "alice", 5, 1, &alloc), 0);
    expect_i64(s.len, 0);
    expect_i64(s.used, 0);
    expect_i64(fg_lock_release(&s, "alice", 5, 1, &alloc), -1);
    fg_lock_clear(&s, &alloc);
}

static void test_a_writer_may_read_and_stays_a_writer(void **state) {
    (void)state;
    fg_lock_state s = {0};
    take_lock(&s, "w", FG_LOCK_EXCLUSIVE, T0, 10 * SEC_US, 3);
    fg_lock_request r = lock_req("w", FG_LOCK_SHARED);
    r.reentrant = true;
    fg_lock_decision d = take(&s, &r, T0 + 1, 0);
    expect_decided(d, FG_LOCK_REENTERED, &r, FG_LOCK_EXCLUSIVE, 2, T0 + 1 + 10 * SEC_US, 3);
    expect_holder(&s, 0, "w", FG_LOCK_EXCLUSIVE, 2, T0 + 1 + 10 * SEC_US, 3);
    /* Still a writer: readers wait. */
    fg_lock_request other = lock_req("x", FG_LOCK_SHARED);
    expect_busy(decide(&s, &other, T0 + 2), T0 + 1 + 10 * SEC_US);
    fg_lock_clear(&s, &alloc);
}

static void test_a_reader_reenters_beside_others(void **state) {
    (void)state;
    fg_lock_state s = {0};
    take_lock(&s, "r1", FG_LOCK_SHARED, T0, 10 * SEC_US, 1);
    take_lock(&s, "r2", FG_LOCK_SHARED, T0, 10 * SEC_US, 2);
    fg_lock_request r = lock_req("r1", FG_LOCK_SHARED);
    r.reentrant = true;
    take(&s, &r, T0 + 7, 0);
    expect_holder(&s, 0, "r1", FG_LOCK_SHARED, 2, T0 + 7 + 10 * SEC_US, 1);
    expect_holder(&s, 1, "r2", FG_LOCK_SHARED, 1, T0 + 10 * SEC_US, 2);
    expect_i64(s.used, 3);
    fg_lock_clear(&s, &alloc);
}

static void test_without_reentrant_an_owner_waits_for_itself(void **state) {
    (void)state;
    fg_lock_state s = {0};
    /* A writer asking again (a retry after a lost reply). */
    take_lock(&s, "w", FG_LOCK_EXCLUSIVE, T0, 10 * SEC_US, 1);
    fg_lock_request r = lock_req("w", FG_LOCK_EXCLUSIVE);
    expect_busy(decide(&s, &r, T0 + 1), T0 + 10 * SEC_US);
    r.mode = FG_LOCK_SHARED;
    expect_busy(decide(&s, &r, T0 + 1), T0 + 10 * SEC_US);
    fg_lock_clear(&s, &alloc);

    /* A reader asking again: its own hold is in the way, other readers
     * are not, even when they last longer. */
    take_lock(&s, "r1", FG_LOCK_SHARED, T0, 10 * SEC_US, 1);
    take_lock(&s, "r2", FG_LOCK_SHARED, T0, 90 * SEC_US, 2);
    fg_lock_request again = lock_req("r1", FG_LOCK_SHARED);
    expect_busy(decide(&s, &again, T0 + 1), T0 + 10 * SEC_US);
    fg_lock_clear(&s, &alloc);
}

static void test_an_upgrade_is_refused(void **state) {
    (void)state;
    fg_lock_state s = {0};
    take_lock(&s, "r", FG_LOCK_SHARED, T0, 10 * SEC_US, 1);
    fg_lock_request r = lock_req("r", FG_LOCK_EXCLUSIVE);
    expect_never(decide(&s, &r, T0), UPGRADE);
    r.reentrant = true;
    expect_never(decide(&s, &r, T0), UPGRADE);
    r.queued_ahead = true;
    expect_never(decide(&s, &r, T0), UPGRADE);
    /* With another reader too. */
    take_lock(&s, "r2", FG_LOCK_SHARED, T0, 10 * SEC_US, 2);
    expect_never(decide(&s, &r, T0), UPGRADE);
    fg_lock_clear(&s, &alloc);
}

static void test_the_reentrancy_limit(void **state) {
    (void)state;
    fg_lock_state s = {0};
    fg_lock_holder h = {"alice", 5, FG_LOCK_EXCLUSIVE, FG_LOCK_MAX_REENTRY - 1,
                        T0 + 10 * SEC_US, 4};
    expect_status(fg_lock_put(&s, FG_LOCK_KIND_LOCK, 0, &h, &alloc), FG_OK);
    fg_lock_request r = lock_req("alice", FG_LOCK_EXCLUSIVE);
    r.reentrant = true;
    fg_lock_decision d = take(&s, &r, T0, 0);
    expect_decided(d, FG_LOCK_REENTERED, &r, FG_LOCK_EXCLUSIVE, FG_LOCK_MAX_REENTRY,
                   T0 + 10 * SEC_US, 4);
    expect_never(decide(&s, &r, T0), LIMIT);
    r.mode = FG_LOCK_SHARED;
    expect_never(decide(&s, &r, T0), LIMIT);
    fg_lock_clear(&s, &alloc);
}

/* ------------------------------------------------------------ semaphores */

static void test_permits_up_to_the_capacity(void **state) {
    (void)state;
    fg_lock_state s = {0};
    fg_lock_request a = sem_req("a", 2, 5);
    expect_decided(decide(&s, &a, T0), FG_LOCK_GRANTED, &a, FG_LOCK_EXCLUSIVE, 2,
                   T0 + 10 * SEC_US, 0);
    take_permits(&s, "a", 2, 5, T0, 10 * SEC_US, 1);
    take_permits(&s, "b", 3, 5, T0 + SEC_US, 20 * SEC_US, 2);
    expect_i64(s.kind, FG_LOCK_KIND_SEMAPHORE);
    expect_i64(s.capacity, 5);
    expect_i64(s.used, 5);
    /* Full: one more permit waits for a's lease (2 permits back). */
    fg_lock_request c = sem_req("c", 1, 5);
    expect_busy(decide(&s, &c, T0 + 2), T0 + 10 * SEC_US);
    /* Three need b's permits too. */
    c.count = 3;
    expect_busy(decide(&s, &c, T0 + 2), T0 + 21 * SEC_US);
    c.count = 5;
    expect_busy(decide(&s, &c, T0 + 2), T0 + 21 * SEC_US);
    c.count = 6;
    expect_never(decide(&s, &c, T0 + 2), OVER);
    c.count = 1;
    c.queued_ahead = true;
    expect_busy(decide(&s, &c, T0 + 2), T0 + 10 * SEC_US);
    fg_lock_clear(&s, &alloc);
}

static void test_busy_until_counts_permits_in_lease_order(void **state) {
    (void)state;
    fg_lock_state s = {0};
    /* Grant order differs from lease order; two leases end together. */
    take_permits(&s, "a", 2, 10, T0, 30 * SEC_US, 1); /* ends +30 */
    take_permits(&s, "b", 1, 10, T0, 10 * SEC_US, 2); /* ends +10 */
    take_permits(&s, "c", 2, 10, T0, 20 * SEC_US, 3); /* ends +20 */
    take_permits(&s, "d", 3, 10, T0, 20 * SEC_US, 4); /* ends +20 */
    take_permits(&s, "e", 1, 10, T0, 40 * SEC_US, 5); /* ends +40 */
    expect_i64(s.used, 9);
    /* Back by +10: 1, by +20: 6, by +30: 8, by +40: 9. */
    const int64_t at10 = T0 + 10 * SEC_US, at20 = T0 + 20 * SEC_US, at30 = T0 + 30 * SEC_US,
                  at40 = T0 + 40 * SEC_US;
    /* count c needs c - 1 permits back */
    int64_t want[11] = {0, 0, at10, at20, at20, at20, at20, at20, at30, at30, at40};
    for (int64_t count = 1; count <= 10; count++) {
        fg_lock_request r = sem_req("z", count, 10);
        fg_lock_decision d = decide(&s, &r, T0 + 1);
        if (count == 1)
            expect_i64(d.outcome, FG_LOCK_GRANTED);
        else
            expect_busy(d, want[count]);
    }
    /* A capacity lowered to 4: 9 held, so 6 must come back for 1. */
    fg_lock_request r = sem_req("z", 1, 4);
    expect_busy(decide(&s, &r, T0 + 1), T0 + 20 * SEC_US);
    r.count = 4; /* all 9 */
    expect_busy(decide(&s, &r, T0 + 1), T0 + 40 * SEC_US);
    fg_lock_clear(&s, &alloc);
}

static void test_leases_far_apart_and_one_microsecond_apart(void **state) {
    (void)state;
    fg_lock_state s = {0};
    const int64_t far = FG_LOCK_MAX_LEASE_MS * 1000;
    take_permits(&s, "a", 1, 3, 1, 1, 1);       /* ends at 2 */
    take_permits(&s, "b", 1, 3, 1, 2, 2);       /* ends at 3 */
    take_permits(&s, "c", 1, 3, 1, far, 3);     /* ends at 1 + far */
    fg_lock_request r = sem_req("z", 1, 3);
    expect_busy(decide(&s, &r, 1), 2);
    r.count = 2;
    expect_busy(decide(&s, &r, 1), 3);
    r.count = 3;
    expect_busy(decide(&s, &r, 1), 1 + far);
    fg_lock_clear(&s, &alloc);
}

static void test_an_owner_adds_permits(void **state) {
    (void)state;
    fg_lock_state s = {0};
    take_permits(&s, "a", 2, 5, T0, 30 * SEC_US, 8);
    take_permits(&s, "b", 1, 5, T0, 30 * SEC_US, 9);
    fg_lock_request r = sem_req("a", 2, 5);
    r.lease_us = 5 * SEC_US; /* shorter: the lease stays */
    fg_lock_decision d = take(&s, &r, T0 + SEC_US, 0);
    expect_decided(d, FG_LOCK_REENTERED, &r, FG_LOCK_EXCLUSIVE, 4, T0 + 30 * SEC_US, 8);
    expect_holder(&s, 0, "a", FG_LOCK_EXCLUSIVE, 4, T0 + 30 * SEC_US, 8);
    expect_i64(s.used, 5);
    /* Over the capacity: a waits like anybody (its own lease included). */
    r.count = 1;
    expect_busy(decide(&s, &r, T0 + SEC_US), T0 + 30 * SEC_US);
    /* The queue applies to an owner adding permits. */
    expect_i64(fg_lock_release(&s, "a", 1, 3, &alloc), 1);
    r.queued_ahead = true;
    expect_busy(decide(&s, &r, T0 + SEC_US), 0);
    /* reentrant is not looked at. */
    r.queued_ahead = false;
    r.reentrant = true;
    r.lease_us = 60 * SEC_US;
    d = take(&s, &r, T0 + 2 * SEC_US, 0);
    expect_decided(d, FG_LOCK_REENTERED, &r, FG_LOCK_EXCLUSIVE, 2, T0 + 62 * SEC_US, 8);
    fg_lock_clear(&s, &alloc);
}

static void test_capacity_follows_the_latest_put(void **state) {
    (void)state;
    fg_lock_state s = {0};
    take_permits(&s, "a", 3, 10, T0, 30 * SEC_US, 1);
    expect_i64(s.capacity, 10);
    take_permits(&s, "b", 1, 4, T0, 30 * SEC_US, 2);
    expect_i64(s.capacity, 4);
    expect_i64(s.used, 4);
    /* A put with a capacity below what is held. */
    fg_lock_holder h = *holder_at(&s, 1);
    expect_status(fg_lock_put(&s, FG_LOCK_KIND_SEMAPHORE, 2, &h, &alloc), FG_OK);
    expect_i64(s.capacity, 2); /* used 4 > capacity 2: storable, nothing taken away */
    assert_true(fg_lock_state_storable(&s));
    fg_lock_clear(&s, &alloc);
}

/* ----------------------------------------------------- kinds and guards */

static void test_a_request_of_the_other_kind(void **state) {
    (void)state;
    fg_lock_state s = {0};
    take_permits(&s, "a", 1, 3, T0, 10 * SEC_US, 1);
    fg_lock_request r = lock_req("b", FG_LOCK_EXCLUSIVE);
    expect_never(decide(&s, &r, T0), WRONGTYPE);
    r = lock_req("a", FG_LOCK_SHARED);
    expect_never(decide(&s, &r, T0), WRONGTYPE);
    /* Emptied, it takes any kind. */
    expect_i64(fg_lock_release(&s, "a", 1, 0, &alloc), 0);
    expect_i64(s.kind, FG_LOCK_KIND_SEMAPHORE);
    expect_i64(decide(&s, &r, T0).outcome, FG_LOCK_GRANTED);
    take(&s, &r, T0, 2);
    expect_i64(s.kind, FG_LOCK_KIND_LOCK);
    expect_i64(s.capacity, 0);
    fg_lock_request p = sem_req("c", 1, 3);
    expect_never(decide(&s, &p, T0), WRONGTYPE);
    fg_lock_clear(&s, &alloc);
}

/* A multi-key lock: all keys free grants, a key in the way (a holder, a
 * waiter) makes it busy until the latest lease end among them, and a key
 * that can never be granted fails it at once. */
static void test_a_multi_key_lock_is_all_or_nothing(void **state) {
    (void)state;
    fg_lock_state a = {0}, b = {0}, sem = {0};
    const fg_lock_state *keys[3] = {&a, NULL, &b};
    fg_lock_request r = lock_req("m", FG_LOCK_EXCLUSIVE);
    fg_lock_decision d;
    fg_lock_decide_all(keys, NULL, 3, &r, T0, &d);
    expect_i64(d.outcome, FG_LOCK_GRANTED);
    expect_i64(d.holder.expires_us, T0 + 10 * SEC_US);
    expect_i64(d.holder.token, 0);
    take_lock(&a, "x", FG_LOCK_EXCLUSIVE, T0, 10 * SEC_US, 1);
    fg_lock_request later = lock_req("y", FG_LOCK_SHARED);
    later.lease_us = 20 * SEC_US;
    take(&b, &later, T0, 2);
    fg_lock_decide_all(keys, NULL, 3, &r, T0, &d);
    expect_i64(d.outcome, FG_LOCK_BUSY);
    expect_i64(d.busy_until_us, T0 + 20 * SEC_US);
    /* Only a queue in the way: busy, with no lease end to wait for. */
    fg_lock_state *none[2] = {NULL, NULL};
    bool queued[2] = {false, true};
    fg_lock_decide_all((const fg_lock_state *const *)none, queued, 2, &r, T0, &d);
    expect_i64(d.outcome, FG_LOCK_BUSY);
    expect_i64(d.busy_until_us, 0);
    /* A semaphore among the keys fails the request, even behind a busy key. */
    take_permits(&sem, "s", 1, 3, T0, 10 * SEC_US, 3);
    const fg_lock_state *mixed[2] = {&a, &sem};
    fg_lock_decide_all(mixed, NULL, 2, &r, T0, &d);
    expect_never(d, WRONGTYPE);
    fg_lock_clear(&a, &alloc);
    fg_lock_clear(&b, &alloc);
    fg_lock_clear(&sem, &alloc);
}

static void test_malformed_requests_are_never_granted(void **state) {
    (void)state;
    char longest[FG_LOCK_OWNER_MAX + 1];
    memset(longest, 'o', sizeof(longest));
    fg_lock_state s = {0};
    enum { LOCKS = 11, ALL = 16 };
    fg_lock_request bad[ALL];
    for (int i = 0; i < ALL; i++)
        bad[i] = i < LOCKS ? lock_req("a", FG_LOCK_EXCLUSIVE) : sem_req("a", 1, 3);
    bad[0].owner_len = 0;
    bad[1].owner = longest;
    bad[1].owner_len = FG_LOCK_OWNER_MAX + 1;
    bad[2].owner = NULL;
    bad[3].lease_us = 0;
    bad[4].lease_us = -5;
    bad[5].lease_us = FG_LOCK_MAX_LEASE_MS * 1000 + 1;
    bad[6].kind = 0;
    bad[7].kind = 3;
    bad[8].mode = 2;
    bad[9].count = 2;
    bad[10].count = 0;
    bad[11].mode = FG_LOCK_SHARED;
    bad[12].count = 0;
    bad[13].count = -1;
    bad[14].capacity = 0;
    bad[15].capacity = FG_LOCK_MAX_CAPACITY + 1;
    for (int i = 0; i < ALL; i++) expect_never(decide(&s, &bad[i], T0), INVALID);
    expect_never(decide(&s, NULL, T0), INVALID);
    fg_lock_decide(&s, &bad[0], T0, NULL); /* nowhere to answer: nothing happens */

    /* The edges that are fine. */
    fg_lock_request ok = lock_req("a", FG_LOCK_EXCLUSIVE);
    ok.owner = longest;
    ok.owner_len = FG_LOCK_OWNER_MAX;
    ok.lease_us = FG_LOCK_MAX_LEASE_MS * 1000;
    expect_decided(decide(&s, &ok, T0), FG_LOCK_GRANTED, &ok, FG_LOCK_EXCLUSIVE, 1,
                   T0 + FG_LOCK_MAX_LEASE_MS * 1000, 0);
    ok = sem_req("a", FG_LOCK_MAX_CAPACITY, FG_LOCK_MAX_CAPACITY);
    expect_i64(decide(&s, &ok, T0).outcome, FG_LOCK_GRANTED);
    ok.lease_us = 1;
    expect_decided(decide(&s, &ok, 0), FG_LOCK_GRANTED, &ok, FG_LOCK_EXCLUSIVE,
                   FG_LOCK_MAX_CAPACITY, 1, 0);
}

static void test_lease_ends_stay_storable_at_odd_times(void **state) {
    (void)state;
    fg_lock_state s = {0};
    fg_lock_request r = lock_req("a", FG_LOCK_EXCLUSIVE);
    expect_i64(decide(&s, &r, INT64_MAX - 5).holder.expires_us, INT64_MAX);
    expect_i64(decide(&s, &r, INT64_MAX).holder.expires_us, INT64_MAX);
    expect_i64(decide(&s, &r, -20 * SEC_US).holder.expires_us, 1);
    expect_i64(decide(&s, &r, INT64_MIN).holder.expires_us, 1);
    expect_i64(decide(&s, &r, 0).holder.expires_us, 10 * SEC_US);
    /* And a re-entry at the end of time. */
    take(&s, &r, INT64_MAX - 5, 1);
    r.reentrant = true;
    fg_lock_decision d = take(&s, &r, INT64_MAX - 1, 0);
    expect_i64(d.holder.expires_us, INT64_MAX);
    expect_i64(d.holder.count, 2);
    fg_lock_clear(&s, &alloc);
}

static void test_owners_are_bytes(void **state) {
    (void)state;
    fg_lock_state s = {0};
    const char a[] = {'x', 0, 'y'}, b[] = {'x', 0, 'z'}, prefix[] = {'x', 0};
    fg_lock_holder h = {(char *)a, 3, FG_LOCK_SHARED, 1, T0 + SEC_US, 1};
    expect_status(fg_lock_put(&s, FG_LOCK_KIND_LOCK, 0, &h, &alloc), FG_OK);
    h = (fg_lock_holder){(char *)b, 3, FG_LOCK_SHARED, 1, T0 + SEC_US, 2};
    expect_status(fg_lock_put(&s, FG_LOCK_KIND_LOCK, 0, &h, &alloc), FG_OK);
    h = (fg_lock_holder){(char *)prefix, 2, FG_LOCK_SHARED, 1, T0 + SEC_US, 3};
    expect_status(fg_lock_put(&s, FG_LOCK_KIND_LOCK, 0, &h, &alloc), FG_OK);
    expect_i64(s.len, 3);
    assert_ptr_equal(fg_lock_find(&s, a, 3), holder_at(&s, 0));
    assert_ptr_equal(fg_lock_find(&s, b, 3), holder_at(&s, 1));
    assert_ptr_equal(fg_lock_find(&s, prefix, 2), holder_at(&s, 2));
    assert_null(fg_lock_find(&s, a, 1));
    assert_null(fg_lock_find(NULL, a, 3));
    assert_true(fg_lock_state_storable(&s));
    fg_lock_clear(&s, &alloc);
}

/* ------------------------------------------------------------------- put */

static void test_put_copies_the_owner_and_costs_one_allocation(void **state) {
    (void)state;
    fg_lock_state s = {0};
    char owner[] = "alice";
    fg_lock_holder h = {owner, 5, FG_LOCK_EXCLUSIVE, 1, T0 + SEC_US, 42};
    expect_status(fg_lock_put(&s, FG_LOCK_KIND_LOCK, 0, &h, &alloc), FG_OK);
    expect_i64(heap.calls, 1); /* the holder with its owner copy */
    expect_i64(heap.blocks, 1);
    assert_true(holder_at(&s, 0)->owner != owner);
    memcpy(owner, "mally", 5);
    expect_holder(&s, 0, "alice", FG_LOCK_EXCLUSIVE, 1, T0 + SEC_US, 42);

    /* Replacing costs nothing and keeps the stored holder. */
    const fg_lock_holder *stored = holder_at(&s, 0);
    h = (fg_lock_holder){"alice", 5, FG_LOCK_EXCLUSIVE, 3, T0 + 2 * SEC_US, 42};
    expect_status(fg_lock_put(&s, FG_LOCK_KIND_LOCK, 0, &h, &alloc), FG_OK);
    expect_i64(heap.calls, 1);
    assert_ptr_equal(holder_at(&s, 0), stored);
    expect_holder(&s, 0, "alice", FG_LOCK_EXCLUSIVE, 3, T0 + 2 * SEC_US, 42);
    expect_i64(s.used, 3);
    /* A holder passed from the state itself. */
    h = *stored;
    h.count = 2;
    expect_status(fg_lock_put(&s, FG_LOCK_KIND_LOCK, 0, stored, &alloc), FG_OK);
    expect_status(fg_lock_put(&s, FG_LOCK_KIND_LOCK, 0, &h, &alloc), FG_OK);
    expect_holder(&s, 0, "alice", FG_LOCK_EXCLUSIVE, 2, T0 + 2 * SEC_US, 42);
    expect_i64(s.used, 2);
    fg_lock_clear(&s, &alloc);
}

static void test_put_appends_and_replaces_in_place(void **state) {
    (void)state;
    fg_lock_state s = {0};
    take_permits(&s, "a", 1, 10, T0, 10 * SEC_US, 1);
    take_permits(&s, "b", 2, 10, T0, 10 * SEC_US, 2);
    take_permits(&s, "c", 3, 10, T0, 10 * SEC_US, 3);
    fg_lock_holder h = {"b", 1, FG_LOCK_EXCLUSIVE, 4, T0 + 50 * SEC_US, 7};
    expect_status(fg_lock_put(&s, FG_LOCK_KIND_SEMAPHORE, 10, &h, &alloc), FG_OK);
    expect_holder(&s, 0, "a", FG_LOCK_EXCLUSIVE, 1, T0 + 10 * SEC_US, 1);
    expect_holder(&s, 1, "b", FG_LOCK_EXCLUSIVE, 4, T0 + 50 * SEC_US, 7);
    expect_holder(&s, 2, "c", FG_LOCK_EXCLUSIVE, 3, T0 + 10 * SEC_US, 3);
    expect_i64(s.used, 8);
    fg_lock_clear(&s, &alloc);
}

static void test_put_refuses_conflicting_holders(void **state) {
    (void)state;
    fg_lock_state s = {0};
    take_lock(&s, "w", FG_LOCK_EXCLUSIVE, T0, 10 * SEC_US, 1);
    fg_lock_holder h = {"r", 1, FG_LOCK_SHARED, 1, T0 + SEC_US, 2};
    snapshot *before = take_snapshot(&s);
    expect_status(fg_lock_put(&s, FG_LOCK_KIND_LOCK, 0, &h, &alloc), FG_EINVAL);
    h.mode = FG_LOCK_EXCLUSIVE;
    expect_status(fg_lock_put(&s, FG_LOCK_KIND_LOCK, 0, &h, &alloc), FG_EINVAL);
    expect_unchanged(&s, before);
    /* The writer alone may change its own mode (FG.HOLD replays it). */
    h = (fg_lock_holder){"w", 1, FG_LOCK_SHARED, 1, T0 + SEC_US, 1};
    expect_status(fg_lock_put(&s, FG_LOCK_KIND_LOCK, 0, &h, &alloc), FG_OK);
    fg_lock_clear(&s, &alloc);

    take_lock(&s, "r1", FG_LOCK_SHARED, T0, 10 * SEC_US, 1);
    take_lock(&s, "r2", FG_LOCK_SHARED, T0, 10 * SEC_US, 2);
    before = take_snapshot(&s);
    h = (fg_lock_holder){"w", 1, FG_LOCK_EXCLUSIVE, 1, T0 + SEC_US, 3};
    expect_status(fg_lock_put(&s, FG_LOCK_KIND_LOCK, 0, &h, &alloc), FG_EINVAL);
    /* A reader turning writer beside another reader. */
    h = (fg_lock_holder){"r1", 2, FG_LOCK_EXCLUSIVE, 1, T0 + SEC_US, 1};
    expect_status(fg_lock_put(&s, FG_LOCK_KIND_LOCK, 0, &h, &alloc), FG_EINVAL);
    expect_unchanged(&s, before);
    fg_lock_clear(&s, &alloc);
}

static void test_put_refuses_what_is_not_storable(void **state) {
    (void)state;
    char longest[FG_LOCK_OWNER_MAX + 1];
    memset(longest, 'o', sizeof(longest));
    fg_lock_state s = {0};
    take_permits(&s, "a", 2, 5, T0, 10 * SEC_US, 1);
    const fg_lock_holder good = {"b", 1, FG_LOCK_EXCLUSIVE, 1, T0 + SEC_US, 2};
    enum { BAD = 13 };
    fg_lock_holder bad[BAD];
    for (int i = 0; i < BAD; i++) bad[i] = good;
    bad[0].owner = NULL;
    bad[1].owner_len = 0;
    bad[2].owner = longest;
    bad[2].owner_len = FG_LOCK_OWNER_MAX + 1;
    bad[3].token = 0;
    bad[4].expires_us = 0;
    bad[5].expires_us = -1;
    bad[6].count = 0;
    bad[7].count = -3;
    bad[8].count = FG_LOCK_MAX_CAPACITY + 1;
    bad[9].mode = FG_LOCK_SHARED; /* semaphores are exclusive */
    bad[10].mode = 7;
    bad[11].token = FG_LOCK_TOKEN_CEILING; /* tokens stay below 2^53 */
    bad[12].token = UINT64_MAX;
    snapshot *before = take_snapshot(&s);
    for (int i = 0; i < BAD; i++)
        expect_status(fg_lock_put(&s, FG_LOCK_KIND_SEMAPHORE, 5, &bad[i], &alloc), FG_EINVAL);
    /* Capacities, kinds and missing arguments. */
    expect_status(fg_lock_put(&s, FG_LOCK_KIND_SEMAPHORE, 0, &good, &alloc), FG_EINVAL);
    expect_status(fg_lock_put(&s, FG_LOCK_KIND_SEMAPHORE, FG_LOCK_MAX_CAPACITY + 1, &good, &alloc),
                  FG_EINVAL);
    expect_status(fg_lock_put(&s, FG_LOCK_KIND_LOCK, 0, &good, &alloc), FG_EINVAL);
    expect_status(fg_lock_put(&s, 0, 5, &good, &alloc), FG_EINVAL);
    expect_status(fg_lock_put(&s, 3, 5, &good, &alloc), FG_EINVAL);
    expect_status(fg_lock_put(&s, FG_LOCK_KIND_SEMAPHORE, 5, NULL, &alloc), FG_EINVAL);
    expect_status(fg_lock_put(&s, FG_LOCK_KIND_SEMAPHORE, 5, &good, NULL), FG_EINVAL);
    expect_status(fg_lock_put(NULL, FG_LOCK_KIND_SEMAPHORE, 5, &good, &alloc), FG_EINVAL);
    expect_unchanged(&s, before);
    expect_i64(heap.blocks, 1);
    /* The last token below the ceiling is fine. */
    fg_lock_holder last = good;
    last.token = FG_LOCK_TOKEN_CEILING - 1;
    expect_status(fg_lock_put(&s, FG_LOCK_KIND_SEMAPHORE, 5, &last, &alloc), FG_OK);
    fg_lock_clear(&s, &alloc);

    /* Locks: capacity 0, counts up to the reentrancy limit. */
    fg_lock_holder h = {"w", 1, FG_LOCK_EXCLUSIVE, FG_LOCK_MAX_REENTRY + 1, T0 + SEC_US, 1};
    expect_status(fg_lock_put(&s, FG_LOCK_KIND_LOCK, 0, &h, &alloc), FG_EINVAL);
    h.count = FG_LOCK_MAX_REENTRY;
    expect_status(fg_lock_put(&s, FG_LOCK_KIND_LOCK, 1, &h, &alloc), FG_EINVAL);
    expect_i64(s.len, 0);
    expect_i64(heap.blocks, 0);
    expect_status(fg_lock_put(&s, FG_LOCK_KIND_LOCK, 0, &h, &alloc), FG_OK);
    fg_lock_clear(&s, &alloc);
}

static void test_put_without_memory_changes_nothing(void **state) {
    (void)state;
    fg_lock_state s = {0};
    fg_lock_holder h = {"a", 1, FG_LOCK_SHARED, 1, T0 + SEC_US, 1};
    /* The holder's one allocation fails. */
    heap.fail_in = 1;
    expect_status(fg_lock_put(&s, FG_LOCK_KIND_LOCK, 0, &h, &alloc), FG_EOVERFLOW);
    expect_i64(s.len, 0);
    assert_null(fg_lock_first(&s));
    expect_i64(heap.blocks, 0);

    expect_status(fg_lock_put(&s, FG_LOCK_KIND_LOCK, 0, &h, &alloc), FG_OK);
    h.owner = "b";
    snapshot *before = take_snapshot(&s);
    heap.fail_in = 1;
    expect_status(fg_lock_put(&s, FG_LOCK_KIND_LOCK, 0, &h, &alloc), FG_EOVERFLOW);
    expect_unchanged(&s, before);
    expect_i64(heap.blocks, 1);
    /* Replacing needs no memory at all. */
    heap.fail_always = true;
    h.owner = "a";
    h.count = 5;
    expect_status(fg_lock_put(&s, FG_LOCK_KIND_LOCK, 0, &h, &alloc), FG_OK);
    expect_i64(s.used, 5);
    /* Nor does deciding, releasing or pruning. */
    fg_lock_request r = lock_req("c", FG_LOCK_SHARED);
    expect_i64(decide(&s, &r, T0).outcome, FG_LOCK_GRANTED);
    expect_i64(fg_lock_release(&s, "a", 1, 1, &alloc), 4);
    expect_i64(fg_lock_prune(&s, T0 + SEC_US, NULL, NULL, &alloc), 1);
    heap.fail_always = false;
    expect_i64(s.len, 0);
    fg_lock_clear(&s, &alloc);
}

/* ------------------------------------------------------------- releases */

static void test_release_of_permits(void **state) {
    (void)state;
    fg_lock_state s = {0};
    take_permits(&s, "a", 5, 10, T0, 10 * SEC_US, 1);
    take_permits(&s, "b", 3, 10, T0, 10 * SEC_US, 2);
    expect_i64(fg_lock_release(&s, "a", 1, 2, &alloc), 3); /* partial */
    expect_i64(s.used, 6);
    expect_i64(fg_lock_release(&s, "a", 1, -1, &alloc), 3); /* negative: nothing */
    expect_i64(s.used, 6);
    expect_i64(fg_lock_release(&s, "a", 1, 3, &alloc), 0); /* exactly all */
    expect_i64(s.used, 3);
    expect_i64(s.len, 1);
    expect_i64(fg_lock_release(&s, "a", 1, 1, &alloc), -1);
    expect_i64(fg_lock_release(&s, "zz", 2, 0, &alloc), -1);
    expect_i64(fg_lock_release(NULL, "a", 1, 0, &alloc), -1);
    take_permits(&s, "a", 2, 10, T0, 10 * SEC_US, 3);
    expect_i64(fg_lock_release(&s, "a", 1, 99, &alloc), 0); /* more than held */
    expect_i64(fg_lock_release(&s, "b", 1, 0, &alloc), 0);  /* 0: all */
    expect_i64(s.len, 0);
    expect_i64(s.used, 0);
    assert_null(fg_lock_first(&s));
    expect_i64(heap.blocks, 0);
    fg_lock_clear(&s, &alloc);
}

static void test_releases_keep_the_order(void **state) {
    (void)state;
    fg_lock_state s = {0};
    const char *names[] = {"a", "b", "c", "d", "e"};
    for (int i = 0; i < 5; i++) take_lock(&s, names[i], FG_LOCK_SHARED, T0, SEC_US, i + 1);
    expect_i64(fg_lock_release(&s, "b", 1, 1, &alloc), 0);
    expect_i64(fg_lock_release(&s, "d", 1, 0, &alloc), 0);
    expect_i64(s.len, 3);
    expect_i64(s.used, 3);
    expect_holder(&s, 0, "a", FG_LOCK_SHARED, 1, T0 + SEC_US, 1);
    expect_holder(&s, 1, "c", FG_LOCK_SHARED, 1, T0 + SEC_US, 3);
    expect_holder(&s, 2, "e", FG_LOCK_SHARED, 1, T0 + SEC_US, 5);
    assert_null(fg_lock_next(holder_at(&s, 2)));
    /* A newcomer goes last, after holders released from the middle. */
    take_lock(&s, "b", FG_LOCK_SHARED, T0, SEC_US, 6);
    expect_holder(&s, 3, "b", FG_LOCK_SHARED, 1, T0 + SEC_US, 6);
    for (int i = 0; i < 5; i++) fg_lock_release(&s, names[i], 1, 0, &alloc);
    expect_i64(s.len, 0);
    assert_null(fg_lock_first(&s));
    expect_i64(heap.blocks, 0);
}

/* ----------------------------------------------------------------- prune */

typedef struct pruned_log {
    const fg_lock_state *s;
    char owners[8];
    int n;
} pruned_log;

static void note_pruned(const fg_lock_holder *h, void *arg) {
    pruned_log *log = arg;
    /* The state is as it was until every callback has run. */
    expect_i64(log->s->len, 6);
    expect_i64(h->owner_len, 1);
    log->owners[log->n++] = h->owner[0];
}

static void test_prune_removes_ended_leases_in_grant_order(void **state) {
    (void)state;
    fg_lock_state s = {0};
    int64_t leases[] = {5, 9, 3, 10, 1, 20}; /* seconds; a..f */
    for (int i = 0; i < 6; i++) {
        char owner[2] = {(char)('a' + i), 0};
        take_permits(&s, owner, i + 1, 100, T0, leases[i] * SEC_US, (uint64_t)i + 1);
    }
    expect_i64(s.used, 21);
    expect_i64(fg_lock_next_expiry_us(&s), T0 + SEC_US);
    expect_i64(fg_lock_expires_at_us(&s), T0 + 20 * SEC_US);

    pruned_log log = {&s, {0}, 0};
    /* Nothing has ended a microsecond before the soonest end. */
    expect_i64(fg_lock_prune(&s, T0 + SEC_US - 1, note_pruned, &log, &alloc), 0);
    expect_i64(log.n, 0);
    /* An end equal to now has ended. */
    expect_i64(fg_lock_prune(&s, T0 + 9 * SEC_US, note_pruned, &log, &alloc), 4);
    expect_i64(log.n, 4);
    assert_memory_equal(log.owners, "abce", 4);
    expect_i64(s.len, 2);
    expect_i64(s.used, 4 + 6);
    expect_holder(&s, 0, "d", FG_LOCK_EXCLUSIVE, 4, T0 + 10 * SEC_US, 4);
    expect_holder(&s, 1, "f", FG_LOCK_EXCLUSIVE, 6, T0 + 20 * SEC_US, 6);
    expect_i64(fg_lock_next_expiry_us(&s), T0 + 10 * SEC_US);
    assert_true(fg_lock_state_storable(&s));
    /* Without a callback, down to nothing. */
    expect_i64(fg_lock_prune(&s, T0 + 20 * SEC_US, NULL, NULL, &alloc), 2);
    expect_i64(s.len, 0);
    expect_i64(s.used, 0);
    expect_i64(heap.blocks, 0);
    expect_i64(fg_lock_prune(&s, T0 + 99 * SEC_US, NULL, NULL, &alloc), 0);
    expect_i64(fg_lock_prune(NULL, T0, NULL, NULL, &alloc), 0);
}

static void test_expiry_of_an_empty_state(void **state) {
    (void)state;
    fg_lock_state s = {0};
    expect_i64(fg_lock_expires_at_us(&s), 0);
    expect_i64(fg_lock_next_expiry_us(&s), 0);
    expect_i64(fg_lock_expires_at_us(NULL), 0);
    expect_i64(fg_lock_next_expiry_us(NULL), 0);
    take_lock(&s, "a", FG_LOCK_SHARED, T0, 7, 1);
    expect_i64(fg_lock_expires_at_us(&s), T0 + 7);
    expect_i64(fg_lock_next_expiry_us(&s), T0 + 7);
    fg_lock_clear(&s, &alloc);
}

/* ---------------------------------------------------------------- memory */

static void test_one_block_per_holder(void **state) {
    (void)state;
    fg_lock_state s = {0};
    char owner[16];
    size_t bytes = 0, fixed = 0;
    for (int i = 0; i < 100; i++) {
        snprintf(owner, sizeof(owner), "o%d", i);
        take_permits(&s, owner, 1, 1000, T0, SEC_US + i, (uint64_t)i + 1);
        /* Each holder adds its owner's bytes and the same fixed part. */
        size_t now = fg_lock_memory(&s);
        if (i == 0) fixed = now - strlen(owner);
        expect_i64(now, bytes + fixed + strlen(owner));
        bytes = now;
    }
    assert_true(fixed >= sizeof(fg_lock_holder));
    expect_i64(heap.blocks, 100);
    expect_i64(heap.calls, 100);
    /* Re-entries, extensions, releases and prunes allocate nothing. */
    heap.fail_always = true;
    fg_lock_request again = sem_req("o5", 1, 1000);
    again.lease_us = 60 * SEC_US;
    expect_i64(take(&s, &again, T0, 0).outcome, FG_LOCK_REENTERED);
    expect_i64(fg_lock_release(&s, "o5", 2, 1, &alloc), 1);
    expect_i64(fg_lock_prune(&s, T0 + SEC_US + 74, NULL, NULL, &alloc), 74); /* o5 lasts */
    expect_i64(s.len, 26);
    expect_i64(heap.blocks, 26);
    expect_holder(&s, 0, "o5", FG_LOCK_EXCLUSIVE, 1, T0 + 60 * SEC_US, 6);
    expect_holder(&s, 1, "o75", FG_LOCK_EXCLUSIVE, 1, T0 + SEC_US + 75, 76);
    expect_holder(&s, 25, "o99", FG_LOCK_EXCLUSIVE, 1, T0 + SEC_US + 99, 100);
    for (int i = 75; i < 88; i++) {
        snprintf(owner, sizeof(owner), "o%d", i);
        expect_i64(fg_lock_release(&s, owner, strlen(owner), 0, &alloc), 0);
    }
    heap.fail_always = false;
    expect_i64(s.len, 13);
    expect_i64(heap.blocks, 13);
    assert_true(fg_lock_state_storable(&s));
    uint64_t steps = 0;
    s.steps = &steps;
    fg_lock_clear(&s, &alloc);
    expect_i64(heap.blocks, 0);
    assert_null(fg_lock_first(&s));
    expect_i64(fg_lock_memory(&s), 0);
    expect_i64(s.len + s.used + s.capacity + s.kind, 0);
    assert_ptr_equal(s.steps, &steps); /* kept */
    fg_lock_clear(&s, &alloc); /* twice is fine */
    fg_lock_clear(NULL, &alloc);
    expect_i64(fg_lock_memory(NULL), 0);
}

/* -------------------------------------------------------------- storable */

/* A semaphore of three holders: alpha, beta, gamma. */
static void sample(fg_lock_state *s) {
    take_permits(s, "alpha", 2, 10, T0, SEC_US, 1);
    take_permits(s, "beta", 3, 10, T0, 2 * SEC_US, 2);
    take_permits(s, "gamma", 1, 10, T0, 3 * SEC_US, 3);
}

/* Breaks one rule of a storable state s, checks that storable sees it, and
 * mends it. */
#define BROKEN(lvalue, value)                                                                      \
    do {                                                                                           \
        __typeof__(lvalue) kept = (lvalue);                                                        \
        (lvalue) = (value);                                                                        \
        assert_false(fg_lock_state_storable(&s));                                                  \
        (lvalue) = kept;                                                                           \
        assert_true(fg_lock_state_storable(&s));                                                   \
    } while (0)

static void test_storable_rejects_each_broken_rule(void **state) {
    (void)state;
    char longest[FG_LOCK_OWNER_MAX + 1], alpha[] = "alpha";
    memset(longest, 'o', sizeof(longest));
    fg_lock_state s = {0};
    sample(&s);
    assert_true(fg_lock_state_storable(&s));
    fg_lock_holder *beta = (fg_lock_holder *)holder_at(&s, 1);

    BROKEN(s.kind, 0);
    BROKEN(s.kind, 3);
    BROKEN(s.capacity, 0);
    BROKEN(s.capacity, FG_LOCK_MAX_CAPACITY + 1);
    BROKEN(s.used, 5);
    BROKEN(s.used, 7);
    BROKEN(s.len, 2);
    BROKEN(s.len, 4);
    BROKEN(s.first, s.last);
    BROKEN(s.last, s.first);
    BROKEN(s.by_owner, NULL);
    BROKEN(s.by_end, NULL);
    BROKEN(beta->owner, alpha); /* a copy of the bytes, not the holder's own */
    BROKEN(beta->owner_len, 0);
    BROKEN(beta->owner_len, FG_LOCK_OWNER_MAX + 1);
    BROKEN(beta->token, 0);
    BROKEN(beta->token, FG_LOCK_TOKEN_CEILING);
    BROKEN(beta->expires_us, 0);
    BROKEN(beta->expires_us, T0 + 5 * SEC_US); /* out of its place in the lease order */
    BROKEN(beta->count, 0);
    BROKEN(beta->count, 4); /* the sums of the lease order no longer add up */
    BROKEN(beta->mode, FG_LOCK_SHARED);
    BROKEN(beta->mode, 2);
    assert_false(fg_lock_state_storable(NULL));

    /* Used above a lowered capacity is fine. */
    s.capacity = 1;
    assert_true(fg_lock_state_storable(&s));
    fg_lock_clear(&s, &alloc);

    /* Locks. */
    take_lock(&s, "alpha", FG_LOCK_SHARED, T0, SEC_US, 1);
    take_lock(&s, "beta", FG_LOCK_SHARED, T0, SEC_US, 2);
    fg_lock_holder *reader = (fg_lock_holder *)holder_at(&s, 0);
    BROKEN(s.capacity, 1);
    BROKEN(reader->count, FG_LOCK_MAX_REENTRY + 1);
    BROKEN(reader->mode, FG_LOCK_EXCLUSIVE); /* a writer beside a reader */
    expect_i64(fg_lock_release(&s, "beta", 4, 0, &alloc), 0);
    reader->mode = FG_LOCK_EXCLUSIVE;
    assert_true(fg_lock_state_storable(&s)); /* one writer */
    BROKEN(reader->mode, 2);
    fg_lock_clear(&s, &alloc);
}

#undef BROKEN

static void test_the_owner_index(void **state) {
    (void)state;
    fg_lock_state s = {0};
    char owner[32];
    /* Owners of every length from 1 to 12, many sharing prefixes. */
    for (uint32_t i = 0; i < 1500; i++) {
        snprintf(owner, sizeof(owner), "%.*s", (int)(1 + i % 12), "abcabcabcabc");
        size_t len = strlen(owner);
        snprintf(owner + len, sizeof(owner) - len, "%u", i / 12);
        take_lock(&s, owner, FG_LOCK_SHARED, T0, SEC_US + i, i + 1);
    }
    assert_true(fg_lock_state_storable(&s));
    for (uint32_t i = 0; i < 1500; i++) {
        const fg_lock_holder *h = holder_at(&s, i);
        assert_ptr_equal(fg_lock_find(&s, h->owner, h->owner_len), h);
        memcpy(owner, h->owner, h->owner_len);
        owner[h->owner_len] = 'x'; /* no owner ends in a letter */
        assert_null(fg_lock_find(&s, owner, h->owner_len + 1));
        expect_i64(h->token, i + 1);
    }
    assert_null(fg_lock_find(&s, "zzz", 3));
    /* Every other one goes; the rest stay found, in order. */
    for (uint32_t i = 0; i < 1500; i += 2) {
        const fg_lock_holder *h = holder_at(&s, i / 2); /* i / 2 went before it */
        memcpy(owner, h->owner, h->owner_len);
        expect_i64(fg_lock_release(&s, owner, h->owner_len, 0, &alloc), 0);
    }
    assert_true(fg_lock_state_storable(&s));
    expect_i64(s.len, 750);
    uint64_t token = 2;
    for (const fg_lock_holder *h = fg_lock_first(&s); h != NULL; h = fg_lock_next(h), token += 2) {
        expect_i64(h->token, token);
        assert_ptr_equal(fg_lock_find(&s, h->owner, h->owner_len), h);
    }
    fg_lock_clear(&s, &alloc);
}

/* A state of n holders with 8-byte owners "h0000000".."h0099999", lease
 * ends all different (T0 + 1000 + (i x 7919) mod n), each of `count`. */
static void big_make(fg_lock_state *s, uint32_t n, uint8_t kind, int64_t count) {
    int64_t capacity = kind == FG_LOCK_KIND_LOCK ? 0 : FG_LOCK_MAX_CAPACITY;
    uint8_t mode = kind == FG_LOCK_KIND_LOCK ? FG_LOCK_SHARED : FG_LOCK_EXCLUSIVE;
    char owner[16];
    for (uint32_t i = 0; i < n; i++) {
        snprintf(owner, sizeof(owner), "h%07u", i % 10000000u);
        fg_lock_holder h = {owner, 8, mode, count, T0 + 1000 + (int64_t)((i * 7919ULL) % n), i + 1};
        expect_status(fg_lock_put(s, kind, capacity, &h, &alloc), FG_OK);
    }
}

static void test_the_largest_states(void **state) {
    (void)state;
    /* Readers up to the limit: one more reader waits for the soonest end,
     * a writer for the latest. */
    fg_lock_state s = {0};
    big_make(&s, FG_LOCK_MAX_HOLDERS, FG_LOCK_KIND_LOCK, 1);
    assert_true(fg_lock_state_storable(&s));
    int64_t soonest = fg_lock_next_expiry_us(&s), latest = fg_lock_expires_at_us(&s);
    expect_i64(soonest, T0 + 1000);
    expect_i64(latest, T0 + 1000 + FG_LOCK_MAX_HOLDERS - 1);
    fg_lock_request r = lock_req("newcomer", FG_LOCK_SHARED);
    expect_busy(decide(&s, &r, T0), soonest);
    r.mode = FG_LOCK_EXCLUSIVE;
    expect_busy(decide(&s, &r, T0), latest);
    /* A holder re-enters; nobody new is put. */
    r = lock_req("h0000042", FG_LOCK_SHARED);
    r.reentrant = true;
    expect_i64(decide(&s, &r, T0).outcome, FG_LOCK_REENTERED);
    int64_t calls = heap.calls;
    fg_lock_holder h = {"newcomer", 8, FG_LOCK_SHARED, 1, T0 + SEC_US, 1};
    expect_status(fg_lock_put(&s, FG_LOCK_KIND_LOCK, 0, &h, &alloc), FG_EINVAL);
    expect_i64(heap.calls, calls);
    fg_lock_clear(&s, &alloc);

    /* A semaphore of 10 permits per holder, at its full capacity of 10^6. */
    big_make(&s, FG_LOCK_MAX_HOLDERS, FG_LOCK_KIND_SEMAPHORE, 10);
    assert_true(fg_lock_state_storable(&s));
    fg_lock_request p = sem_req("newcomer", 25, FG_LOCK_MAX_CAPACITY);
    /* 25 permits: the 3 soonest holds, ending at +1000, +1001, +1002. */
    expect_busy(decide(&s, &p, T0), T0 + 1002);
    p.count = FG_LOCK_MAX_CAPACITY;
    expect_busy(decide(&s, &p, T0), latest);
    /* With room in permits but not in holders. */
    expect_i64(fg_lock_release(&s, "h0000000", 8, 9, &alloc), 1);
    p.count = 9;
    expect_busy(decide(&s, &p, T0), soonest);
    /* A holder adding permits needs no new place. */
    p = sem_req("h0000000", 9, FG_LOCK_MAX_CAPACITY);
    expect_i64(decide(&s, &p, T0).outcome, FG_LOCK_REENTERED);
    fg_lock_clear(&s, &alloc);
}

/* ------------------------------------------------------------------ cost */

/* The height bound of an AVL tree of n nodes: a descent visits no more. */
static uint64_t descent(uint64_t n) {
    uint64_t log2 = 0;
    while ((1ULL << log2) < n + 2) log2++;
    return (log2 * 1441 + 999) / 1000; /* 1.4405 log2(n + 2), rounded up */
}

/* Grants n readers one after the other, as the module's serving of a queue
 * does for each: the soonest lease end (prune), the decision, the put, the
 * latest lease end (the key's expiry). The index nodes visited. */
static uint64_t steps_to_grant_readers(uint32_t n) {
    uint64_t steps = 0;
    fg_lock_state s = {.steps = &steps};
    char owner[24];
    for (uint32_t i = 0; i < n; i++) {
        snprintf(owner, sizeof(owner), "reader-%u", i);
        fg_lock_next_expiry_us(&s);
        take_lock(&s, owner, FG_LOCK_SHARED, T0 + i, 60 * SEC_US, i + 1);
        fg_lock_expires_at_us(&s);
    }
    fg_lock_clear(&s, &alloc);
    return steps;
}

static void test_granting_many_readers_costs_log_each(void **state) {
    (void)state;
    uint64_t two = steps_to_grant_readers(2000), eight = steps_to_grant_readers(8000);
    /* Each grant is six descents at most: the soonest end, the owner in
     * decide, the owner in put, two inserts, the latest end. An array
     * searched linearly would visit O(n) per grant: 16 x from 2,000 to
     * 8,000 readers, where this is 4 x and a little. */
    assert_true(eight <= 8000 * 6 * descent(8000));
    assert_true(two <= 2000 * 6 * descent(2000));
    assert_true(eight <= 6 * two);
    assert_true(eight > 4 * two); /* the counter counts */
}

/* A semaphore of h holders, one permit each: the steps of one newcomer's
 * acquire and release, and of a refused acquire on the full semaphore. */
static void semaphore_steps(uint32_t h, uint64_t *pair, uint64_t *refused) {
    uint64_t steps = 0;
    fg_lock_state s = {0};
    big_make(&s, h, FG_LOCK_KIND_SEMAPHORE, 1);
    s.steps = &steps;
    fg_lock_next_expiry_us(&s);
    take_permits(&s, "newcomer", 1, FG_LOCK_MAX_CAPACITY, T0, 60 * SEC_US, h + 1);
    fg_lock_expires_at_us(&s);
    expect_i64(fg_lock_release(&s, "newcomer", 8, 0, &alloc), 0);
    fg_lock_expires_at_us(&s);
    *pair = steps;
    steps = 0;
    fg_lock_request full = sem_req("newcomer", 1, h);
    expect_busy(decide(&s, &full, T0), T0 + 1000);
    *refused = steps;
    fg_lock_clear(&s, &alloc);
}

static void test_semaphore_operations_cost_log_holders(void **state) {
    (void)state;
    uint32_t sizes[] = {1000, 10000, 40000};
    for (int i = 0; i < 3; i++) {
        uint64_t pair, refused, d = descent(sizes[i]);
        semaphore_steps(sizes[i], &pair, &refused);
        /* Acquire and release: the soonest end, the owner in decide and in
         * put, two inserts, the latest end; the owner and two removals,
         * the latest end: nine descents. A refusal: the owner and the
         * search of the permits' lease end. */
        assert_true(pair <= 9 * d);
        assert_true(refused <= 2 * d);
        assert_true(pair >= 9 && refused >= 2);
    }
}

/* Pruning p of h holders visits O(p log h) nodes, however many remain. */
static void test_prune_costs_log_per_holder_removed(void **state) {
    (void)state;
    uint64_t steps = 0;
    fg_lock_state s = {0};
    big_make(&s, 40000, FG_LOCK_KIND_SEMAPHORE, 1);
    s.steps = &steps;
    /* The 10 soonest ends are T0 + 1000 .. T0 + 1009. */
    expect_i64(fg_lock_prune(&s, T0 + 1009, NULL, NULL, &alloc), 10);
    assert_true(steps <= 10 * 3 * descent(40000) + descent(40000));
    fg_lock_clear(&s, &alloc);
}

/* ---------------------------------------------------------------- tokens */

static void test_tokens_grow_from_the_counter_and_the_clock(void **state) {
    (void)state;
    const uint64_t floor_2024 = (uint64_t)T0;
    /* The clock's floor when the counter is behind (lost, or new). */
    assert_true(fg_lock_next_token(0, T0) == floor_2024);
    assert_true(fg_lock_next_token(5, T0 + 999) == floor_2024 + 999);
    assert_true(fg_lock_next_token(0, T0 + 1000) == floor_2024 + 1000);
    /* The counter + 1 when it is ahead, as after many grants. */
    assert_true(fg_lock_next_token(floor_2024, T0) == floor_2024 + 1);
    assert_true(fg_lock_next_token(floor_2024 + 500, T0) == floor_2024 + 501);
    /* Tokens stay exact as doubles (Lua, JavaScript) for centuries. */
    assert_true(fg_lock_next_token(0, T0) < (1ULL << 53));
    /* Times at or before the epoch: floor 0. */
    assert_true(fg_lock_next_token(0, 0) == 1);
    assert_true(fg_lock_next_token(41, -5) == 42);
    assert_true(fg_lock_next_token(41, INT64_MIN) == 42);
    assert_true(fg_lock_next_token(0, 1000) == 1000);
    /* The ceiling of 2^53: the last token is 2^53 - 1, and then there is
     * none (0), whatever the counter or the clock: never the same token
     * twice, never a wrapped one. */
    const uint64_t last_token = FG_LOCK_TOKEN_CEILING - 1;
    assert_true(last_token == 9007199254740991ULL); /* JavaScript's MAX_SAFE_INTEGER */
    assert_true(fg_lock_next_token(last_token - 2, T0) == last_token - 1);
    assert_true(fg_lock_next_token(last_token - 1, T0) == last_token);
    assert_true(fg_lock_next_token(last_token, T0) == 0);
    assert_true(fg_lock_next_token(FG_LOCK_TOKEN_CEILING, T0) == 0);
    assert_true(fg_lock_next_token((uint64_t)INT64_MAX, 0) == 0);
    assert_true(fg_lock_next_token(UINT64_MAX, 0) == 0);
    assert_true(fg_lock_next_token(0, (int64_t)last_token) == last_token);
    assert_true(fg_lock_next_token(0, (int64_t)FG_LOCK_TOKEN_CEILING) == 0);
    assert_true(fg_lock_next_token(0, INT64_MAX) == 0);
    /* Strictly growing over a stream of grants within one millisecond. */
    uint64_t last = 0;
    for (int i = 0; i < 1000; i++) {
        uint64_t next = fg_lock_next_token(last, T0 + i / 10);
        assert_true(next > last);
        last = next;
    }
    assert_true(last == floor_2024 + 999);
}

/* ------------------------------------------------------------ the model */

/* An independent model: owners are small numbers, holders a plain array,
 * and every answer found by brute force (the permits' time by trying
 * every lease end). */
#define MODEL_OWNERS 6

typedef struct model_holder {
    int owner;
    int mode;
    int64_t count, expires, token;
} model_holder;

typedef struct model {
    int kind; /* 0 until the first holder */
    int64_t capacity;
    model_holder h[MODEL_OWNERS];
    int n;
} model;

static const char *model_names[MODEL_OWNERS] = {"o0", "owner-1", "o2", "o\0003", "o4", "x"};
static const size_t model_lens[MODEL_OWNERS] = {2, 7, 2, 3, 2, 1};

static int model_find(const model *m, int owner) {
    for (int i = 0; i < m->n; i++)
        if (m->h[i].owner == owner) return i;
    return -1;
}

static int64_t model_used(const model *m) {
    int64_t used = 0;
    for (int i = 0; i < m->n; i++) used += m->h[i].count;
    return used;
}

typedef struct model_answer {
    fg_lock_outcome outcome;
    int64_t until; /* BUSY */
    model_holder holder; /* GRANTED, REENTERED */
    const char *why;
} model_answer;

static model_answer model_lock(const model *m, int owner, const fg_lock_request *r,
                               int64_t now) {
    model_answer a = {0};
    int mine = model_find(m, owner);
    int64_t end = now + r->lease_us;
    if (mine >= 0 && m->h[mine].mode == FG_LOCK_SHARED && r->mode == FG_LOCK_EXCLUSIVE) {
        a.outcome = FG_LOCK_NEVER;
        a.why = UPGRADE;
        return a;
    }
    if (mine >= 0 && r->reentrant) {
        a.outcome = FG_LOCK_REENTERED;
        a.holder = m->h[mine];
        a.holder.count++;
        if (end > a.holder.expires) a.holder.expires = end;
        return a;
    }
    /* Who would still be there if granted. */
    bool conflict = false;
    for (int i = 0; i < m->n; i++) {
        bool compatible = i != mine && r->mode == FG_LOCK_SHARED && m->h[i].mode == FG_LOCK_SHARED;
        if (compatible) continue;
        conflict = true;
        if (m->h[i].expires > a.until) a.until = m->h[i].expires;
    }
    if (conflict || r->queued_ahead) {
        a.outcome = FG_LOCK_BUSY;
        return a;
    }
    a.outcome = FG_LOCK_GRANTED;
    a.holder = (model_holder){owner, r->mode, 1, end, 0};
    return a;
}

static model_answer model_semaphore(const model *m, int owner, const fg_lock_request *r,
                                    int64_t now) {
    model_answer a = {0};
    if (r->count > r->capacity) {
        a.outcome = FG_LOCK_NEVER;
        a.why = OVER;
        return a;
    }
    int64_t needed = model_used(m) + r->count - r->capacity;
    if (needed > 0) {
        /* The smallest lease end by which enough permits are back. */
        a.until = INT64_MAX;
        for (int i = 0; i < m->n; i++) {
            int64_t back = 0;
            for (int k = 0; k < m->n; k++)
                if (m->h[k].expires <= m->h[i].expires) back += m->h[k].count;
            if (back >= needed && m->h[i].expires < a.until) a.until = m->h[i].expires;
        }
        a.outcome = FG_LOCK_BUSY;
        return a;
    }
    if (r->queued_ahead) {
        a.outcome = FG_LOCK_BUSY;
        return a;
    }
    int mine = model_find(m, owner);
    int64_t end = now + r->lease_us;
    if (mine >= 0) {
        a.outcome = FG_LOCK_REENTERED;
        a.holder = m->h[mine];
        a.holder.count += r->count;
        if (end > a.holder.expires) a.holder.expires = end;
    } else {
        a.outcome = FG_LOCK_GRANTED;
        a.holder = (model_holder){owner, FG_LOCK_EXCLUSIVE, r->count, end, 0};
    }
    return a;
}

static void model_put(model *m, const model_holder *h, int kind, int64_t capacity) {
    int i = model_find(m, h->owner);
    if (i < 0) i = m->n++;
    m->h[i] = *h;
    m->kind = kind;
    m->capacity = capacity;
}

static void model_remove(model *m, int i) {
    for (int k = i; k < m->n - 1; k++) m->h[k] = m->h[k + 1];
    m->n--;
}

static void expect_same(const fg_lock_state *s, const model *m) {
    expect_i64(s->len, m->n);
    for (int i = 0; i < m->n; i++) {
        const model_holder *h = &m->h[i];
        const fg_lock_holder *got = holder_at(s, (uint32_t)i);
        expect_i64(got->owner_len, model_lens[h->owner]);
        assert_memory_equal(got->owner, model_names[h->owner], got->owner_len);
        expect_i64(got->mode, h->mode);
        expect_i64(got->count, h->count);
        expect_i64(got->expires_us, h->expires);
        expect_i64((int64_t)got->token, h->token);
    }
    int64_t latest = 0, soonest = 0;
    for (int i = 0; i < m->n; i++) {
        latest = i == 0 || m->h[i].expires > latest ? m->h[i].expires : latest;
        soonest = i == 0 || m->h[i].expires < soonest ? m->h[i].expires : soonest;
    }
    expect_i64(fg_lock_expires_at_us(s), latest);
    expect_i64(fg_lock_next_expiry_us(s), soonest);
    if (m->n > 0) {
        expect_i64(s->kind, m->kind);
        expect_i64(s->capacity, m->capacity);
        expect_i64(s->used, model_used(m));
        assert_true(fg_lock_state_storable(s));
    } else {
        expect_i64(s->used, 0);
    }
}

typedef struct model_run {
    test_rng rng;
    int kind;
    int64_t now;
    uint64_t last_token;
    int64_t outcomes[4];
} model_run;

static fg_lock_request random_request(model_run *run, int *owner) {
    test_rng *rng = &run->rng;
    *owner = (int)rng_range(rng, 0, MODEL_OWNERS - 1);
    fg_lock_request r = {
        .kind = (uint8_t)run->kind,
        .owner = model_names[*owner],
        .owner_len = model_lens[*owner],
        .lease_us = rng_range(rng, 1, 50) * SEC_US / 10 + rng_range(rng, 0, 1),
        .reentrant = rng_range(rng, 0, 2) > 0,
        .queued_ahead = rng_range(rng, 0, 5) == 0,
    };
    if (run->kind == FG_LOCK_KIND_LOCK) {
        r.mode = rng_range(rng, 0, 2) == 0 ? FG_LOCK_EXCLUSIVE : FG_LOCK_SHARED;
        r.count = 1;
    } else {
        r.capacity = rng_range(rng, 1, 8);
        r.count = rng_range(rng, 1, 9);
    }
    return r;
}

/* One request: decided by both, compared, and put when granted. */
static void model_request(model_run *run, fg_lock_state *s, model *m) {
    int owner;
    fg_lock_request r = random_request(run, &owner);
    model_answer want = run->kind == FG_LOCK_KIND_LOCK ? model_lock(m, owner, &r, run->now)
                                                       : model_semaphore(m, owner, &r, run->now);
    snapshot *before = take_snapshot(s);
    fg_lock_decision d = decide(s, &r, run->now);
    expect_unchanged(s, before);
    run->outcomes[d.outcome]++;
    expect_i64(d.outcome, want.outcome);
    if (d.outcome == FG_LOCK_BUSY) expect_i64(d.busy_until_us, want.until);
    if (d.outcome == FG_LOCK_NEVER) assert_string_equal(d.why, want.why);
    if (d.outcome != FG_LOCK_GRANTED && d.outcome != FG_LOCK_REENTERED) return;

    assert_ptr_equal(d.holder.owner, r.owner);
    expect_i64(d.holder.mode, want.holder.mode);
    expect_i64(d.holder.count, want.holder.count);
    expect_i64(d.holder.expires_us, want.holder.expires);
    expect_i64((int64_t)d.holder.token, want.holder.token);
    if (d.outcome == FG_LOCK_GRANTED) {
        run->last_token = fg_lock_next_token(run->last_token, run->now);
        d.holder.token = run->last_token;
        want.holder.token = (int64_t)run->last_token;
    }
    int64_t capacity = run->kind == FG_LOCK_KIND_SEMAPHORE ? r.capacity : 0;
    expect_status(fg_lock_put(s, (uint8_t)run->kind, capacity, &d.holder, &alloc), FG_OK);
    model_put(m, &want.holder, run->kind, capacity);
}

static void model_release(model_run *run, fg_lock_state *s, model *m) {
    int owner = (int)rng_range(&run->rng, 0, MODEL_OWNERS - 1);
    int64_t count = rng_range(&run->rng, -1, 4);
    int i = model_find(m, owner);
    int64_t want = -1;
    if (i >= 0 && count < 0) {
        want = m->h[i].count;
    } else if (i >= 0 && (count == 0 || count >= m->h[i].count)) {
        model_remove(m, i);
        want = 0;
    } else if (i >= 0) {
        want = m->h[i].count -= count;
    }
    expect_i64(fg_lock_release(s, model_names[owner], model_lens[owner], count, &alloc), want);
}

/* The module extends a lease by putting the holder with a new end. */
static void model_extend(model_run *run, fg_lock_state *s, model *m) {
    if (m->n == 0) return;
    int i = (int)rng_range(&run->rng, 0, m->n - 1);
    m->h[i].expires = run->now + rng_range(&run->rng, 1, 5 * SEC_US);
    fg_lock_holder h = *holder_at(s, (uint32_t)i);
    h.expires_us = m->h[i].expires;
    expect_status(fg_lock_put(s, s->kind, s->capacity, &h, &alloc), FG_OK);
}

static void model_prune(fg_lock_state *s, model *m, int64_t now) {
    uint32_t want = 0;
    for (int i = 0; i < m->n;)
        if (m->h[i].expires <= now) {
            model_remove(m, i);
            want++;
        } else {
            i++;
        }
    expect_i64(fg_lock_prune(s, now, NULL, NULL, &alloc), want);
}

static void test_matches_a_model_under_random_traffic(void **state) {
    (void)state;
    model_run run = {.rng = {20240101}, .last_token = 0};
    static model m;
    for (int scenario = 0; scenario < 400; scenario++) {
        fg_lock_state s = {0};
        memset(&m, 0, sizeof(m));
        run.kind = scenario % 2 ? FG_LOCK_KIND_SEMAPHORE : FG_LOCK_KIND_LOCK;
        run.now = T0 + rng_range(&run.rng, 0, 1000000);
        for (int step = 0; step < 150; step++) {
            run.now += rng_range(&run.rng, 0, SEC_US / 2);
            model_prune(&s, &m, run.now); /* as the caller does before deciding */
            expect_same(&s, &m);
            int64_t op = rng_range(&run.rng, 0, 9);
            if (op < 6)
                model_request(&run, &s, &m);
            else if (op < 8)
                model_release(&run, &s, &m);
            else if (op < 9)
                model_extend(&run, &s, &m);
            else if (m.n > 0) {
                int i = (int)rng_range(&run.rng, 0, m.n - 1);
                int owner = m.h[i].owner;
                expect_i64(
                    fg_lock_release(&s, model_names[owner], model_lens[owner], 0, &alloc), 0);
                model_remove(&m, i);
            }
            expect_same(&s, &m);
        }
        fg_lock_clear(&s, &alloc);
        expect_i64(heap.blocks, 0);
    }
    /* Every outcome came up often. */
    for (int o = 0; o < 4; o++) assert_true(run.outcomes[o] > 300);
}

#define lock_test(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void) {
    const struct CMUnitTest tests[] = {
        lock_test(test_a_free_lock_is_granted),
        lock_test(test_a_held_lock_is_busy_until_its_lease_ends),
        lock_test(test_busy_until_is_the_heads_view),
        lock_test(test_extend_moves_the_lease_either_way),
        lock_test(test_ttl_ms_rounds_up),
        lock_test(test_readers_share_and_a_writer_waits_for_the_last),
        lock_test(test_a_writer_holds_off_readers),
        lock_test(test_someone_waiting_ahead_keeps_a_newcomer_out),
        lock_test(test_a_reentry_ignores_the_queue),
        lock_test(test_reentry_counts_and_keeps_the_later_lease),
        lock_test(test_a_writer_may_read_and_stays_a_writer),
        lock_test(test_a_reader_reenters_beside_others),
        lock_test(test_without_reentrant_an_owner_waits_for_itself),
        lock_test(test_an_upgrade_is_refused),
        lock_test(test_the_reentrancy_limit),
        lock_test(test_permits_up_to_the_capacity),
        lock_test(test_busy_until_counts_permits_in_lease_order),
        lock_test(test_leases_far_apart_and_one_microsecond_apart),
        lock_test(test_an_owner_adds_permits),
        lock_test(test_capacity_follows_the_latest_put),
        lock_test(test_a_request_of_the_other_kind),
        lock_test(test_a_multi_key_lock_is_all_or_nothing),
        lock_test(test_malformed_requests_are_never_granted),
        lock_test(test_lease_ends_stay_storable_at_odd_times),
        lock_test(test_owners_are_bytes),
        lock_test(test_put_copies_the_owner_and_costs_one_allocation),
        lock_test(test_put_appends_and_replaces_in_place),
        lock_test(test_put_refuses_conflicting_holders),
        lock_test(test_put_refuses_what_is_not_storable),
        lock_test(test_put_without_memory_changes_nothing),
        lock_test(test_release_of_permits),
        lock_test(test_releases_keep_the_order),
        lock_test(test_prune_removes_ended_leases_in_grant_order),
        lock_test(test_expiry_of_an_empty_state),
        lock_test(test_one_block_per_holder),
        lock_test(test_storable_rejects_each_broken_rule),
        lock_test(test_the_owner_index),
        lock_test(test_the_largest_states),
        lock_test(test_granting_many_readers_costs_log_each),
        lock_test(test_semaphore_operations_cost_log_holders),
        lock_test(test_prune_costs_log_per_holder_removed),
        lock_test(test_tokens_grow_from_the_counter_and_the_clock),
        lock_test(test_matches_a_model_under_random_traffic),
    };
    return cmocka_run_group_tests_name("lock", tests, NULL, NULL);
}
