/*
 * abi_layout.c - prints the size of every public struct of floodgate.h and
 * the offset of each field, one "name size" or "name.field offset" a line.
 * The Python binding declares the same structs through ctypes; its tests
 * compare the two, so the header cannot change under the binding unseen.
 */
#include <stddef.h>
#include <stdio.h>

#include "floodgate.h"

#define SIZE(type) printf(#type " %zu\n", sizeof(type))
#define FIELD(type, field) printf(#type "." #field " %zu\n", offsetof(type, field))

int main(void) {
    SIZE(fg_error); FIELD(fg_error, code); FIELD(fg_error, message);
    SIZE(fg_limit); FIELD(fg_limit, algorithm); FIELD(fg_limit, limit);
    FIELD(fg_limit, window_ms); FIELD(fg_limit, rate);
    SIZE(fg_result); FIELD(fg_result, allowed); FIELD(fg_result, limit);
    FIELD(fg_result, remaining); FIELD(fg_result, retry_after_ms);
    FIELD(fg_result, reset_after_ms); FIELD(fg_result, source);
    SIZE(fg_options); FIELD(fg_options, connect_timeout_ms); FIELD(fg_options, command_timeout_ms);
    FIELD(fg_options, on_failure); FIELD(fg_options, cache_denials); FIELD(fg_options, clock_us);
    FIELD(fg_options, clock_arg); FIELD(fg_options, send_clock); FIELD(fg_options, lease_units);
    FIELD(fg_options, lease_ms);
    SIZE(fg_request); FIELD(fg_request, key); FIELD(fg_request, limit); FIELD(fg_request, cost);
    FIELD(fg_request, peek); FIELD(fg_request, code); FIELD(fg_request, result);
    SIZE(fg_lock_options); FIELD(fg_lock_options, lease_ms); FIELD(fg_lock_options, wait_ms);
    FIELD(fg_lock_options, shared); FIELD(fg_lock_options, reentrant);
    FIELD(fg_lock_options, renew); FIELD(fg_lock_options, renew_max_ms);
    FIELD(fg_lock_options, on_lost); FIELD(fg_lock_options, on_lost_arg);
    FIELD(fg_lock_options, durable_replicas); FIELD(fg_lock_options, durable_timeout_ms);
    SIZE(fg_lock_grant); FIELD(fg_lock_grant, acquired); FIELD(fg_lock_grant, token);
    FIELD(fg_lock_grant, ttl_ms); FIELD(fg_lock_grant, holds);
    SIZE(fg_redlock_options); FIELD(fg_redlock_options, retry_count);
    FIELD(fg_redlock_options, retry_delay_ms); FIELD(fg_redlock_options, retry_jitter_ms);
    FIELD(fg_redlock_options, drift_factor); FIELD(fg_redlock_options, server_timeout_ms);
    SIZE(fg_redlock_grant); FIELD(fg_redlock_grant, acquired);
    FIELD(fg_redlock_grant, validity_ms); FIELD(fg_redlock_grant, votes);
    FIELD(fg_redlock_grant, token);
    SIZE(fg_bloom_options); FIELD(fg_bloom_options, error_rate);
    FIELD(fg_bloom_options, capacity); FIELD(fg_bloom_options, expansion);
    SIZE(fg_list_spec); FIELD(fg_list_spec, kind); FIELD(fg_list_spec, error);
    FIELD(fg_list_spec, capacity);
    SIZE(fg_policy_def); FIELD(fg_policy_def, nlimits); FIELD(fg_policy_def, limits);
    FIELD(fg_policy_def, ban_ms); FIELD(fg_policy_def, ban_after);
    FIELD(fg_policy_def, ban_within_ms); FIELD(fg_policy_def, shadow);
    FIELD(fg_policy_def, allowlist); FIELD(fg_policy_def, denylist);
    SIZE(fg_policy_info); FIELD(fg_policy_info, def); FIELD(fg_policy_info, allow_entries);
    FIELD(fg_policy_info, deny_entries); FIELD(fg_policy_info, allowed);
    FIELD(fg_policy_info, denied); FIELD(fg_policy_info, banned);
    FIELD(fg_policy_info, shadow_denied); FIELD(fg_policy_info, waited);
    SIZE(fg_policy_result); FIELD(fg_policy_result, result);
    FIELD(fg_policy_result, decided_by); FIELD(fg_policy_result, limit_index);
    FIELD(fg_policy_result, shadow_denied);
    SIZE(fg_window); FIELD(fg_window, last); FIELD(fg_window, n); FIELD(fg_window, unit);
    FIELD(fg_window, start_us); FIELD(fg_window, end_us);
    SIZE(fg_distinct_options); FIELD(fg_distinct_options, span_s);
    FIELD(fg_distinct_options, minutes); FIELD(fg_distinct_options, hours);
    FIELD(fg_distinct_options, days); FIELD(fg_distinct_options, tzoffset_s);
    SIZE(fg_stats); FIELD(fg_stats, decisions); FIELD(fg_stats, round_trips);
    FIELD(fg_stats, denials_cached); FIELD(fg_stats, failures); FIELD(fg_stats, reconnects);
    FIELD(fg_stats, lease_hits);
    return 0;
}
