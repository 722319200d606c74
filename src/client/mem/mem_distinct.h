/*
 * mem_distinct.h - the unique counters of a mem: client (internal): the
 * in-process table (distinct.c checks the arguments first). See
 * mem_distinct.c.
 *
 * The table maps a key to a core counter (src/core/uv.h) and answers as the
 * module's FG.UV* commands do (docs/uv.md): the same defaults, the same
 * replies, the same error messages, with the client's clock where a server
 * reads its own. Every function may be called from any number of threads at
 * once, except fg_mem_distincts_free.
 */
#ifndef FG_MEM_DISTINCT_H
#define FG_MEM_DISTINCT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "floodgate.h"
#include "uv.h"

typedef struct fg_mem_distincts fg_mem_distincts;

/* A table whose "now" is clock_us(clock_arg) (microseconds since the
 * epoch; NULL: CLOCK_REALTIME). NULL when out of memory. */
fg_mem_distincts *fg_mem_distincts_new(int64_t (*clock_us)(void *arg), void *clock_arg);
void fg_mem_distincts_free(fg_mem_distincts *m);

/* FG.UVCREATE with checked options. */
fg_code fg_mem_uv_create(fg_mem_distincts *m, const char *key, const fg_distinct_options *o,
                         fg_error *err);

/* FG.UVADD (at_us < 0: the clock's second) or FG.UVADDAT (at_us checked)
 * of n >= 1 items; *changed (may be NULL) as the command's reply. */
fg_code fg_mem_uv_add(fg_mem_distincts *m, const char *key, const void *const *items,
                      const size_t *lens, size_t n, int64_t at_us, bool *changed, fg_error *err);

/* The registers of the union of the keys' windows (all zero when every key
 * is missing), all keys read at one instant: FG.UVCOUNT and FG.UVEXPORT
 * before their last step. */
fg_code fg_mem_uv_registers(fg_mem_distincts *m, const char *const *keys, size_t nkeys,
                            const fg_uv_window *w, uint8_t regs[FG_UV_REGISTERS],
                            fg_error *err);

#endif
