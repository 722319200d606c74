/*
 * backend_remote.h - the backends over the module's commands (internal):
 * one server (redis:, unix:) and a Redis Cluster (redis+cluster:). See
 * backend_remote.c.
 */
#ifndef FG_BACKEND_REMOTE_H
#define FG_BACKEND_REMOTE_H

#include "backend.h"

extern const fg_backend fg_backend_redis;
extern const fg_backend fg_backend_cluster;

#endif
