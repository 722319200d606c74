/*
 * backends.h - which backend serves a URL (internal). See backends.c.
 */
#ifndef FG_BACKENDS_H
#define FG_BACKENDS_H

#include "backend.h"
#include "floodgate.h"

/* The backend of fg_open's url, or NULL with FG_CODE_INVALID in err (a URL
 * of no known form). */
const fg_backend *fg_backend_for(const char *url, fg_error *err);

#endif
