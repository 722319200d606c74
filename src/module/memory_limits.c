/*
 * memory_limits.c - the bounds that memory a client asks for passes before
 * it is allocated.
 *
 * Redis checks maxmemory once, before a deny-oom command runs; what the
 * command then allocates is not bounded. Where a client chooses a size (a
 * Bloom filter's capacity and error rate), one command admitted at 99 MB of
 * a 100 MB server could take gigabytes, and a structure kept outside the
 * keyspace (a policy's Bloom list) could hold them where FLUSHALL cannot
 * free them. So every such allocation asks memory_refusal first, with the
 * bytes it is about to take (`more`) and those its structure already holds
 * (`held`). Three bounds, in order:
 *
 *   - the machine: `more` above the physical memory is refused, always. The
 *     allocator would hand out address space it cannot back (overcommit),
 *     and the server be killed when the pages are touched.
 *   - floodgate.max-structure-size: held + more above it is refused. The
 *     default, 512 MB, is Redis's proto-max-bulk-len: a structure's DUMP is
 *     about its size, and a server with default settings cannot RESTORE (so
 *     neither MIGRATE nor reshard) a larger one. 512 MB hold a Bloom filter
 *     of 430M items at 1%. 0 turns the ceiling off.
 *   - maxmemory, where it applies (set, and not on a replica that ignores
 *     it): used_memory + more above it is refused. Strict also under an
 *     eviction policy: a structure that only fits by evicting others is
 *     refused, not allowed to push the dataset out. Reading used_memory and
 *     maxmemory (INFO memory through RedisModule_GetServerInfo) costs about
 *     50 us, ten times the creation of a small filter, so a request below
 *     EXACT_CHECK_FROM only has to find the server under maxmemory
 *     (RedisModule_GetUsedMemoryRatio, nanoseconds): it may end at most
 *     that far past it, as any Redis command may, and the next command
 *     finds the server over maxmemory (deny-oom, or memory_full).
 *
 * While the server loads (an RDB or AOF file, a replica's full sync) and on
 * a replica, only the machine bounds: a dataset that exists is loaded as it
 * is (Redis itself loads past maxmemory), and a replica applies what its
 * master applied, or they would diverge. A file holding a structure above
 * the ceiling thus loads; RESTORE, which a client sends, is bounded.
 *
 * Cost: paid when a structure allocates, never per operation on it.
 *
 * Full memory. Redis refuses a deny-oom command whole while used memory is
 * past maxmemory, so a command flagged so fails also where it would only
 * keep or free memory: a lease renewed, a state rewritten in place. Such
 * commands carry no deny-oom and ask memory_full before they grow (a new
 * key, holder, waiter or larger value), answering Redis's own OOM error
 * (docs/security.md "When memory is full"). It reads the context flags'
 * OOM, which is Redis's own test, only once the ratio (nanoseconds) is at
 * 1 or more. Under an evicting policy Redis has evicted before the command;
 * while its eviction is still catching up, memory_full already refuses.
 *
 * Zeroed arrays come from the allocator's calloc, which takes fresh pages
 * (already zero, committed only when touched) for large requests: a 1 GB
 * filter costs what it holds, not seconds of writing zeros. Redis 7.4 has
 * TryCalloc; before it Calloc aborts the server on failure, which the bounds
 * above make a matter of a kernel refusing memory it reported (strict
 * overcommit), not of a client's request.
 */
#include "memory_limits.h"

#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <unistd.h>

#define DEFAULT_MAX_STRUCTURE_SIZE (512LL * 1024 * 1024)

/* Requests from this size on are compared with the physical memory. */
#define MACHINE_CHECK_FROM (1ULL << 30)

/* Requests from this size on are compared with maxmemory exactly. */
#define EXACT_CHECK_FROM (64 * 1024)

static long long max_structure_size = DEFAULT_MAX_STRUCTURE_SIZE;

/* The reply of the last refusal: commands run on the main thread, one at a
 * time, and reply before the next. */
static char refusal[160];

static long long get_max_structure_size(const char *name, void *privdata) {
    (void)name, (void)privdata;
    return max_structure_size;
}

static int set_max_structure_size(const char *name, long long val, void *privdata,
                                  RedisModuleString **err) {
    (void)name, (void)privdata, (void)err;
    max_structure_size = val;
    return REDISMODULE_OK;
}

int memory_limits_register_configs(RedisModuleCtx *ctx) {
    return RedisModule_RegisterNumericConfig(
        ctx, "max-structure-size", DEFAULT_MAX_STRUCTURE_SIZE, REDISMODULE_CONFIG_MEMORY, 0,
        LLONG_MAX, get_max_structure_size, set_max_structure_size, NULL, NULL);
}

uint64_t memory_max_structure_size(void) {
    return (uint64_t)max_structure_size;
}

static bool more_than_the_machine(uint64_t bytes) {
    if (bytes < MACHINE_CHECK_FROM) return false;
    long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGESIZE);
    return pages > 0 && page_size > 0 && bytes / (uint64_t)page_size >= (uint64_t)pages;
}

/* Whether used_memory + more passes maxmemory; *used and *max for the reply.
 * Below EXACT_CHECK_FROM, whether the server is over it already. */
static bool past_maxmemory(uint64_t more, unsigned long long *used, unsigned long long *max) {
    if (more < EXACT_CHECK_FROM && RedisModule_GetUsedMemoryRatio() < 1) return false;
    RedisModuleServerInfoData *info = RedisModule_GetServerInfo(NULL, "memory");
    if (info == NULL) return false;
    int used_err = 0, max_err = 0;
    *used = RedisModule_ServerInfoGetFieldUnsigned(info, "used_memory", &used_err);
    *max = RedisModule_ServerInfoGetFieldUnsigned(info, "maxmemory", &max_err);
    RedisModule_FreeServerInfo(NULL, info);
    return !used_err && !max_err && *max > 0 && (*used > *max || more > *max - *used);
}

const char *memory_refusal(uint64_t held, uint64_t more) {
    if (more_than_the_machine(more)) {
        snprintf(refusal, sizeof(refusal),
                 "ERR not enough memory: %llu bytes are more than this machine has",
                 (unsigned long long)more);
        return refusal;
    }
    int flags = RedisModule_GetContextFlags(NULL);
    if ((flags & REDISMODULE_CTX_FLAGS_LOADING) || !(flags & REDISMODULE_CTX_FLAGS_MASTER))
        return NULL;
    uint64_t ceiling = memory_max_structure_size();
    if (ceiling > 0 && (more > ceiling || held > ceiling - more)) {
        snprintf(refusal, sizeof(refusal),
                 "ERR too large: the structure would take %llu bytes, above "
                 "floodgate.max-structure-size (%llu)",
                 (unsigned long long)(held + more), (unsigned long long)ceiling);
        return refusal;
    }
    unsigned long long used, max;
    if ((flags & REDISMODULE_CTX_FLAGS_MAXMEMORY) && past_maxmemory(more, &used, &max)) {
        snprintf(refusal, sizeof(refusal),
                 "ERR not enough memory: %llu more bytes would pass maxmemory (%llu of %llu used)",
                 (unsigned long long)more, used, max);
        return refusal;
    }
    return NULL;
}

bool memory_full(void) {
    /* A float ratio below 1 means used memory is within maxmemory (or there
     * is no maxmemory): a correctly rounded used / max is 1 or more whenever
     * used >= max. */
    if (RedisModule_GetUsedMemoryRatio() < 1) return false;
    int flags = RedisModule_GetContextFlags(NULL);
    return (flags & REDISMODULE_CTX_FLAGS_OOM) && (flags & REDISMODULE_CTX_FLAGS_MASTER) &&
           !(flags & REDISMODULE_CTX_FLAGS_LOADING);
}

void *memory_zeroed(size_t nmemb, size_t size) {
    if (RedisModule_TryCalloc) return RedisModule_TryCalloc(nmemb, size);
    return RedisModule_Calloc(nmemb, size);
}
