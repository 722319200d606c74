/*
 * fuzz_input.h - how the fuzz targets read their input: numbers taken from
 * the fuzzer's bytes (zeros once they run out), and a check that aborts, so
 * libFuzzer reports the input that broke a property.
 *
 * Header-only and static: each target includes it once.
 */
#ifndef FG_FUZZ_INPUT_H
#define FG_FUZZ_INPUT_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#define CHECK(cond)               \
    do {                          \
        if (!(cond)) abort();     \
    } while (0)

typedef struct reader {
    const uint8_t *data;
    size_t left;
} reader;

/* The next `bytes` bytes as a big-endian number. */
static inline uint64_t take(reader *r, int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes && r->left > 0; i++, r->left--) v = (v << 8) | *r->data++;
    return v;
}

/* A number in [lo, hi] from `bytes` bytes. */
static inline int64_t take_range(reader *r, int bytes, int64_t lo, int64_t hi) {
    return lo + (int64_t)(take(r, bytes) % (uint64_t)(hi - lo + 1));
}

#endif
