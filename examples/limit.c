/*
 * limit.c - the smallest program that uses libfloodgate.
 *
 * Allows 5 requests, then shows the denial and when to retry. With no
 * argument it runs in process; give it a URL (redis://127.0.0.1:6379) to
 * decide in a server running the floodgate module. Built in `make test`
 * against an installed copy, through pkg-config, as users build it.
 */
#include <floodgate.h>
#include <stdio.h>

int main(int argc, char **argv) {
    fg_error err;
    fg_client *client = fg_open(argc > 1 ? argv[1] : "mem:", NULL, &err);
    if (client == NULL) {
        fprintf(stderr, "floodgate: %s\n", err.message);
        return 2;
    }
    fg_limit limit = fg_token_bucket(5, 1); /* 5 at once, 1 more per second */
    int allowed = 0;
    for (int i = 0; i < 6; i++) {
        fg_result r;
        if (fg_check(client, "example:user42", &limit, 1, &r, &err) != FG_CODE_OK) {
            fprintf(stderr, "floodgate: %s\n", err.message);
            fg_close(client);
            return 2;
        }
        printf("request %d: %s, remaining %lld, retry after %lld ms\n", i + 1,
               r.allowed ? "allowed" : "denied", (long long)r.remaining,
               (long long)r.retry_after_ms);
        allowed += r.allowed;
    }
    fg_close(client);
    return allowed == 5 ? 0 : 1;
}
