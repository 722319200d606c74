/*
 * text.c - a bounded text (see text.h). A piece that does not fit is left
 * out whole, so that a caller who gives up on a truncated text never shows
 * half a number.
 */
#include "text.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* snprintf's "%lld" goes through vfprintf, the heaviest part of
 * formatting a command: these write the same digits directly. */
size_t fg_format_int(char *buf, int64_t v) {
    char digits[20];
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    size_t n = 0, len = 0;
    do {
        digits[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u > 0);
    if (v < 0) buf[len++] = '-';
    while (n > 0)
        buf[len++] = digits[--n];
    buf[len] = '\0';
    return len;
}

size_t fg_format_double(char *buf, size_t cap, double v) {
    if (v == floor(v) && fabs(v) < 9007199254740992.0 && !(v == 0 && signbit(v)))
        return fg_format_int(buf, (int64_t)v);
    int n = snprintf(buf, cap, "%.17g", v);
    return n < 0 ? 0 : (size_t)n;
}

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
    char num[FG_INT_TEXT_MAX];
    fg_text_append(t, num, fg_format_int(num, v));
}
