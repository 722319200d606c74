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
 * Nodes. A server is one node; a cluster (redis+cluster://) starts from its
 * seeds and reads its map (CLUSTER SLOTS) at the first call, in the
 * background: a command goes to the master of its key's slot, or to the
 * first node until the map is known, and follows MOVED (which also has the
 * map read again) and ASK (ASKING first) up to MAX_HOPS times, as the
 * synchronous client does. A lost connection, TRYAGAIN or CLUSTERDOWN has
 * the map read again; the calls they hold are answered as lost.
 *
 * Connection. Each node's is made by its first call, without waiting (hiredis connects
 * in the background; commands sent meanwhile wait in its buffer), with
 * AUTH and SELECT pipelined before the first command. It is dropped after
 * any failure, as the synchronous connection is: a reply that does not
 * come within command_timeout_ms (or a connect within connect_timeout_ms)
 * frees the hiredis context, which answers every call sent as lost; the
 * failure policy then answers them. A connect that failed is not tried
 * again for FG_RECONNECT_DELAY_MS: calls meanwhile are answered as lost
 * without one.
 *
 * Time. One timer per node watches its oldest call sent: the calls share
 * one timeout and a node answers them in order, so the oldest has the
 * nearest deadline. Another runs the calls answered without the server (the
 * denial cache, the failure policy while the server is down) at the
 * loop's next turn, so that no callback ever runs inside the call that
 * made it.
 *
 * Dialects. As the synchronous connection does (conn.c), each node's
 * connection learns whether the server has the module, with FG_DIALECT_ASK
 * behind AUTH and SELECT (and FG_DIALECT_PROBE when COMMAND is refused),
 * unless the URL says (?backend=). The calls made meanwhile wait in the
 * node's held list, since their bytes depend on the answer, and go in
 * order once it comes (or are answered as lost with the connection, whose
 * deadlines cover the question). A call keeps its command in both forms,
 * the module's and the script's (EVALSHA; none when it has no script), and
 * a node that speaks scripts gets the script's. A NOSCRIPT reply sends the
 * call again at once as EVAL (the bytes sent, their head changed:
 * scripts.c's fg_script_eval_of) to the same node, behind the calls
 * already sent; the NOSCRIPT replies of calls pipelined together so go
 * again together, in one write.
 *
 * Handles. The caller's copy of a call (the `call` out-parameter) is set
 * to NULL as the call is answered or cancelled, before its memory can go:
 * a handle the caller holds is a live call or NULL, never a freed call nor
 * a newer one in its memory.
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
#include "remote/cluster.h"
#include "remote/command.h"
#include "remote/conn.h"
#include "remote/remote_lock.h"
#include "remote/remote_policy.h"
#include "policy_def.h"
#include "remote/remote_limit.h"
#include "remote/scripts.h"
#include "stats.h"
#include "url.h"

#define NO_NODE  UINT32_MAX
#define MAX_HOPS 5 /* redirects one call follows */

/* A list of calls, oldest first. */
typedef struct call_list {
    fg_async_call *head, *tail;
} call_list;

typedef struct aconn aconn;

struct fg_async_call {
    fg_async *a;
    fg_async_call **handle;     /* the caller's copy, while answers are due */
    fg_async_call *prev, *next; /* in its node's sent list, or in a->ready */
    aconn *node;                /* sent: where */
    int64_t deadline_mono;      /* sent: when it counts as lost */
    bool cancelled;
    /* Answers from the reply, or as lost (reply NULL, `why` says why). */
    void (*finish)(fg_async_call *c, const redisReply *reply, const fg_error *why);
    union {
        fg_async_check_cb *check;
        fg_async_grant_cb *grant;
        fg_async_count_cb *count;
        fg_async_policy_cb *policy;
    } done; /* count may be NULL: nothing to hear */
    void *arg;
    /* the command (an sds of hiredis'), kept to be sent again where a
     * cluster redirects it, and its script form (scripts.h: EVALSHA, or
     * EVAL after a NOSCRIPT), made when a node of the script dialect first
     * needs it (script_form) */
    char *cmd, *script;
    size_t cmdlen, scriptlen;
    bool no_script;   /* the command has no script form */
    bool sent_script; /* as sent last: the script form */
    bool eval;        /* the script form is EVAL */
    unsigned slot;
    uint32_t ask; /* NO_NODE, or the node an ASK sends it to */
    int hops;     /* redirects followed */
    /* a cluster's policy check of a policy in keys (remote_policy.c): its
     * step, and a list's verdict; c->key holds its name, key and identity */
    enum { POLICY_AS_IS, POLICY_LOOKUP, POLICY_RULED } step;
    bool listed, listed_allow;
    /* a check's: the call, and its answer when made without the server */
    fg_limit_call c;
    bool answered;
    fg_result result;
    fg_error err; /* ready: why it was lost */
    char key[];
};

/* One node's connection: a server's, or a cluster master's. */
struct aconn {
    fg_async *a;
    fg_url addr;
    redisAsyncContext *ac; /* NULL while disconnected */
    void *watch;
    int events;
    int64_t connect_deadline_mono; /* while connecting */
    bool connected, connected_once;
    int64_t no_connect_before_mono;
    fg_dialect dialect; /* AUTO while the connection learns it */
    call_list sent;
    call_list held; /* calls made while the dialect was learnt */
    void *deadline_timer;
};

struct fg_async {
    fg_loop loop;
    fg_options opts;
    fg_counters counters;
    void *limits; /* remote_limit.c's state: denial cache, failure policy */

    aconn **nodes; /* a server: one; a cluster: the seeds, then masters met */
    size_t nnodes, cap;
    fg_url auth;      /* a cluster node's user, password */
    uint32_t *owner;  /* a cluster: the node of each slot (NO_NODE: unknown) */
    bool map_stale;   /* read CLUSTER SLOTS again at the next call */
    bool policies_in_keys; /* a cluster whose nodes keep policies in keys */
    bool map_reading; /* a CLUSTER SLOTS is in flight */

    call_list ready;
    void *ready_timer;
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

/* The caller's handle goes NULL, and is not written again. */
static void forget(fg_async_call *c) {
    if (c->handle != NULL) *c->handle = NULL;
    c->handle = NULL;
}

/* The handle goes first: the callback may start another call into it. */
static void finish(fg_async_call *c, const redisReply *reply, const fg_error *why) {
    forget(c);
    c->finish(c, reply, why);
    redisFreeSdsCommand(c->cmd);
    free(c->script);
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
    if (c->listed && reply != NULL) {
        fg_policy_list_answer(c->listed_allow, &result);
        rc = FG_CODE_OK;
    }
    if (rc == FG_CODE_OK) fg_count(&c->a->counters.decisions, 1);
    if (!c->cancelled) c->done.policy(rc, rc == FG_CODE_OK ? &result : NULL, &err, c->arg);
}

static void finish_release(fg_async_call *c, const redisReply *reply, const fg_error *why) {
    int64_t left = 0;
    fg_error err = *why;
    fg_code rc = reply != NULL ? fg_parse_lock_count(reply, "FG.RELEASE", &left, &err) : FG_CODE_IO;
    if (!c->cancelled && c->done.count != NULL) c->done.count(rc, left, &err, c->arg);
}

static void finish_refund(fg_async_call *c, const redisReply *reply, const fg_error *why) {
    int64_t units = 0;
    fg_error err = *why;
    fg_code rc = reply != NULL ? fg_parse_lock_count(reply, "FG.REFUND", &units, &err) : FG_CODE_IO;
    if (!c->cancelled && c->done.count != NULL) c->done.count(rc, units, &err, c->arg);
}

static void finish_extend(fg_async_call *c, const redisReply *reply, const fg_error *why) {
    bool extended = false;
    fg_error err = *why;
    fg_code rc = reply != NULL ? fg_parse_extended(reply, &extended, &err) : FG_CODE_IO;
    if (!c->cancelled) c->done.count(rc, extended, &err, c->arg);
}

/* ------------------------------------------------------------- deadlines */

/* Watches the deadline of the node's oldest call, or of its connect. */
static void watch_deadline(aconn *n) {
    int64_t deadline = n->sent.head != NULL ? n->sent.head->deadline_mono : 0;
    if (n->ac != NULL && !n->connected && (deadline == 0 || n->connect_deadline_mono < deadline))
        deadline = n->connect_deadline_mono;
    if (deadline == 0) {
        n->a->loop.disarm(n->deadline_timer);
        return;
    }
    int64_t left_us = deadline - fg_monotonic_us();
    n->a->loop.arm(n->deadline_timer, left_us > 0 ? (left_us + 999) / 1000 : 0);
}

/* A deadline passed: the connection goes, and hiredis answers every call
 * sent on it as lost. */
static void deadline_passed(void *arg) {
    aconn *n = arg;
    int64_t now = fg_monotonic_us();
    bool late = (n->sent.head != NULL && n->sent.head->deadline_mono <= now) ||
                (n->ac != NULL && !n->connected && n->connect_deadline_mono <= now);
    if (late && n->ac != NULL) {
        fg_count(&n->a->counters.net.failures, 1);
        redisAsyncFree(n->ac); /* runs every reply callback with NULL */
    }
    watch_deadline(n);
}

/* ----------------------------------------------------- hiredis and the loop */

static void set_events(aconn *n, int events) {
    if (n->watch == NULL || events == n->events) return;
    n->events = events;
    n->a->loop.want(n->watch, events);
}

static void add_read(void *p) { set_events(p, ((aconn *)p)->events | FG_EV_READ); }
static void del_read(void *p) { set_events(p, ((aconn *)p)->events & ~FG_EV_READ); }
static void add_write(void *p) { set_events(p, ((aconn *)p)->events | FG_EV_WRITE); }
static void del_write(void *p) { set_events(p, ((aconn *)p)->events & ~FG_EV_WRITE); }

/* hiredis is done with the context (closed, failed or freed), after it
 * answered the calls sent on it: the calls held for its dialect are lost
 * with it. */
static void cleanup(void *p) {
    aconn *n = p;
    if (n->watch != NULL) n->a->loop.unwatch(n->watch);
    n->watch = NULL;
    n->events = 0;
    n->ac = NULL;
    n->connected = false;
    n->dialect = FG_DIALECT_AUTO;
    if (n->a->owner != NULL) n->a->map_stale = true; /* a master may have failed over */
    while (n->held.head != NULL) {
        fg_async_call *c = n->held.head;
        list_remove(&n->held, c);
        answer_soon(c, "the connection to the server was lost or timed out");
    }
}

static void ready(void *arg, int events) {
    aconn *n = arg;
    if (n->ac != NULL && (events & FG_EV_READ)) redisAsyncHandleRead(n->ac);
    if (n->ac != NULL && (events & FG_EV_WRITE)) redisAsyncHandleWrite(n->ac);
}

static void on_connect(const redisAsyncContext *ac, int status) {
    aconn *n = ac->ev.data;
    if (status == REDIS_OK) {
        n->connected = n->connected_once = true;
        watch_deadline(n);
        return;
    }
    fg_count(&n->a->counters.net.failures, 1);
    n->no_connect_before_mono = fg_monotonic_us() + FG_RECONNECT_DELAY_MS * 1000;
}

static void on_disconnect(const redisAsyncContext *ac, int status) {
    aconn *n = ac->ev.data;
    if (status != REDIS_OK && !n->a->closing) fg_count(&n->a->counters.net.failures, 1);
}

/* AUTH and SELECT: a refusal drops the connection (the calls behind are
 * answered as lost). */
static void on_handshake(redisAsyncContext *ac, void *r, void *privdata) {
    (void)privdata;
    const redisReply *reply = r;
    if (reply != NULL && reply->type == REDIS_REPLY_ERROR) redisAsyncFree(ac);
}

static void on_reply(redisAsyncContext *ac, void *r, void *privdata);
static void send_on(aconn *n, fg_async_call *c);

/* Asks n's server for its dialect (cmd: FG_DIALECT_ASK or _PROBE) as a
 * call of the node's sent list, so that its deadline watches it: the
 * connect's and a command's time. */
static void ask_dialect(aconn *n, const char *cmd,
                        void (*done)(fg_async_call *, const redisReply *, const fg_error *)) {
    fg_async *a = n->a;
    fg_async_call *c = calloc(1, sizeof(*c));
    if (c == NULL || redisAsyncCommand(n->ac, on_reply, c, cmd) != REDIS_OK) {
        free(c);
        redisAsyncFree(n->ac); /* its calls held are lost with it */
        return;
    }
    c->a = a;
    c->finish = done;
    c->node = n;
    c->hops = MAX_HOPS; /* no command to redirect */
    c->deadline_mono = fg_monotonic_us() +
                       (int64_t)(a->opts.connect_timeout_ms + a->opts.command_timeout_ms) * 1000;
    list_push(&n->sent, c);
    if (n->sent.head == c) watch_deadline(n);
}

/* The dialect is known: the calls held go, in order. */
static void learnt(aconn *n, fg_dialect d) {
    n->dialect = d;
    while (n->held.head != NULL && n->ac != NULL) {
        fg_async_call *c = n->held.head;
        list_remove(&n->held, c);
        send_on(n, c);
    }
}

/* No reply: the connection is going, and its cleanup answers the calls
 * held. */
static void finish_probe(fg_async_call *c, const redisReply *reply, const fg_error *why) {
    (void)why;
    if (reply != NULL && !c->a->closing) learnt(c->node, fg_dialect_of_probe(reply));
}

static void finish_ask(fg_async_call *c, const redisReply *reply, const fg_error *why) {
    (void)why;
    if (reply == NULL || c->a->closing) return;
    fg_dialect d = fg_dialect_of_ask(reply);
    if (d != FG_DIALECT_AUTO)
        learnt(c->node, d);
    else
        ask_dialect(c->node, FG_DIALECT_PROBE, finish_probe);
}

static void handshake(aconn *n) {
    const fg_url *u = &n->addr;
    if (u->has_password) {
        const char *argv[3] = {"AUTH"};
        size_t lens[3] = {4};
        int k = 1;
        if (u->user[0] != '\0') {
            argv[k] = u->user;
            lens[k++] = strlen(u->user);
        }
        argv[k] = u->password;
        lens[k++] = strlen(u->password);
        redisAsyncCommandArgv(n->ac, on_handshake, NULL, k, argv, lens);
    }
    if (u->db > 0) {
        char db[16];
        int len = snprintf(db, sizeof(db), "%d", u->db);
        const char *argv[2] = {"SELECT", db};
        size_t lens[2] = {6, (size_t)len};
        redisAsyncCommandArgv(n->ac, on_handshake, NULL, 2, argv, lens);
    }
    n->dialect = u->dialect;
    if (n->dialect == FG_DIALECT_AUTO) ask_dialect(n, FG_DIALECT_ASK, finish_ask);
}

/* Starts connecting unless connected or connecting; false when the node
 * cannot be tried now. */
static bool connection(aconn *n) {
    if (n->ac != NULL) return true;
    fg_async *a = n->a;
    int64_t now = fg_monotonic_us();
    if (now < n->no_connect_before_mono) return false;
    redisAsyncContext *ac = n->addr.kind == FG_URL_UNIX
                                ? redisAsyncConnectUnix(n->addr.path)
                                : redisAsyncConnect(n->addr.host, n->addr.port);
    if (ac == NULL || ac->err) {
        if (ac != NULL) redisAsyncFree(ac);
        fg_count(&a->counters.net.failures, 1);
        n->no_connect_before_mono = now + FG_RECONNECT_DELAY_MS * 1000;
        return false;
    }
    n->watch = a->loop.watch(a->loop.loop, ac->c.fd, ready, n);
    if (n->watch == NULL) {
        redisAsyncFree(ac);
        return false;
    }
    ac->ev.data = n;
    ac->ev.addRead = add_read;
    ac->ev.delRead = del_read;
    ac->ev.addWrite = add_write;
    ac->ev.delWrite = del_write;
    ac->ev.cleanup = cleanup;
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    n->ac = ac;
    n->connected = false;
    n->connect_deadline_mono = now + (int64_t)a->opts.connect_timeout_ms * 1000;
    if (n->connected_once) fg_count(&a->counters.net.reconnects, 1);
    handshake(n);
    watch_deadline(n);
    return n->ac != NULL; /* the handshake may have failed */
}

/* ------------------------------------------------------------------ nodes */

/* The node at host:port, added when new (a cluster's); NO_NODE when out
 * of memory. */
static uint32_t node_at(fg_async *a, const fg_url *proto, const char *host, int port) {
    for (size_t j = 0; j < a->nnodes; j++)
        if (a->nodes[j]->addr.port == port && strcmp(a->nodes[j]->addr.host, host) == 0)
            return (uint32_t)j;
    if (strlen(host) >= sizeof(proto->host)) return NO_NODE;
    if (a->nnodes == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 4;
        aconn **grown = realloc(a->nodes, cap * sizeof(*grown));
        if (grown == NULL) return NO_NODE;
        a->nodes = grown;
        a->cap = cap;
    }
    aconn *n = calloc(1, sizeof(*n));
    if (n == NULL) return NO_NODE;
    n->a = a;
    n->addr = *proto;
    strcpy(n->addr.host, host);
    n->addr.port = port;
    if ((n->deadline_timer = a->loop.timer(a->loop.loop, deadline_passed, n)) == NULL) {
        free(n);
        return NO_NODE;
    }
    a->nodes[a->nnodes] = n;
    return (uint32_t)a->nnodes++;
}

static void node_free(aconn *n) {
    if (n->ac != NULL) redisAsyncFree(n->ac); /* answers the calls sent */
    n->a->loop.free_timer(n->deadline_timer);
    free(n);
}

/* Where a call goes: its ASK target, its slot's master, or the first node
 * (a server's only one; a cluster's seed, which redirects). */
static uint32_t route(const fg_async *a, const fg_async_call *c) {
    if (c->ask != NO_NODE) return c->ask;
    if (a->owner != NULL && a->owner[c->slot] != NO_NODE) return a->owner[c->slot];
    return 0;
}

/* ----------------------------------------------------------------- calls */

static void dispatch(fg_async_call *c);
static void read_map(fg_async *a);

static bool is_error(const redisReply *r, const char *prefix) {
    return r->type == REDIS_REPLY_ERROR && strncmp(r->str, prefix, strlen(prefix)) == 0;
}

/* A cluster's redirect: c goes again where MOVED or ASK says (MOVED also
 * teaches the map, and has it read again). false when r is an answer. */
static bool redirected(fg_async_call *c, const redisReply *r) {
    fg_async *a = c->a;
    bool moved = is_error(r, "MOVED "), ask = is_error(r, "ASK ");
    char host[sizeof(a->auth.host)];
    unsigned slot;
    int port;
    if ((!moved && !ask) || c->hops >= MAX_HOPS ||
        !fg_cluster_redirect(r->str, &slot, host, sizeof(host), &port))
        return false;
    uint32_t to = node_at(a, &a->auth, host[0] ? host : c->node->addr.host, port);
    if (to == NO_NODE) return false;
    c->hops++;
    if (moved) {
        a->owner[slot] = to;
        a->map_stale = true;
        c->ask = NO_NODE;
    } else {
        c->ask = to;
    }
    dispatch(c);
    return true;
}

/* A NOSCRIPT reply to c's EVALSHA: c goes again as EVAL, once. false when
 * r is c's answer. */
static bool noscript(fg_async_call *c, const redisReply *r) {
    size_t len;
    char *eval;
    if (!c->sent_script || c->eval || !fg_reply_noscript(r) ||
        (eval = fg_script_eval_of(c->script, c->scriptlen, &len)) == NULL)
        return false;
    free(c->script);
    c->script = eval;
    c->scriptlen = len;
    c->eval = true;
    dispatch(c);
    return true;
}

static void send_call(fg_async_call *c, int argc, const char **argv, const size_t *argvlen,
                      const char *key, size_t keylen);

/* The parts of a policy check kept in c->key: name, key, identity. */
static const char *policy_part(const fg_async_call *c, int i) {
    const char *s = c->key;
    while (i-- > 0)
        s += strlen(s) + 1;
    return s;
}

static void policy_command(const fg_async_call *c, fg_command *cmd) {
    const char *identity = policy_part(c, 2);
    fg_policy_request q = {policy_part(c, 0), policy_part(c, 1), identity[0] ? identity : NULL,
                           c->c.cost, false, 0};
    fg_policy_check_command(cmd, &q, &c->a->opts);
}

/* c's next step: cmd instead of what it sent, from its first hop. */
static void policy_send(fg_async_call *c, const fg_command *cmd, int step) {
    redisFreeSdsCommand(c->cmd);
    free(c->script);
    c->cmd = c->script = NULL;
    c->no_script = false;
    c->step = step;
    c->hops = 0;
    c->eval = false;
    send_call(c, cmd->argc, (const char **)cmd->argv, cmd->argvlen, cmd->key, cmd->keylen);
}

/* A cluster's check of a policy in keys, first step: FG.POLICY LOOKUP on
 * the policy's slot (remote_policy.c's check_in_keys). */
static void policy_lookup(fg_async_call *c) {
    char keys[FG_POLICY_KEYS][FG_POLICY_KEY_MAX];
    const char *name = policy_part(c, 0), *identity = policy_part(c, 2);
    fg_policy_keys(name, strlen(name), keys);
    fg_command cmd;
    fg_command_init(&cmd, keys[0]);
    fg_command_str(&cmd, "FG.POLICY");
    fg_command_str(&cmd, "LOOKUP");
    fg_command_str(&cmd, name);
    fg_command_str(&cmd, identity[0] ? identity : policy_part(c, 1));
    policy_send(c, &cmd, POLICY_LOOKUP);
}

/* The policy steps of a cluster whose nodes keep policies in keys: a
 * check sent as one script met a policy on another slot (CROSSSLOT), and
 * goes again as LOOKUP; a LOOKUP's rules go on to the key's node with the
 * check (RULES), unless a list decided. false when r is c's answer. */
static bool policy_step(fg_async_call *c, const redisReply *r) {
    fg_async *a = c->a;
    if (c->finish != finish_policy) return false;
    if (c->step == POLICY_AS_IS) {
        if (!c->sent_script || !is_error(r, "CROSSSLOT")) return false;
        a->policies_in_keys = true;
        policy_lookup(c);
        return true;
    }
    if (c->step != POLICY_LOOKUP || r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_STRING)
        return false;
    if (r->element[1]->len > 0) {
        c->listed = true;
        c->listed_allow = strcmp(r->element[1]->str, "allow") == 0;
        return false;
    }
    fg_command cmd;
    policy_command(c, &cmd);
    fg_command_str(&cmd, "RULES");
    fg_command_arg(&cmd, r->element[0]->str, r->element[0]->len);
    policy_send(c, &cmd, POLICY_RULED);
    return true;
}

static void on_reply(redisAsyncContext *ac, void *r, void *privdata) {
    (void)ac;
    static const fg_error lost = {FG_CODE_IO, "the connection to the server was lost or timed out"};
    fg_async_call *c = privdata;
    fg_async *a = c->a;
    list_remove(&c->node->sent, c);
    if (!a->closing) watch_deadline(c->node);
    const redisReply *reply = r;
    if (reply != NULL && !a->closing && noscript(c, reply)) return;
    if (reply != NULL && a->owner != NULL && !a->closing) {
        if (redirected(c, reply)) return;
        if (policy_step(c, reply)) return;
        /* a slot in the middle of a failover or a migration: lost, as an
         * unreachable master is (the map is read again) */
        if (is_error(reply, "TRYAGAIN") || is_error(reply, "CLUSTERDOWN")) {
            fg_error why;
            fg_set_error(&why, FG_CODE_IO, "%s", reply->str);
            a->map_stale = true;
            finish(c, NULL, &why);
            return;
        }
    }
    finish(c, reply, &lost);
}

/* Sends c to where it goes once its connection knows its dialect (held
 * until then), or answers c as lost at the next turn. */
static void dispatch(fg_async_call *c) {
    fg_async *a = c->a;
    if (a->owner != NULL && a->map_stale && !a->map_reading) read_map(a);
    aconn *n = a->nodes[route(a, c)];
    if (!connection(n)) {
        if (a->owner != NULL) a->map_stale = true; /* its master may have failed over */
        answer_soon(c, "the server cannot be reached");
        return;
    }
    if (n->dialect == FG_DIALECT_AUTO) {
        c->node = n;
        list_push(&n->held, c);
        return;
    }
    send_on(n, c);
}

static bool script_form(fg_async_call *c);

/* Sends c's command on n's connection, in n's dialect. */
static void send_on(aconn *n, fg_async_call *c) {
    fg_async *a = c->a;
    if (n->dialect == FG_DIALECT_SCRIPT && !script_form(c)) {
        answer_soon(c, "out of memory");
        return;
    }
    c->sent_script = n->dialect == FG_DIALECT_SCRIPT && c->script != NULL;
    if (c->ask != NO_NODE && redisAsyncCommand(n->ac, NULL, NULL, "ASKING") != REDIS_OK) {
        answer_soon(c, "the connection to the server is closing");
        return;
    }
    if (redisAsyncFormattedCommand(n->ac, on_reply, c, c->sent_script ? c->script : c->cmd,
                                   c->sent_script ? c->scriptlen : c->cmdlen) != REDIS_OK) {
        answer_soon(c, "the connection to the server is closing");
        return;
    }
    fg_count(&a->counters.net.round_trips, 1);
    c->node = n;
    c->deadline_mono = fg_monotonic_us() + (int64_t)a->opts.command_timeout_ms * 1000;
    list_push(&n->sent, c);
    if (n->sent.head == c) watch_deadline(n);
}

/* The arguments of a command as hiredis formats one ("*<n>\r\n", then
 * "$<len>\r\n<bytes>\r\n" each), pointing into it: their count, or
 * FG_ARGV_MAX + 1 when there are more. The library wrote cmd. */
static int command_args(const char *cmd, size_t len, const char **argv, size_t *lens) {
    const char *p = cmd, *end = cmd + len;
    char *next;
    long n = strtol(p + 1, &next, 10);
    if (n > FG_ARGV_MAX) return FG_ARGV_MAX + 1;
    for (long i = 0; i < n; i++) {
        p = next + 2; /* past "\r\n", at "$<len>" */
        lens[i] = (size_t)strtoul(p + 1, &next, 10);
        argv[i] = next + 2;
        next = (char *)argv[i] + lens[i];
        if (next + 2 > end) return 0;
    }
    return (int)n;
}

/* c->script, the command's script form when it has one: made once, from
 * c->cmd, when a node of the script dialect is to send it, so that a
 * server with the module pays nothing for scripts (scripts.c). false: out
 * of memory. */
static bool script_form(fg_async_call *c) {
    if (c->script != NULL || c->no_script) return true;
    const char *argv[FG_ARGV_MAX];
    size_t lens[FG_ARGV_MAX];
    const char *sargv[FG_ARGV_MAX + FG_SCRIPT_EXTRA_ARGS];
    size_t slens[FG_ARGV_MAX + FG_SCRIPT_EXTRA_ARGS];
    char nkeys[FG_SCRIPT_NKEYS_MAX];
    int argc = command_args(c->cmd, c->cmdlen, argv, lens);
    int n = argc <= FG_ARGV_MAX ? fg_script_args(argc, argv, lens, false, sargv, slens, nkeys) : 0;
    if (n == 0) {
        c->no_script = true;
        return true;
    }
    int len = redisFormatCommandArgv(&c->script, n, sargv, slens);
    if (len < 0) {
        c->script = NULL;
        return false;
    }
    c->scriptlen = (size_t)len;
    return true;
}

/* Sends the command of c, routed by key on a cluster. */
static void send_call(fg_async_call *c, int argc, const char **argv, const size_t *argvlen,
                      const char *key, size_t keylen) {
    sds cmd = NULL;
    int len = redisFormatSdsCommandArgv(&cmd, argc, argv, argvlen);
    if (len < 0) {
        answer_soon(c, "out of memory");
        return;
    }
    c->cmd = cmd;
    c->cmdlen = (size_t)len;
    if (c->a->owner != NULL) c->slot = fg_cluster_slot(key, keylen);
    c->ask = NO_NODE;
    dispatch(c);
}

/* ------------------------------------------------------------ the map */

/* CLUSTER SLOTS' reply becomes the whole map; a slot it leaves out goes to
 * the first node, which redirects. */
static void finish_map(fg_async_call *c, const redisReply *reply, const fg_error *why) {
    (void)why;
    fg_async *a = c->a;
    a->map_reading = false;
    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY || a->closing) return;
    for (size_t i = 0; i < FG_CLUSTER_SLOTS; i++)
        a->owner[i] = NO_NODE;
    for (size_t e = 0; e < reply->elements; e++) {
        long long start, end;
        const char *host;
        int port;
        if (!fg_cluster_slot_range(reply->element[e], &start, &end, &host, &port)) continue;
        uint32_t j = node_at(a, &a->auth, host[0] ? host : c->node->addr.host, port);
        for (long long slot = start; slot <= end && j != NO_NODE; slot++)
            a->owner[slot] = j;
    }
    a->map_stale = false;
}

/* Reads the map from a connected node, or the first that can be tried. */
static void read_map(fg_async *a) {
    static const char slots[] = "*2\r\n$7\r\nCLUSTER\r\n$5\r\nSLOTS\r\n";
    uint32_t j = NO_NODE;
    for (size_t k = 0; k < a->nnodes && j == NO_NODE; k++)
        if (a->nodes[k]->connected) j = (uint32_t)k;
    for (size_t k = 0; k < a->nnodes && j == NO_NODE; k++)
        if (connection(a->nodes[k])) j = (uint32_t)k;
    fg_async_call *c = j != NO_NODE ? calloc(1, sizeof(*c)) : NULL;
    if (c == NULL) return;
    aconn *n = a->nodes[j];
    c->a = a;
    c->finish = finish_map;
    if (redisAsyncFormattedCommand(n->ac, on_reply, c, slots, sizeof(slots) - 1) != REDIS_OK) {
        free(c);
        return;
    }
    a->map_reading = true;
    c->node = n;
    c->hops = MAX_HOPS; /* the map is no command to redirect */
    c->deadline_mono = fg_monotonic_us() + (int64_t)a->opts.command_timeout_ms * 1000;
    list_push(&n->sent, c);
    if (n->sent.head == c) watch_deadline(n);
}

/* *call is NULL unless the call is taken: a refused one leaves none. */
static void no_handle(fg_async_call **out) {
    if (out != NULL) *out = NULL;
}

/* A call of a with room for `extra` bytes after it (its key...). */
static fg_async_call *new_call(fg_async *a, size_t extra, void *arg, fg_async_call **out,
                               fg_error *err) {
    if (a->closing) { /* a callback run by fg_async_close */
        fg_set_error(err, FG_CODE_IO, "the client is closing");
        return NULL;
    }
    fg_async_call *c = calloc(1, sizeof(*c) + extra);
    if (c == NULL) {
        fg_set_error(err, FG_CODE_NOMEM, "out of memory");
        return NULL;
    }
    c->a = a;
    c->arg = arg;
    c->handle = out;
    if (out != NULL) *out = c;
    return c;
}

static fg_code start(fg_async *a, const char *key, const fg_limit *l, int64_t cost, bool peek,
                     fg_async_check_cb *done, void *arg, fg_async_call **out, fg_error *err) {
    no_handle(out);
    if (a == NULL || key == NULL || l == NULL || done == NULL)
        return fg_set_error(err, FG_CODE_INVALID,
                            "a client, a key, a limit and a callback are required");
    fg_limiter ml;
    if (fg_limit_convert(l, cost, &ml, err) != FG_CODE_OK) return FG_CODE_INVALID;
    size_t keylen = strlen(key);
    fg_async_call *c = new_call(a, keylen + 1, arg, out, err);
    if (c == NULL) return a->closing ? FG_CODE_IO : FG_CODE_NOMEM;
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
    send_call(c, cmd.argc, cmd.argv, cmd.argvlen, cmd.key, cmd.keylen);
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

fg_code fg_async_refund(fg_async *a, const char *key, const fg_limit *limit, int64_t units,
                        fg_async_count_cb *done, void *arg, fg_async_call **call,
                        fg_error *err) {
    no_handle(call);
    if (a == NULL || key == NULL || limit == NULL)
        return fg_set_error(err, FG_CODE_INVALID, "a client, a key and a limit are required");
    fg_limiter ml;
    if (fg_limit_convert(limit, units, &ml, err) != FG_CODE_OK) return FG_CODE_INVALID;
    if (limit->algorithm == FG_SLIDING_WINDOW || limit->algorithm == FG_SLIDING_LOG)
        return fg_set_error(err, FG_CODE_INVALID,
                            "a refund takes a token or leaky bucket, GCRA or a fixed window");
    size_t keylen = strlen(key);
    fg_async_call *c = new_call(a, keylen + 1, arg, done != NULL ? call : NULL, err);
    if (c == NULL) return a->closing ? FG_CODE_IO : FG_CODE_NOMEM;
    memcpy(c->key, key, keylen + 1);
    c->finish = finish_refund;
    c->done.count = done;
    fg_command cmd;
    fg_remote_limits_refund_command(a->limits, c->key, limit, units,
                                    fg_clock_us(a->opts.clock_us, a->opts.clock_arg), &cmd);
    send_call(c, cmd.argc, cmd.argv, cmd.argvlen, cmd.key, cmd.keylen);
    return FG_CODE_OK;
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

/* Sends a lock call's command, routed by its key (kept first in key[]). */
static fg_code send_lock_call(fg_async_call *c, fg_argv *cmd) {
    send_call(c, cmd->argc, cmd->argv, cmd->argvlen, c->key, strlen(c->key));
    return FG_CODE_OK;
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
    no_handle(call);
    fg_lock_options o;
    fg_lock_options_init(&o);
    o.lease_ms = lease_ms;
    fg_code rc = lock_call_given(a, key, owner, done != NULL, err);
    if (rc == FG_CODE_OK) rc = fg_lock_check_acquire(capacity, owner, permits, &o, err);
    if (rc != FG_CODE_OK) return rc;
    fg_async_call *c = new_lock_call(a, key, owner, arg, call, err);
    if (c == NULL) return a->closing ? FG_CODE_IO : FG_CODE_NOMEM;
    c->finish = finish_grant;
    c->done.grant = done;
    fg_argv cmd;
    fg_semaphore_acquire_command(&cmd, key, capacity, owner, permits, &o);
    return send_lock_call(c, &cmd);
}

fg_code fg_async_semaphore_release(fg_async *a, const char *key, const char *owner,
                                   int64_t permits, fg_async_count_cb *done, void *arg,
                                   fg_error *err) {
    fg_code rc = lock_call_given(a, key, owner, true, err);
    if (rc == FG_CODE_OK) rc = fg_lock_check_release(owner, permits, err);
    if (rc != FG_CODE_OK) return rc;
    fg_async_call *c = new_lock_call(a, key, owner, arg, NULL, err);
    if (c == NULL) return a->closing ? FG_CODE_IO : FG_CODE_NOMEM;
    c->finish = finish_release;
    c->done.count = done;
    fg_argv cmd;
    fg_semaphore_release_command(&cmd, key, owner, permits);
    return send_lock_call(c, &cmd);
}

fg_code fg_async_extend(fg_async *a, const char *key, const char *owner, int64_t lease_ms,
                        fg_async_count_cb *done, void *arg, fg_async_call **call,
                        fg_error *err) {
    no_handle(call);
    fg_code rc = lock_call_given(a, key, owner, done != NULL, err);
    if (rc == FG_CODE_OK) rc = fg_lock_check_extend(owner, lease_ms, err);
    if (rc != FG_CODE_OK) return rc;
    fg_async_call *c = new_lock_call(a, key, owner, arg, call, err);
    if (c == NULL) return a->closing ? FG_CODE_IO : FG_CODE_NOMEM;
    c->finish = finish_extend;
    c->done.count = done;
    fg_argv cmd;
    fg_extend_command(&cmd, key, owner, lease_ms);
    return send_lock_call(c, &cmd);
}

fg_code fg_async_policy_check(fg_async *a, const char *name, const char *key,
                              const char *identity, int64_t cost, fg_async_policy_cb *done,
                              void *arg, fg_async_call **call, fg_error *err) {
    no_handle(call);
    if (a == NULL || name == NULL || key == NULL || done == NULL)
        return fg_set_error(err, FG_CODE_INVALID,
                            "a client, a policy name, a key and a callback are required");
    fg_code rc = fg_policy_name_check(name, err);
    if (rc == FG_CODE_OK) rc = fg_policy_request_check(cost, false, 0, err);
    if (rc != FG_CODE_OK) return rc;
    size_t nlen = strlen(name) + 1, klen = strlen(key) + 1;
    size_t ilen = identity != NULL ? strlen(identity) + 1 : 1;
    fg_async_call *c = new_call(a, nlen + klen + ilen, arg, call, err);
    if (c == NULL) return a->closing ? FG_CODE_IO : FG_CODE_NOMEM;
    c->finish = finish_policy;
    c->done.policy = done;
    memcpy(c->key, name, nlen);
    memcpy(c->key + nlen, key, klen);
    memcpy(c->key + nlen + klen, identity != NULL ? identity : "", ilen);
    c->c.cost = cost;
    if (a->owner != NULL && a->policies_in_keys) {
        policy_lookup(c);
        return FG_CODE_OK;
    }
    fg_command cmd;
    policy_command(c, &cmd);
    send_call(c, cmd.argc, cmd.argv, cmd.argvlen, key, strlen(key));
    return FG_CODE_OK;
}

void fg_async_cancel(fg_async_call *call) {
    if (call == NULL) return;
    call->cancelled = true;
    forget(call);
}

/* ------------------------------------------------------------ the client */

static bool add_seed(const fg_url *seed, void *arg) {
    fg_async *a = arg;
    a->auth = *seed;
    return node_at(a, seed, seed->host, seed->port) != NO_NODE;
}

/* The nodes of url: a server, or a cluster's seeds (its map read at the
 * first call). */
static fg_code nodes_of(fg_async *a, const char *url, fg_error *err) {
    if (fg_cluster_url(url)) {
        if ((a->owner = malloc(FG_CLUSTER_SLOTS * sizeof(*a->owner))) == NULL)
            return fg_set_error(err, FG_CODE_NOMEM, "out of memory");
        for (size_t i = 0; i < FG_CLUSTER_SLOTS; i++)
            a->owner[i] = NO_NODE;
        a->map_stale = true;
        return fg_cluster_seeds(url, add_seed, a, err);
    }
    fg_url addr;
    fg_code rc = fg_url_parse(url, &addr, err);
    if (rc != FG_CODE_OK) return rc;
    if (addr.kind == FG_URL_MEM)
        return fg_set_error(err, FG_CODE_UNSUPPORTED,
                            "mem: decides in process without waiting: use fg_open");
    if (node_at(a, &addr, addr.host, addr.port) == NO_NODE)
        return fg_set_error(err, FG_CODE_NOMEM, "out of memory");
    return FG_CODE_OK;
}

static fg_code check_options(const fg_options *o, fg_error *err) {
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
    fg_code rc = check_options(&a->opts, err);
    if (rc == FG_CODE_OK) rc = nodes_of(a, url, err);
    fg_backend_args args = {url, &a->opts, &a->counters, NULL};
    if (rc == FG_CODE_OK && ((a->limits = fg_remote_limits.open(&args)) == NULL ||
                             (a->ready_timer = a->loop.timer(a->loop.loop, run_ready, a)) == NULL))
        rc = fg_set_error(err, FG_CODE_NOMEM, "out of memory");
    if (rc != FG_CODE_OK) {
        fg_async_close(a);
        return NULL;
    }
    return a;
}

void fg_async_close(fg_async *a) {
    if (a == NULL) return;
    a->closing = true;
    for (size_t j = 0; j < a->nnodes; j++)
        node_free(a->nodes[j]);
    if (a->ready_timer != NULL) run_ready(a);
    if (a->ready_timer != NULL) a->loop.free_timer(a->ready_timer);
    if (a->limits != NULL) fg_remote_limits.close(a->limits);
    free(a->nodes);
    free(a->owner);
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
