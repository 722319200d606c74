/*
 * families.c - registering the commands family by family, so that a name
 * already taken leaves one family out instead of failing the load.
 *
 * The server refuses a command name that exists, whoever owns it: another
 * module (RedisBloom's BF.*, bundled with Redis 8), the server itself
 * (a Redis with its own GCRA) or a server command renamed onto it (rename-command).
 * A module cannot delete a command it created, so a family is checked whole
 * before its first command is created, and a family with a taken name is
 * left out whole, logged and shown in INFO; the others load. The data types
 * do not depend on this (floodgate.c creates them first), so the keys and
 * RDB files of a family left out still load, and its commands come back
 * once the clash is gone.
 *
 * The check asks the server's command table through
 * RedisModule_GetCommandKeys, which fails with ENOENT exactly when no
 * command has the name (renamed ones included). Unlike COMMAND INFO through
 * RedisModule_Call, it works when COMMAND itself is renamed away, and
 * allocates nothing unless the name is taken.
 */
#include "families.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static command_family *families;

static bool command_exists(RedisModuleCtx *ctx, const char *name) {
    RedisModuleString *argv[] = {RedisModule_CreateString(ctx, name, strlen(name))};
    int nkeys = 0;
    errno = 0;
    int *keys = RedisModule_GetCommandKeys(ctx, argv, 1, &nkeys);
    bool exists = errno != ENOENT;
    if (keys) RedisModule_Free(keys);
    RedisModule_FreeString(ctx, argv[0]);
    return exists;
}

/* A server command renamed away (`rename-command GCRA ""` on a server with
 * its own GCRA) is gone from the command table but stays in the server's
 * table of original names, and creating a command of that name trips an
 * assertion in RM_CreateCommand. ACL rules name commands by their original
 * names, so a module user's "+name" is accepted exactly when it is there. */
static bool original_name_exists(RedisModuleUser *probe, const char *name) {
    char rule[128];
    int len = snprintf(rule, sizeof(rule), "+%s", name);
    return len > 0 && (size_t)len < sizeof(rule) &&
           RedisModule_SetModuleUserACL(probe, rule) == REDISMODULE_OK;
}

static const char *first_taken(RedisModuleCtx *ctx, RedisModuleUser *probe,
                               const command_family *f) {
    for (const command_spec *c = f->commands; c->name; c++)
        if (command_exists(ctx, c->name) || original_name_exists(probe, c->name)) return c->name;
    return NULL;
}

static int create_commands(RedisModuleCtx *ctx, const command_family *f) {
    for (const command_spec *c = f->commands; c->name; c++)
        if (RedisModule_CreateCommand(ctx, c->name, c->fn, c->flags, c->firstkey, c->lastkey,
                                      c->firstkey ? 1 : 0) != REDISMODULE_OK)
            return REDISMODULE_ERR;
    return f->commands_created ? f->commands_created(ctx) : REDISMODULE_OK;
}

static void register_family(RedisModuleCtx *ctx, RedisModuleUser *probe, command_family *f) {
    family_mode mode = f->mode ? f->mode() : FAMILY_REGISTER;
    if (mode == FAMILY_LEAVE_OUT) {
        f->status = FAMILY_LEFT_OUT_CONFIGURED;
        RedisModule_Log(ctx, "notice", "floodgate: the %s commands are left out, as configured",
                        f->name);
        return;
    }
    f->clash = first_taken(ctx, probe, f);
    if (f->clash) {
        f->status = FAMILY_LEFT_OUT_NAME_TAKEN;
        RedisModule_Log(ctx, mode == FAMILY_REGISTER_IF_FREE ? "notice" : "warning",
                        "floodgate: the %s commands are left out: %s is already a command "
                        "(of the server or of another module)",
                        f->name, f->clash);
        return;
    }
    /* The names were free, so only running out of memory can fail here. */
    f->status = create_commands(ctx, f) == REDISMODULE_OK ? FAMILY_REGISTERED : FAMILY_INCOMPLETE;
    if (f->status == FAMILY_INCOMPLETE)
        RedisModule_Log(ctx, "warning", "floodgate: the %s commands could not all be created",
                        f->name);
}

void families_register(RedisModuleCtx *ctx, command_family *table) {
    families = table;
    RedisModuleUser *probe = RedisModule_CreateModuleUser("floodgate-name-probe");
    for (command_family *f = families; f->name; f++)
        register_family(ctx, probe, f);
    RedisModule_FreeModuleUser(probe);
}

static const command_family *family_of(const char *command) {
    size_t len = strcspn(command, "|");
    for (const command_family *f = families; f && f->name; f++)
        for (const command_spec *c = f->commands; c->name; c++)
            if (strlen(c->name) == len && strncasecmp(c->name, command, len) == 0) return f;
    return NULL;
}

bool family_command_left_out(const char *name) {
    const command_family *f = family_of(name);
    return f && f->status != FAMILY_REGISTERED;
}

static const char *const status_names[] = {
    [FAMILY_REGISTERED] = "registered",
    [FAMILY_LEFT_OUT_CONFIGURED] = "left_out",
    [FAMILY_LEFT_OUT_NAME_TAKEN] = "left_out",
    [FAMILY_INCOMPLETE] = "incomplete",
};

/* One field per family: floodgate_<family>:status=registered, or
 * status=left_out,reason=configured, or
 * status=left_out,reason=name_taken,command=<the first name taken>, or
 * status=incomplete. */
void families_info(RedisModuleInfoCtx *ctx) {
    if (RedisModule_InfoAddSection(ctx, "command_families") != REDISMODULE_OK) return;
    for (const command_family *f = families; f && f->name; f++) {
        RedisModule_InfoBeginDictField(ctx, f->name);
        RedisModule_InfoAddFieldCString(ctx, "status", status_names[f->status]);
        if (f->status == FAMILY_LEFT_OUT_CONFIGURED)
            RedisModule_InfoAddFieldCString(ctx, "reason", "configured");
        if (f->status == FAMILY_LEFT_OUT_NAME_TAKEN) {
            RedisModule_InfoAddFieldCString(ctx, "reason", "name_taken");
            RedisModule_InfoAddFieldCString(ctx, "command", f->clash);
        }
        RedisModule_InfoEndDictField(ctx);
    }
}
