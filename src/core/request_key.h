/*
 * request_key.h - the key of a value a request chose (request_key.c).
 */
#ifndef FG_REQUEST_KEY_H
#define FG_REQUEST_KEY_H

#include <stdbool.h>
#include <stddef.h>

/* Whether a kind or a name can stand in a request key: not empty, printable
 * ASCII, no ':' (which ends it). */
bool fg_request_key_name_ok(const char *name, size_t len);

/* The length of the key of value, without its NUL. */
size_t fg_request_key_length(size_t kind_len, size_t name_len, const unsigned char *value,
                             size_t value_len);

/* Writes "kind:name:value" (escaped) and its NUL at out, which holds
 * fg_request_key_length + 1 bytes; returns the key's length. */
size_t fg_request_key_write(char *out, const char *kind, size_t kind_len, const char *name,
                            size_t name_len, const unsigned char *value, size_t value_len);

#endif
