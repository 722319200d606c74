/*
 * scripts.h - the remote backend's second dialect (internal): on a server
 * without the module (a managed Redis), each command that has a server
 * script (src/scripts/) runs as that script instead, with the module's
 * arguments and replies, so that the family files never know which.
 *
 * A family's script is prelude.lua, <family>.lua and "return
 * run_named(commands, KEYS, ARGV)"; the build embeds its text and SHA1
 * ($(BUILD)/gen/scripts.c, made by scripts/gen-scripts.sh from every file
 * of src/scripts/). A command goes to its family by the routing table of
 * scripts.c, which also says where its keys are; its script form is the
 * module's command with its keys moved in front:
 *
 *   FG.TOKEN k 10 2 COST 3   EVALSHA <sha> 1 k FG.TOKEN 10 2 COST 3
 *   FG.PEEK TOKEN k 10 2     EVALSHA <sha> 1 k FG.PEEK TOKEN 10 2
 *
 * or EVAL <text> 1 k ... once a server has answered NOSCRIPT (a SCRIPT
 * FLUSH, a restart, an eviction on 7.4+), which caches it again. Which
 * dialect a connection speaks is conn.c's (fg_conn_ensure).
 */
#ifndef FG_SCRIPTS_H
#define FG_SCRIPTS_H

#include <stdbool.h>
#include <stddef.h>

#include "uv_keys.h"

/* A family's script. */
typedef struct fg_script {
    const char *family; /* "ratelimit": src/scripts/ratelimit.lua */
    const char *text;
    size_t len;
    const char *sha; /* SHA1 of text in 40 lower-case hex digits, EVALSHA's */
} fg_script;

/* Made at build time ($(BUILD)/gen/scripts.c): the families' scripts, and
 * the Functions library (fg_functions_library). */
extern const fg_script fg_scripts[];
extern const size_t fg_nscripts;
extern const char *const fg_functions_text;
extern const size_t fg_functions_len;

/* Where a command's keys are. Most commands name theirs: argv[key ..
 * key + nkeys). A policy's keys are derived from its name (fg:policy:{name}
 * and its :allow and :deny lists, one hash tag), which stays an argument:
 * FG.POLICY's subcommands name the policy at argv[key]; FG.CHECK names its
 * state key at argv[key] and the policy just before it, and takes the
 * policy's keys too unless it carries RULES (a cluster's check, whose
 * policy is on another slot: remote_policy.c). A unique counter's keys are
 * its name and the buckets a call may need at the client's clock
 * (core/uv_keys.h). */
typedef enum fg_script_keys {
    FG_KEYS_NAMED,   /* argv[key .. key + nkeys) */
    FG_KEYS_COUNTED, /* argv[key .. key + n), n the integer at argv[key - 1] (FG.MLOCK) */
    FG_KEYS_POLICY,  /* the policy argv[key]'s three keys */
    FG_KEYS_CHECK,   /* argv[key], then argv[key - 1]'s three keys without RULES */
    FG_KEYS_UV,      /* argv[key], then its buckets */
} fg_script_keys;

/* A command that a family's script runs: argv[0] names it, and argv[1]
 * too when sub is not NULL (FG.POLICY SET ...). A route whose family has
 * no script yet is not taken. */
typedef struct fg_script_route {
    const char *command;
    const char *sub;
    int key, nkeys;
    const char *family;
    fg_script_keys keys;
} fg_script_route;

/* The family of the Bloom filters' commands (BF.*), which a connection to
 * a server with BF.* of its own (RedisBloom, Redis 8, Valkey's Bloom
 * module) sends as they are, whatever its dialect (conn.c). */
#define FG_SCRIPT_BLOOM "bloom"

/* A policy's three keys. */
#define FG_POLICY_KEYS 3
#define FG_POLICY_KEY_MAX (sizeof("fg:policy:{}:allow") + 64)
void fg_policy_keys(const char *name, size_t len, char keys[FG_POLICY_KEYS][FG_POLICY_KEY_MAX]);

/* The routing table, in scripts.c, and its length. */
extern const fg_script_route fg_script_routes[];
extern const size_t fg_nscript_routes;

/* The script form takes at most this many arguments more than the command
 * (EVALSHA, the SHA1, the number of keys, a policy's or a counter's keys). */
#define FG_SCRIPT_EXTRA_ARGS (3 + FG_UV_SCRIPT_KEYS)
/* Room for what the script form makes: the number of keys as text, and a
 * policy's or a counter's derived keys. */
#define FG_SCRIPT_NKEYS_MAX (8 + FG_UV_SCRIPT_KEYS * FG_UV_BUCKET_KEY_MAX)
_Static_assert(FG_POLICY_KEYS * FG_POLICY_KEY_MAX <= FG_UV_SCRIPT_KEYS * FG_UV_BUCKET_KEY_MAX,
               "a counter's keys take the most room");

/* The script of a family, NULL when there is none. */
const fg_script *fg_script_of_family(const char *family);

/* The route and script of the command argv[0..argc) (lens: the lengths),
 * NULL when it has none: it is sent as it is. */
const fg_script *fg_script_for(int argc, const char *const *argv, const size_t *lens,
                               const fg_script_route **route);

/* The script form of argv into out[] and outlens[] (room for argc +
 * FG_SCRIPT_EXTRA_ARGS): EVALSHA <sha> <nkeys> <keys> <the rest in order>,
 * or EVAL <text> ... when eval; nkeys holds the number's text and the
 * derived keys (FG_SCRIPT_NKEYS_MAX bytes). Returns its argc, or 0 when the command has
 * no script. Strings are borrowed. */
int fg_script_args(int argc, const char *const *argv, const size_t *lens, bool eval,
                   const char **out, size_t *outlens, char *nkeys);

/* The EVAL form of a formatted (RESP) EVALSHA command of one of the
 * scripts, from malloc, its length in *outlen: what the asynchronous
 * client sends again after NOSCRIPT, having kept only the bytes it sent.
 * NULL when cmd is no such command, or out of memory. */
char *fg_script_eval_of(const char *cmd, size_t len, size_t *outlen);

#endif
