/*
 * lock_torture.c - one worker process of the lock torture test
 * (tests/integration/test_lock_torture.py): threads that take FG.LOCK around
 * a read-modify-write of counters fenced by FG.FGET and FG.FSET, logging
 * every step, so that the test can judge the outcome even when this process
 * is paused, killed, or loses its server.
 *
 *   lock_torture PORT WORKER THREADS SECONDS LEASE_MS COUNTERS LOG [SCRIPT SHA1]
 *
 * It speaks to the server through hiredis alone, not libfloodgate, so that
 * the test judges the module and nothing else. With SCRIPT (lock.lua's
 * path) and its SHA1 the server has no module: the locks are then taken
 * and released by libfloodgate, which waits for lock.lua's hand-off
 * (docs/scripts.md, "Locks"), and the fenced reads and writes are lock.lua's
 * by EVALSHA (EVAL after NOSCRIPT: a restarted server has lost its scripts),
 * so that the test judges the script and the library's waiting. Each
 * thread has its own connection (and client) and, until SECONDS have
 * passed, picks a counter C at random and:
 *
 *   FG.LOCK lock:C OWNER LEASE_MS WAIT 2000   OWNER = wWORKER:THREAD:SEQ, new per request
 *   FG.FGET ctr:C TOKEN                       reads the value, records TOKEN
 *   (a pause of 0 to 10 ms: a wider window for a holder that outlives its lease;
 *    and once in 200 grants a stall of 1 to 2 leases, as a GC pause would do)
 *   FG.FSET ctr:C TOKEN VALUE+1
 *   FG.UNLOCK lock:C OWNER
 *
 * The log has one line per step, each written by one write(2) on an O_APPEND
 * descriptor: lines of threads never mix, and a SIGKILL leaves every line
 * whole but perhaps the last.
 *
 *   G C OWNER TOKEN RUN_ID MS          granted by the server RUN_ID at MS (wall clock);
 *                                      RUN_ID "?" when the server restarted around a
 *                                      grant of the library's (script mode)
 *   T C OWNER                          not granted within the wait
 *   R C OWNER TOKEN OK HIGHEST VALUE   the FG.FGET reply (VALUE 0 when nil)
 *   S C OWNER MS                       a stall of MS before the write
 *   W C OWNER TOKEN VALUE              FG.FSET about to be sent
 *   A C OWNER TOKEN VALUE STORED       its reply: 1 stored, 0 refused as stale
 *   U C OWNER TOKEN VALUE              its reply was lost: it may have landed
 *   L C OWNER HOLDS                    the FG.UNLOCK reply (-1: the lease ran out)
 *   E TEXT                             an unexpected reply (the test fails on it)
 *
 * A W line with no A or U line after it (the process was killed between
 * them) is as unknown as a U line. When the connection breaks (the server
 * was killed), the thread reconnects with a growing delay, sends FG.UNLOCK
 * for the lock it may still hold (the AOF keeps holders across a restart)
 * and starts over with a new request: a grant is never carried on to another
 * connection, so every reply about a grant comes from the server that made it.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "floodgate.h"

#define WAIT_MS 2000                     /* a waiter gives up after this */
#define REPLY_TIMEOUT_MS (WAIT_MS + 10000) /* longer than any wait in the server */
#define MAX_HOLD_US 10000                /* pause between the read and the write */
#define STALLS_PER_1000 5                /* grants whose holder outlives its lease */
#define MAX_BACKOFF_MS 500
#define OWNER_LEN 64

typedef struct thread_state { /* one per thread */
    pthread_t thread;
    int index;
    uint64_t rng;
    long seq;                /* requests made: the last part of an owner */
    redisContext *conn;      /* NULL when broken */
    fg_client *lib;          /* script mode: the client whose locks these are */
    char run_id[41];         /* of the server behind conn */
    int pending_counter;     /* a lock perhaps still held after a broken connection */
    char pending_owner[OWNER_LEN];
} thread_state;

static const char *host = "127.0.0.1";
static int port, worker_id, counters, log_fd;
static long long lease_ms;
static int64_t deadline_ms; /* CLOCK_MONOTONIC */
static const char *script_sha; /* script mode: lock.lua's SHA1, NULL otherwise */
static char *script_text;
static size_t script_len;

static int64_t clock_ms(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_us(long us) {
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

static uint64_t next_random(thread_state *th) {
    th->rng ^= th->rng << 13;
    th->rng ^= th->rng >> 7;
    th->rng ^= th->rng << 17;
    return th->rng;
}

static void log_line(const char *fmt, ...) {
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(line, sizeof(line) - 1, fmt, ap);
    va_end(ap);
    if (len < 0 || len >= (int)sizeof(line) - 1) len = (int)sizeof(line) - 2;
    line[len++] = '\n';
    if (write(log_fd, line, (size_t)len) != len) abort(); /* the log is the test's evidence */
}

static void disconnect(thread_state *th) {
    if (th->conn != NULL) redisFree(th->conn);
    th->conn = NULL;
}

static bool is_loading(const redisReply *r) {
    return r->type == REDIS_REPLY_ERROR && strncmp(r->str, "LOADING", 7) == 0;
}

/* A reply, or NULL when the connection broke or the server is still loading
 * its AOF (then the connection is dropped too: both mean "start over"). */
static redisReply *answered(thread_state *th, redisReply *r) {
    if (r != NULL && !is_loading(r)) return r;
    if (r != NULL) freeReplyObject(r);
    disconnect(th);
    return NULL;
}

static redisReply *command(thread_state *th, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(th->conn, fmt, ap);
    va_end(ap);
    return answered(th, r);
}

/* FG.FGET or FG.FSET on ctr:C: the module's command, or lock.lua's. */
static redisReply *fenced(thread_state *th, int c, const char *op, long long token,
                          const long long *value) {
    char key[32], tok[24], val[24];
    snprintf(key, sizeof(key), "ctr:%d", c);
    snprintf(tok, sizeof(tok), "%lld", token);
    if (value != NULL) snprintf(val, sizeof(val), "%lld", *value);
    const char *argv[7];
    size_t lens[7];
    int n = 0;
    if (script_sha != NULL) {
        argv[n++] = "EVALSHA", argv[n++] = script_sha, argv[n++] = "1";
        argv[n++] = key, argv[n++] = op;
    } else {
        argv[n++] = op, argv[n++] = key;
    }
    argv[n++] = tok;
    if (value != NULL) argv[n++] = val;
    for (int i = 0; i < n; i++)
        lens[i] = strlen(argv[i]);
    redisReply *r = answered(th, redisCommandArgv(th->conn, n, argv, lens));
    if (r == NULL || script_sha == NULL || r->type != REDIS_REPLY_ERROR ||
        strncmp(r->str, "NOSCRIPT", 8) != 0)
        return r;
    freeReplyObject(r);
    argv[0] = "EVAL", argv[1] = script_text, lens[0] = 4, lens[1] = script_len;
    return answered(th, redisCommandArgv(th->conn, n, argv, lens));
}

static bool read_run_id(thread_state *th) {
    redisReply *r = command(th, "INFO server");
    if (r == NULL) return false;
    const char *at = r->type == REDIS_REPLY_STRING ? strstr(r->str, "run_id:") : NULL;
    bool ok = at != NULL && sscanf(at, "run_id:%40s", th->run_id) == 1;
    if (!ok) log_line("E no run_id in INFO server");
    freeReplyObject(r);
    return ok;
}

/* Connects, waiting until the server answers PING (not LOADING). False when
 * the deadline passes first. */
static bool reconnect(thread_state *th) {
    long backoff_ms = 10;
    while (clock_ms(CLOCK_MONOTONIC) < deadline_ms) {
        struct timeval connect_timeout = {1, 0};
        struct timeval reply_timeout = {REPLY_TIMEOUT_MS / 1000, 0};
        th->conn = redisConnectWithTimeout(host, port, connect_timeout);
        if (th->conn != NULL && th->conn->err == 0 &&
            redisSetTimeout(th->conn, reply_timeout) == REDIS_OK && read_run_id(th)) {
            redisReply *r = command(th, "PING");
            if (r != NULL) {
                freeReplyObject(r);
                return true;
            }
        }
        disconnect(th);
        sleep_us(backoff_ms * 1000);
        if (backoff_ms < MAX_BACKOFF_MS) backoff_ms *= 2;
    }
    return false;
}

static void remember_pending(thread_state *th, int counter, const char *owner) {
    th->pending_counter = counter;
    snprintf(th->pending_owner, sizeof(th->pending_owner), "%s", owner);
}

static bool is_integers(const redisReply *r, size_t n) {
    if (r->type != REDIS_REPLY_ARRAY || r->elements != n) return false;
    for (size_t i = 0; i < n; i++)
        if (r->element[i]->type != REDIS_REPLY_INTEGER) return false;
    return true;
}

/* Logs an unexpected reply; the caller then treats the step as failed. The
 * pause keeps a server that answers only errors from filling the disk. */
static void unexpected(const char *what, const redisReply *r) {
    log_line("E %s: reply type %d %s", what, r->type,
             r->type == REDIS_REPLY_ERROR || r->type == REDIS_REPLY_STATUS ? r->str : "");
    sleep_us(10000);
}

/* The library's unlock (script mode): false when the server could not be
 * reached (the lock is then pending). */
static bool release_by_library(thread_state *th, int c, const char *owner) {
    char key[32];
    snprintf(key, sizeof(key), "lock:%d", c);
    int64_t left;
    fg_error err;
    fg_code rc = fg_unlock(th->lib, key, owner, &left, &err);
    if (rc == FG_CODE_IO) {
        remember_pending(th, c, owner);
        disconnect(th);
        return false;
    }
    if (rc == FG_CODE_OK) log_line("L %d %s %lld", c, owner, (long long)left);
    else log_line("E fg_unlock: %s", err.message);
    return true;
}

/* FG.UNLOCK; false when the connection broke (the lock is then pending). */
static bool release(thread_state *th, int c, const char *owner) {
    if (script_sha != NULL) return release_by_library(th, c, owner);
    redisReply *r = command(th, "FG.UNLOCK lock:%d %s", c, owner);
    if (r == NULL) {
        remember_pending(th, c, owner);
        return false;
    }
    if (r->type == REDIS_REPLY_INTEGER) log_line("L %d %s %lld", c, owner, r->integer);
    else unexpected("FG.UNLOCK", r);
    freeReplyObject(r);
    return true;
}

static bool release_pending(thread_state *th) {
    char owner[OWNER_LEN];
    memcpy(owner, th->pending_owner, sizeof(owner));
    th->pending_owner[0] = '\0';
    return release(th, th->pending_counter, owner);
}

/* FG.FGET with the token: the value read, or -1 when stale or failed. */
static long long fenced_read(thread_state *th, int c, const char *owner, long long token, bool *lost) {
    redisReply *r = fenced(th, c, "FG.FGET", token, NULL);
    if (r == NULL) {
        *lost = true;
        return -1;
    }
    long long value = -1;
    bool shaped = r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
                  r->element[0]->type == REDIS_REPLY_INTEGER &&
                  r->element[1]->type == REDIS_REPLY_INTEGER &&
                  (r->element[2]->type == REDIS_REPLY_STRING ||
                   r->element[2]->type == REDIS_REPLY_NIL);
    if (!shaped) {
        unexpected("FG.FGET", r);
    } else {
        long long ok = r->element[0]->integer, highest = r->element[1]->integer;
        long long read = r->element[2]->type == REDIS_REPLY_NIL ? 0 : atoll(r->element[2]->str);
        log_line("R %d %s %lld %lld %lld %lld", c, owner, token, ok, highest, read);
        if (ok == 1) value = read;
    }
    freeReplyObject(r);
    return value;
}

/* The read-modify-write under the grant. False when the connection broke. */
static bool fenced_increment(thread_state *th, int c, const char *owner, long long token) {
    bool lost = false;
    long long value = fenced_read(th, c, owner, token, &lost);
    if (lost) return false;
    if (value < 0) return true;
    long hold_us = (long)(next_random(th) % MAX_HOLD_US);
    if (next_random(th) % 1000 < STALLS_PER_1000) {
        hold_us = (long)(lease_ms + (long long)(next_random(th) % (uint64_t)lease_ms)) * 1000;
        log_line("S %d %s %ld", c, owner, hold_us / 1000);
    }
    sleep_us(hold_us);
    log_line("W %d %s %lld %lld", c, owner, token, value + 1);
    long long next = value + 1;
    redisReply *r = fenced(th, c, "FG.FSET", token, &next);
    if (r == NULL) {
        log_line("U %d %s %lld %lld", c, owner, token, value + 1);
        return false;
    }
    if (r->type == REDIS_REPLY_INTEGER)
        log_line("A %d %s %lld %lld %lld", c, owner, token, value + 1, r->integer);
    else
        unexpected("FG.FSET", r);
    freeReplyObject(r);
    return true;
}

/* The rest of a grant: logged, the counter incremented, the lock released. */
static void use_grant(thread_state *th, int c, const char *owner, long long token,
                      const char *run_id) {
    log_line("G %d %s %lld %s %lld", c, owner, token, run_id,
             (long long)clock_ms(CLOCK_REALTIME));
    if (fenced_increment(th, c, owner, token)) release(th, c, owner);
    else remember_pending(th, c, owner);
}

/* The library's lock (script mode). Its grant came on the library's own
 * connection: it is the server's whose run_id this thread read before and
 * after it, when the two are the same. */
static void take_lock_by_library(thread_state *th, int c, const char *owner) {
    char key[32], before[sizeof(th->run_id)];
    snprintf(key, sizeof(key), "lock:%d", c);
    memcpy(before, th->run_id, sizeof(before));
    fg_lock_options o;
    fg_lock_options_init(&o);
    o.lease_ms = lease_ms;
    o.wait_ms = WAIT_MS;
    fg_lock_grant g;
    fg_error err;
    fg_code rc = fg_lock(th->lib, key, owner, &o, &g, &err);
    if (rc == FG_CODE_IO) {
        remember_pending(th, c, owner); /* it may have been granted */
        disconnect(th);
        return;
    }
    if (rc != FG_CODE_OK) {
        log_line("E fg_lock: %s", err.message);
        sleep_us(10000);
        return;
    }
    if (!g.acquired) {
        log_line("T %d %s", c, owner);
        return;
    }
    if (!read_run_id(th)) {
        remember_pending(th, c, owner);
        return;
    }
    use_grant(th, c, owner, (long long)g.token, strcmp(before, th->run_id) == 0 ? before : "?");
}

static void take_lock(thread_state *th, int c, const char *owner) {
    if (script_sha != NULL) {
        take_lock_by_library(th, c, owner);
        return;
    }
    redisReply *r = command(th, "FG.LOCK lock:%d %s %lld WAIT %d", c, owner, lease_ms, WAIT_MS);
    if (r == NULL) {
        remember_pending(th, c, owner); /* it may have been granted */
        return;
    }
    if (!is_integers(r, 4)) {
        unexpected("FG.LOCK", r);
        freeReplyObject(r);
        return;
    }
    bool granted = r->element[0]->integer == 1;
    long long token = r->element[1]->integer;
    freeReplyObject(r);
    if (!granted) {
        log_line("T %d %s", c, owner);
        return;
    }
    use_grant(th, c, owner, token, th->run_id);
}

static void *run(void *arg) {
    thread_state *th = arg;
    while (clock_ms(CLOCK_MONOTONIC) < deadline_ms) {
        if (th->conn == NULL && !reconnect(th)) break;
        if (th->pending_owner[0] != '\0' && !release_pending(th)) continue;
        char owner[OWNER_LEN];
        snprintf(owner, sizeof(owner), "w%d:%d:%ld", worker_id, th->index, th->seq++);
        take_lock(th, (int)(next_random(th) % (uint64_t)counters), owner);
    }
    disconnect(th);
    fg_close(th->lib);
    return NULL;
}

/* lock.lua's text, for EVAL after NOSCRIPT. */
static bool read_script(const char *path) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) return false;
    script_text = malloc(1 << 20);
    script_len = script_text != NULL ? fread(script_text, 1, (1 << 20) - 1, f) : 0;
    fclose(f);
    return script_len > 0;
}

/* A thread's client of the server, speaking lock.lua. */
static fg_client *open_library(void) {
    char url[64];
    snprintf(url, sizeof(url), "redis://%s:%d?backend=script", host, port);
    fg_options o;
    fg_options_init(&o);
    o.command_timeout_ms = 1000;
    fg_error err;
    fg_client *c = fg_open(url, &o, &err);
    if (c == NULL) fprintf(stderr, "lock_torture: %s\n", err.message);
    return c;
}

int main(int argc, char **argv) {
    if (argc != 8 && argc != 10) {
        fprintf(stderr, "usage: %s PORT WORKER THREADS SECONDS LEASE_MS COUNTERS LOG [SCRIPT SHA1]\n",
                argv[0]);
        return 2;
    }
    if (argc == 10) {
        script_sha = argv[9];
        if (!read_script(argv[8])) {
            fprintf(stderr, "lock_torture: cannot read %s\n", argv[8]);
            return 2;
        }
    }
    port = atoi(argv[1]);
    worker_id = atoi(argv[2]);
    int nthreads = atoi(argv[3]);
    deadline_ms = clock_ms(CLOCK_MONOTONIC) + (int64_t)(atof(argv[4]) * 1000);
    lease_ms = atoll(argv[5]);
    counters = atoi(argv[6]);
    log_fd = open(argv[7], O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (nthreads < 1 || counters < 1 || lease_ms < 1 || log_fd < 0) {
        fprintf(stderr, "lock_torture: bad arguments or log %s\n", argv[7]);
        return 2;
    }
    thread_state *th = calloc((size_t)nthreads, sizeof(*th));
    if (th == NULL) return 1;
    for (int i = 0; i < nthreads; i++) {
        th[i].index = i;
        th[i].rng = ((uint64_t)worker_id << 32 | (uint64_t)i) * 0x9E3779B97F4A7C15ULL ^
                    (uint64_t)clock_ms(CLOCK_REALTIME);
        if (th[i].rng == 0) th[i].rng = 1;
        if (script_sha != NULL && (th[i].lib = open_library()) == NULL) return 1;
        if (pthread_create(&th[i].thread, NULL, run, &th[i]) != 0) return 1;
    }
    for (int i = 0; i < nthreads; i++) pthread_join(th[i].thread, NULL);
    free(th);
    free(script_text);
    close(log_fd);
    return 0;
}
