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

#include "floodgate.h"

/* FG.PEEK and FG.REFUND take any family word: the script refuses a wrong
 * one with the module's message. */
#define LIMIT(command, key) {command, NULL, key, 1, "ratelimit", FG_KEYS_NAMED}
#define POLICY(sub)         {"FG.POLICY", sub, 2, FG_POLICY_KEYS, "policy", FG_KEYS_POLICY}
#define LOCK(command)       {command, NULL, 1, 1, "lock", FG_KEYS_NAMED}
#define LOCKS(command)      {command, NULL, 2, 0, "lock", FG_KEYS_COUNTED}

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

/* How many keys a route moves out of argv: a counted route's numkeys when
 * it is a number of the arguments that follow it (else none, and the
 * script refuses the numkeys with the module's words). */
static int moved_keys(const fg_script_route *rt, int argc, const char *const *argv,
                      const size_t *lens) {
    if (rt->keys == FG_KEYS_POLICY) return 0;
    if (rt->keys != FG_KEYS_COUNTED) return rt->nkeys;
    char digits[8];
    size_t len = lens[rt->key - 1];
    if (len < 1 || len >= sizeof(digits)) return 0;
    memcpy(digits, argv[rt->key - 1], len);
    digits[len] = '\0';
    char *end;
    long n = strtol(digits, &end, 10);
    if (*end != '\0' || digits[0] < '1' || digits[0] > '9') return 0;
    return n > argc - rt->key ? argc - rt->key : (int)n;
}

int fg_script_args(int argc, const char *const *argv, const size_t *lens, bool eval,
                   const char **out, size_t *outlens, char *nkeys) {
    const fg_script_route *rt;
    const fg_script *s = fg_script_for(argc, argv, lens, &rt);
    if (s == NULL) return 0;
    /* The keys moved out of the arguments, and those derived from a name. */
    int moved = moved_keys(rt, argc, argv, lens);
    int derived_from = rt->keys == FG_KEYS_POLICY                                      ? rt->key
                       : rt->keys == FG_KEYS_CHECK && !has_rules(argc, argv, lens) ? rt->key - 1
                                                                                    : -1;
    int total = moved + (derived_from >= 0 ? FG_POLICY_KEYS : 0);
    char(*derived)[FG_POLICY_KEY_MAX] = (char(*)[FG_POLICY_KEY_MAX])(nkeys + 8);
    int n = 0;
    out[n] = eval ? "EVAL" : "EVALSHA";
    outlens[n++] = eval ? 4 : 7;
    out[n] = eval ? s->text : s->sha;
    outlens[n++] = eval ? s->len : 40;
    out[n] = nkeys;
    outlens[n++] = (size_t)snprintf(nkeys, 8, "%d", total);
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
