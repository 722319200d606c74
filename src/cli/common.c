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
 * naming the argument) instead of being taken for an option. A command
 * accepts only the options it declares (cli_command.takes), and --help
 * prints its own usage.
 *
 * A family (lock, semaphore, bloom, distinct, policy) is a table of
 * subcommands run by cli_run_family: one place parses the options, refuses
 * mem: for what changes a server's state, opens and closes the client, and
 * prints the family's help from its subcommands' usages.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
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

static int number_option(int argc, char **argv, int *i, const char *name, double *out) {
    const char *v = option_value(argc, argv, i, name);
    if (v == NULL) return 0;
    if (cli_parse_number(v, out)) return 1;
    cli_error("%s must be a decimal number, not '%s'", name, v);
    return 0;
}

/* --last N followed by s, m, h or d: "24h". */
static int window_option(int argc, char **argv, int *i, fg_window *w) {
    static const struct { char suffix; fg_time_unit unit; } units[] = {
        {'s', FG_SECONDS}, {'m', FG_MINUTES}, {'h', FG_HOURS}, {'d', FG_DAYS}};
    const char *v = option_value(argc, argv, i, "--last");
    char number[24];
    size_t len = v ? strlen(v) : 0;
    int64_t n;
    if (v == NULL) return 0;
    for (size_t u = 0; len >= 2 && len < sizeof(number) && u < 4; u++) {
        if (v[len - 1] != units[u].suffix) continue;
        memcpy(number, v, len - 1);
        number[len - 1] = '\0';
        if (!cli_parse_int64(number, &n)) break;
        *w = fg_last(n, units[u].unit);
        return 1;
    }
    cli_error("--last must be a number and s, m, h or d (as 24h), not '%s'", v);
    return 0;
}

static int flag(int *out) {
    *out = 1;
    return 1;
}

/* One option of those cmd takes, at argv[*i]: 1 taken, 0 after an error. */
static int take_option(int argc, char **argv, int *i, const cli_command *cmd, cli_opts *o,
                       int64_t *from_to) {
    const char *a = argv[*i];
    unsigned t = cmd->takes;
    if (strcmp(a, "--json") == 0) return flag(&o->json);
    if (is_option(a, "--url")) return (o->url = option_value(argc, argv, i, "--url")) != NULL;
    if ((t & CLI_TAKES_ID) && is_option(a, "--id"))
        return (o->id = option_value(argc, argv, i, "--id")) != NULL;
    if ((t & CLI_TAKES_OWNER) && is_option(a, "--owner"))
        return (o->owner = option_value(argc, argv, i, "--owner")) != NULL;
    if ((t & CLI_TAKES_COST) && is_option(a, "--cost"))
        return integer_option(argc, argv, i, "--cost", &o->cost);
    if ((t & CLI_TAKES_WAIT) && is_option(a, "--wait"))
        return integer_option(argc, argv, i, "--wait", &o->wait_ms);
    if ((t & CLI_TAKES_LEASE) && is_option(a, "--lease"))
        return integer_option(argc, argv, i, "--lease", &o->lease_ms);
    if ((t & CLI_TAKES_PERMITS) && is_option(a, "--permits"))
        return integer_option(argc, argv, i, "--permits", &o->permits);
    if ((t & CLI_TAKES_MODES) && strcmp(a, "--shared") == 0) return flag(&o->shared);
    if ((t & CLI_TAKES_MODES) && strcmp(a, "--reentrant") == 0) return flag(&o->reentrant);
    if ((t & CLI_TAKES_BLOOM) && is_option(a, "--error"))
        return number_option(argc, argv, i, "--error", &o->bloom.error_rate);
    if ((t & CLI_TAKES_BLOOM) && is_option(a, "--capacity"))
        return integer_option(argc, argv, i, "--capacity", &o->bloom.capacity);
    if ((t & CLI_TAKES_BLOOM) && is_option(a, "--expansion")) {
        int64_t x;
        if (!integer_option(argc, argv, i, "--expansion", &x)) return 0;
        if (x < INT_MIN || x > INT_MAX) return !cli_error("--expansion is out of range");
        o->bloom.expansion = (int)x;
        return 1;
    }
    if ((t & CLI_TAKES_AT) && is_option(a, "--at"))
        return integer_option(argc, argv, i, "--at", &o->at_us);
    if ((t & CLI_TAKES_WINDOW) && is_option(a, "--last"))
        return (o->has_window = window_option(argc, argv, i, &o->window));
    if ((t & CLI_TAKES_WINDOW) && is_option(a, "--from"))
        return integer_option(argc, argv, i, "--from", &from_to[0]);
    if ((t & CLI_TAKES_WINDOW) && is_option(a, "--to"))
        return integer_option(argc, argv, i, "--to", &from_to[1]);
    if ((t & CLI_TAKES_DRY_RUN) && strcmp(a, "--dry-run") == 0) return flag(&o->dry_run);
    if ((t & CLI_TAKES_REPLACE) && strcmp(a, "--replace") == 0) return flag(&o->replace);
    return !cli_error("unknown option '%s' for %s (see floodgate %s --help)", a, cmd->name,
                      cmd->name);
}

/* --from and --to go together, and not with --last. */
static int finish_window(cli_opts *o, const int64_t *from_to) {
    int from = from_to[0] != INT64_MIN, to = from_to[1] != INT64_MIN;
    if (!from && !to) return 1;
    if (from != to) return !cli_error("--from and --to go together");
    if (o->has_window) return !cli_error("give --last or --from and --to, not both");
    o->window = fg_between(from_to[0], from_to[1]);
    o->has_window = 1;
    return 1;
}

static void default_options(cli_opts *o) {
    const char *env = getenv("FLOODGATE_URL");
    memset(o, 0, sizeof(*o));
    o->url = env && *env ? env : "mem:";
    o->cost = 1;
    o->permits = o->at_us = -1;
    o->wait_ms = CLI_NOT_GIVEN; /* -1 is a wait without limit */
    o->lease_ms = 30000;
    fg_bloom_options_init(&o->bloom);
}

int cli_parse_options(int argc, char **argv, const cli_command *cmd, cli_opts *o) {
    int64_t from_to[2] = {INT64_MIN, INT64_MIN};
    int npos = 0, options = 1, ok = 1;
    default_options(o);
    for (int i = 0; i < argc && ok; i++) {
        const char *a = argv[i];
        if (!options || strncmp(a, "--", 2) != 0) {
            argv[npos++] = argv[i];
        } else if (strcmp(a, "--") == 0) {
            options = 0;
        } else if (strcmp(a, "--help") == 0) {
            cli_print_usage(stdout, cmd->usage);
            exit(CLI_EXIT_OK);
        } else {
            ok = take_option(argc, argv, &i, cmd, o, from_to);
        }
    }
    return ok && finish_window(o, from_to) ? npos : -1;
}

int cli_integer_argument(const char *command, const char *name, const char *s, int64_t *out) {
    if (cli_parse_int64(s, out)) return 1;
    return !cli_error("%s: %s must be an integer, not '%s'", command, name, s);
}

/* --------------------------------------------------------------- families */

void cli_print_usage(FILE *f, const char *usage) {
    fprintf(f, "usage:\n%s\n%s", usage, cli_common_options);
}

static int is_mem(const char *url) {
    return url == NULL || url[0] == '\0' || strcmp(url, "mem:") == 0;
}

static void print_family_usage(FILE *f, const char *about, const cli_subcommand *subs,
                               size_t nsubs) {
    fprintf(f, "%s\nusage:\n", about);
    for (size_t i = 0; i < nsubs; i++)
        fputs(subs[i].command.usage, f);
    fprintf(f, "\n%s", cli_common_options);
}

static int unknown_subcommand(const char *family, const char *sub, const cli_subcommand *subs,
                              size_t nsubs) {
    char names[256] = "";
    for (size_t i = 0; i < nsubs; i++)
        snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s",
                 i == 0 ? "" : i + 1 == nsubs ? " or " : ", ",
                 subs[i].command.name + strlen(family) + 1);
    if (sub == NULL) return cli_error("%s needs %s (see floodgate %s --help)", family, names, family);
    return cli_error("unknown %s subcommand '%s': use %s (see floodgate %s --help)", family, sub,
                     names, family);
}

static const cli_subcommand *find_subcommand(const char *family, const char *sub,
                                             const cli_subcommand *subs, size_t nsubs) {
    for (size_t i = 0; sub != NULL && i < nsubs; i++)
        if (strcmp(subs[i].command.name + strlen(family) + 1, sub) == 0) return &subs[i];
    return NULL;
}

int cli_run_family(const char *family, const char *about, const cli_subcommand *subs,
                   size_t nsubs, int argc, char **argv) {
    const char *sub = argc > 0 ? argv[0] : NULL;
    const cli_subcommand *s = find_subcommand(family, sub, subs, nsubs);
    cli_opts o;
    fg_error err;
    if (sub != NULL && (!strcmp(sub, "--help") || !strcmp(sub, "-h") || !strcmp(sub, "help"))) {
        print_family_usage(stdout, about, subs, nsubs);
        return CLI_EXIT_OK;
    }
    if (s == NULL) return unknown_subcommand(family, sub, subs, nsubs);
    int npos = cli_parse_options(argc - 1, argv + 1, &s->command, &o);
    if (npos < 0) return CLI_EXIT_ERROR;
    if (o.dry_run) o.url = "mem:";
    if ((s->command.takes & CLI_NEEDS_SERVER) && !o.dry_run && is_mem(o.url))
        return cli_error("%s changes a server's state, which mem: (the URL without --url or "
                         "$FLOODGATE_URL) forgets at exit: give --url redis://HOST[:PORT]%s",
                         s->command.name,
                         s->command.takes & CLI_TAKES_DRY_RUN ? ", or --dry-run to only check" : "");
    fg_client *c = cli_open(o.url, &err);
    if (c == NULL) return cli_library_error(&err);
    int rc = s->run(c, npos, argv + 1, &o);
    fg_close(c);
    return rc;
}

int cli_items_of(char **argv, size_t n, cli_items *out) {
    out->n = n;
    out->items = malloc(n * sizeof(*out->items));
    out->lens = malloc(n * sizeof(*out->lens));
    if (out->items == NULL || out->lens == NULL) {
        cli_items_free(out);
        return !cli_error("out of memory");
    }
    for (size_t i = 0; i < n; i++)
        out->items[i] = argv[i], out->lens[i] = strlen(argv[i]);
    return 1;
}

void cli_items_free(cli_items *it) {
    free(it->items);
    free(it->lens);
}

const char *cli_plural(int64_t n, const char *one, const char *many) {
    return n == 1 ? one : many;
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
