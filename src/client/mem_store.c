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
 * the stored state (or the empty state when the key is absent or expired),
 * and only a request admitted with cost > 0 and not a peek stores the next
 * state, with expiry = when that state is empty again (fg_*_expires_at_us).
 * The sliding log stores the effect through fg_slog_apply. The module rounds
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
    union {
        int64_t tat; /* FG_MEM_BUCKET, ns */
        fg_fixed_state fixed;
        fg_sliding_state sliding;
        fg_slog slog;
    } st;
    uint32_t keylen;
    uint8_t family; /* fg_mem_family */
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
    if (e->family == FG_MEM_SLIDELOG) fg_slog_free(&e->st.slog, &slog_alloc);
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

/* What one check works on: the shard (locked), the key and its entry (NULL
 * when absent), and whether an admitted request is to be stored. */
typedef struct check {
    shard *sh;
    uint64_t hash;
    const void *key;
    size_t keylen;
    entry *e;
    const fg_mem_limit *lim;
    int64_t now_us;
    int64_t cost;
    bool commit;
} check;

/* Gives the absent key its entry, with an empty state of `family`; false
 * when out of memory (nothing changed). */
static bool entry_create(check *c, fg_mem_family family) {
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

static fg_mem_status check_bucket(check *c, fg_decision *d) {
    const fg_gcra_params *p = &c->lim->p.bucket;
    int64_t tat = c->e ? c->e->st.tat : 0, next;
    fg_status st = fg_gcra_decide(tat, p, c->now_us, c->cost, d, &next);
    if (st != FG_OK) return from_core(st);
    if (!c->commit || !d->allowed || next == tat) return FG_MEM_OK;
    if (c->e == NULL && !entry_create(c, FG_MEM_BUCKET)) return FG_MEM_NOMEM;
    c->e->st.tat = next;
    c->e->expires_us = fg_gcra_expires_at_us(next);
    return FG_MEM_OK;
}

static fg_mem_status check_fixed(check *c, fg_decision *d) {
    static const fg_fixed_state empty = {0, 0};
    const fg_fixed_params *p = &c->lim->p.fixed;
    fg_fixed_state next;
    fg_status st = fg_fixed_decide(c->e ? &c->e->st.fixed : &empty, p, c->now_us, c->cost, d, &next);
    if (st != FG_OK) return from_core(st);
    if (!c->commit || !d->allowed) return FG_MEM_OK;
    if (c->e == NULL && !entry_create(c, FG_MEM_FIXED)) return FG_MEM_NOMEM;
    c->e->st.fixed = next;
    c->e->expires_us = fg_fixed_expires_at_us(&next, p);
    return FG_MEM_OK;
}

static fg_mem_status check_sliding(check *c, fg_decision *d) {
    static const fg_sliding_state empty = {0, 0, 0};
    const fg_sliding_params *p = &c->lim->p.sliding;
    fg_sliding_state next;
    fg_status st =
        fg_sliding_decide(c->e ? &c->e->st.sliding : &empty, p, c->now_us, c->cost, d, &next);
    if (st != FG_OK) return from_core(st);
    if (!c->commit || !d->allowed) return FG_MEM_OK;
    if (c->e == NULL && !entry_create(c, FG_MEM_SLIDING)) return FG_MEM_NOMEM;
    c->e->st.sliding = next;
    c->e->expires_us = fg_sliding_expires_at_us(&next, p);
    return FG_MEM_OK;
}

/* fg_slog_apply fails with FG_EOVERFLOW only when memory cannot be had. */
static fg_mem_status from_apply(fg_status st) {
    return st == FG_EOVERFLOW ? FG_MEM_NOMEM : from_core(st);
}

static fg_mem_status check_slidelog(check *c, fg_decision *d) {
    static const fg_slog empty = {NULL, 0, 0, 0};
    const fg_slog_params *p = &c->lim->p.slidelog;
    fg_slog_effect effect;
    fg_status st = fg_slog_decide(c->e ? &c->e->st.slog : &empty, p, c->now_us, c->cost, d, &effect);
    if (st != FG_OK) return from_core(st);
    if (!c->commit || !d->allowed) return FG_MEM_OK;
    if (c->e != NULL) {
        /* The log is unchanged when the apply fails. */
        st = fg_slog_apply(&c->e->st.slog, &effect, &slog_alloc);
        if (st != FG_OK) return from_apply(st);
    } else {
        /* Build the log first, so a failure leaves no entry behind. */
        fg_slog log = {NULL, 0, 0, 0};
        st = fg_slog_apply(&log, &effect, &slog_alloc);
        if (st != FG_OK || !entry_create(c, FG_MEM_SLIDELOG)) {
            fg_slog_free(&log, &slog_alloc);
            return st != FG_OK ? from_apply(st) : FG_MEM_NOMEM;
        }
        c->e->st.slog = log;
    }
    c->e->expires_us = fg_slog_expires_at_us(&c->e->st.slog, p);
    return FG_MEM_OK;
}

/* A key of another family: the module parses its arguments before it opens
 * the key, so parameters out of range answer an error rather than WRONGTYPE.
 * The core judges them on the empty state (nothing is written). */
static fg_mem_status check_wrongtype(const check *c) {
    fg_decision d;
    fg_status st = FG_EINVAL; /* every family is a case below */
    switch (c->lim->family) {
    case FG_MEM_BUCKET: {
        int64_t next;
        st = fg_gcra_decide(0, &c->lim->p.bucket, c->now_us, c->cost, &d, &next);
        break;
    }
    case FG_MEM_FIXED: {
        fg_fixed_state empty = {0, 0}, next;
        st = fg_fixed_decide(&empty, &c->lim->p.fixed, c->now_us, c->cost, &d, &next);
        break;
    }
    case FG_MEM_SLIDING: {
        fg_sliding_state empty = {0, 0, 0}, next;
        st = fg_sliding_decide(&empty, &c->lim->p.sliding, c->now_us, c->cost, &d, &next);
        break;
    }
    case FG_MEM_SLIDELOG: {
        fg_slog empty = {NULL, 0, 0, 0};
        fg_slog_effect effect;
        st = fg_slog_decide(&empty, &c->lim->p.slidelog, c->now_us, c->cost, &d, &effect);
        break;
    }
    }
    return st == FG_EINVAL ? FG_MEM_INVALID : FG_MEM_WRONGTYPE;
}

fg_mem_status fg_mem_check(fg_mem_store *s, const void *key, size_t keylen,
                           const fg_mem_limit *lim, int64_t now_us, int64_t cost, bool peek,
                           fg_decision *out) {
    if (s == NULL || lim == NULL || out == NULL || !valid_key(key, keylen) ||
        (unsigned)lim->family > FG_MEM_SLIDELOG)
        return FG_MEM_INVALID;

    check c = {.key = key,
               .keylen = keylen,
               .lim = lim,
               .now_us = now_us,
               .cost = cost,
               .commit = !peek && cost > 0};
    c.sh = lock_shard(s, key, keylen, &c.hash);
    c.e = fg_key_table_find(&c.sh->table, c.hash, key, keylen);
    if (c.e != NULL && c.e->expires_us <= now_us) {
        remove_entry(c.sh, c.hash, c.e); /* expired: absent */
        c.e = NULL;
    }
    fg_decision d;
    fg_mem_status st = FG_MEM_INVALID; /* every family is a case below */
    if (c.e != NULL && c.e->family != (uint8_t)lim->family) {
        st = check_wrongtype(&c);
    } else {
        switch (lim->family) {
        case FG_MEM_BUCKET: st = check_bucket(&c, &d); break;
        case FG_MEM_FIXED: st = check_fixed(&c, &d); break;
        case FG_MEM_SLIDING: st = check_sliding(&c, &d); break;
        case FG_MEM_SLIDELOG: st = check_slidelog(&c, &d); break;
        }
    }
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
    view->family = (fg_mem_family)e->family;
    view->expires_us = e->expires_us;
    switch (view->family) {
    case FG_MEM_BUCKET: view->state.tat_ns = e->st.tat; break;
    case FG_MEM_FIXED: view->state.fixed = e->st.fixed; break;
    case FG_MEM_SLIDING: view->state.sliding = e->st.sliding; break;
    case FG_MEM_SLIDELOG:
        for (uint32_t k = 0; each_entry != NULL && k < e->st.slog.len; k++)
            each_entry(fg_slog_at(&e->st.slog, k), arg);
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
