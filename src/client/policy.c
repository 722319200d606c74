/*
 * policy.c - named policies (floodgate.h, "policies"): fg_policy_* on every
 * backend, and the policy side of a client (client.h's fg_policies).
 *
 * Every call first checks what it is given the same way on every backend,
 * with the module's messages (policy_def.c): a name, a definition, a cost
 * and a timeout. Bad input is thus FG_CODE_INVALID without a round trip,
 * and a server only sees commands it accepts. Then:
 *
 *   mem:            the client's table (mem_policy.c).
 *   redis:, unix:   FG.CHECK, GET and LIST on the client's shared
 *                   connection (client.c's exchange, which counts the
 *                   round trip); FG.POLICY SET, DEL, ALLOW and DENY too,
 *                   as fg_argv commands (SET takes up to 58 arguments,
 *                   more than an fg_command holds).
 *   redis+cluster:  FG.CHECK to the master of the key's slot (exchange);
 *                   GET and LIST to the node of slot 0; SET, DEL, ALLOW and
 *                   DENY to every master that owns slots, as the slot map
 *                   (CLUSTER SLOTS) names them when the call is made, each
 *                   on a connection of this side's own, all written before
 *                   any reply is read. A master that cannot be reached makes
 *                   the call FG_CODE_IO: the others have the change then,
 *                   and the call can simply be made again (they are all
 *                   idempotent but for ALLOW's count). DEL answers whether
 *                   any master had the policy; ALLOW the largest count.
 *
 * fg_policy_acquire on a server sends FG.CHECK ... WAIT on a connection of
 * its own (at most SPARE_CONNS idle ones are kept, for any node), with a
 * read timeout of the wait plus command_timeout_ms, so that the server
 * answers first; the other calls of the client go on meanwhile. On a
 * cluster it first asks the key's node for the slot map, and follows one
 * MOVED. A waiting request is decided at the server's clock: opts.send_clock
 * sends AT with the checks that do not wait only (the module refuses both).
 *
 * The policy loader: a check answered "ERR no such policy" asks the loader
 * once (without a lock held), sets what it gives with fg_policy_set, and
 * checks once more; a loader that has none leaves the error as it was.
 *
 * Errors map as for limits (fg_reply_error). The failure policy
 * (on_failure) does not apply: a server that cannot be reached is
 * FG_CODE_IO.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "client.h"
#include "cluster.h"
#include "command.h"
#include "conn.h"
#include "error.h"
#include "mem_policy.h"
#include "policy_def.h"

#define SPARE_CONNS   8
#define LIST_ITEMS    (FG_ARGV_MAX - 3) /* FG.POLICY ALLOW name item... */
#define MAX_MASTERS   FG_GATHER_MAX
#define NUM_LEN       32
#define SET_NUMS      (FG_MAX_POLICY_LIMITS * 3 + 3 + 2 * 2) /* limits, penalty, lists */
#define MISSING       "ERR no such policy"
#define ALGORITHM_MAX 4 /* words of a LIMIT rule in FG.POLICY GET */

/* An idle connection and where it goes. */
typedef struct spare {
    fg_url addr;
    fg_conn conn;
} spare;

struct fg_policies {
    fg_mem_policies *mem; /* mem: */
    fg_url addr;          /* one server: the server; a cluster: the nodes' auth */
    bool cluster;
    fg_conn_config cfg;
    bool send_clock;
    int64_t (*clock_us)(void *arg);
    void *clock_arg;
    pthread_mutex_t lock; /* guards the loader and the spares */
    fg_policy_loader loader;
    void *loader_arg;
    spare spares[SPARE_CONNS];
    size_t nspares;
};

void fg_policy_def_init(fg_policy_def *def) {
    memset(def, 0, sizeof(*def));
    def->ban_after = 1;
    def->allowlist = def->denylist = (fg_list_spec){FG_LIST_EXACT, 0.001, 10000};
}

/* ------------------------------------------------------- the client side */

/* The auth of a cluster's nodes: its URL's user and password, as
 * cluster.c reads them ("redis://userinfo@first-seed"). */
static fg_code cluster_auth(const char *url, fg_url *out, fg_error *err) {
    const char *s = strstr(url, "://") + 3;
    const char *at = strrchr(s, '@');
    const char *seed = at != NULL ? at + 1 : s;
    size_t ulen = (size_t)(seed - s), slen = strcspn(seed, ",");
    char one[1024];
    if (ulen + slen + sizeof("redis://") > sizeof(one))
        return fg_set_error(err, FG_CODE_INVALID, "URL too long");
    snprintf(one, sizeof(one), "redis://%.*s%.*s", (int)ulen, s, (int)slen, seed);
    return fg_url_parse(one, out, err);
}

fg_policies *fg_policies_new(const char *url, const fg_options *opts, const fg_conn_config *cfg) {
    fg_policies *p = calloc(1, sizeof(*p));
    if (p == NULL) return NULL;
    p->cfg = *cfg;
    p->send_clock = opts->send_clock;
    p->clock_us = opts->clock_us;
    p->clock_arg = opts->clock_arg;
    p->cluster = fg_cluster_url(url);
    fg_code rc = p->cluster ? cluster_auth(url, &p->addr, NULL) : fg_url_parse(url, &p->addr, NULL);
    if (rc == FG_CODE_OK && !p->cluster && p->addr.kind == FG_URL_MEM &&
        (p->mem = fg_mem_policies_new(opts->clock_us, opts->clock_arg)) == NULL)
        rc = FG_CODE_NOMEM;
    if (rc != FG_CODE_OK) {
        free(p);
        return NULL;
    }
    pthread_mutex_init(&p->lock, NULL);
    return p;
}

void fg_policies_free(fg_policies *p) {
    if (p == NULL) return;
    fg_mem_policies_free(p->mem);
    for (size_t i = 0; i < p->nspares; i++)
        fg_conn_close(&p->spares[i].conn);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

bool fg_policies_forget(fg_policies *p, const char *key) {
    return p->mem != NULL && fg_mem_policy_forget(p->mem, key);
}

void fg_set_policy_loader(fg_client *c, fg_policy_loader loader, void *arg) {
    if (c == NULL) return;
    fg_policies *p = fg_client_policies(c);
    pthread_mutex_lock(&p->lock);
    p->loader = loader;
    p->loader_arg = arg;
    pthread_mutex_unlock(&p->lock);
}

static int64_t now_us(const fg_policies *p) {
    if (p->clock_us) return p->clock_us(p->clock_arg);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* ---------------------------------------------------------- connections */

static bool same_addr(const fg_url *a, const fg_url *b) {
    return a->kind == b->kind && a->port == b->port && strcmp(a->host, b->host) == 0 &&
           strcmp(a->path, b->path) == 0;
}

/* An idle connection to addr, or a closed one. */
static fg_conn take_conn(fg_policies *p, const fg_url *addr) {
    fg_conn conn = {0};
    pthread_mutex_lock(&p->lock);
    for (size_t i = 0; i < p->nspares; i++)
        if (same_addr(&p->spares[i].addr, addr)) {
            conn = p->spares[i].conn;
            p->spares[i] = p->spares[--p->nspares];
            break;
        }
    pthread_mutex_unlock(&p->lock);
    return conn;
}

/* Keeps a connection that is still open, when there is room. */
static void give_conn(fg_policies *p, const fg_url *addr, fg_conn *conn) {
    pthread_mutex_lock(&p->lock);
    if (conn->ctx != NULL && p->nspares < SPARE_CONNS) {
        p->spares[p->nspares++] = (spare){*addr, *conn};
        conn->ctx = NULL;
    }
    pthread_mutex_unlock(&p->lock);
    fg_conn_close(conn);
}

/* ------------------------------------------------------------- replies */

static fg_code unexpected(fg_error *err, const char *what) {
    return fg_set_error(err, FG_CODE_PROTOCOL, "unexpected reply to %s (module without policies?)",
                        what);
}

static bool is_integer(const redisReply *r) {
    return r->type == REDIS_REPLY_INTEGER;
}

/* "limit:<i>" (1-based), "penalty", "denylist" or "allowlist". */
static bool parse_decider(const redisReply *r, fg_policy_result *out) {
    static const struct {
        const char *word;
        fg_decider who;
    } words[] = {
        {"penalty", FG_BY_PENALTY}, {"denylist", FG_BY_DENYLIST}, {"allowlist", FG_BY_ALLOWLIST}};
    if (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_STATUS) return false;
    out->limit_index = 0;
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
        if (strcmp(r->str, words[i].word) == 0) {
            out->decided_by = words[i].who;
            return true;
        }
    char *end;
    if (strncmp(r->str, "limit:", 6) != 0) return false;
    errno = 0;
    long i = strtol(r->str + 6, &end, 10);
    if (errno != 0 || *end != '\0' || i < 1 || i > FG_MAX_POLICY_LIMITS) return false;
    out->decided_by = FG_BY_LIMIT;
    out->limit_index = (int)i - 1;
    return true;
}

/* FG.CHECK's 7 fields. */
static fg_code parse_check(const redisReply *r, fg_policy_result *out, fg_error *err) {
    if (r->type == REDIS_REPLY_ERROR) return fg_reply_error(r, err);
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 7) return unexpected(err, "FG.CHECK");
    redisReply *const *e = r->element;
    for (size_t i = 0; i < 5; i++)
        if (!is_integer(e[i])) return unexpected(err, "FG.CHECK");
    if (!is_integer(e[6]) || (e[0]->integer != 0 && e[0]->integer != 1) ||
        (e[6]->integer != 0 && e[6]->integer != 1) || e[3]->integer < -1 || e[4]->integer < 0 ||
        !parse_decider(e[5], out))
        return unexpected(err, "FG.CHECK");
    out->result = (fg_result){e[0]->integer == 1, e[1]->integer, e[2]->integer,
                              e[3]->integer,      e[4]->integer, FG_SOURCE_SERVER};
    out->shadow_denied = e[6]->integer == 1;
    return FG_CODE_OK;
}

/* -------------------------------------------------------------- commands */

/* An fg_argv with room for the numbers of FG.POLICY SET. */
typedef struct policy_argv {
    fg_argv a;
    char nums[SET_NUMS][NUM_LEN];
    int nnums;
} policy_argv;

static void add_word(policy_argv *c, const char *s) {
    fg_argv_str(&c->a, s);
}

/* A double with 17 digits: the module parses back the very double given. */
static void add_number(policy_argv *c, double v) {
    char *num = c->nums[c->nnums++];
    snprintf(num, NUM_LEN, "%.17g", v);
    fg_argv_str(&c->a, num);
}

static void add_integer(policy_argv *c, int64_t v) {
    char *num = c->nums[c->nnums++];
    snprintf(num, NUM_LEN, "%lld", (long long)v);
    fg_argv_str(&c->a, num);
}

/* The LIMIT rule of a checked limit. */
static void add_limit(policy_argv *c, const fg_limit *l) {
    static const char *const words[] = {
        [FG_FIXED_WINDOW] = "FIXED", [FG_SLIDING_WINDOW] = "SLIDING",
        [FG_TOKEN_BUCKET] = "TOKEN", [FG_LEAKY_BUCKET] = "LEAKY",
        [FG_GCRA] = "GCRA",
    };
    add_word(c, "LIMIT");
    add_word(c, words[l->algorithm]);
    add_integer(c, l->limit);
    if (l->algorithm == FG_GCRA) {
        add_number(c, l->rate);
        add_number(c, l->window_ms);
    } else {
        bool bucket = l->algorithm == FG_TOKEN_BUCKET || l->algorithm == FG_LEAKY_BUCKET;
        add_number(c, bucket ? l->rate : l->window_ms);
    }
}

static void add_list(policy_argv *c, const char *rule, const fg_list_spec *s) {
    if (s->kind == FG_LIST_EXACT) return; /* the default */
    add_word(c, rule);
    add_word(c, "BLOOM");
    add_number(c, s->error);
    add_integer(c, s->capacity);
}

static void build_set(policy_argv *c, const char *name, const fg_policy_def *def) {
    c->nnums = 0;
    fg_argv_init(&c->a, "FG.POLICY");
    add_word(c, "SET");
    add_word(c, name);
    for (size_t i = 0; i < def->nlimits; i++)
        add_limit(c, &def->limits[i]);
    if (def->ban_ms != 0) {
        add_word(c, "PENALTY");
        add_number(c, def->ban_ms);
        add_word(c, "AFTER");
        add_integer(c, def->ban_after);
        add_word(c, "WITHIN");
        add_number(c, def->ban_within_ms != 0 ? def->ban_within_ms : def->ban_ms);
    }
    if (def->shadow) add_word(c, "SHADOW");
    add_list(c, "ALLOWLIST", &def->allowlist);
    add_list(c, "DENYLIST", &def->denylist);
}

/* ------------------------------------------------- every master of a cluster */

typedef struct masters {
    fg_url addr[MAX_MASTERS];
    size_t n;
} masters;

/* A node of CLUSTER SLOTS' reply: [host, port, ...]. */
static bool node_addr(const redisReply *n, const fg_url *auth, fg_url *out) {
    if (n->type != REDIS_REPLY_ARRAY || n->elements < 2 ||
        n->element[0]->type != REDIS_REPLY_STRING || !is_integer(n->element[1]) ||
        n->element[0]->len == 0 || n->element[0]->len >= sizeof(out->host))
        return false;
    *out = *auth;
    out->kind = FG_URL_TCP;
    memcpy(out->host, n->element[0]->str, n->element[0]->len + 1);
    out->port = (int)n->element[1]->integer;
    return true;
}

/* The masters of CLUSTER SLOTS' reply, once each; or of the one whose
 * slots hold `slot` only (slot >= 0). */
static fg_code parse_masters(const redisReply *r, const fg_url *auth, long long slot, masters *out,
                             fg_error *err) {
    if (r->type == REDIS_REPLY_ERROR) return fg_reply_error(r, err);
    if (r->type != REDIS_REPLY_ARRAY) return unexpected(err, "CLUSTER SLOTS");
    out->n = 0;
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *range = r->element[i];
        fg_url a;
        if (range->type != REDIS_REPLY_ARRAY || range->elements < 3 ||
            !is_integer(range->element[0]) || !is_integer(range->element[1]) ||
            !node_addr(range->element[2], auth, &a))
            return unexpected(err, "CLUSTER SLOTS");
        if (slot >= 0 && (slot < range->element[0]->integer || slot > range->element[1]->integer))
            continue;
        bool seen = false;
        for (size_t j = 0; j < out->n && !seen; j++)
            seen = same_addr(&out->addr[j], &a);
        if (!seen && out->n < MAX_MASTERS) out->addr[out->n++] = a;
    }
    if (out->n > 0) return FG_CODE_OK;
    return fg_set_error(err, FG_CODE_IO, "the cluster's slot map names no master%s",
                        slot >= 0 ? " for the key" : "");
}

/* The slot map, asked of the node the client sends `key` to. */
static fg_code cluster_masters(fg_client *c, fg_policies *p, const char *key, masters *out,
                               fg_error *err) {
    fg_command cmd = {.argc = 2, .argv = {"CLUSTER", "SLOTS"}, .argvlen = {7, 5}};
    cmd.key = key;
    cmd.keylen = strlen(key);
    redisReply *r;
    fg_code rc;
    fg_client_exchange(c, &cmd, 1, &r, &rc, err);
    if (rc != FG_CODE_OK) return rc;
    long long slot = key[0] != '\0' ? (long long)fg_cluster_slot(key, cmd.keylen) : -1;
    rc = parse_masters(r, &p->addr, slot, out, err);
    freeReplyObject(r);
    return rc;
}

/* --------------------------------------------------------- admin commands */

/* Replies to n commands: status OK, or integers (values[i]: the largest
 * over the nodes). */
static fg_code judge(redisReply **replies, size_t n, bool integers, int64_t *values,
                     fg_error *err) {
    fg_code rc = FG_CODE_OK;
    for (size_t i = 0; i < n; i++) {
        const redisReply *r = replies[i];
        if (rc == FG_CODE_OK && r->type == REDIS_REPLY_ERROR)
            rc = fg_reply_error(r, err);
        else if (rc == FG_CODE_OK && integers && is_integer(r))
            values[i] = r->integer > values[i] ? r->integer : values[i];
        else if (rc == FG_CODE_OK && (integers || r->type != REDIS_REPLY_STATUS))
            rc = unexpected(err, "FG.POLICY");
        freeReplyObject(replies[i]);
    }
    return rc;
}

/* n commands to every master, pipelined on connections of their own:
 * written to all before any is read. */
static fg_code to_masters(fg_client *c, fg_policies *p, const fg_argv *cmds, size_t n,
                          bool integers, int64_t *values, redisReply **replies, fg_error *err) {
    masters *ms = malloc(sizeof(*ms));
    fg_conn *conns = calloc(MAX_MASTERS, sizeof(*conns));
    fg_code rc = ms != NULL && conns != NULL ? cluster_masters(c, p, "", ms, err)
                                             : fg_set_error(err, FG_CODE_NOMEM, "out of memory");
    size_t sent = rc == FG_CODE_OK ? ms->n : 0;
    fg_code node_rc[MAX_MASTERS];
    for (size_t j = 0; j < sent; j++) {
        conns[j] = take_conn(p, &ms->addr[j]);
        node_rc[j] = fg_conn_ensure(&conns[j], &ms->addr[j], &p->cfg, err);
        if (node_rc[j] == FG_CODE_OK) fg_count(&p->cfg.counters->round_trips, 1);
        for (size_t i = 0; i < n && node_rc[j] == FG_CODE_OK; i++)
            node_rc[j] = fg_conn_append_argv(&conns[j], &cmds[i], err);
        if (node_rc[j] == FG_CODE_OK) node_rc[j] = fg_conn_flush(&conns[j], err);
    }
    for (size_t j = 0; j < sent; j++) {
        if (node_rc[j] == FG_CODE_OK) node_rc[j] = fg_conn_receive(&conns[j], replies, n, err);
        if (node_rc[j] == FG_CODE_OK) node_rc[j] = judge(replies, n, integers, values, err);
        if (node_rc[j] == FG_CODE_IO) fg_count(&p->cfg.counters->failures, 1);
        if (rc == FG_CODE_OK) rc = node_rc[j];
        give_conn(p, &ms->addr[j], &conns[j]);
    }
    free(ms);
    free(conns);
    return rc;
}

/* n FG.POLICY commands that change policies: to the server, or to every
 * master. values[i] (zeroed here) is command i's integer reply. */
static fg_code admin(fg_client *c, const fg_argv *cmds, size_t n, bool integers, int64_t *values,
                     fg_error *err) {
    fg_policies *p = fg_client_policies(c);
    redisReply **replies = malloc(n * sizeof(*replies));
    if (replies == NULL) return fg_set_error(err, FG_CODE_NOMEM, "out of memory");
    memset(values, 0, n * sizeof(*values));
    fg_code rc;
    if (p->cluster) {
        rc = to_masters(c, p, cmds, n, integers, values, replies, err);
    } else {
        fg_conn *conn = fg_client_take_conn(c);
        rc = fg_conn_exchange(conn, &p->addr, &p->cfg, cmds, n, replies, err);
        fg_client_give_conn(c);
        if (rc == FG_CODE_OK) rc = judge(replies, n, integers, values, err);
    }
    free(replies);
    return rc;
}

/* -------------------------------------------------------------- the calls */

static fg_code check_client(const fg_client *c, const char *name, fg_error *err) {
    if (c == NULL || name == NULL)
        return fg_set_error(err, FG_CODE_INVALID, "a client and a policy name are required");
    return fg_policy_name_check(name, err);
}

fg_code fg_policy_set(fg_client *c, const char *name, const fg_policy_def *def, fg_error *err) {
    fg_policy_rules rules;
    fg_code rc = check_client(c, name, err);
    if (rc == FG_CODE_OK && def == NULL)
        rc = fg_set_error(err, FG_CODE_INVALID, "a definition is required");
    if (rc == FG_CODE_OK) rc = fg_policy_def_convert(def, &rules, err);
    if (rc != FG_CODE_OK) return rc;
    fg_policies *p = fg_client_policies(c);
    if (p->mem != NULL) return fg_mem_policy_set(p->mem, name, def, &rules, err);
    policy_argv cmd;
    int64_t ignored;
    build_set(&cmd, name, def);
    return admin(c, &cmd.a, 1, false, &ignored, err);
}

fg_code fg_policy_delete(fg_client *c, const char *name, bool *deleted, fg_error *err) {
    fg_code rc = check_client(c, name, err);
    if (rc != FG_CODE_OK) return rc;
    fg_policies *p = fg_client_policies(c);
    bool had;
    if (p->mem != NULL) {
        had = fg_mem_policy_delete(p->mem, name);
    } else {
        fg_argv cmd;
        int64_t n;
        fg_argv_init(&cmd, "FG.POLICY");
        fg_argv_str(&cmd, "DEL");
        fg_argv_str(&cmd, name);
        if ((rc = admin(c, &cmd, 1, true, &n, err)) != FG_CODE_OK) return rc;
        had = n > 0;
    }
    if (deleted != NULL) *deleted = had;
    return FG_CODE_OK;
}

/* FG.POLICY ALLOW|DENY of LIST_ITEMS items per command, in one pipeline:
 * one round trip (per master), not atomic beyond LIST_ITEMS items. */
static fg_code server_list_add(fg_client *c, const char *name, bool deny, const void *const *items,
                               const size_t *lens, size_t n, int64_t *added, fg_error *err) {
    size_t ncmds = (n + LIST_ITEMS - 1) / LIST_ITEMS;
    fg_argv *cmds = malloc(ncmds * sizeof(*cmds));
    int64_t *counts = malloc(ncmds * sizeof(*counts));
    fg_code rc = cmds != NULL && counts != NULL ? FG_CODE_OK
                                                : fg_set_error(err, FG_CODE_NOMEM, "out of memory");
    for (size_t k = 0; k < ncmds && rc == FG_CODE_OK; k++) {
        fg_argv_init(&cmds[k], "FG.POLICY");
        fg_argv_str(&cmds[k], deny ? "DENY" : "ALLOW");
        fg_argv_str(&cmds[k], name);
        for (size_t i = k * LIST_ITEMS; i < n && i < (k + 1) * LIST_ITEMS; i++) {
            int at = cmds[k].argc++;
            cmds[k].argv[at] = lens[i] > 0 ? items[i] : "";
            cmds[k].argvlen[at] = lens[i];
        }
    }
    if (rc == FG_CODE_OK) rc = admin(c, cmds, ncmds, true, counts, err);
    *added = 0;
    for (size_t k = 0; k < ncmds && rc == FG_CODE_OK; k++)
        *added += counts[k];
    free(cmds);
    free(counts);
    return rc;
}

fg_code fg_policy_list_add(fg_client *c, const char *name, bool deny, const void *const *items,
                           const size_t *lens, size_t n, int64_t *added, fg_error *err) {
    fg_code rc = check_client(c, name, err);
    if (rc == FG_CODE_OK)
        rc = fg_require_items(items, lens, n, deny ? "FG.POLICY|DENY" : "FG.POLICY|ALLOW", err);
    if (rc != FG_CODE_OK) return rc;
    fg_policies *p = fg_client_policies(c);
    int64_t count = 0;
    rc = p->mem != NULL ? fg_mem_policy_list_add(p->mem, name, deny, items, lens, n, &count, err)
                        : server_list_add(c, name, deny, items, lens, n, &count, err);
    if (rc == FG_CODE_OK && added != NULL) *added = count;
    return rc;
}

/* ------------------------------------------------------------- checking */

/* One FG.CHECK. */
typedef struct check {
    const char *name, *key, *identity;
    int64_t cost;
    bool waits;
    int64_t timeout_ms; /* WAIT's, when waits */
} check;

/* FG.CHECK name key [COST n] [ID id] [WAIT ms | AT us], routed by key. */
static void build_check(const fg_policies *p, fg_command *cmd, const check *q) {
    fg_command_init(cmd, q->key);
    fg_command_str(cmd, "FG.CHECK");
    fg_command_str(cmd, q->name);
    fg_command_str(cmd, q->key);
    if (q->cost != 1) {
        fg_command_str(cmd, "COST");
        fg_command_num(cmd, 0, q->cost);
    }
    if (q->identity != NULL) {
        fg_command_str(cmd, "ID");
        fg_command_str(cmd, q->identity);
    }
    if (q->waits) {
        fg_command_str(cmd, "WAIT");
        fg_command_num(cmd, 1, q->timeout_ms);
    } else if (p->send_clock) {
        fg_command_str(cmd, "AT");
        fg_command_num(cmd, 2, now_us(p));
    }
}

/* FG.CHECK ... WAIT timeout_ms to addr, on a connection of its own. */
static fg_code wait_on(fg_policies *p, const fg_url *addr, const fg_command *cmd,
                       int64_t timeout_ms, redisReply **reply, fg_error *err) {
    fg_conn conn = take_conn(p, addr);
    fg_code rc = fg_conn_ensure(&conn, addr, &p->cfg, err);
    if (rc == FG_CODE_OK)
        rc = fg_conn_set_timeout(&conn, p->cfg.command_timeout_ms + timeout_ms, err);
    if (rc == FG_CODE_OK) {
        fg_count(&p->cfg.counters->round_trips, 1);
        rc = fg_conn_append(&conn, cmd, err);
    }
    if (rc == FG_CODE_OK) rc = fg_conn_flush(&conn, err);
    if (rc == FG_CODE_OK) rc = fg_conn_receive(&conn, reply, 1, err);
    if (rc == FG_CODE_IO) fg_count(&p->cfg.counters->failures, 1);
    /* The next user sets its own timeout; a spare must not keep this one. */
    if (rc == FG_CODE_OK &&
        fg_conn_set_timeout(&conn, p->cfg.command_timeout_ms, NULL) == FG_CODE_OK)
        give_conn(p, addr, &conn);
    else
        fg_conn_close(&conn);
    return rc;
}

/* The node a "MOVED slot host:port" names. */
static bool moved_to(const redisReply *r, const fg_url *auth, fg_url *out) {
    const char *hostport;
    if (r->type != REDIS_REPLY_ERROR || strncmp(r->str, "MOVED ", 6) != 0 ||
        (hostport = strchr(r->str + 6, ' ')) == NULL)
        return false;
    const char *colon = strrchr(++hostport, ':');
    size_t hlen = colon != NULL ? (size_t)(colon - hostport) : 0;
    if (hlen == 0 || hlen >= sizeof(out->host)) return false;
    *out = *auth;
    memcpy(out->host, hostport, hlen);
    out->host[hlen] = '\0';
    out->port = atoi(colon + 1);
    return true;
}

/* A waiting check on a server: the server itself, or the key's master. */
static fg_code server_wait(fg_client *c, fg_policies *p, const fg_command *cmd, int64_t timeout_ms,
                           redisReply **reply, fg_error *err) {
    if (!p->cluster) return wait_on(p, &p->addr, cmd, timeout_ms, reply, err);
    masters *ms = malloc(sizeof(*ms));
    if (ms == NULL) return fg_set_error(err, FG_CODE_NOMEM, "out of memory");
    fg_code rc = cluster_masters(c, p, cmd->key, ms, err);
    if (rc == FG_CODE_OK) rc = wait_on(p, &ms->addr[0], cmd, timeout_ms, reply, err);
    if (rc == FG_CODE_OK && moved_to(*reply, &p->addr, &ms->addr[0])) {
        freeReplyObject(*reply);
        rc = wait_on(p, &ms->addr[0], cmd, timeout_ms, reply, err);
    }
    free(ms);
    return rc;
}

static fg_code check_once(fg_client *c, fg_policies *p, const check *q, fg_policy_result *out,
                          fg_error *err) {
    if (p->mem != NULL)
        return fg_mem_policy_check(p->mem, q->name, q->key, q->identity, q->cost,
                                   q->waits ? q->timeout_ms : 0, out, err);
    fg_command cmd;
    redisReply *reply;
    fg_code rc;
    build_check(p, &cmd, q);
    if (q->waits)
        rc = server_wait(c, p, &cmd, q->timeout_ms, &reply, err);
    else
        fg_client_exchange(c, &cmd, 1, &reply, &rc, err);
    if (rc != FG_CODE_OK) return rc;
    rc = parse_check(reply, out, err);
    freeReplyObject(reply);
    return rc;
}

/* Asks the loader for a missing policy and sets what it gives: FG_CODE_OK
 * when set, else the set's error, or *none when the loader has none. */
static fg_code load(fg_client *c, fg_policies *p, const char *name, bool *none, fg_error *err) {
    pthread_mutex_lock(&p->lock);
    fg_policy_loader loader = p->loader;
    void *arg = p->loader_arg;
    pthread_mutex_unlock(&p->lock);
    fg_policy_def def;
    fg_policy_def_init(&def);
    *none = loader == NULL || !loader(name, &def, arg);
    return *none ? FG_CODE_INVALID : fg_policy_set(c, name, &def, err);
}

static fg_code check_policy(fg_client *c, const check *q, fg_policy_result *out, fg_error *err) {
    fg_code rc = check_client(c, q->name, err);
    if (rc == FG_CODE_OK && (q->key == NULL || out == NULL))
        rc = fg_set_error(err, FG_CODE_INVALID, "a key and a result are required");
    if (rc == FG_CODE_OK) rc = fg_policy_request_check(q->cost, q->waits, q->timeout_ms, err);
    if (rc != FG_CODE_OK) return rc;
    fg_policies *p = fg_client_policies(c);
    fg_error first;
    rc = check_once(c, p, q, out, &first);
    if (rc == FG_CODE_INVALID && strncmp(first.message, MISSING, strlen(MISSING)) == 0) {
        bool none;
        fg_code loaded = load(c, p, q->name, &none, err);
        if (!none) return loaded == FG_CODE_OK ? check_once(c, p, q, out, err) : loaded;
    }
    if (rc != FG_CODE_OK && err != NULL) *err = first;
    return rc;
}

fg_code fg_policy_check(fg_client *c, const char *name, const char *key, const char *identity,
                        int64_t cost, fg_policy_result *out, fg_error *err) {
    check q = {name, key, identity, cost, false, 0};
    return check_policy(c, &q, out, err);
}

fg_code fg_policy_acquire(fg_client *c, const char *name, const char *key, const char *identity,
                          int64_t cost, int64_t timeout_ms, fg_policy_result *out, fg_error *err) {
    check q = {name, key, identity, cost, true, timeout_ms};
    return check_policy(c, &q, out, err);
}

/* ---------------------------------------------------------- reading back */

void fg_policy_names_free(char **names, size_t count) {
    for (size_t i = 0; names != NULL && i < count; i++)
        free(names[i]);
    free(names);
}

/* One command of up to 3 words to the server (a cluster: slot 0's node). */
static fg_code ask(fg_client *c, const char *a, const char *b, const char *d, redisReply **reply,
                   fg_error *err) {
    fg_command cmd;
    fg_command_init(&cmd, "");
    fg_command_str(&cmd, a);
    fg_command_str(&cmd, b);
    if (d != NULL) fg_command_str(&cmd, d);
    fg_code rc;
    fg_client_exchange(c, &cmd, 1, reply, &rc, err);
    if (rc == FG_CODE_OK && (*reply)->type == REDIS_REPLY_ERROR) {
        rc = fg_reply_error(*reply, err);
        freeReplyObject(*reply);
    }
    return rc;
}

fg_code fg_policy_names(fg_client *c, char ***names, size_t *count, fg_error *err) {
    if (c == NULL) return fg_set_error(err, FG_CODE_INVALID, "a client is required");
    fg_policies *p = fg_client_policies(c);
    if (p->mem != NULL) return fg_mem_policy_names(p->mem, names, count, err);
    redisReply *r;
    fg_code rc = ask(c, "FG.POLICY", "LIST", NULL, &r, err);
    if (rc != FG_CODE_OK) return rc;
    char **out = calloc(r->elements > 0 ? r->elements : 1, sizeof(*out));
    size_t n = 0;
    if (r->type != REDIS_REPLY_ARRAY)
        rc = unexpected(err, "FG.POLICY LIST");
    else if (out == NULL)
        rc = fg_set_error(err, FG_CODE_NOMEM, "out of memory");
    for (; rc == FG_CODE_OK && n < r->elements; n++) {
        const redisReply *e = r->element[n];
        if (e->type != REDIS_REPLY_STRING)
            rc = unexpected(err, "FG.POLICY LIST");
        else if ((out[n] = strdup(e->str)) == NULL)
            rc = fg_set_error(err, FG_CODE_NOMEM, "out of memory");
    }
    freeReplyObject(r);
    if (rc != FG_CODE_OK) {
        fg_policy_names_free(out, n);
        return rc;
    }
    *names = out;
    *count = n;
    return FG_CODE_OK;
}

/* A number given as an integer or as text. */
static bool reply_number(const redisReply *r, double *out) {
    char *end;
    if (is_integer(r)) {
        *out = (double)r->integer;
        return true;
    }
    if (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_STATUS) return false;
    errno = 0;
    *out = strtod(r->str, &end);
    return errno == 0 && end != r->str && *end == '\0';
}

/* A LIMIT rule's words, ["TOKEN", "10", "10"], as a limit. */
static bool parse_limit_words(const redisReply *r, fg_limit *out) {
    static const struct {
        const char *word;
        fg_algorithm algorithm;
        size_t nargs;
    } rules[] = {{"TOKEN", FG_TOKEN_BUCKET, 2},
                 {"LEAKY", FG_LEAKY_BUCKET, 2},
                 {"GCRA", FG_GCRA, 3},
                 {"FIXED", FG_FIXED_WINDOW, 2},
                 {"SLIDING", FG_SLIDING_WINDOW, 2}};
    double x[ALGORITHM_MAX - 1] = {0};
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 || r->elements > ALGORITHM_MAX ||
        r->element[0]->type != REDIS_REPLY_STRING)
        return false;
    for (size_t i = 1; i < r->elements; i++)
        if (!reply_number(r->element[i], &x[i - 1])) return false;
    for (size_t k = 0; k < sizeof(rules) / sizeof(rules[0]); k++) {
        if (strcasecmp(r->element[0]->str, rules[k].word) != 0) continue;
        if (r->elements != rules[k].nargs + 1) return false;
        *out = (fg_limit){rules[k].algorithm, (int64_t)x[0], 0, 0};
        if (rules[k].algorithm == FG_GCRA) {
            out->rate = x[1];
            out->window_ms = x[2];
        } else if (rules[k].algorithm == FG_TOKEN_BUCKET || rules[k].algorithm == FG_LEAKY_BUCKET) {
            out->rate = x[1];
        } else {
            out->window_ms = x[1];
        }
        return true;
    }
    return false;
}

static bool parse_limits(const redisReply *v, fg_policy_def *def) {
    if (v->type != REDIS_REPLY_ARRAY || v->elements > FG_MAX_POLICY_LIMITS) return false;
    def->nlimits = v->elements;
    for (size_t i = 0; i < v->elements; i++)
        if (!parse_limit_words(v->element[i], &def->limits[i])) return false;
    return true;
}

static bool parse_penalty(const redisReply *v, fg_policy_def *def) {
    double after;
    if (v->type != REDIS_REPLY_ARRAY || (v->elements != 0 && v->elements != 3)) return false;
    if (v->elements == 0) return true;
    if (!reply_number(v->element[0], &def->ban_ms) || !reply_number(v->element[1], &after) ||
        !reply_number(v->element[2], &def->ban_within_ms))
        return false;
    def->ban_after = (int64_t)after;
    return true;
}

/* [kind, entries] */
static bool parse_list(const redisReply *v, fg_list_spec *spec, int64_t *entries) {
    if (v->type != REDIS_REPLY_ARRAY || v->elements != 2 ||
        v->element[0]->type != REDIS_REPLY_STRING || !is_integer(v->element[1]))
        return false;
    bool bloom = strcasecmp(v->element[0]->str, "bloom") == 0;
    if (!bloom && strcasecmp(v->element[0]->str, "exact") != 0) return false;
    *spec = (fg_list_spec){bloom ? FG_LIST_BLOOM : FG_LIST_EXACT, 0, 0};
    *entries = v->element[1]->integer;
    return true;
}

/* One field of FG.POLICY GET; unknown fields are skipped (a newer module). */
static bool parse_field(const char *name, const redisReply *v, fg_policy_info *out) {
    struct {
        const char *name;
        int64_t *value;
    } counters[] = {{"allowed", &out->allowed}, {"denied", &out->denied},
                    {"banned", &out->banned},   {"shadow_denied", &out->shadow_denied},
                    {"waited", &out->waited},   {"shadow", NULL}};
    if (strcmp(name, "limits") == 0) return parse_limits(v, &out->def);
    if (strcmp(name, "penalty") == 0) return parse_penalty(v, &out->def);
    if (strcmp(name, "allowlist") == 0)
        return parse_list(v, &out->def.allowlist, &out->allow_entries);
    if (strcmp(name, "denylist") == 0) return parse_list(v, &out->def.denylist, &out->deny_entries);
    for (size_t i = 0; i < sizeof(counters) / sizeof(counters[0]); i++) {
        if (strcmp(name, counters[i].name) != 0) continue;
        if (!is_integer(v)) return false;
        if (counters[i].value != NULL)
            *counters[i].value = v->integer;
        else
            out->def.shadow = v->integer != 0;
    }
    return true;
}

fg_code fg_policy_get(fg_client *c, const char *name, fg_policy_info *out, fg_error *err) {
    fg_code rc = check_client(c, name, err);
    if (rc == FG_CODE_OK) rc = fg_require_result(out, err);
    if (rc != FG_CODE_OK) return rc;
    fg_policies *p = fg_client_policies(c);
    if (p->mem != NULL) return fg_mem_policy_get(p->mem, name, out, err);
    redisReply *r;
    if ((rc = ask(c, "FG.POLICY", "GET", name, &r, err)) != FG_CODE_OK) return rc;
    memset(out, 0, sizeof(*out));
    fg_policy_def_init(&out->def);
    if (r->type != REDIS_REPLY_ARRAY || r->elements % 2 != 0) rc = unexpected(err, "FG.POLICY GET");
    for (size_t i = 0; rc == FG_CODE_OK && i < r->elements; i += 2)
        if (r->element[i]->type != REDIS_REPLY_STRING ||
            !parse_field(r->element[i]->str, r->element[i + 1], out))
            rc = unexpected(err, "FG.POLICY GET");
    freeReplyObject(r);
    return rc;
}
