/*
 * key_table.c - the in-process backends' table of keys (key_table.h).
 */
#include "key_table.h"

#include <stdlib.h>

#define MIN_SLOTS 8u

void *fg_key_entry_new(const fg_key_table *t, size_t size, const void *key, size_t len) {
    if (len > UINT32_MAX || len > SIZE_MAX - size) return NULL;
    char *e = malloc(size + len);
    if (e == NULL) return NULL;
    memset(e, 0, size);
    *(uint32_t *)(e + t->keylen_at) = (uint32_t)len;
    if (len > 0) memcpy(e + t->key_at, key, len);
    return e;
}

/* Places an entry known to be absent; the slots have a free one. */
static void place(fg_key_slot *slots, size_t cap, uint64_t hash, void *entry) {
    size_t mask = cap - 1, i = hash & mask;
    while (slots[i].entry != NULL) i = (i + 1) & mask;
    slots[i] = (fg_key_slot){hash, entry};
}

/* Moves every entry into `cap` slots, starting a new round of sweeps.
 * False, with the table unchanged, when out of memory. */
static bool resize(fg_key_table *t, size_t cap) {
    fg_key_slot *slots = calloc(cap, sizeof(*slots));
    if (slots == NULL) return false;
    for (size_t i = 0; i < t->cap; i++)
        if (t->slots[i].entry != NULL) place(slots, cap, t->slots[i].hash, t->slots[i].entry);
    free(t->slots);
    t->slots = slots;
    t->cap = cap;
    t->cursor = 0;
    t->swept = 0;
    return true;
}

bool fg_key_table_insert(fg_key_table *t, uint64_t hash, void *entry) {
    if ((t->count + 1) * 4 > t->cap * 3) {
        size_t cap = t->cap == 0 ? MIN_SLOTS : t->cap * 2;
        if (cap < t->cap || cap > SIZE_MAX / sizeof(fg_key_slot) || !resize(t, cap)) return false;
    }
    place(t->slots, t->cap, hash, entry);
    t->count++;
    return true;
}

/* Empties slot i and shifts the rest of its cluster back: an entry further
 * on moves into the hole unless its home slot lies between the hole and
 * where it is (it would then be placed before its home). */
static void remove_at(fg_key_table *t, size_t i) {
    size_t mask = t->cap - 1;
    for (size_t j = (i + 1) & mask; t->slots[j].entry != NULL; j = (j + 1) & mask) {
        size_t home = t->slots[j].hash & mask;
        if (((j - home) & mask) >= ((j - i) & mask)) {
            t->slots[i] = t->slots[j];
            i = j;
        }
    }
    t->slots[i] = (fg_key_slot){0, NULL};
    t->count--;
}

void fg_key_table_remove(fg_key_table *t, uint64_t hash, const void *entry) {
    size_t mask = t->cap - 1, i = hash & mask;
    while (t->slots[i].entry != entry) i = (i + 1) & mask;
    remove_at(t, i);
}

void fg_key_table_shrink(fg_key_table *t) {
    if (t->cap <= MIN_SLOTS || t->count * 8 >= t->cap) return;
    size_t cap = MIN_SLOTS;
    while (cap < t->count * 2) cap *= 2;
    resize(t, cap);
}

void fg_key_table_clear(fg_key_table *t, void (*free_entry)(void *entry)) {
    for (size_t i = 0; i < t->cap; i++)
        if (t->slots[i].entry != NULL) free_entry(t->slots[i].entry);
    free(t->slots);
    *t = (fg_key_table){.keylen_at = t->keylen_at, .key_at = t->key_at};
}

bool fg_key_table_sweep(fg_key_table *t, size_t *budget, bool (*drop)(void *entry, void *arg),
                        void *arg) {
    size_t visited = 0;
    bool round_done = false;
    while (visited < t->cap && *budget > 0) {
        fg_key_slot *sl = &t->slots[t->cursor];
        if (sl->entry != NULL) {
            (*budget)--;
            if (drop(sl->entry, arg)) {
                /* The cluster shifts back into this slot: look at it again. */
                remove_at(t, t->cursor);
                continue;
            }
        }
        t->cursor = (t->cursor + 1) & (t->cap - 1);
        visited++;
        if (++t->swept >= t->cap) {
            t->swept = 0;
            round_done = true;
        }
    }
    bool done = visited >= t->cap || round_done;
    fg_key_table_shrink(t); /* a new size starts a new round */
    return done;
}

void fg_key_shard_init(fg_key_shard *sh, fg_key_table empty) {
    sh->table = empty;
    pthread_mutex_init(&sh->mu, NULL);
}

void fg_key_shard_destroy(fg_key_shard *sh, void (*free_entry)(void *entry)) {
    fg_key_table_clear(&sh->table, free_entry);
    pthread_mutex_destroy(&sh->mu);
}
