/*
 * remote_policy.h - the named policies of a client of a server or cluster
 * (internal): the module's FG.POLICY and FG.CHECK, with the connections of
 * waiting checks and of a cluster's masters as their state. See
 * remote_policy.c.
 */
#ifndef FG_REMOTE_POLICY_H
#define FG_REMOTE_POLICY_H

#include "backend.h"

extern const fg_policy_ops fg_remote_policies;

#endif
