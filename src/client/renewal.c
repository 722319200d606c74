/*
 * renewal.c - the renewal thread of a client (renewal.h).
 *
 * One thread per client, started with its first renewed lock, asleep until
 * the next renewal is due. Each registration is renewed lease/3 after its
 * last success: every registration due at a wake-up is renewed in one
 * pipeline (an FG.EXTEND per key) on the thread's own connection, so the
 * callers' requests on the shared connection never wait behind a renewal,
 * and a thousand locks do not cost a thousand round trips.
 *
 * A registration ends when
 *
 *   - the client releases its keys (fg_unlock and the others): silently;
 *   - FG.EXTEND answers 0 for one of its keys: on_lost(FG_LOST_NOT_HELD);
 *   - renewals fail (I/O, timeouts, error replies) until its lease ends:
 *     on_lost(FG_LOST_UNREACHABLE). A failed renewal is tried again every
 *     lease/10, and the lease end is counted on the monotonic clock from the
 *     moment the last successful renewal was sent: the server's lease began
 *     later, so the client never thinks a lease alive that the server ended
 *     (but for the first lease of a grant made after waiting, counted from
 *     the reply: at most one trip late).
 *     The round trip's timeout is the shortest lease left in it (at most
 *     command_timeout_ms), so a stopped server is noticed in time;
 *   - renew_max_ms have passed since the grant: on_lost(FG_LOST_RENEW_LIMIT),
 *     and the last lease runs out by itself.
 *
 * Only the thread frees registrations. Other threads add them and mark keys
 * released under the mutex, so the thread may read an owner and its keys
 * without the mutex during its round trip, and on_lost gets strings that
 * stay valid while it runs (it is called without the mutex).
 *
 * A renewal sent just before an fg_unlock reaches the server can answer 0
 * although nothing was lost. While an unlock is in flight, a 0 is therefore
 * not reported but asked again a moment later: a key released meanwhile is
 * no longer renewed then, and a key really lost answers 0 again.
 */
#include "renewal.h"

#include "error.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define BATCH_MAX      64    /* commands in one round trip: a multi-key lock's 64 keys fit */
#define RECHECK_US     10000 /* a 0 met while an unlock was in flight is asked again after this */
#define MIN_STEP_US    1000  /* the shortest interval between two renewals */
#define MIN_TIMEOUT_MS 10
#define NEVER          INT64_MAX

typedef void (*lost_fn)(const char *key, const char *owner, fg_lost_reason why, void *arg);

typedef struct fg_renewal_entry {
    struct fg_renewal_entry *next;
    char *owner;
    char **keys; /* read without the mutex by the thread: never change */
    size_t nkeys;
    bool *released; /* per key, set by unlocks */
    size_t live;    /* keys not released; the entry ends at 0 */
    int64_t lease_us;
    int64_t due_us;         /* the next renewal, or the renew limit if sooner */
    int64_t valid_until_us; /* the lease end as of the last success */
    int64_t renew_until_us; /* NEVER without renew_max_ms */
    lost_fn on_lost;
    void *on_lost_arg;
    bool lost;     /* renewal stopped: on_lost is due (or NULL) */
    bool reported; /* on_lost was called */
    fg_lost_reason why;
    size_t lost_key;
} entry; /* fg_renewal_entry outside */

/* One FG.EXTEND of a round trip. */
typedef struct job {
    entry *e;
    size_t key;
    int64_t lease_us;
} job;

/* The remote transport: FG.EXTEND over the thread's own connection. */
typedef struct remote {
    fg_url addr;
    fg_conn_config cfg;
    fg_conn conn;
    fg_argv cmds[BATCH_MAX];
    redisReply *replies[BATCH_MAX];
} remote;

struct fg_renewal {
    fg_renewal_transport t;
    remote *remote; /* fg_renewal_start's transport, or NULL */
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake; /* a registration came, or stop */
    entry *entries;      /* under lock */
    fg_unlock_in_flight *unlocking; /* under lock */
    bool stopping;       /* under lock */
    /* The thread's round trip. */
    job jobs[BATCH_MAX];
    fg_renewal_extension ext[BATCH_MAX];
    fg_extended found[BATCH_MAX];
};

static int64_t min64(int64_t a, int64_t b) {
    return a < b ? a : b;
}

static int64_t max64(int64_t a, int64_t b) {
    return a > b ? a : b;
}

static int64_t step_us(int64_t lease_us, int64_t divisor) {
    int64_t step = lease_us / divisor;
    return step < MIN_STEP_US ? MIN_STEP_US : step;
}

/* The next look at e: at `when`, or at its renew limit if sooner. */
static void schedule(entry *e, int64_t when) {
    e->due_us = min64(when, e->renew_until_us);
}

static void entry_free(entry *e) {
    for (size_t i = 0; e->keys != NULL && i < e->nkeys; i++)
        free(e->keys[i]);
    free(e->keys);
    free(e->released);
    free(e->owner);
    free(e);
}

/* ----------------------------------------------------------- registration */

static entry *entry_new(const char *const *keys, size_t n, const char *owner) {
    entry *e = calloc(1, sizeof(*e));
    if (e == NULL) return NULL;
    e->nkeys = e->live = n;
    e->owner = strdup(owner);
    e->keys = calloc(n, sizeof(char *));
    e->released = calloc(n, sizeof(bool));
    bool ok = e->owner != NULL && e->keys != NULL && e->released != NULL;
    for (size_t i = 0; ok && i < n; i++)
        ok = (e->keys[i] = strdup(keys[i])) != NULL;
    if (ok) return e;
    entry_free(e);
    return NULL;
}

static bool same_lock(const entry *e, const char *const *keys, size_t n, const char *owner) {
    if (e->lost || e->live != n || e->nkeys != n || strcmp(e->owner, owner) != 0) return false;
    for (size_t i = 0; i < n; i++)
        if (strcmp(e->keys[i], keys[i]) != 0) return false;
    return true;
}

fg_renewal_entry *fg_renewal_prepare(const char *const *keys, size_t n, const char *owner) {
    return entry_new(keys, n, owner);
}

void fg_renewal_discard(fg_renewal_entry *e) {
    if (e != NULL) entry_free(e);
}

void fg_renewal_commit(fg_renewal *r, fg_renewal_entry *fresh, int64_t granted_us,
                       const fg_lock_options *opts) {
    int64_t lease_us = opts->lease_ms * 1000;
    pthread_mutex_lock(&r->lock);
    entry *e = r->entries;
    while (e != NULL && !same_lock(e, (const char *const *)fresh->keys, fresh->nkeys, fresh->owner))
        e = e->next;
    if (e != NULL) {
        /* A re-entry: the lease is now the later of the two. */
        e->valid_until_us = max64(e->valid_until_us, granted_us + lease_us);
        entry_free(fresh);
    } else {
        e = fresh;
        e->renew_until_us = opts->renew_max_ms > 0 ? granted_us + opts->renew_max_ms * 1000 : NEVER;
        e->due_us = NEVER;
        e->valid_until_us = granted_us + lease_us;
        e->next = r->entries;
        r->entries = e;
    }
    e->lease_us = lease_us;
    e->on_lost = opts->on_lost;
    e->on_lost_arg = opts->on_lost_arg;
    schedule(e, min64(e->due_us, granted_us + step_us(lease_us, 3)));
    pthread_cond_signal(&r->wake);
    pthread_mutex_unlock(&r->lock);
}

fg_code fg_renewal_add(fg_renewal *r, const char *const *keys, size_t n, const char *owner,
                       int64_t granted_us, const fg_lock_options *opts, fg_error *err) {
    fg_renewal_entry *e = fg_renewal_prepare(keys, n, owner);
    if (e == NULL) return fg_set_error(err, FG_CODE_NOMEM, "out of memory");
    fg_renewal_commit(r, e, granted_us, opts);
    return FG_CODE_OK;
}

void fg_renewal_unlock_begin(fg_renewal *r, fg_unlock_in_flight *u, const char *const *keys,
                             size_t n, const char *owner) {
    *u = (fg_unlock_in_flight){keys, n, owner, NULL};
    pthread_mutex_lock(&r->lock);
    u->next = r->unlocking;
    r->unlocking = u;
    pthread_mutex_unlock(&r->lock);
}

/* Whether an unlock of key by owner is in flight. With the mutex. */
static bool unlocking(const fg_renewal *r, const char *key, const char *owner) {
    for (const fg_unlock_in_flight *u = r->unlocking; u != NULL; u = u->next) {
        if (strcmp(u->owner, owner) != 0) continue;
        for (size_t i = 0; i < u->n; i++)
            if (strcmp(u->keys[i], key) == 0) return true;
    }
    return false;
}

static void release_key(fg_renewal *r, const char *key, const char *owner) {
    for (entry *e = r->entries; e != NULL; e = e->next) {
        if (e->lost || strcmp(e->owner, owner) != 0) continue;
        for (size_t i = 0; i < e->nkeys; i++)
            if (!e->released[i] && strcmp(e->keys[i], key) == 0) {
                e->released[i] = true;
                e->live--;
            }
    }
}

void fg_renewal_released(fg_renewal *r, const char *const *keys, size_t n, const char *owner) {
    pthread_mutex_lock(&r->lock);
    for (size_t i = 0; i < n; i++)
        release_key(r, keys[i], owner);
    pthread_mutex_unlock(&r->lock);
}

void fg_renewal_unlock_end(fg_renewal *r, fg_unlock_in_flight *u, bool released) {
    pthread_mutex_lock(&r->lock);
    fg_unlock_in_flight **p = &r->unlocking;
    while (*p != u)
        p = &(*p)->next;
    *p = u->next;
    for (size_t i = 0; released && i < u->n; i++)
        release_key(r, u->keys[i], u->owner);
    pthread_mutex_unlock(&r->lock);
}

/* ------------------------------------------------------------- the thread */

static void lose(entry *e, fg_lost_reason why, size_t key) {
    e->lost = true;
    e->why = why;
    e->lost_key = key;
}

static size_t first_live_key(const entry *e) {
    size_t i = 0;
    while (i + 1 < e->nkeys && e->released[i])
        i++;
    return i;
}

/* Frees what ended: released, or lost and reported. With the mutex. */
static void reap(fg_renewal *r) {
    entry **p = &r->entries;
    while (*p != NULL) {
        entry *e = *p;
        if (e->live == 0 || e->reported) {
            *p = e->next;
            entry_free(e);
        } else {
            p = &e->next;
        }
    }
}

/* Calls on_lost for every entry lost since, without the mutex (the entry
 * stays: only this thread frees it). With the mutex; whether it let go of
 * it, for a callback. */
static bool report(fg_renewal *r) {
    bool unlocked = false;
    entry *e = r->entries;
    while (e != NULL) {
        if (!e->lost || e->reported || e->live == 0) {
            e = e->next;
            continue;
        }
        e->reported = true;
        lost_fn fn = e->on_lost;
        void *arg = e->on_lost_arg;
        if (fn != NULL) {
            pthread_mutex_unlock(&r->lock);
            fn(e->keys[e->lost_key], e->owner, e->why, arg);
            pthread_mutex_lock(&r->lock);
            unlocked = true;
        }
        e = r->entries; /* the list may have grown meanwhile */
    }
    return unlocked;
}

static void add_job(fg_renewal *r, size_t *n, entry *e, size_t key) {
    r->jobs[*n] = (job){e, key, e->lease_us};
    r->ext[*n] = (fg_renewal_extension){e->keys[key], e->owner, e->lease_us};
    (*n)++;
}

/* Ends the registrations that reached their renew limit or lease end, and
 * puts the keys of the others that are due into the round trip, as many as
 * fit. Returns how many jobs; *next is when the next entry not taken is due
 * (now when one did not fit). With the mutex. */
static size_t plan(fg_renewal *r, int64_t now, int64_t *next) {
    size_t n = 0;
    *next = NEVER;
    for (entry *e = r->entries; e != NULL; e = e->next) {
        if (e->lost || e->live == 0) continue;
        if (e->due_us > now) {
            *next = min64(*next, e->due_us);
        } else if (now >= e->renew_until_us) {
            lose(e, FG_LOST_RENEW_LIMIT, first_live_key(e));
        } else if (!r->t.reliable && now >= e->valid_until_us) {
            lose(e, FG_LOST_UNREACHABLE, first_live_key(e));
        } else if (n + e->live > BATCH_MAX) {
            *next = now;
        } else {
            for (size_t i = 0; i < e->nkeys; i++)
                if (!e->released[i]) add_job(r, &n, e, i);
        }
    }
    return n;
}

/* The round trip's timeout: the shortest lease left among the jobs, within
 * [MIN_TIMEOUT_MS, the transport's longest]. With the mutex. */
static int timeout_ms(const fg_renewal *r, size_t n, int64_t now) {
    int64_t ms = r->t.timeout_ms;
    for (size_t i = 0; i < n; i++)
        ms = min64(ms, (r->jobs[i].e->valid_until_us - now) / 1000);
    return ms < MIN_TIMEOUT_MS ? MIN_TIMEOUT_MS : (int)ms;
}

/* FG.EXTEND key owner lease_ms for each extension, in one round trip. */
static fg_code remote_extend(void *arg, const fg_renewal_extension *ext, size_t n,
                             fg_extended *out, int timeout) {
    remote *t = arg;
    fg_conn_config cfg = t->cfg;
    cfg.connect_timeout_ms = cfg.command_timeout_ms = timeout;
    for (size_t i = 0; i < n; i++) {
        fg_argv_init(&t->cmds[i], "FG.EXTEND");
        fg_argv_str(&t->cmds[i], ext[i].key);
        fg_argv_str(&t->cmds[i], ext[i].owner);
        fg_argv_num(&t->cmds[i], ext[i].lease_us / 1000);
    }
    fg_code rc = fg_conn_ensure(&t->conn, &t->addr, &cfg, NULL);
    if (rc == FG_CODE_OK) rc = fg_conn_set_timeout(&t->conn, timeout, NULL);
    if (rc == FG_CODE_OK)
        rc = fg_conn_exchange(&t->conn, &t->addr, &cfg, t->cmds, n, t->replies, NULL);
    if (rc != FG_CODE_OK) return rc;
    for (size_t i = 0; i < n; i++) {
        const redisReply *rep = t->replies[i];
        out[i] = rep->type != REDIS_REPLY_INTEGER ? FG_UNANSWERED
                 : rep->integer != 0              ? FG_EXTENDED
                                                  : FG_NOT_EXTENDED;
        freeReplyObject(t->replies[i]);
    }
    return FG_CODE_OK;
}

typedef enum outcome { RENEWED, NOT_HELD, FAILED } outcome;

/* What the answers of jobs[from..to) (one entry's) say; *key the key not
 * held. Keys released during the round trip do not count. With the mutex. */
static outcome judge(const fg_renewal *r, size_t from, size_t to, fg_code rc, size_t *key) {
    if (rc != FG_CODE_OK) return FAILED;
    outcome o = RENEWED;
    for (size_t i = from; i < to; i++) {
        const job *j = &r->jobs[i];
        if (j->e->released[j->key]) continue;
        if (r->found[i] == FG_UNANSWERED) return FAILED;
        if (r->found[i] == FG_NOT_EXTENDED && o == RENEWED) {
            o = NOT_HELD;
            *key = j->key;
        }
    }
    return o;
}

/* Applies the replies of the round trip sent at sent_us. With the mutex. */
static void apply(fg_renewal *r, size_t n, fg_code rc, int64_t sent_us) {
    int64_t now = fg_monotonic_us();
    for (size_t from = 0, to; from < n; from = to) {
        entry *e = r->jobs[from].e;
        int64_t lease_us = r->jobs[from].lease_us;
        for (to = from + 1; to < n && r->jobs[to].e == e; to++)
            ;
        size_t key = 0;
        switch (judge(r, from, to, rc, &key)) {
        case RENEWED:
            e->valid_until_us = sent_us + lease_us;
            schedule(e, sent_us + step_us(lease_us, 3));
            break;
        case NOT_HELD:
            if (unlocking(r, e->keys[key], e->owner))
                schedule(e, now + RECHECK_US);
            else
                lose(e, FG_LOST_NOT_HELD, key);
            break;
        case FAILED: schedule(e, min64(now + step_us(lease_us, 10), e->valid_until_us)); break;
        }
    }
}

static void *run(void *arg) {
    fg_renewal *r = arg;
    pthread_mutex_lock(&r->lock);
    while (!r->stopping) {
        reap(r);
        int64_t now = fg_monotonic_us(), next;
        size_t n = plan(r, now, &next);
        /* While a callback ran without the mutex, a stop or a registration
         * may have signalled with no one waiting: look again, not asleep. */
        bool reported = report(r);
        if (n == 0) {
            if (next > now && !reported) fg_sleep_until(&r->wake, &r->lock, next);
            continue;
        }
        int timeout = timeout_ms(r, n, now);
        pthread_mutex_unlock(&r->lock);
        int64_t sent_us = fg_monotonic_us();
        fg_code rc = r->t.extend(r->t.arg, r->ext, n, r->found, timeout);
        pthread_mutex_lock(&r->lock);
        apply(r, n, rc, sent_us);
        report(r);
    }
    pthread_mutex_unlock(&r->lock);
    return NULL;
}

/* -------------------------------------------------------------- lifecycle */

fg_renewal *fg_renewal_start_with(const fg_renewal_transport *t, fg_error *err) {
    fg_renewal *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        fg_set_error(err, FG_CODE_NOMEM, "out of memory");
        return NULL;
    }
    r->t = *t;
    fg_cond_init_monotonic(&r->wake);
    pthread_mutex_init(&r->lock, NULL);
    if (pthread_create(&r->thread, NULL, run, r) != 0) {
        pthread_cond_destroy(&r->wake);
        pthread_mutex_destroy(&r->lock);
        free(r);
        fg_set_error(err, FG_CODE_NOMEM, "cannot start the renewal thread");
        return NULL;
    }
    return r;
}

fg_renewal *fg_renewal_start(const fg_url *addr, const fg_conn_config *cfg, fg_error *err) {
    remote *t = calloc(1, sizeof(*t));
    if (t == NULL) {
        fg_set_error(err, FG_CODE_NOMEM, "out of memory");
        return NULL;
    }
    t->addr = *addr;
    t->cfg = *cfg;
    fg_renewal_transport transport = {remote_extend, t, cfg->command_timeout_ms, false};
    fg_renewal *r = fg_renewal_start_with(&transport, err);
    if (r == NULL)
        free(t);
    else
        r->remote = t;
    return r;
}

void fg_renewal_stop(fg_renewal *r) {
    if (r == NULL) return;
    pthread_mutex_lock(&r->lock);
    r->stopping = true;
    pthread_cond_signal(&r->wake);
    pthread_mutex_unlock(&r->lock);
    pthread_join(r->thread, NULL);
    while (r->entries != NULL) {
        entry *e = r->entries;
        r->entries = e->next;
        entry_free(e);
    }
    if (r->remote != NULL) fg_conn_close(&r->remote->conn);
    free(r->remote);
    pthread_cond_destroy(&r->wake);
    pthread_mutex_destroy(&r->lock);
    free(r);
}
