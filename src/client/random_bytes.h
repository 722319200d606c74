/*
 * random_bytes.h - randomness for libfloodgate (internal): owner ids
 * (lock.c) and Redlock's jitter (redlock.c). See random_bytes.c.
 */
#ifndef FG_RANDOM_BYTES_H
#define FG_RANDOM_BYTES_H

#include <stddef.h>

/* n random bytes from getrandom(), else /dev/urandom. */
void fg_random_bytes(void *buf, size_t n);

#endif
