/*
 * remote_policy.c - the named policies of a client of a server or cluster:
 * the module's FG.POLICY and FG.CHECK. policy.c has checked the name, the
 * definition, the cost and the timeout, so a server only sees commands it
 * accepts.
 *
 *   redis:, unix:   FG.CHECK, GET and LIST on the client's shared
 *                   connection (remote.c's exchange, which counts the
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
 * fg_policy_acquire sends FG.CHECK ... WAIT on a connection of its own (at
 * most SPARE_CONNS idle ones are kept, for any node), with a read timeout
 * of the wait plus command_timeout_ms, so that the server answers first;
 * the other calls of the client go on meanwhile. On a cluster it first
 * asks the key's node for the slot map, and follows one MOVED. A waiting
 * request is decided at the server's clock: opts.send_clock sends AT with
 * the checks that do not wait only (the module refuses both).
 *
 * A server without the module (scripts.h) keeps policies in keys of their
 * own (src/scripts/policy.lua): the same FG.POLICY commands go, routed by
 * the policy's key fg:policy:{name}, to the one node that holds it, and
 * the registry fg:policies hears SET and DEL beside them (SADD, SREM), for
 * LIST. FG.CHECK on one server reads the policy in the same script; in a
 * cluster the policy's slot is not the key's, so FG.POLICY LOOKUP asks the
 * policy's node for its rules and the lists' verdict first, a listed
 * identity is answered here (lists never read a state), and the check
 * carries the rules (RULES) to the key's node: two round trips. No script
 * can block, so WAIT is this side's: the check is tried again after its
 * retry_after while the deadline allows (no FIFO order among waiters, and
 * every denied try counts towards a penalty).
 *
 * Errors map as for limits (fg_reply_error). The failure policy
 * (on_failure) does not apply: a server that cannot be reached is
 * FG_CODE_IO.
 */
#include "remote_policy.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "cluster.h"
#include "command.h"
#include "conn.h"
#include "error.h"
#include "monotonic.h"
#include "remote.h"
#include "scripts.h"

#define SPARE_CONNS   8
#define LIST_ITEMS    (FG_ARGV_MAX - 3) /* FG.POLICY ALLOW name item... */
#define MAX_MASTERS   FG_GATHER_MAX
#define NUM_LEN       32
#define SET_NUMS      (FG_MAX_POLICY_LIMITS * 3 + 3 + 2 * 2) /* limits, penalty, lists */
#define ALGORITHM_MAX 4 /* words of a LIMIT rule in FG.POLICY GET */

/* An idle connection and where it goes. */
typedef struct spare {
    fg_url addr;
    fg_conn conn;
} spare;

typedef struct fg_policies {
    fg_remote *remote;      /* the client's shared connection */
    const fg_options *opts; /* the client's: send_clock and the clock */
    fg_url addr;            /* one server: the server; a cluster: the nodes' auth */
    bool cluster;
    fg_conn_config cfg;
    fg_loader loader;
    pthread_mutex_t lock; /* guards the spares */
    spare spares[SPARE_CONNS];
    size_t nspares;
} fg_policies;

/* ------------------------------------------------------------- the state */

/* The first seed, whose user, password and options every node takes. */
static bool first_seed(const fg_url *seed, void *arg) {
    fg_url *out = arg;
    if (out->kind == FG_URL_MEM) *out = *seed;
    return true;
}

/* The auth of a cluster's nodes: its URL's user, password and options, as
 * cluster.c reads them. */
static fg_code cluster_auth(const char *url, fg_url *out, fg_error *err) {
    out->kind = FG_URL_MEM;
    return fg_cluster_seeds(url, first_seed, out, err);
}

static void *policies_open(const fg_backend_args *a) {
    fg_policies *p = calloc(1, sizeof(*p));
    if (p == NULL) return NULL;
    p->remote = a->shared;
    p->opts = a->opts;
    p->cfg = *fg_remote_config(p->remote);
    p->cluster = fg_cluster_url(a->url);
    if (!p->cluster)
        p->addr = *fg_remote_addr(p->remote);
    else if (cluster_auth(a->url, &p->addr, NULL) != FG_CODE_OK) {
        free(p);
        return NULL;
    }
    pthread_mutex_init(&p->lock, NULL);
    pthread_mutex_init(&p->loader.lock, NULL);
    return p;
}

static void policies_close(void *s) {
    fg_policies *p = s;
    for (size_t i = 0; i < p->nspares; i++)
        fg_conn_close(&p->spares[i].conn);
    pthread_mutex_destroy(&p->loader.lock);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

static fg_loader *loader_of(void *s) {
    fg_policies *p = s;
    return &p->loader;
}

/* A server's FG.RESET forgets a policy state itself. */
static bool forget(void *s, const char *key) {
    (void)s;
    (void)key;
    return false;
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
fg_code fg_parse_policy_check(const redisReply *r, fg_policy_result *out, fg_error *err) {
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
static fg_code cluster_masters(fg_policies *p, const char *key, masters *out, fg_error *err) {
    fg_command cmd = {.argc = 2, .argv = {"CLUSTER", "SLOTS"}, .argvlen = {7, 5}};
    cmd.key = key;
    cmd.keylen = strlen(key);
    redisReply *r;
    fg_code rc;
    fg_remote_exchange(p->remote, &cmd, 1, &r, &rc, err);
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

/* n commands to every master ("" for key), or to the master of key,
 * pipelined on connections of their own: written to all before any is
 * read. */
static fg_code to_masters(fg_policies *p, const char *key, const fg_argv *cmds, size_t n,
                          bool integers, int64_t *values, redisReply **replies, fg_error *err) {
    masters *ms = malloc(sizeof(*ms));
    fg_conn *conns = calloc(MAX_MASTERS, sizeof(*conns));
    fg_code rc = ms != NULL && conns != NULL ? cluster_masters(p, key, ms, err)
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
        if (node_rc[j] == FG_CODE_OK) /* a node that speaks scripts and lost them */
            node_rc[j] = fg_conn_resend_noscript_argv(&conns[j], cmds, n, replies,
                                                      p->cfg.counters, err);
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
 * master ("" for key) or the master of key. values[i] (zeroed here) is
 * command i's integer reply. */
static fg_code admin(fg_policies *p, const char *key, const fg_argv *cmds, size_t n, bool integers,
                     int64_t *values, fg_error *err) {
    redisReply **replies = malloc(n * sizeof(*replies));
    if (replies == NULL) return fg_set_error(err, FG_CODE_NOMEM, "out of memory");
    memset(values, 0, n * sizeof(*values));
    fg_code rc;
    if (p->cluster) {
        rc = to_masters(p, key, cmds, n, integers, values, replies, err);
    } else {
        fg_conn *conn = fg_remote_take_conn(p->remote);
        rc = fg_conn_exchange(conn, &p->addr, &p->cfg, cmds, n, replies, err);
        fg_remote_give_conn(p->remote);
        if (rc == FG_CODE_OK) rc = judge(replies, n, integers, values, err);
    }
    free(replies);
    return rc;
}

/* ---------------------------------------------------------- changing */

/* Whether the server (or cluster) keeps policies in keys: it speaks
 * scripts. FG_CODE_IO when it cannot be reached. */
static fg_code speaks_scripts(fg_policies *p, bool *scripts, fg_error *err) {
    fg_error why = {0};
    fg_dialect d = fg_remote_dialect(p->remote, &why);
    if (d == FG_DIALECT_AUTO)
        return fg_set_error(err, why.code != FG_CODE_OK ? why.code : FG_CODE_IO, "%s", why.message);
    *scripts = d == FG_DIALECT_SCRIPT;
    return FG_CODE_OK;
}

#define REGISTRY "fg:policies"

/* A change of a policy in keys: the command, routed by the policy's key,
 * then the registry's SADD or SREM (another slot, so another command).
 * *value: the command's integer reply. */
static fg_code change_in_keys(fg_policies *p, const char *name, const fg_argv *cmd,
                              const char *registry_op, bool integer, int64_t *value, fg_error *err) {
    char keys[FG_POLICY_KEYS][FG_POLICY_KEY_MAX];
    fg_policy_keys(name, strlen(name), keys);
    fg_argv reg;
    fg_argv_init(&reg, registry_op);
    fg_argv_str(&reg, REGISTRY);
    fg_argv_str(&reg, name);
    fg_code rc = admin(p, keys[0], cmd, 1, integer, value, err);
    int64_t ignored;
    if (rc == FG_CODE_OK) rc = admin(p, REGISTRY, &reg, 1, true, &ignored, err);
    return rc;
}

static fg_code set_policy(void *s, const char *name, const fg_policy_def *def,
                          const fg_policy_rules *rules, fg_error *err) {
    fg_policies *p = s;
    policy_argv cmd;
    int64_t ignored;
    bool scripts;
    (void)rules;
    build_set(&cmd, name, def);
    fg_code rc = speaks_scripts(p, &scripts, err);
    if (rc != FG_CODE_OK) return rc;
    if (scripts) return change_in_keys(p, name, &cmd.a, "SADD", false, &ignored, err);
    return admin(p, "", &cmd.a, 1, false, &ignored, err);
}

static fg_code delete_policy(void *s, const char *name, bool *had, fg_error *err) {
    fg_policies *p = s;
    fg_argv cmd;
    int64_t n;
    bool scripts;
    fg_argv_init(&cmd, "FG.POLICY");
    fg_argv_str(&cmd, "DEL");
    fg_argv_str(&cmd, name);
    fg_code rc = speaks_scripts(p, &scripts, err);
    if (rc == FG_CODE_OK)
        rc = scripts ? change_in_keys(p, name, &cmd, "SREM", true, &n, err)
                     : admin(p, "", &cmd, 1, true, &n, err);
    if (rc == FG_CODE_OK) *had = n > 0;
    return rc;
}

/* FG.POLICY ALLOW|DENY of LIST_ITEMS items per command, in one pipeline:
 * one round trip (per master), not atomic beyond LIST_ITEMS items. */
static fg_code list_add(void *s, const char *name, bool deny, const void *const *items,
                        const size_t *lens, size_t n, int64_t *added, fg_error *err) {
    size_t ncmds = (n + LIST_ITEMS - 1) / LIST_ITEMS;
    /* calloc: GCC cannot tell that every command gets built. */
    fg_argv *cmds = calloc(ncmds, sizeof(*cmds));
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
    fg_policies *p = s;
    bool scripts = false;
    char keys[FG_POLICY_KEYS][FG_POLICY_KEY_MAX];
    fg_policy_keys(name, strlen(name), keys);
    if (rc == FG_CODE_OK) rc = speaks_scripts(p, &scripts, err);
    if (rc == FG_CODE_OK) rc = admin(p, scripts ? keys[0] : "", cmds, ncmds, true, counts, err);
    *added = 0;
    for (size_t k = 0; k < ncmds && rc == FG_CODE_OK; k++)
        *added += counts[k];
    free(cmds);
    free(counts);
    return rc;
}

/* ------------------------------------------------------------- checking */

void fg_policy_check_command(fg_command *cmd, const fg_policy_request *q,
                             const fg_options *opts) {
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
    } else if (opts->send_clock) {
        fg_command_str(cmd, "AT");
        fg_command_num(cmd, 2, fg_clock_us(opts->clock_us, opts->clock_arg));
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
    if (rc == FG_CODE_OK) rc = fg_conn_resend_noscript(&conn, cmd, 1, reply, p->cfg.counters, err);
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
static fg_code server_wait(fg_policies *p, const fg_command *cmd, int64_t timeout_ms,
                           redisReply **reply, fg_error *err) {
    if (!p->cluster) return wait_on(p, &p->addr, cmd, timeout_ms, reply, err);
    masters *ms = malloc(sizeof(*ms));
    if (ms == NULL) return fg_set_error(err, FG_CODE_NOMEM, "out of memory");
    fg_code rc = cluster_masters(p, cmd->key, ms, err);
    if (rc == FG_CODE_OK) rc = wait_on(p, &ms->addr[0], cmd, timeout_ms, reply, err);
    if (rc == FG_CODE_OK && moved_to(*reply, &p->addr, &ms->addr[0])) {
        freeReplyObject(*reply);
        rc = wait_on(p, &ms->addr[0], cmd, timeout_ms, reply, err);
    }
    free(ms);
    return rc;
}

/* One FG.CHECK (or LOOKUP) through the client's shared way, its reply. */
static fg_code exchange_one(fg_policies *p, const fg_command *cmd, redisReply **reply,
                            fg_error *err) {
    fg_code rc;
    fg_remote_exchange(p->remote, cmd, 1, reply, &rc, err);
    return rc;
}

void fg_policy_list_answer(bool allowed, fg_policy_result *out) {
    memset(out, 0, sizeof(*out));
    out->result = (fg_result){allowed, 0, 0, -1, 0, FG_SOURCE_SERVER};
    out->decided_by = allowed ? FG_BY_ALLOWLIST : FG_BY_DENYLIST;
}

/* A cluster's check of a policy in keys: FG.POLICY LOOKUP on the policy's
 * node, then, unless a list decided, FG.CHECK ... RULES on the key's. */
static fg_code check_in_keys(fg_policies *p, const fg_policy_request *q, fg_policy_result *out,
                             fg_error *err) {
    char keys[FG_POLICY_KEYS][FG_POLICY_KEY_MAX];
    fg_policy_keys(q->name, strlen(q->name), keys);
    fg_command lookup;
    fg_command_init(&lookup, keys[0]);
    fg_command_str(&lookup, "FG.POLICY");
    fg_command_str(&lookup, "LOOKUP");
    fg_command_str(&lookup, q->name);
    fg_command_str(&lookup, q->identity != NULL ? q->identity : q->key);
    redisReply *r;
    fg_code rc = exchange_one(p, &lookup, &r, err);
    if (rc != FG_CODE_OK) return rc;
    if (r->type == REDIS_REPLY_ERROR) {
        rc = fg_reply_error(r, err);
    } else if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
               r->element[0]->type != REDIS_REPLY_STRING ||
               r->element[1]->type != REDIS_REPLY_STRING) {
        rc = unexpected(err, "FG.POLICY LOOKUP");
    } else if (r->element[1]->len > 0) {
        fg_policy_list_answer(strcmp(r->element[1]->str, "allow") == 0, out);
    } else {
        fg_command cmd;
        redisReply *reply;
        fg_policy_check_command(&cmd, q, p->opts);
        fg_command_str(&cmd, "RULES");
        fg_command_arg(&cmd, r->element[0]->str, r->element[0]->len);
        rc = exchange_one(p, &cmd, &reply, err);
        if (rc == FG_CODE_OK) {
            rc = fg_parse_policy_check(reply, out, err);
            freeReplyObject(reply);
        }
    }
    freeReplyObject(r);
    return rc;
}

/* A check without waiting: one FG.CHECK (a script reads the policy where
 * it is on one server), or a cluster's two steps for a policy in keys. */
static fg_code check_now(fg_policies *p, const fg_policy_request *q, bool scripts,
                         fg_policy_result *out, fg_error *err) {
    if (scripts && p->cluster) return check_in_keys(p, q, out, err);
    fg_command cmd;
    redisReply *reply;
    fg_policy_check_command(&cmd, q, p->opts);
    fg_code rc = exchange_one(p, &cmd, &reply, err);
    if (rc != FG_CODE_OK) return rc;
    rc = fg_parse_policy_check(reply, out, err);
    freeReplyObject(reply);
    return rc;
}

static void sleep_ms(int64_t ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* WAIT where no script can block: tried again after each denial's
 * retry_after while the deadline allows. */
static fg_code wait_in_client(fg_policies *p, const fg_policy_request *q, fg_policy_result *out,
                              fg_error *err) {
    fg_policy_request now = *q;
    now.waits = false;
    int64_t deadline = (fg_monotonic_us() / 1000) + q->timeout_ms;
    for (;;) {
        fg_code rc = check_now(p, &now, true, out, err);
        if (rc != FG_CODE_OK || out->result.allowed) return rc;
        int64_t wait = out->result.retry_after_ms, left = deadline - (fg_monotonic_us() / 1000);
        if (wait < 0 || wait > left) return FG_CODE_OK;
        sleep_ms(wait > 0 ? wait : 1);
    }
}

static fg_code check(void *s, const fg_policy_request *q, fg_policy_result *out, fg_error *err) {
    fg_policies *p = s;
    bool scripts = false;
    fg_code rc = p->cluster || q->waits ? speaks_scripts(p, &scripts, err) : FG_CODE_OK;
    if (rc != FG_CODE_OK) return rc;
    if (!q->waits) return check_now(p, q, scripts, out, err);
    if (scripts) return wait_in_client(p, q, out, err);
    fg_command cmd;
    redisReply *reply;
    fg_policy_check_command(&cmd, q, p->opts);
    rc = server_wait(p, &cmd, q->timeout_ms, &reply, err);
    if (rc != FG_CODE_OK) return rc;
    rc = fg_parse_policy_check(reply, out, err);
    freeReplyObject(reply);
    return rc;
}

/* ---------------------------------------------------------- reading back */

/* One command of up to 3 words to the server (a cluster: the node of key,
 * "" for slot 0's). */
static fg_code ask(fg_policies *p, const char *key, const char *a, const char *b, const char *d,
                   redisReply **reply, fg_error *err) {
    fg_command cmd;
    fg_command_init(&cmd, key);
    fg_command_str(&cmd, a);
    fg_command_str(&cmd, b);
    if (d != NULL) fg_command_str(&cmd, d);
    fg_code rc;
    fg_remote_exchange(p->remote, &cmd, 1, reply, &rc, err);
    if (rc == FG_CODE_OK && (*reply)->type == REDIS_REPLY_ERROR) {
        rc = fg_reply_error(*reply, err);
        freeReplyObject(*reply);
    }
    return rc;
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static fg_code list_names(void *s, char ***names, size_t *count, fg_error *err) {
    redisReply *r;
    bool scripts;
    fg_code rc = speaks_scripts(s, &scripts, err);
    if (rc == FG_CODE_OK)
        rc = scripts ? ask(s, REGISTRY, "SMEMBERS", REGISTRY, NULL, &r, err)
                     : ask(s, "", "FG.POLICY", "LIST", NULL, &r, err);
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
    if (scripts) qsort(out, n, sizeof(*out), by_name); /* a set has no order */
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

/* [kind, entries], a Bloom list with its error and capacity after them
 * (0 and 0 from a module before them, which told only the kind). */
static bool parse_list(const redisReply *v, fg_list_spec *spec, int64_t *entries) {
    if (v->type != REDIS_REPLY_ARRAY || v->elements < 2 ||
        v->element[0]->type != REDIS_REPLY_STRING || !is_integer(v->element[1]))
        return false;
    bool bloom = strcasecmp(v->element[0]->str, "bloom") == 0;
    if (!bloom && strcasecmp(v->element[0]->str, "exact") != 0) return false;
    bool sized = bloom && v->elements == 4;
    if (v->elements != (sized ? 4u : 2u)) return false;
    *spec = (fg_list_spec){bloom ? FG_LIST_BLOOM : FG_LIST_EXACT, 0, 0};
    if (sized && (!reply_number(v->element[2], &spec->error) || !is_integer(v->element[3])))
        return false;
    if (sized) spec->capacity = v->element[3]->integer;
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

static fg_code get_policy(void *s, const char *name, fg_policy_info *out, fg_error *err) {
    redisReply *r;
    char keys[FG_POLICY_KEYS][FG_POLICY_KEY_MAX];
    fg_policy_keys(name, strlen(name), keys);
    fg_code rc = ask(s, keys[0], "FG.POLICY", "GET", name, &r, err);
    if (rc != FG_CODE_OK) return rc;
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

const fg_policy_ops fg_remote_policies = {policies_open, policies_close, set_policy, delete_policy,
                                          list_add,      check,          get_policy, list_names,
                                          forget,        loader_of};
