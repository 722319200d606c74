/*
 * server.c - a plain connection to one server, for what the library has no
 * call for: doctor's INFO, CONFIG GET, ACL and CLUSTER questions, and lock
 * info's FG.LOCKINFO (cli.h).
 *
 * The tool links only libfloodgate, so this speaks RESP2 itself over a
 * socket: commands go out as arrays of bulk strings, replies come back as
 * a tree of cli_reply. The URL is read by the library's own parser (url.c):
 * AUTH and SELECT follow it as the library's connections do; a cluster URL
 * names its first seed. Reads and writes time out after
 * CLI_SERVER_TIMEOUT_MS.
 */
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "../client/url.h"
#include "cli.h"

#define CLI_SERVER_TIMEOUT_MS 5000
#define CLUSTER_SCHEME "redis+cluster://"

struct cli_server {
    FILE *io;
};

/* ----------------------------------------------------------------- connect */

static int connect_tcp(const fg_url *u, char *why, size_t len) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res, *a;
    char port[8];
    int fd = -1, rc;
    snprintf(port, sizeof(port), "%d", u->port);
    if ((rc = getaddrinfo(u->host, port, &hints, &res)) != 0) {
        snprintf(why, len, "%s", gai_strerror(rc));
        return -1;
    }
    for (a = res; a != NULL && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
            snprintf(why, len, "%s", strerror(errno));
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    return fd;
}

static int connect_unix(const fg_url *u, char *why, size_t len) {
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", u->path);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) return fd;
    snprintf(why, len, "%s", strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
}

/* A cluster URL's first seed, as a redis:// URL with its user and password. */
static const char *first_seed(const char *url, char *buf, size_t len) {
    const char *s = url + strlen(CLUSTER_SCHEME);
    snprintf(buf, len, "redis://%.*s", (int)strcspn(s, ","), s);
    return buf;
}

static int set_timeouts(int fd) {
    struct timeval tv = {CLI_SERVER_TIMEOUT_MS / 1000, 0};
    return setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0 &&
           setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) == 0;
}

/* A command whose answer only matters when it is an error. */
static int ask(cli_server *s, int argc, const char **argv, const char *what) {
    cli_reply *r = cli_server_command(s, argc, argv);
    int ok = r != NULL && r->type != '-';
    if (!ok) cli_error("%s refused: %s", what, r ? r->str : "no answer");
    cli_reply_free(r);
    return ok;
}

/* AUTH and SELECT, as the library sends them. */
static int set_up(cli_server *s, const fg_url *u) {
    char db[16];
    snprintf(db, sizeof(db), "%d", u->db);
    if (u->has_password && u->user[0] &&
        !ask(s, 3, (const char *[]){"AUTH", u->user, u->password}, "AUTH"))
        return 0;
    if (u->has_password && !u->user[0] && !ask(s, 2, (const char *[]){"AUTH", u->password}, "AUTH"))
        return 0;
    return u->db == 0 || ask(s, 2, (const char *[]){"SELECT", db}, "SELECT");
}

/* The connected socket, or -1 after printing why not. */
static int connect_to(const char *url, fg_url *u) {
    char seed[1024], why[128] = "";
    fg_error err;
    int fd;
    if (strncasecmp(url, CLUSTER_SCHEME, strlen(CLUSTER_SCHEME)) == 0)
        url = first_seed(url, seed, sizeof(seed));
    if (fg_url_parse(url, u, &err) != FG_CODE_OK) return cli_library_error(&err), -1;
    if (u->kind == FG_URL_MEM) return cli_error("mem: is no server: give redis://HOST[:PORT]"), -1;
    fd = u->kind == FG_URL_TCP ? connect_tcp(u, why, sizeof(why)) : connect_unix(u, why, sizeof(why));
    if (fd < 0 && u->kind == FG_URL_UNIX) cli_error("io: cannot connect to %s: %s", u->path, why);
    if (fd < 0 && u->kind == FG_URL_TCP) cli_error("io: cannot connect to %s:%d: %s", u->host, u->port, why);
    if (fd >= 0 && !set_timeouts(fd)) {
        cli_error("io: setting the timeouts: %s", strerror(errno));
        close(fd);
        fd = -1;
    }
    return fd;
}

cli_server *cli_server_open(const char *url) {
    fg_url u;
    int fd = connect_to(url, &u);
    cli_server *s = fd >= 0 ? malloc(sizeof(*s)) : NULL;
    if (s != NULL && (s->io = fdopen(fd, "r+")) != NULL && set_up(s, &u)) return s;
    if (s != NULL && s->io != NULL) {
        cli_server_close(s);
        return NULL;
    }
    if (fd >= 0) {
        cli_error("out of memory");
        close(fd);
    }
    free(s);
    return NULL;
}

void cli_server_close(cli_server *s) {
    if (s == NULL) return;
    fclose(s->io);
    free(s);
}

/* ----------------------------------------------------------------- replies */

void cli_reply_free(cli_reply *r) {
    if (r == NULL) return;
    for (size_t i = 0; i < r->n; i++)
        cli_reply_free(r->element[i]);
    free(r->element);
    free(r->str);
    free(r);
}

/* A reply's first line, without its "\r\n": NULL when the connection ended. */
static char *read_line(FILE *io, char *buf, size_t len) {
    if (fgets(buf, (int)len, io) == NULL) return NULL;
    buf[strcspn(buf, "\r\n")] = '\0';
    return buf;
}

static cli_reply *read_reply(FILE *io);

static int read_elements(FILE *io, cli_reply *r) {
    if (r->integer < 0) return 1;
    r->n = (size_t)r->integer;
    if (r->n > 0 && (r->element = calloc(r->n, sizeof(*r->element))) == NULL) return 0;
    for (size_t i = 0; i < r->n; i++)
        if ((r->element[i] = read_reply(io)) == NULL) return 0;
    return 1;
}

static int read_bulk(FILE *io, cli_reply *r) {
    if (r->integer < 0) return 1;
    size_t len = (size_t)r->integer;
    if ((r->str = malloc(len + 3)) == NULL) return 0;
    if (fread(r->str, 1, len + 2, io) != len + 2) return 0;
    r->str[len] = '\0';
    r->len = len;
    return 1;
}

/* '+' status, '-' error, ':' integer, '$' bulk (str NULL: nil), '*' array. */
static cli_reply *read_reply(FILE *io) {
    char line[4096];
    cli_reply *r;
    if (read_line(io, line, sizeof(line)) == NULL || (r = calloc(1, sizeof(*r))) == NULL)
        return NULL;
    r->type = line[0];
    r->integer = strtoll(line + 1, NULL, 10);
    int ok = r->type == '*'   ? read_elements(io, r)
             : r->type == '$' ? read_bulk(io, r)
                              : (r->str = strdup(line + 1)) != NULL;
    if (ok) return r;
    cli_reply_free(r);
    return NULL;
}

cli_reply *cli_server_command(cli_server *s, int argc, const char **argv) {
    fprintf(s->io, "*%d\r\n", argc);
    for (int i = 0; i < argc; i++)
        fprintf(s->io, "$%zu\r\n%s\r\n", strlen(argv[i]), argv[i]);
    if (fflush(s->io) != 0) return NULL;
    return read_reply(s->io);
}

void cli_print_reply_json(const cli_reply *r) {
    switch (r->type) {
    case ':': printf("%lld", r->integer); return;
    case '*':
        if (r->integer < 0) break;
        putchar('[');
        for (size_t i = 0; i < r->n; i++) {
            if (i > 0) putchar(',');
            cli_print_reply_json(r->element[i]);
        }
        putchar(']');
        return;
    default:
        if (r->str == NULL) break;
        cli_print_json_string(r->str);
        return;
    }
    fputs("null", stdout);
}
