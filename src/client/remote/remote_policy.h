/*
 * remote_policy.h - the named policies of a client of a server or cluster
 * (internal): the module's FG.POLICY and FG.CHECK, with the connections of
 * waiting checks and of a cluster's masters as their state. See
 * remote_policy.c.
 */
#ifndef FG_REMOTE_POLICY_H
#define FG_REMOTE_POLICY_H

#include <hiredis/hiredis.h>

#include "backend.h"
#include "conn.h"

extern const fg_policy_ops fg_remote_policies;

/* FG.CHECK name key [COST n] [ID id] [WAIT ms | AT us], routed by key, as
 * every remote path sends it (here and the asynchronous client), and its
 * reply of 7 fields. */
void fg_policy_check_command(fg_command *cmd, const fg_policy_request *q,
                             const fg_options *opts);
fg_code fg_parse_policy_check(const redisReply *r, fg_policy_result *out, fg_error *err);

/* A listed identity's answer where the library decides it (a cluster's
 * policy in keys), as the module's: nothing read nor charged. */
void fg_policy_list_answer(bool allowed, fg_policy_result *out);

#endif
