/*
 * command.c - building and sending the module's commands for the remote
 * family files (see command.h).
 */
#include "command.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "text.h"

/* ------------------------------------------------------------ building */

void fg_command_init(fg_command *cmd, const char *key) {
    cmd->argc = 0;
    cmd->key = key;
    cmd->keylen = strlen(key);
}

void fg_command_start(fg_command *cmd, const char *name, const char *key) {
    fg_command_init(cmd, key);
    fg_command_str(cmd, name);
    fg_command_arg(cmd, key, cmd->keylen);
}

void fg_command_arg(fg_command *cmd, const void *s, size_t len) {
    cmd->argv[cmd->argc] = len > 0 ? s : "";
    cmd->argvlen[cmd->argc] = len;
    cmd->argc++;
}

void fg_command_str(fg_command *cmd, const char *s) {
    fg_command_arg(cmd, s, strlen(s));
}

void fg_command_num(fg_command *cmd, int slot, int64_t v) {
    fg_command_arg(cmd, cmd->nums[slot], fg_format_int(cmd->nums[slot], v));
}

void fg_command_double(fg_command *cmd, int slot, double v) {
    fg_command_arg(cmd, cmd->nums[slot], fg_format_double(cmd->nums[slot], FG_ARG_MAX, v));
}

/* ------------------------------------------------------------- sending */

fg_code fg_pipeline(fg_remote *r, size_t n, fg_build_fn *build, fg_error_fn *error,
                    fg_parse_fn *parse, void *arg, fg_error *err) {
    /* calloc: GCC cannot tell that every command gets built. */
    fg_command *cmds = calloc(n, sizeof(*cmds));
    redisReply **replies = malloc(n * sizeof(*replies));
    fg_code rc = cmds != NULL && replies != NULL
                     ? FG_CODE_OK
                     : fg_set_error(err, FG_CODE_NOMEM, "out of memory");
    for (size_t k = 0; k < n && rc == FG_CODE_OK; k++)
        build(&cmds[k], k, arg);
    if (rc == FG_CODE_OK) rc = fg_remote_round_trip(r, cmds, n, replies, err);
    for (size_t k = 0; k < n && rc == FG_CODE_OK; k++) {
        rc = replies[k]->type == REDIS_REPLY_ERROR ? error(replies[k], err)
                                                   : parse(replies[k], k, arg, err);
        freeReplyObject(replies[k]);
        /* After an error the later replies are only freed. */
        for (size_t j = k + 1; j < n && rc != FG_CODE_OK; j++)
            freeReplyObject(replies[j]);
    }
    free(cmds);
    free(replies);
    return rc;
}
