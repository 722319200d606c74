/*
 * lock_bench.c - locks against a server: uncontended throughput and contended
 * hand-off latency, floodgate against the two usual Redis designs.
 *
 * floodgate runs twice: the module's commands, and without the module:
 * lock.lua (build/gen/scripts/, or $FLOODGATE_LOCK_SCRIPT) by EVALSHA on
 * the same server, and for the hand-off libfloodgate's waiting calls over
 * it (one fg_client a thread, ?backend=script), which wait for the
 * script's hand-off message (docs/scripts.md, "Locks").
 *
 * The baselines (scripts in bench/lua, written for this benchmark):
 *   - SET key owner NX PX lease, released by a compare-and-delete script;
 *     a waiter polls with SET NX and sleeps a fixed time between attempts.
 *   - a reentrant hash lock in the Redisson style: a script takes it (hash
 *     owner -> count, PEXPIRE) and answers nil or the remaining lease; the
 *     release script deletes it and PUBLISHes on the lock's channel. A
 *     refused client subscribes to that channel, tries again, and then again
 *     on every message (or when the remaining lease has passed); it
 *     unsubscribes once it holds the lock. Every client is its own process
 *     in Redisson's terms, so every waiter wakes on a release and they race.
 *
 * "throughput": one thread drives many connections with poll(), sending a
 * batch of PIPELINE commands on a connection and the next batch once all of
 * its replies are in, as redis-benchmark -P does. A case is a sequence of
 * steps on one key, repeated on fresh keys: an acquire+release pair (the
 * lock is created and deleted every time), an acquire alone (on free keys),
 * or a release alone (of the locks the acquire case left). Commands are
 * built with hiredis's formatter and every reply is checked (a granted
 * lock, a release that released), so a failing command can never pass for
 * a fast one. INCR through the same client at the same depth is the
 * reference of each round. Besides ops/s, the server's own CPU time per
 * command (INFO cpu, main thread) is reported: with 2 CPUs the client
 * limits the fastest commands, and server CPU time is not affected by that.
 *
 * "handoff": CLIENTS threads, each with its own connection (and, for
 * pub/sub, a subscriber connection), loop on one lock: acquire, hold it for
 * HOLD_US, release, wait THINK_US, again. All threads share one
 * CLOCK_MONOTONIC. The releasing thread notes the time just before it sends
 * its release; the next thread granted subtracts that from the time it reads
 * its grant: the hand-off latency, the time the lock stood free between
 * holders. Each acquisition also records when it was first asked for, which
 * gives the wait, and the fairness figures: acquisitions per client, how
 * often the releaser took the lock again, and how many acquisitions were
 * overtaken by a request that was sent after theirs had been written to the
 * socket (0 for a FIFO server). A shared holder flag checks mutual
 * exclusion. Grants are counted in a window that starts after a warm-up.
 *
 * The machine is shared (2 CPUs, other people's tests and builds), so each
 * run also measures the CPU time taken by processes other than the server
 * and this client (/proc/stat minus both, interrupts left out: the run's own
 * loopback traffic is accounted there). A round of throughput cases, or a
 * hand-off strategy, during which they used more than QUIET_SHARE of a CPU
 * is run again, up to MAX_ATTEMPTS times; the output says how often.
 *
 * Usage (bench/lock_bench.sh runs both, pinned to CPU 1):
 *   lock_bench HOST PORT LUA_DIR throughput ROUNDS COMMANDS CONNECTIONS PIPELINE [baselines]
 *   lock_bench HOST PORT LUA_DIR handoff SECONDS CLIENTS HOLD_US THINK_US [baselines]
 * "baselines" skips the floodgate cases (a module without FG.LOCK).
 * Tables (markdown) go to stdout, every run's figures to stderr.
 */
#include <hiredis/hiredis.h>
#include <poll.h>

#include "floodgate.h"
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define LEASE_MS "3600000" /* no lease ends during a run, however slow the machine */
#define INCR_KEYSPACE 100000UL
#define MAX_CONNECTIONS 256
#define MAX_PIPELINE 256
#define MAX_ROUNDS 20
#define MAX_CLIENTS 64
#define CONTENDED_KEY "lk:contended"
#define WARMUP_NS 500000000LL
#define MAX_ATTEMPTS 10     /* runs of a round or strategy while others use the CPUs */
#define QUIET_SHARE 0.05    /* of one CPU, used by other processes during a run */

static struct {
    const char *host;
    int port;
    const char *lua_dir;
    bool baselines_only;
    long server_pid; /* for the CPU time of other processes */
    char sha_release[41];      /* lock_release.lua */
    char sha_hash_acquire[41]; /* hash_lock_acquire.lua */
    char sha_hash_release[41]; /* hash_lock_release.lua */
    char sha_lock[41];         /* lock.lua, floodgate without the module */
} cfg;

_Noreturn static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "lock_bench: ERROR: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void sleep_until_ns(int64_t t) {
    struct timespec ts = {(time_t)(t / 1000000000LL), (long)(t % 1000000000LL)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0) {
    }
}

static redisContext *connect_server(void) {
    struct timeval tv = {5, 0};
    redisContext *c = redisConnectWithTimeout(cfg.host, cfg.port, tv);
    if (c == NULL || c->err) die("cannot connect to %s:%d: %s", cfg.host, cfg.port,
                                 c ? c->errstr : "out of memory");
    return c;
}

/* ---------------------------------------------------------------------------
 * Commands and their expected replies
 * ------------------------------------------------------------------------- */

typedef enum op {
    OP_INCR,
    OP_FG_LOCK,      /* FG.LOCK key owner lease */
    OP_FG_LOCK_WAIT, /* the same, waiting in the server's queue */
    OP_FG_UNLOCK,
    OP_SET_NX,
    OP_DEL_IF_OWNER, /* lock_release.lua */
    OP_HASH_LOCK,    /* hash_lock_acquire.lua */
    OP_HASH_UNLOCK,  /* hash_lock_release.lua */
    OP_SCRIPT_LOCK,  /* lock.lua's FG.LOCK key owner lease */
    OP_SCRIPT_UNLOCK,
} op;

static void append_op(redisContext *c, op o, const char *key, const char *owner) {
    switch (o) {
    case OP_INCR:
        redisAppendCommand(c, "INCR %s", key);
        break;
    case OP_FG_LOCK:
        redisAppendCommand(c, "FG.LOCK %s %s " LEASE_MS, key, owner);
        break;
    case OP_FG_LOCK_WAIT: /* a bounded wait, so that a lost grant fails the run */
        redisAppendCommand(c, "FG.LOCK %s %s " LEASE_MS " WAIT 60000", key, owner);
        break;
    case OP_FG_UNLOCK:
        redisAppendCommand(c, "FG.UNLOCK %s %s", key, owner);
        break;
    case OP_SET_NX:
        redisAppendCommand(c, "SET %s %s NX PX " LEASE_MS, key, owner);
        break;
    case OP_DEL_IF_OWNER:
        redisAppendCommand(c, "EVALSHA %s 1 %s %s", cfg.sha_release, key, owner);
        break;
    case OP_HASH_LOCK:
        redisAppendCommand(c, "EVALSHA %s 1 %s " LEASE_MS " %s", cfg.sha_hash_acquire, key, owner);
        break;
    case OP_HASH_UNLOCK:
        redisAppendCommand(c, "EVALSHA %s 2 %s %s:released %s " LEASE_MS, cfg.sha_hash_release,
                           key, key, owner);
        break;
    case OP_SCRIPT_LOCK:
        redisAppendCommand(c, "EVALSHA %s 1 %s FG.LOCK %s " LEASE_MS, cfg.sha_lock, key, owner);
        break;
    case OP_SCRIPT_UNLOCK:
        redisAppendCommand(c, "EVALSHA %s 1 %s FG.UNLOCK %s", cfg.sha_lock, key, owner);
        break;
    }
}

static bool is_integer(const redisReply *r, long long v) {
    return r->type == REDIS_REPLY_INTEGER && r->integer == v;
}

/* True when an acquire was granted or a release released. */
static bool succeeded(op o, const redisReply *r) {
    switch (o) {
    case OP_INCR:
        return r->type == REDIS_REPLY_INTEGER;
    case OP_FG_LOCK:
    case OP_FG_LOCK_WAIT:
    case OP_SCRIPT_LOCK:
        return r->type == REDIS_REPLY_ARRAY && r->elements == 4 &&
               is_integer(r->element[0], 1) && r->element[1]->type == REDIS_REPLY_INTEGER &&
               r->element[1]->integer > 0;
    case OP_FG_UNLOCK:
    case OP_HASH_UNLOCK:
    case OP_SCRIPT_UNLOCK:
        return is_integer(r, 0);
    case OP_SET_NX:
        return r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0;
    case OP_DEL_IF_OWNER:
        return is_integer(r, 1);
    case OP_HASH_LOCK:
        return r->type == REDIS_REPLY_NIL;
    }
    return false;
}

static const char *describe(const redisReply *r) {
    static _Thread_local char buf[160];
    switch (r->type) {
    case REDIS_REPLY_INTEGER:
        snprintf(buf, sizeof(buf), "(integer) %lld", r->integer);
        break;
    case REDIS_REPLY_NIL:
        snprintf(buf, sizeof(buf), "(nil)");
        break;
    case REDIS_REPLY_ARRAY:
        snprintf(buf, sizeof(buf), "(array of %zu)%s", r->elements,
                 r->elements && r->element[0]->type == REDIS_REPLY_INTEGER
                     ? (r->element[0]->integer ? " [1 ...]" : " [0 ...]")
                     : "");
        break;
    default:
        snprintf(buf, sizeof(buf), "%.*s", (int)(r->len < 120 ? r->len : 120), r->str);
    }
    return buf;
}

static void flush_output(redisContext *c) {
    int done = 0;
    do {
        if (redisBufferWrite(c, &done) != REDIS_OK) die("write: %s", c->errstr);
    } while (!done);
}

static redisReply *command(redisContext *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    if (r == NULL) die("%s", c->errstr);
    if (r->type == REDIS_REPLY_ERROR) die("%s -> %s", fmt, r->str);
    return r;
}

static void load_script_file(redisContext *c, const char *path, char sha[41]) {
    FILE *f = fopen(path, "r");
    if (f == NULL) die("cannot open %s", path);
    static char body[1 << 20];
    size_t len = fread(body, 1, sizeof(body), f);
    fclose(f);
    redisReply *r = command(c, "SCRIPT LOAD %b", body, len);
    if (r->type != REDIS_REPLY_STRING || r->len != 40) die("SCRIPT LOAD %s: no SHA1", path);
    memcpy(sha, r->str, 41);
    freeReplyObject(r);
}

static void load_script(redisContext *c, const char *name, char sha[41]) {
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", cfg.lua_dir, name);
    load_script_file(c, path, sha);
}

static bool server_has_command(redisContext *c, const char *name) {
    redisReply *r = command(c, "COMMAND INFO %s", name);
    bool known = r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
                 r->element[0]->type == REDIS_REPLY_ARRAY;
    freeReplyObject(r);
    return known;
}

/* CPU seconds of the server's main thread (user + system). */
static double server_cpu_seconds(redisContext *ctl) {
    redisReply *r = command(ctl, "INFO cpu");
    const char *s = strstr(r->str, "used_cpu_sys_main_thread:");
    const char *u = strstr(r->str, "used_cpu_user_main_thread:");
    if (s == NULL || u == NULL) die("INFO cpu has no main-thread figures");
    double v = atof(strchr(s, ':') + 1) + atof(strchr(u, ':') + 1);
    freeReplyObject(r);
    return v;
}

static double own_cpu_seconds(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

/* Disturbance: CPU time the machine spent on processes other than the
 * server and this client while a run lasted (other helpers' tests and
 * builds share these 2 CPUs). Interrupt time is left out: the loopback
 * traffic of the run itself is accounted there. */
typedef struct cpu_mark {
    int64_t ns;
    long long busy, mine; /* clock ticks: the machine's, server + client */
} cpu_mark;

static long long process_ticks(const char *path) {
    char buf[1024];
    FILE *f = fopen(path, "r");
    if (f == NULL) die("cannot read %s", path);
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the name may hold spaces */
    unsigned long long utime, stime;
    if (p == NULL || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
                            &utime, &stime) != 2)
        die("cannot parse %s", path);
    return (long long)(utime + stime);
}

static cpu_mark cpu_now(void) {
    unsigned long long user, nice, system, idle, iowait, irq, softirq, steal;
    FILE *f = fopen("/proc/stat", "r");
    if (f == NULL || fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &user, &nice,
                            &system, &idle, &iowait, &irq, &softirq, &steal) != 8)
        die("cannot read /proc/stat");
    fclose(f);
    char path[64];
    snprintf(path, sizeof(path), "/proc/%ld/stat", cfg.server_pid);
    return (cpu_mark){now_ns(), (long long)(user + nice + system + steal),
                      process_ticks(path) + process_ticks("/proc/self/stat")};
}

/* Share of one CPU used by others between two marks. */
static double others_share(cpu_mark a, cpu_mark b) {
    double ticks = (double)((b.busy - a.busy) - (b.mine - a.mine));
    double seconds = (double)(b.ns - a.ns) / 1e9;
    return ticks > 0 ? ticks / (double)sysconf(_SC_CLK_TCK) / seconds : 0;
}

static long long dbsize(redisContext *ctl) {
    redisReply *r = command(ctl, "DBSIZE");
    long long n = r->integer;
    freeReplyObject(r);
    return n;
}

static void flushall(redisContext *ctl) {
    freeReplyObject(command(ctl, "FLUSHALL"));
}

/* ---------------------------------------------------------------------------
 * Uncontended throughput
 * ------------------------------------------------------------------------- */

typedef struct tp_case {
    const char *name;
    bool floodgate;
    op steps[2]; /* on one key, in order */
    int nsteps;
    bool keep_keys;  /* runs on the locks the case before it left: no FLUSHALL */
    bool frees_all;  /* every lock is released: DBSIZE must be 0 afterwards */
} tp_case;

static const tp_case TP_CASES[] = {
    {"INCR", false, {OP_INCR}, 1, false, false},
    {"floodgate: FG.LOCK + FG.UNLOCK", true, {OP_FG_LOCK, OP_FG_UNLOCK}, 2, false, true},
    {"floodgate: FG.LOCK", true, {OP_FG_LOCK}, 1, false, false},
    {"floodgate: FG.UNLOCK", true, {OP_FG_UNLOCK}, 1, true, true},
    {"floodgate without the module: lock.lua FG.LOCK + FG.UNLOCK", true,
     {OP_SCRIPT_LOCK, OP_SCRIPT_UNLOCK}, 2, false, true},
    {"floodgate without the module: lock.lua FG.LOCK", true, {OP_SCRIPT_LOCK}, 1, false, false},
    {"floodgate without the module: lock.lua FG.UNLOCK", true, {OP_SCRIPT_UNLOCK}, 1, true, true},
    {"SET NX PX + compare-and-delete", false, {OP_SET_NX, OP_DEL_IF_OWNER}, 2, false, true},
    {"SET NX PX", false, {OP_SET_NX}, 1, false, false},
    {"compare-and-delete (EVALSHA)", false, {OP_DEL_IF_OWNER}, 1, true, true},
    {"Redisson-style: acquire + release", false, {OP_HASH_LOCK, OP_HASH_UNLOCK}, 2, false, true},
    {"Redisson-style: acquire (EVALSHA)", false, {OP_HASH_LOCK}, 1, false, false},
    {"Redisson-style: release (EVALSHA)", false, {OP_HASH_UNLOCK}, 1, true, true},
};
#define TP_NCASES (sizeof(TP_CASES) / sizeof(TP_CASES[0]))

typedef struct pipe_conn {
    redisContext *c;
    char owner[32];
    unsigned long next, end; /* units (keys) still to send: next .. end-1 */
    int step;                /* next step of unit `next` */
    int sent, read;          /* replies of the batch in flight */
    op ops[MAX_PIPELINE];    /* what each of them answers */
} pipe_conn;

static void send_batch(pipe_conn *p, const tp_case *tc, int pipeline) {
    char key[32];
    p->sent = p->read = 0;
    while (p->sent < pipeline && p->next < p->end) {
        op o = tc->steps[p->step];
        if (o == OP_INCR)
            snprintf(key, sizeof(key), "incr:%lu", (p->next * 2654435761UL) % INCR_KEYSPACE);
        else
            snprintf(key, sizeof(key), "lk:%lu", p->next);
        append_op(p->c, o, key, p->owner);
        p->ops[p->sent++] = o;
        if (++p->step == tc->nsteps) {
            p->step = 0;
            p->next++;
        }
    }
    flush_output(p->c);
}

/* Reads what arrived; sends the next batch when this one is complete.
 * Returns the replies consumed. */
static int read_replies(pipe_conn *p, const tp_case *tc, int pipeline) {
    if (redisBufferRead(p->c) != REDIS_OK) die("read: %s", p->c->errstr);
    int consumed = 0;
    while (p->read < p->sent) {
        void *reply;
        if (redisGetReplyFromReader(p->c, &reply) != REDIS_OK) die("protocol: %s", p->c->errstr);
        if (reply == NULL) return consumed;
        if (!succeeded(p->ops[p->read], reply))
            die("case \"%s\": unexpected reply %s", tc->name, describe(reply));
        freeReplyObject(reply);
        p->read++;
        consumed++;
    }
    if (p->next < p->end) send_batch(p, tc, pipeline);
    return consumed;
}

typedef struct tp_result {
    double ops;          /* commands per second */
    double server_us;    /* server CPU per command, microseconds */
    double client_share; /* client CPU / wall time */
    double others;       /* share of a CPU used by other processes */
} tp_result;

static tp_result run_case(pipe_conn *conns, int nconn, redisContext *ctl, const tp_case *tc,
                          unsigned long commands, int pipeline) {
    unsigned long per_conn = commands / (unsigned long)tc->nsteps / (unsigned long)nconn;
    for (int i = 0; i < nconn; i++) {
        conns[i].next = (unsigned long)i * per_conn;
        conns[i].end = conns[i].next + per_conn;
        conns[i].step = 0;
    }
    unsigned long total = per_conn * (unsigned long)nconn * (unsigned long)tc->nsteps;
    unsigned long done = 0;
    struct pollfd pfd[MAX_CONNECTIONS];
    int owner_of[MAX_CONNECTIONS];

    double server0 = server_cpu_seconds(ctl), client0 = own_cpu_seconds();
    cpu_mark m0 = cpu_now();
    int64_t t0 = now_ns();
    for (int i = 0; i < nconn; i++) send_batch(&conns[i], tc, pipeline);
    while (done < total) {
        int n = 0;
        for (int i = 0; i < nconn; i++) {
            if (conns[i].read < conns[i].sent) {
                pfd[n] = (struct pollfd){.fd = conns[i].c->fd, .events = POLLIN};
                owner_of[n++] = i;
            }
        }
        if (poll(pfd, (nfds_t)n, 10000) <= 0) die("case \"%s\": no reply for 10 s", tc->name);
        for (int k = 0; k < n; k++)
            if (pfd[k].revents) done += (unsigned long)read_replies(&conns[owner_of[k]], tc, pipeline);
    }
    int64_t t1 = now_ns();
    cpu_mark m1 = cpu_now();
    double client1 = own_cpu_seconds(), server1 = server_cpu_seconds(ctl);
    double wall = (double)(t1 - t0) / 1e9;
    return (tp_result){(double)total / wall, (server1 - server0) * 1e6 / (double)total,
                       (client1 - client0) / wall, others_share(m0, m1)};
}

static int compare_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(const double *v, int n) {
    double s[MAX_ROUNDS];
    memcpy(s, v, sizeof(double) * (size_t)n);
    qsort(s, (size_t)n, sizeof(double), compare_double);
    return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

static void min_max(const double *v, int n, double *lo, double *hi) {
    *lo = *hi = v[0];
    for (int i = 1; i < n; i++) {
        if (v[i] < *lo) *lo = v[i];
        if (v[i] > *hi) *hi = v[i];
    }
}

static void throughput(int rounds, unsigned long commands, int nconn, int pipeline) {
    if (rounds < 1 || rounds > MAX_ROUNDS || nconn < 1 || nconn > MAX_CONNECTIONS ||
        pipeline < 1 || pipeline > MAX_PIPELINE || commands < (unsigned long)(2 * nconn))
        die("throughput: bad arguments");
    redisContext *ctl = connect_server();
    pipe_conn *conns = calloc((size_t)nconn, sizeof(*conns));
    if (conns == NULL) die("out of memory");
    for (int i = 0; i < nconn; i++) {
        conns[i].c = connect_server();
        /* 24 bytes, the size of a typical random owner id */
        snprintf(conns[i].owner, sizeof(conns[i].owner), "owner-%02d-6f1c9a0e4b7d2853", i);
    }
    static tp_result res[TP_NCASES][MAX_ROUNDS];
    static double ratio[TP_NCASES][MAX_ROUNDS], cpu_ratio[TP_NCASES][MAX_ROUNDS];

    /* Unrecorded warm-up: the first run after start-up is slower. */
    flushall(ctl);
    run_case(conns, nconn, ctl, &TP_CASES[0], commands, pipeline);
    double worst_others = 0;
    int repeated = 0;
    for (int round = 0; round < rounds; round++) {
        /* A round in which other processes took CPU time is run again. */
        double others = 1;
        for (int attempt = 1; attempt <= MAX_ATTEMPTS && others > QUIET_SHARE; attempt++) {
            if (attempt > 1) {
                fprintf(stderr, "  round %d disturbed (others used %.0f%% of a CPU), again\n",
                        round + 1, 100 * others);
                repeated++;
                sleep(5);
            }
            others = 0;
            for (size_t i = 0; i < TP_NCASES; i++) {
                const tp_case *tc = &TP_CASES[i];
                if (tc->floodgate && cfg.baselines_only) continue;
                if (!tc->keep_keys) flushall(ctl);
                tp_result *r = &res[i][round];
                *r = run_case(conns, nconn, ctl, tc, commands, pipeline);
                ratio[i][round] = r->ops / res[0][round].ops;
                cpu_ratio[i][round] = res[0][round].server_us / r->server_us;
                if (r->others > others) others = r->others;
                long long keys = dbsize(ctl);
                if (tc->frees_all && keys != 0)
                    die("case \"%s\" left %lld keys", tc->name, keys);
                fprintf(stderr,
                        "  round %d %-36s %10.0f ops/s  x%.3f  server %.3f us/op (x%.3f)  "
                        "client CPU %3.0f%%  others %3.0f%%  keys %lld\n",
                        round + 1, tc->name, r->ops, ratio[i][round], r->server_us,
                        cpu_ratio[i][round], 100 * r->client_share, 100 * r->others, keys);
            }
        }
        if (others > worst_others) worst_others = others;
    }
    flushall(ctl);

    printf("## Uncontended throughput\n\n");
    printf("One client process (hiredis, one thread, poll) on CPU 1, %d connections, pipeline %d "
           "(a batch of %d commands per connection, the next batch when all replies are in); "
           "%lu commands per run, keys `lk:<n>` used once each (a pair creates and deletes its "
           "lock); %d interleaved round%s; medians. \"x INCR\" divides by INCR of the same "
           "round through the same client. \"server CPU\" is the server's main-thread CPU time "
           "per command (INFO cpu), and its \"x INCR\" is INCR's time divided by the case's. "
           "A pair is two commands: pairs/s is half its commands/s. Other processes used at "
           "most %.0f%% of a CPU during a recorded run (a round is run again when they use "
           "more than %.0f%%; %d round%s repeated).\n\n",
           nconn, pipeline, pipeline, commands, rounds, rounds == 1 ? "" : "s",
           100 * worst_others, 100 * QUIET_SHARE, repeated, repeated == 1 ? " was" : "s were");
    printf("| case | commands/s | x INCR | pairs/s | server CPU us/command | x INCR (server CPU) "
           "| client CPU |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|\n");
    for (size_t i = 0; i < TP_NCASES; i++) {
        const tp_case *tc = &TP_CASES[i];
        if (tc->floodgate && cfg.baselines_only) continue;
        double ops[MAX_ROUNDS], us[MAX_ROUNDS], share[MAX_ROUNDS];
        for (int r = 0; r < rounds; r++) {
            ops[r] = res[i][r].ops;
            us[r] = res[i][r].server_us;
            share[r] = res[i][r].client_share;
        }
        char pairs[32] = "";
        if (tc->nsteps == 2) snprintf(pairs, sizeof(pairs), "%.0f", median(ops, rounds) / 2);
        printf("| %s | %.0f | %.2f | %s | %.3f | %.2f | %.0f%% |\n", tc->name,
               median(ops, rounds), median(ratio[i], rounds), pairs, median(us, rounds),
               median(cpu_ratio[i], rounds), 100 * median(share, rounds));
    }
    if (rounds > 1) {
        printf("\nSpread over rounds (min-max; the INCR row is ops/s, a wide range means a busy "
               "machine):\n\n");
        printf("| case | x INCR | x INCR (server CPU) |\n|---|---:|---:|\n");
        double lo, hi, lo2, hi2, ops[MAX_ROUNDS];
        for (int r = 0; r < rounds; r++) ops[r] = res[0][r].ops;
        min_max(ops, rounds, &lo, &hi);
        printf("| INCR ops/s (noise check) | %.0f-%.0f | |\n", lo, hi);
        for (size_t i = 1; i < TP_NCASES; i++) {
            if (TP_CASES[i].floodgate && cfg.baselines_only) continue;
            min_max(ratio[i], rounds, &lo, &hi);
            min_max(cpu_ratio[i], rounds, &lo2, &hi2);
            printf("| %s | %.2f-%.2f | %.2f-%.2f |\n", TP_CASES[i].name, lo, hi, lo2, hi2);
        }
    }
    printf("\n");
    for (int i = 0; i < nconn; i++) redisFree(conns[i].c);
    free(conns);
    redisFree(ctl);
}

/* ---------------------------------------------------------------------------
 * Contended hand-off
 * ------------------------------------------------------------------------- */

typedef enum strategy_kind { ST_FLOODGATE, ST_SCRIPT, ST_POLL, ST_PUBSUB } strategy_kind;

typedef struct strategy {
    const char *name;
    strategy_kind kind;
    int retry_us; /* ST_POLL: sleep between attempts */
} strategy;

static const strategy STRATEGIES[] = {
    {"floodgate: FG.LOCK ... WAIT (server FIFO)", ST_FLOODGATE, 0},
    {"floodgate without the module: lock.lua + fg_lock's wait (FIFO, told by message)",
     ST_SCRIPT, 0},
    {"SET NX PX, retry every 10 ms", ST_POLL, 10000},
    {"SET NX PX, retry every 1 ms", ST_POLL, 1000},
    {"Redisson-style: Lua + pub/sub wake-up", ST_PUBSUB, 0},
};
#define NSTRATEGIES (sizeof(STRATEGIES) / sizeof(STRATEGIES[0]))

typedef struct grant {
    int64_t asked_ns;    /* first attempt of this acquisition, before its write */
    int64_t sent_ns;     /* ... after its write returned */
    int64_t granted_ns;  /* the grant read */
    int64_t released_ns; /* the release before it was sent (0: none yet) */
    int client, releaser;
} grant;

typedef struct contender {
    int id;
    const strategy *st;
    redisContext *c, *sub;
    fg_client *lib; /* ST_SCRIPT */
    char owner[32];
    grant *grants;
    size_t len, cap;
    unsigned long commands;
} contender;

/* What the holder leaves for the next one. Only the holder writes. */
static struct {
    _Atomic int64_t released_ns;
    atomic_int releaser;
    atomic_int holder; /* -1: nobody, by the clients' account */
    atomic_bool stop;
    atomic_ulong overlaps; /* a grant while another client held the lock */
    pthread_barrier_t start;
    int hold_us, think_us;
} arena;

/* Sends the command appended to c, returns its reply. */
static redisReply *round_trip(contender *ct, redisContext *c, int64_t *sent_ns) {
    flush_output(c);
    if (sent_ns) *sent_ns = now_ns();
    void *reply;
    if (redisGetReply(c, &reply) != REDIS_OK) die("client %d: %s", ct->id, c->errstr);
    ct->commands++;
    if (((redisReply *)reply)->type == REDIS_REPLY_ERROR)
        die("client %d: %s", ct->id, ((redisReply *)reply)->str);
    return reply;
}

/* Subscribes to the lock's channel, as a Redisson client does when an
 * acquire fails. The replies still due from the previous UNSUBSCRIBE (and
 * the messages before it) come first and are skipped. */
static void subscribe(contender *ct) {
    redisAppendCommand(ct->sub, "SUBSCRIBE %s:released", CONTENDED_KEY);
    flush_output(ct->sub);
    ct->commands++;
    for (;;) {
        void *reply;
        if (redisGetReply(ct->sub, &reply) != REDIS_OK) die("subscriber: %s", ct->sub->errstr);
        const redisReply *r = reply;
        bool confirmed = r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
                         r->element[0]->type == REDIS_REPLY_STRING &&
                         strcmp(r->element[0]->str, "subscribe") == 0;
        freeReplyObject(reply);
        if (confirmed) return;
    }
}

/* Leaves the channel once the lock is held; the confirmation is read by
 * the next subscribe(), so the holder does not wait for it. */
static void unsubscribe(contender *ct) {
    redisAppendCommand(ct->sub, "UNSUBSCRIBE %s:released", CONTENDED_KEY);
    flush_output(ct->sub);
    ct->commands++;
}

/* Waits at most timeout_ms for a message on the subscriber connection. */
static void next_message(contender *ct, int timeout_ms) {
    for (;;) {
        void *reply;
        if (redisGetReplyFromReader(ct->sub, &reply) != REDIS_OK) die("subscriber: protocol");
        if (reply) {
            freeReplyObject(reply);
            return;
        }
        struct pollfd pfd = {.fd = ct->sub->fd, .events = POLLIN};
        if (poll(&pfd, 1, timeout_ms) <= 0) return;
        if (redisBufferRead(ct->sub) != REDIS_OK) die("subscriber: %s", ct->sub->errstr);
    }
}

/* What to do after a refused attempt: sleep (polling), or listen for a
 * release, at most the remaining lease (pub/sub). */
static void wait_to_retry(contender *ct, int attempt, long long ttl_ms) {
    if (ct->st->kind == ST_POLL) {
        struct timespec ts = {0, ct->st->retry_us * 1000L};
        nanosleep(&ts, NULL);
        return;
    }
    /* The first refusal subscribes and tries again at once: a release
     * between the attempt and the subscription would otherwise be missed. */
    if (attempt == 0)
        subscribe(ct);
    else
        next_message(ct, ttl_ms > 0 ? (int)ttl_ms : 1);
}

/* The library's round trips so far, as this benchmark counts commands;
 * a waiting call's subscription is one more. */
static unsigned long library_commands(contender *ct) {
    fg_stats st;
    fg_get_stats(ct->lib, &st);
    return (unsigned long)st.round_trips;
}

/* ST_SCRIPT: fg_lock waits (60 s at most, so that a lost grant fails the run). */
static void acquire_by_library(contender *ct, grant *g) {
    fg_lock_options o;
    fg_lock_options_init(&o);
    o.lease_ms = atoi(LEASE_MS);
    o.wait_ms = 60000;
    fg_lock_grant lg;
    fg_error err;
    unsigned long before = library_commands(ct);
    g->asked_ns = g->sent_ns = now_ns();
    if (fg_lock(ct->lib, CONTENDED_KEY, ct->owner, &o, &lg, &err) != FG_CODE_OK)
        die("client %d: fg_lock: %s", ct->id, err.message);
    if (!lg.acquired) die("client %d: fg_lock waited 60 s", ct->id);
    g->granted_ns = now_ns();
    unsigned long trips = library_commands(ct) - before;
    ct->commands += trips + (trips > 1); /* waited: it subscribed too */
}

static void release_by_library(contender *ct) {
    int64_t left;
    fg_error err;
    if (fg_unlock(ct->lib, CONTENDED_KEY, ct->owner, &left, &err) != FG_CODE_OK || left != 0)
        die("client %d: fg_unlock: %s", ct->id, err.message);
    ct->commands++;
}

/* Takes the lock the strategy's way; fills the times of *g. */
static void acquire(contender *ct, grant *g) {
    if (ct->st->kind == ST_SCRIPT) {
        acquire_by_library(ct, g);
        return;
    }
    op o = ct->st->kind == ST_FLOODGATE ? OP_FG_LOCK_WAIT
           : ct->st->kind == ST_POLL    ? OP_SET_NX
                                        : OP_HASH_LOCK;
    int attempt;
    for (attempt = 0;; attempt++) {
        int64_t asked = now_ns(), sent;
        append_op(ct->c, o, CONTENDED_KEY, ct->owner);
        redisReply *r = round_trip(ct, ct->c, &sent);
        if (attempt == 0) {
            g->asked_ns = asked;
            g->sent_ns = sent;
        }
        bool granted = succeeded(o, r);
        bool busy = (o == OP_SET_NX && r->type == REDIS_REPLY_NIL) ||
                    (o == OP_HASH_LOCK && r->type == REDIS_REPLY_INTEGER && r->integer >= 0);
        long long ttl = r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
        if (!granted && !busy) die("client %d: %s -> %s", ct->id, ct->st->name, describe(r));
        freeReplyObject(r);
        if (granted) break;
        wait_to_retry(ct, attempt, ttl);
    }
    g->granted_ns = now_ns();
    if (ct->st->kind == ST_PUBSUB && attempt > 0) unsubscribe(ct);
}

static void release(contender *ct) {
    op o = ct->st->kind == ST_FLOODGATE ? OP_FG_UNLOCK
           : ct->st->kind == ST_POLL    ? OP_DEL_IF_OWNER
                                        : OP_HASH_UNLOCK;
    atomic_store(&arena.holder, -1);
    atomic_store(&arena.releaser, ct->id);
    atomic_store(&arena.released_ns, now_ns());
    if (ct->st->kind == ST_SCRIPT) {
        release_by_library(ct);
        return;
    }
    append_op(ct->c, o, CONTENDED_KEY, ct->owner);
    redisReply *r = round_trip(ct, ct->c, NULL);
    if (!succeeded(o, r)) die("client %d: release -> %s", ct->id, describe(r));
    freeReplyObject(r);
}

static void *contend(void *arg) {
    contender *ct = arg;
    pthread_barrier_wait(&arena.start);
    while (!atomic_load(&arena.stop)) {
        if (ct->len == ct->cap) {
            ct->cap = ct->cap ? 2 * ct->cap : 4096;
            ct->grants = realloc(ct->grants, ct->cap * sizeof(grant));
            if (ct->grants == NULL) die("out of memory");
        }
        grant *g = &ct->grants[ct->len++];
        acquire(ct, g);
        if (atomic_exchange(&arena.holder, ct->id) != -1) atomic_fetch_add(&arena.overlaps, 1);
        g->client = ct->id;
        g->releaser = atomic_load(&arena.releaser);
        g->released_ns = atomic_load(&arena.released_ns);
        sleep_until_ns(g->granted_ns + arena.hold_us * 1000LL);
        release(ct);
        if (arena.think_us) sleep_until_ns(now_ns() + arena.think_us * 1000LL);
    }
    return NULL;
}

static int compare_int64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile of sorted v, in microseconds. */
static double pct_us(const int64_t *v, size_t n, double p) {
    if (n == 0) return 0;
    size_t rank = (size_t)(p / 100 * (double)n + 0.999999);
    if (rank < 1) rank = 1;
    if (rank > n) rank = n;
    return (double)v[rank - 1] / 1000.0;
}

typedef struct handoff_result {
    double per_second, rt_per_acq, server_us_per_acq;
    double handoff[3], wait[3]; /* p50, p99, max, us */
    unsigned long min_client, max_client, overlaps;
    double overtaken, retaken; /* fractions */
    double others;             /* share of a CPU used by other processes */
} handoff_result;

/* A client of the benchmark's server that speaks lock.lua. */
static fg_client *open_library(void) {
    char url[128];
    snprintf(url, sizeof(url), "redis://%s:%d?backend=script", cfg.host, cfg.port);
    fg_error err;
    fg_client *c = fg_open(url, NULL, &err);
    if (c == NULL) die("fg_open %s: %s", url, err.message);
    return c;
}

static handoff_result run_strategy(const strategy *st, int nclients, double seconds,
                                   redisContext *ctl) {
    static contender cts[MAX_CLIENTS];
    pthread_t tid[MAX_CLIENTS];
    flushall(ctl);
    atomic_store(&arena.released_ns, 0);
    atomic_store(&arena.releaser, -1);
    atomic_store(&arena.holder, -1);
    atomic_store(&arena.stop, false);
    atomic_store(&arena.overlaps, 0);
    pthread_barrier_init(&arena.start, NULL, (unsigned)nclients + 1);
    for (int i = 0; i < nclients; i++) {
        contender *ct = &cts[i];
        *ct = (contender){.id = i, .st = st};
        snprintf(ct->owner, sizeof(ct->owner), "owner-%02d-6f1c9a0e4b7d2853", i);
        ct->c = connect_server();
        if (st->kind == ST_PUBSUB) ct->sub = connect_server();
        if (st->kind == ST_SCRIPT) ct->lib = open_library();
        if (pthread_create(&tid[i], NULL, contend, ct) != 0) die("pthread_create");
    }
    double server0 = server_cpu_seconds(ctl);
    pthread_barrier_wait(&arena.start);
    int64_t from = now_ns() + WARMUP_NS;
    int64_t to = from + (int64_t)(seconds * 1e9);
    sleep_until_ns(from);
    cpu_mark m0 = cpu_now();
    sleep_until_ns(to);
    cpu_mark m1 = cpu_now();
    atomic_store(&arena.stop, true);
    for (int i = 0; i < nclients; i++) pthread_join(tid[i], NULL);
    double server1 = server_cpu_seconds(ctl);
    pthread_barrier_destroy(&arena.start);

    size_t total = 0, all = 0;
    unsigned long commands = 0;
    for (int i = 0; i < nclients; i++) {
        all += cts[i].len;
        commands += cts[i].commands;
    }
    grant *gs = malloc(all * sizeof(grant));
    int64_t *handoff = malloc(all * sizeof(int64_t)), *wait = malloc(all * sizeof(int64_t));
    if (gs == NULL || handoff == NULL || wait == NULL) die("out of memory");
    size_t everything = 0;
    for (int i = 0; i < nclients; i++)
        for (size_t k = 0; k < cts[i].len; k++) gs[everything++] = cts[i].grants[k];

    handoff_result res = {.min_client = (unsigned long)-1};
    unsigned long per_client[MAX_CLIENTS] = {0};
    size_t nh = 0, overtaken = 0, retaken = 0;
    for (size_t k = 0; k < everything; k++) {
        const grant *g = &gs[k];
        if (g->granted_ns < from || g->granted_ns >= to) continue;
        total++;
        per_client[g->client]++;
        wait[total - 1] = g->granted_ns - g->asked_ns;
        if (g->released_ns) handoff[nh++] = g->granted_ns - g->released_ns;
        if (g->releaser == g->client) retaken++;
        /* overtaken: someone asked after this request was written, and got
         * the lock first */
        for (size_t j = 0; j < everything; j++) {
            if (gs[j].asked_ns > g->sent_ns && gs[j].granted_ns < g->granted_ns) {
                overtaken++;
                break;
            }
        }
    }
    qsort(handoff, nh, sizeof(int64_t), compare_int64);
    qsort(wait, total, sizeof(int64_t), compare_int64);
    for (int i = 0; i < nclients; i++) {
        if (per_client[i] < res.min_client) res.min_client = per_client[i];
        if (per_client[i] > res.max_client) res.max_client = per_client[i];
    }
    res.per_second = (double)total / seconds;
    res.rt_per_acq = all ? (double)commands / (double)all : 0;
    res.server_us_per_acq = all ? (server1 - server0) * 1e6 / (double)all : 0;
    double ps[3] = {50, 99, 100};
    for (int p = 0; p < 3; p++) {
        res.handoff[p] = pct_us(handoff, nh, ps[p]);
        res.wait[p] = pct_us(wait, total, ps[p]);
    }
    res.overtaken = total ? (double)overtaken / (double)total : 0;
    res.retaken = total ? (double)retaken / (double)total : 0;
    res.overlaps = atomic_load(&arena.overlaps);
    res.others = others_share(m0, m1);

    for (int i = 0; i < nclients; i++) {
        redisFree(cts[i].c);
        if (cts[i].sub) redisFree(cts[i].sub);
        fg_close(cts[i].lib);
        free(cts[i].grants);
    }
    free(gs);
    free(handoff);
    free(wait);
    return res;
}

/* For scale: p50, p99 and max of a PING round trip from one thread with
 * nothing else running, in microseconds. */
static void ping_round_trip(redisContext *c, double out[3]) {
    enum { PINGS = 20000 };
    static int64_t rtt[PINGS];
    for (int i = 0; i < PINGS; i++) {
        int64_t t0 = now_ns();
        freeReplyObject(command(c, "PING"));
        rtt[i] = now_ns() - t0;
    }
    qsort(rtt, PINGS, sizeof(int64_t), compare_int64);
    out[0] = pct_us(rtt, PINGS, 50);
    out[1] = pct_us(rtt, PINGS, 99);
    out[2] = pct_us(rtt, PINGS, 100);
}

static void handoff(double seconds, int nclients, int hold_us, int think_us) {
    if (seconds <= 0 || nclients < 2 || nclients > MAX_CLIENTS || hold_us < 0 || think_us < 0)
        die("handoff: bad arguments");
    arena.hold_us = hold_us;
    arena.think_us = think_us;
    redisContext *ctl = connect_server();
    double ping[3];
    ping_round_trip(ctl, ping);
    fprintf(stderr, "  PING round trip p50 %.0f p99 %.0f max %.0f us\n", ping[0], ping[1], ping[2]);
    handoff_result res[NSTRATEGIES];
    double worst_others = 0;
    int repeated = 0;
    for (size_t i = 0; i < NSTRATEGIES; i++) {
        if ((STRATEGIES[i].kind == ST_FLOODGATE || STRATEGIES[i].kind == ST_SCRIPT) &&
            cfg.baselines_only)
            continue;
        const handoff_result *r = &res[i];
        for (int attempt = 1; attempt <= MAX_ATTEMPTS; attempt++) {
            res[i] = run_strategy(&STRATEGIES[i], nclients, seconds, ctl);
            fprintf(stderr,
                    "  %-44s %7.0f acq/s  hand-off p50 %.0f p99 %.0f max %.0f us  wait p50 %.0f "
                    "p99 %.0f max %.0f us  %.1f commands/acq  %.1f server us/acq  clients "
                    "%lu-%lu  overtaken %.1f%%  retaken %.1f%%  overlaps %lu  others %.0f%%\n",
                    STRATEGIES[i].name, r->per_second, r->handoff[0], r->handoff[1],
                    r->handoff[2], r->wait[0], r->wait[1], r->wait[2], r->rt_per_acq,
                    r->server_us_per_acq, r->min_client, r->max_client, 100 * r->overtaken,
                    100 * r->retaken, r->overlaps, 100 * r->others);
            if (r->overlaps)
                die("%s: two holders at once (%lu times)", STRATEGIES[i].name, r->overlaps);
            if (r->others <= QUIET_SHARE) break;
            fprintf(stderr, "  disturbed (others used %.0f%% of a CPU), again\n",
                    100 * r->others);
            repeated++;
            sleep(5);
        }
        if (r->others > worst_others) worst_others = r->others;
    }
    redisFree(ctl);

    printf("## Contended hand-off\n\n");
    printf("%d client threads in one process on CPU 1, one connection each (pub/sub: and a "
           "subscriber connection), one lock, lease %s ms. Each client loops: acquire, hold "
           "%d us, release, wait %d us. Hand-off: from the moment the holder sends its release "
           "to the moment the next holder reads its grant (CLOCK_MONOTONIC shared by all "
           "threads). Wait: from the first attempt to the grant. %.0f s per strategy after a "
           "0.5 s warm-up; latencies in microseconds. For scale: a PING round trip from one "
           "thread, nothing else running, takes p50 %.0f, p99 %.0f, max %.0f. Other processes "
           "used at most %.0f%% of a CPU during a recorded run (%d run%s repeated).\n\n",
           nclients, LEASE_MS, hold_us, think_us, seconds, ping[0], ping[1], ping[2],
           100 * worst_others, repeated, repeated == 1 ? " was" : "s were");
    printf("| strategy | acquisitions/s | hand-off p50 | p99 | max | wait p50 | p99 | max "
           "| commands per acquisition (release included) | server CPU us per acquisition |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (size_t i = 0; i < NSTRATEGIES; i++) {
        if ((STRATEGIES[i].kind == ST_FLOODGATE || STRATEGIES[i].kind == ST_SCRIPT) &&
            cfg.baselines_only)
            continue;
        const handoff_result *r = &res[i];
        printf("| %s | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.1f | %.1f |\n",
               STRATEGIES[i].name, r->per_second, r->handoff[0], r->handoff[1], r->handoff[2],
               r->wait[0], r->wait[1], r->wait[2], r->rt_per_acq, r->server_us_per_acq);
    }
    printf("\nFairness: acquisitions per client (fewest-most), the share of acquisitions "
           "overtaken by a request sent after theirs had been written, and the share taken by "
           "the client that released just before. Two holders at once were never seen (checked "
           "on every grant).\n\n");
    printf("| strategy | acquisitions per client | most / fewest | overtaken | re-taken by the "
           "releaser |\n");
    printf("|---|---:|---:|---:|---:|\n");
    for (size_t i = 0; i < NSTRATEGIES; i++) {
        if ((STRATEGIES[i].kind == ST_FLOODGATE || STRATEGIES[i].kind == ST_SCRIPT) &&
            cfg.baselines_only)
            continue;
        const handoff_result *r = &res[i];
        char spread[32];
        if (r->min_client)
            snprintf(spread, sizeof(spread), "%.2f", (double)r->max_client / (double)r->min_client);
        else
            snprintf(spread, sizeof(spread), "inf");
        printf("| %s | %lu-%lu | %s | %.1f%% | %.1f%% |\n", STRATEGIES[i].name, r->min_client,
               r->max_client, spread, 100 * r->overtaken, 100 * r->retaken);
    }
    printf("\n");
}

int main(int argc, char **argv) {
    if (argc < 9 || argc > 10) {
        fprintf(stderr,
                "usage: lock_bench HOST PORT LUA_DIR throughput ROUNDS COMMANDS CONNECTIONS "
                "PIPELINE [baselines]\n"
                "       lock_bench HOST PORT LUA_DIR handoff SECONDS CLIENTS HOLD_US THINK_US "
                "[baselines]\n");
        return 2;
    }
    cfg.host = argv[1];
    cfg.port = atoi(argv[2]);
    cfg.lua_dir = argv[3];
    cfg.baselines_only = argc == 10 && strcmp(argv[9], "baselines") == 0;

    redisContext *ctl = connect_server();
    redisReply *info = command(ctl, "INFO server");
    const char *pid = strstr(info->str, "process_id:");
    if (pid == NULL) die("INFO server has no process_id");
    cfg.server_pid = atol(pid + strlen("process_id:"));
    freeReplyObject(info);
    if (!cfg.baselines_only && !server_has_command(ctl, "FG.LOCK"))
        die("the server has no FG.LOCK (a module without locks?); 'baselines' runs the rest");
    load_script(ctl, "lock_release.lua", cfg.sha_release);
    load_script(ctl, "hash_lock_acquire.lua", cfg.sha_hash_acquire);
    load_script(ctl, "hash_lock_release.lua", cfg.sha_hash_release);
    if (!cfg.baselines_only) {
        const char *lock = getenv("FLOODGATE_LOCK_SCRIPT");
        load_script_file(ctl, lock ? lock : "build/gen/scripts/lock.lua", cfg.sha_lock);
    }
    redisFree(ctl);

    if (strcmp(argv[4], "throughput") == 0)
        throughput(atoi(argv[5]), strtoul(argv[6], NULL, 10), atoi(argv[7]), atoi(argv[8]));
    else if (strcmp(argv[4], "handoff") == 0)
        handoff(atof(argv[5]), atoi(argv[6]), atoi(argv[7]), atoi(argv[8]));
    else
        die("unknown mode %s", argv[4]);
    return 0;
}
