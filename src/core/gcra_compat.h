/*
 * gcra_compat.h - Redis's GCRA command (merged for 8.8, held out of the
 * release), rule for rule: its argument checks, its microsecond
 * arithmetic, its rounding, its reply and its error texts, so that
 * floodgate's GCRA answers what Redis's GCRA answers from the same stored
 * value. gcra_compat.c explains the algorithm.
 *
 * Every function that can refuse returns NULL, or the error reply itself
 * ("ERR ..."), the text Redis's GCRA sends; the caller replies it verbatim.
 */
#ifndef FG_GCRA_COMPAT_H
#define FG_GCRA_COMPAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The texts of the server's own argument readers, which Redis's GCRA uses. */
#define FG_GCRA_COMPAT_ERR_NOT_INTEGER "ERR value is not an integer or out of range"
#define FG_GCRA_COMPAT_ERR_NOT_FLOAT   "ERR value is not a valid float"
#define FG_GCRA_COMPAT_ERR_SYNTAX      "ERR syntax error"
#define FG_GCRA_COMPAT_ERR_NO_TOKENS   "ERR Missing TOKENS value"

/* GCRA key max_burst tokens_per_period period [TOKENS count] */
#define FG_GCRA_COMPAT_MIN_ARGS 5
#define FG_GCRA_COMPAT_MAX_ARGS 7

typedef struct fg_gcra_compat_params {
    int64_t capacity;          /* max_burst + 1 (INT64_MAX stays INT64_MAX) */
    int64_t tokens_per_period; /* >= 1 */
    double period_s;           /* > 0 and < 1e12 */
    int64_t tokens;            /* TOKENS: the request's cost, >= 1 (default 1) */
} fg_gcra_compat_params;

/* The checks of the numbers, each once its argument has been read as an
 * integer (or a double), in Redis's order: max_burst, tokens_per_period,
 * period, TOKENS. max_burst sets p->capacity. */
const char *fg_gcra_compat_set_max_burst(fg_gcra_compat_params *p, int64_t max_burst);
const char *fg_gcra_compat_check_count(int64_t count); /* tokens_per_period and TOKENS */
const char *fg_gcra_compat_check_period(double period_s);

/* The stored value, a string: the TAT in decimal microseconds, written as
 * the server writes integers (no sign but '-', no spaces, no leading zero)
 * and positive. */
const char *fg_gcra_compat_read_tat(const char *s, size_t len, int64_t *tat_us);

/* Redis's GCRA decides at the command's time in whole milliseconds: the
 * clock (or an explicit time) in microseconds, truncated to the millisecond. */
int64_t fg_gcra_compat_now_us(int64_t clock_us);

/* Whether a key that expires at `expire_ms` (absolute; < 0: never) is gone
 * at `now_us`, as the server's expiry decides at that time. */
bool fg_gcra_compat_expired(int64_t expire_ms, int64_t now_us);

typedef struct fg_gcra_compat_reply {
    int64_t limited;       /* 1 when refused, 0 when admitted */
    int64_t capacity;      /* max_burst + 1 */
    int64_t remaining;     /* whole tokens left */
    int64_t retry_after_s; /* -1 when admitted or when TOKENS exceeds the capacity */
    int64_t reset_after_s; /* seconds until the TAT, rounded up; may be <= 0 */
} fg_gcra_compat_reply;

/* Decides at now_us (>= 0, whole milliseconds: fg_gcra_compat_now_us) for
 * the stored TAT (`stored` false: no key). On success (NULL) the reply is in
 * *r and, when it admits, *new_tat_us is the value to store with expiry
 * fg_gcra_compat_expire_ms(*new_tat_us); a refusal stores nothing. Else an
 * error text (Redis's overflow errors), and *r and *new_tat_us are untouched. */
const char *fg_gcra_compat_decide(const fg_gcra_compat_params *p, bool stored, int64_t tat_us,
                                  int64_t now_us, fg_gcra_compat_reply *r, int64_t *new_tat_us);

/* The absolute expiry (PXAT) of a stored TAT: tat_us / 1000, rounded up, so
 * the key lives until the bucket is full again. */
int64_t fg_gcra_compat_expire_ms(int64_t tat_us);

#endif
