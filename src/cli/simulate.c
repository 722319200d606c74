/*
 * simulate.c - floodgate simulate: every algorithm on the same traffic.
 *
 * Each scenario is a list of request times. For each algorithm a fresh mem:
 * client is opened with an injected clock (fg_options.clock_us), and the
 * requests are replayed by setting that clock and calling fg_check: the
 * decisions are exactly those the library (and the server) would make at
 * those instants, and a run takes milliseconds whatever the simulated time.
 *
 * Every limit allows 10 requests per second (windows of 1 s, buckets of 10
 * refilled at 10/s), so that the differences are those of the algorithms.
 * The simulated epoch is a whole second, so fixed windows start at t = 0,
 * 1000, 2000 ms... of the scenario.
 *
 * Output, per scenario, in DIR:
 *   <scenario>.csv       time_ms,algorithm,allowed: one row per request and
 *                        algorithm, grouped by algorithm
 *   <scenario>-1s.csv    time_ms,algorithm,allowed_last_1s: for each
 *                        algorithm, how many requests it allowed in
 *                        (time_ms - 1000, time_ms], at every time that count
 *                        changes (a step function), the quantity every limit
 *                        here bounds by 10
 *   <scenario>.gp, .png  with --plot: the gnuplot script, and its picture
 * and a summary table on stdout.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "floodgate.h"

#define SIM_EPOCH_US 1700000000000000LL /* a whole second */
#define SIM_LIMIT 10
#define SIM_WINDOW_MS 1000
#define SIM_KEY "sim"
#define SIM_MAX_PHASES 4

typedef struct sim_algorithm {
    const char *name;  /* as in floodgate check, and in the CSV */
    const char *title; /* for people */
    const char *color; /* of its curve */
    fg_limit limit;
} sim_algorithm;

static const sim_algorithm sim_algorithms[] = {
    {"fixed", "fixed window", "#7b3294",
     {.algorithm = FG_FIXED_WINDOW, .limit = SIM_LIMIT, .window_ms = SIM_WINDOW_MS}},
    {"sliding", "sliding window", "#e08214",
     {.algorithm = FG_SLIDING_WINDOW, .limit = SIM_LIMIT, .window_ms = SIM_WINDOW_MS}},
    {"slidelog", "sliding log", "#2166ac",
     {.algorithm = FG_SLIDING_LOG, .limit = SIM_LIMIT, .window_ms = SIM_WINDOW_MS}},
    {"token", "token bucket", "#80cdc1",
     {.algorithm = FG_TOKEN_BUCKET, .limit = SIM_LIMIT, .rate = SIM_LIMIT}},
    {"leaky", "leaky bucket", "#35978f",
     {.algorithm = FG_LEAKY_BUCKET, .limit = SIM_LIMIT, .rate = SIM_LIMIT}},
    {"gcra", "GCRA", "#01665e",
     {.algorithm = FG_GCRA, .limit = SIM_LIMIT, .window_ms = SIM_WINDOW_MS, .rate = SIM_LIMIT}},
};
#define SIM_NALGORITHMS (sizeof(sim_algorithms) / sizeof(sim_algorithms[0]))

/* Requests at start_ms, start_ms + every_ms, ... while < end_ms. */
typedef struct sim_phase {
    int64_t start_ms, end_ms, every_ms;
} sim_phase;

typedef struct sim_scenario {
    const char *name;
    const char *title;
    int64_t from_ms, to_ms; /* the plot's time axis */
    sim_phase phases[SIM_MAX_PHASES];
} sim_scenario;

static const sim_scenario sim_scenarios[] = {
    {"steady", "steady: 20 requests/s for 4 s", 0, 4000, {{0, 4000, 50}}},
    /* Irregular gaps, so the bursts meet the windows at different phases;
     * the last one straddles a boundary, as bursts will. */
    {"bursty", "bursty: bursts of 20 requests in 400 ms, with quiet gaps", 0, 4500,
     {{0, 400, 20}, {1400, 1800, 20}, {2500, 2900, 20}, {3800, 4200, 20}}},
    {"boundary", "boundary: 40 requests in 200 ms, across the window boundary at 1 s", 700,
     1300, {{900, 1100, 5}}},
};
#define SIM_NSCENARIOS (sizeof(sim_scenarios) / sizeof(sim_scenarios[0]))

/* What one algorithm did in one scenario. */
typedef struct sim_run {
    int64_t *allowed_at; /* times of the allowed requests, ascending */
    size_t allowed;
    int64_t peak; /* the most requests allowed in any 1 s */
} sim_run;

/* ---------------------------------------------------------------- traffic */

/* The scenario's request times, in order, in a malloc'ed array. */
static int64_t *scenario_times(const sim_scenario *s, size_t *count) {
    size_t n = 0, p;
    int64_t t, *times;

    for (p = 0; p < SIM_MAX_PHASES && s->phases[p].every_ms > 0; p++)
        for (t = s->phases[p].start_ms; t < s->phases[p].end_ms; t += s->phases[p].every_ms) n++;
    if ((times = malloc(n * sizeof(*times))) == NULL) return NULL;
    n = 0;
    for (p = 0; p < SIM_MAX_PHASES && s->phases[p].every_ms > 0; p++)
        for (t = s->phases[p].start_ms; t < s->phases[p].end_ms; t += s->phases[p].every_ms)
            times[n++] = t;
    *count = n;
    return times;
}

static int64_t sim_clock(void *arg) { return *(const int64_t *)arg; }

/* Replays `times` through a fresh mem: client limited by `a`, writes one CSV
 * row per request, and keeps the allowed times in run->allowed_at (room for
 * n, given by the caller). */
static int run_algorithm(const sim_algorithm *a, const int64_t *times, size_t n, FILE *csv,
                         sim_run *run) {
    int64_t now_us = SIM_EPOCH_US;
    fg_options opts;
    fg_client *c;
    fg_result r;
    fg_error err;
    size_t i;

    fg_options_init(&opts);
    opts.clock_us = sim_clock;
    opts.clock_arg = &now_us;
    if ((c = fg_open("mem:", &opts, &err)) == NULL)
        return cli_error("%s: %s", fg_code_name(err.code), err.message);
    run->allowed = 0;
    for (i = 0; i < n; i++) {
        now_us = SIM_EPOCH_US + times[i] * 1000;
        if (fg_check(c, SIM_KEY, &a->limit, 1, &r, &err) != FG_CODE_OK) {
            fg_close(c);
            return cli_error("%s: %s: %s", a->name, fg_code_name(err.code), err.message);
        }
        if (r.allowed) run->allowed_at[run->allowed++] = times[i];
        fprintf(csv, "%lld,%s,%d\n", (long long)times[i], a->name, r.allowed ? 1 : 0);
    }
    fg_close(c);
    return CLI_EXIT_OK;
}

/* Writes the allowed-in-the-last-second step function of one run, from the
 * plot's left edge until it is back to 0, and sets run->peak. The count rises
 * at each allowed time t and falls at t + 1000 (the window is (now - 1000,
 * now]): merging the two ascending sequences gives every change in order. */
static void write_last_second(const sim_algorithm *a, const sim_scenario *s, sim_run *run,
                              FILE *f) {
    size_t up = 0, down = 0;
    int64_t count = 0, t;

    fprintf(f, "%lld,%s,0\n", (long long)s->from_ms, a->name);
    run->peak = 0;
    while (down < run->allowed) {
        t = up < run->allowed ? run->allowed_at[up] : INT64_MAX;
        if (run->allowed_at[down] + SIM_WINDOW_MS < t) t = run->allowed_at[down] + SIM_WINDOW_MS;
        for (; up < run->allowed && run->allowed_at[up] == t; up++) count++;
        for (; down < run->allowed && run->allowed_at[down] + SIM_WINDOW_MS == t; down++) count--;
        if (count > run->peak) run->peak = count;
        fprintf(f, "%lld,%s,%lld\n", (long long)t, a->name, (long long)count);
    }
}

/* ------------------------------------------------------------------ plots */

/* The gnuplot script for one scenario, with the totals in the row labels.
 * Paths are relative: gnuplot runs in DIR. */
static void write_plot_script(FILE *f, const sim_scenario *s, const sim_run *runs,
                              size_t nrequests) {
    size_t i, n = SIM_NALGORITHMS;
    int64_t b;

    fprintf(f, "# Generated by floodgate simulate: draws %s.csv and %s-1s.csv into %s.png.\n",
            s->name, s->name, s->name);
    fprintf(f, "set terminal pngcairo size 1100,820 font 'sans,10'\n"
               "set output '%s.png'\n"
               "set datafile separator ','\n",
            s->name);
    fprintf(f, "set multiplot layout 2,1 title \"%s (%zu requests); every limit allows %d "
               "per second\" font 'sans,12'\n",
            s->title, nrequests, SIM_LIMIT);
    fprintf(f, "set lmargin 26\nset rmargin 24\nset xrange [%lld:%lld]\nset xtics %d\n",
            (long long)s->from_ms, (long long)s->to_ms,
            s->to_ms - s->from_ms >= 2000 ? 500 : 50);
    fputs("set key outside right top vertical Left reverse\n", f);
    /* Dashed lines where fixed windows start: where the 2x burst happens. */
    for (b = s->from_ms - s->from_ms % SIM_WINDOW_MS + SIM_WINDOW_MS; b < s->to_ms;
         b += SIM_WINDOW_MS)
        fprintf(f, "set arrow from %lld, graph 0 to %lld, graph 1 nohead dt 2 lc 'gray40'\n",
                (long long)b, (long long)b);

    /* Top: a row per algorithm, the first one at the top. */
    fputs("row(s) = ", f);
    for (i = 0; i < n; i++)
        fprintf(f, "s eq '%s' ? %zu : ", sim_algorithms[i].name, n - 1 - i);
    fputs("NaN\n", f);
    fprintf(f, "set yrange [-0.6:%zu.6]\nset ytics (", n - 1);
    for (i = 0; i < n; i++)
        fprintf(f, "%s\"%s\\n%zu allowed, peak %lld/s\" %zu", i ? ", " : "",
                sim_algorithms[i].title, runs[i].allowed, (long long)runs[i].peak, n - 1 - i);
    fputs(") scale 0\n", f);
    fprintf(f, "plot '%s.csv' skip 1 using 1:($3 == 1 ? row(strcol(2)) : NaN) "
               "with points pt 7 ps 0.6 lc rgb '#1a9850' title 'allowed', \\\n"
               "     '' skip 1 using 1:($3 == 0 ? row(strcol(2)) : NaN) "
               "with points pt 2 ps 0.5 lc rgb '#d73027' title 'denied', \\\n"
               "     NaN with lines dt 2 lc 'gray40' title 'fixed window starts'\n",
            s->name);

    /* Bottom: what each algorithm allowed in the last second, against the
     * limit. Wider lines first, so that curves that coincide stay visible. */
    fputs("set yrange [0:*]\nset ytics auto scale 1\nset grid ytics\n", f);
    fputs("set xlabel 'time (ms)'\nset ylabel 'allowed in the last 1 s'\n", f);
    fputs("plot ", f);
    for (i = 0; i < n; i++)
        fprintf(f, "'%s-1s.csv' skip 1 using 1:(strcol(2) eq '%s' ? $3 : NaN) with steps "
                   "lw %.1f lc rgb '%s' title '%s', \\\n     ",
                s->name, sim_algorithms[i].name, 1.5 + 0.8 * (double)(n - 1 - i),
                sim_algorithms[i].color, sim_algorithms[i].title);
    fprintf(f, "%d with lines dt 3 lw 1.5 lc 'black' title 'limit'\n", SIM_LIMIT);
    fputs("unset multiplot\n", f);
}

/* Runs gnuplot on DIR/<name>.gp, inside DIR. */
static int run_gnuplot(const char *dir, const char *name) {
    char script[256];
    int status;
    pid_t pid;

    snprintf(script, sizeof(script), "%s.gp", name);
    if ((pid = fork()) < 0) return cli_error("fork: %s", strerror(errno));
    if (pid == 0) {
        if (chdir(dir) == 0) execlp("gnuplot", "gnuplot", script, (char *)NULL);
        fprintf(stderr, "floodgate: cannot run gnuplot in %s: %s\n", dir, strerror(errno));
        _exit(127);
    }
    if (waitpid(pid, &status, 0) < 0) return cli_error("waitpid: %s", strerror(errno));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return cli_error("gnuplot failed on %s/%s", dir, script);
    return CLI_EXIT_OK;
}

/* -------------------------------------------------------------- scenarios */

static FILE *open_output(const char *dir, const char *name, const char *suffix) {
    char path[4096];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s%s", dir, name, suffix);
    if ((f = fopen(path, "w")) == NULL) cli_error("%s: %s", path, strerror(errno));
    return f;
}

static int close_output(FILE *f, const char *dir, const char *name, const char *suffix) {
    if (fclose(f) != 0) return cli_error("%s/%s%s: %s", dir, name, suffix, strerror(errno));
    return CLI_EXIT_OK;
}

static void print_summary(const sim_scenario *s, const sim_run *runs, size_t nrequests) {
    size_t i;

    printf("%s (%zu requests)\n", s->title, nrequests);
    printf("  %-16s %8s %8s %12s\n", "algorithm", "allowed", "denied", "peak in 1 s");
    for (i = 0; i < SIM_NALGORITHMS; i++)
        printf("  %-16s %8zu %8zu %12lld\n", sim_algorithms[i].title, runs[i].allowed,
               nrequests - runs[i].allowed, (long long)runs[i].peak);
}

/* Runs every algorithm, writing <scenario>.csv; the allowed times are kept
 * in runs[] (freed by the caller). */
static int run_all(const sim_scenario *s, const char *dir, const int64_t *times, size_t n,
                   sim_run *runs) {
    FILE *csv = open_output(dir, s->name, ".csv");
    size_t i;

    if (csv == NULL) return CLI_EXIT_ERROR;
    fputs("time_ms,algorithm,allowed\n", csv);
    for (i = 0; i < SIM_NALGORITHMS; i++) {
        if ((runs[i].allowed_at = malloc(n * sizeof(int64_t))) == NULL ||
            run_algorithm(&sim_algorithms[i], times, n, csv, &runs[i]) != CLI_EXIT_OK) {
            fclose(csv);
            return runs[i].allowed_at ? CLI_EXIT_ERROR : cli_error("out of memory");
        }
    }
    return close_output(csv, dir, s->name, ".csv");
}

static int write_outputs(const sim_scenario *s, const char *dir, sim_run *runs, size_t n,
                         int plot) {
    FILE *f = open_output(dir, s->name, "-1s.csv");
    size_t i;

    if (f == NULL) return CLI_EXIT_ERROR;
    fputs("time_ms,algorithm,allowed_last_1s\n", f);
    for (i = 0; i < SIM_NALGORITHMS; i++) write_last_second(&sim_algorithms[i], s, &runs[i], f);
    if (close_output(f, dir, s->name, "-1s.csv") != CLI_EXIT_OK) return CLI_EXIT_ERROR;
    print_summary(s, runs, n);
    if (!plot) return CLI_EXIT_OK;
    if ((f = open_output(dir, s->name, ".gp")) == NULL) return CLI_EXIT_ERROR;
    write_plot_script(f, s, runs, n);
    if (close_output(f, dir, s->name, ".gp") != CLI_EXIT_OK) return CLI_EXIT_ERROR;
    return run_gnuplot(dir, s->name);
}

static int run_scenario(const sim_scenario *s, const char *dir, int plot) {
    sim_run runs[SIM_NALGORITHMS] = {{0}};
    size_t n, i;
    int64_t *times = scenario_times(s, &n);
    int rc;

    if (times == NULL) return cli_error("out of memory");
    rc = run_all(s, dir, times, n, runs);
    if (rc == CLI_EXIT_OK) rc = write_outputs(s, dir, runs, n, plot);
    for (i = 0; i < SIM_NALGORITHMS; i++) free(runs[i].allowed_at);
    free(times);
    return rc;
}

int cli_simulate(int argc, char **argv) {
    const char *dir = ".";
    int i, plot = 0;
    size_t s;

    for (i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--plot") == 0) {
            plot = 1;
        } else if (strcmp(argv[i], "--out") == 0 && i + 1 < argc) {
            dir = argv[++i];
        } else if (strncmp(argv[i], "--out=", 6) == 0) {
            dir = argv[i] + 6;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            puts("usage: floodgate simulate [--out DIR] [--plot]");
            return CLI_EXIT_OK;
        } else {
            return cli_error("simulate takes [--out DIR] [--plot], not '%s'", argv[i]);
        }
    }
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) return cli_error("%s: %s", dir, strerror(errno));
    for (s = 0; s < SIM_NSCENARIOS; s++) {
        if (s) putchar('\n');
        if (run_scenario(&sim_scenarios[s], dir, plot) != CLI_EXIT_OK) return CLI_EXIT_ERROR;
    }
    return CLI_EXIT_OK;
}
