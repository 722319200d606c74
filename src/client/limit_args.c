/*
 * limit_args.c - the module's argument ranges and conversions, for the client.
 *
 * Every rule mirrors src/module/t_ratelimit.c and src/module/args.c (the
 * module has no client-visible library to share): numbers must be finite and
 * in (0, max], windows are rounded to whole microseconds, emission intervals
 * to whole nanoseconds. Both backends validate here first, so a bad limit is
 * FG_CODE_INVALID with the same text whether or not a server is reachable.
 */
#include "limit_args.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>

#define MAX_DURATION_MS 1e12
#define MAX_RATE_PER_SEC 1e9
#define MAX_GCRA_COUNT 1e18

fg_code fg_set_error(fg_error *err, fg_code code, const char *fmt, ...) {
    if (err != NULL) {
        va_list ap;
        va_start(ap, fmt);
        err->code = code;
        vsnprintf(err->message, sizeof(err->message), fmt, ap);
        va_end(ap);
    }
    return code;
}

int64_t fg_ns_to_ms_ceil(int64_t ns) {
    return ns < 0 ? -1 : ns / FG_NS_PER_MS + (ns % FG_NS_PER_MS > 0);
}

static fg_code check_integer(int64_t v, const char *name, int64_t min, int64_t max,
                             fg_error *err) {
    if (v < min || v > max)
        return fg_set_error(err, FG_CODE_INVALID, "ERR %s must be between %lld and %lld", name,
                            (long long)min, (long long)max);
    return FG_CODE_OK;
}

static fg_code check_number(double v, const char *name, double max, fg_error *err) {
    if (!isfinite(v)) return fg_set_error(err, FG_CODE_INVALID, "ERR %s must be a number", name);
    if (!(v > 0) || v > max)
        return fg_set_error(err, FG_CODE_INVALID, "ERR %s must be greater than 0 and at most %g",
                            name, max);
    return FG_CODE_OK;
}

static fg_code convert_duration(double ms, const char *name, int64_t *us, fg_error *err) {
    if (check_number(ms, name, MAX_DURATION_MS, err) != FG_CODE_OK) return FG_CODE_INVALID;
    double r = round(ms * 1000.0);
    if (r < 1)
        return fg_set_error(err, FG_CODE_INVALID,
                            "ERR %s must be at least 0.001 (one microsecond)", name);
    *us = (int64_t)r;
    return FG_CODE_OK;
}

static fg_code convert_window(const fg_limit *l, int64_t max_limit, int64_t *limit,
                              int64_t *window_us, fg_error *err) {
    if (check_integer(l->limit, "limit", 1, max_limit, err) != FG_CODE_OK) return FG_CODE_INVALID;
    *limit = l->limit;
    return convert_duration(l->window_ms, "window_ms", window_us, err);
}

/* Token and leaky buckets: nanoseconds per unit for a rate per second. */
static fg_code convert_rate(const fg_limit *l, const char *name, fg_gcra_params *p,
                            fg_error *err) {
    if (check_integer(l->limit, "capacity", 1, INT64_MAX, err) != FG_CODE_OK ||
        check_number(l->rate, name, MAX_RATE_PER_SEC, err) != FG_CODE_OK)
        return FG_CODE_INVALID;
    double ns = (double)FG_NS_PER_SEC / l->rate;
    if (ns > (double)INT64_MAX / 2)
        return fg_set_error(err, FG_CODE_INVALID, "ERR %s is too slow", name);
    p->capacity = l->limit;
    p->emission_ns = ns < 1 ? 1 : (int64_t)(ns + 0.5);
    return FG_CODE_OK;
}

static fg_code convert_gcra(const fg_limit *l, fg_gcra_params *p, fg_error *err) {
    if (check_integer(l->limit, "capacity", 1, INT64_MAX, err) != FG_CODE_OK ||
        check_number(l->rate, "count", MAX_GCRA_COUNT, err) != FG_CODE_OK ||
        check_number(l->window_ms, "period_ms", MAX_DURATION_MS, err) != FG_CODE_OK)
        return FG_CODE_INVALID;
    double ns = l->window_ms * (double)FG_NS_PER_MS / l->rate;
    if (ns > (double)INT64_MAX / 2)
        return fg_set_error(err, FG_CODE_INVALID,
                            "ERR count is too small for period_ms: the emission interval "
                            "overflows 64-bit nanoseconds");
    if (ns < 0.5)
        return fg_set_error(err, FG_CODE_INVALID,
                            "ERR rate too high: count per period_ms must leave at least one "
                            "nanosecond per unit");
    p->capacity = l->limit;
    p->emission_ns = (int64_t)(ns + 0.5);
    return FG_CODE_OK;
}

static fg_code convert_params(const fg_limit *l, fg_mem_limit *out, fg_error *err) {
    switch (l->algorithm) {
    case FG_FIXED_WINDOW:
        out->family = FG_MEM_FIXED;
        return convert_window(l, INT64_MAX, &out->p.fixed.limit, &out->p.fixed.window_us, err);
    case FG_SLIDING_WINDOW:
        out->family = FG_MEM_SLIDING;
        return convert_window(l, INT64_MAX, &out->p.sliding.limit, &out->p.sliding.window_us,
                              err);
    case FG_SLIDING_LOG:
        out->family = FG_MEM_SLIDELOG;
        return convert_window(l, FG_SLOG_MAX_LIMIT, &out->p.slidelog.limit,
                              &out->p.slidelog.window_us, err);
    case FG_TOKEN_BUCKET:
        out->family = FG_MEM_BUCKET;
        return convert_rate(l, "refill_per_sec", &out->p.bucket, err);
    case FG_LEAKY_BUCKET:
        out->family = FG_MEM_BUCKET;
        return convert_rate(l, "leak_per_sec", &out->p.bucket, err);
    case FG_GCRA:
        out->family = FG_MEM_BUCKET;
        return convert_gcra(l, &out->p.bucket, err);
    }
    return fg_set_error(err, FG_CODE_INVALID, "ERR unknown algorithm %d", (int)l->algorithm);
}

/* The module's order: the positional arguments, then COST. */
fg_code fg_limit_convert(const fg_limit *l, int64_t cost, fg_mem_limit *out, fg_error *err) {
    if (l == NULL) return fg_set_error(err, FG_CODE_INVALID, "ERR no limit given");
    if (convert_params(l, out, err) != FG_CODE_OK) return FG_CODE_INVALID;
    return check_integer(cost, "COST", 0, INT64_MAX, err);
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
    snprintf(args[0], FG_ARG_MAX, "%lld", (long long)l->limit);
    switch (l->algorithm) {
    case FG_TOKEN_BUCKET:
    case FG_LEAKY_BUCKET: snprintf(args[1], FG_ARG_MAX, "%.17g", l->rate); return 2;
    case FG_GCRA:
        snprintf(args[1], FG_ARG_MAX, "%.17g", l->rate);
        snprintf(args[2], FG_ARG_MAX, "%.17g", l->window_ms);
        return 3;
    default: snprintf(args[1], FG_ARG_MAX, "%.17g", l->window_ms); return 2;
    }
}
