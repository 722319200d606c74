/*
 * policy.c - floodgate policy: named policies from the command line
 * (docs/policies.md, "Config files and the command line").
 *
 *   floodgate policy apply FILE      [--dry-run] [--url URL] [--json]
 *   floodgate policy list            [--url URL] [--json]
 *   floodgate policy show NAME       [--url URL] [--json]
 *   floodgate policy check NAME KEY  [--cost N] [--id ID] [--wait MS] [--url URL] [--json]
 *   floodgate policy delete NAME     [--url URL] [--json]
 *
 * Each is one library call: fg_policies_apply_file, FG.POLICY LIST and GET
 * (fg_policy_names, fg_policy_get), fg_policy_check or, with --wait, fg_policy_acquire,
 * and fg_policy_delete. Numbers and options are read as for every
 * subcommand (common.c): strictly, ranges left to the library, options
 * anywhere.
 *
 * On a cluster URL, apply and delete reach every master; list and show
 * read one node. On mem: the policies would live as long as the command,
 * so apply and delete refuse it (cli_run_family): a command that changes
 * state needs a server. apply --dry-run checks the file on mem: instead,
 * and sends nothing.
 *
 * Exit codes (cli.h): 0 done or allowed, 1 denied (show: no such policy),
 * 2 error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "floodgate.h"

#define MISSING "ERR no such policy"

/* ------------------------------------------------------------ subcommands */

static int cmd_apply(fg_client *c, int npos, char **argv, const cli_opts *o) {
    fg_error err;
    size_t applied = 0;
    if (npos != 1) return cli_error("policy apply takes one FILE");
    fg_code rc = fg_policies_apply_file(c, argv[0], &applied, &err);
    if (rc != FG_CODE_OK) {
        if (applied > 0)
            fprintf(stderr, "floodgate: %zu %s applied before\n", applied,
                    cli_plural((int64_t)applied, "policy was", "policies were"));
        return cli_library_error(&err);
    }
    const char *what = cli_plural((int64_t)applied, "policy", "policies");
    if (o->json)
        printf("{\"%s\":%zu}\n", o->dry_run ? "valid" : "applied", applied);
    else if (o->dry_run)
        printf("%s: %zu %s, valid (nothing sent)\n", argv[0], applied, what);
    else
        printf("applied %zu %s\n", applied, what);
    return CLI_EXIT_OK;
}

static int cmd_list(fg_client *c, int npos, char **argv, const cli_opts *o) {
    (void)argv;
    fg_error err;
    char **names;
    size_t n;
    if (npos != 0) return cli_error("policy list takes no arguments");
    if (fg_policy_names(c, &names, &n, &err) != FG_CODE_OK) return cli_library_error(&err);
    if (o->json) putchar('[');
    for (size_t i = 0; i < n; i++) {
        if (!o->json) {
            printf("%s\n", names[i]);
            continue;
        }
        if (i > 0) putchar(',');
        cli_print_json_string(names[i]);
    }
    if (o->json) puts("]");
    fg_policy_names_free(names, n);
    return CLI_EXIT_OK;
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
    cli_print_json_string(name);
    fputs(",\"limits\":[", stdout);
    for (size_t i = 0; i < d->nlimits; i++) {
        format_limit(&d->limits[i], 1, limit, sizeof(limit));
        printf("%s{\"algorithm\":\"%s\",%s}", i > 0 ? "," : "",
               cli_algorithm_name(d->limits[i].algorithm), limit);
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
        printf("  limit %-9zu %s %s\n", i + 1, cli_algorithm_name(d->limits[i].algorithm), limit);
    }
    if (d->ban_ms > 0)
        printf("  penalty         ban_ms=%.17g after=%lld within_ms=%.17g\n", d->ban_ms,
               (long long)d->ban_after, d->ban_within_ms);
    else
        printf("  penalty         none\n");
    printf("  shadow          %s\n", d->shadow ? "yes" : "no");
    printf("  allowlist       %s, %lld %s\n", kind_name(&d->allowlist),
           (long long)in->allow_entries, cli_plural(in->allow_entries, "entry", "entries"));
    printf("  denylist        %s, %lld %s\n", kind_name(&d->denylist),
           (long long)in->deny_entries, cli_plural(in->deny_entries, "entry", "entries"));
    printf("  allowed         %lld\n", (long long)in->allowed);
    printf("  denied          %lld\n", (long long)in->denied);
    printf("  banned          %lld\n", (long long)in->banned);
    printf("  shadow_denied   %lld\n", (long long)in->shadow_denied);
    printf("  waited          %lld\n", (long long)in->waited);
}

static int cmd_show(fg_client *c, int npos, char **argv, const cli_opts *o) {
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
    if (rc != FG_CODE_OK) return cli_library_error(&err);
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
    case FG_BY_LIMIT: break;
    }
    snprintf(buf, len, "limit:%d", r->limit_index + 1);
    return buf;
}

static void print_check(const fg_policy_result *p, int json) {
    const fg_result *r = &p->result;
    char by[24];
    cli_print_decision(r, json);
    if (json) {
        printf(",\"decided_by\":\"%s\",\"shadow_denied\":%s,\"source\":\"%s\"}\n",
               decider_name(p, by, sizeof(by)), p->shadow_denied ? "true" : "false",
               cli_source_name(r->source));
        return;
    }
    printf("  decided_by      %s\n", decider_name(p, by, sizeof(by)));
    printf("  shadow_denied   %s\n", p->shadow_denied ? "yes" : "no");
    printf("  source          %s\n", cli_source_name(r->source));
}

static int cmd_check(fg_client *c, int npos, char **argv, const cli_opts *o) {
    fg_error err;
    fg_policy_result r;
    if (npos != 2) return cli_error("policy check takes NAME KEY");
    fg_code rc = o->wait_ms != CLI_NOT_GIVEN
                     ? fg_policy_acquire(c, argv[0], argv[1], o->id, o->cost, o->wait_ms, &r, &err)
                     : fg_policy_check(c, argv[0], argv[1], o->id, o->cost, &r, &err);
    if (rc != FG_CODE_OK) return cli_library_error(&err);
    print_check(&r, o->json);
    return r.result.allowed ? CLI_EXIT_OK : CLI_EXIT_DENIED;
}

static int cmd_delete(fg_client *c, int npos, char **argv, const cli_opts *o) {
    fg_error err;
    bool deleted = false;
    if (npos != 1) return cli_error("policy delete takes one NAME");
    if (fg_policy_delete(c, argv[0], &deleted, &err) != FG_CODE_OK) return cli_library_error(&err);
    if (o->json)
        printf("{\"deleted\":%s}\n", deleted ? "true" : "false");
    else
        printf("%s\n", deleted ? "deleted" : "(no such policy)");
    return CLI_EXIT_OK;
}

static const cli_subcommand subcommands[] = {
    {{"policy apply",
      "  floodgate policy apply FILE [--dry-run]\n"
      "      set the policies of a config file (libconfig syntax) on the server (on a\n"
      "      cluster: every master); --dry-run checks the file and sends nothing\n",
      CLI_NEEDS_SERVER | CLI_TAKES_DRY_RUN},
     cmd_apply},
    {{"policy list", "  floodgate policy list\n      the names of the server's policies\n", 0},
     cmd_list},
    {{"policy show",
      "  floodgate policy show NAME\n"
      "      a policy's rules and counters; exit 1 when there is no such policy\n",
      0},
     cmd_show},
    {{"policy check",
      "  floodgate policy check NAME KEY [--cost N] [--id ID] [--wait MS]\n"
      "      check KEY against a policy (--id: the identity its lists are checked\n"
      "      against; --wait: wait up to MS in its queue); exit 0 allowed, 1 denied\n",
      CLI_TAKES_COST | CLI_TAKES_ID | CLI_TAKES_WAIT},
     cmd_check},
    {{"policy delete", "  floodgate policy delete NAME\n      delete a policy\n",
      CLI_NEEDS_SERVER},
     cmd_delete},
};

int cli_policy(int argc, char **argv) {
    return cli_run_family("policy", "floodgate policy: named policies (docs/policies.md).",
                          subcommands, sizeof(subcommands) / sizeof(subcommands[0]), argc, argv);
}
