/*
 * lock_client.c - libfloodgate's locks driven line by line, for
 * tests/integration/test_client_locks.py.
 *
 *   lock_client URL [timeout_ms=N]
 *   lock_client redlock URL,URL,... [server_timeout=N] [retries=N] [delay=N] [jitter=N]
 *
 * Reads commands on stdin and answers one line each on stdout (flushed);
 * a failed call answers "err CODE MESSAGE".
 *
 *   owner                                   ok HEX
 *   lock KEY OWNER LEASE [OPT...]           ok ACQUIRED TOKEN TTL HOLDS
 *   sacquire KEY CAPACITY OWNER PERMITS LEASE [OPT...]   the same
 *   mlock OWNER LEASE KEY... [OPT...]       the same
 *   unlock KEY OWNER                        ok HOLDS_LEFT
 *   srelease KEY OWNER PERMITS              ok PERMITS_LEFT
 *   munlock OWNER KEY...                    ok RELEASED
 *   extend KEY OWNER LEASE                  ok 0|1
 *   bg ID COMMAND...                        ok started: COMMAND runs in a thread of its own
 *   result ID                               pending, or the answer of bg ID
 *   join ID                                 the answer of bg ID, once it ended
 *   lost                                    ok N KEY/OWNER/REASON... (on_lost calls so far)
 *   stats                                   ok ROUND_TRIPS FAILURES RECONNECTS
 *   sleep MS                                ok
 *   rlock|rextend KEY OWNER LEASE           ok ACQUIRED VALIDITY VOTES TOKEN (redlock)
 *   runlock KEY OWNER                       ok (redlock)
 *
 * OPT: wait=MS shared=1 reentrant=1 renew=1 renew_max=MS durable=N
 * durable_timeout=MS (lock options). Keys never contain '='.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "floodgate.h"

#define LINE_MAX_LEN 2048
#define BG_MAX       16
#define LOST_MAX     64

static fg_client *client;
static fg_redlock *redlock;

/* on_lost calls, as "key/owner/reason". */
static pthread_mutex_t lost_lock = PTHREAD_MUTEX_INITIALIZER;
static char lost[LOST_MAX][600];
static int nlost;

static const char *reason_names[] = {"not_held", "unreachable", "renew_limit"};

static void on_lost(const char *key, const char *owner, fg_lost_reason why, void *arg) {
    (void)arg;
    pthread_mutex_lock(&lost_lock);
    if (nlost < LOST_MAX)
        snprintf(lost[nlost++], sizeof(lost[0]), "%s/%s/%s", key, owner, reason_names[why]);
    pthread_mutex_unlock(&lost_lock);
}

/* Background commands. */
typedef struct bg {
    pthread_t thread;
    bool used, done;
    char line[LINE_MAX_LEN];
    char answer[LINE_MAX_LEN];
} bg;

static pthread_mutex_t bg_lock = PTHREAD_MUTEX_INITIALIZER;
static bg bgs[BG_MAX];

typedef struct words {
    char *w[80];
    int n;
} words;

static void split(char *line, words *ws) {
    char *save = NULL;
    ws->n = 0;
    for (char *t = strtok_r(line, " \n", &save); t != NULL && ws->n < 80;
         t = strtok_r(NULL, " \n", &save))
        ws->w[ws->n++] = t;
}

static bool named(const char *w, size_t len, const char *name) {
    return strlen(name) == len && strncmp(w, name, len) == 0;
}

/* Options name=value among ws->w[from..]; the other words are keys. */
static int parse_options(const words *ws, int from, fg_lock_options *o, const char **keys) {
    int nkeys = 0;
    for (int i = from; i < ws->n; i++) {
        const char *w = ws->w[i];
        const char *eq = strchr(w, '=');
        if (eq == NULL) {
            keys[nkeys++] = w;
            continue;
        }
        long long v = atoll(eq + 1);
        size_t len = (size_t)(eq - w);
        if (named(w, len, "wait"))
            o->wait_ms = v;
        else if (named(w, len, "shared"))
            o->shared = v != 0;
        else if (named(w, len, "reentrant"))
            o->reentrant = v != 0;
        else if (named(w, len, "renew"))
            o->renew = v != 0;
        else if (named(w, len, "renew_max"))
            o->renew_max_ms = v;
        else if (named(w, len, "durable"))
            o->durable_replicas = (int)v;
        else if (named(w, len, "durable_timeout"))
            o->durable_timeout_ms = (int)v;
    }
    o->on_lost = on_lost;
    return nkeys;
}

static void answer_error(char *out, size_t len, fg_code rc, const fg_error *err) {
    snprintf(out, len, "err %s %s", fg_code_name(rc), err->message);
}

static void answer_grant(char *out, size_t len, fg_code rc, const fg_lock_grant *g,
                         const fg_error *err) {
    if (rc != FG_CODE_OK)
        answer_error(out, len, rc, err);
    else
        snprintf(out, len, "ok %d %llu %lld %lld", g->acquired, (unsigned long long)g->token,
                 (long long)g->ttl_ms, (long long)g->holds);
}

static void answer_number(char *out, size_t len, fg_code rc, long long v, const fg_error *err) {
    if (rc != FG_CODE_OK)
        answer_error(out, len, rc, err);
    else
        snprintf(out, len, "ok %lld", v);
}

static void answer_redlock(char *out, size_t len, fg_code rc, const fg_redlock_grant *g,
                           const fg_error *err) {
    if (rc != FG_CODE_OK)
        answer_error(out, len, rc, err);
    else
        snprintf(out, len, "ok %d %lld %d %llu", g->acquired, (long long)g->validity_ms, g->votes,
                 (unsigned long long)g->token);
}

static void run(char *line, char *out, size_t len);

static void *run_bg(void *arg) {
    bg *b = arg;
    char answer[LINE_MAX_LEN];
    run(b->line, answer, sizeof(answer));
    pthread_mutex_lock(&bg_lock);
    memcpy(b->answer, answer, sizeof(answer));
    b->done = true;
    pthread_mutex_unlock(&bg_lock);
    return NULL;
}

static void start_bg(const words *ws, char *out, size_t len) {
    int id = atoi(ws->w[1]);
    if (id < 0 || id >= BG_MAX || bgs[id].used) {
        snprintf(out, len, "err usage bad id");
        return;
    }
    bg *b = &bgs[id];
    b->line[0] = '\0';
    for (int i = 2; i < ws->n; i++) {
        strncat(b->line, ws->w[i], sizeof(b->line) - strlen(b->line) - 2);
        strcat(b->line, " ");
    }
    b->used = true;
    b->done = false;
    pthread_create(&b->thread, NULL, run_bg, b);
    snprintf(out, len, "ok started");
}

static void bg_result(const words *ws, bool wait, char *out, size_t len) {
    int id = atoi(ws->w[1]);
    if (id < 0 || id >= BG_MAX || !bgs[id].used) {
        snprintf(out, len, "err usage bad id");
        return;
    }
    bg *b = &bgs[id];
    if (wait) {
        pthread_join(b->thread, NULL);
        b->used = false;
    }
    pthread_mutex_lock(&bg_lock);
    snprintf(out, len, "%s", b->done ? b->answer : "pending");
    pthread_mutex_unlock(&bg_lock);
}

static void list_lost(char *out, size_t len) {
    pthread_mutex_lock(&lost_lock);
    int n = snprintf(out, len, "ok %d", nlost);
    for (int i = 0; i < nlost && (size_t)n < len; i++)
        n += snprintf(out + n, len - (size_t)n, " %s", lost[i]);
    pthread_mutex_unlock(&lost_lock);
}

static void run_lock_command(const words *ws, char *out, size_t len) {
    const char *cmd = ws->w[0];
    fg_lock_options o;
    fg_lock_options_init(&o);
    fg_lock_grant g;
    fg_error err;
    const char *keys[80];
    fg_code rc;
    if (strcmp(cmd, "lock") == 0 && ws->n >= 4) {
        o.lease_ms = atoll(ws->w[3]);
        parse_options(ws, 4, &o, keys);
        rc = fg_lock(client, ws->w[1], ws->w[2], &o, &g, &err);
        answer_grant(out, len, rc, &g, &err);
    } else if (strcmp(cmd, "sacquire") == 0 && ws->n >= 6) {
        o.lease_ms = atoll(ws->w[5]);
        parse_options(ws, 6, &o, keys);
        rc = fg_semaphore_acquire(client, ws->w[1], atoll(ws->w[2]), ws->w[3], atoll(ws->w[4]), &o,
                                  &g, &err);
        answer_grant(out, len, rc, &g, &err);
    } else if (strcmp(cmd, "mlock") == 0 && ws->n >= 3) {
        o.lease_ms = atoll(ws->w[2]);
        int n = parse_options(ws, 3, &o, keys);
        rc = fg_lock_multi(client, keys, (size_t)n, ws->w[1], &o, &g, &err);
        answer_grant(out, len, rc, &g, &err);
    } else if (strcmp(cmd, "unlock") == 0 && ws->n == 3) {
        int64_t left = 0;
        rc = fg_unlock(client, ws->w[1], ws->w[2], &left, &err);
        answer_number(out, len, rc, left, &err);
    } else if (strcmp(cmd, "srelease") == 0 && ws->n == 4) {
        int64_t left = 0;
        rc = fg_semaphore_release(client, ws->w[1], ws->w[2], atoll(ws->w[3]), &left, &err);
        answer_number(out, len, rc, left, &err);
    } else if (strcmp(cmd, "munlock") == 0 && ws->n >= 2) {
        int64_t n = 0;
        rc = fg_unlock_multi(client, (const char *const *)&ws->w[2], (size_t)(ws->n - 2), ws->w[1],
                             &n, &err);
        answer_number(out, len, rc, n, &err);
    } else if (strcmp(cmd, "extend") == 0 && ws->n == 4) {
        bool extended = false;
        rc = fg_extend(client, ws->w[1], ws->w[2], atoll(ws->w[3]), &extended, &err);
        answer_number(out, len, rc, extended, &err);
    } else {
        snprintf(out, len, "err usage %s", cmd);
    }
}

static void run_redlock_command(const words *ws, char *out, size_t len) {
    const char *cmd = ws->w[0];
    fg_redlock_grant g;
    fg_error err;
    fg_code rc;
    if (strcmp(cmd, "rlock") == 0 && ws->n == 4) {
        rc = fg_redlock_lock(redlock, ws->w[1], ws->w[2], atoll(ws->w[3]), &g, &err);
        answer_redlock(out, len, rc, &g, &err);
    } else if (strcmp(cmd, "rextend") == 0 && ws->n == 4) {
        rc = fg_redlock_extend(redlock, ws->w[1], ws->w[2], atoll(ws->w[3]), &g, &err);
        answer_redlock(out, len, rc, &g, &err);
    } else if (strcmp(cmd, "runlock") == 0 && ws->n == 3) {
        rc = fg_redlock_unlock(redlock, ws->w[1], ws->w[2], &err);
        if (rc != FG_CODE_OK)
            answer_error(out, len, rc, &err);
        else
            snprintf(out, len, "ok");
    } else {
        snprintf(out, len, "err usage %s", cmd);
    }
}

static void run(char *line, char *out, size_t len) {
    words ws;
    split(line, &ws);
    if (ws.n == 0) {
        snprintf(out, len, "err usage empty");
        return;
    }
    const char *cmd = ws.w[0];
    if (strcmp(cmd, "owner") == 0) {
        char id[FG_OWNER_ID_LEN + 1];
        fg_owner_id(id);
        snprintf(out, len, "ok %s", id);
    } else if (strcmp(cmd, "bg") == 0 && ws.n >= 3) {
        start_bg(&ws, out, len);
    } else if ((strcmp(cmd, "result") == 0 || strcmp(cmd, "join") == 0) && ws.n == 2) {
        bg_result(&ws, strcmp(cmd, "join") == 0, out, len);
    } else if (strcmp(cmd, "lost") == 0) {
        list_lost(out, len);
    } else if (strcmp(cmd, "stats") == 0 && client != NULL) {
        fg_stats s;
        fg_get_stats(client, &s);
        snprintf(out, len, "ok %llu %llu %llu", (unsigned long long)s.round_trips,
                 (unsigned long long)s.failures, (unsigned long long)s.reconnects);
    } else if (strcmp(cmd, "sleep") == 0 && ws.n == 2) {
        long ms = atol(ws.w[1]);
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        snprintf(out, len, "ok");
    } else if (cmd[0] == 'r' && redlock != NULL) {
        run_redlock_command(&ws, out, len);
    } else if (client != NULL) {
        run_lock_command(&ws, out, len);
    } else {
        snprintf(out, len, "err usage %s", cmd);
    }
}

static int open_redlock(int argc, char **argv) {
    fg_redlock_options o;
    fg_redlock_options_init(&o);
    for (int i = 3; i < argc; i++) {
        const char *eq = strchr(argv[i], '=');
        int v = eq ? atoi(eq + 1) : 0;
        if (strncmp(argv[i], "server_timeout=", 15) == 0)
            o.server_timeout_ms = v;
        else if (strncmp(argv[i], "retries=", 8) == 0)
            o.retry_count = v;
        else if (strncmp(argv[i], "delay=", 6) == 0)
            o.retry_delay_ms = v;
        else if (strncmp(argv[i], "jitter=", 7) == 0)
            o.retry_jitter_ms = v;
    }
    const char *urls[16];
    size_t n = 0;
    char *save = NULL;
    for (char *u = strtok_r(argv[2], ",", &save); u != NULL && n < 16;
         u = strtok_r(NULL, ",", &save))
        urls[n++] = u;
    fg_error err;
    redlock = fg_redlock_open(urls, n, &o, &err);
    if (redlock == NULL) {
        printf("open err %s %s\n", fg_code_name(err.code), err.message);
        return 1;
    }
    return 0;
}

static int open_client(int argc, char **argv) {
    fg_options o;
    fg_options_init(&o);
    for (int i = 2; i < argc; i++)
        if (strncmp(argv[i], "timeout_ms=", 11) == 0)
            o.command_timeout_ms = o.connect_timeout_ms = atoi(argv[i] + 11);
    fg_error err;
    client = fg_open(argv[1], &o, &err);
    if (client == NULL) {
        printf("open err %s %s\n", fg_code_name(err.code), err.message);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2 || (strcmp(argv[1], "redlock") == 0 && argc < 3)) {
        fprintf(stderr, "usage: %s URL [timeout_ms=N] | redlock URL,URL,... [OPT=N...]\n", argv[0]);
        return 2;
    }
    if (strcmp(argv[1], "redlock") == 0 ? open_redlock(argc, argv) : open_client(argc, argv))
        return 1;
    printf("open ok\n");
    fflush(stdout);
    char line[LINE_MAX_LEN], out[LINE_MAX_LEN];
    while (fgets(line, sizeof(line), stdin)) {
        run(line, out, sizeof(out));
        puts(out);
        fflush(stdout);
    }
    for (int i = 0; i < BG_MAX; i++)
        if (bgs[i].used) pthread_join(bgs[i].thread, NULL);
    fg_close(client);
    fg_redlock_close(redlock);
    return 0;
}
