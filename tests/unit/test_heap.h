/*
 * test_heap.h - the allocator the unit tests hand to the core, shared by the
 * tests of the algorithms that allocate (the sliding log, locks).
 *
 * Every realloc moves the block (so a stale pointer is caught by ASan), fills
 * the new part with garbage (so reading an unwritten slot shows), and can be
 * told to fail. setup() starts each test with a clean count; teardown()
 * fails a test that did not give all its memory back.
 *
 * Header-only and static: a test binary includes it once.
 */
#ifndef FG_TEST_HEAP_H
#define FG_TEST_HEAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sliding_log.h" /* fg_allocator */

typedef union block_header {
    max_align_t align;
    size_t size;
} block_header;

static struct {
    int64_t calls;   /* realloc calls */
    int64_t blocks;  /* live blocks */
    int64_t fail_in; /* 0: never fail; n: the n-th call from now fails */
    bool fail_always;
} heap;

static bool heap_should_fail(void) {
    if (heap.fail_always) return true;
    return heap.fail_in > 0 && --heap.fail_in == 0;
}

static void *heap_realloc(void *ptr, size_t size) {
    heap.calls++;
    if (heap_should_fail()) return NULL;
    block_header *fresh = malloc(sizeof(block_header) + size);
    if (fresh == NULL) return NULL;
    fresh->size = size;
    memset(fresh + 1, 0xA5, size);
    heap.blocks++;
    if (ptr != NULL) {
        block_header *old = (block_header *)ptr - 1;
        memcpy(fresh + 1, ptr, old->size < size ? old->size : size);
        free(old);
        heap.blocks--;
    }
    return fresh + 1;
}

static void heap_free(void *ptr) {
    if (ptr == NULL) return;
    free((block_header *)ptr - 1);
    heap.blocks--;
}

static const fg_allocator alloc = {heap_realloc, heap_free};

static int setup(void **state) {
    (void)state;
    memset(&heap, 0, sizeof(heap));
    return 0;
}

static int teardown(void **state) {
    (void)state;
    return heap.blocks == 0 ? 0 : -1;
}

#endif
