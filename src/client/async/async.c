/*
 * async.c - the client of floodgate_async.h: one server, one hiredis
 * asynchronous connection, driven by the application's loop (fg_loop).
 *
 * A call is checked and converted as fg_check's (limit_args.c), then made
 * of the same halves as the synchronous path (remote_limit.h): the denial
 * cache may answer it; otherwise its command goes on the connection at
 * once, behind the calls already sent (hiredis pipelines them and answers
 * them in order), and its reply, or its loss, becomes the answer. So the
 * commands, the replies' reading, the denial cache and the failure
 * policies are those of fg_check, written once.
 *
 * Connection. Made by the first call, without waiting (hiredis connects
 * in the background; commands sent meanwhile wait in its buffer), with
 * AUTH and SELECT pipelined before the first command. It is dropped after
 * any failure, as the synchronous connection is: a reply that does not
 * come within command_timeout_ms (or a connect within connect_timeout_ms)
 * frees the hiredis context, which answers every call sent as lost; the
 * failure policy then answers them. A connect that failed is not tried
 * again for FG_RECONNECT_DELAY_MS: calls meanwhile are answered as lost
 * without one.
 *
 * Time. One timer watches the oldest call sent: the calls share one
 * timeout and are answered in order, so the oldest has the nearest
 * deadline. Another runs the calls answered without the server (the
 * denial cache, the failure policy while the server is down) at the
 * loop's next turn, so that no callback ever runs inside the call that
 * made it.
 */
#include "floodgate_async.h"

#include <hiredis/async.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "limit_args.h"
#include "lock_args.h"
#include "monotonic.h"
#include "remote/conn.h"
#include "remote/remote_lock.h"
#include "remote/remote_policy.h"
#include "policy_def.h"
#include "remote/remote_limit.h"
#include "stats.h"
#include "url.h"

/* A list of calls, oldest first. */
typedef struct call_list {
    fg_async_call *head, *tail;
} call_list;

struct fg_async_call {
    fg_async *a;
    fg_async_call *prev, *next; /* in a->sent or a->ready */
    int64_t deadline_mono;      /* sent: when it counts as lost */
    bool cancelled;
    bool sent; /* hiredis holds it until its reply or loss */
    /* Answers from the reply, or as lost (reply NULL, `why` says why). */
    void (*finish)(fg_async_call *c, const redisReply *reply, const fg_error *why);
    union {
        fg_async_check_cb *check;
        fg_async_grant_cb *grant;
        fg_async_count_cb *count;
        fg_async_policy_cb *policy;
    } done; /* count may be NULL: nothing to hear */
    void *arg;
    /* a check's: the call, and its answer when made without the server */
    fg_limit_call c;
    bool answered;
    fg_result result;
    fg_error err; /* ready: why it was lost */
    char key[];
};

struct fg_async {
    fg_loop loop;
    fg_options opts;
    fg_url addr;
    fg_counters counters;
    void *limits; /* remote_limit.c's state: denial cache, failure policy */

    redisAsyncContext *ac; /* NULL while disconnected */
    void *watch;
    int events;
    int64_t connect_deadline_mono; /* while connecting */
    bool connected, connected_once;
    int64_t no_connect_before_mono;

    call_list sent, ready;
    void *deadline_timer, *ready_timer;
    bool closing;
};

/* ------------------------------------------------------------------ lists */

static void list_push(call_list *l, fg_async_call *c) {
    c->prev = l->tail;
    c->next = NULL;
    if (l->tail != NULL)
        l->tail->next = c;
    else
        l->head = c;
    l->tail = c;
}

static void list_remove(call_list *l, fg_async_call *c) {
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        l->head = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    else
        l->tail = c->prev;
    c->prev = c->next = NULL;
}

/* ------------------------------------------------------------- answering */

static void finish(fg_async_call *c, const redisReply *reply, const fg_error *why) {
    c->finish(c, reply, why);
    free(c);
}

/* Answers c at the loop's next turn: as lost, for why, unless answered. */
static void answer_soon(fg_async_call *c, const char *why) {
    fg_async *a = c->a;
    if (why != NULL) fg_set_error(&c->err, FG_CODE_IO, "%s", why);
    list_push(&a->ready, c);
    if (a->ready.head == c) a->loop.arm(a->ready_timer, 0);
}

static void run_ready(void *arg) {
    fg_async *a = arg;
    call_list now = a->ready; /* calls made by the callbacks wait for the next turn */
    a->ready = (call_list){NULL, NULL};
    while (now.head != NULL) {
        fg_async_call *c = now.head;
        list_remove(&now, c);
        finish(c, NULL, &c->err);
    }
}

/* A check: the server's answer, the failure policy's when it was lost, or
 * the one made without the server (the denial cache). */
static void finish_check(fg_async_call *c, const redisReply *reply, const fg_error *why) {
    fg_code rc = FG_CODE_OK;
    fg_result result = c->result;
    fg_error err = *why;
    if (reply != NULL) {
        rc = fg_remote_limits_answer(c->a->limits, &c->c, reply, &result, &err);
    } else if (!c->answered) {
        rc = fg_remote_limits_answer(c->a->limits, &c->c, NULL, &result, &err);
        if (rc == FG_CODE_IO) err = *why;
    }
    if (rc == FG_CODE_OK) fg_count(&c->a->counters.decisions, 1);
    if (!c->cancelled) c->done.check(rc, rc == FG_CODE_OK ? &result : NULL, &err, c->arg);
}

/* The lock calls: no failure policy, as fg_semaphore_acquire's. */
static void finish_grant(fg_async_call *c, const redisReply *reply, const fg_error *why) {
    fg_lock_grant grant = {0};
    fg_error err = *why;
    fg_code rc = reply != NULL ? fg_parse_grant(reply, &grant, &err) : FG_CODE_IO;
    if (!c->cancelled) c->done.grant(rc, rc == FG_CODE_OK ? &grant : NULL, &err, c->arg);
}

static void finish_policy(fg_async_call *c, const redisReply *reply, const fg_error *why) {
    fg_policy_result result;
    fg_error err = *why;
    fg_code rc = reply != NULL ? fg_parse_policy_check(reply, &result, &err) : FG_CODE_IO;
    if (rc == FG_CODE_OK) fg_count(&c->a->counters.decisions, 1);
    if (!c->cancelled) c->done.policy(rc, rc == FG_CODE_OK ? &result : NULL, &err, c->arg);
}

static void finish_release(fg_async_call *c, const redisReply *reply, const fg_error *why) {
    int64_t left = 0;
    fg_error err = *why;
    fg_code rc = reply != NULL ? fg_parse_lock_count(reply, "FG.RELEASE", &left, &err) : FG_CODE_IO;
    if (!c->cancelled && c->done.count != NULL) c->done.count(rc, left, &err, c->arg);
}

static void finish_extend(fg_async_call *c, const redisReply *reply, const fg_error *why) {
    bool extended = false;
    fg_error err = *why;
    fg_code rc = reply != NULL ? fg_parse_extended(reply, &extended, &err) : FG_CODE_IO;
    if (!c->cancelled) c->done.count(rc, extended, &err, c->arg);
}

/* ------------------------------------------------------------- deadlines */

/* Watches the deadline of the oldest call sent, or of the connect. */
static void watch_deadline(fg_async *a) {
    int64_t deadline = a->sent.head != NULL ? a->sent.head->deadline_mono : 0;
    if (a->ac != NULL && !a->connected && (deadline == 0 || a->connect_deadline_mono < deadline))
        deadline = a->connect_deadline_mono;
    if (deadline == 0) {
        a->loop.disarm(a->deadline_timer);
        return;
    }
    int64_t left_us = deadline - fg_monotonic_us();
    a->loop.arm(a->deadline_timer, left_us > 0 ? (left_us + 999) / 1000 : 0);
}

/* A deadline passed: the connection goes, and hiredis answers every call
 * sent as lost. */
static void deadline_passed(void *arg) {
    fg_async *a = arg;
    int64_t now = fg_monotonic_us();
    bool late = (a->sent.head != NULL && a->sent.head->deadline_mono <= now) ||
                (a->ac != NULL && !a->connected && a->connect_deadline_mono <= now);
    if (late && a->ac != NULL) {
        fg_count(&a->counters.net.failures, 1);
        redisAsyncFree(a->ac); /* runs every reply callback with NULL */
    }
    watch_deadline(a);
}

/* ----------------------------------------------------- hiredis and the loop */

static void set_events(fg_async *a, int events) {
    if (a->watch == NULL || events == a->events) return;
    a->events = events;
    a->loop.want(a->watch, events);
}

static void add_read(void *p) { set_events(p, ((fg_async *)p)->events | FG_EV_READ); }
static void del_read(void *p) { set_events(p, ((fg_async *)p)->events & ~FG_EV_READ); }
static void add_write(void *p) { set_events(p, ((fg_async *)p)->events | FG_EV_WRITE); }
static void del_write(void *p) { set_events(p, ((fg_async *)p)->events & ~FG_EV_WRITE); }

/* hiredis is done with the context (closed, failed or freed). */
static void cleanup(void *p) {
    fg_async *a = p;
    if (a->watch != NULL) a->loop.unwatch(a->watch);
    a->watch = NULL;
    a->events = 0;
    a->ac = NULL;
    a->connected = false;
}

static void ready(void *arg, int events) {
    fg_async *a = arg;
    if (a->ac != NULL && (events & FG_EV_READ)) redisAsyncHandleRead(a->ac);
    if (a->ac != NULL && (events & FG_EV_WRITE)) redisAsyncHandleWrite(a->ac);
}

static void on_connect(const redisAsyncContext *ac, int status) {
    fg_async *a = ac->ev.data;
    if (status == REDIS_OK) {
        a->connected = a->connected_once = true;
        watch_deadline(a);
        return;
    }
    fg_count(&a->counters.net.failures, 1);
    a->no_connect_before_mono = fg_monotonic_us() + FG_RECONNECT_DELAY_MS * 1000;
}

static void on_disconnect(const redisAsyncContext *ac, int status) {
    fg_async *a = ac->ev.data;
    if (status != REDIS_OK && !a->closing) fg_count(&a->counters.net.failures, 1);
}

/* AUTH and SELECT: a refusal drops the connection (the calls behind are
 * answered as lost). */
static void on_handshake(redisAsyncContext *ac, void *r, void *privdata) {
    (void)privdata;
    const redisReply *reply = r;
    if (reply != NULL && reply->type == REDIS_REPLY_ERROR) redisAsyncFree(ac);
}

static void handshake(fg_async *a) {
    if (a->addr.has_password) {
        const char *argv[3] = {"AUTH"};
        size_t lens[3] = {4};
        int n = 1;
        if (a->addr.user[0] != '\0') {
            argv[n] = a->addr.user;
            lens[n++] = strlen(a->addr.user);
        }
        argv[n] = a->addr.password;
        lens[n++] = strlen(a->addr.password);
        redisAsyncCommandArgv(a->ac, on_handshake, NULL, n, argv, lens);
    }
    if (a->addr.db > 0) {
        char db[16];
        int len = snprintf(db, sizeof(db), "%d", a->addr.db);
        const char *argv[2] = {"SELECT", db};
        size_t lens[2] = {6, (size_t)len};
        redisAsyncCommandArgv(a->ac, on_handshake, NULL, 2, argv, lens);
    }
}

/* Starts connecting unless connected or connecting; false when the server
 * cannot be tried now. */
static bool connection(fg_async *a) {
    if (a->ac != NULL) return true;
    int64_t now = fg_monotonic_us();
    if (now < a->no_connect_before_mono) return false;
    redisAsyncContext *ac = a->addr.kind == FG_URL_UNIX
                                ? redisAsyncConnectUnix(a->addr.path)
                                : redisAsyncConnect(a->addr.host, a->addr.port);
    if (ac == NULL || ac->err) {
        if (ac != NULL) redisAsyncFree(ac);
        fg_count(&a->counters.net.failures, 1);
        a->no_connect_before_mono = now + FG_RECONNECT_DELAY_MS * 1000;
        return false;
    }
    a->watch = a->loop.watch(a->loop.loop, ac->c.fd, ready, a);
    if (a->watch == NULL) {
        redisAsyncFree(ac);
        return false;
    }
    ac->ev.data = a;
    ac->ev.addRead = add_read;
    ac->ev.delRead = del_read;
    ac->ev.addWrite = add_write;
    ac->ev.delWrite = del_write;
    ac->ev.cleanup = cleanup;
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    a->ac = ac;
    a->connected = false;
    a->connect_deadline_mono = now + (int64_t)a->opts.connect_timeout_ms * 1000;
    if (a->connected_once) fg_count(&a->counters.net.reconnects, 1);
    handshake(a);
    watch_deadline(a);
    return true;
}

/* ----------------------------------------------------------------- calls */

static void on_reply(redisAsyncContext *ac, void *r, void *privdata) {
    (void)ac;
    static const fg_error lost = {FG_CODE_IO, "the connection to the server was lost or timed out"};
    fg_async_call *c = privdata;
    fg_async *a = c->a;
    list_remove(&a->sent, c);
    if (!a->closing) watch_deadline(a);
    finish(c, r, &lost);
}

/* Sends c's command, or answers c as lost at the next turn. */
static void send_call(fg_async_call *c, int argc, const char **argv, const size_t *argvlen) {
    fg_async *a = c->a;
    if (!connection(a)) {
        answer_soon(c, "the server cannot be reached");
        return;
    }
    if (redisAsyncCommandArgv(a->ac, on_reply, c, argc, argv, argvlen) != REDIS_OK) {
        answer_soon(c, "the connection to the server is closing");
        return;
    }
    fg_count(&a->counters.net.round_trips, 1);
    c->sent = true;
    c->deadline_mono = fg_monotonic_us() + (int64_t)a->opts.command_timeout_ms * 1000;
    list_push(&a->sent, c);
    if (a->sent.head == c) watch_deadline(a);
}

/* A call of a with room for `extra` bytes after it (its key...). */
static fg_async_call *new_call(fg_async *a, size_t extra, void *arg, fg_async_call **out,
                               fg_error *err) {
    fg_async_call *c = calloc(1, sizeof(*c) + extra);
    if (c == NULL) {
        fg_set_error(err, FG_CODE_NOMEM, "out of memory");
        return NULL;
    }
    c->a = a;
    c->arg = arg;
    if (out != NULL) *out = c;
    return c;
}

static fg_code start(fg_async *a, const char *key, const fg_limit *l, int64_t cost, bool peek,
                     fg_async_check_cb *done, void *arg, fg_async_call **out, fg_error *err) {
    if (a == NULL || key == NULL || l == NULL || done == NULL)
        return fg_set_error(err, FG_CODE_INVALID,
                            "a client, a key, a limit and a callback are required");
    fg_limiter ml;
    if (fg_limit_convert(l, cost, &ml, err) != FG_CODE_OK) return FG_CODE_INVALID;
    size_t keylen = strlen(key);
    fg_async_call *c = new_call(a, keylen + 1, arg, out, err);
    if (c == NULL) return FG_CODE_NOMEM;
    memcpy(c->key, key, keylen + 1);
    c->finish = finish_check;
    c->done.check = done;
    c->c = (fg_limit_call){c->key, *l, ml, cost, peek,
                           fg_clock_us(a->opts.clock_us, a->opts.clock_arg), 0};
    if (fg_remote_limits_cached(a->limits, &c->c, &c->result)) {
        c->answered = true;
        answer_soon(c, NULL);
        return FG_CODE_OK;
    }
    fg_command cmd;
    fg_remote_limits_command(a->limits, &c->c, &cmd);
    send_call(c, cmd.argc, cmd.argv, cmd.argvlen);
    return FG_CODE_OK;
}

fg_code fg_async_check(fg_async *a, const char *key, const fg_limit *limit, int64_t cost,
                       fg_async_check_cb *done, void *arg, fg_async_call **call,
                       fg_error *err) {
    return start(a, key, limit, cost, false, done, arg, call, err);
}

fg_code fg_async_peek(fg_async *a, const char *key, const fg_limit *limit,
                      fg_async_check_cb *done, void *arg, fg_async_call **call,
                      fg_error *err) {
    return start(a, key, limit, 1, true, done, arg, call, err);
}

/* A lock call's key and owner, kept with it. */
static fg_async_call *new_lock_call(fg_async *a, const char *key, const char *owner, void *arg,
                                    fg_async_call **out, fg_error *err) {
    size_t keylen = strlen(key), ownerlen = strlen(owner);
    fg_async_call *c = new_call(a, keylen + ownerlen + 2, arg, out, err);
    if (c == NULL) return NULL;
    memcpy(c->key, key, keylen + 1);
    memcpy(c->key + keylen + 1, owner, ownerlen + 1);
    return c;
}

static fg_code lock_call_given(fg_async *a, const char *key, const char *owner, bool done_given,
                               fg_error *err) {
    if (a != NULL && key != NULL && owner != NULL && done_given) return FG_CODE_OK;
    return fg_set_error(err, FG_CODE_INVALID,
                        "a client, a key, an owner and a callback are required");
}

fg_code fg_async_semaphore_acquire(fg_async *a, const char *key, int64_t capacity,
                                   const char *owner, int64_t permits, int64_t lease_ms,
                                   fg_async_grant_cb *done, void *arg, fg_async_call **call,
                                   fg_error *err) {
    fg_lock_options o;
    fg_lock_options_init(&o);
    o.lease_ms = lease_ms;
    fg_code rc = lock_call_given(a, key, owner, done != NULL, err);
    if (rc == FG_CODE_OK) rc = fg_lock_check_acquire(capacity, owner, permits, &o, err);
    if (rc != FG_CODE_OK) return rc;
    fg_async_call *c = new_lock_call(a, key, owner, arg, call, err);
    if (c == NULL) return FG_CODE_NOMEM;
    c->finish = finish_grant;
    c->done.grant = done;
    fg_argv cmd;
    fg_semaphore_acquire_command(&cmd, key, capacity, owner, permits, &o);
    send_call(c, cmd.argc, cmd.argv, cmd.argvlen);
    return FG_CODE_OK;
}

fg_code fg_async_semaphore_release(fg_async *a, const char *key, const char *owner,
                                   int64_t permits, fg_async_count_cb *done, void *arg,
                                   fg_error *err) {
    fg_code rc = lock_call_given(a, key, owner, true, err);
    if (rc == FG_CODE_OK) rc = fg_lock_check_release(owner, permits, err);
    if (rc != FG_CODE_OK) return rc;
    fg_async_call *c = new_lock_call(a, key, owner, arg, NULL, err);
    if (c == NULL) return FG_CODE_NOMEM;
    c->finish = finish_release;
    c->done.count = done;
    fg_argv cmd;
    fg_semaphore_release_command(&cmd, key, owner, permits);
    send_call(c, cmd.argc, cmd.argv, cmd.argvlen);
    return FG_CODE_OK;
}

fg_code fg_async_extend(fg_async *a, const char *key, const char *owner, int64_t lease_ms,
                        fg_async_count_cb *done, void *arg, fg_async_call **call,
                        fg_error *err) {
    fg_code rc = lock_call_given(a, key, owner, done != NULL, err);
    if (rc == FG_CODE_OK) rc = fg_lock_check_extend(owner, lease_ms, err);
    if (rc != FG_CODE_OK) return rc;
    fg_async_call *c = new_lock_call(a, key, owner, arg, call, err);
    if (c == NULL) return FG_CODE_NOMEM;
    c->finish = finish_extend;
    c->done.count = done;
    fg_argv cmd;
    fg_extend_command(&cmd, key, owner, lease_ms);
    send_call(c, cmd.argc, cmd.argv, cmd.argvlen);
    return FG_CODE_OK;
}

fg_code fg_async_policy_check(fg_async *a, const char *name, const char *key,
                              const char *identity, int64_t cost, fg_async_policy_cb *done,
                              void *arg, fg_async_call **call, fg_error *err) {
    if (a == NULL || name == NULL || key == NULL || done == NULL)
        return fg_set_error(err, FG_CODE_INVALID,
                            "a client, a policy name, a key and a callback are required");
    fg_code rc = fg_policy_name_check(name, err);
    if (rc == FG_CODE_OK) rc = fg_policy_request_check(cost, false, 0, err);
    if (rc != FG_CODE_OK) return rc;
    fg_async_call *c = new_call(a, 0, arg, call, err);
    if (c == NULL) return FG_CODE_NOMEM;
    c->finish = finish_policy;
    c->done.policy = done;
    fg_policy_request q = {name, key, identity, cost, false, 0};
    fg_command cmd;
    fg_policy_check_command(&cmd, &q, &a->opts);
    send_call(c, cmd.argc, cmd.argv, cmd.argvlen);
    return FG_CODE_OK;
}

void fg_async_cancel(fg_async_call *call) {
    if (call != NULL) call->cancelled = true;
}

/* ------------------------------------------------------------ the client */

static fg_code check_options(const char *url, const fg_options *o, fg_url *addr, fg_error *err) {
    if (strncmp(url, "redis+cluster://", 16) == 0)
        return fg_set_error(err, FG_CODE_UNSUPPORTED,
                            "the asynchronous client takes one server (redis://, unix://)");
    fg_code rc = fg_url_parse(url, addr, err);
    if (rc != FG_CODE_OK) return rc;
    if (addr->kind == FG_URL_MEM)
        return fg_set_error(err, FG_CODE_UNSUPPORTED,
                            "mem: decides in process without waiting: use fg_open");
    if (o->lease_units > 0)
        return fg_set_error(err, FG_CODE_UNSUPPORTED,
                            "the asynchronous client takes no token leases (lease_units 0)");
    if (o->connect_timeout_ms < 1 || o->command_timeout_ms < 1)
        return fg_set_error(err, FG_CODE_INVALID, "the timeouts must be 1 ms or more");
    return FG_CODE_OK;
}

fg_async *fg_async_open(const char *url, const fg_options *opts, const fg_loop *loop,
                        fg_error *err) {
    if (url == NULL || loop == NULL) {
        fg_set_error(err, FG_CODE_INVALID, "a URL and a loop are required");
        return NULL;
    }
    fg_async *a = calloc(1, sizeof(*a));
    if (a == NULL) {
        fg_set_error(err, FG_CODE_NOMEM, "out of memory");
        return NULL;
    }
    a->loop = *loop;
    if (opts != NULL)
        a->opts = *opts;
    else
        fg_options_init(&a->opts);
    if (check_options(url, &a->opts, &a->addr, err) != FG_CODE_OK) {
        free(a);
        return NULL;
    }
    fg_backend_args args = {url, &a->opts, &a->counters, NULL};
    a->limits = fg_remote_limits.open(&args);
    a->deadline_timer = a->loop.timer(a->loop.loop, deadline_passed, a);
    a->ready_timer = a->loop.timer(a->loop.loop, run_ready, a);
    if (a->limits == NULL || a->deadline_timer == NULL || a->ready_timer == NULL) {
        fg_set_error(err, FG_CODE_NOMEM, "out of memory");
        fg_async_close(a);
        return NULL;
    }
    return a;
}

void fg_async_close(fg_async *a) {
    if (a == NULL) return;
    a->closing = true;
    if (a->ac != NULL) redisAsyncFree(a->ac); /* answers the calls sent */
    run_ready(a);
    if (a->deadline_timer != NULL) a->loop.free_timer(a->deadline_timer);
    if (a->ready_timer != NULL) a->loop.free_timer(a->ready_timer);
    if (a->limits != NULL) fg_remote_limits.close(a->limits);
    free(a);
}

void fg_async_get_stats(fg_async *a, fg_stats *out) {
    *out = (fg_stats){atomic_load(&a->counters.decisions),
                      atomic_load(&a->counters.net.round_trips),
                      atomic_load(&a->counters.denials_cached),
                      atomic_load(&a->counters.net.failures),
                      atomic_load(&a->counters.net.reconnects),
                      atomic_load(&a->counters.lease_hits)};
}
