/*
 * renewal.h - the renewal thread of a client (internal): keeps alive the
 * leases of locks, semaphores and multi-key locks taken with renew = true,
 * with FG.EXTEND on a connection of its own, or through a transport of the
 * caller's (the mem: table's). See renewal.c.
 *
 * A registration is a set of keys of one owner (one key for a lock or a
 * semaphore, several for a multi-key lock) and the options of its grant.
 */
#ifndef FG_RENEWAL_H
#define FG_RENEWAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "remote/conn.h"
#include "floodgate.h"
#include "url.h"

typedef struct fg_renewal fg_renewal;

/* One lease to extend: owner's on key, to end lease_us from now. */
typedef struct fg_renewal_extension {
    const char *key;
    const char *owner;
    int64_t lease_us;
} fg_renewal_extension;

/* What one extension found. */
typedef enum fg_extended {
    FG_EXTENDED,     /* the owner held the key: its lease is extended */
    FG_NOT_EXTENDED, /* the owner does not hold the key */
    FG_UNANSWERED,   /* an error reply: nothing is known */
} fg_extended;

/* How renewals reach the locks. */
typedef struct fg_renewal_transport {
    /* Extends ext[0..n) within timeout_ms, saying in out[i] what each
     * found. FG_CODE_OK, or why nothing at all is known. Called by the
     * thread without its mutex. */
    fg_code (*extend)(void *arg, const fg_renewal_extension *ext, size_t n, fg_extended *out,
                      int timeout_ms);
    void *arg;
    int64_t timeout_ms; /* the longest wait for one call */
    /* Never fails (an in-process table): a lease that ends is the table's
     * to say (FG_LOST_NOT_HELD), never counted here as FG_LOST_UNREACHABLE. */
    bool reliable;
} fg_renewal_transport;

/* Starts the thread, which connects to addr with cfg's timeouts when it
 * first renews (FG.EXTEND). NULL with err filled when it cannot. */
fg_renewal *fg_renewal_start(const fg_url *addr, const fg_conn_config *cfg, fg_error *err);

/* The same with a transport of the caller's (t->arg lives until
 * fg_renewal_stop returns). */
fg_renewal *fg_renewal_start_with(const fg_renewal_transport *t, fg_error *err);

/* Stops and joins the thread (an on_lost call in progress ends first) and
 * forgets every registration. */
void fg_renewal_stop(fg_renewal *r);

/* Renews keys[0..n) of owner (all copied) every opts->lease_ms / 3, from
 * granted_us (monotonic: when the current lease began, or earlier), until
 * released or lost (opts: lease_ms, renew_max_ms, on_lost, on_lost_arg).
 * The same owner and keys registered again (a re-entry) keep one
 * registration, with the new lease and callback. */
fg_code fg_renewal_add(fg_renewal *r, const char *const *keys, size_t n, const char *owner,
                       int64_t granted_us, const fg_lock_options *opts, fg_error *err);

/* The same in two steps, for a caller that must not fail after its grant:
 * the registration made before (NULL when out of memory), then given to
 * the thread (a re-entry frees it and updates the one it has), or
 * discarded. */
typedef struct fg_renewal_entry fg_renewal_entry;
fg_renewal_entry *fg_renewal_prepare(const char *const *keys, size_t n, const char *owner);
void fg_renewal_commit(fg_renewal *r, fg_renewal_entry *e, int64_t granted_us,
                       const fg_lock_options *opts);
void fg_renewal_discard(fg_renewal_entry *e);

/* keys[0..n) of owner were released through the client: they are no
 * longer renewed (a registration ends with its last key). */
void fg_renewal_released(fg_renewal *r, const char *const *keys, size_t n, const char *owner);

/* An unlock in flight: the caller's, on its stack between begin and end. */
typedef struct fg_unlock_in_flight {
    const char *const *keys;
    size_t n;
    const char *owner;
    struct fg_unlock_in_flight *next;
} fg_unlock_in_flight;

/* Around an unlock of keys[0..n) by owner through the client: between the
 * two, a renewal that finds one of those keys not held by that owner does
 * not report it (the unlock may have released it); other locks are
 * reported as usual. released: the owner holds none of the keys any more,
 * so they are no longer renewed (a registration ends with its last key). */
void fg_renewal_unlock_begin(fg_renewal *r, fg_unlock_in_flight *u, const char *const *keys,
                             size_t n, const char *owner);
void fg_renewal_unlock_end(fg_renewal *r, fg_unlock_in_flight *u, bool released);

#endif
