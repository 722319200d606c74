/*
 * policy.c - floodgate policy: named policies from the command line
 * (docs/policies.md, "Config files and the command line").
 *
 *   floodgate policy apply FILE      [--url URL] [--json]
 *   floodgate policy list            [--url URL] [--json]
 *   floodgate policy show NAME       [--url URL] [--json]
 *   floodgate policy check NAME KEY  [--cost N] [--id ID] [--wait MS] [--url URL] [--json]
 *   floodgate policy delete NAME     [--url URL] [--json]
 *
 * Each is one library call: fg_policies_apply_file, FG.POLICY LIST and GET
 * (fg_policy_names, fg_policy_get), fg_policy_check or, with --wait, fg_policy_acquire,
 * and fg_policy_delete. As in main.c, numbers are parsed strictly and their
 * ranges left to the library, and options may be anywhere.
 *
 * On a cluster URL, apply and delete reach every master; list and show
 * read one node. On mem: the policies live as long as the command, so
 * apply is a check of the file that sends nothing.
 *
 * Exit codes (cli.h): 0 done or allowed, 1 denied (show: no such policy),
 * 2 error.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "floodgate.h"

#define MISSING "ERR no such policy"

typedef struct policy_opts {
    const char *url;
    const char *id; /* NULL: the key */
    int64_t cost;
    int64_t wait_ms; /* -1: no --wait */
    int json;
} policy_opts;

/* ---------------------------------------------------------------- options */

static int library_error(const fg_error *err) {
    const char *msg = err->message;
    if (strncmp(msg, "ERR ", 4) == 0) msg += 4;
    return cli_error("%s: %s", fg_code_name(err->code), msg);
}

/* No blanks, no trailing garbage: as main.c parses integers. */
static int parse_int64(const char *s, int64_t *out) {
    char *end;
    if (*s == '\0' || isspace((unsigned char)*s)) return 0;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || *end != '\0') return 0;
    *out = v;
    return 1;
}

/* An option's value: "--name=value" or "--name value" (*i moves past it). */
static const char *option_value(int argc, char **argv, int *i, const char *name) {
    const char *eq = strchr(argv[*i], '=');
    if (eq != NULL) return eq + 1;
    if (*i + 1 >= argc) {
        cli_error("%s needs a value", name);
        return NULL;
    }
    return argv[++*i];
}

static int integer_option(int argc, char **argv, int *i, const char *name, int64_t *out) {
    const char *v = option_value(argc, argv, i, name);
    if (v == NULL) return 0;
    if (parse_int64(v, out)) return 1;
    cli_error("%s must be an integer, not '%s'", name, v);
    return 0;
}

/* Is argv[i] the option `name`, alone or with "=value"? */
static int is_option(const char *arg, const char *name) {
    size_t len = strlen(name);
    return strncmp(arg, name, len) == 0 && (arg[len] == '\0' || arg[len] == '=');
}

/* Takes the options out of argv and moves the positional arguments to its
 * front; `checks` tells whether --cost, --id and --wait belong. Returns
 * the number of positional arguments, or -1 after printing the error. */
static int parse_options(int argc, char **argv, int checks, policy_opts *o) {
    const char *env = getenv("FLOODGATE_URL");
    int npos = 0, options = 1, ok = 1;
    *o = (policy_opts){env && *env ? env : "mem:", NULL, 1, -1, 0};
    for (int i = 0; i < argc && ok; i++) {
        const char *a = argv[i];
        if (!options || strncmp(a, "--", 2) != 0)
            argv[npos++] = argv[i];
        else if (strcmp(a, "--") == 0)
            options = 0;
        else if (strcmp(a, "--json") == 0)
            o->json = 1;
        else if (is_option(a, "--url"))
            ok = (o->url = option_value(argc, argv, &i, "--url")) != NULL;
        else if (checks && is_option(a, "--id"))
            ok = (o->id = option_value(argc, argv, &i, "--id")) != NULL;
        else if (checks && is_option(a, "--cost"))
            ok = integer_option(argc, argv, &i, "--cost", &o->cost);
        else if (checks && is_option(a, "--wait"))
            ok = integer_option(argc, argv, &i, "--wait", &o->wait_ms);
        else
            ok = !cli_error("unknown option '%s' (see floodgate --help)", a);
    }
    return ok ? npos : -1;
}

static fg_client *open_client(const char *url, fg_error *err) {
    fg_options opts;
    fg_options_init(&opts);
    return fg_open(url, &opts, err);
}

/* A JSON string: names and keys are the user's bytes. */
static void print_json_string(const char *s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

/* ------------------------------------------------------------ subcommands */

static int cmd_apply(fg_client *c, int npos, char **argv, const policy_opts *o) {
    fg_error err;
    size_t applied = 0;
    if (npos != 1) return cli_error("policy apply takes one FILE");
    fg_code rc = fg_policies_apply_file(c, argv[0], &applied, &err);
    if (rc != FG_CODE_OK) {
        if (applied > 0) fprintf(stderr, "floodgate: %zu policies were applied before\n", applied);
        return library_error(&err);
    }
    if (o->json)
        printf("{\"applied\":%zu}\n", applied);
    else
        printf("applied %zu %s\n", applied, applied == 1 ? "policy" : "policies");
    return CLI_EXIT_OK;
}

static int cmd_list(fg_client *c, int npos, const policy_opts *o) {
    fg_error err;
    char **names;
    size_t n;
    if (npos != 0) return cli_error("policy list takes no arguments");
    if (fg_policy_names(c, &names, &n, &err) != FG_CODE_OK) return library_error(&err);
    if (o->json) putchar('[');
    for (size_t i = 0; i < n; i++) {
        if (!o->json) {
            printf("%s\n", names[i]);
            continue;
        }
        if (i > 0) putchar(',');
        print_json_string(names[i]);
    }
    if (o->json) puts("]");
    fg_policy_names_free(names, n);
    return CLI_EXIT_OK;
}

static const char *algorithm_name(fg_algorithm a) {
    switch (a) {
    case FG_TOKEN_BUCKET: return "token";
    case FG_LEAKY_BUCKET: return "leaky";
    case FG_GCRA: return "gcra";
    case FG_FIXED_WINDOW: return "fixed";
    case FG_SLIDING_WINDOW: return "sliding";
    default: return "slidelog";
    }
}

/* A limit's fields as the config file names them: "capacity=10 rate=10". */
static void format_limit(const fg_limit *l, int json, char *buf, size_t len) {
    const char *fmt;
    if (l->algorithm == FG_GCRA)
        fmt = json ? "\"capacity\":%lld,\"count\":%.17g,\"period_ms\":%.17g"
                   : "capacity=%lld count=%.17g period_ms=%.17g";
    else if (l->algorithm == FG_TOKEN_BUCKET || l->algorithm == FG_LEAKY_BUCKET)
        fmt = json ? "\"capacity\":%lld,\"rate\":%.17g" : "capacity=%lld rate=%.17g";
    else
        fmt = json ? "\"limit\":%lld,\"window_ms\":%.17g" : "limit=%lld window_ms=%.17g";
    double first = l->algorithm == FG_FIXED_WINDOW || l->algorithm == FG_SLIDING_WINDOW
                       ? l->window_ms
                       : l->rate;
    snprintf(buf, len, fmt, (long long)l->limit, first, l->window_ms);
}

static const char *kind_name(const fg_list_spec *s) {
    return s->kind == FG_LIST_BLOOM ? "bloom" : "exact";
}

static void show_json(const char *name, const fg_policy_info *in) {
    const fg_policy_def *d = &in->def;
    char limit[160];
    fputs("{\"name\":", stdout);
    print_json_string(name);
    fputs(",\"limits\":[", stdout);
    for (size_t i = 0; i < d->nlimits; i++) {
        format_limit(&d->limits[i], 1, limit, sizeof(limit));
        printf("%s{\"algorithm\":\"%s\",%s}", i > 0 ? "," : "",
               algorithm_name(d->limits[i].algorithm), limit);
    }
    fputs("],\"penalty\":", stdout);
    if (d->ban_ms > 0)
        printf("{\"ban_ms\":%.17g,\"after\":%lld,\"within_ms\":%.17g}", d->ban_ms,
               (long long)d->ban_after, d->ban_within_ms);
    else
        fputs("null", stdout);
    printf(",\"shadow\":%s,\"allowlist\":{\"kind\":\"%s\",\"entries\":%lld},"
           "\"denylist\":{\"kind\":\"%s\",\"entries\":%lld},\"allowed\":%lld,\"denied\":%lld,"
           "\"banned\":%lld,\"shadow_denied\":%lld,\"waited\":%lld}\n",
           d->shadow ? "true" : "false", kind_name(&d->allowlist), (long long)in->allow_entries,
           kind_name(&d->denylist), (long long)in->deny_entries, (long long)in->allowed,
           (long long)in->denied, (long long)in->banned, (long long)in->shadow_denied,
           (long long)in->waited);
}

static void show_text(const char *name, const fg_policy_info *in) {
    const fg_policy_def *d = &in->def;
    char limit[160];
    printf("%s\n", name);
    for (size_t i = 0; i < d->nlimits; i++) {
        format_limit(&d->limits[i], 0, limit, sizeof(limit));
        printf("  limit %-9zu %s %s\n", i + 1, algorithm_name(d->limits[i].algorithm), limit);
    }
    if (d->ban_ms > 0)
        printf("  penalty         ban_ms=%.17g after=%lld within_ms=%.17g\n", d->ban_ms,
               (long long)d->ban_after, d->ban_within_ms);
    else
        printf("  penalty         none\n");
    printf("  shadow          %s\n", d->shadow ? "yes" : "no");
    printf("  allowlist       %s, %lld entries\n", kind_name(&d->allowlist),
           (long long)in->allow_entries);
    printf("  denylist        %s, %lld entries\n", kind_name(&d->denylist),
           (long long)in->deny_entries);
    printf("  allowed         %lld\n", (long long)in->allowed);
    printf("  denied          %lld\n", (long long)in->denied);
    printf("  banned          %lld\n", (long long)in->banned);
    printf("  shadow_denied   %lld\n", (long long)in->shadow_denied);
    printf("  waited          %lld\n", (long long)in->waited);
}

static int cmd_show(fg_client *c, int npos, char **argv, const policy_opts *o) {
    fg_error err;
    fg_policy_info info;
    if (npos != 1) return cli_error("policy show takes one NAME");
    fg_code rc = fg_policy_get(c, argv[0], &info, &err);
    if (rc == FG_CODE_INVALID && strncmp(err.message, MISSING, strlen(MISSING)) == 0) {
        if (o->json)
            puts("null");
        else
            puts("(no such policy)");
        return CLI_EXIT_DENIED;
    }
    if (rc != FG_CODE_OK) return library_error(&err);
    if (o->json)
        show_json(argv[0], &info);
    else
        show_text(argv[0], &info);
    return CLI_EXIT_OK;
}

static const char *decider_name(const fg_policy_result *r, char *buf, size_t len) {
    switch (r->decided_by) {
    case FG_BY_PENALTY: return "penalty";
    case FG_BY_DENYLIST: return "denylist";
    case FG_BY_ALLOWLIST: return "allowlist";
    default: snprintf(buf, len, "limit:%d", r->limit_index + 1); return buf;
    }
}

static void print_check(const fg_policy_result *p, int json) {
    const fg_result *r = &p->result;
    char by[24];
    const char *source = r->source == FG_SOURCE_SERVER ? "server" : "memory";
    if (json) {
        printf("{\"allowed\":%s,\"limit\":%lld,\"remaining\":%lld,\"retry_after_ms\":%lld,"
               "\"reset_after_ms\":%lld,\"decided_by\":\"%s\",\"shadow_denied\":%s,"
               "\"source\":\"%s\"}\n",
               r->allowed ? "true" : "false", (long long)r->limit, (long long)r->remaining,
               (long long)r->retry_after_ms, (long long)r->reset_after_ms,
               decider_name(p, by, sizeof(by)), p->shadow_denied ? "true" : "false", source);
        return;
    }
    printf("%s\n", r->allowed ? "allowed" : "denied");
    printf("  limit           %lld\n", (long long)r->limit);
    printf("  remaining       %lld\n", (long long)r->remaining);
    printf("  retry_after_ms  %lld\n", (long long)r->retry_after_ms);
    printf("  reset_after_ms  %lld\n", (long long)r->reset_after_ms);
    printf("  decided_by      %s\n", decider_name(p, by, sizeof(by)));
    printf("  shadow_denied   %s\n", p->shadow_denied ? "yes" : "no");
    printf("  source          %s\n", source);
}

static int cmd_check(fg_client *c, int npos, char **argv, const policy_opts *o) {
    fg_error err;
    fg_policy_result r;
    if (npos != 2) return cli_error("policy check takes NAME KEY");
    fg_code rc = o->wait_ms >= 0
                     ? fg_policy_acquire(c, argv[0], argv[1], o->id, o->cost, o->wait_ms, &r, &err)
                     : fg_policy_check(c, argv[0], argv[1], o->id, o->cost, &r, &err);
    if (rc != FG_CODE_OK) return library_error(&err);
    print_check(&r, o->json);
    return r.result.allowed ? CLI_EXIT_OK : CLI_EXIT_DENIED;
}

static int cmd_delete(fg_client *c, int npos, char **argv, const policy_opts *o) {
    fg_error err;
    bool deleted = false;
    if (npos != 1) return cli_error("policy delete takes one NAME");
    if (fg_policy_delete(c, argv[0], &deleted, &err) != FG_CODE_OK) return library_error(&err);
    if (o->json)
        printf("{\"deleted\":%s}\n", deleted ? "true" : "false");
    else
        printf("%s\n", deleted ? "deleted" : "(no such policy)");
    return CLI_EXIT_OK;
}

int cli_policy(int argc, char **argv) {
    static const char *const subcommands[] = {"apply", "list", "show", "check", "delete"};
    const char *sub = argc > 0 ? argv[0] : "";
    size_t which = 0;
    while (which < 5 && strcmp(sub, subcommands[which]) != 0)
        which++;
    if (which == 5)
        return cli_error("policy needs apply, list, show, check or delete (see floodgate --help)");
    policy_opts o;
    int npos = parse_options(argc - 1, argv + 1, which == 3, &o);
    if (npos < 0) return CLI_EXIT_ERROR;
    fg_error err;
    fg_client *c = open_client(o.url, &err);
    if (c == NULL) return library_error(&err);
    char **args = argv + 1;
    int rc;
    switch (which) {
    case 0: rc = cmd_apply(c, npos, args, &o); break;
    case 1: rc = cmd_list(c, npos, &o); break;
    case 2: rc = cmd_show(c, npos, args, &o); break;
    case 3: rc = cmd_check(c, npos, args, &o); break;
    default: rc = cmd_delete(c, npos, args, &o); break;
    }
    fg_close(c);
    return rc;
}
