/*
 * uv_keys.c - the bucket keys of a unique counter on a server without the
 * module (uv_keys.h; src/scripts/uv.lua takes what these declare).
 */
#include "uv_keys.h"

#include <stdio.h>
#include <string.h>

static const struct {
    int64_t width, count;
} tiers[FG_UV_TIERS] = {{60, FG_UV_DEFAULT_MINUTES},
                        {3600, FG_UV_DEFAULT_HOURS},
                        {86400, FG_UV_DEFAULT_DAYS}};

/* The slack of the client's clock against the server's, in seconds: a
 * minute either way. */
#define SLACK 60
/* A base's longest: the name and its braces (which the compiler is told). */
#define BASE_MAX (FG_UV_KEYS_NAME_MAX + 2)

bool fg_uv_keys_base(const char *name, size_t len, char *base) {
    if (len == 0 || len > FG_UV_KEYS_NAME_MAX) return false;
    const char *open = memchr(name, '{', len);
    const char *close = open != NULL ? memchr(open + 1, '}', len - (size_t)(open + 1 - name)) : NULL;
    if (close != NULL && close > open + 1) { /* a hash tag: kept by any suffix */
        memcpy(base, name, len);
        base[len] = '\0';
        return true;
    }
    if (memchr(name, '}', len) != NULL) return false;
    snprintf(base, FG_UV_BUCKET_KEY_MAX, "{%.*s}", (int)len, name);
    return true;
}

static int64_t floor_div(int64_t a, int64_t b) { return a / b - (a % b < 0); }

size_t fg_uv_script_keys(const char *name, size_t len, const fg_uv_call *call, int64_t now,
                         char keys[][FG_UV_BUCKET_KEY_MAX]) {
    char base[FG_UV_BUCKET_KEY_MAX];
    if (!fg_uv_keys_base(name, len, base)) return 0;
    /* The seconds [lo, hi] whose buckets the call may need. */
    int64_t lo = now - SLACK, hi = now + SLACK;
    if (call->kind == FG_UV_CALL_ADDAT) lo = hi = call->at;
    if (call->kind == FG_UV_CALL_ALL) lo = now - FG_UV_MAX_SPAN;
    if (call->kind == FG_UV_CALL_WINDOW) {
        const fg_uv_window *w = &call->window;
        lo = w->last ? now - w->seconds + 1 - SLACK : w->start;
        hi = w->last || w->end - 1 > now + 2 * SLACK ? now + 2 * SLACK : w->end - 1;
    }
    size_t n = 0;
    for (int k = 0; k < FG_UV_TIERS; k++) {
        int64_t width = tiers[k].width, current = floor_div(now, width);
        int64_t first = floor_div(lo, width), last = floor_div(hi, width);
        if (call->kind != FG_UV_CALL_ADDAT) { /* kept, give or take the slack */
            if (first < current - tiers[k].count) first = current - tiers[k].count;
            if (last > current + 2) last = current + 2;
        }
        /* Every kept day of a window: a counter exists while one does
         * (each add writes its day, the longest kept), and only a counter
         * that exists has a window to refuse, as on the module. */
        if (call->kind == FG_UV_CALL_WINDOW && k == FG_UV_TIERS - 1) {
            first = current - tiers[k].count;
            last = current + 2;
        }
        for (int64_t b = first; b <= last; b++)
            snprintf(keys[n++], FG_UV_BUCKET_KEY_MAX, "%.*s:uv:%lld:%lld", BASE_MAX, base,
                     (long long)width, (long long)(b * width));
    }
    if (call->kind == FG_UV_CALL_WINDOW) snprintf(keys[n++], FG_UV_BUCKET_KEY_MAX, "%.*s:uv:tmp", BASE_MAX, base);
    return n;
}
