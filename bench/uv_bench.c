/*
 * uv_bench.c - the unique counter (src/core/uv.c) in process: nanoseconds
 * per add, microseconds per window query, memory, and the error of every
 * window against exact distinct counts.
 *
 *   make bench-uv                 (pinned to CPU 1 with taskset)
 *   ./uv_bench [salts, default 8]
 *   ./uv_bench memory             (bytes of full counters by items a day)
 *
 * Workload (docs/design-uv.md, "Benchmark plan"): 10M events over one
 * simulated day, at a diurnal rate (1 + 0.7 sin) with a 10-minute spike at
 * 4x; 60% of the events come from 1M regulars (skewed: id = 1M u^2.5), 40%
 * from a tail of 40M ids (uniform), so ~4.7M distinct. The day runs from
 * 06:30 UTC to 06:29:59 the next day, so the 24 whole hours before the last
 * hour are a past window of 24 hour buckets (not one day bucket). The
 * counter has the default tiers (SPAN 7 days, 60 minutes, 48 hours, 31 days).
 *
 * Items are 16 bytes (id, salt), hashed in a loop of their own; the add loop
 * then feeds the hashes in time order. Each salt gives other hashes for the
 * same ids, so the errors of one window over the salts are independent
 * samples while the exact counts are shared.
 *
 * Windows (219): LAST windows of 1 minute to 24 hours, each ending at one
 * of 24 checkpoints (every hour, the add loop pauses there) when it fits in
 * the time elapsed, and past windows on the grid at the end of the day (1,
 * 5 and 10 minutes on the minute grid, 1, 2, 3, 6 and 24 hours on the hour
 * grid). Exact counts walk the
 * window's events with an epoch stamp per id. The registers of some windows
 * of every salt are compared with a brute-force maximum over their events.
 *
 * Query times are medians of 201 calls (clock_gettime around each) on the
 * counter of the first salt, with the data in cache: "registers" is the
 * window's registers (scan or bucket unions, with the zeroing), "count" adds
 * the estimator, as FG.UVCOUNT's core does. fg_uv_registers_since takes the
 * fastest kernel the CPU has; each kernel is also timed alone.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "uv.h"

#define EVENTS      10000000u
#define REGULARS    1000000u
#define TAIL        40000000u
#define IDS         (REGULARS + TAIL)
#define DAY         86400
#define DAY0        1700006400LL             /* a UTC midnight */
#define START       (DAY0 + 6 * 3600 + 1800) /* 06:30 */
#define NOW         (START + DAY - 1)        /* the last second of the simulated day */
#define SPIKE_AT    (15 * 3600)              /* seconds into the day */
#define SPIKE_LEN   600
#define CHECKPOINTS 24
#define MAX_SALTS   16
#define MAX_WINDOWS 256
#define TIMED_CALLS 201

typedef struct window {
    const char *kind; /* the row of the error table */
    bool past;        /* BETWEEN t1 t2 at NOW, else LAST t2 - t1 seconds ending at t2 - 1 */
    int64_t t1, t2;   /* seconds [t1, t2) */
    uint64_t exact;
    double error[MAX_SALTS]; /* relative, per salt */
} window;

static uint32_t *ids;   /* the events' items, in time order */
static uint32_t *first; /* first[s]: the first event of second START + s; first[DAY] = EVENTS */
static uint64_t *hashes;
static uint32_t *stamps; /* per id: the last window that counted it */
static window windows[MAX_WINDOWS];
static int nwindows;

static void *bench_realloc(void *ptr, size_t size) { return realloc(ptr, size); }
static void bench_free(void *ptr) { free(ptr); }
static const fg_allocator heap = {bench_realloc, bench_free};

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;
static uint64_t rng_next(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
static double rng_unit(void) { return (double)(rng_next() >> 11) * 0x1.0p-53; }

static void *must_alloc(size_t bytes) {
    void *p = calloc(1, bytes);
    if (p == NULL) {
        fprintf(stderr, "out of memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

/* ------------------------------------------------------------ workload */

static double rate(int s) {
    double r = 1 + 0.7 * sin(2 * M_PI * s / DAY);
    return s >= SPIKE_AT && s < SPIKE_AT + SPIKE_LEN ? 4 * r : r;
}

/* Events per second from the cumulative rate (exactly EVENTS in all), and
 * their items. */
static void generate(void) {
    ids = must_alloc(EVENTS * sizeof(*ids));
    first = must_alloc((DAY + 1) * sizeof(*first));
    double total = 0, cum = 0;
    for (int s = 0; s < DAY; s++) total += rate(s);
    for (int s = 0; s < DAY; s++) {
        first[s] = (uint32_t)floor(EVENTS * cum / total);
        cum += rate(s);
    }
    first[DAY] = EVENTS;
    for (uint32_t i = 0; i < EVENTS; i++)
        ids[i] = rng_unit() < 0.6 ? (uint32_t)(REGULARS * pow(rng_unit(), 2.5))
                                  : REGULARS + (uint32_t)(rng_next() % TAIL);
}

static uint32_t event_at(int64_t sec) {
    return first[sec < START ? 0 : sec - START >= DAY ? DAY : sec - START];
}

static uint64_t exact_distinct(int64_t t1, int64_t t2) {
    static uint32_t epoch;
    uint64_t n = 0;
    epoch++;
    for (uint32_t i = event_at(t1); i < event_at(t2); i++)
        if (stamps[ids[i]] != epoch) {
            stamps[ids[i]] = epoch;
            n++;
        }
    return n;
}

static void brute_force_registers(int64_t t1, int64_t t2, uint8_t regs[FG_UV_REGISTERS]) {
    memset(regs, 0, FG_UV_REGISTERS);
    for (uint32_t i = event_at(t1); i < event_at(t2); i++) {
        uint8_t r = fg_uv_rank(hashes[i]);
        uint32_t reg = fg_uv_register(hashes[i]);
        if (r > regs[reg]) regs[reg] = r;
    }
}

static void add_window(const char *kind, bool past, int64_t t1, int64_t t2) {
    window *w = &windows[nwindows++];
    w->kind = kind;
    w->past = past;
    w->t1 = t1;
    w->t2 = t2;
    w->exact = exact_distinct(t1, t2);
}

static const struct {
    const char *kind;
    int64_t seconds;
} last_kinds[] = {
    {"LAST 1 min", 60},   {"LAST 5 min", 300},  {"LAST 10 min", 600},    {"LAST 1 h", 3600},
    {"LAST 3 h", 10800},  {"LAST 6 h", 21600},  {"LAST 12 h", 43200},    {"LAST 24 h", DAY},
};
#define LAST_KINDS (sizeof(last_kinds) / sizeof(last_kinds[0]))

/* The windows and their exact counts. LAST windows end at the checkpoints
 * (the last one at NOW); past ones lie before the current minute or hour. */
static void make_windows(void) {
    for (int c = 1; c <= CHECKPOINTS; c++) {
        int64_t at = START + c * DAY / CHECKPOINTS - 1;
        for (size_t k = 0; k < LAST_KINDS; k++)
            if (last_kinds[k].seconds <= at - START + 1)
                add_window(last_kinds[k].kind, false, at - last_kinds[k].seconds + 1, at + 1);
    }
    /* Back to back from the start of the current minute or hour. */
    static const struct {
        const char *kind;
        int64_t seconds, grid;
        int count;
    } past[] = {
        {"BETWEEN 1 min", 60, 60, 20},      {"BETWEEN 5 min", 300, 60, 10},
        {"BETWEEN 10 min", 600, 60, 5},     {"BETWEEN 1 h", 3600, 3600, 22},
        {"BETWEEN 2 h", 7200, 3600, 11},    {"BETWEEN 3 h", 10800, 3600, 7},
        {"BETWEEN 6 h", 21600, 3600, 3},    {"BETWEEN 24 h", DAY, 3600, 1},
    };
    for (size_t k = 0; k < sizeof(past) / sizeof(past[0]); k++) {
        int64_t edge = NOW / past[k].grid * past[k].grid;
        for (int i = 1; i <= past[k].count; i++)
            add_window(past[k].kind, true, edge - past[k].seconds * i, edge - past[k].seconds * (i - 1));
    }
}

/* ------------------------------------------------------------- the runs */

typedef struct run_stats {
    double hash_ns, add_ns;
    int checked, identical;
} run_stats;

static uint8_t regs[FG_UV_REGISTERS], want[FG_UV_REGISTERS];

static void window_registers(const fg_uv *uv, const window *w, uint8_t out[FG_UV_REGISTERS]) {
    int64_t bad_edge;
    if (!w->past) {
        if (fg_uv_registers_last(uv, w->t2 - w->t1, w->t2 - 1, out) != FG_OK) exit(1);
    } else if (fg_uv_registers_between(uv, w->t1, w->t2, out, &bad_edge) != FG_UV_WINDOW_OK) {
        fprintf(stderr, "BETWEEN %lld %lld refused\n", (long long)w->t1, (long long)w->t2);
        exit(1);
    }
}

/* A window's estimate into its error column. The LAST windows at the end
 * of the day and the first past window of every kind are also checked
 * register by register. */
static void measure(const fg_uv *uv, window *w, int salt, run_stats *st) {
    window_registers(uv, w, regs);
    w->error[salt] = ((double)fg_uv_estimate(regs) - (double)w->exact) / (double)w->exact;
    if (w->past ? strcmp(w[-1].kind, w->kind) != 0 : w->t2 == NOW + 1) {
        brute_force_registers(w->t1, w->t2, want);
        st->checked++;
        st->identical += memcmp(regs, want, FG_UV_REGISTERS) == 0;
    }
}

/* One salt: hashes, adds (pausing at the checkpoints for the LAST
 * windows), then the past windows. The counter is left for timing. */
static void run_salt(fg_uv *uv, int salt, run_stats *st) {
    double t0 = now_ns();
    for (uint32_t i = 0; i < EVENTS; i++) {
        uint64_t item[2] = {ids[i], 0x5eed000000000000ULL + (uint64_t)salt};
        hashes[i] = fg_uv_hash(item, sizeof(item));
    }
    st->hash_ns += (now_ns() - t0) / EVENTS;

    fg_uv_init_tiers(uv, FG_UV_DEFAULT_SPAN, FG_UV_DEFAULT_MINUTES, FG_UV_DEFAULT_HOURS,
                     FG_UV_DEFAULT_DAYS, 0);
    double adding = 0;
    int w = 0;
    for (int c = 1; c <= CHECKPOINTS; c++) {
        int64_t at = START + c * DAY / CHECKPOINTS - 1;
        t0 = now_ns();
        for (int64_t sec = START + (c - 1) * DAY / CHECKPOINTS; sec <= at; sec++)
            for (uint32_t i = event_at(sec); i < event_at(sec + 1); i++)
                if (fg_uv_add(uv, hashes[i], sec, &heap) < 0) exit(1);
        adding += now_ns() - t0;
        for (; w < nwindows && !windows[w].past && windows[w].t2 == at + 1; w++)
            measure(uv, &windows[w], salt, st);
    }
    st->add_ns += adding / EVENTS;
    for (; w < nwindows; w++) measure(uv, &windows[w], salt, st);
}

/* ------------------------------------------------------------- timing */

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof(double), compare_doubles);
    return v[n / 2];
}

typedef struct query {
    const char *name;
    bool past;
    int64_t t1, t2;
} query;

/* Median microseconds of the query's registers, and of registers plus
 * the estimate. */
static void time_query(const fg_uv *uv, const query *q, double *registers_us, double *count_us) {
    window w = {.past = q->past, .t1 = q->t1, .t2 = q->t2};
    double reg[TIMED_CALLS], cnt[TIMED_CALLS];
    volatile uint64_t sink = 0;
    for (int i = 0; i < 10; i++) window_registers(uv, &w, regs); /* warm */
    for (int i = 0; i < TIMED_CALLS; i++) {
        double t0 = now_ns();
        window_registers(uv, &w, regs);
        double t1 = now_ns();
        sink += fg_uv_estimate(regs);
        double t2 = now_ns();
        reg[i] = (t1 - t0) / 1000;
        cnt[i] = (t2 - t0) / 1000;
    }
    (void)sink;
    *registers_us = median(reg, TIMED_CALLS);
    *count_us = median(cnt, TIMED_CALLS);
}

/* uv.c's scan kernels (0 portable, 1 SSE2, 2 AVX2), each timed on its
 * own; false when this build or CPU has no such kernel. No part of the API
 * (the unit tests use it too). */
bool fg_uv_registers_since_kernel(const fg_uv *uv, int64_t t1, uint8_t regs[FG_UV_REGISTERS], int kernel);

/* Median microseconds of LAST 24 HOURS' registers with one kernel; -1
 * when there is no such kernel here. */
static double time_kernel_us(const fg_uv *uv, int kernel) {
    double v[TIMED_CALLS];
    if (!fg_uv_registers_since_kernel(uv, NOW - DAY + 1, regs, kernel)) return -1;
    for (int i = 0; i < TIMED_CALLS; i++) {
        double t0 = now_ns();
        fg_uv_registers_since_kernel(uv, NOW - DAY + 1, regs, kernel);
        v[i] = (now_ns() - t0) / 1000;
    }
    return median(v, TIMED_CALLS);
}

static double time_estimate_us(void) {
    double v[TIMED_CALLS];
    volatile uint64_t sink = 0;
    for (int i = 0; i < TIMED_CALLS; i++) {
        double t0 = now_ns();
        sink += fg_uv_estimate(regs);
        v[i] = (now_ns() - t0) / 1000;
    }
    (void)sink;
    return median(v, TIMED_CALLS);
}

static double time_merge_us(void) {
    static uint8_t acc[FG_UV_REGISTERS];
    double v[TIMED_CALLS];
    for (int i = 0; i < TIMED_CALLS; i++) {
        memset(acc, 0, sizeof(acc));
        double t0 = now_ns();
        fg_uv_merge_registers(acc, regs);
        v[i] = (now_ns() - t0) / 1000;
    }
    return median(v, TIMED_CALLS);
}

/* ------------------------------------------------------------- report */

/* One row per kind of window (in the order they first appear), then one
 * for all LAST and one for all past windows. */
static void print_error_row(const char *label, const char *kind, int past, int salts) {
    int n = 0;
    double sum2 = 0, worst = 0;
    uint64_t lo = UINT64_MAX, hi = 0;
    for (int i = 0; i < nwindows; i++) {
        const window *w = &windows[i];
        if (kind ? strcmp(w->kind, kind) != 0 : w->past != past) continue;
        n++;
        lo = w->exact < lo ? w->exact : lo;
        hi = w->exact > hi ? w->exact : hi;
        for (int s = 0; s < salts; s++) {
            sum2 += w->error[s] * w->error[s];
            worst = fabs(w->error[s]) > worst ? fabs(w->error[s]) : worst;
        }
    }
    printf("| %s | %d x %d | %llu - %llu | %.3f%% | %.2f%% |\n", label, n, salts, (unsigned long long)lo,
           (unsigned long long)hi, 100 * sqrt(sum2 / (n * salts)), 100 * worst);
}

static void print_errors(int salts) {
    printf("| window | windows x salts | exact distinct | RMS error | max error |\n");
    printf("|---|---:|---:|---:|---:|\n");
    for (int i = 0; i < nwindows; i++) {
        bool seen = false;
        for (int j = 0; j < i && !seen; j++) seen = strcmp(windows[j].kind, windows[i].kind) == 0;
        if (!seen) print_error_row(windows[i].kind, windows[i].kind, 0, salts);
    }
    print_error_row("all LAST", NULL, 0, salts);
    print_error_row("all BETWEEN", NULL, 1, salts);
}

static double average_rows(const fg_uv *uv) {
    unsigned rows = 0;
    for (int t = 0; uv->tiles != NULL && t < FG_UV_TILES; t++) rows += uv->tiles->nrows[t];
    return (double)rows / FG_UV_TILES;
}

/* The staircase's bytes: its list, or its tiles. */
static uint64_t staircase_bytes(const fg_uv *uv) {
    uint64_t bytes = (uint64_t)uv->list_room * sizeof(uint64_t);
    if (uv->tiles == NULL) return bytes;
    bytes += sizeof(*uv->tiles);
    for (int t = 0; t < FG_UV_TILES; t++)
        if (uv->tiles->tile[t] != NULL) bytes += (16 + (uint64_t)uv->tiles->nrows[t] * 64) * 4;
    return bytes;
}

/* ------------------------------------------------------------- memory */

/* `uv_bench memory`: the bytes a counter holds once every tier is full
 * (fg_uv_bytes: what MEMORY USAGE reports, less the key), by distinct items
 * a day at an even rate, fed day after day for the longest retention. Days
 * older than the span and the hour tier reach only the day buckets, which
 * are 16 KB whatever they hold, and their staircase entries are pruned by
 * the later days' adds to each register, so they are fed at most
 * MEMORY_OLD_DAY items (keeping a run under a few minutes). */
#define MEMORY_OLD_DAY 1000000LL

typedef struct memory_config {
    const char *name;
    int64_t span, minutes, hours, days;
} memory_config;

static void memory_row(const memory_config *c, int64_t per_day) {
    fg_uv uv;
    if (fg_uv_init_tiers(&uv, c->span, c->minutes, c->hours, c->days, 0) != FG_OK) exit(1);
    int64_t span_days = (c->span + DAY - 1) / DAY, hour_days = (c->hours * 3600 + DAY - 1) / DAY;
    int64_t fed = c->days > span_days ? c->days : span_days;
    if (hour_days + 1 > fed) fed = hour_days + 1;
    for (int64_t d = 0; d < fed; d++) {
        bool recent = fed - d <= (span_days > hour_days ? span_days : hour_days) + 1;
        int64_t n = recent || per_day < MEMORY_OLD_DAY ? per_day : MEMORY_OLD_DAY;
        for (int64_t j = 0; j < n; j++)
            if (fg_uv_add(&uv, rng_next(), DAY0 + d * DAY + j * DAY / n, &heap) < 0) exit(1);
    }
    uint64_t total = fg_uv_bytes(&uv), stairs = staircase_bytes(&uv);
    printf("| %s | %.0e | %lld | %llu | %.2f | %llu | %llu | %llu | %llu |\n", c->name,
           (double)per_day, (long long)fed, (unsigned long long)uv.entries, average_rows(&uv),
           (unsigned long long)stairs, (unsigned long long)uv.buckets,
           (unsigned long long)(total - stairs), (unsigned long long)total);
    fflush(stdout);
    fg_uv_free(&uv, &heap);
}

static int memory_table(void) {
    static const memory_config configs[] = {
        {"A: defaults (SPAN 7 d, 60 min, 48 h, 31 d)", FG_UV_DEFAULT_SPAN, FG_UV_DEFAULT_MINUTES,
         FG_UV_DEFAULT_HOURS, FG_UV_DEFAULT_DAYS},
        {"B: SPAN 1 d, 60 min, 24 h, no days", DAY, 60, 24, 0},
    };
    printf("### In process: bytes of a full counter by distinct items a day\n\n");
    printf("| counter | items/day | days fed | staircase entries | rows/tile | staircase bytes "
           "| buckets | bucket, array and header bytes | fg_uv_bytes |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (size_t c = 0; c < sizeof(configs) / sizeof(configs[0]); c++)
        for (int64_t per_day = 1000; per_day <= 100000000; per_day *= 10)
            memory_row(&configs[c], per_day);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "memory") == 0) return memory_table();
    int salts = argc > 1 ? atoi(argv[1]) : 8;
    if (salts < 1 || salts > MAX_SALTS) {
        fprintf(stderr, "usage: %s [salts 1..%d]\n", argv[0], MAX_SALTS);
        return 2;
    }
    generate();
    hashes = must_alloc(EVENTS * sizeof(*hashes));
    stamps = must_alloc(IDS * sizeof(*stamps));
    make_windows();
    fprintf(stderr, "%u events, %llu distinct in the day, %d windows\n", EVENTS,
            (unsigned long long)exact_distinct(START, NOW + 1), nwindows);

    run_stats st = {0};
    fg_uv timed;
    for (int salt = 0; salt < salts; salt++) {
        fg_uv uv;
        run_salt(&uv, salt, &st);
        fprintf(stderr, "salt %d done\n", salt);
        if (salt == 0) timed = uv;
        else fg_uv_free(&uv, &heap);
    }
    int64_t hour = NOW / 3600 * 3600;
    const query queries[] = {
        {"LAST 60 SECONDS", false, NOW - 59, NOW + 1},
        {"LAST 1 HOURS", false, NOW - 3599, NOW + 1},
        {"LAST 24 HOURS", false, NOW - DAY + 1, NOW + 1},
        {"BETWEEN 24 hour buckets", true, hour - DAY, hour},
    };
    printf("### In process: 10M events over a day, default tiers\n\n");
    printf("| measure | value |\n|---|---:|\n");
    printf("| hash (16-byte item), ns | %.1f |\n", st.hash_ns / salts);
    printf("| add (staircase + 3 tiers), ns | %.1f |\n", st.add_ns / salts);
    printf("| staircase entries | %llu (%.2f per register) |\n", (unsigned long long)timed.entries,
           (double)timed.entries / FG_UV_REGISTERS);
    printf("| rows per tile (average) | %.2f |\n", average_rows(&timed));
    printf("| buckets | %llu |\n", (unsigned long long)timed.buckets);
    printf("| fg_uv_bytes | %llu (%.2f MB) |\n", (unsigned long long)fg_uv_bytes(&timed),
           (double)fg_uv_bytes(&timed) / 1e6);
    printf("| brute-force register checks | %d of %d identical |\n\n", st.identical, st.checked);

    printf("| query (median of %d) | registers, us | count (registers + estimate), us |\n", TIMED_CALLS);
    printf("|---|---:|---:|\n");
    for (size_t q = 0; q < sizeof(queries) / sizeof(queries[0]); q++) {
        double reg_us, count_us;
        time_query(&timed, &queries[q], &reg_us, &count_us);
        printf("| %s | %.1f | %.1f |\n", queries[q].name, reg_us, count_us);
    }
    static const char *const kernels[] = {"portable", "SSE2", "AVX2"};
    for (int k = 0; k < 3; k++) {
        double us = time_kernel_us(&timed, k);
        if (us >= 0) printf("| LAST 24 HOURS, %s scan | %.1f | |\n", kernels[k], us);
    }
    window day = {.t1 = NOW - DAY + 1, .t2 = NOW + 1};
    window_registers(&timed, &day, regs);
    printf("| fg_uv_estimate alone | | %.1f |\n", time_estimate_us());
    printf("| fg_uv_merge_registers alone | %.1f | |\n\n", time_merge_us());

    print_errors(salts);
    fg_uv_free(&timed, &heap);
    free(ids);
    free(first);
    free(hashes);
    free(stamps);
    return st.identical == st.checked ? 0 : 1;
}
