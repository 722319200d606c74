/*
 * allocator.h - how the core asks for memory: the caller's allocator, so
 * that the module's memory goes through RedisModule_Alloc (and counts
 * against maxmemory) while the library and the tests use the C heap.
 */
#ifndef FG_ALLOCATOR_H
#define FG_ALLOCATOR_H

#include <stddef.h>

typedef struct fg_allocator {
    void *(*realloc)(void *ptr, size_t size); /* NULL on failure */
    void (*free)(void *ptr);
} fg_allocator;

#endif
