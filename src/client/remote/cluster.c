/*
 * cluster.c - libfloodgate on a Redis Cluster: a small routing layer of our
 * own, since hiredis 0.14 has none.
 *
 * The slot map is an array of 16384 node indexes read from CLUSTER SLOTS,
 * leniently: the 4th element Redis 7.0 adds per node and any other extra
 * element are ignored, and replicas are not used. The nodes are the seeds of
 * the URL plus every master seen since, each with one hiredis connection
 * (conn.c) opened when first needed.
 *
 * A call routes each command by its key's slot and sends the commands in
 * rounds. In a round every node gets one pipeline of the commands routed to
 * it, written to all nodes before any is read, so a batch costs one round
 * trip per node. A reply that redirects sends its command again in the next
 * round, to the node it names:
 *
 *   MOVED        the slot's owner is updated at once, and the whole map is
 *                read again before the next call: a MOVED usually means that
 *                a resharding moved more slots than this one.
 *   ASK          ASKING and the command go to the named node, once; the map
 *                is kept, because the slot is only migrating.
 *   TRYAGAIN, CLUSTERDOWN
 *                sent again after a short pause (CLUSTERDOWN also rereads
 *                the map).
 *   I/O failure  the lost reply may have been a decision taken, which sending
 *                the command again would count twice. The map is read again
 *                from any node, and the command is sent again only when it
 *                went where the map sent it (no redirect in this call) and
 *                its slot has another owner now (a failover). A command that
 *                followed an ASK or a MOVED may have run on that node while
 *                the map still names another: it is never sent again.
 *
 *   NOSCRIPT     the node speaks scripts (conn.c) and lost the one an
 *                EVALSHA named: the command goes again as EVAL in the next
 *                round, to the same node, so a node's commands so answered
 *                cost one round trip more together.
 *
 * After MAX_ROUNDS rounds a redirect is the answer (an error reply, so
 * FG_CODE_SERVER), except CLUSTERDOWN and a command that was lost once,
 * which are FG_CODE_IO so that the failure policy decides as it does for an
 * unreachable server.
 */
#include "cluster.h"

#include "error.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define SCHEME     "redis+cluster://"
#define NO_NODE    UINT32_MAX
#define MAX_ROUNDS 5
#define PAUSE_MS   20 /* before round k+1 after TRYAGAIN or CLUSTERDOWN: k * PAUSE_MS */
#define SMALL_CALL 16 /* calls of up to this many commands keep their routes on the stack */

typedef struct node {
    fg_url addr;
    fg_conn conn;
} node;

struct fg_cluster {
    fg_conn_config cfg;
    fg_url auth; /* the user and password of every node */
    node *nodes;
    size_t nnodes, cap;
    uint32_t owner[FG_CLUSTER_SLOTS]; /* index in nodes, or NO_NODE */
    bool stale;                       /* read the map again before the next call */
};

/* Where one command of a call stands. */
typedef struct route {
    unsigned slot;
    uint32_t node;   /* where this round sends it */
    uint32_t ask;    /* NO_NODE, or where an ASK sends the next round */
    bool asking;     /* this round sends ASKING first */
    bool sent;       /* this round sent it, a reply is due */
    bool lost;       /* this round lost it to an I/O failure */
    bool was_lost;   /* some round of this call lost it */
    bool redirected; /* an ASK or MOVED sent it elsewhere in this call */
    bool eval;       /* NOSCRIPT answered it: the script goes as EVAL */
    bool done;
} route;

/* One call of fg_cluster_run. */
typedef struct call {
    const fg_command *cmds;
    route *rt;
    size_t n, left;
    redisReply **replies;
    fg_code *codes;
    fg_error *err;
    bool last;   /* the last round: every reply is final */
    bool pause;  /* TRYAGAIN or CLUSTERDOWN this round */
    bool reread; /* read the map before the next round */
} call;

/* ------------------------------------------------------------- slots */

static uint16_t crc16_xmodem(const unsigned char *s, size_t len) {
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)(s[i] << 8);
        for (int bit = 0; bit < 8; bit++)
            crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

unsigned fg_cluster_slot(const char *key, size_t len) {
    const char *open = memchr(key, '{', len);
    if (open != NULL) {
        const char *tag = open + 1;
        const char *close = memchr(tag, '}', len - (size_t)(tag - key));
        if (close != NULL && close > tag) {
            key = tag;
            len = (size_t)(close - tag);
        }
    }
    return crc16_xmodem((const unsigned char *)key, len) & (FG_CLUSTER_SLOTS - 1);
}

/* ------------------------------------------------------------- nodes */

/* The index of host:port, added when new; NO_NODE when out of memory. */
static uint32_t add_node(fg_cluster *cl, const char *host, int port) {
    for (size_t j = 0; j < cl->nnodes; j++)
        if (cl->nodes[j].addr.port == port && strcmp(cl->nodes[j].addr.host, host) == 0)
            return (uint32_t)j;
    /* Filled before growing the array: host may point into it. */
    node fresh = {.addr = cl->auth};
    if (strlen(host) >= sizeof(fresh.addr.host)) return NO_NODE;
    strcpy(fresh.addr.host, host);
    fresh.addr.port = port;
    if (cl->nnodes == cl->cap) {
        size_t cap = cl->cap ? cl->cap * 2 : 4;
        node *grown = realloc(cl->nodes, cap * sizeof(*grown));
        if (grown == NULL) return NO_NODE;
        cl->nodes = grown;
        cl->cap = cap;
    }
    cl->nodes[cl->nnodes] = fresh;
    return (uint32_t)cl->nnodes++;
}

/* A slot nobody is known to own goes to the first node, which redirects. */
static uint32_t owner_of(const fg_cluster *cl, unsigned slot) {
    return cl->owner[slot] != NO_NODE ? cl->owner[slot] : 0;
}

/* --------------------------------------------------------------- URL */

bool fg_cluster_url(const char *url) {
    return url != NULL && strncasecmp(url, SCHEME, strlen(SCHEME)) == 0;
}

static fg_code invalid(fg_error *err, const char *url, const char *what) {
    return fg_set_error(err, FG_CODE_INVALID, "invalid URL \"%.160s\": %s", url, what);
}

/* Each seed is parsed as "redis://[userinfo@]seed[?query]", so that hosts,
 * ports, escapes and the options (?backend=, for every node) follow the
 * rules of redis:// URLs. */
fg_code fg_cluster_seeds(const char *url, bool (*each)(const fg_url *seed, void *arg), void *arg,
                         fg_error *err) {
    const char *s = url + strlen(SCHEME);
    if (strchr(s, '/') != NULL) return invalid(err, url, "a cluster has no databases (no /db)");
    const char *at = strrchr(s, '@');
    size_t ulen = at ? (size_t)(at + 1 - s) : 0; /* "user:password@" */
    const char *seed = s + ulen;
    const char *query = seed + strcspn(seed, "?"); /* "" or "?..." */
    for (;;) {
        const char *comma = memchr(seed, ',', (size_t)(query - seed));
        size_t slen = comma ? (size_t)(comma - seed) : (size_t)(query - seed);
        char one[1024];
        fg_url u;
        fg_error why;
        if (slen == 0) return invalid(err, url, "a seed node is empty (host:port,host:port)");
        if (ulen + slen + strlen(query) + sizeof("redis://") > sizeof(one))
            return invalid(err, url, "too long");
        snprintf(one, sizeof(one), "redis://%.*s%.*s%s", (int)ulen, s, (int)slen, seed, query);
        if (fg_url_parse(one, &u, &why) != FG_CODE_OK) {
            const char *what = strstr(why.message, "\": "); /* after the seed's URL */
            return invalid(err, url, what != NULL ? what + 3 : why.message);
        }
        if (!each(&u, arg)) return fg_set_error(err, FG_CODE_NOMEM, "out of memory");
        if (comma == NULL) return FG_CODE_OK;
        seed = comma + 1;
    }
}

static bool add_seed(const fg_url *seed, void *arg) {
    fg_cluster *cl = arg;
    cl->auth = *seed;
    return add_node(cl, seed->host, seed->port) != NO_NODE;
}

fg_cluster *fg_cluster_new(const char *url, const fg_conn_config *cfg, fg_error *err) {
    fg_cluster *cl = calloc(1, sizeof(*cl));
    if (cl == NULL) {
        fg_set_error(err, FG_CODE_NOMEM, "out of memory");
        return NULL;
    }
    cl->cfg = *cfg;
    cl->stale = true;
    for (size_t i = 0; i < FG_CLUSTER_SLOTS; i++)
        cl->owner[i] = NO_NODE;
    if (fg_cluster_seeds(url, add_seed, cl, err) != FG_CODE_OK) {
        fg_cluster_free(cl);
        return NULL;
    }
    return cl;
}

void fg_cluster_free(fg_cluster *cl) {
    if (cl == NULL) return;
    for (size_t j = 0; j < cl->nnodes; j++)
        fg_conn_close(&cl->nodes[j].conn);
    free(cl->nodes);
    free(cl);
}

/* ----------------------------------------------------------- the map */

bool fg_cluster_slot_range(const redisReply *e, long long *start, long long *end,
                           const char **host, int *port) {
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 3) return false;
    const redisReply *a = e->element[0], *b = e->element[1], *m = e->element[2];
    if (a->type != REDIS_REPLY_INTEGER || b->type != REDIS_REPLY_INTEGER || a->integer < 0 ||
        a->integer > b->integer || b->integer >= FG_CLUSTER_SLOTS)
        return false;
    if (m->type != REDIS_REPLY_ARRAY || m->elements < 2 ||
        m->element[0]->type != REDIS_REPLY_STRING || m->element[1]->type != REDIS_REPLY_INTEGER ||
        m->element[1]->integer < 1 || m->element[1]->integer > 65535 ||
        strcmp(m->element[0]->str, "?") == 0)
        return false;
    *start = a->integer;
    *end = b->integer;
    *host = m->element[0]->str;
    *port = (int)m->element[1]->integer;
    return true;
}

/* The reply of CLUSTER SLOTS becomes the whole map: a slot it does not
 * cover (or covers with a malformed entry) has no known owner. */
static void load_map(fg_cluster *cl, uint32_t answered, const redisReply *r) {
    char here[sizeof(cl->nodes[0].addr.host)];
    strcpy(here, cl->nodes[answered].addr.host);
    for (size_t i = 0; i < FG_CLUSTER_SLOTS; i++)
        cl->owner[i] = NO_NODE;
    for (size_t e = 0; e < r->elements; e++) {
        long long start, end;
        const char *host;
        int port;
        if (!fg_cluster_slot_range(r->element[e], &start, &end, &host, &port)) continue;
        uint32_t j = add_node(cl, host[0] ? host : here, port);
        for (long long slot = start; slot <= end && j != NO_NODE; slot++)
            cl->owner[slot] = j;
    }
}

static fg_code read_map_from(fg_cluster *cl, uint32_t j, fg_error *err) {
    static const fg_command slots = {.argc = 2, .argv = {"CLUSTER", "SLOTS"}, .argvlen = {7, 5}};
    fg_conn *conn = &cl->nodes[j].conn;
    redisReply *r;
    fg_code rc = fg_conn_ensure(conn, &cl->nodes[j].addr, &cl->cfg, err);
    if (rc == FG_CODE_OK) rc = fg_conn_append(conn, &slots, err);
    if (rc == FG_CODE_OK) rc = fg_conn_flush(conn, err);
    if (rc == FG_CODE_OK) rc = fg_conn_receive(conn, &r, 1, err);
    if (rc != FG_CODE_OK) return rc;
    if (r->type == REDIS_REPLY_ARRAY)
        load_map(cl, j, r);
    else if (r->type == REDIS_REPLY_ERROR)
        rc = fg_set_error(err, FG_CODE_SERVER, "CLUSTER SLOTS: %s", r->str);
    else
        rc = fg_set_error(err, FG_CODE_PROTOCOL, "unexpected reply to CLUSTER SLOTS");
    freeReplyObject(r);
    return rc;
}

/* Nodes that cannot be reached are skipped; one that answers but refuses
 * (AUTH, or no cluster support) is a configuration error, reported. */
fg_code fg_cluster_refresh(fg_cluster *cl, fg_error *err) {
    fg_code rc = FG_CODE_IO;
    for (size_t j = 0; j < cl->nnodes && rc == FG_CODE_IO; j++)
        rc = read_map_from(cl, (uint32_t)j, err);
    if (rc == FG_CODE_OK) cl->stale = false;
    return rc;
}

fg_dialect fg_cluster_dialect(fg_cluster *cl, fg_error *err) {
    for (size_t j = 0; j < cl->nnodes; j++) {
        node *nd = &cl->nodes[j];
        if (nd->conn.ctx != NULL || fg_conn_ensure(&nd->conn, &nd->addr, &cl->cfg, err) == FG_CODE_OK)
            return nd->conn.dialect;
    }
    return FG_DIALECT_AUTO;
}

/* ----------------------------------------------------------- routing */

static void finish(call *k, size_t i, fg_code code, redisReply *reply) {
    k->rt[i].done = true;
    k->codes[i] = code;
    k->replies[i] = reply;
    k->left--;
}

/* The pipeline of node j in this round: its commands, each after an ASKING
 * when an ASK sent it there. */
static void send_to_node(fg_cluster *cl, uint32_t j, call *k) {
    static const fg_command asking = {.argc = 1, .argv = {"ASKING"}, .argvlen = {6}};
    node *nd = &cl->nodes[j];
    size_t mine = 0;
    for (size_t i = 0; i < k->n; i++)
        mine += !k->rt[i].done && k->rt[i].node == j;
    if (mine == 0) return;
    fg_code rc = fg_conn_ensure(&nd->conn, &nd->addr, &cl->cfg, k->err);
    for (size_t i = 0; i < k->n && rc == FG_CODE_OK; i++) {
        if (k->rt[i].done || k->rt[i].node != j) continue;
        if (k->rt[i].asking) rc = fg_conn_append(&nd->conn, &asking, k->err);
        if (rc == FG_CODE_OK)
            rc = k->rt[i].eval ? fg_conn_append_eval(&nd->conn, &k->cmds[i], k->err)
                               : fg_conn_append(&nd->conn, &k->cmds[i], k->err);
    }
    if (rc == FG_CODE_OK) rc = fg_conn_flush(&nd->conn, k->err);
    fg_count(rc == FG_CODE_OK ? &cl->cfg.counters->round_trips : &cl->cfg.counters->failures, 1);
    for (size_t i = 0; i < k->n; i++) {
        route *rt = &k->rt[i];
        if (rt->done || rt->node != j) continue;
        if (rc == FG_CODE_OK)
            rt->sent = true;
        else if (rc == FG_CODE_IO)
            rt->lost = rt->was_lost = k->reread = true;
        else
            finish(k, i, rc, NULL);
    }
}

static void send_round(fg_cluster *cl, call *k) {
    for (size_t i = 0; i < k->n; i++) {
        route *rt = &k->rt[i];
        if (rt->done) continue;
        rt->asking = rt->ask != NO_NODE;
        rt->node = rt->asking ? rt->ask : owner_of(cl, rt->slot);
        rt->ask = NO_NODE;
        rt->sent = rt->lost = false;
    }
    for (size_t j = 0; j < cl->nnodes; j++)
        send_to_node(cl, (uint32_t)j, k);
}

static bool is_error(const redisReply *r, const char *prefix) {
    return r->type == REDIS_REPLY_ERROR && strncmp(r->str, prefix, strlen(prefix)) == 0;
}

bool fg_cluster_redirect(const char *s, unsigned *slot, char *host, size_t hostlen, int *port) {
    const char *p = strchr(s, ' ');
    char *end;
    if (p == NULL) return false;
    unsigned long n = strtoul(p + 1, &end, 10);
    if (end == p + 1 || *end != ' ' || n >= FG_CLUSTER_SLOTS) return false;
    const char *addr = end + 1;
    const char *colon = strrchr(addr, ':');
    if (colon == NULL) return false;
    long pn = strtol(colon + 1, &end, 10);
    size_t hlen = (size_t)(colon - addr);
    if (*end != '\0' || pn < 1 || pn > 65535 || hlen >= hostlen) return false;
    memcpy(host, addr, hlen);
    host[hlen] = '\0';
    *slot = (unsigned)n;
    *port = (int)pn;
    return true;
}

/* A redirect's slot and node (added when new; an empty host is the node
 * that sent it). false when it does not parse. */
static bool parse_redirect(fg_cluster *cl, const char *s, uint32_t from, unsigned *slot,
                           uint32_t *to) {
    char host[sizeof(cl->nodes[0].addr.host)];
    int port;
    if (!fg_cluster_redirect(s, slot, host, sizeof(host), &port)) return false;
    if (host[0] == '\0') strcpy(host, cl->nodes[from].addr.host);
    *to = add_node(cl, host, port);
    return *to != NO_NODE;
}

/* A reply of command i: its answer, or where and when to send it again. */
static void handle_reply(fg_cluster *cl, call *k, size_t i, redisReply *r) {
    route *rt = &k->rt[i];
    bool moved = is_error(r, "MOVED "), ask = is_error(r, "ASK ");
    bool busy = is_error(r, "TRYAGAIN"), down = is_error(r, "CLUSTERDOWN");
    unsigned slot;
    uint32_t to;
    if (!k->last && !rt->eval && fg_reply_noscript(r)) {
        /* The node lost the script: as EVAL to the same node next round
         * (after ASKING again when an ASK sent it there). */
        rt->eval = true;
        if (rt->asking) rt->ask = rt->node;
        freeReplyObject(r);
    } else if (k->last && (down || (rt->was_lost && (moved || ask || busy)))) {
        fg_set_error(k->err, FG_CODE_IO, "%s", r->str);
        freeReplyObject(r);
        finish(k, i, FG_CODE_IO, NULL);
    } else if (k->last || !(moved || ask || busy || down) ||
               ((moved || ask) && !parse_redirect(cl, r->str, rt->node, &slot, &to))) {
        finish(k, i, FG_CODE_OK, r);
    } else {
        if (moved) {
            cl->owner[slot] = to;
            cl->stale = true;
            rt->redirected = true;
        } else if (ask) {
            rt->ask = to;
            rt->redirected = true;
        } else {
            k->pause = true;
            k->reread |= down;
        }
        freeReplyObject(r);
    }
}

static void receive_round(fg_cluster *cl, call *k) {
    for (size_t i = 0; i < k->n; i++) {
        route *rt = &k->rt[i];
        if (rt->done || !rt->sent) continue;
        fg_conn *conn = &cl->nodes[rt->node].conn;
        redisReply *r[2];
        size_t want = rt->asking ? 2 : 1;
        bool broken = conn->ctx == NULL; /* an earlier reply of its pipeline failed */
        if (!broken && fg_conn_receive(conn, r, want, k->err) != FG_CODE_OK) {
            fg_count(&cl->cfg.counters->failures, 1);
            broken = true;
        }
        if (broken) {
            rt->lost = rt->was_lost = k->reread = true;
            continue;
        }
        if (want == 2) freeReplyObject(r[0]); /* ASKING's OK */
        handle_reply(cl, k, i, r[want - 1]);
    }
}

/* After the map was read again: a lost command goes again only when it
 * went where the map sent it and its slot has a new owner (see the top
 * comment). */
static void settle_lost(fg_cluster *cl, call *k) {
    for (size_t i = 0; i < k->n; i++) {
        route *rt = &k->rt[i];
        if (!rt->done && rt->lost &&
            (k->last || rt->redirected || owner_of(cl, rt->slot) == rt->node))
            finish(k, i, FG_CODE_IO, NULL);
    }
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

void fg_cluster_run(fg_cluster *cl, const fg_command *cmds, size_t n, redisReply **replies,
                    fg_code *codes, fg_error *err) {
    route small[SMALL_CALL];
    call k = {.cmds = cmds, .n = n, .left = n, .replies = replies, .codes = codes, .err = err};
    k.rt = n <= SMALL_CALL ? small : malloc(n * sizeof(*k.rt));
    if (k.rt == NULL) {
        for (size_t i = 0; i < n; i++)
            codes[i] = FG_CODE_NOMEM;
        fg_set_error(err, FG_CODE_NOMEM, "out of memory");
        return;
    }
    /* When this fails, the old map still routes and redirects correct it. */
    if (cl->stale) fg_cluster_refresh(cl, NULL);
    for (size_t i = 0; i < n; i++)
        k.rt[i] = (route){.slot = fg_cluster_slot(cmds[i].key, cmds[i].keylen), .ask = NO_NODE};
    for (int round = 1; round <= MAX_ROUNDS && k.left > 0; round++) {
        k.last = round == MAX_ROUNDS;
        k.pause = k.reread = false;
        send_round(cl, &k);
        receive_round(cl, &k);
        if (k.reread) fg_cluster_refresh(cl, NULL);
        settle_lost(cl, &k);
        if (k.left > 0 && k.pause) sleep_ms(PAUSE_MS * round);
    }
    if (k.rt != small) free(k.rt);
}
