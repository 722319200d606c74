/*
 * checked.h - overflow-checked 64-bit arithmetic.
 *
 * Each helper stores the result and returns true, or returns false and leaves
 * *out untouched when the exact result does not fit in int64_t.
 */
#ifndef FG_CHECKED_H
#define FG_CHECKED_H

#include <stdbool.h>
#include <stdint.h>

static inline bool fg_add(int64_t a, int64_t b, int64_t *out) {
    int64_t r;
    if (__builtin_add_overflow(a, b, &r)) return false;
    *out = r;
    return true;
}

static inline bool fg_sub(int64_t a, int64_t b, int64_t *out) {
    int64_t r;
    if (__builtin_sub_overflow(a, b, &r)) return false;
    *out = r;
    return true;
}

static inline bool fg_mul(int64_t a, int64_t b, int64_t *out) {
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r)) return false;
    *out = r;
    return true;
}

static inline int64_t fg_max(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t fg_min(int64_t a, int64_t b) { return a < b ? a : b; }

/* Ceiling division for a >= 0, b > 0. */
static inline int64_t fg_ceil_div(int64_t a, int64_t b) {
    return a / b + (a % b != 0);
}

#endif
