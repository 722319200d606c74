/*
 * remote_distinct.h - the unique counters of a client of a server or
 * cluster (internal): the module's FG.UV* commands. The state `s` of every
 * call is the client's fg_remote (remote.h). See remote_distinct.c.
 */
#ifndef FG_REMOTE_DISTINCT_H
#define FG_REMOTE_DISTINCT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "floodgate.h"
#include "uv.h"

fg_code fg_remote_uv_create(void *s, const char *key, const fg_distinct_options *o, fg_error *err);
fg_code fg_remote_uv_add(void *s, const char *key, const void *const *items, const size_t *lens,
                         size_t n, int64_t at_us, bool *changed, fg_error *err);

/* The union's count (count != NULL) or HLL string: FG.UVCOUNT or
 * FG.UVEXPORT, which convert the window w themselves (range is unused). */
fg_code fg_remote_uv_union(void *s, const char *const *keys, size_t nkeys, const fg_window *w,
                           const fg_uv_window *range, int64_t *count, uint8_t *hll, fg_error *err);

#endif
