/*
 * renewal.h - the renewal thread of a client (internal): keeps alive the
 * leases of locks, semaphores and multi-key locks taken with renew = true,
 * with FG.EXTEND on a connection of its own. See renewal.c.
 *
 * A registration is a set of keys of one owner (one key for a lock or a
 * semaphore, several for a multi-key lock) and the options of its grant.
 */
#ifndef FG_RENEWAL_H
#define FG_RENEWAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "conn.h"
#include "floodgate.h"
#include "url.h"

typedef struct fg_renewal fg_renewal;

/* Starts the thread, which connects to addr with cfg's timeouts when it
 * first renews. NULL with err filled when it cannot. */
fg_renewal *fg_renewal_start(const fg_url *addr, const fg_conn_config *cfg, fg_error *err);

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
