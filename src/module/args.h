/*
 * args.h - strict parsing of command arguments.
 *
 * Each parser either stores a value and returns 1, or replies with an
 * "ERR <argument> ..." error that names the argument and returns 0, so a
 * command does `if (!parse_...) return REDISMODULE_OK;` and has answered.
 */
#ifndef FG_ARGS_H
#define FG_ARGS_H

#include <stdbool.h>
#include <stdint.h>

#include "redismodule_api.h"

/* An integer in [min, max]. */
int parse_integer(RedisModuleCtx *ctx, RedisModuleString *arg, const char *name, int64_t min,
                  int64_t max, int64_t *out);

/* A finite decimal number (any sign: ranges are the core's, core/params.h):
 * no inf, nan, hex or spaces. */
int parse_decimal(RedisModuleCtx *ctx, RedisModuleString *arg, const char *name, double *out);

/* The same without a client to answer (loaders): false with the message
 * ("ERR <name> ...") in msg. */
bool read_integer(RedisModuleString *arg, const char *name, int64_t min, int64_t max,
                  int64_t *out, char *msg, size_t msglen);
bool read_decimal(RedisModuleString *arg, const char *name, double *out, char *msg,
                  size_t msglen);

/* Replies a core/params.h refusal; returns 0 so a parser can return it. */
int reply_param_error(RedisModuleCtx *ctx, const char *msg);

/* Room for a core/params.h message. */
#define FG_PARAM_MSG 160

/* Options after the positional arguments: `COST n` (n >= 0, default 1) and
 * `AT unix_us` (-1 when absent). */
int parse_options(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, int64_t *cost,
                  int64_t *at_us);

/* The refusals of an option given by name, which take its name (%s). */
#define ERR_GIVEN_TWICE "ERR %s given twice"
#define ERR_NEEDS_VALUE "ERR %s needs a value"

/* Case-insensitive comparison of an argument with a keyword. */
bool arg_is(RedisModuleString *arg, const char *keyword);

/* A number as a replication argument (RedisModule_Replicate's "b" format):
 * digits written backwards into the end of `buf`, so no copy is needed. */
typedef struct number_arg {
    char buf[24];
    const char *str;
    size_t len;
} number_arg;

void format_number(number_arg *a, int64_t v);

/* A number many effects in a row repeat (a window's start, an expiry that
 * many keys share): the last one replicated is kept as a string, which goes
 * out by reference ("s"), neither formatted nor copied, while it stays the
 * same. */
typedef struct kept_number {
    int64_t value;
    RedisModuleString *str;
} kept_number;

RedisModuleString *kept_number_of(kept_number *k, int64_t v);

int reply_error_fmt(RedisModuleCtx *ctx, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
