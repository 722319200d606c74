/*
 * text.c - a bounded text (see text.h). A piece that does not fit is left
 * out whole, so that a caller who gives up on a truncated text never shows
 * half a number.
 */
#include "text.h"

#include <stdio.h>
#include <string.h>

void fg_text_append(fg_text *t, const char *s, size_t len) {
    if (t->len + len >= t->cap) {
        t->truncated = true;
        return;
    }
    memcpy(t->buf + t->len, s, len);
    t->len += len;
    t->buf[t->len] = '\0';
}

void fg_text_number(fg_text *t, int64_t v) {
    char num[24];
    int n = snprintf(num, sizeof(num), "%lld", (long long)v);
    fg_text_append(t, num, (size_t)n);
}
