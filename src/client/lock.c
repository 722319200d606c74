/*
 * lock.c - locks, semaphores and multi-key locks (floodgate.h, "locks"):
 * the calls on every backend, and owner ids.
 *
 * Every call first checks what every backend checks the same way: a client
 * whose backend has locks (redis+cluster: has none: FG_CODE_UNSUPPORTED),
 * the arguments given, the options, the number of keys, and then the
 * arguments as the module parses its commands, in its order and with its
 * messages (so bad input is the same error on every backend, and costs no
 * round trip). Then it calls through the lock table of the client's
 * backend (backend.h): the module's commands on a server (remote_lock.c),
 * the in-process table on mem: (mem_lock.c).
 */
#include <string.h>

#include "backend.h"
#include "client.h"
#include "error.h"
#include "lock.h"
#include "lock_args.h"
#include "messages.h"
#include "params.h"
#include "random_bytes.h"

#define MULTI_MAX 64 /* keys of FG.MLOCK */
#define MSG_MAX   160

void fg_lock_options_init(fg_lock_options *opts) {
    memset(opts, 0, sizeof(*opts));
    opts->lease_ms = 30000;
    opts->durable_timeout_ms = 1000;
}

void fg_owner_id(char *buf) {
    static const char hex[] = "0123456789abcdef";
    unsigned char raw[FG_OWNER_ID_LEN / 2];
    fg_random_bytes(raw, sizeof(raw));
    for (size_t i = 0; i < sizeof(raw); i++) {
        buf[2 * i] = hex[raw[i] >> 4];
        buf[2 * i + 1] = hex[raw[i] & 15];
    }
    buf[FG_OWNER_ID_LEN] = '\0';
}

/* ----------------------------------------------------------------- checks */

/* The checks every lock call starts with: a client with locks, and the
 * arguments it needs. */
static fg_code begin(fg_client *c, bool args_given, fg_family_ref *l, fg_error *err) {
    if (c == NULL) return fg_set_error(err, FG_CODE_INVALID, "a client is required");
    fg_code rc = fg_client_family(c, FG_FAMILY_LOCKS, l, err);
    if (rc == FG_CODE_OK && !args_given)
        rc = fg_set_error(err, FG_CODE_INVALID, "a key, an owner or a result is missing (NULL)");
    return rc;
}

static fg_code check_options(const fg_lock_options *o, fg_error *err) {
    if (o->wait_ms < -1)
        return fg_set_error(err, FG_CODE_INVALID,
                            "wait_ms must be 0 (no wait), -1 (no timeout) or a timeout in ms");
    if (o->renew_max_ms < 0)
        return fg_set_error(err, FG_CODE_INVALID, "renew_max_ms must be 0 (never) or more");
    if (o->durable_replicas < 0 || (o->durable_replicas > 0 && o->durable_timeout_ms < 1))
        return fg_set_error(err, FG_CODE_INVALID,
                            "durable mode needs durable_replicas >= 0 and durable_timeout_ms >= 1");
    return FG_CODE_OK;
}

static fg_code options(const fg_lock_options *opts, fg_lock_options *o, fg_error *err) {
    if (opts != NULL)
        *o = *opts;
    else
        fg_lock_options_init(o);
    return check_options(o, err);
}

static bool keys_given(const char *const *keys, size_t count) {
    if (keys == NULL) return false;
    for (size_t i = 0; i < count; i++)
        if (keys[i] == NULL) return false;
    return true;
}

static fg_code check_count(size_t count, fg_error *err) {
    if (count >= 1 && count <= MULTI_MAX) return FG_CODE_OK;
    return fg_set_error(err, FG_CODE_INVALID, "ERR numkeys must be between 1 and %d", MULTI_MAX);
}

/* The module's argument checks. */

static fg_code check_integer(int64_t v, const char *name, int64_t min, int64_t max, fg_error *err) {
    char msg[MSG_MAX];
    if (fg_param_integer(v, name, min, max, msg, sizeof(msg))) return FG_CODE_OK;
    return fg_set_error(err, FG_CODE_INVALID, "%s", msg);
}

static fg_code check_owner(const char *owner, fg_error *err) {
    size_t len = strlen(owner);
    if (len >= 1 && len <= FG_LOCK_OWNER_MAX) return FG_CODE_OK;
    return fg_set_error(err, FG_CODE_INVALID, FG_ERR_LOCK_OWNER, FG_LOCK_OWNER_MAX);
}

static fg_code check_lease(int64_t lease_ms, fg_error *err) {
    return check_integer(lease_ms, "lease_ms", 1, FG_LOCK_MAX_LEASE_MS, err);
}

/* WAIT timeout_ms: the backends send wait_ms, or nothing for -1 (no
 * timeout). */
static fg_code check_wait(const fg_lock_options *o, fg_error *err) {
    if (o->wait_ms <= 0) return FG_CODE_OK;
    return check_integer(o->wait_ms, "timeout_ms", 0, FG_LOCK_MAX_LEASE_MS, err);
}

/* An owner, then a lease and a wait, as FG.LOCK and FG.MLOCK read them. */
static fg_code check_grant(const char *owner, const fg_lock_options *o, fg_error *err) {
    fg_code rc = check_owner(owner, err);
    if (rc == FG_CODE_OK) rc = check_lease(o->lease_ms, err);
    return rc == FG_CODE_OK ? check_wait(o, err) : rc;
}

static fg_code check_distinct(const char *const *keys, size_t n, fg_error *err) {
    for (size_t i = 1; i < n; i++)
        for (size_t j = 0; j < i; j++)
            if (strcmp(keys[i], keys[j]) == 0)
                return fg_set_error(err, FG_CODE_INVALID, FG_ERR_LOCK_DUPLICATE_KEY);
    return FG_CODE_OK;
}

static fg_code check_permits(int64_t permits, fg_error *err) {
    return check_integer(permits, "permits", 1, FG_LOCK_MAX_CAPACITY, err);
}

/* FG.ACQUIRE's order: capacity, owner, permits, lease, wait. */
fg_code fg_lock_check_acquire(int64_t capacity, const char *owner, int64_t permits,
                              const fg_lock_options *o, fg_error *err) {
    fg_code rc = check_integer(capacity, "capacity", 1, FG_LOCK_MAX_CAPACITY, err);
    if (rc == FG_CODE_OK) rc = check_owner(owner, err);
    if (rc == FG_CODE_OK) rc = check_permits(permits, err);
    if (rc == FG_CODE_OK) rc = check_lease(o->lease_ms, err);
    if (rc == FG_CODE_OK) rc = check_wait(o, err);
    if (rc == FG_CODE_OK && permits > capacity)
        rc = fg_set_error(err, FG_CODE_INVALID, FG_ERR_LOCK_PERMITS);
    return rc;
}

/* FG.RELEASE's: permits (0: all, not sent), then the owner. */
fg_code fg_lock_check_release(const char *owner, int64_t permits, fg_error *err) {
    if (permits < 0) return fg_set_error(err, FG_CODE_INVALID, "permits must be 0 (all) or more");
    fg_code rc = permits > 0 ? check_permits(permits, err) : FG_CODE_OK;
    return rc == FG_CODE_OK ? check_owner(owner, err) : rc;
}

/* FG.EXTEND's: the owner, then the lease. */
fg_code fg_lock_check_extend(const char *owner, int64_t lease_ms, fg_error *err) {
    fg_code rc = check_owner(owner, err);
    return rc == FG_CODE_OK ? check_lease(lease_ms, err) : rc;
}

/* ------------------------------------------------------------- acquiring */

fg_code fg_lock(fg_client *c, const char *key, const char *owner, const fg_lock_options *opts,
                fg_lock_grant *out, fg_error *err) {
    fg_family_ref l;
    fg_lock_options o;
    fg_code rc = begin(c, key != NULL && owner != NULL && out != NULL, &l, err);
    if (rc == FG_CODE_OK) rc = options(opts, &o, err);
    if (rc == FG_CODE_OK) rc = check_grant(owner, &o, err);
    return rc != FG_CODE_OK ? rc : l.ops.locks->lock(l.s, key, owner, &o, out, err);
}

fg_code fg_semaphore_acquire(fg_client *c, const char *key, int64_t capacity, const char *owner,
                             int64_t permits, const fg_lock_options *opts, fg_lock_grant *out,
                             fg_error *err) {
    fg_family_ref l;
    fg_lock_options o;
    fg_code rc = begin(c, key != NULL && owner != NULL && out != NULL, &l, err);
    if (rc == FG_CODE_OK) rc = options(opts, &o, err);
    if (rc == FG_CODE_OK) rc = fg_lock_check_acquire(capacity, owner, permits, &o, err);
    if (rc != FG_CODE_OK) return rc;
    return l.ops.locks->semaphore_acquire(l.s, key, capacity, owner, permits, &o, out, err);
}

fg_code fg_lock_multi(fg_client *c, const char *const *keys, size_t count, const char *owner,
                      const fg_lock_options *opts, fg_lock_grant *out, fg_error *err) {
    fg_family_ref l;
    fg_lock_options o;
    fg_code rc = begin(c, keys_given(keys, count) && owner != NULL && out != NULL, &l, err);
    if (rc == FG_CODE_OK) rc = check_count(count, err);
    if (rc == FG_CODE_OK) rc = options(opts, &o, err);
    if (rc == FG_CODE_OK) rc = check_distinct(keys, count, err);
    if (rc == FG_CODE_OK) rc = check_grant(owner, &o, err);
    return rc != FG_CODE_OK ? rc : l.ops.locks->lock_multi(l.s, keys, count, owner, &o, out, err);
}

/* ------------------------------------------------------------ releasing */

fg_code fg_unlock(fg_client *c, const char *key, const char *owner, int64_t *holds_left,
                  fg_error *err) {
    fg_family_ref l;
    fg_code rc = begin(c, key != NULL && owner != NULL, &l, err);
    if (rc == FG_CODE_OK) rc = check_owner(owner, err);
    return rc != FG_CODE_OK ? rc : l.ops.locks->unlock(l.s, key, owner, holds_left, err);
}

fg_code fg_semaphore_release(fg_client *c, const char *key, const char *owner, int64_t permits,
                             int64_t *permits_left, fg_error *err) {
    fg_family_ref l;
    fg_code rc = begin(c, key != NULL && owner != NULL, &l, err);
    if (rc == FG_CODE_OK) rc = fg_lock_check_release(owner, permits, err);
    if (rc != FG_CODE_OK) return rc;
    return l.ops.locks->semaphore_release(l.s, key, owner, permits, permits_left, err);
}

fg_code fg_unlock_multi(fg_client *c, const char *const *keys, size_t count, const char *owner,
                        int64_t *released, fg_error *err) {
    fg_family_ref l;
    fg_code rc = begin(c, keys_given(keys, count) && owner != NULL, &l, err);
    if (rc == FG_CODE_OK) rc = check_count(count, err);
    if (rc == FG_CODE_OK) rc = check_distinct(keys, count, err);
    if (rc == FG_CODE_OK) rc = check_owner(owner, err);
    return rc != FG_CODE_OK ? rc
                            : l.ops.locks->unlock_multi(l.s, keys, count, owner, released, err);
}

fg_code fg_extend(fg_client *c, const char *key, const char *owner, int64_t lease_ms,
                  bool *extended, fg_error *err) {
    fg_family_ref l;
    fg_code rc = begin(c, key != NULL && owner != NULL, &l, err);
    if (rc == FG_CODE_OK) rc = fg_lock_check_extend(owner, lease_ms, err);
    return rc != FG_CODE_OK ? rc : l.ops.locks->extend(l.s, key, owner, lease_ms, extended, err);
}
