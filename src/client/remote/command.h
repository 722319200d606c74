/*
 * command.h - the module's commands as the family files send them
 * (internal): the remote family files build fg_commands (conn.h) the same
 * way.
 *
 * A call of many items, or of many keys, may become several commands sent
 * in one round trip (fg_pipeline: remote.c's round trip, routed by key on a
 * cluster): their replies are read in order up to the first error, which is
 * the call's answer, and the later ones only freed.
 */
#ifndef FG_COMMAND_H
#define FG_COMMAND_H

#include <hiredis/hiredis.h>
#include <stddef.h>
#include <stdint.h>

#include "floodgate.h"
#include "remote.h"

/* ------------------------------------------------------------ building */

/* An empty command routed by `key` ("" for any node). */
void fg_command_init(fg_command *cmd, const char *key);

/* "name key": the start of most commands, routed by key. */
void fg_command_start(fg_command *cmd, const char *name, const char *key);

/* An argument of len bytes (s may be NULL when len is 0), borrowed. */
void fg_command_arg(fg_command *cmd, const void *s, size_t len);
void fg_command_str(fg_command *cmd, const char *s);

/* A number, written into the command's storage slot `slot`; a double with
 * 17 digits, so that the module parses back the very double given. */
void fg_command_num(fg_command *cmd, int slot, int64_t v);
void fg_command_double(fg_command *cmd, int slot, double v);

/* ------------------------------------------------------------- sending */

/* An error reply as the family's code (fg_reply_error, or a mapping of its
 * own around it). */
typedef fg_code fg_error_fn(const redisReply *r, fg_error *err);

/* Reply k of a call's commands that is not an error, into arg. */
typedef fg_code fg_parse_fn(const redisReply *r, size_t k, void *arg, fg_error *err);

/* Command k of a call, built from arg. */
typedef void fg_build_fn(fg_command *cmd, size_t k, void *arg);

/* n commands built by `build`, sent in one round trip, their replies read
 * in order up to the first failure: an error reply through `error`, any
 * other through `parse`. */
fg_code fg_pipeline(fg_remote *r, size_t n, fg_build_fn *build, fg_error_fn *error,
                    fg_parse_fn *parse, void *arg, fg_error *err);

#endif
