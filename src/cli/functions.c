/*
 * functions.c - floodgate functions load|show: the server scripts as a Redis
 * Functions library (docs/scripts.md).
 *
 *   floodgate functions load [URL] [--replace]
 *   floodgate functions show [URL]
 *
 * libfloodgate needs nothing loaded: on a server without the module it sends
 * its scripts itself (EVALSHA, and EVAL when the server lost them). The
 * library is for the other clients of such a server: FCALL fg_token 1 key 10
 * 2 answers as FG.TOKEN key 10 2 would. load sends FUNCTION LOAD [REPLACE]
 * with the text of fg_functions_library() to the server, or to every master
 * of a cluster URL (a cluster's shards do not share functions; replicas get
 * them from their master), then lists what the server registered (FUNCTION
 * LIST). show asks each of them whether it holds the library and whether it
 * is this floodgate's own text (FUNCTION LIST WITHCODE).
 *
 * Through hiredis (server.c), as doctor: the library has no call for it.
 * Exit codes (cli.h): 0 done (show: every node holds this floodgate's
 * library), 1 (show) absent or another text somewhere, 2 error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli.h"
#include "floodgate.h"

#define LIBRARY    "floodgate" /* the library's name, its first line's */
#define MAX_NODES  1024        /* masters of a cluster */

static const char about[] =
    "floodgate functions: the server scripts as the Redis Functions library\n"
    "'floodgate' (Redis 7.0+, Valkey), for clients that call FCALL; libfloodgate\n"
    "itself needs nothing loaded (docs/scripts.md)";

static const cli_command load_command = {
    "functions load",
    "  floodgate functions load [URL] [--replace]\n"
    "      FUNCTION LOAD the library 'floodgate' on the server (every master of a\n"
    "      cluster URL) and list its functions: FCALL fg_token 1 KEY 10 2 then\n"
    "      answers as FG.TOKEN KEY 10 2. --replace replaces a library of that\n"
    "      name (FUNCTION LOAD REPLACE); without it a server that has one refuses\n",
    CLI_TAKES_REPLACE};

static const cli_command show_command = {
    "functions show",
    "  floodgate functions show [URL]\n"
    "      whether the server (every master of a cluster URL) holds the library\n"
    "      'floodgate', and whether it is this floodgate's; exit 1 when a server\n"
    "      has none or another version\n",
    0};

/* ------------------------------------------------------------------ nodes */

typedef struct node {
    char host[256];
    int port;
} node;

/* The masters of a cluster URL (CLUSTER SLOTS of its first seed), each
 * once, in the order of their first slots: how many, or -1 after printing
 * the error. */
static int cluster_masters(const char *url, node *out, int max) {
    redisContext *c = cli_server_open(url);
    if (c == NULL) return -1;
    redisReply *r = cli_server_command(c, 2, (const char *[]){"CLUSTER", "SLOTS"});
    int n = -1;
    if (r != NULL && r->type == REDIS_REPLY_ERROR) {
        cli_error("CLUSTER SLOTS refused: %s", r->str);
    } else if (r != NULL && r->type == REDIS_REPLY_ARRAY) {
        n = 0;
        for (size_t i = 0; i < r->elements && n >= 0; i++) {
            const redisReply *range = r->element[i];
            if (range->type != REDIS_REPLY_ARRAY || range->elements < 3) continue;
            const redisReply *m = range->element[2];
            if (m->type != REDIS_REPLY_ARRAY || m->elements < 2 ||
                m->element[0]->type != REDIS_REPLY_STRING ||
                m->element[1]->type != REDIS_REPLY_INTEGER)
                continue;
            /* "" or "?" : the node does not know its own address; the seed's */
            const char *host = m->element[0]->str;
            if (host[0] == '\0' || strcmp(host, "?") == 0) host = c->tcp.host;
            int port = (int)m->element[1]->integer, seen = 0;
            for (int k = 0; k < n && !seen; k++)
                seen = out[k].port == port && strcmp(out[k].host, host) == 0;
            if (seen) continue;
            if (n == max) {
                n = -1;
                cli_error("more than %d masters", max);
            } else {
                snprintf(out[n].host, sizeof(out[n].host), "%s", host);
                out[n++].port = port;
            }
        }
        if (n == 0) {
            n = -1;
            cli_error("CLUSTER SLOTS names no master: is the cluster up?");
        }
    }
    freeReplyObject(r);
    redisFree(c);
    return n;
}

static redisContext *open_node(const char *url, const node *nodes, int i) {
    return nodes ? cli_server_open_node(url, nodes[i].host, nodes[i].port) : cli_server_open(url);
}

/* "host:port", or the socket's path. */
static void where(const redisContext *c, char *buf, size_t len) {
    if (c->connection_type == REDIS_CONN_UNIX)
        snprintf(buf, len, "%s", c->unix_sock.path);
    else
        snprintf(buf, len, "%s:%d", c->tcp.host, c->tcp.port);
}

/* --------------------------------------------------------- FUNCTION LIST */

/* A flat field/value array's value, NULL if none. */
static const redisReply *field(const redisReply *r, const char *name) {
    if (r == NULL || r->type != REDIS_REPLY_ARRAY) return NULL;
    for (size_t i = 0; i + 1 < r->elements; i += 2)
        if (r->element[i]->type == REDIS_REPLY_STRING && strcmp(r->element[i]->str, name) == 0)
            return r->element[i + 1];
    return NULL;
}

/* The entry of library floodgate in a FUNCTION LIST reply, NULL if none. */
static const redisReply *our_library(const redisReply *list) {
    for (size_t i = 0; list->type == REDIS_REPLY_ARRAY && i < list->elements; i++) {
        const redisReply *name = field(list->element[i], "library_name");
        if (name != NULL && name->type == REDIS_REPLY_STRING && strcmp(name->str, LIBRARY) == 0)
            return list->element[i];
    }
    return NULL;
}

static int by_name(const void *a, const void *b) {
    const redisReply *x = field(*(const redisReply *const *)a, "name");
    const redisReply *y = field(*(const redisReply *const *)b, "name");
    return strcmp(x && x->str ? x->str : "", y && y->str ? y->str : "");
}

/* The library's functions, by name, a line each ("  fg_peek  no-writes"), or
 * with json an array of {"name","flags"} objects. */
static void print_functions(const redisReply *lib, int json) {
    const redisReply *fns = field(lib, "functions");
    size_t n = fns && fns->type == REDIS_REPLY_ARRAY ? fns->elements : 0;
    const redisReply **sorted = n ? malloc(n * sizeof(*sorted)) : NULL;
    if (n && sorted == NULL) n = 0;
    for (size_t i = 0; i < n; i++) sorted[i] = fns->element[i];
    if (n) qsort(sorted, n, sizeof(*sorted), by_name);
    if (json) putchar('[');
    for (size_t i = 0; i < n; i++) {
        const redisReply *name = field(sorted[i], "name"), *flags = field(sorted[i], "flags");
        const char *fname = name && name->type == REDIS_REPLY_STRING ? name->str : "?";
        size_t nflags = flags && flags->type == REDIS_REPLY_ARRAY ? flags->elements : 0;
        if (json) {
            printf("%s{\"name\":", i ? "," : "");
            cli_print_json_string(fname);
            fputs(",\"flags\":[", stdout);
        } else {
            printf(nflags ? "  %-12s" : "  %s", fname);
        }
        for (size_t k = 0; k < nflags; k++) {
            const char *flag = flags->element[k]->str ? flags->element[k]->str : "";
            if (json) {
                if (k) putchar(',');
                cli_print_json_string(flag);
            } else {
                printf(" %s", flag);
            }
        }
        fputs(json ? "]}" : "\n", stdout);
    }
    if (json) putchar(']');
    free(sorted);
}

/* ----------------------------------------------------------------- errors */

static int starts(const char *s, const char *prefix) {
    return strncasecmp(s, prefix, strlen(prefix)) == 0;
}

/* FUNCTION <sub>'s refusal by the server at at, said for what the user can
 * do about it. */
static int refused(const char *sub, const char *at, const char *msg) {
    if (starts(msg, "ERR unknown command") || starts(msg, "ERR unknown subcommand"))
        return cli_error("%s has no FUNCTION command (Redis 7.0 and later and Valkey have it: "
                         "\"%s\"): libfloodgate needs no library there, it sends the same "
                         "scripts itself by EVALSHA, which needs nothing loaded (docs/scripts.md)",
                         at, msg);
    if (strstr(msg, "already exists") != NULL)
        return cli_error("%s already holds a library '" LIBRARY "' (\"%s\"): --replace replaces "
                         "it; floodgate functions show tells whether it is this floodgate's",
                         at, msg);
    if (starts(msg, "NOPERM"))
        return cli_error("%s refused FUNCTION %s: %s (the user needs +function|%s: "
                         "docs/security.md)",
                         at, sub, msg, strcasecmp(sub, "LOAD") == 0 ? "load" : "list");
    return cli_error("%s refused FUNCTION %s: %s", at, sub, msg);
}

/* ------------------------------------------------------------------ load */

/* FUNCTION LOAD [REPLACE] on one server; 1 done, 0 after printing why. */
static int load_on(redisContext *c, int replace, const char *text, size_t len, const char *at) {
    const char *argv[4] = {"FUNCTION", "LOAD", "REPLACE", text};
    size_t lens[4] = {8, 4, 7, len};
    if (!replace) argv[2] = text, lens[2] = len;
    redisReply *r = redisCommandArgv(c, replace ? 4 : 3, argv, lens);
    int ok = 0;
    if (r == NULL)
        cli_error("io: FUNCTION LOAD on %s: %s", at, c->errstr);
    else if (r->type == REDIS_REPLY_ERROR)
        refused("LOAD", at, r->str);
    else
        ok = 1;
    freeReplyObject(r);
    return ok;
}

/* The library as the server lists it; NULL after printing why. */
static redisReply *listed(redisContext *c, const char *at, int withcode) {
    const char *argv[5] = {"FUNCTION", "LIST", "LIBRARYNAME", LIBRARY, "WITHCODE"};
    redisReply *r = cli_server_command(c, withcode ? 5 : 4, argv);
    if (r != NULL && r->type == REDIS_REPLY_ERROR) {
        refused("LIST", at, r->str);
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

static int cmd_load(const char *url, const cli_opts *o) {
    size_t len;
    const char *text = fg_functions_library(&len);
    node *nodes = NULL;
    int n = 1, done = 0;
    if (cli_server_is_cluster(url)) {
        if ((nodes = malloc(MAX_NODES * sizeof(*nodes))) == NULL) return cli_error("out of memory");
        if ((n = cluster_masters(url, nodes, MAX_NODES)) < 0) {
            free(nodes);
            return CLI_EXIT_ERROR;
        }
    }
    char (*at)[300] = malloc((size_t)n * sizeof(*at));
    redisReply *lib = NULL; /* the first server's listing, printed */
    if (at == NULL) {
        free(nodes);
        return cli_error("out of memory");
    }
    for (int ok = 1; done < n && ok; done += ok) {
        redisContext *c = open_node(url, nodes, done);
        if ((ok = c != NULL)) {
            where(c, at[done], sizeof(at[done]));
            ok = load_on(c, o->replace, text, len, at[done]) &&
                 (lib != NULL || (lib = listed(c, at[done], 0)) != NULL);
            redisFree(c);
        }
    }
    if (done < n && done > 0)
        fprintf(stderr, "floodgate: (loaded on %d of the %d masters before it: load again with "
                        "--replace)\n", done, n);
    if (done == n) {
        const redisReply *ours = our_library(lib);
        const redisReply *fns = field(ours, "functions");
        if (o->json) {
            fputs("{\"library\":\"" LIBRARY "\",\"nodes\":[", stdout);
            for (int i = 0; i < n; i++) {
                if (i) putchar(',');
                cli_print_json_string(at[i]);
            }
            printf("],\"replace\":%s,\"functions\":", o->replace ? "true" : "false");
            print_functions(ours, 1);
            puts("}");
        } else {
            printf("library " LIBRARY " loaded on ");
            for (int i = 0; i < n; i++) printf("%s%s", i ? ", " : "", at[i]);
            printf(": %zu functions\n", fns && fns->type == REDIS_REPLY_ARRAY ? fns->elements
                                                                            : (size_t)0);
            print_functions(ours, 0);
        }
    }
    freeReplyObject(lib);
    free(at);
    free(nodes);
    return done == n ? CLI_EXIT_OK : CLI_EXIT_ERROR;
}

/* ------------------------------------------------------------------ show */

/* One server's state: 2 this floodgate's, 1 another text, 0 none; -1 after
 * printing an error. */
static int show_on(redisContext *c, const char *at, const char *text, size_t len, int json,
                   int first) {
    redisReply *r = listed(c, at, 1);
    if (r == NULL) return -1;
    const redisReply *ours = our_library(r);
    const redisReply *code = field(ours, "library_code");
    int state = ours == NULL ? 0
                : code && code->type == REDIS_REPLY_STRING && code->len == len &&
                        memcmp(code->str, text, len) == 0
                    ? 2
                    : 1;
    const redisReply *fns = field(ours, "functions");
    size_t nfns = fns ? fns->elements : 0;
    static const char *const words[] = {"absent", "other", "current"};
    if (json) {
        printf("%s{\"node\":", first ? "" : ",");
        cli_print_json_string(at);
        printf(",\"library\":\"%s\",\"functions\":", words[state]);
        if (ours)
            print_functions(ours, 1);
        else
            fputs("[]", stdout);
        putchar('}');
    } else if (state == 0) {
        printf("%s: no library " LIBRARY " (floodgate functions load puts it there)\n", at);
    } else if (state == 1) {
        printf("%s: library " LIBRARY ", %zu functions, not this floodgate's (floodgate "
               "functions load --replace puts this one)\n",
               at, nfns);
        print_functions(ours, 0);
    } else {
        printf("%s: library " LIBRARY ", this floodgate's, %zu functions\n", at, nfns);
        print_functions(ours, 0);
    }
    freeReplyObject(r);
    return state;
}

static int cmd_show(const char *url, const cli_opts *o) {
    size_t len;
    const char *text = fg_functions_library(&len);
    node *nodes = NULL;
    int n = 1, worst = 2, failed = 0;
    if (cli_server_is_cluster(url)) {
        if ((nodes = malloc(MAX_NODES * sizeof(*nodes))) == NULL) return cli_error("out of memory");
        if ((n = cluster_masters(url, nodes, MAX_NODES)) < 0) {
            free(nodes);
            return CLI_EXIT_ERROR;
        }
    }
    if (o->json) fputs("{\"nodes\":[", stdout);
    for (int i = 0; i < n && !failed; i++) {
        char at[300];
        redisContext *c = open_node(url, nodes, i);
        int state = -1;
        if (c != NULL) {
            where(c, at, sizeof(at));
            state = show_on(c, at, text, len, o->json, i == 0);
            redisFree(c);
        }
        if (state < 0) failed = 1;
        if (state >= 0 && state < worst) worst = state;
    }
    if (o->json) printf("],\"current\":%s}\n", !failed && worst == 2 ? "true" : "false");
    free(nodes);
    if (failed) return CLI_EXIT_ERROR;
    return worst == 2 ? CLI_EXIT_OK : CLI_EXIT_DENIED;
}

/* --------------------------------------------------------------- dispatch */

static void print_usage(FILE *f) {
    fprintf(f, "%s\nusage:\n%s%s\n%s", about, load_command.usage, show_command.usage,
            cli_common_options);
}

int cli_functions(int argc, char **argv) {
    const char *sub = argc > 0 ? argv[0] : NULL;
    const cli_command *cmd = NULL;
    cli_opts o;
    if (sub != NULL && (!strcmp(sub, "--help") || !strcmp(sub, "-h") || !strcmp(sub, "help"))) {
        print_usage(stdout);
        return CLI_EXIT_OK;
    }
    if (sub != NULL && strcmp(sub, "load") == 0) cmd = &load_command;
    if (sub != NULL && strcmp(sub, "show") == 0) cmd = &show_command;
    if (cmd == NULL) {
        if (sub == NULL)
            cli_error("functions needs a subcommand: load or show");
        else
            cli_error("unknown subcommand 'functions %s' (load or show)", sub);
        print_usage(stderr);
        return CLI_EXIT_ERROR;
    }
    int npos = cli_parse_options(argc - 1, argv + 1, cmd, &o);
    if (npos < 0) return CLI_EXIT_ERROR;
    if (npos > 1) return cli_error("%s takes one URL (or --url URL)", cmd->name);
    const char *url = npos == 1 ? argv[1] : o.url;
    return cmd == &load_command ? cmd_load(url, &o) : cmd_show(url, &o);
}
