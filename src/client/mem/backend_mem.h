/*
 * backend_mem.h - the in-process backend, mem: (internal). See
 * backend_mem.c.
 */
#ifndef FG_BACKEND_MEM_H
#define FG_BACKEND_MEM_H

#include "backend.h"

extern const fg_backend fg_backend_mem;

#endif
