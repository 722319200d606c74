/*
 * policy_def.h - the checks of a policy's definition and of a check's
 * arguments that every backend makes before anything is sent or decided
 * (internal), with the module's messages; and the conversion of a
 * definition to the core's rules. See policy_def.c.
 */
#ifndef FG_POLICY_DEF_H
#define FG_POLICY_DEF_H

#include <stdbool.h>
#include <stdint.h>

#include "floodgate.h"
#include "policy.h"

/* The longest FG.CHECK ... WAIT timeout. */
#define FG_POLICY_MAX_WAIT_MS 86400000

_Static_assert(FG_MAX_POLICY_LIMITS == FG_POLICY_MAX_LIMITS, "floodgate.h and core/policy.h");

/* A name as FG.POLICY takes it: 1 to 64 letters, digits, '_', '-', '.'
 * or '/'; FG_CODE_INVALID with the module's message otherwise. */
fg_code fg_policy_name_check(const char *name, fg_error *err);

/* One LIMIT rule, checked with the ranges of its algorithm's command
 * (limit_args.c) and converted. */
fg_code fg_policy_limit_convert(const fg_limit *l, fg_policy_limit *out, fg_error *err);

/* The PENALTY rule of a definition: ban_ms 0 is none; within_ms 0 is
 * ban_ms. */
fg_code fg_policy_penalty_convert(double ban_ms, int64_t after, double within_ms,
                                  fg_policy_penalty *out, fg_error *err);

/* An ALLOWLIST or DENYLIST rule (`rule` names it in messages). */
fg_code fg_list_spec_check(const fg_list_spec *s, const char *rule, fg_error *err);

/* A whole definition, in the module's order: the limits, the penalty,
 * the lists. */
fg_code fg_policy_def_convert(const fg_policy_def *def, fg_policy_rules *out, fg_error *err);

/* FG.CHECK's COST, and WAIT's timeout when it waits, with the module's
 * messages. */
fg_code fg_policy_request_check(int64_t cost, bool waits, int64_t timeout_ms, fg_error *err);

#endif
