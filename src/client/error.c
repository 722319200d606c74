/*
 * error.c - fg_set_error (error.h).
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
