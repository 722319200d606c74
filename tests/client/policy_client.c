/*
 * policy_client.c - libfloodgate's policies driven line by line, a
 * differential run of mem: against a server, and the waiting queue with
 * threads, for tests/integration/test_client_policies.py.
 *
 *   policy_client URL [CLOCK_US [send]]
 *   policy_client diff URL SEED OPERATIONS [exact]
 *   policy_client fifo URL NAME
 *
 * With a URL, reads commands on stdin and answers one line each on stdout
 * (flushed); a failed call answers "err CODE MESSAGE". With CLOCK_US the
 * client's clock stands at that instant until "clock" moves it; "send"
 * sends it with every check (opts.send_clock).
 *
 *   set NAME RULE...                 ok
 *   del NAME                         ok 0|1
 *   allow NAME ITEM... / deny ...    ok ADDED
 *   check NAME KEY COST [ID]         ok RESULT
 *   acquire NAME KEY COST TIMEOUT [ID]   ok RESULT
 *   loader NAME RULE...              ok (the loader knows NAME, with these rules)
 *   loads                            ok CALLS (how often the loader was asked)
 *   apply FILE                       ok APPLIED (failed: err CODE APPLIED MESSAGE)
 *   get NAME                         ok FIELD=VALUE...
 *   names                            ok NAME...
 *   reset KEY                        ok 0|1
 *   clock US                         ok
 *   stats                            ok ROUND_TRIPS FAILURES
 *   invalid                          ok CODE... (see run_invalid)
 *
 * RESULT is "ALLOWED LIMIT REMAINING RETRY_MS RESET_MS DECIDED_BY SHADOW
 * SOURCE", DECIDED_BY as FG.CHECK words it (limit:1, penalty, denylist,
 * allowlist). RULE is token:CAP:RATE, leaky:CAP:RATE, gcra:CAP:COUNT:
 * PERIOD_MS, fixed:LIMIT:WINDOW_MS, sliding:LIMIT:WINDOW_MS, slidelog:
 * LIMIT:WINDOW_MS (refused), penalty:BAN_MS:AFTER:WITHIN_MS, shadow,
 * allow:exact, allow:bloom:ERROR:CAPACITY, deny:... ID "-" is none.
 *
 * diff: opens "mem:" and URL on one injected clock (the server gets it as
 * AT: floodgate.explicit-time must be yes), which runs ahead of the wall
 * clock by a growing offset, and feeds both the same random policies (one
 * to three limits of every algorithm, penalties, shadow mode, exact and
 * Bloom lists), replacements of them (their keys carried over), deletes,
 * list additions and checks, requiring identical codes, messages and
 * answers. Exit 0 with "OK N operations: ..." (how many checks were
 * allowed, denied by limits, by the penalty box and by lists, shadow
 * denials, replacements) when all agree, 1 at the first difference. With
 * "exact" the lists are never Bloom filters (a server without the module,
 * whose scripts keep exact lists only).
 *
 * fifo: the waiting queue of one key with threads (timings in the
 * comment of run_fifo); prints one line per request.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "floodgate.h"
#include "mem/mem_policy.h" /* fg_policy_get: the waited counter */

#define LINE_MAX_LEN 65536
#define WORDS_MAX    4096
#define ANSWER_MAX   1024
#define US           1000000LL

static fg_client *client;
static int64_t fixed_clock_us;

static int64_t fixed_clock(void *arg) {
    (void)arg;
    return fixed_clock_us;
}

typedef struct words {
    char *w[WORDS_MAX];
    int n;
} words;

static void split(char *line, words *ws) {
    char *save = NULL;
    ws->n = 0;
    for (char *t = strtok_r(line, " \n", &save); t != NULL && ws->n < WORDS_MAX;
         t = strtok_r(NULL, " \n", &save))
        ws->w[ws->n++] = t;
}

static void answer_error(char *out, size_t len, fg_code rc, const fg_error *err) {
    snprintf(out, len, "err %s %s", fg_code_name(rc), err->message);
}

/* ------------------------------------------------------------ rules */

/* One RULE word into def; false when it is not one. */
static bool parse_rule(char *word, fg_policy_def *def) {
    char *f[5] = {0};
    int n = 0;
    for (char *save = NULL, *t = strtok_r(word, ":", &save); t != NULL && n < 5;
         t = strtok_r(NULL, ":", &save))
        f[n++] = t;
    double a = n > 1 ? atof(f[1]) : 0, b = n > 2 ? atof(f[2]) : 0, c = n > 3 ? atof(f[3]) : 0;
    long long whole = n > 1 ? atoll(f[1]) : 0;
    fg_limit *l = &def->limits[def->nlimits < FG_MAX_POLICY_LIMITS ? def->nlimits : 0];
    if (strcmp(f[0], "token") == 0 && n == 3)
        *l = fg_token_bucket(whole, b);
    else if (strcmp(f[0], "leaky") == 0 && n == 3)
        *l = fg_leaky_bucket(whole, b);
    else if (strcmp(f[0], "gcra") == 0 && n == 4)
        *l = fg_gcra(whole, b, c);
    else if (strcmp(f[0], "fixed") == 0 && n == 3)
        *l = fg_fixed_window(whole, b);
    else if (strcmp(f[0], "sliding") == 0 && n == 3)
        *l = fg_sliding_window(whole, b);
    else if (strcmp(f[0], "slidelog") == 0 && n == 3)
        *l = fg_sliding_log(whole, b);
    else if (strcmp(f[0], "penalty") == 0 && n == 4) {
        def->ban_ms = a;
        def->ban_after = atoll(f[2]);
        def->ban_within_ms = c;
        return true;
    } else if (strcmp(f[0], "shadow") == 0 && n == 1) {
        def->shadow = true;
        return true;
    } else if ((strcmp(f[0], "allow") == 0 || strcmp(f[0], "deny") == 0) && n >= 2) {
        fg_list_spec *s = f[0][0] == 'a' ? &def->allowlist : &def->denylist;
        s->kind = strcmp(f[1], "bloom") == 0 ? FG_LIST_BLOOM : FG_LIST_EXACT;
        if (n == 4) {
            s->error = b;
            s->capacity = (int64_t)c;
        }
        return true;
    } else {
        return false;
    }
    def->nlimits++;
    return true;
}

static bool parse_rules(words *ws, int from, fg_policy_def *def) {
    fg_policy_def_init(def);
    for (int i = from; i < ws->n; i++)
        if (!parse_rule(ws->w[i], def)) return false;
    return true;
}

/* -------------------------------------------------------------- results */

static const char *decider(const fg_policy_result *r, char *buf, size_t len) {
    switch (r->decided_by) {
    case FG_BY_LIMIT: snprintf(buf, len, "limit:%d", r->limit_index + 1); return buf;
    case FG_BY_PENALTY: return "penalty";
    case FG_BY_DENYLIST: return "denylist";
    case FG_BY_ALLOWLIST: return "allowlist";
    }
    return "?";
}

static void format_result(const fg_policy_result *r, char *out, size_t len) {
    char by[24];
    snprintf(out, len, "ok %d %lld %lld %lld %lld %s %d %s", r->result.allowed,
             (long long)r->result.limit, (long long)r->result.remaining,
             (long long)r->result.retry_after_ms, (long long)r->result.reset_after_ms,
             decider(r, by, sizeof(by)), r->shadow_denied,
             r->result.source == FG_SOURCE_SERVER ? "server" : "memory");
}

/* ------------------------------------------------------------- the loader */

static fg_policy_def loader_def;
static char loader_name[80];
static atomic_int loads;

static bool loader(const char *name, fg_policy_def *def, void *arg) {
    (void)arg;
    atomic_fetch_add(&loads, 1);
    if (strcmp(name, loader_name) != 0) return false;
    *def = loader_def;
    return true;
}

/* ------------------------------------------------------------ commands */

static void run_check(words *ws, bool waits, char *out, size_t len) {
    int at = waits ? 5 : 4;
    const char *id = ws->n > at && strcmp(ws->w[at], "-") != 0 ? ws->w[at] : NULL;
    fg_policy_result r;
    fg_error err;
    fg_code rc = waits ? fg_policy_acquire(client, ws->w[1], ws->w[2], id, atoll(ws->w[3]),
                                           atoll(ws->w[4]), &r, &err)
                       : fg_policy_check(client, ws->w[1], ws->w[2], id, atoll(ws->w[3]), &r, &err);
    if (rc != FG_CODE_OK)
        answer_error(out, len, rc, &err);
    else
        format_result(&r, out, len);
}

static void run_list(words *ws, bool deny, char *out, size_t len) {
    const void *items[WORDS_MAX];
    size_t lens[WORDS_MAX];
    size_t n = (size_t)(ws->n - 2);
    for (size_t i = 0; i < n; i++) {
        items[i] = ws->w[i + 2];
        lens[i] = strcmp(ws->w[i + 2], "\"\"") == 0 ? 0 : strlen(ws->w[i + 2]);
    }
    int64_t added = -1;
    fg_error err;
    fg_code rc = fg_policy_list_add(client, ws->w[1], deny, items, lens, n, &added, &err);
    if (rc != FG_CODE_OK)
        answer_error(out, len, rc, &err);
    else
        snprintf(out, len, "ok %lld", (long long)added);
}

static void run_get(const char *name, char *out, size_t len) {
    fg_policy_info info;
    fg_error err;
    fg_code rc = fg_policy_get(client, name, &info, &err);
    if (rc != FG_CODE_OK) {
        answer_error(out, len, rc, &err);
        return;
    }
    size_t used = (size_t)snprintf(out, len, "ok limits=%zu", info.def.nlimits);
    for (size_t i = 0; i < info.def.nlimits && used < len; i++) {
        const fg_limit *l = &info.def.limits[i];
        used += (size_t)snprintf(out + used, len - used, " limit%zu=%d:%lld:%.17g:%.17g", i + 1,
                                 (int)l->algorithm, (long long)l->limit, l->rate, l->window_ms);
    }
    if (used < len)
        snprintf(out + used, len - used,
                 " ban_ms=%.17g after=%lld within_ms=%.17g shadow=%d allow=%s:%lld deny=%s:%lld "
                 "allowed=%lld denied=%lld banned=%lld shadow_denied=%lld waited=%lld",
                 info.def.ban_ms, (long long)info.def.ban_after, info.def.ban_within_ms,
                 info.def.shadow, info.def.allowlist.kind == FG_LIST_BLOOM ? "bloom" : "exact",
                 (long long)info.allow_entries,
                 info.def.denylist.kind == FG_LIST_BLOOM ? "bloom" : "exact",
                 (long long)info.deny_entries, (long long)info.allowed, (long long)info.denied,
                 (long long)info.banned, (long long)info.shadow_denied, (long long)info.waited);
}

static void run_names(char *out, size_t len) {
    char **names;
    size_t n;
    fg_error err;
    fg_code rc = fg_policy_names(client, &names, &n, &err);
    if (rc != FG_CODE_OK) {
        answer_error(out, len, rc, &err);
        return;
    }
    size_t used = (size_t)snprintf(out, len, "ok");
    for (size_t i = 0; i < n && used < len; i++)
        used += (size_t)snprintf(out + used, len - used, " %s", names[i]);
    fg_policy_names_free(names, n);
}

/* Calls the checks refuse before any round trip, one code each. */
static void run_invalid(char *out, size_t len) {
    fg_policy_def def, none;
    fg_policy_def_init(&def);
    fg_policy_def_init(&none);
    def.limits[def.nlimits++] = fg_token_bucket(1, 1);
    const void *items[] = {"a", NULL};
    size_t lens[] = {1, 1};
    fg_policy_result r;
    fg_error err;
    fg_code codes[] = {
        fg_policy_set(client, NULL, &def, &err),
        fg_policy_set(client, "p", NULL, &err),
        fg_policy_set(client, "p", &none, &err), /* no limits */
        fg_policy_set(client, "a b", &def, &err),
        fg_policy_set(NULL, "p", &def, &err),
        fg_policy_delete(client, "", NULL, &err),
        fg_policy_list_add(client, "p", false, items, lens, 0, NULL, &err),
        fg_policy_list_add(client, "p", false, NULL, lens, 1, NULL, &err),
        fg_policy_list_add(client, "p", true, items, lens, 2, NULL, &err), /* item 1 is NULL */
        fg_policy_check(client, "p", NULL, NULL, 1, &r, &err),
        fg_policy_check(client, "p", "k", NULL, 1, NULL, &err),
        fg_policy_check(client, "p", "k", NULL, -1, &r, &err),
        fg_policy_acquire(client, "p", "k", NULL, 1, 0, &r, &err),
        fg_policy_acquire(client, "p", "k", NULL, 1, 86400001, &r, &err),
        fg_policies_apply_file(client, NULL, NULL, &err),
    };
    size_t used = (size_t)snprintf(out, len, "ok");
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
        used += (size_t)snprintf(out + used, len - used, " %s", fg_code_name(codes[i]));
}

static void run_set(words *ws, char *out, size_t len) {
    fg_policy_def def;
    fg_error err;
    if (!parse_rules(ws, 2, &def)) {
        snprintf(out, len, "err bad rule");
        return;
    }
    fg_code rc = fg_policy_set(client, ws->w[1], &def, &err);
    if (rc != FG_CODE_OK)
        answer_error(out, len, rc, &err);
    else
        snprintf(out, len, "ok");
}

static void run_apply(const char *path, char *out, size_t len) {
    size_t applied = 99;
    fg_error err;
    fg_code rc = fg_policies_apply_file(client, path, &applied, &err);
    if (rc != FG_CODE_OK)
        snprintf(out, len, "err %s %zu %s", fg_code_name(rc), applied, err.message);
    else
        snprintf(out, len, "ok %zu", applied);
}

static void run(char *line, char *out, size_t len) {
    words ws;
    fg_error err;
    split(line, &ws);
    const char *cmd = ws.n > 0 ? ws.w[0] : "";
    if (strcmp(cmd, "set") == 0 && ws.n >= 2) {
        run_set(&ws, out, len);
    } else if (strcmp(cmd, "del") == 0 && ws.n == 2) {
        bool deleted = false;
        fg_code rc = fg_policy_delete(client, ws.w[1], &deleted, &err);
        if (rc != FG_CODE_OK)
            answer_error(out, len, rc, &err);
        else
            snprintf(out, len, "ok %d", deleted);
    } else if ((strcmp(cmd, "allow") == 0 || strcmp(cmd, "deny") == 0) && ws.n >= 2) {
        run_list(&ws, cmd[0] == 'd', out, len);
    } else if (strcmp(cmd, "check") == 0 && ws.n >= 4) {
        run_check(&ws, false, out, len);
    } else if (strcmp(cmd, "acquire") == 0 && ws.n >= 5) {
        run_check(&ws, true, out, len);
    } else if (strcmp(cmd, "loader") == 0 && ws.n >= 2) {
        snprintf(loader_name, sizeof(loader_name), "%s", ws.w[1]);
        if (!parse_rules(&ws, 2, &loader_def)) {
            snprintf(out, len, "err bad rule");
            return;
        }
        fg_set_policy_loader(client, loader, NULL);
        snprintf(out, len, "ok");
    } else if (strcmp(cmd, "loads") == 0) {
        snprintf(out, len, "ok %d", atomic_load(&loads));
    } else if (strcmp(cmd, "apply") == 0 && ws.n == 2) {
        run_apply(ws.w[1], out, len);
    } else if (strcmp(cmd, "get") == 0 && ws.n == 2) {
        run_get(ws.w[1], out, len);
    } else if (strcmp(cmd, "names") == 0) {
        run_names(out, len);
    } else if (strcmp(cmd, "reset") == 0 && ws.n == 2) {
        bool existed = false;
        fg_code rc = fg_reset(client, ws.w[1], &existed, &err);
        if (rc != FG_CODE_OK)
            answer_error(out, len, rc, &err);
        else
            snprintf(out, len, "ok %d", existed);
    } else if (strcmp(cmd, "clock") == 0 && ws.n == 2) {
        fixed_clock_us = atoll(ws.w[1]);
        snprintf(out, len, "ok");
    } else if (strcmp(cmd, "invalid") == 0) {
        run_invalid(out, len);
    } else if (strcmp(cmd, "stats") == 0) {
        fg_stats st;
        fg_get_stats(client, &st);
        snprintf(out, len, "ok %llu %llu", (unsigned long long)st.round_trips,
                 (unsigned long long)st.failures);
    } else {
        snprintf(out, len, "err bad command");
    }
}

static int serve(int argc, char **argv) {
    fg_options o;
    fg_options_init(&o);
    if (argc >= 3) {
        fixed_clock_us = atoll(argv[2]);
        o.clock_us = fixed_clock;
        o.send_clock = argc == 4 && strcmp(argv[3], "send") == 0;
    }
    fg_error err;
    client = fg_open(argv[1], &o, &err);
    if (client == NULL) {
        printf("err %s %s\n", fg_code_name(err.code), err.message);
        return 1;
    }
    printf("ok opened\n");
    fflush(stdout);
    static char line[LINE_MAX_LEN], out[ANSWER_MAX];
    while (fgets(line, sizeof(line), stdin) != NULL) {
        run(line, out, sizeof(out));
        printf("%s\n", out);
        fflush(stdout);
    }
    fg_close(client);
    return 0;
}

/* ------------------------------------------------------------ differential */

#define POLICIES 4
#define KEYS     6
#define IDS      8

static int64_t offset_us; /* how far the injected clock runs ahead of the wall's */
static unsigned seed;     /* in every name, with the process id: runs do not meet */
static long allowed, by_limit, by_penalty, by_list, shadowed, replaced;
static bool exact_lists; /* diff ... exact: no Bloom lists */

static int64_t wall_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * US + ts.tv_nsec / 1000;
}

static double uniform(double lo, double hi) {
    return lo + (hi - lo) * (rand() / (double)RAND_MAX);
}

static fg_limit random_limit(void) {
    int64_t n = 1 + rand() % 12;
    switch (rand() % 5) {
    case 0: return fg_token_bucket(n, uniform(0.5, 40));
    case 1: return fg_leaky_bucket(n, uniform(0.5, 40));
    case 2: return fg_gcra(n, 1 + rand() % 8, uniform(50, 3000));
    case 3: return fg_fixed_window(n, uniform(50, 5000));
    default: return fg_sliding_window(n, uniform(50, 5000));
    }
}

/* The longest penalty window policy p may have from now on. A key's state
 * counts as gone once its denials' window has ended (neutral_at), but the
 * server drops it by its own clock, not AT's: had the window grown since,
 * the server would still count denials that mem: has dropped. So windows
 * never grow. */
static double within_bound[POLICIES];

static fg_policy_def random_def(int p) {
    fg_policy_def def;
    fg_policy_def_init(&def);
    def.nlimits = 1 + (size_t)(rand() % 3);
    for (size_t i = 0; i < def.nlimits; i++)
        def.limits[i] = random_limit();
    if (rand() % 2) {
        double bound = within_bound[p] > 0 ? within_bound[p] : 6000;
        def.ban_ms = uniform(100, 4000);
        def.ban_after = 1 + rand() % 3;
        def.ban_within_ms = rand() % 3 == 0 ? 0 : uniform(bound / 20, bound);
        double within = def.ban_within_ms != 0 ? def.ban_within_ms : def.ban_ms;
        if (within > bound) def.ban_within_ms = within = bound;
        within_bound[p] = within;
    }
    def.shadow = rand() % 6 == 0;
    /* (the draws are made either way: "exact" keeps the same sequence) */
    if (rand() % 3 == 0 && !exact_lists) def.allowlist = (fg_list_spec){FG_LIST_BLOOM, 0.01, 50};
    if (rand() % 3 == 0 && !exact_lists) def.denylist = (fg_list_spec){FG_LIST_BLOOM, 0.001, 20};
    return def;
}

static void fail(long op, const char *what, fg_code a, fg_code b, const fg_error *ea,
                 const fg_error *eb) {
    printf("DIFF at operation %ld (%s): mem: %s \"%s\", server: %s \"%s\"\n", op, what,
           fg_code_name(a), a == FG_CODE_OK ? "" : ea->message, fg_code_name(b),
           b == FG_CODE_OK ? "" : eb->message);
    exit(1);
}

static void same_outcome(long op, const char *what, fg_code a, fg_code b, const fg_error *ea,
                         const fg_error *eb) {
    if (a != b || (a != FG_CODE_OK && strcmp(ea->message, eb->message) != 0))
        fail(op, what, a, b, ea, eb);
}

static void policy_name(int p, char *buf, size_t len) {
    snprintf(buf, len, "diff%u.%d.%d", seed, (int)getpid(), p);
}

static void step_set(fg_client *mem, fg_client *srv, long op) {
    char name[48];
    int p = rand() % POLICIES;
    policy_name(p, name, sizeof(name));
    fg_policy_def def = random_def(p);
    fg_error ea, eb;
    fg_code a = fg_policy_set(mem, name, &def, &ea);
    fg_code b = fg_policy_set(srv, name, &def, &eb);
    same_outcome(op, "set", a, b, &ea, &eb);
    replaced++;
}

static void step_list(fg_client *mem, fg_client *srv, long op) {
    char name[48], ids[3][16];
    policy_name(rand() % POLICIES, name, sizeof(name));
    const void *items[3];
    size_t lens[3], n = 1 + (size_t)(rand() % 3);
    for (size_t i = 0; i < n; i++) {
        snprintf(ids[i], sizeof(ids[i]), "id%d", rand() % IDS);
        items[i] = ids[i];
        lens[i] = strlen(ids[i]);
    }
    bool deny = rand() % 2;
    int64_t ca = -1, cb = -2;
    fg_error ea, eb;
    fg_code a = fg_policy_list_add(mem, name, deny, items, lens, n, &ca, &ea);
    fg_code b = fg_policy_list_add(srv, name, deny, items, lens, n, &cb, &eb);
    same_outcome(op, "list", a, b, &ea, &eb);
    if (a == FG_CODE_OK && ca != cb) {
        printf("DIFF at operation %ld (list add): %lld vs %lld\n", op, (long long)ca,
               (long long)cb);
        exit(1);
    }
}

static void step_delete(fg_client *mem, fg_client *srv, long op) {
    char name[48];
    policy_name(rand() % POLICIES, name, sizeof(name));
    bool da = false, db = true;
    fg_error ea, eb;
    fg_code a = fg_policy_delete(mem, name, &da, &ea);
    fg_code b = fg_policy_delete(srv, name, &db, &eb);
    same_outcome(op, "delete", a, b, &ea, &eb);
    if (da != db) {
        printf("DIFF at operation %ld (delete): %d vs %d\n", op, da, db);
        exit(1);
    }
}

static void tally(const fg_policy_result *r) {
    if (r->shadow_denied) shadowed++;
    if (r->result.allowed) {
        allowed++;
        return;
    }
    if (r->decided_by == FG_BY_LIMIT) by_limit++;
    if (r->decided_by == FG_BY_PENALTY) by_penalty++;
    if (r->decided_by == FG_BY_DENYLIST) by_list++;
}

/* Keys belong to one policy each ("key holds the state of policy" would
 * otherwise depend on when the server expires a key, by its own clock). */
static void step_check(fg_client *mem, fg_client *srv, long op) {
    char name[48], key[64], id[16];
    int p = rand() % POLICIES;
    policy_name(p, name, sizeof(name));
    snprintf(key, sizeof(key), "diff%u:%d:{%d}:%d", seed, (int)getpid(), p, rand() % KEYS);
    snprintf(id, sizeof(id), "id%d", rand() % IDS);
    const char *identity = rand() % 3 == 0 ? id : NULL;
    int64_t cost = rand() % 10 == 0 ? 0 : rand() % 15 == 0 ? 40 : 1 + rand() % 3;
    fg_policy_result ra, rb;
    fg_error ea, eb;
    fg_code a = fg_policy_check(mem, name, key, identity, cost, &ra, &ea);
    fg_code b = fg_policy_check(srv, name, key, identity, cost, &rb, &eb);
    same_outcome(op, "check", a, b, &ea, &eb);
    if (a != FG_CODE_OK) return;
    char la[200], lb[200];
    format_result(&ra, la, sizeof(la));
    format_result(&rb, lb, sizeof(lb));
    if (strcmp(strrchr(la, ' '), " memory") != 0 || strcmp(strrchr(lb, ' '), " server") != 0 ||
        strncmp(la, lb, (size_t)(strrchr(la, ' ') - la)) != 0) {
        printf("DIFF at operation %ld (check %s %s cost %lld at %lld): mem \"%s\", server "
               "\"%s\"\n",
               op, name, key, (long long)cost, (long long)fixed_clock_us, la, lb);
        exit(1);
    }
    tally(&ra);
}

static void step(fg_client *mem, fg_client *srv, long op) {
    static const int64_t steps_us[] = {0, 0, 0, 1, 999, 1000, 20000, 150000, 1000000, 5000000};
    offset_us += steps_us[rand() % (sizeof(steps_us) / sizeof(steps_us[0]))];
    fixed_clock_us = wall_us() + offset_us;
    int kind = rand() % 100;
    if (kind < 6)
        step_set(mem, srv, op);
    else if (kind < 10)
        step_list(mem, srv, op);
    else if (kind < 11)
        step_delete(mem, srv, op);
    else
        step_check(mem, srv, op);
}

static int differential(const char *url, unsigned s, long ops) {
    fg_options o;
    fg_options_init(&o);
    o.clock_us = fixed_clock;
    fg_error err;
    fg_client *mem = fg_open("mem:", &o, &err);
    o.send_clock = true;
    fg_client *srv = mem != NULL ? fg_open(url, &o, &err) : NULL;
    if (mem == NULL || srv == NULL) {
        printf("cannot open: %s\n", err.message);
        return 1;
    }
    seed = s;
    srand(s);
    for (int p = 0; p < POLICIES; p++)
        step_set(mem, srv, -1);
    replaced = 0;
    for (long op = 0; op < ops; op++)
        step(mem, srv, op);
    printf("OK %ld operations: %ld allowed, %ld denied by limits, %ld by the penalty box, %ld "
           "by lists, %ld shadow denials, %ld policies replaced\n",
           ops, allowed, by_limit, by_penalty, by_list, shadowed, replaced);
    fg_close(mem);
    fg_close(srv);
    return 0;
}

/* ------------------------------------------------------------------ fifo */

typedef struct acquirer {
    const char *name, *label;
    int64_t cost, timeout_ms;
    pthread_t thread;
    fg_code rc;
    fg_error err;
    fg_policy_result r;
    int64_t elapsed_ms;
    int order; /* 1 for the first answered, ... */
} acquirer;

static atomic_int answered;

static void *acquire_thread(void *arg) {
    acquirer *a = arg;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    a->rc = fg_policy_acquire(client, a->name, "fifo:key", NULL, a->cost, a->timeout_ms, &a->r,
                              &a->err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    a->order = atomic_fetch_add(&answered, 1) + 1;
    a->elapsed_ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
    return NULL;
}

/* Until the policy counts `n` requests that waited. */
static void await_waiters(const char *name, int64_t n) {
    const struct timespec pause = {0, 2 * 1000 * 1000};
    for (int i = 0; i < 5000; i++) {
        fg_policy_info info;
        fg_error err;
        if (fg_policy_get(client, name, &info, &err) == FG_CODE_OK && info.waited >= n) return;
        nanosleep(&pause, NULL);
    }
}

static void print_acquirer(const acquirer *a) {
    char line[ANSWER_MAX];
    if (a->rc != FG_CODE_OK)
        answer_error(line, sizeof(line), a->rc, &a->err);
    else
        format_result(&a->r, line, sizeof(line));
    printf("%s order=%d elapsed_ms=%lld %s\n", a->label, a->order, (long long)a->elapsed_ms, line);
}

/* A token bucket of 3, refilled at 5 per second (200 ms a unit), drained
 * at once. Then, each started once the one before it waits:
 *
 *   A: 3 units, up to 5 s: waits ~600 ms for a full bucket.
 *   B: 1 unit, up to 5 s: could have one after 200 ms, but A is first, so
 *      it is answered after A (~800 ms).
 *   C: 1 unit, up to 300 ms: waits (its unit would come in 200 ms); at its
 *      deadline its unit is there but A is first: denied, retry 0, nothing
 *      charged.
 *   D: 4 units (more than the bucket), up to 10 s: answered at once, -1.
 *   E (after B): 1 unit, up to 100 ms: the bucket is empty and the unit
 *      comes in 200 ms, beyond its timeout: answered at once.
 */
static int run_fifo(const char *url, const char *name) {
    fg_error err;
    client = fg_open(url, NULL, &err);
    if (client == NULL) {
        printf("cannot open: %s\n", err.message);
        return 1;
    }
    fg_policy_def def;
    fg_policy_def_init(&def);
    def.limits[def.nlimits++] = fg_token_bucket(3, 5);
    fg_policy_result drain;
    if (fg_policy_set(client, name, &def, &err) != FG_CODE_OK ||
        fg_policy_check(client, name, "fifo:key", NULL, 3, &drain, &err) != FG_CODE_OK) {
        printf("setup failed: %s\n", err.message);
        return 1;
    }
    acquirer as[] = {{.name = name, .label = "A", .cost = 3, .timeout_ms = 5000},
                     {.name = name, .label = "B", .cost = 1, .timeout_ms = 5000},
                     {.name = name, .label = "C", .cost = 1, .timeout_ms = 300},
                     {.name = name, .label = "D", .cost = 4, .timeout_ms = 10000},
                     {.name = name, .label = "E", .cost = 1, .timeout_ms = 100}};
    for (int i = 0; i < 3; i++) {
        pthread_create(&as[i].thread, NULL, acquire_thread, &as[i]);
        await_waiters(name, i + 1);
    }
    acquire_thread(&as[3]);
    for (int i = 0; i < 3; i++)
        pthread_join(as[i].thread, NULL);
    acquire_thread(&as[4]);
    for (size_t i = 0; i < sizeof(as) / sizeof(as[0]); i++)
        print_acquirer(&as[i]);
    fg_policy_info info;
    if (fg_policy_get(client, name, &info, &err) == FG_CODE_OK)
        printf("counters allowed=%lld denied=%lld waited=%lld\n", (long long)info.allowed,
               (long long)info.denied, (long long)info.waited);
    fg_close(client);
    return 0;
}

int main(int argc, char **argv) {
    if ((argc == 5 || (argc == 6 && strcmp(argv[5], "exact") == 0)) &&
        strcmp(argv[1], "diff") == 0) {
        exact_lists = argc == 6;
        return differential(argv[2], (unsigned)atoi(argv[3]), atol(argv[4]));
    }
    if (argc == 4 && strcmp(argv[1], "fifo") == 0) return run_fifo(argv[2], argv[3]);
    if (argc >= 2 && argc <= 4) return serve(argc, argv);
    fprintf(stderr, "usage: policy_client URL [CLOCK_US [send]] | policy_client diff URL SEED "
                    "OPERATIONS | policy_client fifo URL NAME\n");
    return 2;
}
