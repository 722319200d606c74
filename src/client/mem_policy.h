/*
 * mem_policy.h - the policies of a client (internal): the checks of a
 * definition that every backend makes before anything is sent, the
 * in-process table of a mem: client, and what the floodgate tool reads
 * back. See mem_policy.c and policy.c.
 *
 * The table holds named policies (their rules, allow and deny lists and
 * counters) and each key's fg_policy_state, and answers as the module's
 * FG.POLICY and FG.CHECK do (docs/policies.md): the same core decides
 * (src/core/policy.h), at the client's clock, with the same replies and
 * error messages. Every function may be called from any number of threads
 * at once, except fg_mem_policies_free.
 */
#ifndef FG_MEM_POLICY_H
#define FG_MEM_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "floodgate.h"
#include "policy.h"

#define FG_POLICY_NAME_MAX 64
/* The longest FG.CHECK ... WAIT timeout. */
#define FG_POLICY_MAX_WAIT_MS 86400000

_Static_assert(FG_MAX_POLICY_LIMITS == FG_POLICY_MAX_LIMITS, "floodgate.h and core/policy.h");

/* ------------------------------------------------------------- checks */

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

/* ------------------------------------------------------ the mem: table */

typedef struct fg_mem_policies fg_mem_policies;

/* A table whose "now" is clock_us(clock_arg) (µs since the epoch; NULL:
 * CLOCK_REALTIME). NULL when out of memory. */
fg_mem_policies *fg_mem_policies_new(int64_t (*clock_us)(void *arg), void *clock_arg);
void fg_mem_policies_free(fg_mem_policies *m);

/* FG.POLICY SET of a checked name and definition, converted to `rules`. */
fg_code fg_mem_policy_set(fg_mem_policies *m, const char *name, const fg_policy_def *def,
                          const fg_policy_rules *rules, fg_error *err);

/* FG.POLICY DEL: whether there was one. */
bool fg_mem_policy_delete(fg_mem_policies *m, const char *name);

/* FG.POLICY ALLOW / DENY of n >= 1 items. */
fg_code fg_mem_policy_list_add(fg_mem_policies *m, const char *name, bool deny,
                               const void *const *items, const size_t *lens, size_t n,
                               int64_t *added, fg_error *err);

/* FG.CHECK of a checked request, waiting up to timeout_ms when > 0. */
fg_code fg_mem_policy_check(fg_mem_policies *m, const char *name, const char *key,
                            const char *identity, int64_t cost, int64_t timeout_ms,
                            fg_policy_result *out, fg_error *err);

/* FG.RESET of a key that holds a policy state: whether it had a live one. */
bool fg_mem_policy_forget(fg_mem_policies *m, const char *key);

/* ------------------------------------------------------------ reading back */

fg_code fg_mem_policy_get(fg_mem_policies *m, const char *name, fg_policy_info *out, fg_error *err);

/* FG.POLICY LIST: *names (sorted, each and the array from malloc; free
 * them with fg_policy_names_free). */
fg_code fg_mem_policy_names(fg_mem_policies *m, char ***names, size_t *count, fg_error *err);

#endif
