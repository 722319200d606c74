/*
 * bloom_client.c - libfloodgate's Bloom filters driven line by line, and a
 * differential run of mem: against a server, for
 * tests/integration/test_client_bloom.py.
 *
 *   bloom_client URL
 *   bloom_client diff URL SEED OPERATIONS
 *
 * With a URL, reads commands on stdin and answers one line each on stdout
 * (flushed); a failed call answers "err CODE MESSAGE".
 *
 *   reserve KEY ERROR CAPACITY EXPANSION   ok
 *   add KEY ITEM                           ok 0|1
 *   exists KEY ITEM                        ok 0|1
 *   madd KEY ITEM...                       ok 0|1...  (failed: err CODE added=0|1,... MESSAGE)
 *   mexists KEY ITEM...                    ok 0|1...
 *   card KEY                               ok N
 *   stats                                  ok ROUND_TRIPS FAILURES
 *   fnew ERROR CAPACITY EXPANSION          ok (a standalone fg_filter, replacing the last)
 *   fadd ITEM                              ok 1|0|-1
 *   fhas ITEM                              ok 0|1
 *   fcard | fbytes                         ok N
 *
 * ITEM is the word itself, or bytes in hex after "0x" ("0x" alone is the
 * empty item, "0x00ff" two bytes). madd's added= lists every item's flag,
 * false for those after the failure (the driver clears them first).
 *
 * diff: opens "mem:" and URL and feeds both the same random reserves (good
 * and bad options), adds, lookups, multi-adds and multi-lookups of up to 40
 * items (binary, some empty, many repeated) and cardinalities, on keys that
 * are replaced by fresh ones now and then, and requires identical codes,
 * messages and answers. Small non-scaling filters fill up, and filters of
 * capacity 1 and expansion 1 reach their last level. Exit 0 with "OK N
 * operations: ..." (how many reserves succeeded and were refused, adds
 * that found a filter full or at its last level) when all agree, 1 at the
 * first difference, printed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "floodgate.h"

#define LINE_MAX_LEN 65536
#define WORDS_MAX    4096
#define ANSWER_MAX   (WORDS_MAX * 2 + 512)

static fg_client *client;
static fg_filter *filter;

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

static void answer_flags(char *out, size_t len, const char *head, const bool *flags, size_t n,
                         const char *sep) {
    size_t used = (size_t)snprintf(out, len, "%s", head);
    for (size_t i = 0; i < n && used < len; i++)
        used += (size_t)snprintf(out + used, len - used, "%s%d", i == 0 ? "" : sep, flags[i]);
}

static void answer_flag(char *out, size_t len, fg_code rc, bool v, const fg_error *err) {
    if (rc != FG_CODE_OK)
        answer_error(out, len, rc, err);
    else
        snprintf(out, len, "ok %d", v);
}

static bool options(const words *ws, int from, fg_bloom_options *o) {
    if (ws->n != from + 3) return false;
    o->error_rate = strtod(ws->w[from], NULL);
    o->capacity = atoll(ws->w[from + 1]);
    o->expansion = atoi(ws->w[from + 2]);
    return true;
}

/* BF.MADD or BF.MEXISTS of the words from ws->w[2] on. */
static void run_multi(const words *ws, bool add, char *out, size_t len) {
    size_t n = (size_t)(ws->n - 2);
    const void *items[WORDS_MAX];
    size_t lens[WORDS_MAX];
    bool flags[WORDS_MAX] = {false};
    fg_error err;
    for (size_t i = 0; i < n; i++) {
        items[i] = ws->w[i + 2];
        lens[i] = item(ws->w[i + 2]);
    }
    fg_code rc = add ? fg_bf_madd(client, ws->w[1], items, lens, n, flags, &err)
                     : fg_bf_mexists(client, ws->w[1], items, lens, n, flags, &err);
    if (rc == FG_CODE_OK) {
        answer_flags(out, len, "ok ", flags, n, " ");
        return;
    }
    if (!add) {
        answer_error(out, len, rc, &err);
        return;
    }
    char head[300];
    snprintf(head, sizeof(head), "err %s added=", fg_code_name(rc));
    answer_flags(out, len, head, flags, n, ",");
    size_t used = strlen(out);
    snprintf(out + used, len - used, " %s", err.message);
}

static void run_filter(const words *ws, char *out, size_t len) {
    const char *cmd = ws->w[0];
    fg_bloom_options o;
    fg_error err;
    if (strcmp(cmd, "fnew") == 0 && options(ws, 1, &o)) {
        fg_filter_free(filter);
        filter = fg_filter_new(&o, &err);
        if (filter == NULL)
            answer_error(out, len, err.code, &err);
        else
            snprintf(out, len, "ok");
    } else if (filter == NULL) {
        snprintf(out, len, "err no filter");
    } else if (strcmp(cmd, "fadd") == 0 && ws->n == 2) {
        snprintf(out, len, "ok %d", fg_filter_add(filter, ws->w[1], item(ws->w[1])));
    } else if (strcmp(cmd, "fhas") == 0 && ws->n == 2) {
        snprintf(out, len, "ok %d", fg_filter_contains(filter, ws->w[1], item(ws->w[1])));
    } else if (strcmp(cmd, "fcard") == 0) {
        snprintf(out, len, "ok %lld", (long long)fg_filter_cardinality(filter));
    } else if (strcmp(cmd, "fbytes") == 0) {
        snprintf(out, len, "ok %zu", fg_filter_bytes(filter));
    } else {
        snprintf(out, len, "err bad command");
    }
}

static void run(char *line, char *out, size_t len) {
    words ws;
    split(line, &ws);
    fg_error err;
    fg_code rc;
    bool flag = false;
    fg_bloom_options o;
    const char *cmd = ws.n > 0 ? ws.w[0] : "";
    if (cmd[0] == 'f') {
        run_filter(&ws, out, len);
    } else if (strcmp(cmd, "reserve") == 0 && options(&ws, 2, &o)) {
        rc = fg_bf_reserve(client, ws.w[1], &o, &err);
        if (rc != FG_CODE_OK)
            answer_error(out, len, rc, &err);
        else
            snprintf(out, len, "ok");
    } else if (strcmp(cmd, "add") == 0 && ws.n == 3) {
        rc = fg_bf_add(client, ws.w[1], ws.w[2], item(ws.w[2]), &flag, &err);
        answer_flag(out, len, rc, flag, &err);
    } else if (strcmp(cmd, "exists") == 0 && ws.n == 3) {
        rc = fg_bf_exists(client, ws.w[1], ws.w[2], item(ws.w[2]), &flag, &err);
        answer_flag(out, len, rc, flag, &err);
    } else if ((strcmp(cmd, "madd") == 0 || strcmp(cmd, "mexists") == 0) && ws.n >= 2) {
        run_multi(&ws, cmd[1] == 'a', out, len);
    } else if (strcmp(cmd, "card") == 0 && ws.n == 2) {
        int64_t card = 0;
        rc = fg_bf_card(client, ws.w[1], &card, &err);
        if (rc != FG_CODE_OK)
            answer_error(out, len, rc, &err);
        else
            snprintf(out, len, "ok %lld", (long long)card);
    } else if (strcmp(cmd, "stats") == 0) {
        fg_stats st;
        fg_get_stats(client, &st);
        snprintf(out, len, "ok %llu %llu", (unsigned long long)st.round_trips,
                 (unsigned long long)st.failures);
    } else {
        snprintf(out, len, "err bad command");
    }
}

static int serve(const char *url) {
    fg_error err;
    client = fg_open(url, NULL, &err);
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
    fg_filter_free(filter);
    fg_close(client);
    return 0;
}

/* ------------------------------------------------------------ differential */

#define POOL      300
#define ITEM_MAX  20
#define KEYS      6
#define MULTI_MAX 40

static char pool[POOL][ITEM_MAX];
static size_t pool_len[POOL];
static int generation[KEYS];
static unsigned seed;

static void make_pool(void) {
    for (int i = 0; i < POOL; i++) {
        pool_len[i] = i == 0 ? 0 : 1 + (size_t)(rand() % ITEM_MAX);
        for (size_t j = 0; j < pool_len[i]; j++)
            pool[i][j] = (char)(rand() % 4 == 0 ? 0 : rand() % 256); /* NULs often */
    }
}

/* Outcomes seen on both sides: the paths the run went through. */
static long reserved, full, last_level, refused;

/* A key of the pool; true when it is a fresh one. */
static bool random_key(char *buf, size_t len) {
    int k = rand() % KEYS;
    bool fresh = rand() % 40 == 0;
    generation[k] += fresh;
    snprintf(buf, len, "diff%u:{k%d}:%d", seed, k, generation[k]);
    return fresh;
}

static fg_bloom_options random_options(void) {
    static const double errors[] = {0.5, 0.1, 0.01, 0.001, 1e-5, 0.25, 0, 1, -0.1, 2, 1e-12};
    static const long long capacities[] = {1, 2, 5, 10, 100, 1000, 7, 0, -3, 1LL << 41};
    static const int expansions[] = {0, 1, 2, 4, 3, 0, 1, -1, 40000, 32768};
    int bad = rand() % 12 == 0; /* a bad value at times */
    fg_bloom_options o = {errors[rand() % (bad ? 11 : 6)], capacities[rand() % (bad ? 10 : 7)],
                          expansions[rand() % (bad ? 10 : 7)]};
    return o;
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
    full += strcmp(ea->message, "ERR non scaling filter is full") == 0;
    last_level += strcmp(ea->message, "ERR problem inserting into filter") == 0;
    return true;
}

/* One random operation on both clients. */
static void step(fg_client *mem, fg_client *srv, long op) {
    char key[64];
    bool fresh = random_key(key, sizeof(key));
    fg_error ea, eb;
    fg_code a, b;
    int kind = fresh && rand() % 4 != 0 ? 0 : rand() % 100; /* most fresh keys are reserved */
    if (kind < 8) {
        fg_bloom_options o = random_options();
        a = fg_bf_reserve(mem, key, &o, &ea);
        b = fg_bf_reserve(srv, key, &o, &eb);
        if (!same_outcome(a, b, &ea, &eb)) fail(op, "reserve", a, b, &ea, &eb);
        reserved += a == FG_CODE_OK;
        refused += a != FG_CODE_OK && strcmp(ea.message, "ERR item exists") != 0;
    } else if (kind < 13) {
        int64_t ca = -1, cb = -1;
        a = fg_bf_card(mem, key, &ca, &ea);
        b = fg_bf_card(srv, key, &cb, &eb);
        if (!same_outcome(a, b, &ea, &eb) || ca != cb) {
            printf("DIFF at operation %ld (card %s): mem %lld, server %lld\n", op, key,
                   (long long)ca, (long long)cb);
            exit(1);
        }
    } else {
        bool add = kind < 60;
        size_t n = kind % 3 == 0 ? 1 + (size_t)(rand() % MULTI_MAX) : 1;
        const void *items[MULTI_MAX];
        size_t lens[MULTI_MAX];
        bool fa[MULTI_MAX] = {false}, fb[MULTI_MAX] = {false};
        for (size_t i = 0; i < n; i++) {
            int p = rand() % POOL;
            items[i] = pool[p];
            lens[i] = pool_len[p];
        }
        if (n == 1 && rand() % 2 == 0) {
            a = add ? fg_bf_add(mem, key, items[0], lens[0], &fa[0], &ea)
                    : fg_bf_exists(mem, key, items[0], lens[0], &fa[0], &ea);
            b = add ? fg_bf_add(srv, key, items[0], lens[0], &fb[0], &eb)
                    : fg_bf_exists(srv, key, items[0], lens[0], &fb[0], &eb);
        } else {
            a = add ? fg_bf_madd(mem, key, items, lens, n, fa, &ea)
                    : fg_bf_mexists(mem, key, items, lens, n, fa, &ea);
            b = add ? fg_bf_madd(srv, key, items, lens, n, fb, &eb)
                    : fg_bf_mexists(srv, key, items, lens, n, fb, &eb);
        }
        if (!same_outcome(a, b, &ea, &eb)) fail(op, add ? "add" : "exists", a, b, &ea, &eb);
        if (memcmp(fa, fb, sizeof(fa)) != 0) {
            printf("DIFF at operation %ld (%s of %zu items on %s): flags differ\n", op,
                   add ? "add" : "exists", n, key);
            exit(1);
        }
    }
}

static int differential(const char *url, unsigned s, long ops) {
    fg_error err;
    fg_client *mem = fg_open("mem:", NULL, &err);
    fg_client *srv = fg_open(url, NULL, &err);
    if (mem == NULL || srv == NULL) {
        printf("cannot open: %s\n", err.message);
        return 1;
    }
    seed = s;
    srand(s);
    make_pool();
    for (long op = 0; op < ops; op++)
        step(mem, srv, op);
    printf("OK %ld operations: %ld reserved, %ld bad options, %ld full, %ld at the last level\n",
           ops, reserved, refused, full, last_level);
    fg_close(mem);
    fg_close(srv);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 5 && strcmp(argv[1], "diff") == 0)
        return differential(argv[2], (unsigned)atoi(argv[3]), atol(argv[4]));
    if (argc == 2) return serve(argv[1]);
    fprintf(stderr, "usage: bloom_client URL | bloom_client diff URL SEED OPERATIONS\n");
    return 2;
}
