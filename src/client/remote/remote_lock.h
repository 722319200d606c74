/*
 * remote_lock.h - the locks of a client of one server (internal): the
 * module's FG.LOCK, FG.ACQUIRE, FG.MLOCK and their releases, with the spare
 * connections of waiting calls and the renewal thread as their state; and
 * the parsing of a grant, which Redlock shares. See remote_lock.c.
 */
#ifndef FG_REMOTE_LOCK_H
#define FG_REMOTE_LOCK_H

#include <hiredis/hiredis.h>

#include "backend.h"
#include "floodgate.h"

extern const fg_lock_ops fg_remote_locks;

/* A reply [acquired, token, ttl_ms, holds] of FG.LOCK, FG.ACQUIRE or
 * FG.MLOCK, or its error. */
fg_code fg_parse_grant(const redisReply *r, fg_lock_grant *out, fg_error *err);

#endif
