/*
 * main.c - floodgate, the command-line tool of libfloodgate.
 *
 *   floodgate check   [--url URL] [--cost N] [--json] KEY ALGORITHM ARGS...
 *   floodgate peek    [--url URL] [--cost N] [--json] KEY ALGORITHM ARGS...
 *   floodgate inspect [--url URL] [--json] KEY
 *   floodgate reset   [--url URL] [--json] KEY
 *   floodgate simulate [--out DIR] [--plot]
 *   floodgate policy apply|list|show|check|delete ...   (policy.c)
 *   floodgate lock ..., floodgate semaphore ...          (locks.c)
 *   floodgate bloom ...                                   (bloom.c)
 *   floodgate distinct ...                                (distinct.c)
 *   floodgate doctor URL                                  (doctor.c)
 *   floodgate functions load|show [URL]                   (functions.c)
 *
 * Every subcommand is a thin layer over one library call; numbers and
 * options are read as common.c reads them for every subcommand (strictly,
 * ranges left to the library; options anywhere).
 *
 * Exit codes (cli.h): 0 allowed or done, 1 denied (inspect: no state), 2 error.
 * inspect --json turns FG.INSPECT's "field=value" words into the members of
 * an object, so that scripts read numbers as numbers.
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
    "usage: floodgate <command> [arguments] [options]\n"
    "\n"
    "rate limits:\n"
    "  check KEY ALGORITHM ARGS...    take --cost N units (default 1), print the decision\n"
    "  peek KEY ALGORITHM ARGS...     the decision check would give, taking nothing\n"
    "  inspect KEY                    the stored state of KEY\n"
    "  reset KEY                      forget the state of KEY\n"
    "families:\n"
    "  lock take|release|extend|info  locks with an owner, a lease and a fencing token\n"
    "  semaphore acquire|release      permits of a semaphore (a concurrency limit)\n"
    "  bloom reserve|add|exists|card  Bloom filters\n"
    "  distinct add|count             distinct items over a time window\n"
    "  policy apply|list|show|check|delete\n"
    "                                 named policies (docs/policies.md)\n"
    "tools:\n"
    "  doctor URL                     what a server offers, and what makes it unsafe\n"
    "  functions load|show [URL]      the server scripts as a Functions library, for\n"
    "                                 FCALL (docs/scripts.md); load --replace replaces it\n"
    "  simulate [--out DIR] [--plot]  every algorithm on the same traffic, in plots\n"
    "  version, --version             print the version\n"
    "  help, --help                   print this help\n"
    "\n"
    "floodgate COMMAND --help prints the arguments and options of a command.\n"
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
    "exit). Default: $FLOODGATE_URL, else mem:. Commands that change a server's\n"
    "state (lock, semaphore, bloom, distinct, policy apply and delete) refuse mem:.\n"
    "\n"
    "Exit status: 0 allowed or done, 1 denied (or not acquired, not held, absent,\n"
    "no state, no such policy; doctor: a hazard), 2 error.\n";

const char cli_common_options[] =
    "options of every command:\n"
    "  --url URL    the server (see floodgate --help); default $FLOODGATE_URL, else mem:\n"
    "  --json       print one JSON value\n"
    "  --help       print this help\n";

static const cli_command check_command = {
    "check",
    "  floodgate check KEY ALGORITHM ARGS... [--cost N]\n"
    "      take N units (default 1) of KEY's limit and print the decision;\n"
    "      exit 0 allowed, 1 denied. ALGORITHM ARGS: see floodgate --help\n",
    CLI_TAKES_COST};

static const cli_command peek_command = {
    "peek",
    "  floodgate peek KEY ALGORITHM ARGS... [--cost N]\n"
    "      the decision check would give, taking and writing nothing\n",
    CLI_TAKES_COST};

static const cli_command inspect_command = {
    "inspect",
    "  floodgate inspect KEY\n"
    "      the stored state of a rate-limit KEY as FIELD=VALUE words (--json: an\n"
    "      object, one member per field, numbers as numbers); exit 1 when none\n",
    0};

static const cli_command reset_command = {
    "reset",
    "  floodgate reset KEY\n"
    "      forget the state of a rate-limit KEY\n",
    0};

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

/* A value of FG.INSPECT's text as JSON: an integer or a decimal number as
 * a number, a list of integers (a sliding log's "ts,count,ts,count") as an
 * array, anything else as a string. */
static void print_value_json(char *v) {
    int64_t n;
    double d;
    char *end = v + strlen(v), *p = v;
    if (cli_parse_int64(v, &n)) {
        printf("%lld", (long long)n);
    } else if (cli_parse_number(v, &d)) {
        printf("%.17g", d);
    } else if (strchr(v, ',') != NULL && !strstr(v, ",,") && v[0] != ',' && end[-1] != ',' &&
               strspn(v, "-0123456789,") == strlen(v)) {
        putchar('[');
        for (char *comma; p < end; p = comma + 1) {
            comma = strchr(p, ',');
            if (comma == NULL) comma = end;
            *comma = '\0';
            printf("%s%lld", p == v ? "" : ",", cli_parse_int64(p, &n) ? (long long)n : 0LL);
        }
        putchar(']');
    } else {
        cli_print_json_string(v);
    }
}

/* "type=bucket tat_ns=1 pttl=2" as {"type":"bucket","tat_ns":1,"pttl":2}. */
static void print_state_json(char *state) {
    const char *sep = "";
    putchar('{');
    for (char *word = strtok(state, " "); word != NULL; word = strtok(NULL, " ")) {
        char *eq = strchr(word, '=');
        if (eq == NULL) continue;
        *eq = '\0';
        fputs(sep, stdout);
        cli_print_json_string(word);
        putchar(':');
        print_value_json(eq + 1);
        sep = ",";
    }
    putchar('}');
}

/* ------------------------------------------------------------- subcommands */

static int cmd_decide(int argc, char **argv, int peek) {
    const cli_command *cmd = peek ? &peek_command : &check_command;
    cli_opts o;
    fg_limit limit;
    fg_result r;
    fg_error err;
    fg_client *c;
    fg_code code;
    int npos = cli_parse_options(argc, argv, cmd, &o);

    if (npos < 0) return CLI_EXIT_ERROR;
    if (npos < 2) return cli_error("%s needs KEY ALGORITHM ARGS...", cmd->name);
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
    int npos = cli_parse_options(argc, argv, &inspect_command, &o), exists;

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
            print_state_json(buf);
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
    int npos = cli_parse_options(argc, argv, &reset_command, &o);

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
    if (!strcmp(cmd, "lock")) return cli_lock(argc - 2, argv + 2);
    if (!strcmp(cmd, "semaphore")) return cli_semaphore(argc - 2, argv + 2);
    if (!strcmp(cmd, "bloom")) return cli_bloom(argc - 2, argv + 2);
    if (!strcmp(cmd, "distinct")) return cli_distinct(argc - 2, argv + 2);
    if (!strcmp(cmd, "doctor")) return cli_doctor(argc - 2, argv + 2);
    if (!strcmp(cmd, "functions")) return cli_functions(argc - 2, argv + 2);
    return cli_error("unknown command '%s' (see floodgate --help)", cmd);
}
