/*
 * url.c - parsing of libfloodgate URLs: strict, so that a typo is an error at
 * fg_open rather than a connection to the wrong place.
 */
#include "url.h"

#include <limits.h>
#include <string.h>
#include <strings.h>

#include "error.h"

#define DEFAULT_PORT 6379

static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Copies s[0..len) percent-decoded into out (size outsz). */
static bool decode(const char *s, size_t len, char *out, size_t outsz) {
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (c == '%') {
            if (i + 2 >= len) return false;
            int hi = hex_value(s[i + 1]);
            int lo = hex_value(s[i + 2]);
            if (hi < 0 || lo < 0) return false;
            c = (char)(hi * 16 + lo);
            i += 2;
        }
        if (c == '\0' || o + 1 >= outsz) return false;
        out[o++] = c;
    }
    out[o] = '\0';
    return true;
}

/* A decimal integer in [min, max] spanning exactly s[0..len). */
static bool parse_int(const char *s, size_t len, long min, long max, int *out) {
    long v = 0;
    if (len == 0 || len > 10) return false;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return false;
        v = v * 10 + (s[i] - '0');
    }
    if (v < min || v > max) return false;
    *out = (int)v;
    return true;
}

static fg_code invalid(fg_error *err, const char *url, const char *what) {
    return fg_set_error(err, FG_CODE_INVALID, "invalid URL \"%.160s\": %s", url, what);
}

/* "user:password" or ":password". */
static fg_code parse_userinfo(const char *s, size_t len, fg_url *u, const char *url,
                              fg_error *err) {
    const char *colon = memchr(s, ':', len);
    if (colon == NULL) return invalid(err, url, "a user needs a password (user:password@)");
    size_t ulen = (size_t)(colon - s);
    if (!decode(s, ulen, u->user, sizeof(u->user)) ||
        !decode(colon + 1, len - ulen - 1, u->password, sizeof(u->password)))
        return invalid(err, url, "bad user or password (too long or bad %-escape)");
    u->has_password = true;
    return FG_CODE_OK;
}

/* host[:port] or [ipv6][:port], in s[0..len). */
static fg_code parse_hostport(const char *s, size_t len, fg_url *u, const char *url,
                              fg_error *err) {
    const char *host = s, *rest;
    size_t hlen;
    if (len > 0 && s[0] == '[') {
        const char *close = memchr(s, ']', len);
        if (close == NULL) return invalid(err, url, "unclosed [ in the host");
        host = s + 1;
        hlen = (size_t)(close - host);
        rest = close + 1;
    } else {
        const char *colon = memchr(s, ':', len);
        hlen = colon ? (size_t)(colon - s) : len;
        rest = s + hlen;
    }
    size_t rlen = len - (size_t)(rest - s);
    if (hlen == 0) return invalid(err, url, "no host");
    if (hlen >= sizeof(u->host)) return invalid(err, url, "host too long");
    memcpy(u->host, host, hlen);
    u->host[hlen] = '\0';
    u->port = DEFAULT_PORT;
    if (rlen == 0) return FG_CODE_OK;
    if (rest[0] != ':' || !parse_int(rest + 1, rlen - 1, 1, 65535, &u->port))
        return invalid(err, url, "the port must be a number from 1 to 65535");
    return FG_CODE_OK;
}

static bool is_word(const char *word, const char *s, size_t len) {
    return strlen(word) == len && strncmp(word, s, len) == 0;
}

static bool parse_dialect(const char *s, size_t len, fg_dialect *out) {
    static const char *const names[] = {"auto", "module", "script"};
    for (int d = FG_DIALECT_AUTO; d <= FG_DIALECT_SCRIPT; d++)
        if (is_word(names[d], s, len)) {
            *out = (fg_dialect)d;
            return true;
        }
    return false;
}

/* The query q[0..len) after a '?': options "name=value" joined by '&', in
 * any order, each once; db=N only where the URL takes it (unix:). */
static fg_code parse_query(const char *q, size_t len, bool takes_db, fg_url *u, const char *url,
                           fg_error *err) {
    const char *usage = takes_db ? "the options are ?db=N and backend=auto|module|script"
                                 : "the only option is ?backend=auto|module|script (the "
                                   "database is /db)";
    const char *end = q + len;
    bool had_db = false, had_backend = false;
    for (;;) {
        const char *amp = memchr(q, '&', (size_t)(end - q));
        size_t olen = amp ? (size_t)(amp - q) : (size_t)(end - q);
        const char *eq = memchr(q, '=', olen);
        size_t nlen = eq ? (size_t)(eq - q) : 0, vlen = eq ? olen - nlen - 1 : 0;
        if (eq != NULL && takes_db && is_word("db", q, nlen)) {
            if (had_db) return invalid(err, url, "db is given twice");
            if (!parse_int(eq + 1, vlen, 0, INT_MAX, &u->db))
                return invalid(err, url, "db must be a number (?db=3)");
            had_db = true;
        } else if (eq != NULL && is_word("backend", q, nlen)) {
            if (had_backend) return invalid(err, url, "backend is given twice");
            if (!parse_dialect(eq + 1, vlen, &u->dialect))
                return invalid(err, url, "backend must be auto, module or script");
            had_backend = true;
        } else {
            return invalid(err, url, usage);
        }
        if (amp == NULL) return FG_CODE_OK;
        q = amp + 1;
    }
}

/* redis://[userinfo@]hostport[/db][?query]: the userinfo ends at the last
 * '@' before the first '/' (a password may hold '@' and '?', percent-encoded
 * or not), the host and port at the next '/' or '?'. */
static fg_code parse_redis(const char *url, fg_url *u, fg_error *err) {
    const char *s = url + strlen("redis://");
    size_t authority = strcspn(s, "/");
    const char *at = NULL;
    for (size_t i = 0; i < authority; i++)
        if (s[i] == '@') at = s + i; /* the last '@': passwords may hold one */
    u->kind = FG_URL_TCP;
    if (at != NULL) {
        if (parse_userinfo(s, (size_t)(at - s), u, url, err) != FG_CODE_OK) return FG_CODE_INVALID;
        s = at + 1;
    }
    size_t hostport = strcspn(s, "/?");
    if (parse_hostport(s, hostport, u, url, err) != FG_CODE_OK) return FG_CODE_INVALID;
    const char *rest = s + hostport; /* "", "/db...", "?query" */
    const char *query = strchr(rest, '?');
    if (rest[0] == '/') {
        const char *db = rest + 1;
        size_t dblen = query ? (size_t)(query - db) : strlen(db);
        if (dblen > 0 && !parse_int(db, dblen, 0, INT_MAX, &u->db))
            return invalid(err, url, "the database must be a number (redis://host/3)");
    }
    if (query == NULL) return FG_CODE_OK;
    return parse_query(query + 1, strlen(query + 1), false, u, url, err);
}

static fg_code parse_unix(const char *url, fg_url *u, fg_error *err) {
    const char *path = url + strlen("unix://");
    const char *query = strchr(path, '?');
    size_t plen = query ? (size_t)(query - path) : strlen(path);
    u->kind = FG_URL_UNIX;
    if (plen < 2 || path[0] != '/') return invalid(err, url, "the socket path must be absolute");
    if (plen >= sizeof(u->path)) return invalid(err, url, "the socket path is too long");
    memcpy(u->path, path, plen);
    u->path[plen] = '\0';
    if (query == NULL) return FG_CODE_OK;
    return parse_query(query + 1, strlen(query + 1), true, u, url, err);
}

fg_code fg_url_parse(const char *url, fg_url *out, fg_error *err) {
    memset(out, 0, sizeof(*out));
    if (url == NULL || url[0] == '\0' || strcmp(url, "mem:") == 0) {
        out->kind = FG_URL_MEM;
        return FG_CODE_OK;
    }
    if (strncasecmp(url, "redis://", 8) == 0) return parse_redis(url, out, err);
    if (strncasecmp(url, "unix://", 7) == 0) return parse_unix(url, out, err);
    return invalid(err, url,
                   "use redis://[user:password@]host[:port][/db], unix:///path[?db=N], "
                   "redis+cluster://host:port[,host:port...] or mem: (redis and cluster "
                   "URLs take ?backend=auto|module|script)");
}
