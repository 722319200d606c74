/*
 * args.c - strict parsing of command arguments.
 *
 * Redis's own StringToDouble accepts "inf" and hexadecimal floats, so numbers
 * are checked character by character before they are converted: a limit is
 * a plain decimal or it is refused, with a message that names the argument.
 */
#include "args.h"

#include "../core/messages.h"
#include "../core/params.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Two digits per division: replication formats a 13-digit expiry and
 * 16- or 19-digit times on every admitted request. */
static const char digit_pairs[] = "00010203040506070809101112131415161718192021222324"
                                  "25262728293031323334353637383940414243444546474849"
                                  "50515253545556575859606162636465666768697071727374"
                                  "75767778798081828384858687888990919293949596979899";

void format_number(number_arg *a, int64_t v) {
    char *end = a->buf + sizeof(a->buf), *p = end;
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    while (u >= 100) {
        const char *pair = digit_pairs + 2 * (u % 100);
        u /= 100;
        *--p = pair[1];
        *--p = pair[0];
    }
    if (u >= 10) {
        *--p = digit_pairs[2 * u + 1];
        *--p = digit_pairs[2 * u];
    } else {
        *--p = (char)('0' + u);
    }
    if (v < 0) *--p = '-';
    a->str = p;
    a->len = (size_t)(end - p);
}

RedisModuleString *kept_number_of(kept_number *k, int64_t v) {
    if (k->str == NULL || k->value != v) {
        number_arg a;
        format_number(&a, v);
        if (k->str) RedisModule_FreeString(NULL, k->str);
        k->str = RedisModule_CreateString(NULL, a.str, a.len);
        k->value = v;
    }
    return k->str;
}

int reply_error_fmt(RedisModuleCtx *ctx, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return RedisModule_ReplyWithError(ctx, msg);
}

bool arg_is(RedisModuleString *arg, const char *keyword) {
    size_t len;
    const char *s = RedisModule_StringPtrLen(arg, &len);
    return strlen(keyword) == len && strncasecmp(s, keyword, len) == 0;
}

bool read_integer(RedisModuleString *arg, const char *name, int64_t min, int64_t max,
                  int64_t *out, char *msg, size_t msglen) {
    long long v;
    if (RedisModule_StringToLongLong(arg, &v) != REDISMODULE_OK) {
        snprintf(msg, msglen, "ERR %s must be an integer", name);
        return false;
    }
    if (!fg_param_integer(v, name, min, max, msg, msglen)) return false;
    *out = v;
    return true;
}

int parse_integer(RedisModuleCtx *ctx, RedisModuleString *arg, const char *name,
                  int64_t min, int64_t max, int64_t *out) {
    char msg[FG_PARAM_MSG];
    if (read_integer(arg, name, min, max, out, msg, sizeof(msg))) return 1;
    RedisModule_ReplyWithError(ctx, msg);
    return 0;
}

/* Digits with at most one '.', and an optional decimal exponent. */
static bool is_plain_decimal(const char *s, size_t len) {
    size_t i = 0, digits = 0;
    bool dot = false;
    if (i < len && (s[i] == '+' || s[i] == '-')) i++;
    for (; i < len; i++) {
        if (s[i] >= '0' && s[i] <= '9')
            digits++;
        else if (s[i] == '.' && !dot)
            dot = true;
        else
            break;
    }
    if (digits == 0) return false;
    if (i < len && (s[i] == 'e' || s[i] == 'E')) {
        size_t exp_digits = 0;
        i++;
        if (i < len && (s[i] == '+' || s[i] == '-')) i++;
        for (; i < len && s[i] >= '0' && s[i] <= '9'; i++)
            exp_digits++;
        if (exp_digits == 0) return false;
    }
    return i == len;
}

bool read_decimal(RedisModuleString *arg, const char *name, double *out, char *msg,
                  size_t msglen) {
    /* Most limits are whole numbers: the integer parser is far cheaper. */
    long long whole;
    if (RedisModule_StringToLongLong(arg, &whole) == REDISMODULE_OK) {
        *out = (double)whole;
        return true;
    }
    size_t len;
    const char *s = RedisModule_StringPtrLen(arg, &len);
    double v;
    if (!is_plain_decimal(s, len) || RedisModule_StringToDouble(arg, &v) != REDISMODULE_OK ||
        !isfinite(v)) {
        snprintf(msg, msglen, FG_ERR_NOT_A_NUMBER, name);
        return false;
    }
    *out = v;
    return true;
}

int parse_decimal(RedisModuleCtx *ctx, RedisModuleString *arg, const char *name, double *out) {
    char msg[FG_PARAM_MSG];
    if (read_decimal(arg, name, out, msg, sizeof(msg))) return 1;
    RedisModule_ReplyWithError(ctx, msg);
    return 0;
}

int reply_param_error(RedisModuleCtx *ctx, const char *msg) {
    RedisModule_ReplyWithError(ctx, msg);
    return 0;
}

/* The latest time AT accepts: its nanoseconds must fit in 64 bits. */
#define MAX_AT_US (INT64_MAX / 1000)

int parse_options(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, int64_t *cost,
                  int64_t *at_us) {
    *cost = 1;
    *at_us = -1;
    for (int i = 0; i < argc; i += 2) {
        bool is_cost = arg_is(argv[i], "COST");
        if (!is_cost && !arg_is(argv[i], "AT")) {
            RedisModule_ReplyWithError(ctx, "ERR syntax error: the options are COST n and "
                                            "AT unix_us");
            return 0;
        }
        if (i + 1 >= argc) {
            reply_error_fmt(ctx, ERR_NEEDS_VALUE, is_cost ? "COST" : "AT");
            return 0;
        }
        if (is_cost ? !parse_integer(ctx, argv[i + 1], "COST", 0, INT64_MAX, cost)
                    : !parse_integer(ctx, argv[i + 1], "AT", 0, MAX_AT_US, at_us))
            return 0;
    }
    return 1;
}
