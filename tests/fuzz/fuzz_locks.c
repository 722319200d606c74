/*
 * fuzz_locks.c - a coverage-guided property test of core/lock.c.
 *
 * The input is read as a script: the kind of the state, then operations on
 * it (requests, releases, prunes, removals, extensions, raw puts) among a
 * handful of owners, with time moving mostly forward. Requests are decided
 * against a state pruned at their time, as the module does. After every
 * step the fuzzer checks what must hold whatever the input:
 *
 *   - the state is storable (or empty, keeping no memory), which includes
 *     its grant order and both of its indexes being whole, ordered and
 *     balanced; `used` is the sum of the counts, and a lock has one writer
 *     alone or only readers;
 *   - a decision changes nothing, and its holder is put without error (the
 *     allocator fails only when the script says so, and then nothing
 *     changes); a re-entry keeps the token, a grant gets a fresh one,
 *     greater than every earlier one;
 *   - a BUSY answer is exact: pruned at busy_until the same request is
 *     granted, pruned a microsecond earlier it is still BUSY; 0 only when
 *     someone waits ahead;
 *   - NEVER only for an upgrade, the reentrancy limit or too many permits;
 *   - a refused put and an allocation failure leave the state as it was.
 *
 * Build: make fuzz (long run) or make fuzz-smoke (inside make test).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_input.h"
#include "lock.h"

#define START_US 1700000000000000LL
#define OWNERS 8

/* Owners of different lengths, two of them sharing a prefix, one with a
 * zero byte. */
static const char *const owner_names[OWNERS] = {"a", "ab", "abc", "w\0x", "reader-1",
                                                "reader-2", "z", "0123456789abcdef"};
static const size_t owner_lens[OWNERS] = {1, 2, 3, 3, 8, 8, 1, 16};

/* ------------------------------------------------------------- memory */

static bool fail_allocations;

static void *fuzz_realloc(void *ptr, size_t size) {
    return fail_allocations ? NULL : realloc(ptr, size);
}

static void fuzz_free(void *ptr) { free(ptr); }

static const fg_allocator alloc = {fuzz_realloc, fuzz_free};

/* ---------------------------------------------------------- invariants */

/* Everything a state is, addresses included: equal digests before and after
 * a call mean it changed nothing. */
static uint64_t digest(const fg_lock_state *s) {
    uint64_t x = 0xcbf29ce484222325ULL;
#define MIX(v) (x = (x ^ (uint64_t)(v)) * 0x100000001b3ULL)
    MIX(s->kind);
    MIX(s->capacity);
    MIX(s->used);
    MIX(s->len);
    MIX(s->grants);
    MIX((uintptr_t)s->by_owner);
    MIX((uintptr_t)s->by_end);
    MIX((uintptr_t)s->last);
    for (const fg_lock_holder *h = fg_lock_first(s); h != NULL; h = fg_lock_next(h)) {
        MIX((uintptr_t)h);
        MIX((uintptr_t)h->owner);
        MIX(h->owner_len);
        for (uint32_t k = 0; k < h->owner_len; k++) MIX((unsigned char)h->owner[k]);
        MIX(h->mode);
        MIX(h->count);
        MIX(h->expires_us);
        MIX(h->token);
    }
#undef MIX
    return x;
}

static void check_state(const fg_lock_state *s) {
    if (s->len == 0) {
        CHECK(s->used == 0 && fg_lock_first(s) == NULL && fg_lock_memory(s) == 0);
        CHECK(s->by_owner == NULL && s->by_end == NULL && s->last == NULL);
        return;
    }
    CHECK(fg_lock_state_storable(s));
    int64_t sum = 0;
    uint32_t writers = 0, n = 0;
    for (const fg_lock_holder *h = fg_lock_first(s); h != NULL; h = fg_lock_next(h), n++) {
        sum += h->count;
        writers += h->mode == FG_LOCK_EXCLUSIVE;
        CHECK(fg_lock_find(s, h->owner, h->owner_len) == h);
    }
    CHECK(n == s->len && sum == s->used);
    if (s->kind == FG_LOCK_KIND_LOCK) CHECK(writers == 0 || s->len == 1);
}

/* A copy of s through fg_lock_put, in grant order. */
static void clone_state(const fg_lock_state *s, fg_lock_state *copy) {
    memset(copy, 0, sizeof(*copy));
    for (const fg_lock_holder *h = fg_lock_first(s); h != NULL; h = fg_lock_next(h))
        CHECK(fg_lock_put(copy, s->kind, s->capacity, h, &alloc) == FG_OK);
}

/* The i-th holder in grant order (i < len). */
static const fg_lock_holder *holder_at(const fg_lock_state *s, uint32_t i) {
    const fg_lock_holder *h = fg_lock_first(s);
    while (i-- > 0) h = fg_lock_next(h);
    return h;
}

/* What r would be answered at t, against s pruned at t. */
static fg_lock_outcome outcome_at(const fg_lock_state *s, const fg_lock_request *r, int64_t t) {
    fg_lock_state copy;
    fg_lock_decision d;
    clone_state(s, &copy);
    fg_lock_prune(&copy, t, NULL, NULL, &alloc);
    fg_lock_decide(&copy, r, t, &d);
    fg_lock_clear(&copy, &alloc);
    return d.outcome;
}

/* --------------------------------------------------------- the script */

typedef struct run {
    reader in;
    fg_lock_state s;
    uint8_t kind;
    int64_t capacity; /* semaphores: the capacity requests carry */
    int64_t now;
    uint64_t last_token;
} run;

static fg_lock_request take_request(run *u) {
    reader *in = &u->in;
    int owner = (int)take_range(in, 1, 0, OWNERS - 1);
    uint64_t flags = take(in, 1);
    fg_lock_request r = {
        .kind = u->kind,
        .mode = FG_LOCK_EXCLUSIVE,
        .owner = owner_names[owner],
        .owner_len = owner_lens[owner],
        .count = 1,
        .lease_us = take_range(in, 2, 1, 60000) * 100,
        .reentrant = flags & 1,
        .queued_ahead = (flags & 6) == 6,
    };
    if (flags & 8) r.lease_us = FG_LOCK_MAX_LEASE_MS * 1000 - (int64_t)take(in, 1);
    if (u->kind == FG_LOCK_KIND_LOCK) {
        r.mode = (flags & 16) ? FG_LOCK_SHARED : FG_LOCK_EXCLUSIVE;
    } else {
        if (flags & 32) u->capacity = take_range(in, 1, 1, 12);
        r.capacity = u->capacity;
        r.count = take_range(in, 1, 1, 14);
    }
    return r;
}

/* Puts a decided holder as the module would, the allocator failing when the
 * script says so. */
static void put_decided(run *u, const fg_lock_request *r, fg_lock_decision *d, bool fail) {
    fg_lock_holder h = d->holder;
    if (d->outcome == FG_LOCK_GRANTED) {
        h.token = fg_lock_next_token(u->last_token, u->now);
        CHECK(h.token > u->last_token && h.token < FG_LOCK_TOKEN_CEILING);
    }
    int64_t capacity = u->kind == FG_LOCK_KIND_SEMAPHORE ? r->capacity : 0;
    uint64_t before = digest(&u->s);
    fail_allocations = fail;
    fg_status st = fg_lock_put(&u->s, u->kind, capacity, &h, &alloc);
    fail_allocations = false;
    if (st != FG_OK) {
        /* Only an append allocates, and only memory may fail. */
        CHECK(fail && st == FG_EOVERFLOW && d->outcome == FG_LOCK_GRANTED);
        CHECK(digest(&u->s) == before);
        return;
    }
    if (d->outcome == FG_LOCK_GRANTED) u->last_token = h.token;
    const fg_lock_holder *put = fg_lock_find(&u->s, r->owner, r->owner_len);
    CHECK(put != NULL && put->token == h.token && put->count == h.count);
}

static void check_busy(run *u, const fg_lock_request *r, const fg_lock_decision *d) {
    if (d->busy_until_us == 0) {
        CHECK(r->queued_ahead);
        return;
    }
    CHECK(d->busy_until_us > u->now);
    /* Exact: free by then, and not a microsecond earlier (the queue aside). */
    fg_lock_request alone = *r;
    alone.queued_ahead = false;
    fg_lock_outcome then = outcome_at(&u->s, &alone, d->busy_until_us);
    CHECK(then == FG_LOCK_GRANTED || then == FG_LOCK_REENTERED);
    CHECK(outcome_at(&u->s, &alone, d->busy_until_us - 1) == FG_LOCK_BUSY);
}

static void check_never(run *u, const fg_lock_request *r, const fg_lock_decision *d) {
    CHECK(d->why != NULL && strncmp(d->why, "ERR ", 4) == 0);
    const fg_lock_holder *h = fg_lock_find(&u->s, r->owner, r->owner_len);
    if (u->kind == FG_LOCK_KIND_SEMAPHORE) {
        CHECK(r->count > r->capacity);
        return;
    }
    CHECK(h != NULL);
    bool upgrade = h->mode == FG_LOCK_SHARED && r->mode == FG_LOCK_EXCLUSIVE;
    CHECK(upgrade || (r->reentrant && h->count == FG_LOCK_MAX_REENTRY));
}

static void step_request(run *u, bool fail) {
    fg_lock_request r = take_request(u);
    fg_lock_prune(&u->s, u->now, NULL, NULL, &alloc);
    uint64_t before = digest(&u->s);
    fg_lock_decision d;
    fg_lock_decide(&u->s, &r, u->now, &d);
    CHECK(digest(&u->s) == before);

    const fg_lock_holder *held = fg_lock_find(&u->s, r.owner, r.owner_len);
    switch (d.outcome) {
    case FG_LOCK_GRANTED:
        CHECK(held == NULL && d.holder.token == 0 && d.holder.count == r.count);
        CHECK(d.holder.owner == r.owner && d.holder.expires_us > u->now);
        put_decided(u, &r, &d, fail);
        break;
    case FG_LOCK_REENTERED:
        CHECK(held != NULL && d.holder.token == held->token);
        CHECK(d.holder.count == held->count + r.count);
        CHECK(d.holder.expires_us >= held->expires_us);
        CHECK(d.holder.mode == held->mode);
        put_decided(u, &r, &d, fail);
        break;
    case FG_LOCK_BUSY:
        check_busy(u, &r, &d);
        break;
    case FG_LOCK_NEVER:
        check_never(u, &r, &d);
        break;
    }
}

static void step_release(run *u) {
    int owner = (int)take_range(&u->in, 1, 0, OWNERS - 1);
    int64_t count = take_range(&u->in, 1, -1, 5);
    const fg_lock_holder *h = fg_lock_find(&u->s, owner_names[owner], owner_lens[owner]);
    int64_t held = h != NULL ? h->count : -1;
    int64_t left = fg_lock_release(&u->s, owner_names[owner], owner_lens[owner], count, &alloc);
    if (held < 0) CHECK(left == -1);
    else if (count < 0) CHECK(left == held);
    else if (count == 0 || count >= held) CHECK(left == 0);
    else CHECK(left == held - count);
    CHECK((fg_lock_find(&u->s, owner_names[owner], owner_lens[owner]) != NULL) == (left > 0));
}

typedef struct prune_note {
    int64_t now;
    uint32_t calls;
    const fg_lock_holder *next; /* where the grant order goes on from */
} prune_note;

/* Told of every ended holder, in grant order, the state untouched. */
static void note_pruned(const fg_lock_holder *h, void *arg) {
    prune_note *note = arg;
    CHECK(h->expires_us <= note->now);
    while (note->next != NULL && note->next != h) {
        CHECK(note->next->expires_us > note->now);
        note->next = fg_lock_next(note->next);
    }
    CHECK(note->next == h);
    note->next = fg_lock_next(h);
    note->calls++;
}

static void step_prune(run *u) {
    prune_note note = {u->now, 0, fg_lock_first(&u->s)};
    uint32_t len = u->s.len;
    uint32_t pruned = fg_lock_prune(&u->s, u->now, note_pruned, &note, &alloc);
    CHECK(pruned == note.calls && u->s.len == len - pruned);
    for (const fg_lock_holder *h = fg_lock_first(&u->s); h != NULL; h = fg_lock_next(h))
        CHECK(h->expires_us > u->now);
}

/* FG.EXTEND: the holder put again with a new lease end. */
static void step_extend(run *u) {
    if (u->s.len == 0) return;
    uint32_t i = (uint32_t)take_range(&u->in, 1, 0, u->s.len - 1);
    const fg_lock_holder *held = holder_at(&u->s, i);
    fg_lock_holder h = *held;
    h.expires_us = u->now + take_range(&u->in, 2, 1, 60000) * 100;
    CHECK(fg_lock_put(&u->s, u->s.kind, u->s.capacity, &h, &alloc) == FG_OK);
    CHECK(holder_at(&u->s, i) == held && held->expires_us == h.expires_us);
}

/* FG.HOLD with any holder: refused without a trace, or put. */
static void step_raw_put(run *u) {
    int owner = (int)take_range(&u->in, 1, 0, OWNERS - 1);
    fg_lock_holder h = {
        .owner = (char *)owner_names[owner],
        .owner_len = (uint32_t)owner_lens[owner],
        .mode = (uint8_t)take_range(&u->in, 1, 0, 2),
        .count = take_range(&u->in, 1, 0, 4),
        .expires_us = u->now + take_range(&u->in, 2, -100, 60000) * 100,
        .token = take(&u->in, 1),
    };
    int64_t capacity = u->kind == FG_LOCK_KIND_SEMAPHORE ? take_range(&u->in, 1, 0, 12) : 0;
    uint64_t before = digest(&u->s);
    fg_status st = fg_lock_put(&u->s, u->kind, capacity, &h, &alloc);
    CHECK(st == FG_OK || st == FG_EINVAL);
    if (st != FG_OK) CHECK(digest(&u->s) == before);
}

static void step(run *u) {
    uint64_t op = take(&u->in, 1);
    if (op & 0x80) {
        int64_t delta = take_range(&u->in, 2, 0, 40000) * 100;
        u->now += (op & 0x40) ? -delta / 8 : delta;
    }
    switch (op % 12) {
    case 0: case 1: case 2: case 3: case 4: step_request(u, false); break;
    case 5: step_request(u, true); break;
    case 6: case 7: step_release(u); break;
    case 8: step_prune(u); break;
    case 9:
        if (u->s.len > 0) {
            uint32_t i = (uint32_t)take_range(&u->in, 1, 0, u->s.len - 1);
            const fg_lock_holder *h = holder_at(&u->s, i);
            CHECK(fg_lock_release(&u->s, h->owner, h->owner_len, 0, &alloc) == 0);
        }
        break;
    case 10: step_extend(u); break;
    default: step_raw_put(u); break;
    }
    check_state(&u->s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    run u = {.in = {data, size}, .now = START_US};
    u.kind = take(&u.in, 1) % 2 ? FG_LOCK_KIND_SEMAPHORE : FG_LOCK_KIND_LOCK;
    u.capacity = take_range(&u.in, 1, 1, 12);
    for (int steps = 0; u.in.left > 0 && steps < 2000; steps++) step(&u);
    fg_lock_clear(&u.s, &alloc);
    return 0;
}
