/*
 * messages.h - the error texts that clients see, each spelled once.
 *
 * The module answers these texts, and the in-process (mem:) backend of
 * libfloodgate answers the very same ones, so that an application sees the
 * same words whichever backend it runs on; the tests compare them byte for
 * byte, and many are RedisBloom's or Redis's own words. So nothing else
 * spells them out: a copy in one side would drift from the other.
 *
 * Who writes them. A text that a core rule decides is written by the core
 * function that applies the rule (core/params.c, core/uv.c, core/lock.c),
 * and the adapters pass on what it wrote. The others are written by the
 * adapters, from here. A text that only one file writes stays in that
 * file, and one that only the module writes, in several files, in the
 * module's header for it (args.h, clock.h, bloom_types.h).
 *
 * Plain texts are string literals. Formats keep their printf conversions
 * and say what they take, in order.
 */
#ifndef FG_MESSAGES_H
#define FG_MESSAGES_H

/* ---------------------------------------------------------- any command */

/* Redis's own (REDISMODULE_ERRORMSG_WRONGTYPE): the key holds another kind
 * of value. */
#define FG_ERR_WRONGTYPE "WRONGTYPE Operation against a key holding the wrong kind of value"

/* Takes the argument's name (%s). */
#define FG_ERR_NOT_A_NUMBER "ERR %s must be a number"

/* --------------------------------------------------------- rate limits */

/* The core answered FG_EOVERFLOW for these parameters. */
#define FG_ERR_OVERFLOW "ERR overflow: these parameters exceed 64-bit time arithmetic"
/* The core answered FG_EINVAL: parameters the parsers let through but the
 * algorithm refuses. */
#define FG_ERR_INVALID_LIMIT "ERR invalid rate-limit parameters"

/* ------------------------------------------------- Bloom filters (BF.*) */

/* BF.RESERVE's numbers, in the order it checks them (core/params.c). */
#define FG_ERR_BF_BAD_ERROR_RATE "ERR bad error rate"
#define FG_ERR_BF_ERROR_RANGE    "ERR (0 < error rate range < 1) "
#define FG_ERR_BF_ERROR_MIN      "ERR error rate must be at least 1e-09" /* FG_BLOOM_MIN_ERROR */
#define FG_ERR_BF_CAPACITY_MIN   "ERR (capacity should be larger than 0)"
/* Takes FG_BLOOM_MAX_CAPACITY (%lld). */
#define FG_ERR_BF_CAPACITY_MAX  "ERR capacity must be at most %lld"
#define FG_ERR_BF_BAD_EXPANSION "ERR bad expansion"

/* BF.RESERVE on a key that exists. */
#define FG_ERR_BF_EXISTS "ERR item exists"
/* A filter that cannot be made: its first level's bits would pass the
 * core's bound, or their memory cannot be had. */
#define FG_ERR_BF_TOO_BIG   "ERR filter too big: its bits would exceed 1 TiB"
#define FG_ERR_BF_NO_FILTER "ERR could not create filter"
/* An add that needs a level the filter cannot have: a non-scaling filter
 * at its capacity, or a new level whose memory cannot be had. */
#define FG_ERR_BF_FULL     "ERR non scaling filter is full"
#define FG_ERR_BF_NO_LEVEL "ERR problem inserting into filter"

/* ---------------------------------------------- unique counters (FG.UV*) */

/* FG.UVCREATE or FG.UVLOAD on a key that exists. */
#define FG_ERR_UV_EXISTS   "ERR key exists"
#define FG_ERR_UV_TZOFFSET "ERR TZOFFSET must be whole minutes"
/* Windows: LAST n unit, BETWEEN start_us end_us. */
#define FG_ERR_UV_UNIT  "ERR unit must be SECONDS, MINUTES, HOURS or DAYS"
#define FG_ERR_UV_ORDER "ERR BETWEEN start must be before end (in whole seconds)"
/* A window that does not fit a counter (core/uv.c, fg_uv_window_registers).
 * LAST takes the window's seconds (%lld), the key's name quoted (%.*s:
 * int length, bytes) and the counter's span in seconds (%lld); BETWEEN
 * takes the edge in unix microseconds (%lld), the key's name (%.*s) and
 * the counter's grid in words (%s, fg_uv_describe_grid). */
#define FG_ERR_UV_LAST_TOO_LONG                                                                    \
    "ERR LAST window of %lld seconds is longer than the SPAN of '%.*s' (%lld seconds)"
#define FG_ERR_UV_OFF_GRID "ERR BETWEEN edge %lld is not on the grid of '%.*s' (%s)"
/* FG.UVADDAT's instant, more than FG_UV_FUTURE_US ahead of the clock. */
#define FG_ERR_UV_FUTURE "ERR unix_us is more than 60 seconds in the future"
/* The clock that gives "now" is outside the core's seconds; `whose` is a
 * string literal, "server" or "client". */
#define FG_ERR_UV_CLOCK(whose) "ERR the " whose "'s clock is out of range"

/* ----------------------------------------------- locks and semaphores */

/* Takes FG_LOCK_OWNER_MAX (%d). */
#define FG_ERR_LOCK_OWNER "ERR owner must be 1 to %d bytes"
/* A key named twice in one multi-key request. */
#define FG_ERR_LOCK_DUPLICATE_KEY "ERR duplicate key"
/* A semaphore request for more permits than it has (core/lock.c). */
#define FG_ERR_LOCK_PERMITS "ERR permits exceed the capacity"
#define FG_ERR_LOCK_NO_TOKEN                                                                       \
    "ERR no fencing token left: the server's counter reached its ceiling of 2^53"

/* ------------------------------------------------------------ policies */

#define FG_ERR_POLICY_NAME "ERR policy name must be 1 to 64 letters, digits, '_', '-', '.' or '/'"
/* Takes FG_POLICY_MAX_LIMITS (%d). */
#define FG_ERR_POLICY_NLIMITS "ERR a policy needs 1 to %d LIMIT rules"
/* Takes the algorithm's word as given (%s). */
#define FG_ERR_POLICY_ALGORITHM "ERR unknown algorithm '%s' (TOKEN, LEAKY, GCRA, FIXED, SLIDING)"
/* Takes the rule, ALLOWLIST or DENYLIST (%s). */
#define FG_ERR_POLICY_LIST       "ERR %s takes EXACT or BLOOM error capacity"
#define FG_ERR_POLICY_LIST_ERROR "ERR error must be at least 1e-09 and less than 1"
/* A Bloom list's filter refused: each takes the reason (%s), the filter's
 * own message without its "ERR ". */
#define FG_ERR_POLICY_LIST_MAKE "ERR the Bloom list cannot be made: %s"
#define FG_ERR_POLICY_LIST_GROW "ERR the Bloom list cannot grow: %s"
/* Each takes the policy's name (%.*s: int length, bytes). */
#define FG_ERR_POLICY_MISSING "ERR no such policy '%.*s'"
#define FG_ERR_POLICY_STATE   "ERR key holds the state of policy '%.*s'"

#endif
