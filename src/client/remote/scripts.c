/*
 * scripts.c - which commands the server scripts run, and their script form
 * (see scripts.h).
 *
 * The routing table names each command a script answers, its family and
 * where its keys are. Adding a family is adding its file to src/scripts/
 * (the build embeds it) and its commands here; a route may come before its
 * file: until the family has a script, the command is sent as it is. A
 * policy command is one more row, with its subcommand when the family
 * answers only some of them (FG.POLICY SET), and its key position.
 *
 * Only the connections that speak scripts look a command up (conn.c): a
 * server with the module pays nothing for this file.
 */
#include "scripts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "floodgate.h"

/* FG.PEEK and FG.REFUND take any family word: the script refuses a wrong
 * one with the module's message. */
#define LIMIT(command, key) {command, NULL, key, 1, "ratelimit", FG_KEYS_NAMED}
#define POLICY(sub)         {"FG.POLICY", sub, 2, FG_POLICY_KEYS, "policy", FG_KEYS_POLICY}
#define LOCK(command)       {command, NULL, 1, 1, "lock", FG_KEYS_NAMED}
#define LOCKS(command)      {command, NULL, 2, 0, "lock", FG_KEYS_COUNTED}
#define UV(command)         {command, NULL, 1, 1, "uv", FG_KEYS_UV}
#define BLOOM(command)      {command, NULL, 1, 1, FG_SCRIPT_BLOOM, FG_KEYS_NAMED}

const fg_script_route fg_script_routes[] = {
    LIMIT("FG.TOKEN", 1),    LIMIT("FG.LEAKY", 1),   LIMIT("FG.GCRA", 1),
    LIMIT("FG.FIXED", 1),    LIMIT("FG.SLIDING", 1), LIMIT("FG.SLIDELOG", 1),
    LIMIT("CL.THROTTLE", 1), LIMIT("GCRA", 1),       LIMIT("FG.RESET", 1),
    LIMIT("FG.INSPECT", 1),  LIMIT("FG.PEEK", 2),    LIMIT("FG.REFUND", 2),
    POLICY("SET"),           POLICY("DEL"),          POLICY("GET"),
    POLICY("ALLOW"),         POLICY("DENY"),         POLICY("UNLIST"),
    POLICY("LOOKUP"),        {"FG.CHECK", NULL, 2, 1, "policy", FG_KEYS_CHECK},
    LOCK("FG.LOCK"),         LOCK("FG.UNLOCK"),      LOCK("FG.ACQUIRE"),
    LOCK("FG.RELEASE"),      LOCK("FG.EXTEND"),      LOCK("FG.FORCEUNLOCK"),
    LOCK("FG.LOCKINFO"),     LOCK("FG.FENCE"),       LOCK("FG.FSET"),
    LOCK("FG.FGET"),         LOCKS("FG.MLOCK"),      LOCKS("FG.MUNLOCK"),
    LOCKS("FG.UNWAIT"),
    /* unique counters (uv.lua) */
    UV("FG.UVCREATE"),       UV("FG.UVADD"),         UV("FG.UVADDAT"),
    UV("FG.UVCOUNT"),        UV("FG.UVEXPORT"),
    /* Bloom filters (bloom.lua), where the server has no BF.* of its own (conn.c) */
    BLOOM("BF.RESERVE"),     BLOOM("BF.ADD"),        BLOOM("BF.MADD"),
    BLOOM("BF.INSERT"),      BLOOM("BF.EXISTS"),     BLOOM("BF.MEXISTS"),
    BLOOM("BF.INFO"),        BLOOM("BF.CARD"),
};
const size_t fg_nscript_routes = sizeof(fg_script_routes) / sizeof(fg_script_routes[0]);

const fg_script *fg_script_of_family(const char *family) {
    for (size_t i = 0; i < fg_nscripts; i++)
        if (strcmp(fg_scripts[i].family, family) == 0) return &fg_scripts[i];
    return NULL;
}

static bool same_word(const char *word, const char *s, size_t len) {
    return strlen(word) == len && strncasecmp(word, s, len) == 0;
}

const fg_script *fg_script_for(int argc, const char *const *argv, const size_t *lens,
                               const fg_script_route **route) {
    if (argc < 1) return NULL;
    for (size_t i = 0; i < fg_nscript_routes; i++) {
        const fg_script_route *rt = &fg_script_routes[i];
        int named = rt->keys == FG_KEYS_NAMED ? rt->nkeys : rt->keys == FG_KEYS_COUNTED ? 0 : 1;
        if (!same_word(rt->command, argv[0], lens[0]) || argc < rt->key + named) continue;
        if (rt->sub != NULL && !same_word(rt->sub, argv[1], lens[1])) continue;
        *route = rt;
        return fg_script_of_family(rt->family);
    }
    return NULL;
}

void fg_policy_keys(const char *name, size_t len, char keys[FG_POLICY_KEYS][FG_POLICY_KEY_MAX]) {
    static const char *const suffix[FG_POLICY_KEYS] = {"", ":allow", ":deny"};
    int n = len > 64 ? 64 : (int)len; /* longer names are refused, by name */
    for (int i = 0; i < FG_POLICY_KEYS; i++)
        snprintf(keys[i], FG_POLICY_KEY_MAX, "fg:policy:{%.*s}%s", n, name, suffix[i]);
}

/* Whether a command carries the RULES option (a cluster's FG.CHECK). */
static bool has_rules(int argc, const char *const *argv, const size_t *lens) {
    for (int i = 3; i + 1 < argc; i++)
        if (same_word("RULES", argv[i], lens[i])) return true;
    return false;
}

/* EVALSHA <sha> <nkeys> (or EVAL <text> ...): the head of every script
 * form, its number of arguments. */
static int script_head(const fg_script *s, bool eval, const char **out, size_t *outlens,
                       char *nkeys, int total) {
    out[0] = eval ? "EVAL" : "EVALSHA";
    outlens[0] = eval ? 4 : 7;
    out[1] = eval ? s->text : s->sha;
    outlens[1] = eval ? s->len : 40;
    out[2] = nkeys;
    outlens[2] = (size_t)snprintf(nkeys, 8, "%d", total);
    return 3;
}

/* An argument as an integer; false when it is none (the script refuses it). */
static bool integer_of(const char *s, size_t len, int64_t *v) {
    char buf[24], *end;
    if (len == 0 || len >= sizeof(buf)) return false;
    memcpy(buf, s, len);
    buf[len] = '\0';
    *v = strtoll(buf, &end, 10);
    return *end == '\0';
}

/* How many keys a route moves out of argv: a counted route's numkeys when
 * it is a number of the arguments that follow it (else none, and the
 * script refuses the numkeys with the module's words). */
static int moved_keys(const fg_script_route *rt, int argc, const char *const *argv,
                      const size_t *lens) {
    if (rt->keys == FG_KEYS_POLICY) return 0;
    if (rt->keys != FG_KEYS_COUNTED) return rt->nkeys;
    int64_t n;
    if (!integer_of(argv[rt->key - 1], lens[rt->key - 1], &n) || n < 1) return 0;
    return n > argc - rt->key ? argc - rt->key : (int)n;
}

/* What a counter's command asks, read as far as its keys need (the script
 * checks it all): false when its words are not a call's. */
static bool uv_call_of(int argc, const char *const *argv, const size_t *lens, fg_uv_call *call) {
    static const struct {
        const char *word;
        int64_t seconds;
    } units[] = {{"SECONDS", 1}, {"SECOND", 1}, {"MINUTES", 60}, {"MINUTE", 60},
                 {"HOURS", 3600}, {"HOUR", 3600}, {"DAYS", 86400}, {"DAY", 86400}};
    int64_t a, b;
    *call = (fg_uv_call){.kind = FG_UV_CALL_ADD};
    if (same_word("FG.UVCREATE", argv[0], lens[0])) call->kind = FG_UV_CALL_ALL;
    if (same_word("FG.UVADDAT", argv[0], lens[0])) {
        call->kind = FG_UV_CALL_ADDAT;
        if (argc < 3 || !integer_of(argv[2], lens[2], &a) || a < 0) return false;
        call->at = a / FG_UV_US_PER_SEC;
    }
    if (!same_word("FG.UVCOUNT", argv[0], lens[0]) && !same_word("FG.UVEXPORT", argv[0], lens[0]))
        return true;
    call->kind = FG_UV_CALL_WINDOW;
    if (argc < 5 || !integer_of(argv[3], lens[3], &a) || a < 0) return false;
    if (same_word("LAST", argv[2], lens[2])) {
        if (a < 1 || a > FG_UV_MAX_SPAN) return false;
        for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
            if (same_word(units[i].word, argv[4], lens[4]))
                call->window = (fg_uv_window){.last = true, .seconds = a * units[i].seconds};
        return call->window.last;
    }
    if (!same_word("BETWEEN", argv[2], lens[2]) || !integer_of(argv[4], lens[4], &b)) return false;
    call->window = (fg_uv_window){.start = a / FG_UV_US_PER_SEC, .end = b / FG_UV_US_PER_SEC};
    return call->window.start < call->window.end;
}

/* A counter's command: EVALSHA <sha> <nkeys> <the counter> <its buckets
 * at the client's clock> <the command without its first key>. */
static int uv_script_args(const fg_script *s, int argc, const char *const *argv,
                          const size_t *lens, bool eval, const char **out, size_t *outlens,
                          char *nkeys) {
    char(*derived)[FG_UV_BUCKET_KEY_MAX] = (char(*)[FG_UV_BUCKET_KEY_MAX])(nkeys + 8);
    struct timespec ts;
    fg_uv_call call;
    size_t nderived = 0;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (uv_call_of(argc, argv, lens, &call))
        nderived = fg_uv_script_keys(argv[1], lens[1], &call, (int64_t)ts.tv_sec, derived);
    int n = script_head(s, eval, out, outlens, nkeys, 1 + (int)nderived);
    out[n] = argv[1];
    outlens[n++] = lens[1];
    for (size_t i = 0; i < nderived; i++, n++) {
        out[n] = derived[i];
        outlens[n] = strlen(derived[i]);
    }
    for (int i = 0; i < argc; i++) {
        if (i == 1) continue;
        out[n] = argv[i];
        outlens[n++] = lens[i];
    }
    return n;
}

int fg_script_args(int argc, const char *const *argv, const size_t *lens, bool eval,
                   const char **out, size_t *outlens, char *nkeys) {
    const fg_script_route *rt;
    const fg_script *s = fg_script_for(argc, argv, lens, &rt);
    if (s == NULL) return 0;
    if (rt->keys == FG_KEYS_UV) return uv_script_args(s, argc, argv, lens, eval, out, outlens, nkeys);
    /* The keys moved out of the arguments, and those derived from a name. */
    int moved = moved_keys(rt, argc, argv, lens);
    int derived_from = rt->keys == FG_KEYS_POLICY                                      ? rt->key
                       : rt->keys == FG_KEYS_CHECK && !has_rules(argc, argv, lens) ? rt->key - 1
                                                                                    : -1;
    int total = moved + (derived_from >= 0 ? FG_POLICY_KEYS : 0);
    char(*derived)[FG_POLICY_KEY_MAX] = (char(*)[FG_POLICY_KEY_MAX])(nkeys + 8);
    int n = script_head(s, eval, out, outlens, nkeys, total);
    for (int i = rt->key; i < rt->key + moved; i++, n++) {
        out[n] = argv[i];
        outlens[n] = lens[i];
    }
    if (derived_from >= 0) {
        fg_policy_keys(argv[derived_from], lens[derived_from], derived);
        for (int i = 0; i < FG_POLICY_KEYS; i++, n++) {
            out[n] = derived[i];
            outlens[n] = strlen(derived[i]);
        }
    }
    for (int i = 0; i < argc; i++) {
        if (i >= rt->key && i < rt->key + moved) continue;
        out[n] = argv[i];
        outlens[n++] = lens[i];
    }
    return n;
}

/* "*<argc>\r\n$7\r\nEVALSHA\r\n$40\r\n<sha>\r\n": the head of every
 * EVALSHA hiredis formats; what follows is the same in the EVAL form. */
char *fg_script_eval_of(const char *cmd, size_t len, size_t *outlen) {
    static const char evalsha[] = "\r\n$7\r\nEVALSHA\r\n$40\r\n";
    const char *crlf = memchr(cmd, '\r', len);
    if (len < 1 || cmd[0] != '*' || crlf == NULL) return NULL;
    size_t count = (size_t)(crlf - cmd); /* "*<argc>" */
    const char *sha = crlf + strlen(evalsha);
    if ((size_t)(sha - cmd) + 42 > len || memcmp(crlf, evalsha, strlen(evalsha)) != 0 ||
        memcmp(sha + 40, "\r\n", 2) != 0)
        return NULL;
    const fg_script *s = NULL;
    for (size_t i = 0; i < fg_nscripts && s == NULL; i++)
        if (memcmp(fg_scripts[i].sha, sha, 40) == 0) s = &fg_scripts[i];
    if (s == NULL) return NULL;
    const char *rest = sha + 42;
    size_t restlen = len - (size_t)(rest - cmd);
    char head[64];
    int hlen = snprintf(head, sizeof(head), "%.*s\r\n$4\r\nEVAL\r\n$%zu\r\n", (int)count, cmd,
                        s->len);
    if (hlen < 0 || (size_t)hlen >= sizeof(head)) return NULL;
    char *eval = malloc((size_t)hlen + s->len + 2 + restlen);
    if (eval == NULL) return NULL;
    memcpy(eval, head, (size_t)hlen);
    memcpy(eval + hlen, s->text, s->len);
    memcpy(eval + hlen + s->len, "\r\n", 2);
    memcpy(eval + hlen + s->len + 2, rest, restlen);
    *outlen = (size_t)hlen + s->len + 2 + restlen;
    return eval;
}

const char *fg_functions_library(size_t *len) {
    if (len != NULL) *len = fg_functions_len;
    return fg_functions_text;
}
