/*
 * lock.c - leases on a named resource: exclusive and shared locks, and
 * counting semaphores.
 *
 * A state is an array of holders in grant order: a new holder is appended,
 * a changed one keeps its place, a removed one closes the gap. Owners are
 * found by a linear scan, so every function is O(holders). That is the
 * right trade for what a key holds in practice (one writer, a few readers,
 * a pool of some tens of permits): no index to keep consistent, and the
 * common grant costs two allocations (the array slot and the owner copy),
 * a re-entry none. Owners are copied on put and freed on removal; the array
 * grows geometrically, shrinks once three quarters empty, and an empty
 * state keeps no memory.
 *
 * Deciding and changing are separate, as for the limiters: fg_lock_decide
 * only reads and describes the holder to put, and the caller puts it (with
 * a token it chooses), replicates it, and prunes expired holders itself, so
 * that every change is an event it sees.
 *
 * The decision, in order:
 *
 *   1. A malformed request (see request_valid) or one of the other kind
 *      than a held state's is NEVER: the caller checks both first, this is
 *      only a guard.
 *   2. Locks. An owner holding a shared lock that asks for the exclusive
 *      one is NEVER (two upgraders would wait for each other). An owner
 *      that holds and asks with `reentrant` re-enters at once, queue or not
 *      (it holds already: making it wait would only delay its own release),
 *      up to FG_LOCK_MAX_REENTRY holds. Otherwise the request is BUSY while
 *      a holder is in its way (every holder for a writer, the writer for a
 *      reader, and always the owner's own hold: an owner asking again
 *      without `reentrant` waits for its own lease) or someone waits ahead.
 *   3. Semaphores. More permits than the capacity is NEVER; otherwise the
 *      request is BUSY while used + count > capacity or someone waits
 *      ahead, and an owner that holds permits adds to them.
 *   4. A new holder beyond FG_LOCK_MAX_HOLDERS is BUSY until the soonest
 *      lease end frees a place.
 *
 * The BUSY answer says when the request could be granted if nobody
 * released early. For a lock that is the latest lease end among the holders
 * in its way. For a semaphore it is the earliest lease end t such that the
 * holds ending by t return enough permits; it is found by bisecting time
 * between the soonest and the latest lease end (at most 64 passes over the
 * holders), since decide() has no allocator to sort a copy of the lease
 * ends with, and a selection of the k soonest would cost O(holders x k).
 *
 * fg_lock_state_storable, run on every state loaded, has to find duplicate
 * owners among up to FG_LOCK_MAX_HOLDERS without allocating: it sorts
 * fingerprints of the owners by blocks on the stack and looks every later
 * owner up in each block, about holders^2 / 1024 fingerprints instead of
 * holders^2 / 2 comparisons.
 */

#include "lock.h"

#include <stdlib.h>
#include <string.h>

#include "checked.h"

static const char ERR_INVALID[] = "ERR invalid lock request";
static const char ERR_WRONGTYPE[] =
    "WRONGTYPE Operation against a key holding the wrong kind of value";
static const char ERR_UPGRADE[] =
    "ERR owner holds a shared lock: release it before asking for the exclusive lock";
static const char ERR_REENTRY[] = "ERR reentrancy limit reached";
static const char ERR_CAPACITY[] = "ERR permits exceed the capacity";

/* The smallest array of holders allocated (one: a lock usually has one). */
#define HOLDERS_MIN_CAP 1u

/* Owners fingerprinted at once by fg_lock_state_storable (8 kB of stack). */
#define OWNER_BLOCK 512u

static bool same_owner(const fg_lock_holder *h, const char *owner, size_t owner_len) {
    return h->owner_len == owner_len && memcmp(h->owner, owner, owner_len) == 0;
}

int64_t fg_lock_find(const fg_lock_state *s, const char *owner, size_t owner_len) {
    if (s == NULL) return -1;
    for (uint32_t i = 0; i < s->len; i++)
        if (same_owner(&s->holders[i], owner, owner_len)) return i;
    return -1;
}

/* ---------------------------------------------------------------- decide */

/* What the caller promises (args parsing), checked again so that a mistake
 * is an error reply rather than a broken state. */
static bool request_valid(const fg_lock_request *r) {
    if (r->owner == NULL || r->owner_len < 1 || r->owner_len > FG_LOCK_OWNER_MAX) return false;
    if (r->lease_us < 1 || r->lease_us > FG_LOCK_MAX_LEASE_MS * 1000) return false;
    if (r->kind == FG_LOCK_KIND_LOCK)
        return (r->mode == FG_LOCK_EXCLUSIVE || r->mode == FG_LOCK_SHARED) && r->count == 1;
    if (r->kind == FG_LOCK_KIND_SEMAPHORE)
        return r->mode == FG_LOCK_EXCLUSIVE && r->count >= 1 && r->capacity >= 1 &&
               r->capacity <= FG_LOCK_MAX_CAPACITY;
    return false;
}

/* now + lease, kept storable (>= 1) and saturated at the end of time, which
 * only a clock far off the epoch can reach. */
static int64_t lease_end(int64_t now_us, int64_t lease_us) {
    int64_t end;
    if (!fg_add(now_us, lease_us, &end)) return INT64_MAX;
    return fg_max(end, 1);
}

static void never(fg_lock_decision *d, const char *why) {
    d->outcome = FG_LOCK_NEVER;
    d->why = why;
}

static void busy(fg_lock_decision *d, int64_t until_us) {
    d->outcome = FG_LOCK_BUSY;
    d->busy_until_us = until_us;
}

static void grant(const fg_lock_request *r, int64_t now_us, fg_lock_decision *d) {
    d->outcome = FG_LOCK_GRANTED;
    d->holder = (fg_lock_holder){
        .owner = (char *)r->owner, /* read only: fg_lock_put copies it */
        .owner_len = (uint32_t)r->owner_len,
        .mode = r->mode,
        .count = r->count,
        .expires_us = lease_end(now_us, r->lease_us),
        .token = 0,
    };
}

/* The owner's hold grows by the request's count; its mode and token stay,
 * and its lease ends at the later of the two. */
static void add_to_hold(const fg_lock_holder *held, const fg_lock_request *r, int64_t now_us,
                        fg_lock_decision *d) {
    d->outcome = FG_LOCK_REENTERED;
    d->holder = *held;
    d->holder.owner = (char *)r->owner;
    d->holder.count = held->count + r->count;
    d->holder.expires_us = fg_max(held->expires_us, lease_end(now_us, r->lease_us));
}

/* Whether holder h is in the way of a lock request of `mode` whose owner
 * holds `mine` (NULL: nothing): a writer waits for everybody, a reader for
 * the writer, and an owner that does not re-enter for its own hold. */
static bool in_the_way(const fg_lock_holder *h, uint8_t mode, const fg_lock_holder *mine) {
    return mode == FG_LOCK_EXCLUSIVE || h->mode == FG_LOCK_EXCLUSIVE || h == mine;
}

static void lock_decide(const fg_lock_state *s, const fg_lock_request *r, int64_t now_us,
                        fg_lock_decision *d) {
    int64_t i = fg_lock_find(s, r->owner, r->owner_len);
    const fg_lock_holder *mine = i >= 0 ? &s->holders[i] : NULL;

    if (mine != NULL && mine->mode == FG_LOCK_SHARED && r->mode == FG_LOCK_EXCLUSIVE) {
        never(d, ERR_UPGRADE);
        return;
    }
    if (mine != NULL && r->reentrant) {
        if (mine->count > FG_LOCK_MAX_REENTRY - r->count)
            never(d, ERR_REENTRY);
        else
            add_to_hold(mine, r, now_us, d);
        return;
    }

    bool blocked = false;
    int64_t until = 0;
    for (uint32_t k = 0; k < s->len; k++) {
        const fg_lock_holder *h = &s->holders[k];
        if (!in_the_way(h, r->mode, mine)) continue;
        until = blocked ? fg_max(until, h->expires_us) : h->expires_us;
        blocked = true;
    }
    if (!blocked && s->len >= FG_LOCK_MAX_HOLDERS) {
        /* Readers only, and no room for one more: the soonest end makes some. */
        until = fg_lock_next_expiry_us(s);
        blocked = true;
    }
    if (blocked || r->queued_ahead)
        busy(d, until);
    else
        grant(r, now_us, d);
}

/* Permits of the holds whose lease ends at or before t. */
static int64_t permits_back_by(const fg_lock_state *s, int64_t t) {
    int64_t permits = 0;
    for (uint32_t i = 0; i < s->len; i++)
        if (s->holders[i].expires_us <= t) permits += s->holders[i].count;
    return permits;
}

/* The earliest lease end by which `needed` permits are back. The answer is
 * a lease end between the soonest and the latest; bisecting on time keeps
 * permits_back_by(lo) < needed <= permits_back_by(hi), at most 64 times
 * (the differences are taken unsigned: hi >= lo, so they are exact). */
static int64_t permits_back_at(const fg_lock_state *s, int64_t needed) {
    int64_t lo = fg_lock_next_expiry_us(s), hi = fg_lock_expires_at_us(s);
    if (permits_back_by(s, lo) >= needed) return lo;
    while ((uint64_t)hi - (uint64_t)lo > 1) {
        int64_t mid = lo + (int64_t)(((uint64_t)hi - (uint64_t)lo) / 2);
        if (permits_back_by(s, mid) >= needed)
            hi = mid;
        else
            lo = mid;
    }
    return hi;
}

static void semaphore_decide(const fg_lock_state *s, const fg_lock_request *r, int64_t now_us,
                             fg_lock_decision *d) {
    if (r->count > r->capacity) {
        never(d, ERR_CAPACITY);
        return;
    }
    /* Permits that must come back first (used <= 10^11: no overflow). */
    int64_t needed = s->used + r->count - r->capacity;
    int64_t i = fg_lock_find(s, r->owner, r->owner_len);
    if (needed > 0)
        busy(d, permits_back_at(s, needed)); /* a lease end: room for a holder too */
    else if (i < 0 && s->len >= FG_LOCK_MAX_HOLDERS)
        busy(d, fg_lock_next_expiry_us(s));
    else if (r->queued_ahead)
        busy(d, 0);
    else if (i >= 0)
        add_to_hold(&s->holders[i], r, now_us, d);
    else
        grant(r, now_us, d);
}

void fg_lock_decide(const fg_lock_state *s, const fg_lock_request *r, int64_t now_us,
                    fg_lock_decision *d) {
    static const fg_lock_state nobody;
    if (d == NULL) return;
    memset(d, 0, sizeof(*d));
    if (s == NULL) s = &nobody;
    if (r == NULL || !request_valid(r))
        never(d, ERR_INVALID);
    else if (s->len > 0 && s->kind != r->kind)
        never(d, ERR_WRONGTYPE);
    else if (r->kind == FG_LOCK_KIND_LOCK)
        lock_decide(s, r, now_us, d);
    else
        semaphore_decide(s, r, now_us, d);
}

/* ------------------------------------------------------------ the array */

/* Gives memory back once the array is three quarters empty (an empty state
 * keeps none). Best effort: keeping the larger block is still correct. */
static void holders_maybe_shrink(fg_lock_state *s, const fg_allocator *a) {
    if (s->len == 0) {
        if (s->holders != NULL) a->free(s->holders);
        s->holders = NULL;
        s->cap = 0;
        return;
    }
    if (s->cap <= 4 * HOLDERS_MIN_CAP || s->len > s->cap / 4) return;
    uint32_t cap = s->len * 2;
    fg_lock_holder *holders = a->realloc(s->holders, (size_t)cap * sizeof(*holders));
    if (holders == NULL) return;
    s->holders = holders;
    s->cap = cap;
}

/* Makes room for one more holder; the state is untouched on failure. */
static fg_status holders_reserve_one(fg_lock_state *s, const fg_allocator *a) {
    if (s->len < s->cap) return FG_OK;
    uint32_t cap = s->cap < HOLDERS_MIN_CAP ? HOLDERS_MIN_CAP : s->cap * 2;
    if (cap > FG_LOCK_MAX_HOLDERS) cap = FG_LOCK_MAX_HOLDERS;
    fg_lock_holder *holders = a->realloc(s->holders, (size_t)cap * sizeof(*holders));
    if (holders == NULL) return FG_EOVERFLOW;
    s->holders = holders;
    s->cap = cap;
    return FG_OK;
}

/* Takes holder i out of the array, keeping the others in order, and frees
 * its owner. The caller shrinks the array. */
static void holders_cut(fg_lock_state *s, uint32_t i, const fg_allocator *a) {
    a->free(s->holders[i].owner);
    s->used -= s->holders[i].count;
    memmove(s->holders + i, s->holders + i + 1, (size_t)(s->len - i - 1) * sizeof(*s->holders));
    s->len--;
}

/* ------------------------------------------------------------------- put */

static bool kind_valid(uint8_t kind) {
    return kind == FG_LOCK_KIND_LOCK || kind == FG_LOCK_KIND_SEMAPHORE;
}

static bool capacity_valid(uint8_t kind, int64_t capacity) {
    if (kind == FG_LOCK_KIND_SEMAPHORE) return capacity >= 1 && capacity <= FG_LOCK_MAX_CAPACITY;
    return capacity == 0;
}

/* A holder on its own: everything fg_lock_state_storable asks of one. */
static bool holder_valid(uint8_t kind, const fg_lock_holder *h) {
    if (h->owner == NULL || h->owner_len < 1 || h->owner_len > FG_LOCK_OWNER_MAX) return false;
    if (h->token < 1 || h->expires_us < 1 || h->count < 1) return false;
    if (kind == FG_LOCK_KIND_SEMAPHORE)
        return h->mode == FG_LOCK_EXCLUSIVE && h->count <= FG_LOCK_MAX_CAPACITY;
    return (h->mode == FG_LOCK_EXCLUSIVE || h->mode == FG_LOCK_SHARED) &&
           h->count <= FG_LOCK_MAX_REENTRY;
}

/* Whether a lock holder may join the others (all but index `replaced`):
 * a writer only alone, a reader only without a writer. */
static bool lock_compatible(const fg_lock_state *s, const fg_lock_holder *h, int64_t replaced) {
    uint32_t others = s->len - (replaced >= 0);
    if (h->mode == FG_LOCK_EXCLUSIVE) return others == 0;
    for (uint32_t i = 0; i < s->len; i++)
        if ((int64_t)i != replaced && s->holders[i].mode == FG_LOCK_EXCLUSIVE) return false;
    return true;
}

static fg_status holders_append(fg_lock_state *s, const fg_lock_holder *h,
                                const fg_allocator *a) {
    if (s->len >= FG_LOCK_MAX_HOLDERS) return FG_EINVAL;
    char *owner = a->realloc(NULL, h->owner_len);
    if (owner == NULL) return FG_EOVERFLOW;
    if (holders_reserve_one(s, a) != FG_OK) {
        a->free(owner);
        return FG_EOVERFLOW;
    }
    memcpy(owner, h->owner, h->owner_len);
    s->holders[s->len] = *h;
    s->holders[s->len].owner = owner;
    s->len++;
    return FG_OK;
}

fg_status fg_lock_put(fg_lock_state *s, uint8_t kind, int64_t capacity, const fg_lock_holder *h,
                      const fg_allocator *a) {
    if (s == NULL || h == NULL || a == NULL) return FG_EINVAL;
    if (!kind_valid(kind) || !capacity_valid(kind, capacity) || !holder_valid(kind, h))
        return FG_EINVAL;
    if (s->len > 0 && s->kind != kind) return FG_EINVAL;

    /* h may point into the array, which an append may move. */
    fg_lock_holder put = *h;
    int64_t i = fg_lock_find(s, put.owner, put.owner_len);
    if (kind == FG_LOCK_KIND_LOCK && !lock_compatible(s, &put, i)) return FG_EINVAL;

    if (i >= 0) {
        /* Same owner bytes: the stored copy stays. */
        fg_lock_holder *old = &s->holders[i];
        s->used += put.count - old->count;
        put.owner = old->owner;
        *old = put;
    } else {
        fg_status st = holders_append(s, &put, a);
        if (st != FG_OK) return st;
        s->used += put.count;
    }
    s->kind = kind;
    s->capacity = capacity;
    return FG_OK;
}

/* ------------------------------------------------------------- removing */

void fg_lock_remove(fg_lock_state *s, uint32_t i, const fg_allocator *a) {
    if (s == NULL || i >= s->len) return;
    holders_cut(s, i, a);
    holders_maybe_shrink(s, a);
}

int64_t fg_lock_release(fg_lock_state *s, const char *owner, size_t owner_len, int64_t count,
                        const fg_allocator *a) {
    int64_t i = fg_lock_find(s, owner, owner_len);
    if (i < 0) return -1;
    fg_lock_holder *h = &s->holders[i];
    if (count < 0) return h->count;
    if (count == 0 || count >= h->count) {
        fg_lock_remove(s, (uint32_t)i, a);
        return 0;
    }
    h->count -= count;
    s->used -= count;
    return h->count;
}

uint32_t fg_lock_prune(fg_lock_state *s, int64_t now_us,
                       void (*removed)(const fg_lock_holder *h, void *arg), void *arg,
                       const fg_allocator *a) {
    if (s == NULL) return 0;
    /* Tell first, so that the callback sees the state as it was. */
    if (removed != NULL)
        for (uint32_t i = 0; i < s->len; i++)
            if (s->holders[i].expires_us <= now_us) removed(&s->holders[i], arg);

    uint32_t kept = 0;
    for (uint32_t i = 0; i < s->len; i++) {
        fg_lock_holder *h = &s->holders[i];
        if (h->expires_us <= now_us) {
            a->free(h->owner);
            s->used -= h->count;
        } else {
            s->holders[kept++] = *h;
        }
    }
    uint32_t pruned = s->len - kept;
    s->len = kept;
    if (pruned > 0) holders_maybe_shrink(s, a);
    return pruned;
}

void fg_lock_clear(fg_lock_state *s, const fg_allocator *a) {
    if (s == NULL) return;
    for (uint32_t i = 0; i < s->len; i++) a->free(s->holders[i].owner);
    if (s->holders != NULL) a->free(s->holders);
    memset(s, 0, sizeof(*s));
}

/* ---------------------------------------------------------------- times */

int64_t fg_lock_expires_at_us(const fg_lock_state *s) {
    if (s == NULL || s->len == 0) return 0;
    int64_t latest = s->holders[0].expires_us;
    for (uint32_t i = 1; i < s->len; i++) latest = fg_max(latest, s->holders[i].expires_us);
    return latest;
}

int64_t fg_lock_next_expiry_us(const fg_lock_state *s) {
    if (s == NULL || s->len == 0) return 0;
    int64_t soonest = s->holders[0].expires_us;
    for (uint32_t i = 1; i < s->len; i++) soonest = fg_min(soonest, s->holders[i].expires_us);
    return soonest;
}

/* Tokens stay within 1 .. 2^63 - 1, what FG.FENCE and the RDB loader
 * accept, and saturate there rather than wrap: the floor gets there in the
 * year 2248, and a counter raised there (a forged FG.HOLD) stops growing
 * instead of starting again from small tokens. */
#define TOKEN_MAX ((uint64_t)INT64_MAX)

uint64_t fg_lock_next_token(uint64_t last, int64_t now_us) {
    uint64_t next = last < TOKEN_MAX ? last + 1 : TOKEN_MAX;
    uint64_t floor = now_us > 0 ? (uint64_t)now_us : 0;
    return next > floor ? next : floor;
}

/* ------------------------------------------------------------- storable */

typedef struct owner_print {
    uint64_t print; /* FNV-1a of the owner bytes */
    uint32_t index;
} owner_print;

static uint64_t owner_print_of(const fg_lock_holder *h) {
    uint64_t x = 0xcbf29ce484222325ULL;
    for (uint32_t i = 0; i < h->owner_len; i++) {
        x ^= (unsigned char)h->owner[i];
        x *= 0x100000001b3ULL;
    }
    return x;
}

static int compare_prints(const void *a, const void *b) {
    uint64_t x = ((const owner_print *)a)->print, y = ((const owner_print *)b)->print;
    return (x > y) - (x < y);
}

static bool same_holder_owner(const fg_lock_holder *x, const fg_lock_holder *y) {
    return same_owner(x, y->owner, y->owner_len);
}

/* Whether holder j has the owner of a holder in the sorted block: the run
 * of equal fingerprints is found by bisection and checked byte by byte. */
static bool owner_in_block(const fg_lock_state *s, const owner_print *block, uint32_t n,
                           uint32_t j) {
    uint64_t print = owner_print_of(&s->holders[j]);
    uint32_t lo = 0, hi = n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (block[mid].print < print)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (; lo < n && block[lo].print == print; lo++)
        if (same_holder_owner(&s->holders[block[lo].index], &s->holders[j])) return true;
    return false;
}

/* Whether the sorted block holds one owner twice. */
static bool block_has_twins(const fg_lock_state *s, const owner_print *block, uint32_t n) {
    for (uint32_t i = 1; i < n; i++)
        for (uint32_t k = i; k > 0 && block[k - 1].print == block[i].print; k--)
            if (same_holder_owner(&s->holders[block[k - 1].index], &s->holders[block[i].index]))
                return true;
    return false;
}

static bool owners_distinct(const fg_lock_state *s) {
    owner_print block[OWNER_BLOCK];
    for (uint32_t start = 0; start < s->len; start += OWNER_BLOCK) {
        uint32_t n = s->len - start < OWNER_BLOCK ? s->len - start : OWNER_BLOCK;
        for (uint32_t i = 0; i < n; i++)
            block[i] = (owner_print){owner_print_of(&s->holders[start + i]), start + i};
        qsort(block, n, sizeof(*block), compare_prints);
        if (block_has_twins(s, block, n)) return false;
        for (uint32_t j = start + n; j < s->len; j++)
            if (owner_in_block(s, block, n, j)) return false;
    }
    return true;
}

bool fg_lock_state_storable(const fg_lock_state *s) {
    if (s == NULL || !kind_valid(s->kind) || !capacity_valid(s->kind, s->capacity)) return false;
    if (s->len > FG_LOCK_MAX_HOLDERS || s->len > s->cap) return false;
    if (s->len > 0 && s->holders == NULL) return false;

    int64_t sum = 0;
    uint32_t writers = 0;
    for (uint32_t i = 0; i < s->len; i++) {
        const fg_lock_holder *h = &s->holders[i];
        if (!holder_valid(s->kind, h)) return false;
        sum += h->count; /* at most 10^5 x 10^9: no overflow */
        writers += s->kind == FG_LOCK_KIND_LOCK && h->mode == FG_LOCK_EXCLUSIVE;
    }
    if (sum != s->used) return false;
    if (writers > 0 && s->len > 1) return false;
    return owners_distinct(s);
}
