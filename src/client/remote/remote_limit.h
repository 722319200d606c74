/*
 * remote_limit.h - the rate limits of a client of a server or cluster
 * (internal): the module's FG.* checks, with the failure policy, the denial
 * cache and the leases. See remote_limit.c.
 */
#ifndef FG_REMOTE_LIMIT_H
#define FG_REMOTE_LIMIT_H

#include <hiredis/hiredis.h>

#include "backend.h"
#include "conn.h"

extern const fg_limit_ops fg_remote_limits;

/* One check or peek of a limits state, in the halves a transport that does
 * not wait needs (the asynchronous client): a denial the client remembers
 * may answer at once; otherwise the command to send, then the answer made
 * of its reply, or of its loss. */
typedef struct fg_limit_call {
    const char *key;
    fg_limit limit;
    fg_limiter ml; /* limit, checked and converted (limit_args.h) */
    int64_t cost;
    bool peek;
    int64_t now;     /* the client's clock, read once for the call */
    uint64_t resets; /* the denial cache's resets when the command was made */
} fg_limit_call;

bool fg_remote_limits_cached(void *s, const fg_limit_call *c, fg_result *out);
void fg_remote_limits_command(void *s, fg_limit_call *c, fg_command *cmd);

/* FG.REFUND of units of l at key, at the client's time now (the
 * asynchronous client's fg_async_refund; leases make their own). */
void fg_remote_limits_refund_command(void *s, const char *key, const fg_limit *l, int64_t units,
                                     int64_t now, fg_command *cmd);

/* reply NULL: lost to I/O (the failure policy answers, or FG_CODE_IO). */
fg_code fg_remote_limits_answer(void *s, const fg_limit_call *c, const redisReply *reply,
                                fg_result *out, fg_error *err);

#endif
