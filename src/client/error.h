/*
 * error.h - how libfloodgate reports an error: a code, and a message in
 * the caller's fg_error (internal); and the errors of arguments missing,
 * which every family file checks first.
 */
#ifndef FG_ERROR_H
#define FG_ERROR_H

#include <stddef.h>

#include "floodgate.h"

/* Fills err (when not NULL) with a code and a formatted message; returns
 * the code, so that `return fg_set_error(...)` reports it. */
fg_code fg_set_error(fg_error *err, fg_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* FG_CODE_INVALID with the server's message for a command given too few
 * arguments: "ERR wrong number of arguments for 'command' command". */
fg_code fg_arity_error(const char *command, fg_error *err);

/* A client and a key (not NULL). */
fg_code fg_require_key(const fg_client *c, const char *key, fg_error *err);

/* A place for the result (not NULL). */
fg_code fg_require_result(const void *out, fg_error *err);

/* n >= 1 items, each given unless empty; `command` names the call for the
 * server's arity message. */
fg_code fg_require_items(const void *const *items, const size_t *lens, size_t n,
                         const char *command, fg_error *err);

#endif
