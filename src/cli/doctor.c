/*
 * doctor.c - floodgate doctor URL: what a server offers floodgate, and what
 * on it is unsafe (docs/security.md).
 *
 * It asks the server directly, through hiredis (server.c): MODULE LIST for
 * the module and its version, INFO floodgate_command_families for the
 * families it registered, CONFIG GET for the eviction policy and
 * floodgate's configs, ACL for the users that may send the effect
 * commands, INFO cluster and CLUSTER INFO for a cluster's layout. Each
 * finding is a line:
 *
 *   ok      what is there and safe
 *   note    what to know (noeviction answers OOM when memory is full, ...)
 *   hazard  what breaks locks, fencing or limits
 *
 * Exit codes (cli.h): 0 nothing unsafe, 1 a hazard (or no module), 2 the
 * server could not be asked.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define EFFECT_PROBE "FG.SETSTATE" /* one of the effect commands, for ACL DRYRUN */

static const cli_command doctor_command = {
    "doctor",
    "  floodgate doctor URL\n"
    "      what the server offers (module version, command families, cluster\n"
    "      layout) and what is unsafe: an eviction policy that evicts locks,\n"
    "      floodgate.explicit-time or the effect commands on, users allowed to\n"
    "      send them; exit 0 when nothing is unsafe, 1 when something is\n",
    0};

typedef struct finding_list {
    int json, hazards, count;
} finding_list;

static void finding(finding_list *f, const char *level, const char *fmt, const char *a,
                    const char *b) {
    char text[512];
    snprintf(text, sizeof(text), fmt, a, b);
    if (strcmp(level, "hazard") == 0) f->hazards++;
    if (!f->json) {
        printf("%-7s %s\n", level, text);
        return;
    }
    printf("%s{\"level\":\"%s\",\"text\":", f->count++ ? "," : "", level);
    cli_print_json_string(text);
    putchar('}');
}

/* A CONFIG GET's value, in buf ("" when the server has no such config). */
static int config(redisContext *s, const char *name, char *buf, size_t len) {
    redisReply *r = cli_server_command(s, 3, (const char *[]){"CONFIG", "GET", name});
    if (r == NULL) return 0;
    int found = r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
                r->element[1]->type == REDIS_REPLY_STRING;
    snprintf(buf, len, "%s", found ? r->element[1]->str : "");
    freeReplyObject(r);
    return 1;
}

/* The floodgate module's version in MODULE LIST, or -1. */
static long long module_version(const redisReply *list) {
    for (size_t i = 0; list->type == REDIS_REPLY_ARRAY && i < list->elements; i++) {
        const redisReply *m = list->element[i];
        long long ver = -1;
        int ours = 0;
        for (size_t j = 0; m->type == REDIS_REPLY_ARRAY && j + 1 < m->elements; j += 2) {
            const redisReply *k = m->element[j], *v = m->element[j + 1];
            if (k->type != REDIS_REPLY_STRING) continue;
            if (!strcmp(k->str, "name"))
                ours = v->type == REDIS_REPLY_STRING && !strcmp(v->str, "floodgate");
            if (!strcmp(k->str, "ver")) ver = v->integer;
        }
        if (ours) return ver;
    }
    return -1;
}

static int check_module(redisContext *s, finding_list *f) {
    char version[32], ver[24];
    redisReply *r = cli_server_command(s, 2, (const char *[]){"MODULE", "LIST"});
    if (r == NULL) return 0;
    long long v = module_version(r);
    freeReplyObject(r);
    if (v < 0) {
        finding(f, "note", "no module: libfloodgate runs every family as server scripts "
                "(docs/scripts.md: what differs there)%s%s", "", "");
        return 1;
    }
    snprintf(version, sizeof(version), "%lld.%lld.%lld", v / 10000, v / 100 % 100, v % 100);
    snprintf(ver, sizeof(ver), "%lld", v);
    finding(f, "ok", "module floodgate %s (MODULE LIST ver %s)", version, ver);
    return 1;
}

/* Each "floodgate_<family>:status=<status>" line of INFO. */
static int check_families(redisContext *s, finding_list *f) {
    redisReply *r =
        cli_server_command(s, 2, (const char *[]){"INFO", "floodgate_command_families"});
    if (r == NULL) return 0;
    char *text = r->type == REDIS_REPLY_STRING ? r->str : NULL;
    for (char *line = text ? strtok(text, "\r\n") : NULL; line; line = strtok(NULL, "\r\n")) {
        char *status = strstr(line, ":status=");
        if (line[0] == '#' || status == NULL) continue;
        *status = '\0';
        status += strlen(":status=");
        if (strcmp(status, "registered") == 0)
            finding(f, "ok", "command family %s registered%s", line + strlen("floodgate_"), "");
        else
            finding(f, "note", "command family %s: %s (another module has its names)",
                    line + strlen("floodgate_"), status);
    }
    freeReplyObject(r);
    return 1;
}

static int check_eviction(redisContext *s, finding_list *f) {
    char policy[64];
    if (!config(s, "maxmemory-policy", policy, sizeof(policy))) return 0;
    if (strncmp(policy, "allkeys-", 8) == 0)
        finding(f, "hazard", "maxmemory-policy %s can evict any key: a held lock (its waiter "
                "is then granted it while the holder still holds it), a fenced value, a "
                "limit's state; use noeviction (docs/security.md)%s", policy, "");
    else if (strncmp(policy, "volatile-", 9) == 0)
        finding(f, "hazard", "maxmemory-policy %s can evict keys with a TTL: every lock's lease "
                "and every limit's state; use noeviction (docs/security.md)%s", policy, "");
    else
        finding(f, "note", "maxmemory-policy %s: nothing is evicted; once memory is full, "
                "what would grow it fails with OOM (docs/security.md)%s", policy, "");
    return 1;
}

static int check_config_off(redisContext *s, finding_list *f, const char *name, const char *why) {
    char value[16];
    if (!config(s, name, value, sizeof(value))) return 0;
    if (strcmp(value, "yes") == 0)
        finding(f, "hazard", "%s is on: %s", name, why);
    else if (value[0] != '\0')
        finding(f, "ok", "%s is off%s", name, "");
    return 1;
}

/* The users that are on and may send an effect command (ACL DRYRUN). */
static int check_acl(redisContext *s, finding_list *f, int effects_on) {
    redisReply *users = cli_server_command(s, 2, (const char *[]){"ACL", "USERS"});
    if (users == NULL) return 0;
    for (size_t i = 0; users->type == REDIS_REPLY_ARRAY && i < users->elements; i++) {
        const char *user = users->element[i]->str;
        redisReply *r = cli_server_command(
            s, 6, (const char *[]){"ACL", "DRYRUN", user, EFFECT_PROBE, "k", "0"});
        if (r == NULL) return freeReplyObject(users), 0;
        if (r->type == REDIS_REPLY_STATUS)
            finding(f, effects_on ? "hazard" : "note",
                    "user '%s' may send the effect commands (FG.SETSTATE, FG.HOLD, ...)%s",
                    user, effects_on ? "" : "; they stay refused while "
                                            "floodgate.enable-effect-commands is off");
        freeReplyObject(r);
    }
    freeReplyObject(users);
    return 1;
}

static int check_cluster(redisContext *s, finding_list *f) {
    redisReply *r = cli_server_command(s, 2, (const char *[]){"INFO", "cluster"});
    if (r == NULL) return 0;
    int enabled = r->type == REDIS_REPLY_STRING && strstr(r->str, "cluster_enabled:1");
    freeReplyObject(r);
    if (!enabled) return finding(f, "ok", "a single server (no cluster)%s%s", "", ""), 1;
    if ((r = cli_server_command(s, 2, (const char *[]){"CLUSTER", "INFO"})) == NULL) return 0;
    char *text = r->type == REDIS_REPLY_STRING ? r->str : NULL;
    for (char *line = text ? strtok(text, "\r\n") : NULL; line; line = strtok(NULL, "\r\n"))
        if (!strncmp(line, "cluster_state:", 14) || !strncmp(line, "cluster_size:", 13) ||
            !strncmp(line, "cluster_known_nodes:", 20))
            finding(f, strcmp(line, "cluster_state:fail") ? "ok" : "hazard", "cluster %s%s",
                    line + strlen("cluster_"), "");
    freeReplyObject(r);
    finding(f, "note", "on a cluster, use a redis+cluster:// URL; locks need a redis:// URL "
            "of one master%s%s", "", "");
    return 1;
}

static int examine(redisContext *s, finding_list *f) {
    char effects[16];
    return check_module(s, f) && check_families(s, f) && check_eviction(s, f) &&
           check_config_off(s, f, "floodgate.explicit-time",
                            "every client may decide a check at a time of its choosing (AT)") &&
           check_config_off(s, f, "floodgate.enable-effect-commands",
                            "clients may write any state (FG.SETSTATE, FG.HOLD, ...)") &&
           config(s, "floodgate.enable-effect-commands", effects, sizeof(effects)) &&
           check_acl(s, f, strcmp(effects, "yes") == 0) && check_cluster(s, f);
}

int cli_doctor(int argc, char **argv) {
    cli_opts o;
    int npos = cli_parse_options(argc, argv, &doctor_command, &o);
    if (npos < 0) return CLI_EXIT_ERROR;
    if (npos > 1) return cli_error("doctor takes one URL");
    redisContext *s = cli_server_open(npos == 1 ? argv[0] : o.url);
    if (s == NULL) return CLI_EXIT_ERROR;
    finding_list f = {o.json, 0, 0};
    if (o.json) fputs("{\"findings\":[", stdout);
    int ok = examine(s, &f);
    redisFree(s);
    if (o.json) printf("],\"hazards\":%d}\n", f.hazards);
    if (!ok) return CLI_EXIT_ERROR;
    return f.hazards > 0 ? CLI_EXIT_DENIED : CLI_EXIT_OK;
}
