/*
 * text.h - a text written into the caller's buffer, that says when it did
 * not fit (internal): fg_inspect's, which both backends write. See text.c.
 */
#ifndef FG_TEXT_H
#define FG_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct fg_text {
    char *buf; /* always NUL-terminated */
    size_t len, cap;
    bool truncated; /* something did not fit, and was left out */
} fg_text;

/* Appends len bytes of s, or nothing (and marks the text truncated) when
 * they do not fit with the NUL. */
void fg_text_append(fg_text *t, const char *s, size_t len);
void fg_text_number(fg_text *t, int64_t v);

/* A number's decimal text as snprintf writes it ("%lld"; "%.17g", which
 * prints an integral double below 2^53 as an integer), NUL-terminated, in
 * less time: its length. fg_format_int needs FG_INT_TEXT_MAX bytes;
 * fg_format_double writes at most cap (FG_INT_TEXT_MAX at least). */
#define FG_INT_TEXT_MAX 21
size_t fg_format_int(char *buf, int64_t v);
size_t fg_format_double(char *buf, size_t cap, double v);

#endif
