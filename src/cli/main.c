/*
 * main.c - floodgate, the command-line tool of libfloodgate.
 *
 *   floodgate check   [--url URL] [--cost N] [--json] KEY ALGORITHM ARGS...
 *   floodgate peek    [--url URL] [--cost N] [--json] KEY ALGORITHM ARGS...
 *   floodgate inspect [--url URL] [--json] KEY
 *   floodgate reset   [--url URL] [--json] KEY
 *   floodgate simulate [--out DIR] [--plot]
 *   floodgate policy apply|list|show|check|delete ...   (policy.c)
 *
 * Every subcommand is a thin layer over one library call; numbers and
 * options are read as common.c reads them for every subcommand (strictly,
 * ranges left to the library; options anywhere).
 *
 * Exit codes (cli.h): 0 allowed or done, 1 denied (inspect: no state), 2 error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "floodgate.h"

/* Room for the largest state FG.INSPECT can show (fg_inspect refuses a
 * buffer too small): a sliding log of up to 100000 runs "ts_us,count", about
 * 20 bytes each. */
#define INSPECT_BUFLEN (4u << 20)

const char cli_usage[] =
    "usage: floodgate <command> [options] [arguments]\n"
    "\n"
    "  check   [--url URL] [--cost N] [--json] KEY ALGORITHM ARGS...\n"
    "          take N units (default 1) and print the decision\n"
    "  peek    [--url URL] [--cost N] [--json] KEY ALGORITHM ARGS...\n"
    "          the decision check would give, without taking anything\n"
    "  inspect [--url URL] [--json] KEY    the stored state of KEY\n"
    "  reset   [--url URL] [--json] KEY    forget the state of KEY\n"
    "  policy apply FILE | list | show NAME | delete NAME  [--url URL] [--json]\n"
    "  policy check NAME KEY [--cost N] [--id ID] [--wait MS] [--url URL] [--json]\n"
    "          named policies (docs/policies.md): apply a config file (on a\n"
    "          cluster: to every master), list them, show one and its counters,\n"
    "          check KEY against one (--wait: wait up to MS in its queue),\n"
    "          delete one\n"
    "  simulate [--out DIR] [--plot]\n"
    "          run every algorithm on the same traffic (in process, simulated\n"
    "          clock); write DIR/<scenario>.csv and DIR/<scenario>-1s.csv, and\n"
    "          with --plot DIR/<scenario>.png (default DIR: .)\n"
    "  version                             print the version\n"
    "  --help                              print this help\n"
    "\n"
    "ALGORITHM ARGS:\n"
    "  fixed    LIMIT WINDOW_MS        LIMIT per window aligned to the clock\n"
    "  sliding  LIMIT WINDOW_MS        LIMIT per sliding window (estimated)\n"
    "  slidelog LIMIT WINDOW_MS        LIMIT per sliding window (exact)\n"
    "  token    CAPACITY RATE_PER_SEC  token bucket\n"
    "  leaky    CAPACITY RATE_PER_SEC  leaky bucket\n"
    "  gcra     CAPACITY COUNT PERIOD_MS\n"
    "\n"
    "URL: redis://[user:password@]host[:port][/db], unix:///path.sock[?db=N],\n"
    "redis+cluster://host:port[,host:port...] or mem: (in process, forgotten at\n"
    "exit). Default: $FLOODGATE_URL, else mem:.\n"
    "\n"
    "Exit status: 0 allowed (or done), 1 denied (inspect: no state; policy show:\n"
    "no such policy), 2 error.\n";

/* -------------------------------------------------------------- algorithms */

/* ALGORITHM ARGS... into a limit. Returns 0 after printing the error. */
static int parse_limit(int argc, char **argv, fg_limit *out) {
    const cli_algorithm *a = cli_find_algorithm(argv[0]);
    int64_t capacity;
    double x[2] = {0, 0};
    int i;

    if (a == NULL)
        return !cli_error("unknown algorithm '%s' (fixed, sliding, slidelog, token, leaky "
                          "or gcra)", argv[0]);
    if (argc - 1 != a->nargs)
        return !cli_error("%s takes %s %s%s%s", a->name, a->args[0], a->args[1],
                          a->nargs == 3 ? " " : "", a->nargs == 3 ? a->args[2] : "");
    if (!cli_parse_int64(argv[1], &capacity))
        return !cli_error("%s: %s must be an integer, not '%s'", a->name, a->args[0], argv[1]);
    for (i = 1; i < a->nargs; i++)
        if (!cli_parse_number(argv[i + 1], &x[i - 1]))
            return !cli_error("%s: %s must be a decimal number, not '%s'", a->name, a->args[i],
                              argv[i + 1]);

    switch (a->algorithm) {
    case FG_FIXED_WINDOW: *out = fg_fixed_window(capacity, x[0]); break;
    case FG_SLIDING_WINDOW: *out = fg_sliding_window(capacity, x[0]); break;
    case FG_SLIDING_LOG: *out = fg_sliding_log(capacity, x[0]); break;
    case FG_TOKEN_BUCKET: *out = fg_token_bucket(capacity, x[0]); break;
    case FG_LEAKY_BUCKET: *out = fg_leaky_bucket(capacity, x[0]); break;
    case FG_GCRA: *out = fg_gcra(capacity, x[0], x[1]); break;
    }
    return 1;
}

/* ------------------------------------------------------------------ output */

static void print_result(const fg_result *r, int json) {
    cli_print_decision(r, json);
    if (json)
        printf(",\"source\":\"%s\"}\n", cli_source_name(r->source));
    else
        printf("  source          %s\n", cli_source_name(r->source));
}

/* ------------------------------------------------------------- subcommands */

static int cmd_decide(int argc, char **argv, int peek) {
    cli_opts o;
    fg_limit limit;
    fg_result r;
    fg_error err;
    fg_client *c;
    fg_code code;
    int npos = cli_parse_options(argc, argv, CLI_TAKES_HELP | CLI_TAKES_COST, &o);

    if (npos < 0) return CLI_EXIT_ERROR;
    if (npos < 2) return cli_error("%s needs KEY ALGORITHM ARGS...", peek ? "peek" : "check");
    if (!parse_limit(npos - 1, argv + 1, &limit)) return CLI_EXIT_ERROR;
    if ((c = cli_open(o.url, &err)) == NULL) return cli_library_error(&err);
    code = peek ? fg_peek(c, argv[0], &limit, o.cost, &r, &err)
                : fg_check(c, argv[0], &limit, o.cost, &r, &err);
    fg_close(c);
    if (code != FG_CODE_OK) return cli_library_error(&err);
    print_result(&r, o.json);
    return r.allowed ? CLI_EXIT_OK : CLI_EXIT_DENIED;
}

static int cmd_inspect(int argc, char **argv) {
    cli_opts o;
    fg_error err;
    fg_client *c;
    fg_code code;
    char *buf;
    int npos = cli_parse_options(argc, argv, CLI_TAKES_HELP, &o), exists;

    if (npos < 0) return CLI_EXIT_ERROR;
    if (npos != 1) return cli_error("inspect takes one KEY");
    if ((buf = malloc(INSPECT_BUFLEN)) == NULL) return cli_error("out of memory");
    if ((c = cli_open(o.url, &err)) == NULL) {
        free(buf);
        return cli_library_error(&err);
    }
    code = fg_inspect(c, argv[0], buf, INSPECT_BUFLEN, &err);
    fg_close(c);
    if (code != FG_CODE_OK) {
        free(buf);
        return cli_library_error(&err);
    }
    exists = buf[0] != '\0';
    if (o.json) {
        fputs("{\"key\":", stdout);
        cli_print_json_string(argv[0]);
        fputs(",\"state\":", stdout);
        if (exists)
            cli_print_json_string(buf);
        else
            fputs("null", stdout);
        fputs("}\n", stdout);
    } else {
        printf("%s\n", exists ? buf : "(no state)");
    }
    free(buf);
    return exists ? CLI_EXIT_OK : CLI_EXIT_DENIED;
}

static int cmd_reset(int argc, char **argv) {
    cli_opts o;
    fg_error err;
    fg_client *c;
    fg_code code;
    bool existed = false;
    int npos = cli_parse_options(argc, argv, CLI_TAKES_HELP, &o);

    if (npos < 0) return CLI_EXIT_ERROR;
    if (npos != 1) return cli_error("reset takes one KEY");
    if ((c = cli_open(o.url, &err)) == NULL) return cli_library_error(&err);
    code = fg_reset(c, argv[0], &existed, &err);
    fg_close(c);
    if (code != FG_CODE_OK) return cli_library_error(&err);
    if (o.json)
        printf("{\"existed\":%s}\n", existed ? "true" : "false");
    else
        printf("%s\n", existed ? "reset" : "(no state)");
    return CLI_EXIT_OK;
}

int main(int argc, char **argv) {
    const char *cmd = argc > 1 ? argv[1] : NULL;

    if (cmd == NULL) {
        fputs(cli_usage, stderr);
        return CLI_EXIT_ERROR;
    }
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        fputs(cli_usage, stdout);
        return CLI_EXIT_OK;
    }
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("floodgate %s\n", FLOODGATE_VERSION);
        return CLI_EXIT_OK;
    }
    if (!strcmp(cmd, "check")) return cmd_decide(argc - 2, argv + 2, 0);
    if (!strcmp(cmd, "peek")) return cmd_decide(argc - 2, argv + 2, 1);
    if (!strcmp(cmd, "inspect")) return cmd_inspect(argc - 2, argv + 2);
    if (!strcmp(cmd, "reset")) return cmd_reset(argc - 2, argv + 2);
    if (!strcmp(cmd, "simulate")) return cli_simulate(argc - 2, argv + 2);
    if (!strcmp(cmd, "policy")) return cli_policy(argc - 2, argv + 2);
    return cli_error("unknown command '%s' (see floodgate --help)", cmd);
}
