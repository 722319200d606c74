/*
 * lease.c - the lease table of a client (lease.h).
 *
 * One mutex guards the table: a hit is a lookup and a subtraction, far
 * shorter than the round trip it saves. A slot holds one lease; a key that
 * hashes to a slot held by another key evicts it, and the evicted units go
 * back to the server with the new lease request (fg_lease_take hands them
 * to the caller), so a collision costs nothing but an earlier refund.
 *
 * A key whose lease request was denied is checked plainly for a while: its
 * bucket or window lacks a lease's worth of units, so the next requests
 * would most likely be denied too, and each denial costs a second round
 * trip for the plain check that follows it.
 *
 * While a thread asks the server for a slot's next lease, the slot is
 * claimed: others wait on `done` instead of sending a request of their own.
 * Two requests in flight for one key would take two leases where one slot
 * can keep only one, and the second would have to be given back at once.
 */
#include "lease.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct slot {
    bool claimed;
    uint64_t claim_resets;  /* the table's resets when the claim began */
    int64_t expires_us;     /* the lease serves while now < expires_us */
    int64_t plain_until_us; /* after a denied lease: no lease request before */
    fg_lease lease;         /* key and limit of the last claim; units 0: empty */
} slot;

struct fg_lease_table {
    pthread_mutex_t lock;
    pthread_cond_t done; /* a claim ended */
    /* Keys forgotten (reset) so far. A lease asked for before a reset may
     * have been charged before the server reset the key: installed, it would
     * serve units on top of a full bucket, so a claim that saw a reset
     * installs nothing. */
    uint64_t resets;
    slot slots[FG_LEASE_SLOTS];
};

fg_lease_table *fg_lease_table_new(void) {
    fg_lease_table *t = calloc(1, sizeof(*t));
    if (t == NULL) return NULL;
    pthread_mutex_init(&t->lock, NULL);
    pthread_cond_init(&t->done, NULL);
    return t;
}

void fg_lease_table_free(fg_lease_table *t) {
    if (t == NULL) return;
    pthread_mutex_destroy(&t->lock);
    pthread_cond_destroy(&t->done);
    free(t);
}

static bool same(const slot *s, const char *key, size_t len, const fg_limit *l) {
    const fg_limit *m = &s->lease.limit;
    return s->lease.keylen == len && memcmp(s->lease.key, key, len) == 0 &&
           m->algorithm == l->algorithm && m->limit == l->limit && m->window_ms == l->window_ms &&
           m->rate == l->rate;
}

static void hit(slot *s, int64_t cost, int64_t now, fg_result *out) {
    int64_t reset_ms = s->lease.reset_ms - (now - s->lease.taken_us) / 1000;
    s->lease.units -= cost;
    *out = (fg_result){.allowed = true,
                       .limit = s->lease.limit.limit,
                       .remaining = s->lease.units,
                       .retry_after_ms = -1,
                       .reset_after_ms = reset_ms > 0 ? reset_ms : 0,
                       .source = FG_SOURCE_LEASE};
}

/* The claim's own slot first, then expired leases after it. */
static size_t collect(fg_lease_table *t, size_t i, int64_t now, fg_lease *old) {
    size_t n = 0;
    if (t->slots[i].lease.units > 0) old[n++] = t->slots[i].lease;
    t->slots[i].lease.units = 0;
    for (size_t k = 1; k < FG_LEASE_RETURNS; k++) {
        slot *s = &t->slots[(i + k) % FG_LEASE_SLOTS];
        if (s->claimed || s->lease.units == 0 || now < s->expires_us) continue;
        old[n++] = s->lease;
        s->lease.units = 0;
    }
    return n;
}

fg_lease_outcome fg_lease_take(fg_lease_table *t, const char *key, const fg_limit *l, int64_t cost,
                               int64_t now, fg_result *out, fg_lease *old, size_t *nold,
                               size_t *slot_index) {
    size_t len = strlen(key);
    if (len > FG_LEASE_KEY_MAX) return FG_LEASE_NONE;
    size_t i = (size_t)(fg_key_hash(key, len) % FG_LEASE_SLOTS);
    slot *s = &t->slots[i];
    pthread_mutex_lock(&t->lock);
    while (s->claimed)
        pthread_cond_wait(&t->done, &t->lock);
    fg_lease_outcome outcome = FG_LEASE_HIT;
    bool mine = same(s, key, len, l);
    if (mine && now < s->expires_us && s->lease.units >= cost) {
        hit(s, cost, now, out);
    } else if (mine && now < s->plain_until_us) {
        outcome = FG_LEASE_PLAIN;
    } else {
        *nold = collect(t, i, now, old);
        s->claimed = true;
        s->claim_resets = t->resets;
        *slot_index = i;
        outcome = FG_LEASE_CLAIMED;
    }
    pthread_mutex_unlock(&t->lock);
    return outcome;
}

/* Ends the claim of slot s with `lease` (with t->lock held). */
static void release(fg_lease_table *t, slot *s, const char *key, const fg_lease *lease) {
    size_t len = strlen(key);
    s->claimed = false;
    s->lease = *lease;
    s->lease.keylen = len;
    memcpy(s->lease.key, key, len);
    s->lease.key[len] = '\0';
    pthread_cond_broadcast(&t->done);
}

void fg_lease_install(fg_lease_table *t, size_t i, const char *key, const fg_lease *lease,
                      int64_t expires_us) {
    slot *s = &t->slots[i];
    pthread_mutex_lock(&t->lock);
    fg_lease none = {.limit = lease->limit};
    bool stale = s->claim_resets != t->resets;
    s->expires_us = stale ? 0 : expires_us;
    s->plain_until_us = 0;
    release(t, s, key, stale ? &none : lease);
    pthread_mutex_unlock(&t->lock);
}

void fg_lease_deny(fg_lease_table *t, size_t i, const char *key, const fg_limit *l,
                   int64_t plain_until_us) {
    slot *s = &t->slots[i];
    fg_lease none = {.limit = *l};
    pthread_mutex_lock(&t->lock);
    s->plain_until_us = plain_until_us;
    release(t, s, key, &none);
    pthread_mutex_unlock(&t->lock);
}

void fg_lease_forget(fg_lease_table *t, const char *key) {
    size_t len = strlen(key);
    if (len > FG_LEASE_KEY_MAX) return;
    slot *s = &t->slots[fg_key_hash(key, len) % FG_LEASE_SLOTS];
    pthread_mutex_lock(&t->lock);
    t->resets++;
    if (s->lease.keylen == len && memcmp(s->lease.key, key, len) == 0) {
        s->lease.units = 0;
        s->plain_until_us = 0;
    }
    pthread_mutex_unlock(&t->lock);
}

size_t fg_lease_drain(fg_lease_table *t, fg_lease *out) {
    size_t n = 0;
    pthread_mutex_lock(&t->lock);
    for (size_t i = 0; i < FG_LEASE_SLOTS; i++) {
        if (t->slots[i].lease.units > 0) out[n++] = t->slots[i].lease;
        t->slots[i].lease.units = 0;
    }
    pthread_mutex_unlock(&t->lock);
    return n;
}
