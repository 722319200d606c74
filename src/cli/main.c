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
 * Every subcommand is a thin layer over one library call: the tool parses
 * numbers (strictly: no inf, nan, hexadecimal or trailing garbage) but leaves
 * their ranges to the library, so that the tool accepts exactly what the
 * library and the server accept, and reports the library's own message.
 *
 * Options start with "--" and may be anywhere, so that a negative number
 * among ALGORITHM's arguments reaches the library (which refuses it with a
 * message naming the argument) instead of being taken for an option.
 *
 * Exit codes (cli.h): 0 allowed or done, 1 denied (inspect: no state), 2 error.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "floodgate.h"

/* Room for the largest state FG.INSPECT can show (fg_inspect refuses a
 * buffer too small): a sliding log of up to 100000 runs "ts_us,count", about
 * 20 bytes each. */
#define INSPECT_BUFLEN (4u << 20)

static const char usage[] =
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

/* ------------------------------------------------------------------ errors */

int cli_error(const char *fmt, ...) {
    va_list ap;
    fputs("floodgate: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return CLI_EXIT_ERROR;
}

/* The library passes the server's messages on as they are ("ERR limit must
 * be ..."); the code name already says what kind of error it is. */
static int library_error(const fg_error *err) {
    const char *msg = err->message;
    if (strncmp(msg, "ERR ", 4) == 0) msg += 4;
    return cli_error("%s: %s", fg_code_name(err->code), msg);
}

/* ----------------------------------------------------------------- numbers */

/* strtoll and strtod skip leading blanks and accept "inf", "nan" and "0x1p3";
 * the server refuses them all, so the tool does too. */
static int parse_int64(const char *s, int64_t *out) {
    char *end;
    long long v;
    if (*s == '\0' || isspace((unsigned char)*s)) return 0;
    errno = 0;
    v = strtoll(s, &end, 10);
    if (errno != 0 || *end != '\0') return 0;
    *out = v;
    return 1;
}

static int parse_number(const char *s, double *out) {
    char *end;
    double v;
    if (*s == '\0' || isspace((unsigned char)*s) || strpbrk(s, "xX")) return 0;
    errno = 0;
    v = strtod(s, &end);
    if (errno != 0 || *end != '\0' || !isfinite(v)) return 0;
    *out = v;
    return 1;
}

/* ----------------------------------------------------------------- options */

typedef struct cli_opts {
    const char *url;
    int64_t cost;
    int json;
} cli_opts;

/* Takes the options out of argv, wherever they are ("--url X" or
 * "--url=X"), and moves the positional arguments to its front, in order;
 * `with_cost` tells whether --cost belongs to the subcommand. Options start
 * with "--" so that negative numbers stay positional; "--" ends the options
 * (for a key that starts with "--"). Returns how many positional arguments
 * there are, or -1 after printing the error. */
static int parse_options(int argc, char **argv, int with_cost, cli_opts *o) {
    int i, npos = 0, options = 1;
    const char *env = getenv("FLOODGATE_URL");

    o->url = env && *env ? env : "mem:";
    o->cost = 1;
    o->json = 0;
    for (i = 0; i < argc; i++) {
        const char *a = argv[i], *eq = strchr(a, '=');
        size_t namelen = eq ? (size_t)(eq - a) : strlen(a);
        const char *value = eq ? eq + 1 : (i + 1 < argc ? argv[i + 1] : NULL);

        if (!options || strncmp(a, "--", 2) != 0) {
            argv[npos++] = argv[i];
            continue;
        }
        if (strcmp(a, "--") == 0) {
            options = 0;
        } else if (strcmp(a, "--help") == 0) {
            fputs(usage, stdout);
            exit(CLI_EXIT_OK);
        } else if (strcmp(a, "--json") == 0) {
            o->json = 1;
        } else if (namelen == 5 && strncmp(a, "--url", 5) == 0) {
            if (value == NULL) return cli_error("--url needs a value"), -1;
            o->url = value;
            i += !eq; /* the value was the next argument */
        } else if (with_cost && namelen == 6 && strncmp(a, "--cost", 6) == 0) {
            if (value == NULL) return cli_error("--cost needs a value"), -1;
            if (!parse_int64(value, &o->cost))
                return cli_error("--cost must be an integer, not '%s'", value), -1;
            i += !eq;
        } else {
            return cli_error("unknown option '%s' (see floodgate --help)", a), -1;
        }
    }
    return npos;
}

/* -------------------------------------------------------------- algorithms */

typedef struct cli_algorithm {
    const char *name;
    fg_algorithm algorithm;
    int nargs;
    const char *args[3]; /* for messages; the first is an integer */
} cli_algorithm;

static const cli_algorithm algorithms[] = {
    {"fixed", FG_FIXED_WINDOW, 2, {"LIMIT", "WINDOW_MS"}},
    {"sliding", FG_SLIDING_WINDOW, 2, {"LIMIT", "WINDOW_MS"}},
    {"slidelog", FG_SLIDING_LOG, 2, {"LIMIT", "WINDOW_MS"}},
    {"token", FG_TOKEN_BUCKET, 2, {"CAPACITY", "RATE_PER_SEC"}},
    {"leaky", FG_LEAKY_BUCKET, 2, {"CAPACITY", "RATE_PER_SEC"}},
    {"gcra", FG_GCRA, 3, {"CAPACITY", "COUNT", "PERIOD_MS"}},
};

static const cli_algorithm *find_algorithm(const char *name) {
    size_t i;
    for (i = 0; i < sizeof(algorithms) / sizeof(algorithms[0]); i++)
        if (strcmp(algorithms[i].name, name) == 0) return &algorithms[i];
    return NULL;
}

/* ALGORITHM ARGS... into a limit. Returns 0 after printing the error. */
static int parse_limit(int argc, char **argv, fg_limit *out) {
    const cli_algorithm *a = find_algorithm(argv[0]);
    int64_t capacity;
    double x[2] = {0, 0};
    int i;

    if (a == NULL)
        return !cli_error("unknown algorithm '%s' (fixed, sliding, slidelog, token, leaky "
                          "or gcra)", argv[0]);
    if (argc - 1 != a->nargs)
        return !cli_error("%s takes %s %s%s%s", a->name, a->args[0], a->args[1],
                          a->nargs == 3 ? " " : "", a->nargs == 3 ? a->args[2] : "");
    if (!parse_int64(argv[1], &capacity))
        return !cli_error("%s: %s must be an integer, not '%s'", a->name, a->args[0], argv[1]);
    for (i = 1; i < a->nargs; i++)
        if (!parse_number(argv[i + 1], &x[i - 1]))
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

static const char *source_name(fg_source s) {
    switch (s) {
    case FG_SOURCE_SERVER: return "server";
    case FG_SOURCE_MEMORY: return "memory";
    case FG_SOURCE_DENIAL_CACHE: return "denial_cache";
    case FG_SOURCE_FAILED_OPEN: return "failed_open";
    case FG_SOURCE_FAILED_CLOSED: return "failed_closed";
    case FG_SOURCE_FALLBACK: return "fallback";
    case FG_SOURCE_LEASE: return "lease";
    }
    return "unknown";
}

/* A JSON string: keys and states are arbitrary bytes, so quote and escape. */
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

static void print_result(const fg_result *r, int json) {
    if (json) {
        printf("{\"allowed\":%s,\"limit\":%lld,\"remaining\":%lld,\"retry_after_ms\":%lld,"
               "\"reset_after_ms\":%lld,\"source\":\"%s\"}\n",
               r->allowed ? "true" : "false", (long long)r->limit, (long long)r->remaining,
               (long long)r->retry_after_ms, (long long)r->reset_after_ms,
               source_name(r->source));
        return;
    }
    printf("%s\n", r->allowed ? "allowed" : "denied");
    printf("  limit           %lld\n", (long long)r->limit);
    printf("  remaining       %lld\n", (long long)r->remaining);
    printf("  retry_after_ms  %lld\n", (long long)r->retry_after_ms);
    printf("  reset_after_ms  %lld\n", (long long)r->reset_after_ms);
    printf("  source          %s\n", source_name(r->source));
}

/* ------------------------------------------------------------- subcommands */

static fg_client *open_client(const char *url, fg_error *err) {
    fg_options opts;
    fg_options_init(&opts);
    return fg_open(url, &opts, err);
}

static int cmd_decide(int argc, char **argv, int peek) {
    cli_opts o;
    fg_limit limit;
    fg_result r;
    fg_error err;
    fg_client *c;
    fg_code code;
    int npos = parse_options(argc, argv, 1, &o);

    if (npos < 0) return CLI_EXIT_ERROR;
    if (npos < 2) return cli_error("%s needs KEY ALGORITHM ARGS...", peek ? "peek" : "check");
    if (!parse_limit(npos - 1, argv + 1, &limit)) return CLI_EXIT_ERROR;
    if ((c = open_client(o.url, &err)) == NULL) return library_error(&err);
    code = peek ? fg_peek(c, argv[0], &limit, o.cost, &r, &err)
                : fg_check(c, argv[0], &limit, o.cost, &r, &err);
    fg_close(c);
    if (code != FG_CODE_OK) return library_error(&err);
    print_result(&r, o.json);
    return r.allowed ? CLI_EXIT_OK : CLI_EXIT_DENIED;
}

static int cmd_inspect(int argc, char **argv) {
    cli_opts o;
    fg_error err;
    fg_client *c;
    fg_code code;
    char *buf;
    int npos = parse_options(argc, argv, 0, &o), exists;

    if (npos < 0) return CLI_EXIT_ERROR;
    if (npos != 1) return cli_error("inspect takes one KEY");
    if ((buf = malloc(INSPECT_BUFLEN)) == NULL) return cli_error("out of memory");
    if ((c = open_client(o.url, &err)) == NULL) {
        free(buf);
        return library_error(&err);
    }
    code = fg_inspect(c, argv[0], buf, INSPECT_BUFLEN, &err);
    fg_close(c);
    if (code != FG_CODE_OK) {
        free(buf);
        return library_error(&err);
    }
    exists = buf[0] != '\0';
    if (o.json) {
        fputs("{\"key\":", stdout);
        print_json_string(argv[0]);
        fputs(",\"state\":", stdout);
        if (exists)
            print_json_string(buf);
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
    int npos = parse_options(argc, argv, 0, &o);

    if (npos < 0) return CLI_EXIT_ERROR;
    if (npos != 1) return cli_error("reset takes one KEY");
    if ((c = open_client(o.url, &err)) == NULL) return library_error(&err);
    code = fg_reset(c, argv[0], &existed, &err);
    fg_close(c);
    if (code != FG_CODE_OK) return library_error(&err);
    if (o.json)
        printf("{\"existed\":%s}\n", existed ? "true" : "false");
    else
        printf("%s\n", existed ? "reset" : "(no state)");
    return CLI_EXIT_OK;
}

int main(int argc, char **argv) {
    const char *cmd = argc > 1 ? argv[1] : NULL;

    if (cmd == NULL) {
        fputs(usage, stderr);
        return CLI_EXIT_ERROR;
    }
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        fputs(usage, stdout);
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
