/*
 * locks.c - floodgate lock and floodgate semaphore: the library's locks
 * from the command line (docs/locks.md).
 *
 *   floodgate lock take KEY [--owner ID] [--lease MS] [--wait MS] [--shared] [--reentrant]
 *   floodgate lock release KEY --owner ID
 *   floodgate lock extend KEY --owner ID [--lease MS]
 *   floodgate lock info KEY
 *   floodgate semaphore acquire KEY CAPACITY [--permits N] [--owner ID] [--lease MS] [--wait MS]
 *   floodgate semaphore release KEY --owner ID [--permits N]
 *
 * Each is one library call (fg_lock, fg_unlock, fg_extend,
 * fg_semaphore_acquire, fg_semaphore_release); info asks the server
 * directly (server.c), as the library has no call for FG.LOCKINFO. A lock
 * outlives the command that takes it: it is held on the server until it is
 * released or its lease ends, so these commands refuse mem: (common.c).
 * take and acquire print the owner, a fresh fg_owner_id unless --owner
 * names one, which release and extend need.
 *
 * Exit codes (cli.h): 0 acquired, released or extended; 1 not acquired, or
 * the owner holds nothing; 2 error.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "floodgate.h"

#define LOCK_TAKES (CLI_NEEDS_SERVER | CLI_TAKES_OWNER | CLI_TAKES_LEASE | CLI_TAKES_WAIT)

/* ------------------------------------------------------------------ output */

static void print_grant(const fg_lock_grant *g, const char *owner, int json) {
    if (json) {
        printf("{\"acquired\":%s,\"owner\":", g->acquired ? "true" : "false");
        cli_print_json_string(owner);
        printf(",\"token\":%llu,\"ttl_ms\":%lld,\"holds\":%lld}\n", (unsigned long long)g->token,
               (long long)g->ttl_ms, (long long)g->holds);
        return;
    }
    printf("%s\n", g->acquired ? "acquired" : "not acquired");
    printf("  owner           %s\n", owner);
    printf("  token           %llu\n", (unsigned long long)g->token);
    printf("  ttl_ms          %lld\n", (long long)g->ttl_ms);
    printf("  holds           %lld\n", (long long)g->holds);
}

/* What release answers: what the owner still holds, or -1 (held nothing). */
static int print_left(int64_t left, const char *one, const char *many, int json) {
    if (json)
        printf("{\"released\":%s,\"%s_left\":%lld}\n", left >= 0 ? "true" : "false", many,
               (long long)left);
    else if (left < 0)
        puts("(not held)");
    else if (left == 0)
        puts("released");
    else
        printf("released, %lld %s left\n", (long long)left, cli_plural(left, one, many));
    return left >= 0 ? CLI_EXIT_OK : CLI_EXIT_DENIED;
}

/* ----------------------------------------------------------------- helpers */

static void lock_options(const cli_opts *o, fg_lock_options *lo) {
    fg_lock_options_init(lo);
    lo->lease_ms = o->lease_ms;
    lo->wait_ms = o->wait_ms == CLI_NOT_GIVEN ? 0 : o->wait_ms;
    lo->shared = o->shared;
    lo->reentrant = o->reentrant;
}

/* --owner, or a fresh id in buf. */
static const char *owner_or_new(const cli_opts *o, char buf[FG_OWNER_ID_LEN + 1]) {
    if (o->owner != NULL) return o->owner;
    fg_owner_id(buf);
    return buf;
}

static int needs_owner(const char *name, const cli_opts *o) {
    return o->owner != NULL ? 1 : !cli_error("%s needs --owner ID (the owner that took it)", name);
}

/* -------------------------------------------------------------------- lock */

static int lock_take(fg_client *c, int npos, char **argv, const cli_opts *o) {
    char id[FG_OWNER_ID_LEN + 1];
    const char *owner = owner_or_new(o, id);
    fg_lock_options lo;
    fg_lock_grant g;
    fg_error err;
    if (npos != 1) return cli_error("lock take takes one KEY");
    lock_options(o, &lo);
    if (fg_lock(c, argv[0], owner, &lo, &g, &err) != FG_CODE_OK) return cli_library_error(&err);
    print_grant(&g, owner, o->json);
    return g.acquired ? CLI_EXIT_OK : CLI_EXIT_DENIED;
}

static int lock_release(fg_client *c, int npos, char **argv, const cli_opts *o) {
    int64_t left;
    fg_error err;
    if (npos != 1) return cli_error("lock release takes one KEY");
    if (!needs_owner("lock release", o)) return CLI_EXIT_ERROR;
    if (fg_unlock(c, argv[0], o->owner, &left, &err) != FG_CODE_OK) return cli_library_error(&err);
    return print_left(left, "hold", "holds", o->json);
}

static int lock_extend(fg_client *c, int npos, char **argv, const cli_opts *o) {
    bool extended;
    fg_error err;
    if (npos != 1) return cli_error("lock extend takes one KEY");
    if (!needs_owner("lock extend", o)) return CLI_EXIT_ERROR;
    if (fg_extend(c, argv[0], o->owner, o->lease_ms, &extended, &err) != FG_CODE_OK)
        return cli_library_error(&err);
    if (o->json)
        printf("{\"extended\":%s}\n", extended ? "true" : "false");
    else
        puts(extended ? "extended" : "(not held)");
    return extended ? CLI_EXIT_OK : CLI_EXIT_DENIED;
}

/* FG.LOCKINFO's fields (holders, waiters, the next token), one a line, or
 * with --json as the members of an object. */
static int lock_info(fg_client *c, int npos, char **argv, const cli_opts *o) {
    (void)c;
    if (npos != 1) return cli_error("lock info takes one KEY");
    redisContext *s = cli_server_open(o->url);
    if (s == NULL) return CLI_EXIT_ERROR;
    redisReply *r = cli_server_command(s, 2, (const char *[]){"FG.LOCKINFO", argv[0]});
    redisFree(s);
    if (r == NULL) return CLI_EXIT_ERROR;
    if (r->type == REDIS_REPLY_ERROR) {
        int rc = cli_error("%s", r->str);
        freeReplyObject(r);
        return rc;
    }
    int held = r->type == REDIS_REPLY_ARRAY;
    if (!held) puts(o->json ? "null" : "(no lock)");
    for (size_t i = 0; held && i + 1 < r->elements; i += 2) {
        const char *name = r->element[i]->type == REDIS_REPLY_STRING ? r->element[i]->str : "";
        if (o->json) {
            fputs(i == 0 ? "{" : ",", stdout);
            cli_print_json_string(name);
            putchar(':');
        } else {
            printf("%-15s ", name);
        }
        cli_print_reply_json(r->element[i + 1]);
        fputs(o->json && i + 3 >= r->elements ? "}\n" : o->json ? "" : "\n", stdout);
    }
    freeReplyObject(r);
    return held ? CLI_EXIT_OK : CLI_EXIT_DENIED;
}

static const cli_subcommand lock_subcommands[] = {
    {{"lock take",
      "  floodgate lock take KEY [--owner ID] [--lease MS] [--wait MS] [--shared] [--reentrant]\n"
      "      take the lock for ID (default: a fresh id, printed) for MS ms (default\n"
      "      30000); --wait: wait up to MS in the server's queue (-1: no limit);\n"
      "      --shared: a read lock; exit 0 acquired, 1 not\n",
      LOCK_TAKES | CLI_TAKES_MODES},
     lock_take},
    {{"lock release",
      "  floodgate lock release KEY --owner ID\n"
      "      release one hold of ID's; exit 1 when ID held nothing\n",
      CLI_NEEDS_SERVER | CLI_TAKES_OWNER},
     lock_release},
    {{"lock extend",
      "  floodgate lock extend KEY --owner ID [--lease MS]\n"
      "      make ID's lease end MS ms from now (default 30000); exit 1 when not held\n",
      CLI_NEEDS_SERVER | CLI_TAKES_OWNER | CLI_TAKES_LEASE},
     lock_extend},
    {{"lock info",
      "  floodgate lock info KEY\n"
      "      the lock's holders (owner, exclusive, ttl_ms, token), waiters and next\n"
      "      token (FG.LOCKINFO; also a semaphore's); exit 1 when there is none\n",
      CLI_NEEDS_SERVER},
     lock_info},
};

int cli_lock(int argc, char **argv) {
    return cli_run_family("lock", "floodgate lock: locks held on the server (docs/locks.md).",
                          lock_subcommands, sizeof(lock_subcommands) / sizeof(lock_subcommands[0]),
                          argc, argv);
}

/* --------------------------------------------------------------- semaphore */

static int semaphore_acquire(fg_client *c, int npos, char **argv, const cli_opts *o) {
    char id[FG_OWNER_ID_LEN + 1];
    const char *owner = owner_or_new(o, id);
    int64_t capacity;
    fg_lock_options lo;
    fg_lock_grant g;
    fg_error err;
    if (npos != 2) return cli_error("semaphore acquire takes KEY CAPACITY");
    if (!cli_integer_argument("semaphore acquire", "CAPACITY", argv[1], &capacity)) return CLI_EXIT_ERROR;
    lock_options(o, &lo);
    if (fg_semaphore_acquire(c, argv[0], capacity, owner, o->permits < 0 ? 1 : o->permits, &lo,
                             &g, &err) != FG_CODE_OK)
        return cli_library_error(&err);
    print_grant(&g, owner, o->json);
    return g.acquired ? CLI_EXIT_OK : CLI_EXIT_DENIED;
}

static int semaphore_release(fg_client *c, int npos, char **argv, const cli_opts *o) {
    int64_t left;
    fg_error err;
    if (npos != 1) return cli_error("semaphore release takes one KEY");
    if (!needs_owner("semaphore release", o)) return CLI_EXIT_ERROR;
    if (fg_semaphore_release(c, argv[0], o->owner, o->permits < 0 ? 0 : o->permits, &left,
                             &err) != FG_CODE_OK)
        return cli_library_error(&err);
    return print_left(left, "permit", "permits", o->json);
}

static const cli_subcommand semaphore_subcommands[] = {
    {{"semaphore acquire",
      "  floodgate semaphore acquire KEY CAPACITY [--permits N] [--owner ID] [--lease MS]\n"
      "                              [--wait MS]\n"
      "      take N permits (default 1) of CAPACITY for ID (default: a fresh id,\n"
      "      printed), each for MS ms (default 30000); --wait: wait up to MS in the\n"
      "      server's queue; exit 0 acquired, 1 not\n",
      LOCK_TAKES | CLI_TAKES_PERMITS},
     semaphore_acquire},
    {{"semaphore release",
      "  floodgate semaphore release KEY --owner ID [--permits N]\n"
      "      give back N of ID's permits (default: all); exit 1 when ID held none\n",
      CLI_NEEDS_SERVER | CLI_TAKES_OWNER | CLI_TAKES_PERMITS},
     semaphore_release},
};

int cli_semaphore(int argc, char **argv) {
    return cli_run_family("semaphore",
                          "floodgate semaphore: permits held on the server (docs/locks.md).",
                          semaphore_subcommands,
                          sizeof(semaphore_subcommands) / sizeof(semaphore_subcommands[0]), argc,
                          argv);
}
