/*
 * renewal_unlocks.c - a renewed lock taken away while other threads of the
 * same client keep unlocking other keys: its loss must be reported as
 * FG_LOST_NOT_HELD at the next renewal, not hidden until the lease ends.
 *
 *   renewal_unlocks <port> <threads>
 *
 * Prints "reason=<not_held|unreachable|renew_limit|none> after_ms=<n>".
 */
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "floodgate.h"

static fg_client *client;
static atomic_bool stop;
static atomic_int lost_reason = -1;
static atomic_llong lost_at_ms;

static long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

static void on_lost(const char *key, const char *owner, fg_lost_reason why, void *arg) {
    (void)key, (void)owner, (void)arg;
    lost_at_ms = now_ms();
    lost_reason = (int)why;
}

static void *unlock_other_keys(void *arg) {
    char key[32];
    snprintf(key, sizeof(key), "other:%ld", (long)arg);
    while (!stop) {
        fg_error err;
        int64_t left;
        fg_unlock(client, key, "nobody", &left, &err);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    int port = atoi(argv[1]), threads = atoi(argv[2]);
    char url[64];
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", port);
    fg_error err;
    client = fg_open(url, NULL, &err);
    redisContext *admin = redisConnect("127.0.0.1", port);
    if (client == NULL || admin == NULL || admin->err) return 1;

    fg_lock_options o;
    fg_lock_options_init(&o);
    o.lease_ms = 3000;
    o.renew = true;
    o.on_lost = on_lost;
    fg_lock_grant g;
    if (fg_lock(client, "victim", "me", &o, &g, &err) != FG_CODE_OK || !g.acquired) return 1;
    pthread_t th[16];
    if (threads > 16) threads = 16;
    for (long i = 0; i < threads; i++)
        pthread_create(&th[i], NULL, unlock_other_keys, (void *)i);
    usleep(200000);

    /* An administrator takes the lock away and someone else takes it. */
    freeReplyObject(redisCommand(admin, "FG.FORCEUNLOCK victim"));
    freeReplyObject(redisCommand(admin, "FG.LOCK victim thief 60000"));
    long long forced = now_ms();
    while (lost_reason < 0 && now_ms() < forced + 6000)
        usleep(1000);

    static const char *const names[] = {"not_held", "unreachable", "renew_limit"};
    int why = lost_reason;
    printf("reason=%s after_ms=%lld\n", why >= 0 && why < 3 ? names[why] : "none",
           why >= 0 ? (long long)lost_at_ms - forced : -1);
    stop = true;
    for (int i = 0; i < threads; i++)
        pthread_join(th[i], NULL);
    fg_close(client);
    redisFree(admin);
    return 0;
}
