/*
 * limit_args.h - a public fg_limit as the module reads it (internal).
 *
 * The module receives a limit as text and converts it to the core's integer
 * parameters; the mem: backend must reach the very same integers from the
 * doubles of an fg_limit, and the redis: backend must send text that the
 * module parses back to those doubles. Both directions live here.
 */
#ifndef FG_LIMIT_ARGS_H
#define FG_LIMIT_ARGS_H

#include <stddef.h>

#include "floodgate.h"
#include "limiter.h"

/* The longest argument fg_limit_format_args writes, with its NUL. */
#define FG_ARG_MAX 32
/* Positional arguments after the key: at most three (FG.GCRA). */
#define FG_LIMIT_MAX_ARGS 3

/* Validates `l` and `cost` with the module's ranges and converts `l` to the
 * core's parameters. Returns FG_CODE_OK, or FG_CODE_INVALID with the
 * module's error text in err (which may be NULL). */
fg_code fg_limit_convert(const fg_limit *l, int64_t cost, fg_limiter *out, fg_error *err);

/* The command (FG.TOKEN ...) and FG.PEEK family word (TOKEN ...) of l. */
const char *fg_limit_command(const fg_limit *l);
const char *fg_limit_family_word(const fg_limit *l);

/* Writes the positional arguments of a valid limit into args; returns how
 * many. Doubles are written with 17 significant digits, so the module parses
 * back exactly the double given. */
int fg_limit_format_args(const fg_limit *l, char args[FG_LIMIT_MAX_ARGS][FG_ARG_MAX]);

#endif
