/*
 * url.h - parsing of libfloodgate URLs (internal).
 *
 *   (NULL), "", "mem:"                          in process
 *   redis://[user:password@]host[:port][/db][?backend=B]   TCP, port 6379 by default
 *   unix:///path[?db=N][&backend=B]                       unix socket
 *   redis+cluster://...[?backend=B]                       (cluster.h)
 *
 * user and password may be percent-encoded; "redis://:password@host" sends
 * AUTH with the password alone. An IPv6 host is written in brackets. The
 * options of the query come in any order, each once.
 *
 * backend says how the server runs the rate limits: auto (the default:
 * each connection asks whether the module is loaded), module (its
 * commands), or script (the server scripts, EVALSHA: a server without the
 * module, or one whose module the client must not use). See conn.c.
 */
#ifndef FG_URL_H
#define FG_URL_H

#include <stdbool.h>

#include "floodgate.h"

typedef enum fg_url_kind { FG_URL_MEM, FG_URL_TCP, FG_URL_UNIX } fg_url_kind;

/* The dialect of a server: ?backend=; on a connection (conn.h), the one it
 * speaks once connected (AUTO: not known yet). */
typedef enum fg_dialect { FG_DIALECT_AUTO, FG_DIALECT_MODULE, FG_DIALECT_SCRIPT } fg_dialect;

typedef struct fg_url {
    fg_url_kind kind;
    char host[256]; /* TCP: host name or address, without brackets */
    int port;       /* TCP */
    char path[108]; /* unix: the socket (sizeof sun_path) */
    char user[128]; /* "" when none */
    char password[256];
    bool has_password;
    int db; /* SELECT after connecting when > 0 */
    fg_dialect dialect;
} fg_url;

/* Returns FG_CODE_OK, or FG_CODE_INVALID with a message naming the problem. */
fg_code fg_url_parse(const char *url, fg_url *out, fg_error *err);

#endif
