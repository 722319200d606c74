/*
 * command_acl.c - the ACL categories of every command.
 *
 * Redis 7.0 gives module commands no categories: +@write does not grant
 * them and -@write does not revoke them, so ACLs name them one by one
 * (docs/security.md). From 7.2 a module sets its commands' categories, and
 * the server derives none from the command flags, so this table names them
 * all: @read or @write as the flags say, @fast or @slow, @blocking for the
 * commands that may WAIT, @dangerous for those that change a state behind
 * its algorithm's back (the effect commands, FG.FORCEUNLOCK, FG.RESET,
 * BF.LOADCHUNK), and @admin for FG.POLICY's writes, which are keyless and
 * reach every key, so key patterns cannot limit them.
 *
 * Where the server can add categories (7.4), every command is also in
 * @floodgate and the BF.* commands in @bloom, as RedisBloom's are (when
 * RedisBloom added @bloom first, the two modules share it). Without BF.*
 * (families.c) floodgate adds no @bloom: RedisBloom 8 refuses to load when
 * the category exists. Commands of a family left out are skipped.
 * tests/integration/test_acl.py checks the table against the flags.
 */
#include "command_acl.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <strings.h>

#include "families.h"

typedef struct command_acl {
    const char *name;
    const char *categories;
} command_acl;

static const command_acl acl_table[] = {
    {"CL.THROTTLE", "write fast"},
    {"FG.GCRA", "write fast"},
    {"FG.TOKEN", "write fast"},
    {"FG.LEAKY", "write fast"},
    {"FG.FIXED", "write fast"},
    {"FG.SLIDING", "write fast"},
    {"FG.SLIDELOG", "write slow"},
    {"FG.PEEK", "read slow"},
    {"FG.REFUND", "write fast"},
    {"FG.RESET", "write fast keyspace dangerous"},
    {"FG.INSPECT", "read slow"},
    {"FG.SETSTATE", "write slow dangerous"},
    {"FG.LOGAPPEND", "write slow dangerous"},
    {"GCRA", "write fast"},
    {"FG.LOCK", "write fast blocking"},
    {"FG.UNLOCK", "write fast"},
    {"FG.ACQUIRE", "write fast blocking"},
    {"FG.RELEASE", "write fast"},
    {"FG.MLOCK", "write slow blocking"},
    {"FG.MUNLOCK", "write slow"},
    {"FG.EXTEND", "write fast"},
    {"FG.FORCEUNLOCK", "write slow dangerous"},
    {"FG.LOCKINFO", "read slow"},
    {"FG.FENCE", "write fast"},
    {"FG.FSET", "write fast"},
    {"FG.FGET", "write fast"},
    {"FG.HOLD", "write slow dangerous"},
    {"FG.UNHOLD", "write slow dangerous"},
    {"BF.RESERVE", "write slow"},
    {"BF.ADD", "write slow"},
    {"BF.MADD", "write slow"},
    {"BF.INSERT", "write slow"},
    {"BF.EXISTS", "read fast"},
    {"BF.MEXISTS", "read fast"},
    {"BF.INFO", "read fast"},
    {"BF.CARD", "read fast"},
    {"BF.DEBUG", "read fast"},
    {"BF.SCANDUMP", "read fast"},
    {"BF.LOADCHUNK", "write slow dangerous"},
    {"FG.UVCREATE", "write slow"},
    {"FG.UVADD", "write slow"},
    {"FG.UVADDAT", "write slow dangerous"},
    {"FG.UVCOUNT", "read slow"},
    {"FG.UVEXPORT", "read slow"},
    {"FG.UVSTORE", "write slow"},
    {"FG.UVINFO", "read fast"},
    {"FG.UVLOAD", "write slow dangerous"},
    {"FG.CHECK", "write slow blocking"},
    {"FG.PLSTATE", "write slow dangerous"},
    {"FG.POLICY|SET", "write slow admin dangerous"},
    {"FG.POLICY|DEL", "write slow admin dangerous"},
    {"FG.POLICY|GET", "read slow"},
    {"FG.POLICY|LIST", "read slow"},
    {"FG.POLICY|ALLOW", "write slow admin dangerous"},
    {"FG.POLICY|DENY", "write slow admin dangerous"},
    {"FG.POLICY|UNLIST", "write slow admin dangerous"},
    {"FG.POLICY|HELP", "read fast"},
};

/* Adds a module category (Redis >= 7.4); true when it can be used, also
 * when another module added it first. */
static bool add_category(RedisModuleCtx *ctx, const char *name) {
    if (!RedisModule_AddACLCategory) return false;
    return RedisModule_AddACLCategory(ctx, name) == REDISMODULE_OK || errno == EBUSY;
}

int register_command_acl(RedisModuleCtx *ctx) {
    if (!RedisModule_SetCommandACLCategories) return REDISMODULE_OK;
    bool floodgate = add_category(ctx, "floodgate");
    bool bloom = !family_command_left_out("BF.ADD") && add_category(ctx, "bloom");
    for (size_t i = 0; i < sizeof(acl_table) / sizeof(acl_table[0]); i++) {
        const command_acl *c = &acl_table[i];
        char categories[96];
        snprintf(categories, sizeof(categories), "%s%s%s", c->categories,
                 floodgate ? " floodgate" : "",
                 bloom && strncasecmp(c->name, "BF.", 3) == 0 ? " bloom" : "");
        RedisModuleCommand *cmd = RedisModule_GetCommand(ctx, c->name);
        if (!cmd && family_command_left_out(c->name)) continue;
        if (!cmd || RedisModule_SetCommandACLCategories(cmd, categories) != REDISMODULE_OK) {
            RedisModule_Log(ctx, "warning", "floodgate: could not put %s in categories '%s'",
                            c->name, categories);
            return REDISMODULE_ERR;
        }
    }
    return REDISMODULE_OK;
}
