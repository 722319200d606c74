/*
 * memory_limits.h - the bounds that memory a client asks for passes before
 * it is allocated: the machine's memory, floodgate.max-structure-size per
 * structure, and maxmemory (see memory_limits.c).
 */
#ifndef FG_MEMORY_LIMITS_H
#define FG_MEMORY_LIMITS_H

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

/* nmemb x size zeroed bytes counted as the server's, or NULL. From the
 * allocator's fresh pages, never zeroed by hand: TryCalloc where the server
 * has it (7.4), else Calloc, which aborts the server when the memory cannot
 * be had, so only for what memory_refusal allowed. */
void *memory_zeroed(size_t nmemb, size_t size);

#endif
