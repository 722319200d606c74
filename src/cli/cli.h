/*
 * cli.h - what the files of the floodgate command-line tool share.
 *
 * main.c parses the command line and runs check, peek, inspect and reset;
 * simulate.c runs the algorithm comparison; policy.c applies, lists and
 * checks named policies; common.c holds what they all do the same way:
 * errors, numbers, options, the client, names and a decision's lines.
 * Exit codes are the same for every subcommand, so that scripts can rely
 * on them.
 *
 * The tool is a user of the library like any other: it includes the
 * public header only and links the shared library.
 */
#ifndef FG_CLI_H
#define FG_CLI_H

#include "floodgate.h"

#define CLI_EXIT_OK     0 /* allowed, or done */
#define CLI_EXIT_DENIED 1 /* denied, or (inspect) no state */
#define CLI_EXIT_ERROR  2 /* bad arguments, or the library failed */

/* main.c: the text of floodgate --help. */
extern const char cli_usage[];

/* Prints "floodgate: <message>" on stderr and returns CLI_EXIT_ERROR. */
int cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The library's error, as cli_error prints it: "<code name>: <message>". */
int cli_library_error(const fg_error *err);

/* A whole string as an integer, or as a finite decimal number: 1 when it
 * is one (*out set), 0 otherwise. */
int cli_parse_int64(const char *s, int64_t *out);
int cli_parse_number(const char *s, double *out);

/* The options of a subcommand, and their defaults. */
typedef struct cli_opts {
    const char *url; /* --url; default $FLOODGATE_URL, else "mem:" */
    const char *id;  /* --id; NULL: the key */
    int64_t cost;    /* --cost; 1 */
    int64_t wait_ms; /* --wait; -1: no --wait */
    int json;        /* --json */
} cli_opts;

/* What a subcommand takes beyond --url and --json. */
#define CLI_TAKES_HELP 1u /* --help prints the usage and exits */
#define CLI_TAKES_COST 2u
#define CLI_TAKES_ID   4u
#define CLI_TAKES_WAIT 8u

/* Takes the options out of argv, wherever they are ("--url X" or
 * "--url=X"), and moves the positional arguments to its front, in order;
 * "--" ends the options (for a key that starts with "--"). Returns how many
 * positional arguments there are, or -1 after printing the error. */
int cli_parse_options(int argc, char **argv, unsigned takes, cli_opts *o);

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

/* floodgate policy apply|list|show|check|delete ...; argv[0] is the first
 * argument after "policy". */
int cli_policy(int argc, char **argv);

#endif
