/*
 * remote_limit.h - the rate limits of a client of a server or cluster
 * (internal): the module's FG.* checks, with the failure policy, the denial
 * cache and the leases. See remote_limit.c.
 */
#ifndef FG_REMOTE_LIMIT_H
#define FG_REMOTE_LIMIT_H

#include "backend.h"

extern const fg_limit_ops fg_remote_limits;

#endif
