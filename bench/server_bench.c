/*
 * server_bench.c - decisions per second against a server, through libfloodgate.
 *
 * One client per thread hammers 100 keys, each a token bucket of 10 with a
 * refill of 10 per second, for a fixed time: most requests are over the limit,
 * as under abuse. Run with and without the denial cache, it shows how many
 * round trips the cache saves and what that does to throughput. Every answer
 * from the cache is a denial, so it cannot over-admit; the program also checks
 * that the admitted count is the same order as the limits allow.
 *
 * The "within" workload is 10 hot keys, each a bucket of 10,000 at 100,000/s, so
 * the traffic stays well within the limits; clients take leases of LEASE
 * units (0: none) living 1 ms (at most LEASE / rate, as docs/client.md says):
 * round trips fall by up to LEASE times.
 *
 * Usage: server_bench URL SECONDS THREADS abuse|within CACHE(0|1) LEASE
 * (bench/server_bench.sh)
 */
#include <floodgate.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


typedef struct worker {
    const char *url;
    double seconds;
    bool within;
    bool cache;
    int64_t lease;
    unsigned seed;
    unsigned long long decisions, allowed;
    fg_stats stats;
    int failed;
} worker;

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *run(void *arg) {
    worker *w = arg;
    fg_options opts;
    fg_options_init(&opts);
    opts.cache_denials = w->cache;
    opts.lease_units = w->lease;
    opts.lease_ms = 1;
    fg_error err;
    fg_client *c = fg_open(w->url, &opts, &err);
    if (c == NULL) {
        fprintf(stderr, "server_bench: %s\n", err.message);
        w->failed = 1;
        return NULL;
    }
    fg_limit limit = w->within ? fg_token_bucket(10000, 100000) : fg_token_bucket(10, 10);
    unsigned keys = w->within ? 10 : 100;
    char key[32];
    double end = now_seconds() + w->seconds;
    while (now_seconds() < end) {
        for (int i = 0; i < 100; i++) {
            w->seed = w->seed * 1664525u + 1013904223u;
            snprintf(key, sizeof(key), "bench:%u", (w->seed >> 8) % keys);
            fg_result r;
            if (fg_check(c, key, &limit, 1, &r, &err) != FG_CODE_OK) {
                fprintf(stderr, "server_bench: %s\n", err.message);
                w->failed = 1;
                fg_close(c);
                return NULL;
            }
            w->decisions++;
            w->allowed += r.allowed;
        }
    }
    fg_get_stats(c, &w->stats);
    fg_close(c);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: server_bench URL SECONDS THREADS abuse|within CACHE LEASE\n");
        return 2;
    }
    double seconds = atof(argv[2]);
    int threads = atoi(argv[3]);
    if (threads < 1 || threads > 16 || seconds <= 0) return 2;
    worker w[16];
    pthread_t tid[16];
    double start = now_seconds();
    for (int t = 0; t < threads; t++) {
        w[t] = (worker){argv[1], seconds, strcmp(argv[4], "within") == 0, atoi(argv[5]) != 0,
                        atoll(argv[6]), 7u * (unsigned)t + 1, 0, 0, {0}, 0};
        pthread_create(&tid[t], NULL, run, &w[t]);
    }
    unsigned long long decisions = 0, allowed = 0, round_trips = 0, cached = 0;
    int failed = 0;
    for (int t = 0; t < threads; t++) {
        pthread_join(tid[t], NULL);
        decisions += w[t].decisions;
        allowed += w[t].allowed;
        round_trips += w[t].stats.round_trips;
        cached += w[t].stats.denials_cached;
        failed |= w[t].failed;
    }
    double elapsed = now_seconds() - start;
    /* What the buckets allow in the run: capacity plus refill, per key. */
    bool within = strcmp(argv[4], "within") == 0;
    double ceiling = within ? 10 * (10000.0 + 1e5 * elapsed) : 100 * (10.0 + 10.0 * elapsed);
    printf("| %s | %s | %d | %.0f | %llu | %.1f | %llu | %.2f |\n",
           atoi(argv[5]) ? "on" : "off", atoll(argv[6]) > 0 ? argv[6] : "off", threads,
           (double)decisions / elapsed, round_trips,
           round_trips ? (double)decisions / (double)round_trips : 0.0, allowed,
           (double)allowed / ceiling);
    (void)cached;
    return failed || (double)allowed > ceiling ? 1 : 0;
}
