/*
 * remote_bloom.h - the Bloom filters of a client of a server or cluster
 * (internal): the module's BF.* commands, whose state is the client's
 * fg_remote. See remote_bloom.c.
 */
#ifndef FG_REMOTE_BLOOM_H
#define FG_REMOTE_BLOOM_H

#include "backend.h"

extern const fg_bloom_ops fg_remote_blooms;

#endif
