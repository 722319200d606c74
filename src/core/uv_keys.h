/*
 * uv_keys.h - unique counters on servers without the module: one native
 * HyperLogLog key per bucket of the module's default tiers (60 minutes, 48
 * hours, 31 days, UTC), in the counter's slot (src/scripts/uv.lua, which
 * mirrors these rules; docs/scripts.md, "Unique counters").
 *
 * A script must declare every key it touches, and only the server knows
 * the second it counts at, so the client declares every bucket a call may
 * need at its own clock, a minute either way (each tier's kept buckets
 * that meet the window, one more at each end and one ahead for adds up to
 * a minute in the future, and every kept day, whose existence is the
 * counter's), and the script takes those it needs. A clock
 * more than a minute from the server's is refused by the script, never
 * answered from the wrong buckets.
 *
 * Bucket keys are <base>:uv:<width>:<start second>, base being the
 * counter's name when it has a hash tag (the suffix keeps it), otherwise
 * "{name}", whose tag is the whole name: the slot is the name's either
 * way. A name without a tag that holds '}' (its wrapping would cut the
 * tag short) or is empty keeps no slot and is refused.
 */
#ifndef FG_UV_KEYS_H
#define FG_UV_KEYS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "uv.h"

/* The longest counter name the client derives keys of (the script refuses
 * longer ones in the same words), and a bucket key's room. */
#define FG_UV_KEYS_NAME_MAX 64
#define FG_UV_BUCKET_KEY_MAX (FG_UV_KEYS_NAME_MAX + sizeof("{}:uv:86400:4294967296"))
/* The most keys a call declares: its counter, its temporary key and at
 * most 63 + 51 + 34 buckets. */
#define FG_UV_SCRIPT_KEYS 150

/* What a script call does with one counter. */
typedef enum fg_uv_call_kind {
    FG_UV_CALL_ADD,    /* FG.UVADD: the server's second */
    FG_UV_CALL_ADDAT,  /* FG.UVADDAT: at */
    FG_UV_CALL_WINDOW, /* FG.UVCOUNT, FG.UVEXPORT: window */
    FG_UV_CALL_ALL,    /* FG.UVCREATE: every bucket kept (does it exist?) */
} fg_uv_call_kind;

typedef struct fg_uv_call {
    fg_uv_call_kind kind;
    int64_t at;          /* ADDAT: the second */
    fg_uv_window window; /* WINDOW */
} fg_uv_call;

/* The prefix of the bucket keys of counter `name` (len bytes) into base
 * (FG_UV_BUCKET_KEY_MAX bytes); false when its slot cannot be kept or it
 * is longer than FG_UV_KEYS_NAME_MAX. */
bool fg_uv_keys_base(const char *name, size_t len, char *base);

/* The keys a call of counter `name` declares at the client's second now,
 * but the counter itself: its buckets, then (WINDOW) "<base>:uv:tmp", the
 * key an export merges into. How many (at most FG_UV_SCRIPT_KEYS - 1); 0
 * when fg_uv_keys_base refuses the name. */
size_t fg_uv_script_keys(const char *name, size_t len, const fg_uv_call *call, int64_t now,
                         char keys[][FG_UV_BUCKET_KEY_MAX]);

#endif
