/*
 * mem_store_bench.c - decisions per second of the in-process store.
 *
 *   cc -O2 -Isrc/core -Isrc/client bench/mem_store_bench.c src/core/[a-z]*.c \
 *      src/client/[a-z]*.c -lpthread -lm
 *   ./a.out [seconds per case, default 1]
 *
 * For FG_LIMITER_BUCKET and FG_LIMITER_FIXED, with 1 and 2 threads, on one hot key
 * and on 1,000,000 keys ("user:%08d", picked at random, all inserted before
 * timing). Each thread's clock starts at the same time and advances 1 us every
 * 256 decisions. On the hot key the limits admit about half the requests, so
 * both the write and the read-only path are measured; on 1M keys every key
 * stays alive and most requests are admitted (writes). The column "allowed"
 * shows the share. Prints a markdown table.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mem/mem_store.h"

#define T0_US 1704067200000000LL /* 2024-01-01 */
#define MANY_KEYS 1000000u
#define KEY_BYTES 16
#define BATCH 4096

typedef struct scenario {
    const char *family_name;
    const char *keys_name;
    fg_limiter lim;
    unsigned nkeys; /* 1 = the hot key */
    int threads;
} scenario;

typedef struct worker {
    pthread_t thread;
    fg_mem_store *store;
    const scenario *sc;
    const char (*keys)[KEY_BYTES];
    atomic_int *start;
    double seconds;
    uint64_t seed;
    uint64_t ops, allowed, errors;
    double elapsed;
} worker;

static double now_sec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline uint64_t xorshift(uint64_t *s) {
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static void *run_worker(void *arg) {
    worker *w = arg;
    const scenario *sc = w->sc;
    uint64_t rng = w->seed, ops = 0, allowed = 0, errors = 0;
    const size_t klen = strlen(w->keys[0]); /* every key has the same length */
    while (!atomic_load(w->start)) {
    }
    double t0 = now_sec(), t;
    do {
        for (int i = 0; i < BATCH; i++) {
            unsigned k = sc->nkeys == 1
                             ? 0
                             : (unsigned)(((xorshift(&rng) & 0xffffffffu) * sc->nkeys) >> 32);
            int64_t now = T0_US + (int64_t)(ops >> 8);
            fg_decision d;
            if (fg_mem_check(w->store, w->keys[k], klen, &sc->lim, now, 1, false,
                             &d) != FG_MEM_OK)
                errors++;
            else
                allowed += d.allowed;
            ops++;
        }
        t = now_sec();
    } while (t - t0 < w->seconds);
    w->ops = ops;
    w->allowed = allowed;
    w->errors = errors;
    w->elapsed = t - t0;
    return NULL;
}

static void run(const scenario *sc, const char (*keys)[KEY_BYTES], double seconds) {
    fg_mem_store *store = fg_mem_store_new(0);
    if (store == NULL) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    /* Every key exists before timing: one admitted request each, at T0. */
    for (unsigned k = 0; k < sc->nkeys; k++) {
        fg_decision d;
        if (fg_mem_check(store, keys[k], strlen(keys[k]), &sc->lim, T0_US, 1, false, &d) !=
            FG_MEM_OK) {
            fprintf(stderr, "warm-up failed\n");
            exit(1);
        }
    }
    atomic_int start = 0;
    worker w[8];
    for (int i = 0; i < sc->threads; i++) {
        w[i] = (worker){.store = store,
                        .sc = sc,
                        .keys = keys,
                        .start = &start,
                        .seconds = seconds,
                        .seed = 0x9E3779B97F4A7C15ULL * (uint64_t)(i + 1)};
        if (pthread_create(&w[i].thread, NULL, run_worker, &w[i]) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            exit(1);
        }
    }
    atomic_store(&start, 1);
    uint64_t ops = 0, allowed = 0, errors = 0;
    double elapsed = 0;
    for (int i = 0; i < sc->threads; i++) {
        pthread_join(w[i].thread, NULL);
        ops += w[i].ops;
        allowed += w[i].allowed;
        errors += w[i].errors;
        if (w[i].elapsed > elapsed) elapsed = w[i].elapsed;
    }
    printf("| %-8s | %7d | %-9s | %12.2f M/s | %10.1f ns | %6.1f %% |\n", sc->family_name,
           sc->threads, sc->keys_name, (double)ops / elapsed / 1e6,
           elapsed * 1e9 / ((double)ops / sc->threads), 100.0 * (double)allowed / (double)ops);
    if (errors) printf("(%llu errors)\n", (unsigned long long)errors);
    fg_mem_store_free(store);
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 1.0;
    if (seconds <= 0) seconds = 1.0;
    char (*keys)[KEY_BYTES] = malloc((size_t)MANY_KEYS * KEY_BYTES);
    if (keys == NULL) return 1;
    for (unsigned k = 0; k < MANY_KEYS; k++) snprintf(keys[k], KEY_BYTES, "user:%08u", k);

    /* Hot key: ~256 requests per simulated us; a bucket refilling one unit
     * per 8 ns and a window of 128,000 per ms admit about half of them.
     * Many keys: each key sees a request every few simulated ms, so the
     * limits are per second (10 at once, one more per second), which keeps
     * every key alive during the run. */
    const fg_limiter hot_bucket = {FG_LIMITER_BUCKET, .p.bucket = {8, 1000}};
    const fg_limiter hot_fixed = {FG_LIMITER_FIXED, .p.fixed = {128000, 1000}};
    const fg_limiter many_bucket = {FG_LIMITER_BUCKET, .p.bucket = {1000000000LL, 10}};
    const fg_limiter many_fixed = {FG_LIMITER_FIXED, .p.fixed = {10, 1000000}};
    const scenario scenarios[] = {
        {"bucket", "1 hot", hot_bucket, 1, 1},     {"bucket", "1 hot", hot_bucket, 1, 2},
        {"bucket", "1M", many_bucket, MANY_KEYS, 1}, {"bucket", "1M", many_bucket, MANY_KEYS, 2},
        {"fixed", "1 hot", hot_fixed, 1, 1},       {"fixed", "1 hot", hot_fixed, 1, 2},
        {"fixed", "1M", many_fixed, MANY_KEYS, 1},   {"fixed", "1M", many_fixed, MANY_KEYS, 2},
    };
#ifdef FG_MEM_STORE_MUTEX
    const char *lock = "pthread mutex";
#else
    const char *lock = "spinlock";
#endif
    printf("mem_store: 64 shards, %s locks, %.1f s per case\n\n", lock, seconds);
    printf("| family   | threads | keys      | decisions/s      | per thread/op | allowed  |\n");
    printf("|----------|---------|-----------|------------------|---------------|----------|\n");
    for (size_t i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++)
        run(&scenarios[i], (const char(*)[KEY_BYTES])keys, seconds);
    free(keys);
    return 0;
}
