/*
 * server.c - a hiredis connection to one server, for what the library has
 * no call for: doctor's INFO, CONFIG GET, ACL and CLUSTER questions, lock
 * info's FG.LOCKINFO and the FUNCTION commands of functions (cli.h).
 *
 * The URL is read by the library's own parser (its url.o, linked into the
 * tool by the Makefile), so that it means what it means to fg_open, with
 * the same messages: AUTH and SELECT follow it as the library's
 * connections do; a cluster URL names its first seed, and its other nodes
 * take that seed's user and password (cli_server_open_node). Connecting, reads
 * and writes time out after CLI_SERVER_TIMEOUT_MS.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "../client/url.h"
#include "cli.h"

#define CLI_SERVER_TIMEOUT_MS 5000
#define CLUSTER_SCHEME "redis+cluster://"

/* A cluster URL's first seed, as a redis:// URL with its user and password. */
static const char *first_seed(const char *url, char *buf, size_t len) {
    const char *s = url + strlen(CLUSTER_SCHEME);
    snprintf(buf, len, "redis://%.*s", (int)strcspn(s, ","), s);
    return buf;
}

redisReply *cli_server_command(redisContext *c, int argc, const char **argv) {
    redisReply *r = redisCommandArgv(c, argc, argv, NULL);
    if (r == NULL) cli_error("io: %s: %s", argv[0], c->errstr);
    return r;
}

/* A command whose answer only matters when it is an error. */
static int ask(redisContext *c, int argc, const char **argv, const char *what) {
    redisReply *r = cli_server_command(c, argc, argv);
    if (r != NULL && r->type == REDIS_REPLY_ERROR) cli_error("%s refused: %s", what, r->str);
    int ok = r != NULL && r->type != REDIS_REPLY_ERROR;
    freeReplyObject(r);
    return ok;
}

/* AUTH and SELECT, as the library sends them. */
static int set_up(redisContext *c, const fg_url *u) {
    char db[16];
    snprintf(db, sizeof(db), "%d", u->db);
    if (u->has_password && u->user[0] &&
        !ask(c, 3, (const char *[]){"AUTH", u->user, u->password}, "AUTH"))
        return 0;
    if (u->has_password && !u->user[0] && !ask(c, 2, (const char *[]){"AUTH", u->password}, "AUTH"))
        return 0;
    return u->db == 0 || ask(c, 2, (const char *[]){"SELECT", db}, "SELECT");
}

/* A connection to u (host and port as given), AUTH and SELECT done. */
static redisContext *open_parsed(const fg_url *u) {
    struct timeval tv = {CLI_SERVER_TIMEOUT_MS / 1000, CLI_SERVER_TIMEOUT_MS % 1000 * 1000};
    redisContext *c = u->kind == FG_URL_TCP ? redisConnectWithTimeout(u->host, u->port, tv)
                                            : redisConnectUnixWithTimeout(u->path, tv);
    if (c == NULL) return cli_error("out of memory"), NULL;
    if (c->err && u->kind == FG_URL_TCP)
        cli_error("io: cannot connect to %s:%d: %s", u->host, u->port, c->errstr);
    else if (c->err)
        cli_error("io: cannot connect to %s: %s", u->path, c->errstr);
    else if (redisSetTimeout(c, tv) != REDIS_OK)
        cli_error("io: setting the timeout: %s", c->errstr);
    else if (set_up(c, u))
        return c;
    redisFree(c);
    return NULL;
}

int cli_server_is_cluster(const char *url) {
    return url != NULL && strncasecmp(url, CLUSTER_SCHEME, strlen(CLUSTER_SCHEME)) == 0;
}

/* url parsed (a cluster URL as its first seed); 0 after printing the error. */
static int parse(const char *url, fg_url *u) {
    char seed[1024];
    fg_error err;
    if (cli_server_is_cluster(url)) url = first_seed(url, seed, sizeof(seed));
    if (fg_url_parse(url, u, &err) != FG_CODE_OK) return !cli_library_error(&err);
    if (u->kind == FG_URL_MEM) return !cli_error("mem: is no server: give redis://HOST[:PORT]");
    return 1;
}

redisContext *cli_server_open(const char *url) {
    fg_url u;
    return parse(url, &u) ? open_parsed(&u) : NULL;
}

redisContext *cli_server_open_node(const char *url, const char *host, int port) {
    fg_url u;
    if (!parse(url, &u)) return NULL;
    if (strlen(host) >= sizeof(u.host)) return cli_error("host name too long: %s", host), NULL;
    u.kind = FG_URL_TCP;
    strcpy(u.host, host);
    u.port = port;
    return open_parsed(&u);
}

void cli_print_reply_json(const redisReply *r) {
    switch (r->type) {
    case REDIS_REPLY_INTEGER: printf("%lld", r->integer); return;
    case REDIS_REPLY_ARRAY:
        putchar('[');
        for (size_t i = 0; i < r->elements; i++) {
            if (i > 0) putchar(',');
            cli_print_reply_json(r->element[i]);
        }
        putchar(']');
        return;
    case REDIS_REPLY_NIL: fputs("null", stdout); return;
    default: cli_print_json_string(r->str); return;
    }
}
