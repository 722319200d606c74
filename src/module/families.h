/*
 * families.h - registering the commands family by family (families.c).
 *
 * A family is a group of commands that only work together (the rate
 * limits, the locks, BF.*, ...). Each one exposes its commands as a table
 *
 *     extern const command_spec <family>_commands[];  (ended by {0})
 *
 * and, where it has one, what it sets up once they exist (subcommands,
 * dicts, event subscriptions); it is one row of the table in floodgate.c.
 */
#ifndef FG_FAMILIES_H
#define FG_FAMILIES_H

#include <stdbool.h>

#include "redismodule_api.h"

/* What to do with a family's commands. */
typedef enum family_mode {
    FAMILY_REGISTER,         /* a taken name leaves the family out, with a warning */
    FAMILY_REGISTER_IF_FREE, /* a taken name is expected: it is left out with a notice */
    FAMILY_LEAVE_OUT,        /* configured off */
} family_mode;

typedef enum family_status {
    FAMILY_REGISTERED,
    FAMILY_LEFT_OUT_CONFIGURED,
    FAMILY_LEFT_OUT_NAME_TAKEN,
    FAMILY_INCOMPLETE, /* the names were free, yet a command could not be created */
} family_status;

/* One command: what RedisModule_CreateCommand takes. A key range of 0, 0
 * means no key, or a getkeys callback that reports them. */
typedef struct command_spec {
    const char *name;
    RedisModuleCmdFunc fn; /* NULL: a container of subcommands */
    const char *flags;
    int firstkey, lastkey;
} command_spec;

typedef struct command_family {
    const char *name; /* its field in INFO floodgate_command_families */
    const command_spec *commands;
    int (*commands_created)(RedisModuleCtx *ctx); /* NULL: nothing to set up */
    family_mode (*mode)(void);                    /* NULL: FAMILY_REGISTER */
    /* Set by families_register. */
    family_status status;
    const char *clash; /* the first name found taken */
} command_family;

/* Registers every family of the table (ended by a row without a name)
 * that it can, whole or not at all; logs each family left out. Never
 * fails: the module loads with the families it could register. The table
 * must outlive the module (INFO and the lookups below read it). */
void families_register(RedisModuleCtx *ctx, command_family *table);

/* Whether a command (or a subcommand, "PARENT|SUB") belongs to a family
 * that is not wholly registered, so that its metadata is skipped. */
bool family_command_left_out(const char *name);

void families_info(RedisModuleInfoCtx *ctx);

#endif
