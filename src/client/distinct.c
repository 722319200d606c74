/*
 * distinct.c - unique counting (floodgate.h, "unique counting"):
 * fg_distinct_* on every backend.
 *
 * Every call first checks what it is given the same way on every backend,
 * with the module's messages: a client, keys, items, the
 * options and the window. Bad input is thus FG_CODE_INVALID without a round
 * trip, and a server only sees commands it parses. Then it calls through
 * the unique-counting table of the client's backend (backend.h): the
 * client's table on mem: (mem_distinct.c), the module's FG.UV* commands on
 * a server or cluster (remote_distinct.c).
 */
#include "backend.h"
#include "client.h"
#include "error.h"
#include "uv.h"
#include "messages.h"
#include "params.h"

_Static_assert(FG_HLL_BYTES == FG_UV_HLL_BYTES, "floodgate.h and core/uv.h disagree");

void fg_distinct_options_init(fg_distinct_options *opts) {
    opts->span_s = FG_UV_DEFAULT_SPAN;
    opts->minutes = FG_UV_DEFAULT_MINUTES;
    opts->hours = FG_UV_DEFAULT_HOURS;
    opts->days = FG_UV_DEFAULT_DAYS;
    opts->tzoffset_s = 0;
}

/* ------------------------------------------------------------- checks */

static fg_code refuse(const char *msg, fg_error *err) {
    return fg_set_error(err, FG_CODE_INVALID, "%s", msg);
}

static fg_code check_integer(int64_t v, const char *name, int64_t min, int64_t max, fg_error *err) {
    char msg[160];
    if (fg_param_integer(v, name, min, max, msg, sizeof(msg))) return FG_CODE_OK;
    return refuse(msg, err);
}

/* FG.UVCREATE accepts o's values (core/uv.h's table, in its order). */
static fg_code options_check(const fg_distinct_options *o, fg_error *err) {
    const int64_t value[FG_UV_OPTIONS] = {o->span_s, o->minutes, o->hours, o->days, o->tzoffset_s};
    for (int i = 0; i < FG_UV_OPTIONS; i++) {
        const fg_uv_option *opt = &fg_uv_options[i];
        if (check_integer(value[i], opt->name, opt->min, opt->max, err) != FG_CODE_OK)
            return FG_CODE_INVALID;
    }
    if (!fg_uv_tzoffset_valid(o->tzoffset_s)) return refuse(FG_ERR_UV_TZOFFSET, err);
    return FG_CODE_OK;
}

/* A window checked as FG.UVCOUNT parses it, converted. */
static fg_code window_convert(const fg_window *w, fg_uv_window *out, fg_error *err) {
    if (w->last) {
        if (check_integer(w->n, "n", 1, FG_UV_MAX_SPAN, err) != FG_CODE_OK) return FG_CODE_INVALID;
        if (w->unit != FG_SECONDS && w->unit != FG_MINUTES && w->unit != FG_HOURS &&
            w->unit != FG_DAYS)
            return refuse(FG_ERR_UV_UNIT, err);
        *out = (fg_uv_window){.last = true, .seconds = w->n * (int64_t)w->unit};
        return FG_CODE_OK;
    }
    if (check_integer(w->start_us, "start_us", 0, FG_UV_MAX_US + 1, err) != FG_CODE_OK ||
        check_integer(w->end_us, "end_us", 0, FG_UV_MAX_US + 1, err) != FG_CODE_OK)
        return FG_CODE_INVALID;
    *out = (fg_uv_window){.start = w->start_us / FG_UV_US_PER_SEC,
                               .end = w->end_us / FG_UV_US_PER_SEC};
    return out->start < out->end ? FG_CODE_OK : refuse(FG_ERR_UV_ORDER, err);
}

/* FG.UVADDAT's instant as the module parses it (the future limit needs
 * the clock: the backend checks it). */
static fg_code at_check(int64_t at_us, fg_error *err) {
    return check_integer(at_us, "unix_us", 0, FG_UV_MAX_US, err);
}

/* A client, nkeys >= 1 keys, a result, and the window, converted. */
static fg_code check_count(const fg_client *c, const char *const *keys, size_t nkeys,
                           const void *result, const fg_window *w, fg_uv_window *range,
                           const char *command, fg_error *err) {
    if (c == NULL || (keys == NULL && nkeys > 0) || result == NULL)
        return fg_set_error(err, FG_CODE_INVALID, "a client, keys and a result are required");
    if (nkeys == 0) return fg_arity_error(command, err);
    for (size_t i = 0; i < nkeys; i++)
        if (keys[i] == NULL) return fg_set_error(err, FG_CODE_INVALID, "key %zu is NULL", i);
    return window_convert(w, range, err);
}

/* ---------------------------------------------------------------- calls */

fg_code fg_distinct_create(fg_client *c, const char *key, const fg_distinct_options *opts,
                           fg_error *err) {
    fg_distinct_options o;
    fg_family_ref uv;
    if (opts != NULL)
        o = *opts;
    else
        fg_distinct_options_init(&o);
    fg_code rc = fg_require_key(c, key, err);
    if (rc == FG_CODE_OK) rc = options_check(&o, err);
    if (rc == FG_CODE_OK) rc = fg_client_family(c, FG_FAMILY_DISTINCT, &uv, err);
    return rc != FG_CODE_OK ? rc : uv.ops.distinct->create(uv.s, key, &o, err);
}

fg_code fg_distinct_add(fg_client *c, const char *key, const void *const *items, const size_t *lens,
                        size_t n, int64_t at_us, bool *changed, fg_error *err) {
    fg_family_ref uv;
    fg_code rc = fg_require_key(c, key, err);
    if (rc == FG_CODE_OK)
        rc = fg_require_items(items, lens, n, at_us >= 0 ? "fg.uvaddat" : "fg.uvadd", err);
    if (rc == FG_CODE_OK && at_us >= 0) rc = at_check(at_us, err);
    if (rc == FG_CODE_OK) rc = fg_client_family(c, FG_FAMILY_DISTINCT, &uv, err);
    return rc != FG_CODE_OK ? rc
                            : uv.ops.distinct->add(uv.s, key, items, lens, n, at_us, changed, err);
}

/* The union of keys over a window: its count (count not NULL) or its HLL
 * string; `command` names the call in the server's arity message. */
static fg_code count_union(fg_client *c, const char *const *keys, size_t nkeys, fg_window window,
                           int64_t *count, uint8_t *hll, const char *command, fg_error *err) {
    fg_uv_window range;
    fg_family_ref uv;
    const void *result = count != NULL ? (const void *)count : hll;
    fg_code rc = check_count(c, keys, nkeys, result, &window, &range, command, err);
    if (rc == FG_CODE_OK) rc = fg_client_family(c, FG_FAMILY_DISTINCT, &uv, err);
    if (rc != FG_CODE_OK) return rc;
    return uv.ops.distinct->union_of(uv.s, keys, nkeys, &window, &range, count, hll, err);
}

fg_code fg_distinct_count(fg_client *c, const char *const *keys, size_t nkeys, fg_window window,
                          int64_t *count, fg_error *err) {
    return count_union(c, keys, nkeys, window, count, NULL, "fg.uvcount", err);
}

fg_code fg_distinct_export(fg_client *c, const char *const *keys, size_t nkeys, fg_window window,
                           uint8_t hll[FG_HLL_BYTES], fg_error *err) {
    return count_union(c, keys, nkeys, window, NULL, hll, "fg.uvexport", err);
}
