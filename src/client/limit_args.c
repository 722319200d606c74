/*
 * limit_args.c - the module's argument ranges and conversions, for the client.
 *
 * The rules are the core's (core/params.c), the very code the module runs:
 * both backends validate here first, so a bad limit is FG_CODE_INVALID with
 * the server's text whether or not a server is reachable.
 */
#include "limit_args.h"

#include "error.h"
#include "params.h"
#include "text.h"

#include <stdarg.h>
#include <stdio.h>


/* A refusal by the core's rules (core/params.c), as an fg_error. */
static fg_code refused(const char *msg, fg_error *err) {
    return fg_set_error(err, FG_CODE_INVALID, "%s", msg);
}

static fg_code convert_window(const fg_limit *l, int64_t max_limit, int64_t *limit,
                              int64_t *window_us, fg_error *err) {
    char msg[160];
    if (!fg_param_window(l->limit, max_limit, l->window_ms, window_us, msg, sizeof(msg)))
        return refused(msg, err);
    *limit = l->limit;
    return FG_CODE_OK;
}

static fg_code convert_rate(const fg_limit *l, const char *name, fg_gcra_params *p,
                            fg_error *err) {
    char msg[160];
    if (!fg_param_bucket(l->limit, l->rate, name, p, msg, sizeof(msg))) return refused(msg, err);
    return FG_CODE_OK;
}

static fg_code convert_gcra(const fg_limit *l, fg_gcra_params *p, fg_error *err) {
    char msg[160];
    if (!fg_param_gcra(l->limit, l->rate, l->window_ms, p, msg, sizeof(msg)))
        return refused(msg, err);
    return FG_CODE_OK;
}

static fg_code convert_params(const fg_limit *l, fg_limiter *out, fg_error *err) {
    switch (l->algorithm) {
    case FG_FIXED_WINDOW:
        out->family = FG_LIMITER_FIXED;
        return convert_window(l, INT64_MAX, &out->p.fixed.limit, &out->p.fixed.window_us, err);
    case FG_SLIDING_WINDOW:
        out->family = FG_LIMITER_SLIDING;
        return convert_window(l, INT64_MAX, &out->p.sliding.limit, &out->p.sliding.window_us,
                              err);
    case FG_SLIDING_LOG:
        out->family = FG_LIMITER_SLIDELOG;
        return convert_window(l, FG_SLOG_MAX_LIMIT, &out->p.slidelog.limit,
                              &out->p.slidelog.window_us, err);
    case FG_TOKEN_BUCKET:
        out->family = FG_LIMITER_BUCKET;
        return convert_rate(l, "refill_per_sec", &out->p.bucket, err);
    case FG_LEAKY_BUCKET:
        out->family = FG_LIMITER_BUCKET;
        return convert_rate(l, "leak_per_sec", &out->p.bucket, err);
    case FG_GCRA:
        out->family = FG_LIMITER_BUCKET;
        return convert_gcra(l, &out->p.bucket, err);
    }
    return fg_set_error(err, FG_CODE_INVALID, "ERR unknown algorithm %d", (int)l->algorithm);
}

/* The module's order: the positional arguments, then COST. */
fg_code fg_limit_convert(const fg_limit *l, int64_t cost, fg_limiter *out, fg_error *err) {
    if (l == NULL) return fg_set_error(err, FG_CODE_INVALID, "ERR no limit given");
    if (convert_params(l, out, err) != FG_CODE_OK) return FG_CODE_INVALID;
    char msg[160];
    if (!fg_param_integer(cost, "COST", 0, INT64_MAX, msg, sizeof(msg))) return refused(msg, err);
    return FG_CODE_OK;
}

static const char *const commands[] = {
    [FG_FIXED_WINDOW] = "FG.FIXED", [FG_SLIDING_WINDOW] = "FG.SLIDING",
    [FG_SLIDING_LOG] = "FG.SLIDELOG", [FG_TOKEN_BUCKET] = "FG.TOKEN",
    [FG_LEAKY_BUCKET] = "FG.LEAKY",   [FG_GCRA] = "FG.GCRA",
};

const char *fg_limit_command(const fg_limit *l) { return commands[l->algorithm]; }

/* "FG.TOKEN" -> "TOKEN": FG.PEEK takes the command's name without its prefix. */
const char *fg_limit_family_word(const fg_limit *l) { return commands[l->algorithm] + 3; }

int fg_limit_format_args(const fg_limit *l, char args[FG_LIMIT_MAX_ARGS][FG_ARG_MAX]) {
    fg_format_int(args[0], l->limit);
    switch (l->algorithm) {
    case FG_TOKEN_BUCKET:
    case FG_LEAKY_BUCKET: fg_format_double(args[1], FG_ARG_MAX, l->rate); return 2;
    case FG_GCRA:
        fg_format_double(args[1], FG_ARG_MAX, l->rate);
        fg_format_double(args[2], FG_ARG_MAX, l->window_ms);
        return 3;
    case FG_FIXED_WINDOW:
    case FG_SLIDING_WINDOW:
    case FG_SLIDING_LOG: break;
    }
    fg_format_double(args[1], FG_ARG_MAX, l->window_ms);
    return 2;
}
