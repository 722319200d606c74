/*
 * uv.h - unique counting over time: a sliding HyperLogLog whose registers
 * are exactly Redis's (docs/design-uv.md).
 *
 * Items are hashed as PFADD hashes them (MurmurHash64A, seed 0xadc83b19):
 * register = the low 14 bits, rank = 1 + the trailing zeros of the other 50
 * (51 when they are all zero). A window's 16384 registers, counted with
 * Redis's estimator, give the count PFCOUNT would give for a PFADD of exactly
 * the window's items, and can be exported as a native dense HLL string.
 *
 * The staircase. Each register keeps the (second, rank) pairs that no later
 * item dominates: times ascending, ranks strictly descending (so at most 51).
 * For any t1 the largest kept rank with time >= t1 is the largest rank of
 * all the register's items since t1: every window that ends now is exact to
 * the second. Out-of-order adds (backfills) are fine. An add prunes, in its
 * own register, the pairs older than newest - span; the other registers keep
 * theirs until a rebase, and queries mask them, so every window sees only
 * the seconds [newest - span, now].
 *
 * The staircase is a sorted list of (register, entry) while it has at
 * most FG_UV_LIST_MAX entries: a quiet counter costs a few bytes per item,
 * and a query walks the list. Past that it becomes the design's "rows"
 * form, tile by tile, for good: queries scan the rows with SSE2 (the
 * x86-64 baseline), AVX2 where the CPU has it (chosen at run time), or a
 * portable loop elsewhere: ~15-22 µs for the last 24 hours at 10M items a
 * day.
 *
 * Bucket maxima: windows in the past. Three tiers (minutes, hours, days:
 * 60, 3600 and 86400 s, hours and days shifted by tzoffset) each keep the
 * register maxima of their last `count` buckets, held in an array by
 * number. Every add within a tier's retention raises its bucket's
 * register, so a union of whole retained buckets is exactly the registers
 * of its items. A bucket is sparse, a sorted word per non-zero register,
 * until that would take more than one byte per register; it is then dense
 * (16 KB). It is allocated when first written and freed once it falls out
 * of retention. (The design's 3-byte pairs and 6-bit dense form would take
 * a quarter less; 4-byte words keep the search and the merge simple.)
 *
 * Times are whole seconds in [0, FG_UV_MAX_SECOND], passed in; no clock.
 */
#ifndef FG_UV_H
#define FG_UV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "decision.h"
#include "allocator.h"

#define FG_UV_REGISTERS 16384
#define FG_UV_MAX_RANK 51
#define FG_UV_TILES 256
#define FG_UV_TILE_REGISTERS 64
#define FG_UV_MAX_SPAN (180LL * 86400)
#define FG_UV_MAX_SECOND 4294967295LL /* stored as u32 */

/* Commands take instants in microseconds: the latest is the last second's
 * last microsecond, and FG.UVADDAT adds at most a minute ahead of the
 * clock. */
#define FG_UV_US_PER_SEC 1000000LL
#define FG_UV_MAX_US     ((FG_UV_MAX_SECOND + 1) * FG_UV_US_PER_SEC - 1)
#define FG_UV_FUTURE_US  (60 * FG_UV_US_PER_SEC)
#define FG_UV_HLL_BYTES 12304         /* a dense Redis HLL string */
#define FG_UV_TIERS 3                 /* minutes, hours, days */
#define FG_UV_MAX_MINUTES 1440
#define FG_UV_MAX_HOURS 744
#define FG_UV_MAX_DAYS 1100
#define FG_UV_MAX_TZOFFSET 86400      /* |tzoffset| */
#define FG_UV_DEFAULT_SPAN 604800
#define FG_UV_DEFAULT_MINUTES 60
#define FG_UV_DEFAULT_HOURS 48
#define FG_UV_DEFAULT_DAYS 31

/* FG.UVCREATE's options, in the order of fg_uv_create's parameters: their
 * names, ranges and defaults, the same for the module and the client. */
enum { FG_UV_OPT_SPAN, FG_UV_OPT_MINUTES, FG_UV_OPT_HOURS, FG_UV_OPT_DAYS, FG_UV_OPT_TZOFFSET,
       FG_UV_OPTIONS };

typedef struct fg_uv_option {
    const char *name;
    int64_t min, max, fallback;
} fg_uv_option;

extern const fg_uv_option fg_uv_options[FG_UV_OPTIONS];

/* Whether a TZOFFSET is whole minutes (FG_ERR_UV_TZOFFSET refuses the
 * others); the ranges are fg_uv_options'. */
bool fg_uv_tzoffset_valid(int64_t tzoffset_s);

/* One bucket of a tier: its number and registers, sparse while that is
 * smaller (sorted words register << 8 | rank), dense after (one byte per
 * register), in one block. */
#define FG_UV_DENSE UINT16_MAX /* pairs of a dense bucket */
typedef struct fg_uv_bucket {
    int32_t number;  /* floor((second + offset) / width): seconds are u32 */
    uint16_t pairs;  /* sparse: pairs held (at most 4096); FG_UV_DENSE: dense */
    uint16_t room;   /* sparse: pairs the block has room for */
    uint32_t data[]; /* room pairs, or FG_UV_REGISTERS bytes */
} fg_uv_bucket;

/* Narrow fields: a busy counter's 139 default buckets cost what the ring
 * of slots did before buckets could be sparse. */
typedef struct fg_uv_tier {
    int32_t width;          /* seconds per bucket */
    int32_t offset;         /* added to a second before dividing (tzoffset or 0) */
    uint32_t count;         /* buckets kept (0: no tier) */
    uint16_t held, room;    /* buckets held, and room in the array (at most count) */
    fg_uv_bucket **bucket;  /* the held buckets, by number ascending */
} fg_uv_tier;

/* The staircase once it outgrows the list: tile t holds registers 64t ..
 * 64t+63 in 64 length bytes, then nrows rows of 64 entries (row s holds
 * slot s of every register, slot 0 the oldest, 0 when empty); NULL with
 * nrows 0 when the tile is empty. */
typedef struct fg_uv_tiles {
    uint8_t nrows[FG_UV_TILES];
    uint32_t *tile[FG_UV_TILES];
} fg_uv_tiles;

/* Entries a staircase holds as a list; more, and it becomes tiles. (The
 * fuzzer builds the core with a small one, so that its short scripts
 * cross it.) */
#ifndef FG_UV_LIST_MAX
#define FG_UV_LIST_MAX 4096
#endif

typedef struct fg_uv {
    int64_t span;     /* seconds of history, 1 .. FG_UV_MAX_SPAN */
    int64_t newest;   /* the newest second added (0 while empty) */
    int64_t base;     /* entries encode (second - base + 1) << 6 | rank */
    uint64_t entries; /* stored (second, rank) pairs */
    /* The staircase: a list of register << 32 | entry, sorted (so by
     * register, then time), while tiles is NULL; tiles after. */
    uint64_t *list;
    uint32_t list_room;
    fg_uv_tiles *tiles;
    int64_t tzoffset;
    uint64_t buckets; /* buckets held, all tiers */
    fg_uv_tier tiers[FG_UV_TIERS]; /* minutes, hours, days */
} fg_uv;

typedef enum fg_uv_add_result {
    FG_UV_CHANGED = 1,    /* a register's staircase or a bucket changed */
    FG_UV_UNCHANGED = 0,  /* dominated, or older than every retention */
    FG_UV_BADTIME = -1,   /* second outside [0, FG_UV_MAX_SECOND] (nothing changed) */
    FG_UV_NOMEM = -2,     /* memory could not be had (nothing changed) */
} fg_uv_add_result;

/* Redis's HyperLogLog hash of an item (PFADD's). */
uint64_t fg_uv_hash(const void *item, size_t len);

/* The register and rank of a hash. */
static inline uint32_t fg_uv_register(uint64_t hash) { return (uint32_t)(hash & (FG_UV_REGISTERS - 1)); }
static inline uint8_t fg_uv_rank(uint64_t hash) {
    return (uint8_t)(__builtin_ctzll((hash >> 14) | (1ULL << 50)) + 1);
}

typedef enum fg_uv_window_result {
    FG_UV_WINDOW_OK = 0,
    FG_UV_WINDOW_BAD = -1,      /* t1 >= t2, or an edge outside [0, FG_UV_MAX_SECOND + 1] */
    FG_UV_WINDOW_OFF_GRID = -2, /* an edge off the grid of every tier retained there */
} fg_uv_window_result;

/* An empty counter keeping `span` seconds, without tiers (the staircase
 * only). FG_EINVAL when span is out of range. Nothing is allocated until
 * the first add. */
fg_status fg_uv_init(fg_uv *uv, int64_t span);

/* The same with tiers of `minutes`, `hours` and `days` buckets (0: none;
 * at most FG_UV_MAX_*), hours and days starting at tzoffset seconds
 * (whole minutes, |tzoffset| <= FG_UV_MAX_TZOFFSET). FG_EINVAL out of
 * range. */
fg_status fg_uv_init_tiers(fg_uv *uv, int64_t span, int64_t minutes, int64_t hours, int64_t days,
                           int64_t tzoffset);

/* Adds an item by its hash at second `sec`. */
fg_uv_add_result fg_uv_add(fg_uv *uv, uint64_t hash, int64_t sec, const fg_allocator *a);

/* The registers of the window [t1, ...): every item added at a second >= t1
 * (and >= newest - span). Items stamped after `now` (a clock that went
 * back) are included. */
void fg_uv_registers_since(const fg_uv *uv, int64_t t1, uint8_t regs[FG_UV_REGISTERS]);

/* The registers of the last n seconds ending at now: seconds
 * [now - n + 1, ...]. FG_EINVAL when n is not in [1, span]. */
fg_status fg_uv_registers_last(const fg_uv *uv, int64_t n, int64_t now, uint8_t regs[FG_UV_REGISTERS]);

/* The registers of the items added at seconds [t1, t2). The window is cut
 * into whole retained buckets, coarsest first, from t1; once the cut
 * reaches newest - span and t2 is after newest, the staircase gives the
 * rest (so any window ending after newest and starting within the span is
 * exact to the second). An edge the cut cannot reach is refused with
 * FG_UV_WINDOW_OFF_GRID and *bad_edge set to it; regs is then undefined. */
fg_uv_window_result fg_uv_registers_between(const fg_uv *uv, int64_t t1, int64_t t2,
                                            uint8_t regs[FG_UV_REGISTERS], int64_t *bad_edge);

/* Redis's estimate (Ertl's improved estimator, as PFCOUNT computes it). */
uint64_t fg_uv_estimate(const uint8_t regs[FG_UV_REGISTERS]);

/* Registers as a dense Redis HLL string, its cached count marked invalid. */
void fg_uv_to_redis_hll(const uint8_t regs[FG_UV_REGISTERS], uint8_t out[FG_UV_HLL_BYTES]);

/* Register maxima: acc[i] = max(acc[i], regs[i]) (unions of windows/keys). */
void fg_uv_merge_registers(uint8_t acc[FG_UV_REGISTERS], const uint8_t regs[FG_UV_REGISTERS]);

/* Bytes allocated: the struct, the staircase, the tiers' arrays and the
 * buckets. */
uint64_t fg_uv_bytes(const fg_uv *uv);

/* Whether the counter is one fg_uv_add could have built: span in range,
 * every staircase strictly ascending in time and descending in rank, ranks
 * in 1..51, times in [base, newest], rows at least the tile's longest
 * staircase with empty slots zero, `entries` exact, some entry at newest,
 * and base <= newest - span with offsets below the rebase limit; tiers
 * in range, every bucket retained, in its slot, ranks <= 51, `buckets`
 * exact, and nothing at all while empty; and the two agree: every entry's
 * rank is in each retained bucket of its second, and no bucket that starts
 * within the span holds a rank the staircase lacks since its start. */
bool fg_uv_storable(const fg_uv *uv);

/* Serialized form (little-endian): u8 version 2, u32 span, i64 newest,
 * i64 base, u32 count, then count entries of u16 register, u32 second,
 * u8 rank, sorted by register then second; then u16 minutes, u16 hours,
 * u16 days, i32 tzoffset, and per tier u16 buckets, each i64 number,
 * u16 non-zero registers and that many u16 register, u8 rank (sorted),
 * buckets in slot order. Exactly the stored state, so a round trip is
 * byte-identical. */
size_t fg_uv_serialized_size(const fg_uv *uv);
void fg_uv_serialize(const fg_uv *uv, uint8_t *out);

/* Rebuilds a counter from its serialized form; FG_EINVAL for anything
 * fg_uv_storable refuses or a bad length/version, FG_EOVERFLOW without
 * memory. *uv is untouched on error. */
fg_status fg_uv_deserialize(fg_uv *uv, const uint8_t *in, size_t len, const fg_allocator *a);

/* Frees what the counter holds; the struct itself is the caller's. */
void fg_uv_free(fg_uv *uv, const fg_allocator *a);

/* The counter's grid in words, as the refusals of an off-grid window quote
 * it: "minutes for the last 60 minutes, hours for the last 24 hours", or
 * "no buckets". */
void fg_uv_describe_grid(const fg_uv *uv, char *buf, size_t size);

/* A window as the FG.UV* commands ask for it, in whole seconds: the last
 * `seconds` ending at the current second, or [start, end), start < end
 * within [0, FG_UV_MAX_SECOND + 1]. */
typedef struct fg_uv_window {
    bool last;
    int64_t seconds;
    int64_t start, end;
} fg_uv_window;

/* The most of a user's word (a key's name, an option) that a refusal
 * quotes, in bytes. */
#define FG_UV_NAME_SHOWN 100

/* The registers of the counter of key `name` (len bytes) for the window,
 * LAST ending at second `now` (in range). False when the window does not
 * fit the counter -- a LAST window longer than its span, a BETWEEN edge off
 * its grid -- with the refusal the commands answer in msg (messages.h),
 * which names the key and the counter's span or grid; regs is then
 * undefined. Both the module and the mem: backend answer it, so a
 * window is refused in the same words on either. */
bool fg_uv_window_registers(const fg_uv *uv, const fg_uv_window *w, int64_t now, const char *name,
                            size_t len, uint8_t regs[FG_UV_REGISTERS], char *msg, size_t msglen);

#endif
