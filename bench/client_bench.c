/*
 * client_bench.c - in-process decisions per second through the public API.
 *
 * fg_check on a mem: client, one or two threads, on one hot key or spread over
 * 1,000,000 keys, for a token bucket and a fixed window, with two clocks:
 *   - the default: the system's wall clock, read on every call;
 *   - an event loop's clock: the time read once per loop iteration (here every
 *     256 decisions) and handed to the library through fg_options.clock_us,
 *     as proxies such as nginx cache theirs.
 * Prints a markdown table. Build and run: make bench-client.
 */
#include <floodgate.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define SECONDS 1.0
#define MANY_KEYS 1000000

/* The event loop's cached time, one per thread. */
static _Thread_local int64_t loop_time_us;

static int64_t wall_clock_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int64_t loop_clock(void *arg) {
    (void)arg;
    return loop_time_us;
}

typedef struct run {
    fg_client *client;
    const fg_limit *limit;
    int many_keys;
    unsigned seed;
    atomic_int *stop;
    unsigned long long decisions, allowed;
} run;

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *worker(void *arg) {
    run *r = arg;
    char key[32] = "hot";
    unsigned x = r->seed;
    fg_result res;
    while (!atomic_load_explicit(r->stop, memory_order_relaxed)) {
        loop_time_us = wall_clock_us(); /* one loop iteration */
        for (int i = 0; i < 256; i++) {
            if (r->many_keys) {
                x = x * 1664525u + 1013904223u; /* a cheap LCG spreads the keys */
                snprintf(key, sizeof(key), "user:%08u", (x >> 8) % MANY_KEYS);
            }
            if (fg_check(r->client, key, r->limit, 1, &res, NULL) == FG_CODE_OK)
                r->allowed += res.allowed;
            r->decisions++;
        }
    }
    return NULL;
}

static void measure(const char *name, const fg_limit *limit, int threads, int many_keys,
                    bool loop_time) {
    fg_options opts;
    fg_options_init(&opts);
    if (loop_time) opts.clock_us = loop_clock;
    fg_client *client = fg_open("mem:", &opts, NULL);
    atomic_int stop = 0;
    run runs[2];
    pthread_t tid[2];
    for (int t = 0; t < threads; t++) {
        runs[t] = (run){client, limit, many_keys, 12345u + (unsigned)t, &stop, 0, 0};
        pthread_create(&tid[t], NULL, worker, &runs[t]);
    }
    double start = now_seconds();
    struct timespec pause = {1, 0};
    nanosleep(&pause, NULL);
    atomic_store(&stop, 1);
    unsigned long long decisions = 0, allowed = 0;
    for (int t = 0; t < threads; t++) {
        pthread_join(tid[t], NULL);
        decisions += runs[t].decisions;
        allowed += runs[t].allowed;
    }
    double elapsed = now_seconds() - start;
    printf("| %-13s | %-10s | %7d | %-9s | %10.2f M/s | %8.1f ns | %6.1f %% |\n", name,
           loop_time ? "event loop" : "system", threads, many_keys ? "1M" : "1 hot",
           decisions / elapsed / 1e6,
           elapsed * 1e9 * threads / (double)decisions, 100.0 * (double)allowed / (double)decisions);
    fg_close(client);
}

int main(void) {
    fg_limit token = fg_token_bucket(1000, 1e6), fixed = fg_fixed_window(1000, 1);
    printf("fg_check on mem:, %.0f s per case\n\n", SECONDS);
    printf("| limit         | clock      | threads | keys      | decisions/s    | per op      "
           "| allowed  |\n");
    printf("|---------------|------------|---------|-----------|----------------|-------------"
           "|----------|\n");
    for (int loop = 0; loop <= 1; loop++)
        for (int many = 0; many <= 1; many++)
            for (int threads = 1; threads <= 2; threads++) {
                measure("token bucket", &token, threads, many, loop);
                measure("fixed window", &fixed, threads, many, loop);
            }
    return 0;
}
