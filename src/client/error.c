/*
 * error.c - fg_set_error and the checks of missing arguments (error.h).
 */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>

fg_code fg_set_error(fg_error *err, fg_code code, const char *fmt, ...) {
    if (err != NULL) {
        va_list ap;
        va_start(ap, fmt);
        err->code = code;
        vsnprintf(err->message, sizeof(err->message), fmt, ap);
        va_end(ap);
    }
    return code;
}

fg_code fg_arity_error(const char *command, fg_error *err) {
    return fg_set_error(err, FG_CODE_INVALID, "ERR wrong number of arguments for '%s' command",
                        command);
}

fg_code fg_require_key(const fg_client *c, const char *key, fg_error *err) {
    if (c != NULL && key != NULL) return FG_CODE_OK;
    return fg_set_error(err, FG_CODE_INVALID, "a client and a key are required");
}

fg_code fg_require_result(const void *out, fg_error *err) {
    if (out != NULL) return FG_CODE_OK;
    return fg_set_error(err, FG_CODE_INVALID, "a result is required");
}

fg_code fg_require_items(const void *const *items, const size_t *lens, size_t n,
                         const char *command, fg_error *err) {
    if (n == 0) return fg_arity_error(command, err);
    if (items == NULL || lens == NULL)
        return fg_set_error(err, FG_CODE_INVALID, "items and their lengths are required");
    for (size_t i = 0; i < n; i++)
        if (items[i] == NULL && lens[i] > 0)
            return fg_set_error(err, FG_CODE_INVALID, "item %zu is NULL", i);
    return FG_CODE_OK;
}
