/*
 * lock.h - leases on a named resource: exclusive and shared locks, and
 * counting semaphores, with owners, reentrancy and fencing tokens.
 *
 * A state is the set of its current holders, in grant order. Each holder is
 * an owner id (bytes chosen by the caller, never a thread id), a count
 * (reentrant holds of a lock, or permits of a semaphore), the end of its
 * lease and the fencing token of its grant. There is no other state: a
 * resource nobody holds has no state at all, and the token counter lives
 * with the caller (the module keeps one per server), so tokens keep growing
 * across releases.
 *
 * Every operation costs O(log holders) at most, whatever the number of
 * holders (up to FG_LOCK_MAX_HOLDERS): owners are found through an index,
 * and lease ends are kept in order (lock.c). Only walking the holders
 * (fg_lock_first/fg_lock_next) and fg_lock_state_storable cost O(holders).
 *
 * The functions are pure: time is an argument, nothing is read or written
 * outside the state passed in. Expired holders are not removed by decisions:
 * the caller prunes first (fg_lock_prune), so that every removal is an event
 * it can replicate. Waiting (FIFO queues of blocked requests) belongs to the
 * caller too; a request learns whether someone waits before it through
 * `queued_ahead`, which keeps a free lock from going to a newcomer while an
 * older request waits (no writer starvation, strict FIFO).
 */
#ifndef FG_LOCK_H
#define FG_LOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "decision.h"
#include "allocator.h"

#define FG_LOCK_OWNER_MAX 256        /* bytes in an owner id (at least 1) */
#define FG_LOCK_MAX_HOLDERS 100000   /* holders of one state */
#define FG_LOCK_MAX_CAPACITY 1000000 /* permits of a semaphore */
#define FG_LOCK_MAX_REENTRY 1000000000LL
#define FG_LOCK_MAX_LEASE_MS 1000000000000LL /* about 31 years */

/* Fencing tokens are below 2^53: every one of them, and its successor, is
 * exact as a double (a Lua number, a JavaScript number). See
 * fg_lock_next_token. */
#define FG_LOCK_TOKEN_CEILING (1ULL << 53)

typedef enum fg_lock_kind {
    FG_LOCK_KIND_LOCK = 1,      /* exclusive or shared (read/write lock) */
    FG_LOCK_KIND_SEMAPHORE = 2, /* up to `capacity` permits */
} fg_lock_kind;

typedef enum fg_lock_mode {
    FG_LOCK_EXCLUSIVE = 0, /* locks: a writer; semaphores always use this */
    FG_LOCK_SHARED = 1,    /* locks: a reader */
} fg_lock_mode;

typedef struct fg_lock_holder {
    char *owner;
    uint32_t owner_len;
    uint8_t mode;       /* fg_lock_mode */
    int64_t count;      /* >= 1: reentrant holds, or permits */
    int64_t expires_us; /* lease end, microseconds since the epoch */
    uint64_t token;     /* fencing token of the grant, 1 .. FG_LOCK_TOKEN_CEILING - 1 */
} fg_lock_holder;

typedef struct fg_lock_node fg_lock_node; /* a holder and its links (lock.c) */

/* A zeroed struct is an empty state. Only kind, capacity, used and len are
 * for reading; the rest belongs to lock.c, but for `steps`. */
typedef struct fg_lock_state {
    uint8_t kind;     /* fg_lock_kind */
    int64_t capacity; /* semaphores: permits, >= 1; locks: 0 */
    int64_t used;     /* the sum of the counts: permits held, or holds */
    uint32_t len;     /* holders */
    fg_lock_node *first, *last; /* grant order */
    fg_lock_node *by_owner;     /* the owner index: a search tree */
    fg_lock_node *by_end;       /* lease ends in order: a search tree */
    uint64_t grants;            /* holders ever added: numbers them in grant order */
    /* NULL, or a counter of the index nodes every call visits: tests bound
     * the cost of an operation with it. Kept by fg_lock_clear. */
    uint64_t *steps;
} fg_lock_state;

typedef struct fg_lock_request {
    uint8_t kind; /* fg_lock_kind; must match a non-empty state's */
    uint8_t mode; /* fg_lock_mode; semaphores: FG_LOCK_EXCLUSIVE */
    const char *owner;
    size_t owner_len;
    int64_t count;    /* locks: 1; semaphores: permits, 1 .. capacity */
    int64_t capacity; /* semaphores: permits of the semaphore (it replaces the stored one) */
    int64_t lease_us; /* >= 1 */
    bool reentrant;   /* locks: an owner that holds may take it again */
    bool queued_ahead; /* an older request waits for this state */
} fg_lock_request;

typedef enum fg_lock_outcome {
    FG_LOCK_GRANTED,   /* a new hold: put *holder with a fresh token */
    FG_LOCK_REENTERED, /* the owner's hold grows: put *holder (its token is kept) */
    FG_LOCK_BUSY,      /* not now; may be granted later */
    FG_LOCK_NEVER,     /* can never be granted as asked (see fg_lock_decide) */
} fg_lock_outcome;

typedef struct fg_lock_decision {
    fg_lock_outcome outcome;
    /* GRANTED / REENTERED: the holder to put (owner points into the
     * request; token 0 for GRANTED, to be chosen by the caller). */
    fg_lock_holder holder;
    /* BUSY: the soonest time at which the request could be granted if
     * nobody releases early: for locks the latest lease end among the
     * holders it conflicts with, for semaphores the time at which enough
     * permits' leases will have run out; 0 when only the queue is in the
     * way. */
    int64_t busy_until_us;
    /* NEVER: why, as an "ERR ..." message. */
    const char *why;
} fg_lock_decision;

/* Decides a request against a state pruned at now_us (s may be NULL or an
 * empty state of any kind: len 0). Read-only.
 *
 * Locks: an exclusive request is granted when nobody holds the lock, a
 * shared one when no exclusive holder does; in both cases only when nobody
 * waits ahead. An owner that holds the lock and asks again with `reentrant`
 * re-enters (count + 1, lease extended to at least now + lease_us) whatever
 * the queue: exclusive over exclusive, shared over shared, and shared over
 * its own exclusive hold (a writer may read; the hold stays exclusive).
 * Without `reentrant` the owner is BUSY like anybody else, its own hold
 * being in its way (until its lease ends). NEVER: an owner holding a shared
 * lock asks for the exclusive one, reentrant or not (an upgrade would
 * deadlock two upgraders), or the reentry count would exceed
 * FG_LOCK_MAX_REENTRY.
 *
 * Semaphores: granted when used + count <= capacity and nobody waits ahead;
 * an owner that holds permits and asks again adds to them (REENTERED, lease
 * extended as above), under the same rule (`reentrant` is not looked at).
 * NEVER: count > capacity.
 *
 * Both: a request that needs a new holder when the state has
 * FG_LOCK_MAX_HOLDERS is BUSY until the soonest lease end. NEVER, as a
 * guard for what the caller checks first: "ERR invalid lock request" (an
 * owner of 0 or too many bytes, a lease under 1 us or over
 * FG_LOCK_MAX_LEASE_MS, an unknown kind or mode, a lock count other than 1,
 * a semaphore mode other than exclusive, count < 1 or capacity outside
 * 1 .. FG_LOCK_MAX_CAPACITY), and "WRONGTYPE ..." when the kind differs
 * from a non-empty state's. A lease end is now + lease_us, at least 1. */
void fg_lock_decide(const fg_lock_state *s, const fg_lock_request *r, int64_t now_us,
                    fg_lock_decision *d);

/* A multi-key request: an exclusive, non-reentrant lock of every one of n
 * keys (1 .. 64), all or nothing, with one token. states[i] is key i's
 * state pruned at now_us (NULL: empty), queued_ahead[i] whether an older
 * request waits for it (queued_ahead NULL: nobody waits). NEVER as soon as
 * one key can never be granted (its d); GRANTED when every key would be,
 * d->holder then being the holder to put into each; BUSY otherwise, with
 * busy_until_us the latest among the keys in the way. */
void fg_lock_decide_all(const fg_lock_state *const *states, const bool *queued_ahead, size_t n,
                        const fg_lock_request *r, int64_t now_us, fg_lock_decision *d);

/* When the request, refused now, could be granted on s as the head of its
 * queue: the busy_until_us of fg_lock_decide, or 0 when s is empty or of
 * another kind (a refused WAIT answers it as its retry time). */
int64_t fg_lock_busy_until(const fg_lock_state *s, const fg_lock_request *r, int64_t now_us);

/* FG.EXTEND: the owner's lease ends lease_us from now, sooner or later
 * than it did, in place. The hold, or NULL when the owner holds nothing;
 * *shortened tells whether the lease now ends sooner. */
const fg_lock_holder *fg_lock_extend(fg_lock_state *s, const char *owner, size_t owner_len,
                                     int64_t now_us, int64_t lease_us, bool *shortened);

/* Milliseconds from now until at_us, rounded up (0 when past): the time
 * left that replies give for a lease or a retry. */
int64_t fg_lock_ttl_ms(int64_t at_us, int64_t now_us);

/* The owner's hold, or NULL. s may be NULL. The pointer stays valid until
 * the hold is removed (a put replacing it keeps it). */
const fg_lock_holder *fg_lock_find(const fg_lock_state *s, const char *owner, size_t owner_len);

/* The holders in grant order: the first (NULL for an empty or NULL state)
 * and the one after h (NULL after the last). */
const fg_lock_holder *fg_lock_first(const fg_lock_state *s);
const fg_lock_holder *fg_lock_next(const fg_lock_holder *h);

/* Puts a holder exactly as given (replacing the owner's hold if it has one,
 * keeping its place in grant order, else appending; owner bytes are
 * copied), and sets the capacity to `capacity` (0 for locks). FG_EINVAL,
 * with the state unchanged, when the result would break a rule of
 * fg_lock_state_storable (a token at or above FG_LOCK_TOKEN_CEILING among
 * them) or the kind differs from a non-empty state's; FG_EOVERFLOW when
 * memory cannot be had (a new holder costs one allocation, a replacement
 * none). An empty state takes the kind given. */
fg_status fg_lock_put(fg_lock_state *s, uint8_t kind, int64_t capacity, const fg_lock_holder *h,
                      const fg_allocator *a);

/* Releases `count` of the owner's hold (locks: 1 per unlock; semaphores: the
 * permits to give back; 0 meaning all of it). Returns what the owner
 * still holds afterwards (0: the hold is gone), or -1 when the owner holds
 * nothing. A count larger than the hold releases all of it; a negative one
 * changes nothing. */
int64_t fg_lock_release(fg_lock_state *s, const char *owner, size_t owner_len, int64_t count,
                        const fg_allocator *a);

/* Removes every holder whose lease ended at or before now_us, calling
 * removed(holder, arg) for each, in grant order, before removing any
 * (removed may be NULL; it sees the state unchanged and must not change
 * it). Returns how many were removed. Costs O(log holders) per holder
 * removed, plus O(removed x log removed) for the grant order when removed
 * is given. */
uint32_t fg_lock_prune(fg_lock_state *s, int64_t now_us,
                       void (*removed)(const fg_lock_holder *h, void *arg), void *arg,
                       const fg_allocator *a);

/* The latest lease end (when the state is empty if nobody renews), and the
 * soonest (when something can change by itself); 0 for an empty state. */
int64_t fg_lock_expires_at_us(const fg_lock_state *s);
int64_t fg_lock_next_expiry_us(const fg_lock_state *s);

/* Whether a state keeps every rule, those fg_lock_put enforces and those
 * of its own structure: a known kind; `used` equal to the sum of the
 * counts; semaphores with capacity in [1, FG_LOCK_MAX_CAPACITY], exclusive
 * holders with counts in [1, FG_LOCK_MAX_CAPACITY] (used may exceed a
 * capacity lowered later); locks with capacity 0, either one exclusive
 * holder or only shared ones, counts in [1, FG_LOCK_MAX_REENTRY]; len <=
 * FG_LOCK_MAX_HOLDERS; owners of 1..FG_LOCK_OWNER_MAX bytes, all different;
 * tokens in 1 .. FG_LOCK_TOKEN_CEILING - 1; lease ends >= 1; and the
 * grant order and both indexes holding exactly the len holders, in order
 * and balanced. Every state built by these functions keeps them; this is
 * the check of tests and fuzzers, O(holders x log holders). */
bool fg_lock_state_storable(const fg_lock_state *s);

/* Bytes the holders take (the state struct itself not counted). */
size_t fg_lock_memory(const fg_lock_state *s);

/* Frees the holders (not the state struct itself), leaving an empty state
 * (all fields 0 but steps). */
void fg_lock_clear(fg_lock_state *s, const fg_allocator *a);

/* The next fencing token after `last` at now_us: max(last + 1, the clock's
 * floor), where the floor is now_us itself; 0 when that is not below
 * FG_LOCK_TOKEN_CEILING: the tokens are exhausted, and the grant must be
 * refused (a token at the ceiling would not be exact as a double, and one
 * below it would be given twice). The floor keeps tokens growing even when the counter
 * itself was lost (a server restarted from a file written before the last
 * grants): no server grants a lock per microsecond for long (a Redis thread
 * does a few hundred thousand commands a second). The floor reaches the
 * ceiling in the year 2255; only a counter raised near it (by a holder
 * restored with such a token) exhausts the tokens sooner. A time before the
 * epoch has floor 0. */
uint64_t fg_lock_next_token(uint64_t last, int64_t now_us);

#endif
