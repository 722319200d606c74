/*
 * mem_policy.h - the in-process table of policies of a mem: client
 * (internal). See mem_policy.c; the checks of a definition are
 * policy_def.h's.
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
#include "policy_def.h"

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
