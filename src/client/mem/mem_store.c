/*
 * mem_store.c - the src/core algorithms behind a sharded, thread-safe table.
 *
 * Layout: the store is an array of shards, each padded to a cache line and
 * holding its own lock and a key table (key_table.h: open addressing over
 * slots {hash, entry *}, shrunk after sweeps). A key's 64-bit hash
 * (fg_key_hash_seeded, seeded per store) picks its shard with the high bits
 * and its home slot with the low bits, so the two are independent. An
 * entry is one allocation: the expiry, the state of its family and the key
 * bytes, 37 bytes and the key; the slot keeps the hash, so a probe touches
 * no entry but the one it finds (with a million keys every check misses
 * the cache: an intrusive chained node, 28 bytes more and a hop, made
 * checks a third slower).
 *
 * Semantics are the module's (src/module/t_ratelimit.c): the core decides on
 * the stored state (or the empty state when the key is absent or expired)
 * and says what to store and until when (core/limiter.h); a peek stores
 * nothing. The sliding log stores the effect through fg_slog_apply. The module rounds
 * expiries up to the millisecond for Redis; here they stay in microseconds,
 * which changes nothing observable: at its expiry a state answers exactly as
 * the empty state.
 *
 * Locking: a test-and-test-and-set spinlock per shard that yields the CPU
 * after a short spin; critical sections are a hash probe and a core call
 * (plus, rarely, a rehash or a sliding log reallocation). Build with
 * -DFG_MEM_STORE_MUTEX for pthread mutexes instead.
 */
#include "mem_store.h"

#include <stdalign.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "key_table.h"

#ifdef FG_MEM_STORE_MUTEX
#include <pthread.h>
#else
#include <sched.h>
#endif

#define DEFAULT_SHARDS 64u
#define MAX_SHARDS 65536u
#define CACHE_LINE 64

/* ------------------------------------------------------------------ locks */

#ifdef FG_MEM_STORE_MUTEX
typedef pthread_mutex_t shard_lock;
static void lock_init(shard_lock *l) { pthread_mutex_init(l, NULL); }
static void lock_destroy(shard_lock *l) { pthread_mutex_destroy(l); }
static inline void lock_acquire(shard_lock *l) { pthread_mutex_lock(l); }
static inline void lock_release(shard_lock *l) { pthread_mutex_unlock(l); }
#else
typedef atomic_uint shard_lock;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static void lock_init(shard_lock *l) { atomic_init(l, 0u); }
static void lock_destroy(shard_lock *l) { (void)l; }

static void lock_acquire_slow(shard_lock *l) {
    unsigned spins = 0;
    for (;;) {
        while (atomic_load_explicit(l, memory_order_relaxed) != 0) {
            if (++spins < 128)
                cpu_relax();
            else
                sched_yield(); /* the holder may have been preempted */
        }
        if (atomic_exchange_explicit(l, 1u, memory_order_acquire) == 0) return;
    }
}

static inline void lock_acquire(shard_lock *l) {
    if (atomic_exchange_explicit(l, 1u, memory_order_acquire) != 0) lock_acquire_slow(l);
}

static inline void lock_release(shard_lock *l) {
    atomic_store_explicit(l, 0u, memory_order_release);
}
#endif

/* ---------------------------------------------------------------- entries */

typedef struct entry {
    int64_t expires_us; /* absent from this time on */
    fg_limiter_state st;
    uint32_t keylen;
    uint8_t family; /* fg_limiter_family */
    unsigned char key[];
} entry;

typedef struct shard {
    alignas(CACHE_LINE) shard_lock lock;
    fg_key_table table;
} shard;

struct fg_mem_store {
    shard *shards;
    unsigned nshards; /* power of two */
    unsigned shift;   /* shard = hash >> shift (masked) */
    uint64_t seed;
    atomic_uint sweep_next; /* shard the next fg_mem_expire starts with */
};

/* The sliding log's memory comes from the C library. */
static const fg_allocator slog_alloc = {realloc, free};

static void entry_free(void *p) {
    entry *e = p;
    if (e->family == FG_LIMITER_SLIDELOG) fg_slog_free(&e->st.slidelog, &slog_alloc);
    free(e);
}

/* ------------------------------------------------------------------- hash */

static inline uint64_t key_hash(const fg_mem_store *s, const void *key, size_t len) {
    uint64_t h = fg_key_hash_seeded(key, len, s->seed);
#ifdef FG_MEM_STORE_TEST_COLLISIONS
    /* Tests only: 1024 distinct hashes, so that different keys share one and
     * the key comparison and long probe sequences are exercised. */
    h = fg_key_hash(&(uint64_t){h & 0x3ff}, sizeof(uint64_t));
#endif
    return h;
}

/* ------------------------------------------------------------------ keys */

/* Keys are byte strings of at most 4 GiB (NULL only when empty). */
static bool valid_key(const void *key, size_t keylen) {
    return (key != NULL || keylen == 0) && keylen <= UINT32_MAX;
}

/* The key's shard, locked, and the key's hash. */
static inline shard *lock_shard(const fg_mem_store *s, const void *key, size_t len, uint64_t *h) {
    *h = key_hash(s, key, len);
    shard *sh = &s->shards[(*h >> s->shift) & (s->nshards - 1)];
    lock_acquire(&sh->lock);
    return sh;
}

static void remove_entry(shard *sh, uint64_t h, entry *e) {
    fg_key_table_remove(&sh->table, h, e);
    entry_free(e);
}

/* --------------------------------------------------------------- the store */

fg_mem_store *fg_mem_store_new(unsigned shards) {
    if (shards == 0) shards = DEFAULT_SHARDS;
    if (shards > MAX_SHARDS) shards = MAX_SHARDS;
    unsigned n = 1, bits = 0;
    while (n < shards) {
        n *= 2;
        bits++;
    }
    fg_mem_store *s = calloc(1, sizeof(*s));
    if (s == NULL) return NULL;
    s->shards = aligned_alloc(CACHE_LINE, (size_t)n * sizeof(shard));
    if (s->shards == NULL) {
        free(s);
        return NULL;
    }
    memset(s->shards, 0, (size_t)n * sizeof(shard));
    for (unsigned i = 0; i < n; i++) {
        lock_init(&s->shards[i].lock);
        s->shards[i].table = FG_KEY_TABLE(entry, keylen, key);
    }
    s->nshards = n;
    s->shift = bits == 0 ? 0 : 64 - bits;
    /* No clock and no global state: the seed comes from where the store
     * lives, which address-space randomization varies between runs. */
    const uintptr_t where[2] = {(uintptr_t)s, (uintptr_t)s->shards};
    s->seed = fg_key_hash(where, sizeof(where));
    atomic_init(&s->sweep_next, 0u);
    return s;
}

void fg_mem_store_free(fg_mem_store *s) {
    if (s == NULL) return;
    for (unsigned i = 0; i < s->nshards; i++) {
        fg_key_table_clear(&s->shards[i].table, entry_free);
        lock_destroy(&s->shards[i].lock);
    }
    free(s->shards);
    free(s);
}

/* ---------------------------------------------------------------- checking */

static fg_mem_status from_core(fg_status st) {
    switch (st) {
    case FG_OK: return FG_MEM_OK;
    case FG_EOVERFLOW: return FG_MEM_OVERFLOW;
    case FG_EINVAL: break;
    }
    return FG_MEM_INVALID;
}

/* Where a check stores: the shard (locked), the key and its entry (NULL
 * when absent). */
typedef struct check {
    shard *sh;
    uint64_t hash;
    const void *key;
    size_t keylen;
    entry *e;
} check;

/* Gives the absent key its entry; false when out of memory (nothing
 * changed). */
static bool entry_create(check *c, fg_limiter_family family) {
    entry *e = fg_key_entry_new(&c->sh->table, sizeof(*e), c->key, c->keylen);
    if (e == NULL) return false;
    e->family = (uint8_t)family;
    if (!fg_key_table_insert(&c->sh->table, c->hash, e)) {
        free(e);
        return false;
    }
    c->e = e;
    return true;
}

/* Applies a sliding log's effect to a copy of the log (a new one when the
 * key is absent), so that a failure changes nothing; fg_slog_apply fails
 * with FG_EOVERFLOW only when memory cannot be had. */
static fg_mem_status apply_effect(check *c, const fg_slog_effect *effect) {
    fg_slog log = c->e != NULL ? c->e->st.slidelog : (fg_slog){NULL, 0, 0, 0};
    fg_status st = fg_slog_apply(&log, effect, &slog_alloc);
    if (st != FG_OK) return st == FG_EOVERFLOW ? FG_MEM_NOMEM : from_core(st);
    if (c->e == NULL && !entry_create(c, FG_LIMITER_SLIDELOG)) {
        fg_slog_free(&log, &slog_alloc);
        return FG_MEM_NOMEM;
    }
    c->e->st.slidelog = log;
    return FG_MEM_OK;
}

/* Stores what an admitted request left (core/limiter.h). */
static fg_mem_status store_next(check *c, fg_limiter_family family, const fg_limiter_next *n) {
    if (family == FG_LIMITER_SLIDELOG) {
        fg_mem_status st = apply_effect(c, &n->effect);
        if (st != FG_MEM_OK) return st;
    } else {
        if (c->e == NULL && !entry_create(c, family)) return FG_MEM_NOMEM;
        c->e->st = n->st;
    }
    c->e->expires_us = n->empty_at_us;
    return FG_MEM_OK;
}

fg_mem_status fg_mem_check(fg_mem_store *s, const void *key, size_t keylen,
                           const fg_limiter *lim, int64_t now_us, int64_t cost, bool peek,
                           fg_decision *out) {
    if (s == NULL || lim == NULL || out == NULL || !valid_key(key, keylen) ||
        (unsigned)lim->family >= FG_LIMITER_FAMILIES)
        return FG_MEM_INVALID;

    check c = {.key = key, .keylen = keylen};
    c.sh = lock_shard(s, key, keylen, &c.hash);
    c.e = fg_key_table_find(&c.sh->table, c.hash, key, keylen);
    if (c.e != NULL && c.e->expires_us <= now_us) {
        remove_entry(c.sh, c.hash, c.e); /* expired: absent */
        c.e = NULL;
    }
    /* A key of another family: the module parses its arguments before it
     * opens the key, so parameters out of range answer an error rather
     * than WRONGTYPE. The core judges them on the empty state. */
    bool wrongtype = c.e != NULL && c.e->family != (uint8_t)lim->family;
    fg_decision d;
    fg_limiter_next next;
    fg_status core = fg_limiter_decide(lim->family, c.e != NULL && !wrongtype ? &c.e->st : NULL,
                                       &lim->p, now_us, cost, &d, &next);
    fg_mem_status st;
    if (wrongtype)
        st = core == FG_EINVAL ? FG_MEM_INVALID : FG_MEM_WRONGTYPE;
    else if (core != FG_OK || peek || !next.store)
        st = from_core(core);
    else
        st = store_next(&c, lim->family, &next);
    lock_release(&c.sh->lock);

    if (st == FG_MEM_OK) *out = d;
    return st;
}

/* ------------------------------------------------------- reset and expiry */

bool fg_mem_reset(fg_mem_store *s, const void *key, size_t keylen, int64_t now_us) {
    if (s == NULL || !valid_key(key, keylen)) return false;
    uint64_t h;
    shard *sh = lock_shard(s, key, keylen, &h);
    bool live = false;
    entry *e = fg_key_table_find(&sh->table, h, key, keylen);
    if (e != NULL) {
        live = e->expires_us > now_us;
        remove_entry(sh, h, e);
        fg_key_table_shrink(&sh->table);
    }
    lock_release(&sh->lock);
    return live;
}

static void view_state(const entry *e, fg_mem_view *view,
                       void (*each_entry)(int64_t ts_us, void *arg), void *arg) {
    view->family = (fg_limiter_family)e->family;
    view->expires_us = e->expires_us;
    switch (view->family) {
    case FG_LIMITER_BUCKET: view->state.tat_ns = e->st.tat_ns; break;
    case FG_LIMITER_FIXED: view->state.fixed = e->st.fixed; break;
    case FG_LIMITER_SLIDING: view->state.sliding = e->st.sliding; break;
    case FG_LIMITER_SLIDELOG:
        for (uint32_t k = 0; each_entry != NULL && k < e->st.slidelog.len; k++)
            each_entry(fg_slog_at(&e->st.slidelog, k), arg);
        break;
    }
}

bool fg_mem_inspect(fg_mem_store *s, const void *key, size_t keylen, int64_t now_us,
                    fg_mem_view *view, void (*each_entry)(int64_t ts_us, void *arg), void *arg) {
    if (s == NULL || view == NULL || !valid_key(key, keylen)) return false;
    uint64_t h;
    shard *sh = lock_shard(s, key, keylen, &h);
    const entry *e = fg_key_table_find(&sh->table, h, key, keylen);
    bool live = e != NULL && e->expires_us > now_us;
    if (live) view_state(e, view, each_entry, arg);
    lock_release(&sh->lock);
    return live;
}

/* What a sweep drops: the entries expired at now_us. */
typedef struct sweep {
    int64_t now_us;
    size_t removed;
} sweep;

static bool drop_expired(void *p, void *arg) {
    sweep *sw = arg;
    if (((entry *)p)->expires_us > sw->now_us) return false;
    entry_free(p);
    sw->removed++;
    return true;
}

size_t fg_mem_expire(fg_mem_store *s, int64_t now_us, size_t max_entries) {
    if (s == NULL) return 0;
    size_t budget = max_entries;
    sweep sw = {now_us, 0};
    unsigned mask = s->nshards - 1;
    unsigned idx = atomic_load_explicit(&s->sweep_next, memory_order_relaxed) & mask;
    for (unsigned k = 0; k < s->nshards && budget > 0; k++) {
        shard *sh = &s->shards[idx];
        lock_acquire(&sh->lock);
        bool complete = fg_key_table_sweep(&sh->table, &budget, drop_expired, &sw);
        lock_release(&sh->lock);
        if (!complete) break; /* budget spent: resume in this shard */
        idx = (idx + 1) & mask;
    }
    atomic_store_explicit(&s->sweep_next, idx, memory_order_relaxed);
    return sw.removed;
}

size_t fg_mem_size(fg_mem_store *s) {
    if (s == NULL) return 0;
    size_t n = 0;
    for (unsigned i = 0; i < s->nshards; i++) {
        lock_acquire(&s->shards[i].lock);
        n += s->shards[i].table.count;
        lock_release(&s->shards[i].lock);
    }
    return n;
}
