/*
 * cli.h - what the files of the floodgate command-line tool share.
 *
 * main.c parses the command line and runs check, peek, inspect and reset;
 * simulate.c runs the algorithm comparison; policy.c applies, lists and
 * checks named policies; locks.c takes locks and semaphores; bloom.c and
 * distinct.c drive Bloom filters and unique counters; doctor.c examines a
 * server; functions.c puts the server scripts on a server as a Functions
 * library. common.c holds what they all do the same way: errors, numbers,
 * options, the dispatch of subcommands, the client, names and a decision's
 * lines.
 * Exit codes are the same for every subcommand, so that scripts can rely
 * on them.
 *
 * The tool is a user of the library like any other: it includes the
 * public header only and links the shared library. doctor, lock info and
 * functions also ask a server directly, through hiredis (server.c).
 */
#ifndef FG_CLI_H
#define FG_CLI_H

#include <hiredis/hiredis.h>
#include <stdio.h>

#include "floodgate.h"

#define CLI_EXIT_OK     0 /* allowed, or done */
#define CLI_EXIT_DENIED 1 /* denied, or (inspect) no state */
#define CLI_EXIT_ERROR  2 /* bad arguments, or the library failed */

/* main.c: the text of floodgate --help, and the options every command
 * takes, which each command's --help ends with. */
extern const char cli_usage[];
extern const char cli_common_options[];

/* "usage:", the command's lines, and the common options. */
void cli_print_usage(FILE *f, const char *usage);

/* Prints "floodgate: <message>" on stderr and returns CLI_EXIT_ERROR. */
int cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The library's error, as cli_error prints it: "<code name>: <message>". */
int cli_library_error(const fg_error *err);

/* A whole string as an integer, or as a finite decimal number: 1 when it
 * is one (*out set), 0 otherwise. */
int cli_parse_int64(const char *s, int64_t *out);
int cli_parse_number(const char *s, double *out);

/* The options of a subcommand, and their defaults. */
/* An option not given, where -1 is a value (a wait without limit). */
#define CLI_NOT_GIVEN INT64_MIN

typedef struct cli_opts {
    const char *url;   /* --url; default $FLOODGATE_URL, else "mem:" */
    const char *id;    /* --id; NULL: the key */
    const char *owner; /* --owner; NULL: a fresh one (lock take, semaphore acquire) */
    int64_t cost;      /* --cost; 1 */
    int64_t wait_ms;   /* --wait (-1: without limit); CLI_NOT_GIVEN: none */
    int64_t lease_ms;  /* --lease; 30000 */
    int64_t permits;   /* --permits; -1: not given */
    int64_t at_us;     /* --at; -1: now */
    fg_bloom_options bloom; /* --error, --capacity, --expansion */
    int has_window;    /* --last or --from and --to were given */
    fg_window window;  /* --last N[smhd], or --from US --to US */
    int shared, reentrant, dry_run, json; /* --shared, --reentrant, --dry-run, --json */
    int replace;       /* --replace (functions load) */
} cli_opts;

/* What a command takes beyond --url, --json and --help. */
#define CLI_TAKES_COST    0x001u
#define CLI_TAKES_ID      0x002u
#define CLI_TAKES_WAIT    0x004u
#define CLI_TAKES_OWNER   0x008u
#define CLI_TAKES_LEASE   0x010u
#define CLI_TAKES_PERMITS 0x020u
#define CLI_TAKES_MODES   0x040u /* --shared, --reentrant */
#define CLI_TAKES_BLOOM   0x080u /* --error, --capacity, --expansion */
#define CLI_TAKES_AT      0x100u
#define CLI_TAKES_WINDOW  0x200u /* --last, --from, --to */
#define CLI_TAKES_DRY_RUN 0x400u
#define CLI_NEEDS_SERVER  0x800u /* refuses mem: (unless --dry-run) */
#define CLI_TAKES_REPLACE 0x1000u

/* A command: its name for messages ("lock take"), the text --help prints,
 * and what it takes. */
typedef struct cli_command {
    const char *name;
    const char *usage;
    unsigned takes;
} cli_command;

/* Takes the options out of argv, wherever they are ("--url X" or
 * "--url=X"), and moves the positional arguments to its front, in order;
 * "--" ends the options (for a key that starts with "--"). --help prints
 * cmd->usage on stdout and exits 0. Returns how many positional arguments
 * there are, or -1 after printing the error. */
int cli_parse_options(int argc, char **argv, const cli_command *cmd, cli_opts *o);

/* A subcommand of a family (floodgate lock take ...): it runs on an open
 * client with the positional arguments after its name. */
typedef struct cli_subcommand {
    cli_command command;
    int (*run)(fg_client *c, int npos, char **argv, const cli_opts *o);
} cli_subcommand;

/* floodgate FAMILY SUBCOMMAND ...: argv[0] is the subcommand. Parses its
 * options, opens the client (mem: refused for CLI_NEEDS_SERVER), runs it
 * and closes the client. "floodgate FAMILY --help" prints family_usage. */
int cli_run_family(const char *family, const char *family_usage, const cli_subcommand *subs,
                   size_t nsubs, int argc, char **argv);

/* Arguments as the items of a library call (Bloom filters, counters). */
typedef struct cli_items {
    const void **items;
    size_t *lens;
    size_t n;
} cli_items;

/* 0 after printing "out of memory". */
int cli_items_of(char **argv, size_t n, cli_items *out);
void cli_items_free(cli_items *it);

/* "1 policy", "2 policies". */
const char *cli_plural(int64_t n, const char *one, const char *many);

/* A positional integer argument: 0 after printing "<cmd>: NAME must be an
 * integer, not '...'". */
int cli_integer_argument(const char *command, const char *name, const char *s, int64_t *out);

/* fg_open with the default options. */
fg_client *cli_open(const char *url, fg_error *err);

/* An algorithm as the command line names it, with its arguments. */
typedef struct cli_algorithm {
    const char *name;
    fg_algorithm algorithm;
    int nargs;
    const char *args[3]; /* for messages; the first is an integer */
} cli_algorithm;

/* NULL for a name that is none of them. */
const cli_algorithm *cli_find_algorithm(const char *name);
const char *cli_algorithm_name(fg_algorithm a);
const char *cli_source_name(fg_source s);

/* A JSON string of s. */
void cli_print_json_string(const char *s);

/* A decision's first lines ("allowed" or "denied", then its numbers), or
 * with json the first fields of its object, left open for the caller's. */
void cli_print_decision(const fg_result *r, int json);

/* floodgate simulate [--out DIR] [--plot]; argv[0] is the first argument
 * after "simulate". */
int cli_simulate(int argc, char **argv);

/* server.c: a hiredis connection to a server (redis:, unix:, a cluster
 * URL's first seed), for the questions the library has no call for; closed
 * with redisFree. NULL after printing the error (an invalid URL, mem:, a
 * failed connect, AUTH or SELECT refused). */
redisContext *cli_server_open(const char *url);
/* The same for one node of a server: HOST:PORT with url's user and password
 * (a cluster URL's first seed's), for the commands that go to every master. */
redisContext *cli_server_open_node(const char *url, const char *host, int port);
/* Whether url names a cluster (redis+cluster://). */
int cli_server_is_cluster(const char *url);
/* A command's reply (freeReplyObject), or NULL after printing the failed
 * connection's error. */
redisReply *cli_server_command(redisContext *c, int argc, const char **argv);
/* Integers as numbers, strings as strings, arrays as arrays, nil as null. */
void cli_print_reply_json(const redisReply *r);

/* floodgate doctor URL (doctor.c). */
int cli_doctor(int argc, char **argv);

/* floodgate functions load|show (functions.c). */
int cli_functions(int argc, char **argv);

/* The families: argv[0] is the first argument after the family's name. */
int cli_policy(int argc, char **argv);
int cli_lock(int argc, char **argv);
int cli_semaphore(int argc, char **argv);
int cli_bloom(int argc, char **argv);
int cli_distinct(int argc, char **argv);

#endif
