/*
 * bloom_bench.c - the core's Bloom filters in process: nanoseconds per add,
 * per lookup of a member (hit) and of a stranger (miss), bits per item and
 * the measured false-positive rate.
 *
 *   make bench-bloom              (pinned to CPU 1 with taskset)
 *   ./bloom_bench [rounds, default 3]
 *
 * Keys are 16 bytes, made from a counter on the fly (members and strangers
 * never overlap), and hashed inside the timed loops, as a server would. Each
 * case builds a fresh filter, adds N distinct keys, then looks up the N
 * members and N strangers (at least 2M). Each round runs every case once;
 * the table shows the median over the rounds and the min-max in brackets.
 * Memory is fg_bloom_bytes (BF.INFO Size), bits per item is that over the
 * N keys added.
 *
 * The cases are those measured for RedisBloom 2.4.23 on the same machine
 * kind (docs/benchmarks.md): a reserved filter at 1% (a scaling one, whose
 * first level gets 0.8%; and a non-scaling one), at 0.1%, at 1% with 10M
 * items, and the default filter BF.ADD creates (1%, capacity 100, x2) grown
 * to 1M and to 10M items.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bloom.h"

#define MAX_ROUNDS 9
#define MIN_MISSES 2000000ULL

typedef struct bench_case {
    const char *name;
    double error;
    uint64_t capacity;
    uint32_t expansion;
    uint64_t items; /* distinct keys added */
} bench_case;

static const bench_case cases[] = {
    {"reserved 1M @1% (scaling)", 0.01, 1000000, 2, 1000000},
    {"reserved 1M @1% NONSCALING", 0.01, 1000000, 0, 1000000},
    {"reserved 1M @0.1% (scaling)", 0.001, 1000000, 2, 1000000},
    {"reserved 10M @1% (scaling)", 0.01, 10000000, 2, 10000000},
    {"default (1%, 100, x2) grown to 1M", 0.01, 100, 2, 1000000},
    {"default (1%, 100, x2) grown to 10M", 0.01, 100, 2, 10000000},
};
#define NCASES (sizeof(cases) / sizeof(cases[0]))

typedef struct result {
    double add_ns, hit_ns, miss_ns, fpr;
    uint64_t bytes, adds;
    uint32_t levels;
} result;

static void *bench_realloc(void *ptr, size_t size) { return realloc(ptr, size); }
static void bench_free(void *ptr) { free(ptr); }
static void *bench_calloc(size_t nmemb, size_t size) { return calloc(nmemb, size); }
static const fg_bloom_allocator heap = {{bench_realloc, bench_free}, bench_calloc};

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* The hash of key i of a set: 16 bytes, the counter and a mixed copy of it,
 * written as two words (byte stores would stall the hash's word loads, a
 * cost a server reading items from its buffers does not pay). */
static inline uint64_t key_hash(uint64_t i, uint64_t set) {
    uint64_t key[2] = {i, (i * 0x9E3779B97F4A7C15ULL) ^ set};
    return fg_bloom_hash(FG_BLOOM_HASH_XXH3, key, sizeof(key));
}

#define MEMBERS 0x6d656d62ULL
#define STRANGERS 0x73747261ULL

static int run_case(const bench_case *c, result *r) {
    fg_bloom f;
    if (fg_bloom_init(&f, c->error, c->capacity, c->expansion, &heap) != FG_OK) return -1;

    double t0 = now_ns();
    uint64_t adds = 0;
    for (uint64_t i = 0; i < c->items; i++)
        adds += fg_bloom_add(&f, key_hash(i, MEMBERS), &heap) == FG_BLOOM_ADDED;
    double t1 = now_ns();
    uint64_t hits = 0;
    for (uint64_t i = 0; i < c->items; i++) hits += fg_bloom_contains(&f, key_hash(i, MEMBERS));
    double t2 = now_ns();
    uint64_t misses = c->items > MIN_MISSES ? c->items : MIN_MISSES, fooled = 0;
    for (uint64_t i = 0; i < misses; i++) fooled += fg_bloom_contains(&f, key_hash(i, STRANGERS));
    double t3 = now_ns();

    if (hits != c->items) {
        fprintf(stderr, "%s: %llu of %llu members found\n", c->name, (unsigned long long)hits,
                (unsigned long long)c->items);
        return -1;
    }
    r->add_ns = (t1 - t0) / (double)c->items;
    r->hit_ns = (t2 - t1) / (double)c->items;
    r->miss_ns = (t3 - t2) / (double)misses;
    r->fpr = (double)fooled / (double)misses;
    r->bytes = fg_bloom_bytes(&f);
    r->adds = adds;
    r->levels = f.nlevels;
    fg_bloom_free(&f, &heap);
    return 0;
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* "median [min-max]" of one field over the rounds. */
static void print_spread(const result *rs, int rounds, size_t offset) {
    double v[MAX_ROUNDS];
    for (int i = 0; i < rounds; i++) v[i] = *(const double *)((const char *)&rs[i] + offset);
    qsort(v, (size_t)rounds, sizeof(double), compare_doubles);
    printf(" %.0f [%.0f-%.0f] |", v[rounds / 2], v[0], v[rounds - 1]);
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 3;
    if (rounds < 1 || rounds > MAX_ROUNDS) {
        fprintf(stderr, "usage: %s [rounds 1..%d]\n", argv[0], MAX_ROUNDS);
        return 2;
    }
    static result results[NCASES][MAX_ROUNDS];
    for (int round = 0; round < rounds; round++)
        for (size_t c = 0; c < NCASES; c++) {
            if (run_case(&cases[c], &results[c][round]) != 0) return 1;
            fprintf(stderr, "round %d: %s\n", round + 1, cases[c].name);
        }

    printf("| filter | levels | bytes | bits/item | FPR | add ns | hit ns | miss ns |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for (size_t c = 0; c < NCASES; c++) {
        const result *r = &results[c][0]; /* memory and rates are the same every round */
        printf("| %s | %u | %llu | %.2f | %.3f%% |", cases[c].name, r->levels,
               (unsigned long long)r->bytes, (double)r->bytes * 8 / (double)cases[c].items,
               100 * r->fpr);
        print_spread(results[c], rounds, offsetof(result, add_ns));
        print_spread(results[c], rounds, offsetof(result, hit_ns));
        print_spread(results[c], rounds, offsetof(result, miss_ns));
        printf("\n");
    }
    return 0;
}
