/*
 * distinct_client.c - libfloodgate's unique counting driven line by line,
 * and a differential run of mem: against a server, for
 * tests/integration/test_client_distinct.py.
 *
 *   distinct_client URL [CLOCK_US]
 *   distinct_client diff URL SEED OPERATIONS
 *
 * With a URL, reads commands on stdin and answers one line each on stdout
 * (flushed); a failed call answers "err CODE MESSAGE". With CLOCK_US the
 * client's clock stands at that instant until "clock" moves it (mem:
 * stamps and counts by it; a server keeps its own clock).
 *
 *   create KEY                              ok (the defaults: opts NULL)
 *   create KEY SPAN MINUTES HOURS DAYS TZ   ok
 *   add KEY AT_US ITEM...                   ok 0|1 (AT_US -1: now)
 *   count KEY... last N UNIT                ok COUNT
 *   count KEY... between START_US END_US    ok COUNT
 *   export KEY... WINDOW                    ok HEX (the 12304 bytes)
 *   clock US                                ok
 *   invalid                                 ok CODE... (see run_invalid)
 *   stats                                   ok ROUND_TRIPS FAILURES
 *
 * UNIT is seconds, minutes, hours or days, or a number (an fg_time_unit
 * value, bad ones included). "count last 1 seconds" names no key (nkeys
 * 0). ITEM is the word itself, or bytes in hex after "0x" ("0x" alone is
 * the empty item).
 *
 * diff: opens "mem:" and URL, both on the real clock, and feeds both the
 * same random creates (good and bad options), adds at explicit instants
 * over the last 40 days (binary items, some far in the future or out of
 * range), counts and exports of 1 to 9 keys over BETWEEN windows with
 * edges on and off every grid, and LAST windows, requiring identical
 * codes, messages, counts and bytes. Items sit on multiples of 10 seconds,
 * LAST windows last multiples of 10 seconds, and they are not asked while
 * the clock's second is 9 mod 10, so that a second ticking between the two
 * calls moves no window's start across an item. Exit 0 with "OK N operations: ..." (how many
 * counts agreed, how many of them not 0, exports agreed, unions of more
 * than 6 keys agreed, and refusals off the grid, longer than the SPAN and
 * of bad arguments) when all agree, 1 at the first difference, printed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "floodgate.h"

#define LINE_MAX_LEN 65536
#define WORDS_MAX    4096
#define ANSWER_MAX   (FG_HLL_BYTES * 2 + 512)
#define US           1000000LL

static fg_client *client;
static int64_t fixed_clock_us;

static int64_t fixed_clock(void *arg) {
    (void)arg;
    return fixed_clock_us;
}

typedef struct words {
    char *w[WORDS_MAX];
    int n;
} words;

static void split(char *line, words *ws) {
    char *save = NULL;
    ws->n = 0;
    for (char *t = strtok_r(line, " \n", &save); t != NULL && ws->n < WORDS_MAX;
         t = strtok_r(NULL, " \n", &save))
        ws->w[ws->n++] = t;
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* An item in place: a "0x..." word becomes its bytes. */
static size_t item(char *w) {
    if (strncmp(w, "0x", 2) != 0) return strlen(w);
    size_t n = 0;
    for (const char *p = w + 2; hex_digit(p[0]) >= 0 && hex_digit(p[1]) >= 0; p += 2)
        w[n++] = (char)(hex_digit(p[0]) * 16 + hex_digit(p[1]));
    return n;
}

static void answer_error(char *out, size_t len, fg_code rc, const fg_error *err) {
    snprintf(out, len, "err %s %s", fg_code_name(rc), err->message);
}

static fg_time_unit unit_of(const char *w) {
    static const struct {
        const char *name;
        fg_time_unit unit;
    } units[] = {
        {"seconds", FG_SECONDS}, {"minutes", FG_MINUTES}, {"hours", FG_HOURS}, {"days", FG_DAYS}};
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
        if (strcmp(w, units[i].name) == 0) return units[i].unit;
    return (fg_time_unit)atoi(w);
}

/* "KEY... last N UNIT" or "KEY... between S E" from ws->w[1] on: the keys
 * and the window; false when the words are neither. */
static bool keys_and_window(words *ws, const char **keys, size_t *nkeys, fg_window *w) {
    if (ws->n < 4) return false;
    const char *kind = ws->w[ws->n - 3];
    const char *a = ws->w[ws->n - 2], *b = ws->w[ws->n - 1];
    if (strcmp(kind, "last") == 0)
        *w = fg_last(atoll(a), unit_of(b));
    else if (strcmp(kind, "between") == 0)
        *w = fg_between(atoll(a), atoll(b));
    else
        return false;
    *nkeys = (size_t)(ws->n - 4);
    for (size_t i = 0; i < *nkeys; i++)
        keys[i] = ws->w[i + 1];
    return true;
}

static void run_add(words *ws, char *out, size_t len) {
    size_t n = (size_t)(ws->n - 3);
    const void *items[WORDS_MAX];
    size_t lens[WORDS_MAX];
    for (size_t i = 0; i < n; i++) {
        items[i] = ws->w[i + 3];
        lens[i] = item(ws->w[i + 3]);
    }
    bool changed = false;
    fg_error err;
    fg_code rc = fg_distinct_add(client, ws->w[1], items, lens, n, atoll(ws->w[2]), &changed, &err);
    if (rc != FG_CODE_OK)
        answer_error(out, len, rc, &err);
    else
        snprintf(out, len, "ok %d", changed);
}

static void run_union(words *ws, bool export, char *out, size_t len) {
    const char *keys[WORDS_MAX];
    size_t nkeys;
    fg_window w;
    if (!keys_and_window(ws, keys, &nkeys, &w)) {
        snprintf(out, len, "err bad command");
        return;
    }
    fg_error err;
    int64_t count = -1;
    static uint8_t hll[FG_HLL_BYTES];
    fg_code rc = export ? fg_distinct_export(client, keys, nkeys, w, hll, &err)
                        : fg_distinct_count(client, keys, nkeys, w, &count, &err);
    if (rc != FG_CODE_OK) {
        answer_error(out, len, rc, &err);
    } else if (!export) {
        snprintf(out, len, "ok %lld", (long long)count);
    } else {
        size_t used = (size_t)snprintf(out, len, "ok ");
        for (size_t i = 0; i < FG_HLL_BYTES && used + 2 < len; i++)
            used += (size_t)snprintf(out + used, len - used, "%02x", hll[i]);
    }
}

static void run_create(const words *ws, char *out, size_t len) {
    fg_distinct_options o = {0};
    if (ws->n == 7) {
        o.span_s = atoll(ws->w[2]);
        o.minutes = atoll(ws->w[3]);
        o.hours = atoll(ws->w[4]);
        o.days = atoll(ws->w[5]);
        o.tzoffset_s = atoll(ws->w[6]);
    }
    fg_error err;
    fg_code rc = fg_distinct_create(client, ws->w[1], ws->n == 7 ? &o : NULL, &err);
    if (rc != FG_CODE_OK)
        answer_error(out, len, rc, &err);
    else
        snprintf(out, len, "ok");
}

/* Calls the checks refuse before any round trip, one code each. */
static void run_invalid(char *out, size_t len) {
    static uint8_t hll[FG_HLL_BYTES];
    const char *keys[] = {"k", NULL};
    const void *items[] = {"a", NULL};
    size_t lens[] = {1, 1};
    int64_t count;
    fg_error err;
    fg_distinct_options o;
    fg_distinct_options_init(&o);
    fg_code codes[] = {
        fg_distinct_create(client, NULL, NULL, &err),
        fg_distinct_add(client, NULL, items, lens, 1, -1, NULL, &err),
        fg_distinct_add(client, "k", NULL, lens, 1, -1, NULL, &err),
        fg_distinct_add(client, "k", items, NULL, 1, -1, NULL, &err),
        fg_distinct_add(client, "k", items, lens, 2, -1, NULL, &err), /* item 1 is NULL */
        fg_distinct_count(client, keys, 1, fg_last(1, FG_SECONDS), NULL, &err),
        fg_distinct_count(client, NULL, 1, fg_last(1, FG_SECONDS), &count, &err),
        fg_distinct_count(client, keys, 2, fg_last(1, FG_SECONDS), &count, &err),
        fg_distinct_export(client, keys, 1, fg_last(1, FG_SECONDS), NULL, &err),
        fg_distinct_export(client, keys, 0, fg_last(1, FG_SECONDS), hll, &err),
        fg_distinct_count(NULL, keys, 1, fg_last(1, FG_SECONDS), &count, &err),
    };
    size_t used = (size_t)snprintf(out, len, "ok");
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
        used += (size_t)snprintf(out + used, len - used, " %s", fg_code_name(codes[i]));
}

static void run(char *line, char *out, size_t len) {
    words ws;
    split(line, &ws);
    const char *cmd = ws.n > 0 ? ws.w[0] : "";
    if (strcmp(cmd, "create") == 0 && (ws.n == 2 || ws.n == 7)) {
        run_create(&ws, out, len);
    } else if (strcmp(cmd, "add") == 0 && ws.n >= 3) {
        run_add(&ws, out, len);
    } else if (strcmp(cmd, "count") == 0 || strcmp(cmd, "export") == 0) {
        run_union(&ws, cmd[0] == 'e', out, len);
    } else if (strcmp(cmd, "clock") == 0 && ws.n == 2) {
        fixed_clock_us = atoll(ws.w[1]);
        snprintf(out, len, "ok");
    } else if (strcmp(cmd, "invalid") == 0) {
        run_invalid(out, len);
    } else if (strcmp(cmd, "stats") == 0) {
        fg_stats st;
        fg_get_stats(client, &st);
        snprintf(out, len, "ok %llu %llu", (unsigned long long)st.round_trips,
                 (unsigned long long)st.failures);
    } else {
        snprintf(out, len, "err bad command");
    }
}

static int serve(const char *url, const char *clock) {
    fg_options o;
    fg_options_init(&o);
    if (clock != NULL) {
        fixed_clock_us = atoll(clock);
        o.clock_us = fixed_clock;
    }
    fg_error err;
    client = fg_open(url, &o, &err);
    if (client == NULL) {
        printf("err %s %s\n", fg_code_name(err.code), err.message);
        return 1;
    }
    printf("ok opened\n");
    fflush(stdout);
    static char line[LINE_MAX_LEN], out[ANSWER_MAX];
    while (fgets(line, sizeof(line), stdin) != NULL) {
        run(line, out, sizeof(out));
        printf("%s\n", out);
        fflush(stdout);
    }
    fg_close(client);
    return 0;
}

/* ------------------------------------------------------------ differential */

#define POOL      400
#define ITEM_MAX  12
#define KEYS      10
#define UNION_MAX 9
#define ADD_MAX   30
#define STEP      10 /* items sit on multiples of this many seconds */
#define DAY       86400

static char pool[POOL][ITEM_MAX];
static size_t pool_len[POOL];
static int generation[KEYS];
static unsigned seed;
static int64_t t0; /* a multiple of STEP, a minute before the run */

/* Outcomes agreed on: the paths the run went through. */
static long counted, nonzero, wide, exported, off_grid, too_long, refused;

static void make_pool(void) {
    for (int i = 0; i < POOL; i++) {
        pool_len[i] = i == 0 ? 0 : 1 + (size_t)(rand() % ITEM_MAX);
        for (size_t j = 0; j < pool_len[i]; j++)
            pool[i][j] = (char)(rand() % 4 == 0 ? 0 : rand() % 256);
    }
}

static int64_t wall_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * US + ts.tv_nsec / 1000;
}

/* Key k of the pool (one hash slot: one {tag}); now and then a fresh one. */
static void pool_key(int k, char *buf, size_t len) {
    snprintf(buf, len, "diff%u:{uv}:%d:%d", seed, k, generation[k]);
}

static int64_t pick(const int64_t *values, size_t n) {
    return values[(size_t)rand() % n];
}

#define PICK(a) pick((a), sizeof(a) / sizeof((a)[0]))

static fg_distinct_options random_options(void) {
    static const int64_t spans[] = {60, 3600, 7200, 86400, 604800, 15552000, 0, 15552001};
    static const int64_t minutes[] = {0, 1, 5, 60, 1440, 1441, -1};
    static const int64_t hours[] = {0, 1, 3, 48, 744, 745};
    static const int64_t days[] = {0, 1, 31, 1100, 1101};
    static const int64_t tz[] = {0, 3600, -18000, 19800, 86400, -86400, 30, 86460};
    bool bad = rand() % 8 == 0;
    fg_distinct_options o = {spans[rand() % (bad ? 8 : 6)], minutes[rand() % (bad ? 7 : 5)],
                             hours[rand() % (bad ? 6 : 5)], days[rand() % (bad ? 5 : 4)],
                             tz[rand() % (bad ? 8 : 6)]};
    return o;
}

/* A second in the last 40 days, on the STEP grid, mostly recent. */
static int64_t random_second(void) {
    int64_t range = rand() % 2 ? 3600 : rand() % 2 ? 3 * DAY : 40 * DAY;
    return t0 - (rand() % (range / STEP)) * STEP;
}

/* A window edge in µs: on some grid (minutes, hours or days, shifted by
 * one of the options' offsets), or anywhere, or after the newest item. */
static int64_t random_edge(void) {
    static const int64_t widths[] = {60, 3600, DAY};
    static const int64_t shifts[] = {0, 3600, -18000, 19800, 86400, -86400};
    int64_t sec = random_second() - rand() % 600;
    int kind = rand() % 10;
    if (kind < 6) {
        int64_t w = PICK(widths), s = PICK(shifts);
        int64_t b = (sec + s) / w;
        sec = b * w - s;
    } else if (kind < 8) {
        sec = t0 + 1 + rand() % 3600; /* after every item */
    }
    return sec * US + rand() % US;
}

static fg_window random_window(bool *last) {
    static const int64_t n[] = {1, 5, 10, 30, 60, 90, 600, 3600, 7, 0, 15552001};
    static const fg_time_unit units[] = {FG_SECONDS, FG_MINUTES, FG_HOURS, FG_DAYS, 0, 7};
    *last = rand() % 3 == 0;
    if (*last) {
        bool bad = rand() % 20 == 0;
        int64_t count = n[rand() % (bad ? 11 : 9)];
        fg_time_unit unit = units[rand() % (bad ? 6 : 4)];
        if (unit == FG_SECONDS) count *= STEP; /* window edges stay off the item grid */
        return fg_last(count, unit);
    }
    int64_t a = random_edge(), b = random_edge();
    if (rand() % 20 == 0) return fg_between(a, a); /* empty: refused */
    if (rand() % 40 == 0) return fg_between(-1, b);
    return a < b ? fg_between(a, b) : fg_between(b, a);
}

static void fail(long op, const char *what, fg_code a, fg_code b, const fg_error *ea,
                 const fg_error *eb) {
    printf("DIFF at operation %ld (%s): mem: %s \"%s\", server: %s \"%s\"\n", op, what,
           fg_code_name(a), a == FG_CODE_OK ? "" : ea->message, fg_code_name(b),
           b == FG_CODE_OK ? "" : eb->message);
    exit(1);
}

static bool same_outcome(fg_code a, fg_code b, const fg_error *ea, const fg_error *eb) {
    if (a != b || (a != FG_CODE_OK && strcmp(ea->message, eb->message) != 0)) return false;
    if (a == FG_CODE_OK) return true;
    if (strstr(ea->message, "is not on the grid") != NULL)
        off_grid++;
    else if (strstr(ea->message, "longer than the SPAN") != NULL)
        too_long++;
    else if (strcmp(ea->message, "ERR key exists") != 0)
        refused++;
    return true;
}

static void step_create(fg_client *mem, fg_client *srv, const char *key, long op) {
    fg_distinct_options o = random_options();
    fg_error ea, eb;
    fg_code a = fg_distinct_create(mem, key, &o, &ea);
    fg_code b = fg_distinct_create(srv, key, &o, &eb);
    if (!same_outcome(a, b, &ea, &eb)) fail(op, "create", a, b, &ea, &eb);
}

static void step_add(fg_client *mem, fg_client *srv, const char *key, long op) {
    size_t n = rand() % 4 == 0 ? 1 + (size_t)(rand() % ADD_MAX) : 1 + (size_t)(rand() % 3);
    const void *items[ADD_MAX];
    size_t lens[ADD_MAX];
    for (size_t i = 0; i < n; i++) {
        int p = rand() % POOL;
        items[i] = pool[p];
        lens[i] = pool_len[p];
    }
    int64_t at = random_second() * US + rand() % US;
    int odd = rand() % 50;
    if (odd == 0) at = wall_us() + 3600 * US; /* too far ahead */
    if (odd == 1) at = 4294967296LL * US;     /* past the last second */
    bool ca = false, cb = false;
    fg_error ea, eb;
    fg_code a = fg_distinct_add(mem, key, items, lens, n, at, &ca, &ea);
    fg_code b = fg_distinct_add(srv, key, items, lens, n, at, &cb, &eb);
    if (!same_outcome(a, b, &ea, &eb)) fail(op, "add", a, b, &ea, &eb);
    if (ca != cb) {
        printf("DIFF at operation %ld (add of %zu items to %s): changed %d vs %d\n", op, n, key, ca,
               cb);
        exit(1);
    }
}

/* Waits out the seconds whose tick would move a LAST window's start (the
 * current second + 1 - its length) onto an item's second. */
static void wait_for_safe_second(void) {
    const struct timespec pause = {0, 10 * 1000 * 1000};
    while (wall_us() / US % STEP == STEP - 1)
        nanosleep(&pause, NULL);
}

static void step_union(fg_client *mem, fg_client *srv, const char *const *keys, size_t nkeys,
                       long op) {
    bool last;
    fg_window w = random_window(&last);
    if (last) wait_for_safe_second();
    bool export = rand() % 3 == 0;
    fg_error ea, eb;
    fg_code a, b;
    if (export) {
        static uint8_t ha[FG_HLL_BYTES], hb[FG_HLL_BYTES];
        a = fg_distinct_export(mem, keys, nkeys, w, ha, &ea);
        b = fg_distinct_export(srv, keys, nkeys, w, hb, &eb);
        if (!same_outcome(a, b, &ea, &eb)) fail(op, "export", a, b, &ea, &eb);
        if (a == FG_CODE_OK && memcmp(ha, hb, FG_HLL_BYTES) != 0) {
            printf("DIFF at operation %ld (export of %zu keys): bytes differ\n", op, nkeys);
            exit(1);
        }
        exported += a == FG_CODE_OK;
        wide += a == FG_CODE_OK && nkeys > 6;
        return;
    }
    int64_t ca = -1, cb = -2;
    a = fg_distinct_count(mem, keys, nkeys, w, &ca, &ea);
    b = fg_distinct_count(srv, keys, nkeys, w, &cb, &eb);
    if (!same_outcome(a, b, &ea, &eb)) fail(op, "count", a, b, &ea, &eb);
    if (a == FG_CODE_OK && ca != cb) {
        printf("DIFF at operation %ld (count of %zu keys, %s): mem %lld, server %lld\n", op, nkeys,
               last ? "LAST" : "BETWEEN", (long long)ca, (long long)cb);
        exit(1);
    }
    counted += a == FG_CODE_OK;
    nonzero += a == FG_CODE_OK && ca > 0;
    wide += a == FG_CODE_OK && nkeys > 6;
}

/* One random operation on both clients. */
static void step(fg_client *mem, fg_client *srv, long op) {
    char names[UNION_MAX][64];
    const char *keys[UNION_MAX];
    int k = rand() % KEYS;
    bool fresh = rand() % 60 == 0;
    generation[k] += fresh;
    int kind = fresh && rand() % 3 != 0 ? 0 : rand() % 100;
    pool_key(k, names[0], sizeof(names[0]));
    if (kind < 5) {
        step_create(mem, srv, names[0], op);
    } else if (kind < 55) {
        step_add(mem, srv, names[0], op);
    } else {
        size_t nkeys = rand() % 4 == 0 ? 1 + (size_t)(rand() % UNION_MAX) : 1;
        for (size_t i = 0; i < nkeys; i++) {
            if (i > 0) pool_key(rand() % KEYS, names[i], sizeof(names[i]));
            keys[i] = names[i];
        }
        step_union(mem, srv, keys, nkeys, op);
    }
}

static int differential(const char *url, unsigned s, long ops) {
    fg_error err;
    fg_client *mem = fg_open("mem:", NULL, &err);
    fg_client *srv = mem != NULL ? fg_open(url, NULL, &err) : NULL;
    if (mem == NULL || srv == NULL) {
        printf("cannot open: %s\n", err.message);
        return 1;
    }
    seed = s;
    srand(s);
    make_pool();
    t0 = (wall_us() / US - 60) / STEP * STEP;
    for (long op = 0; op < ops; op++)
        step(mem, srv, op);
    printf("OK %ld operations: %ld counted (%ld not 0), %ld exported, %ld of over 6 keys, %ld "
           "off the grid, %ld longer than the SPAN, %ld refused\n",
           ops, counted, nonzero, exported, wide, off_grid, too_long, refused);
    fg_close(mem);
    fg_close(srv);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 5 && strcmp(argv[1], "diff") == 0)
        return differential(argv[2], (unsigned)atoi(argv[3]), atol(argv[4]));
    if (argc == 2 || argc == 3) return serve(argv[1], argc == 3 ? argv[2] : NULL);
    fprintf(stderr, "usage: distinct_client URL [CLOCK_US] | distinct_client diff URL SEED "
                    "OPERATIONS\n");
    return 2;
}
