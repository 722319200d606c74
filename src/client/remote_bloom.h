/*
 * remote_bloom.h - the Bloom filters of a client of a server or cluster
 * (internal): the module's BF.* commands. The state `s` of every call is
 * the client's fg_remote (remote.h). See remote_bloom.c.
 */
#ifndef FG_REMOTE_BLOOM_H
#define FG_REMOTE_BLOOM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "floodgate.h"

fg_code fg_remote_bf_reserve(void *s, const char *key, const fg_bloom_options *o, fg_error *err);
fg_code fg_remote_bf_add(void *s, const char *key, const void *item, size_t len, bool *added,
                         fg_error *err);
fg_code fg_remote_bf_madd(void *s, const char *key, const void *const *items, const size_t *lens,
                          size_t n, bool *added, fg_error *err);
fg_code fg_remote_bf_exists(void *s, const char *key, const void *item, size_t len, bool *exists,
                            fg_error *err);
fg_code fg_remote_bf_mexists(void *s, const char *key, const void *const *items, const size_t *lens,
                             size_t n, bool *exists, fg_error *err);
fg_code fg_remote_bf_card(void *s, const char *key, int64_t *card, fg_error *err);

#endif
