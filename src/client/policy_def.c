/*
 * policy_def.c - the checks of a policy definition and of a check's
 * arguments, and their conversion to core rules (policy_def.h). Ranges
 * and messages are the module's (src/module/policy_registry.c,
 * t_policy.c): a definition the server would refuse is refused here,
 * before anything is sent, with the same words.
 */
#include "policy_def.h"

#include <string.h>

#include "bloom.h"
#include "error.h"
#include "limit_args.h" /* fg_limit_convert */
#include "messages.h"
#include "params.h"

#define MSG_MAX 160

fg_code fg_policy_name_check(const char *name, fg_error *err) {
    if (name != NULL && fg_policy_name_valid(name, strlen(name))) return FG_CODE_OK;
    return fg_set_error(err, FG_CODE_INVALID, "%s", FG_ERR_POLICY_NAME);
}

fg_code fg_policy_limit_convert(const fg_limit *l, fg_policy_limit *out, fg_error *err) {
    if (l->algorithm == FG_SLIDING_LOG)
        return fg_set_error(err, FG_CODE_INVALID, FG_ERR_POLICY_ALGORITHM, "SLIDELOG");
    fg_limiter ml;
    if (fg_limit_convert(l, 0, &ml, err) != FG_CODE_OK) return FG_CODE_INVALID;
    switch (l->algorithm) {
    case FG_TOKEN_BUCKET: out->algorithm = FG_POLICY_TOKEN; break;
    case FG_LEAKY_BUCKET: out->algorithm = FG_POLICY_LEAKY; break;
    case FG_GCRA: out->algorithm = FG_POLICY_GCRA; break;
    case FG_FIXED_WINDOW: out->algorithm = FG_POLICY_FIXED; break;
    case FG_SLIDING_WINDOW: out->algorithm = FG_POLICY_SLIDING; break;
    case FG_SLIDING_LOG: return FG_CODE_INVALID; /* refused above */
    }
    if (ml.family == FG_LIMITER_BUCKET)
        out->p.bucket = ml.p.bucket;
    else if (ml.family == FG_LIMITER_FIXED)
        out->p.fixed = ml.p.fixed;
    else
        out->p.sliding = ml.p.sliding;
    return FG_CODE_OK;
}

fg_code fg_policy_penalty_convert(double ban_ms, int64_t after, double within_ms,
                                  fg_policy_penalty *out, fg_error *err) {
    char msg[MSG_MAX];
    *out = (fg_policy_penalty){0, 0, 0}; /* off, as the module parses no PENALTY */
    if (ban_ms == 0) return FG_CODE_OK;
    if (!fg_param_duration_us(ban_ms, "ban_ms", &out->ban_us, msg, sizeof(msg)) ||
        !fg_param_integer(after, "AFTER", 1, FG_POLICY_MAX_AFTER, msg, sizeof(msg)) ||
        (within_ms != 0 &&
         !fg_param_duration_us(within_ms, "WITHIN", &out->within_us, msg, sizeof(msg))))
        return fg_set_error(err, FG_CODE_INVALID, "%s", msg);
    out->after = after;
    if (within_ms == 0) out->within_us = out->ban_us;
    return FG_CODE_OK;
}

fg_code fg_list_spec_check(const fg_list_spec *s, const char *rule, fg_error *err) {
    char msg[MSG_MAX];
    if (s->kind == FG_LIST_EXACT) return FG_CODE_OK;
    if (s->kind != FG_LIST_BLOOM)
        return fg_set_error(err, FG_CODE_INVALID, FG_ERR_POLICY_LIST, rule);
    if (!fg_param_list_error(s->error, msg, sizeof(msg)) ||
        !fg_param_integer(s->capacity, "capacity", 1, FG_BLOOM_MAX_CAPACITY, msg, sizeof(msg)))
        return fg_set_error(err, FG_CODE_INVALID, "%s", msg);
    return FG_CODE_OK;
}

fg_code fg_policy_def_convert(const fg_policy_def *def, fg_policy_rules *out, fg_error *err) {
    if (def->nlimits < 1 || def->nlimits > FG_MAX_POLICY_LIMITS)
        return fg_set_error(err, FG_CODE_INVALID, FG_ERR_POLICY_NLIMITS, FG_POLICY_MAX_LIMITS);
    memset(out, 0, sizeof(*out));
    out->nlimits = (uint32_t)def->nlimits;
    for (size_t i = 0; i < def->nlimits; i++)
        if (fg_policy_limit_convert(&def->limits[i], &out->limits[i], err) != FG_CODE_OK)
            return FG_CODE_INVALID;
    if (fg_policy_penalty_convert(def->ban_ms, def->ban_after, def->ban_within_ms, &out->penalty,
                                  err) != FG_CODE_OK ||
        fg_list_spec_check(&def->allowlist, "ALLOWLIST", err) != FG_CODE_OK ||
        fg_list_spec_check(&def->denylist, "DENYLIST", err) != FG_CODE_OK)
        return FG_CODE_INVALID;
    out->shadow = def->shadow;
    return FG_CODE_OK;
}

fg_code fg_policy_request_check(int64_t cost, bool waits, int64_t timeout_ms, fg_error *err) {
    char msg[MSG_MAX];
    if (!fg_param_integer(cost, "COST", 0, INT64_MAX, msg, sizeof(msg)) ||
        (waits &&
         !fg_param_integer(timeout_ms, "WAIT", 1, FG_POLICY_MAX_WAIT_MS, msg, sizeof(msg))))
        return fg_set_error(err, FG_CODE_INVALID, "%s", msg);
    return FG_CODE_OK;
}

