/*
 * cli.h - what the files of the floodgate command-line tool share.
 *
 * main.c parses the command line and runs check, peek, inspect and reset;
 * simulate.c runs the algorithm comparison; policy.c applies, lists and
 * checks named policies. Exit codes are the same for every
 * subcommand, so that scripts can rely on them.
 */
#ifndef FG_CLI_H
#define FG_CLI_H

#define CLI_EXIT_OK 0     /* allowed, or done */
#define CLI_EXIT_DENIED 1 /* denied, or (inspect) no state */
#define CLI_EXIT_ERROR 2  /* bad arguments, or the library failed */

/* Prints "floodgate: <message>" on stderr and returns CLI_EXIT_ERROR. */
int cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* floodgate simulate [--out DIR] [--plot]; argv[0] is the first argument
 * after "simulate". */
int cli_simulate(int argc, char **argv);

/* floodgate policy apply|list|show|check|delete ...; argv[0] is the first
 * argument after "policy". */
int cli_policy(int argc, char **argv);

#endif
