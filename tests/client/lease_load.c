/*
 * lease_load.c - many threads checking one token bucket through leases,
 * for tests/integration/test_client_lease.py: measures the round trips
 * saved and how far the admissions go beyond what the bucket allows.
 *
 *   lease_load URL KEY THREADS CLIENTS SECONDS CAPACITY RATE LEASE_UNITS LEASE_MS PAUSE_US
 *              BURST_PERIOD_MS
 *
 * THREADS threads share CLIENTS clients (thread i uses client i % CLIENTS)
 * and check KEY (cost 1) for SECONDS, pausing PAUSE_US after each check
 * (0: as fast as they can), except in the first BURST_MS of every
 * BURST_PERIOD_MS of the wall clock (0: never), when they all check as fast
 * as they can: the bucket, full again after a quiet period, meets clients
 * that took leases just before, the case leases admit the most in. Every admission is recorded with the wall clock
 * (CLOCK_REALTIME, the clock of the server) read before and after its call:
 * it was decided somewhere in between. For windows of several lengths d,
 * the program counts the admissions certainly inside some [a, a + d] (both
 * times inside) and prints, per d,
 *
 *   window D_MS MAX_COUNT ALLOWED BOUND
 *
 * ALLOWED = capacity + rate x d, what the bucket itself admits at most;
 * BOUND = capacity + rate x (d + lease_ms), the documented bound with leases.
 * Then: "total DECISIONS ROUND_TRIPS LEASE_HITS ADMITTED ERRORS".
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "floodgate.h"

#define BURST_MS 10

typedef struct admission {
    int64_t start_us, end_us;
} admission;

typedef struct worker {
    pthread_t thread;
    fg_client *client;
    const char *key;
    fg_limit limit;
    int64_t deadline_us;
    long pause_us;
    int64_t burst_period_us;
    admission *log;
    size_t admitted, cap;
    long decisions, errors;
} worker;

static int64_t wall_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void record(worker *w, int64_t start, int64_t end) {
    if (w->admitted == w->cap) {
        w->cap = w->cap ? w->cap * 2 : 4096;
        w->log = realloc(w->log, w->cap * sizeof(*w->log));
        if (w->log == NULL) abort();
    }
    w->log[w->admitted++] = (admission){start, end};
}

static void *run(void *arg) {
    worker *w = arg;
    struct timespec pause = {0, w->pause_us * 1000};
    for (int64_t start = wall_us(); start < w->deadline_us; start = wall_us()) {
        fg_result r;
        fg_error err;
        fg_code rc = fg_check(w->client, w->key, &w->limit, 1, &r, &err);
        int64_t end = wall_us();
        w->decisions++;
        if (rc != FG_CODE_OK) {
            if (w->errors++ < 3) fprintf(stderr, "check: %s\n", err.message);
        } else if (r.allowed) {
            record(w, start, end);
        }
        bool burst = w->burst_period_us > 0 && end % w->burst_period_us < BURST_MS * 1000;
        if (w->pause_us > 0 && !burst) nanosleep(&pause, NULL);
    }
    return NULL;
}

static int by_start(const void *a, const void *b) {
    const admission *x = a, *y = b;
    return (x->start_us > y->start_us) - (x->start_us < y->start_us);
}

/* The most admissions certainly inside one window [s_i, s_i + d]. */
static size_t max_in_window(const admission *all, size_t n, int64_t d_us) {
    size_t best = 0;
    for (size_t i = 0; i < n; i++) {
        size_t count = 0;
        int64_t end = all[i].start_us + d_us;
        for (size_t j = i; j < n && all[j].start_us <= end; j++)
            count += all[j].end_us <= end;
        if (count > best) best = count;
    }
    return best;
}

int main(int argc, char **argv) {
    if (argc != 12) {
        fprintf(stderr, "usage: %s URL KEY THREADS CLIENTS SECONDS CAPACITY RATE LEASE_UNITS "
                        "LEASE_MS PAUSE_US BURST_PERIOD_MS\n", argv[0]);
        return 2;
    }
    int nthreads = atoi(argv[3]), nclients = atoi(argv[4]);
    double seconds = atof(argv[5]), rate = atof(argv[7]);
    int64_t capacity = atoll(argv[6]);
    fg_options o;
    fg_options_init(&o);
    o.lease_units = atoll(argv[8]);
    o.lease_ms = atoi(argv[9]);
    fg_client **clients = calloc((size_t)nclients, sizeof(*clients));
    worker *w = calloc((size_t)nthreads, sizeof(*w));
    for (int i = 0; i < nclients; i++) {
        fg_error err;
        if ((clients[i] = fg_open(argv[1], &o, &err)) == NULL) {
            fprintf(stderr, "open: %s\n", err.message);
            return 1;
        }
    }
    int64_t deadline = wall_us() + (int64_t)(seconds * 1e6);
    for (int i = 0; i < nthreads; i++) {
        w[i] = (worker){.client = clients[i % nclients], .key = argv[2],
                        .limit = fg_token_bucket(capacity, rate), .deadline_us = deadline,
                        .pause_us = atol(argv[10]),
                        .burst_period_us = atoll(argv[11]) * 1000};
        pthread_create(&w[i].thread, NULL, run, &w[i]);
    }
    size_t total = 0;
    long decisions = 0, errors = 0;
    for (int i = 0; i < nthreads; i++) {
        pthread_join(w[i].thread, NULL);
        total += w[i].admitted;
        decisions += w[i].decisions;
        errors += w[i].errors;
    }
    admission *all = malloc((total + 1) * sizeof(*all));
    size_t n = 0;
    for (int i = 0; i < nthreads; i++) {
        memcpy(all + n, w[i].log, w[i].admitted * sizeof(*all));
        n += w[i].admitted;
        free(w[i].log);
    }
    qsort(all, n, sizeof(*all), by_start);
    static const double windows_ms[] = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000};
    for (size_t k = 0; k < sizeof(windows_ms) / sizeof(windows_ms[0]); k++) {
        double d = windows_ms[k];
        printf("window %g %zu %.1f %.1f\n", d, max_in_window(all, n, (int64_t)(d * 1000)),
               capacity + rate * d / 1000, capacity + rate * (d + o.lease_ms) / 1000);
    }
    uint64_t trips = 0, hits = 0;
    for (int i = 0; i < nclients; i++) {
        fg_stats st;
        fg_get_stats(clients[i], &st);
        trips += st.round_trips;
        hits += st.lease_hits;
        fg_close(clients[i]);
    }
    printf("total %ld %llu %llu %zu %ld\n", decisions, (unsigned long long)trips,
           (unsigned long long)hits, n, errors);
    free(all);
    free(w);
    free(clients);
    return 0;
}
