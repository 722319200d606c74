/*
 * remote_distinct.h - the unique counters of a client of a server or
 * cluster (internal): the module's FG.UV* commands, whose state is the
 * client's fg_remote. See remote_distinct.c.
 */
#ifndef FG_REMOTE_DISTINCT_H
#define FG_REMOTE_DISTINCT_H

#include "backend.h"

extern const fg_distinct_ops fg_remote_counters;

#endif
