/*
 * error.h - how libfloodgate reports an error: a code, and a message in
 * the caller's fg_error (internal).
 */
#ifndef FG_ERROR_H
#define FG_ERROR_H

#include "floodgate.h"

/* Fills err (when not NULL) with a code and a formatted message; returns
 * the code, so that `return fg_set_error(...)` reports it. */
fg_code fg_set_error(fg_error *err, fg_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
