/*
 * memory_limits.h - the bounds that memory a client asks for passes before
 * it is allocated: the machine's memory, floodgate.max-structure-size per
 * structure, and maxmemory (see memory_limits.c); and whether memory is
 * full for the commands that grow it only in some cases.
 */
#ifndef FG_MEMORY_LIMITS_H
#define FG_MEMORY_LIMITS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "redismodule_api.h"

/* Registers floodgate.max-structure-size (before RedisModule_LoadConfigs). */
int memory_limits_register_configs(RedisModuleCtx *ctx);

/* The ceiling per structure in bytes; 0: none. */
uint64_t memory_max_structure_size(void);

/* NULL when a structure holding `held` bytes may allocate `more`; else the
 * "ERR ..." reply that refuses it, valid until the next call. While the
 * server loads (RDB, AOF, a replica's sync) and on a replica, only the
 * machine's memory bounds: what exists is loaded, what a master did is
 * applied. */
const char *memory_refusal(uint64_t held, uint64_t more);

/* What Redis answers a deny-oom command while used memory is past
 * maxmemory. */
#define MEMORY_FULL_ERR "OOM command not allowed when used memory > 'maxmemory'."

/* Whether a command must not grow memory now: a master past maxmemory, as
 * Redis finds it before a deny-oom command. False while the server loads
 * and on a replica, as memory_refusal. A command that grows memory only in
 * some cases is not deny-oom: it asks this before growing and answers
 * MEMORY_FULL_ERR, so that what keeps or frees memory still works. */
bool memory_full(void);

/* nmemb x size zeroed bytes counted as the server's, or NULL. From the
 * allocator's fresh pages, never zeroed by hand: TryCalloc where the server
 * has it (7.4), else Calloc, which aborts the server when the memory cannot
 * be had, so only for what memory_refusal allowed. */
void *memory_zeroed(size_t nmemb, size_t size);

#endif
