/*
 * lease.h - the token leases of a client (internal): units taken from the
 * server in one request and handed out locally, one lease per slot of a
 * small table indexed by the key's hash. See lease.c.
 *
 * A slot is claimed by the one thread that asks the server for its next
 * lease; other threads wanting that slot wait until the claim ends, so a key
 * never has two lease requests in flight and no lease is ever lost.
 */
#ifndef FG_LEASE_H
#define FG_LEASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "floodgate.h"
#include "key_table.h" /* fg_key_hash, which picks a key's slot */

#define FG_LEASE_SLOTS 512
#define FG_LEASE_KEY_MAX 120
/* Leases a claim hands back at most: its slot's and expired ones of the
 * next slots, so that a client gives back what it no longer uses while it
 * works on other keys. */
#define FG_LEASE_RETURNS 4

typedef struct fg_lease_table fg_lease_table;

/* A lease: units of a key that the server charged and nobody used yet. */
typedef struct fg_lease {
    fg_limit limit;
    int64_t units;    /* left */
    int64_t size;     /* charged */
    int64_t taken_us; /* when it was asked for, in the client's clock */
    int64_t reset_ms; /* the server's reset_after_ms then */
    size_t keylen;
    char key[FG_LEASE_KEY_MAX + 1];
} fg_lease;

typedef enum fg_lease_outcome {
    FG_LEASE_HIT,     /* served from a live lease: *out is the answer */
    FG_LEASE_CLAIMED, /* the slot is the caller's until fg_lease_install or fg_lease_deny */
    FG_LEASE_PLAIN,   /* a lease was denied lately: check plainly */
    FG_LEASE_NONE,    /* the key is too long for the table */
} fg_lease_outcome;

fg_lease_table *fg_lease_table_new(void);
void fg_lease_table_free(fg_lease_table *t);

/* Takes `cost` units from the live lease of key and limit. Failing that,
 * claims the key's slot (*slot): whatever lease it held (of this key or of
 * the key it evicts, live or expired), and the expired leases of the next
 * few slots, move to old[] (FG_LEASE_RETURNS entries), *nold of them, to be
 * given back. */
fg_lease_outcome fg_lease_take(fg_lease_table *t, const char *key, const fg_limit *l,
                               int64_t cost, int64_t now, fg_result *out, fg_lease *old,
                               size_t *nold, size_t *slot);

/* Ends a claim, with a new lease (units 0: none; key, limit and units are
 * read from `lease`) that serves until expires_us. */
void fg_lease_install(fg_lease_table *t, size_t slot, const char *key, const fg_lease *lease,
                      int64_t expires_us);

/* Ends a claim whose lease the server denied: fg_lease_take answers
 * FG_LEASE_PLAIN for the key and limit until plain_until_us. */
void fg_lease_deny(fg_lease_table *t, size_t slot, const char *key, const fg_limit *l,
                   int64_t plain_until_us);

/* Drops the key's lease without giving it back (the key was reset), and
 * makes every claim in flight install nothing (see resets in lease.c). */
void fg_lease_forget(fg_lease_table *t, const char *key);

/* Moves every lease with units into out[] (FG_LEASE_SLOTS entries) and
 * returns how many; for fg_close, when no other call runs. */
size_t fg_lease_drain(fg_lease_table *t, fg_lease *out);

#endif
