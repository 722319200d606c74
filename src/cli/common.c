/*
 * common.c - what every subcommand of the floodgate tool does the same way
 * (cli.h): its errors and the library's, its numbers, its options, its
 * client, the names it prints, and the lines of a decision.
 *
 * Numbers are parsed strictly (no blanks, inf, nan, hexadecimal or trailing
 * garbage), as the server parses them, and their ranges are left to the
 * library, so that the tool accepts exactly what the library accepts and
 * reports the library's own message.
 *
 * Options start with "--" and may be anywhere, so that a negative number
 * among the arguments reaches the library (which refuses it with a message
 * naming the argument) instead of being taken for an option.
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
int cli_library_error(const fg_error *err) {
    const char *msg = err->message;
    if (strncmp(msg, "ERR ", 4) == 0) msg += 4;
    return cli_error("%s: %s", fg_code_name(err->code), msg);
}

/* ----------------------------------------------------------------- numbers */

/* strtoll and strtod skip leading blanks and accept "inf", "nan" and "0x1p3";
 * the server refuses them all, so the tool does too. */
int cli_parse_int64(const char *s, int64_t *out) {
    char *end;
    long long v;
    if (*s == '\0' || isspace((unsigned char)*s)) return 0;
    errno = 0;
    v = strtoll(s, &end, 10);
    if (errno != 0 || *end != '\0') return 0;
    *out = v;
    return 1;
}

int cli_parse_number(const char *s, double *out) {
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

/* Is arg the option `name`, alone or with "=value"? */
static int is_option(const char *arg, const char *name) {
    size_t len = strlen(name);
    return strncmp(arg, name, len) == 0 && (arg[len] == '\0' || arg[len] == '=');
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
    if (cli_parse_int64(v, out)) return 1;
    cli_error("%s must be an integer, not '%s'", name, v);
    return 0;
}

int cli_parse_options(int argc, char **argv, unsigned takes, cli_opts *o) {
    const char *env = getenv("FLOODGATE_URL");
    int npos = 0, options = 1, ok = 1;
    *o = (cli_opts){env && *env ? env : "mem:", NULL, 1, -1, 0};
    for (int i = 0; i < argc && ok; i++) {
        const char *a = argv[i];
        if (!options || strncmp(a, "--", 2) != 0) {
            argv[npos++] = argv[i];
        } else if (strcmp(a, "--") == 0) {
            options = 0;
        } else if ((takes & CLI_TAKES_HELP) && strcmp(a, "--help") == 0) {
            fputs(cli_usage, stdout);
            exit(CLI_EXIT_OK);
        } else if (strcmp(a, "--json") == 0) {
            o->json = 1;
        } else if (is_option(a, "--url")) {
            ok = (o->url = option_value(argc, argv, &i, "--url")) != NULL;
        } else if ((takes & CLI_TAKES_ID) && is_option(a, "--id")) {
            ok = (o->id = option_value(argc, argv, &i, "--id")) != NULL;
        } else if ((takes & CLI_TAKES_COST) && is_option(a, "--cost")) {
            ok = integer_option(argc, argv, &i, "--cost", &o->cost);
        } else if ((takes & CLI_TAKES_WAIT) && is_option(a, "--wait")) {
            ok = integer_option(argc, argv, &i, "--wait", &o->wait_ms);
        } else {
            ok = !cli_error("unknown option '%s' (see floodgate --help)", a);
        }
    }
    return ok ? npos : -1;
}

/* ------------------------------------------------------------------ client */

fg_client *cli_open(const char *url, fg_error *err) {
    fg_options opts;
    fg_options_init(&opts);
    return fg_open(url, &opts, err);
}

/* ------------------------------------------------------------------- names */

static const cli_algorithm algorithms[] = {
    {"fixed", FG_FIXED_WINDOW, 2, {"LIMIT", "WINDOW_MS"}},
    {"sliding", FG_SLIDING_WINDOW, 2, {"LIMIT", "WINDOW_MS"}},
    {"slidelog", FG_SLIDING_LOG, 2, {"LIMIT", "WINDOW_MS"}},
    {"token", FG_TOKEN_BUCKET, 2, {"CAPACITY", "RATE_PER_SEC"}},
    {"leaky", FG_LEAKY_BUCKET, 2, {"CAPACITY", "RATE_PER_SEC"}},
    {"gcra", FG_GCRA, 3, {"CAPACITY", "COUNT", "PERIOD_MS"}},
};

#define NALGORITHMS (sizeof(algorithms) / sizeof(algorithms[0]))

const cli_algorithm *cli_find_algorithm(const char *name) {
    for (size_t i = 0; i < NALGORITHMS; i++)
        if (strcmp(algorithms[i].name, name) == 0) return &algorithms[i];
    return NULL;
}

const char *cli_algorithm_name(fg_algorithm a) {
    for (size_t i = 0; i < NALGORITHMS; i++)
        if (algorithms[i].algorithm == a) return algorithms[i].name;
    return "unknown";
}

const char *cli_source_name(fg_source s) {
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

/* ------------------------------------------------------------------ output */

/* Keys, names and states are arbitrary bytes: quoted and escaped. */
void cli_print_json_string(const char *s) {
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

void cli_print_decision(const fg_result *r, int json) {
    if (json) {
        printf("{\"allowed\":%s,\"limit\":%lld,\"remaining\":%lld,\"retry_after_ms\":%lld,"
               "\"reset_after_ms\":%lld",
               r->allowed ? "true" : "false", (long long)r->limit, (long long)r->remaining,
               (long long)r->retry_after_ms, (long long)r->reset_after_ms);
        return;
    }
    printf("%s\n", r->allowed ? "allowed" : "denied");
    printf("  limit           %lld\n", (long long)r->limit);
    printf("  remaining       %lld\n", (long long)r->remaining);
    printf("  retry_after_ms  %lld\n", (long long)r->retry_after_ms);
    printf("  reset_after_ms  %lld\n", (long long)r->reset_after_ms);
}
