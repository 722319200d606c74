/*
 * lock_args.h - the module's argument checks of the lock calls (internal),
 * in its order and with its words, for every client that sends them: the
 * synchronous calls (lock.c, where they are) and the asynchronous client.
 */
#ifndef FG_LOCK_ARGS_H
#define FG_LOCK_ARGS_H

#include "floodgate.h"

/* FG.ACQUIRE key capacity owner permits lease_ms [WAIT timeout_ms] */
fg_code fg_lock_check_acquire(int64_t capacity, const char *owner, int64_t permits,
                              const fg_lock_options *o, fg_error *err);

/* FG.RELEASE key owner [permits] (permits 0: all) */
fg_code fg_lock_check_release(const char *owner, int64_t permits, fg_error *err);

/* FG.EXTEND key owner lease_ms */
fg_code fg_lock_check_extend(const char *owner, int64_t lease_ms, fg_error *err);

#endif
