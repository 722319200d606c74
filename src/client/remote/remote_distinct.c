/*
 * remote_distinct.c - the unique counters of a client of a server or
 * cluster: the module's FG.UV* commands on the client's shared connection,
 * or routed by the first key on a cluster (remote.c), items as binary-safe
 * arguments. distinct.c has checked the arguments, so a server only sees
 * commands it parses.
 *
 * A command has at most FG_CMD_MAX_ARGS arguments (conn.h), so longer calls
 * become several commands sent in one pipeline (command.c): one round
 * trip, all to the first key's node, but not atomic on a server (another
 * client's command may run between two of them).
 *
 *   - add: FG.UVADD of at most 10 items (FG.UVADDAT: 9) per command. Adds
 *     commute, so the counter ends the same; FG.UVADD's commands may be
 *     stamped with consecutive seconds if the server's clock ticks between
 *     them, as separate calls would be.
 *   - count and export of more than 8 keys: one FG.UVEXPORT per 7 further
 *     keys, each naming the first key too, and the union's registers (their
 *     maximum) counted or encoded here by the core's code: the answer a
 *     single command would give. Naming the first key in each keeps a
 *     cluster's rule: keys in several slots are the server's CROSSSLOT,
 *     whatever their number.
 *
 * A server without the module answers them as uv.lua, one counter per
 * command, since each declares some hundred bucket keys (scripts.c): a
 * union of several is their exports, merged here, and an export comes
 * back as the buckets' HyperLogLog, sparse or dense, which is made dense
 * here as the module's is.
 *
 * Errors map as for limits (fg_reply_error): the module's "ERR ..." is
 * FG_CODE_INVALID, WRONGTYPE FG_CODE_WRONGTYPE, a module without the
 * commands FG_CODE_PROTOCOL; a cluster's CROSSSLOT is the caller's keys, so
 * FG_CODE_INVALID too. The failure policy (on_failure) does not apply: a
 * server that cannot be reached is FG_CODE_IO.
 */
#include "remote_distinct.h"

#include <string.h>

#include "command.h"
#include "error.h"
#include "remote.h"
#include "uv.h"

#define WINDOW_ARGS 3                                   /* LAST n unit | BETWEEN start_us end_us */
#define ADD_ITEMS   (FG_CMD_MAX_ARGS - 2)               /* FG.UVADD key item... */
#define ADDAT_ITEMS (FG_CMD_MAX_ARGS - 3)               /* FG.UVADDAT key unix_us item... */
#define MORE_KEYS   (FG_CMD_MAX_ARGS - 2 - WINDOW_ARGS) /* keys after the window */
#define OPTIONS     5
#define HLL_HEADER  16

/* ------------------------------------------------------------ commands */

/* "LAST n unit" or "BETWEEN start_us end_us" (numbers in slots 0 and 1). */
static void add_window(fg_command *cmd, const fg_window *w) {
    if (!w->last) {
        fg_command_str(cmd, "BETWEEN");
        fg_command_num(cmd, 0, w->start_us);
        fg_command_num(cmd, 1, w->end_us);
        return;
    }
    fg_command_str(cmd, "LAST");
    fg_command_num(cmd, 0, w->n);
    fg_command_str(cmd, w->unit == FG_SECONDS   ? "SECONDS"
                        : w->unit == FG_MINUTES ? "MINUTES"
                        : w->unit == FG_HOURS   ? "HOURS"
                                                : "DAYS");
}

/* A cluster refusing keys of several slots is the caller's error. */
static fg_code reply_error(const redisReply *r, fg_error *err) {
    fg_code rc = fg_reply_error(r, err);
    if (strncmp(r->str, "CROSSSLOT", 9) == 0) rc = FG_CODE_INVALID;
    if (err != NULL) err->code = rc;
    return rc;
}

static fg_code unexpected(fg_error *err, const char *what) {
    return fg_set_error(err, FG_CODE_PROTOCOL,
                        "unexpected reply to %s (module without unique counting?)", what);
}

/* ------------------------------------------------------------- create */

typedef struct create_call {
    const char *key;
    const fg_distinct_options *o;
} create_call;

/* FG.UVCREATE key with the options away from their defaults. */
static void build_create(fg_command *cmd, size_t k, void *arg) {
    const create_call *call = arg;
    const fg_distinct_options *o = call->o;
    const struct {
        const char *name;
        int64_t value, fallback;
    } options[OPTIONS] = {{"SPAN", o->span_s, FG_UV_DEFAULT_SPAN},
                          {"MINUTES", o->minutes, FG_UV_DEFAULT_MINUTES},
                          {"HOURS", o->hours, FG_UV_DEFAULT_HOURS},
                          {"DAYS", o->days, FG_UV_DEFAULT_DAYS},
                          {"TZOFFSET", o->tzoffset_s, 0}};
    (void)k;
    fg_command_start(cmd, "FG.UVCREATE", call->key);
    for (int i = 0, slot = 0; i < OPTIONS; i++) {
        if (options[i].value == options[i].fallback) continue;
        fg_command_str(cmd, options[i].name);
        fg_command_num(cmd, slot++, options[i].value);
    }
}

static fg_code parse_ok(const redisReply *r, size_t k, void *arg, fg_error *err) {
    (void)k;
    (void)arg;
    if (r->type != REDIS_REPLY_STATUS || strcmp(r->str, "OK") != 0)
        return unexpected(err, "FG.UVCREATE");
    return FG_CODE_OK;
}

static fg_code uv_create(void *s, const char *key, const fg_distinct_options *o, fg_error *err) {
    create_call call = {key, o};
    return fg_pipeline(s, 1, build_create, reply_error, parse_ok, &call, err);
}

/* ---------------------------------------------------------------- add */

typedef struct add_call {
    const char *key;
    const void *const *items;
    const size_t *lens;
    size_t n, per_command;
    int64_t at_us;
    bool changed;
} add_call;

static void build_add(fg_command *cmd, size_t k, void *arg) {
    const add_call *call = arg;
    fg_command_start(cmd, call->at_us >= 0 ? "FG.UVADDAT" : "FG.UVADD", call->key);
    if (call->at_us >= 0) fg_command_num(cmd, 0, call->at_us);
    size_t first = k * call->per_command;
    for (size_t i = first; i < call->n && i < first + call->per_command; i++)
        fg_command_arg(cmd, call->items[i], call->lens[i]);
}

static fg_code parse_add(const redisReply *r, size_t k, void *arg, fg_error *err) {
    add_call *call = arg;
    (void)k;
    if (r->type != REDIS_REPLY_INTEGER || (r->integer != 0 && r->integer != 1))
        return unexpected(err, call->at_us >= 0 ? "FG.UVADDAT" : "FG.UVADD");
    call->changed |= r->integer == 1;
    return FG_CODE_OK;
}

static fg_code uv_add(void *s, const char *key, const void *const *items, const size_t *lens,
                      size_t n, int64_t at_us, bool *changed, fg_error *err) {
    add_call call = {key, items, lens, n, at_us >= 0 ? ADDAT_ITEMS : ADD_ITEMS, at_us, false};
    size_t ncmds = (n + call.per_command - 1) / call.per_command;
    fg_code rc = fg_pipeline(s, ncmds, build_add, reply_error, parse_add, &call, err);
    if (rc == FG_CODE_OK && changed != NULL) *changed = call.changed;
    return rc;
}

/* ------------------------------------------------------ count, export */

/* A window over keys, asked of a server: FG.UVCOUNT or FG.UVEXPORT of up
 * to 1 + MORE_KEYS keys, or FG.UVEXPORTs whose registers are merged. */
typedef struct union_call {
    const char *const *keys;
    size_t nkeys, more; /* keys after the first in a command: 0 for uv.lua */
    const fg_window *w;
    const char *name; /* the command when there is one */
    int64_t count;
    uint8_t *hll;  /* FG.UVEXPORT's reply, when there is one */
    uint8_t *regs; /* the merged registers, when there are several */
} union_call;

/* Command k: the first key, the window, then keys 1 + k * more on; for
 * uv.lua key k alone. */
static void build_union(fg_command *cmd, size_t k, void *arg) {
    const union_call *call = arg;
    fg_command_start(cmd, call->name, call->keys[call->more > 0 ? 0 : k]);
    add_window(cmd, call->w);
    size_t first = 1 + k * call->more;
    for (size_t i = first; i < call->nkeys && i < first + call->more; i++)
        fg_command_str(cmd, call->keys[i]);
}

/* A sparse HLL string's registers (Redis's opcodes: ZERO 00xxxxxx and
 * XZERO 01xxxxxx yyyyyyyy, runs of zeros; VAL 1vvvvvxx, xx + 1 registers
 * of vvvvv + 1), which must cover the 16384 exactly. */
static bool sparse_registers(const uint8_t *p, const uint8_t *end, uint8_t regs[FG_UV_REGISTERS]) {
    size_t at = 0;
    while (p < end) {
        size_t run;
        uint8_t value = 0;
        if ((*p & 0xc0) == 0) {
            run = (size_t)(*p++ & 0x3f) + 1;
        } else if ((*p & 0xc0) == 0x40) {
            if (p + 1 == end) return false;
            run = ((size_t)(p[0] & 0x3f) << 8 | p[1]) + 1;
            p += 2;
        } else {
            value = (uint8_t)((*p >> 2 & 0x1f) + 1);
            run = (size_t)(*p++ & 3) + 1;
        }
        if (run > FG_UV_REGISTERS - at) return false;
        memset(regs + at, value, run);
        at += run;
    }
    return at == FG_UV_REGISTERS;
}

/* A HLL string's registers, dense (the inverse of fg_uv_to_redis_hll) or
 * sparse. */
static bool hll_registers(const redisReply *r, uint8_t regs[FG_UV_REGISTERS]) {
    if (r->type != REDIS_REPLY_STRING || r->len < HLL_HEADER || memcmp(r->str, "HYLL", 4) != 0)
        return false;
    if (r->str[4] == 1)
        return sparse_registers((const uint8_t *)r->str + HLL_HEADER,
                                (const uint8_t *)r->str + r->len, regs);
    if (r->len != FG_UV_HLL_BYTES || r->str[4] != 0) return false;
    const uint8_t *p = (const uint8_t *)r->str + HLL_HEADER;
    for (int i = 0; i < FG_UV_REGISTERS; i += 4, p += 3) {
        regs[i] = p[0] & 63;
        regs[i + 1] = (uint8_t)((p[0] >> 6 | p[1] << 2) & 63);
        regs[i + 2] = (uint8_t)((p[1] >> 4 | p[2] << 4) & 63);
        regs[i + 3] = p[2] >> 2;
    }
    return true;
}

static fg_code parse_union(const redisReply *r, size_t k, void *arg, fg_error *err) {
    union_call *call = arg;
    (void)k;
    if (call->regs != NULL) {
        uint8_t part[FG_UV_REGISTERS];
        if (!hll_registers(r, part)) return unexpected(err, "FG.UVEXPORT");
        fg_uv_merge_registers(call->regs, part);
    } else if (call->hll != NULL) {
        if (r->type != REDIS_REPLY_STRING || r->len != FG_HLL_BYTES)
            return unexpected(err, call->name);
        memcpy(call->hll, r->str, FG_HLL_BYTES);
    } else {
        if (r->type != REDIS_REPLY_INTEGER || r->integer < 0) return unexpected(err, call->name);
        call->count = r->integer;
    }
    return FG_CODE_OK;
}

static fg_code uv_union(void *s, const char *const *keys, size_t nkeys, const fg_window *w,
                        const fg_uv_window *range, int64_t *count, uint8_t *hll, fg_error *err) {
    fg_error why = {0};
    fg_dialect d = fg_remote_dialect(s, &why);
    if (d == FG_DIALECT_AUTO)
        return fg_set_error(err, why.code != FG_CODE_OK ? why.code : FG_CODE_IO, "%s", why.message);
    bool scripts = d == FG_DIALECT_SCRIPT;
    union_call call = {keys, nkeys, scripts ? 0 : MORE_KEYS, w,
                       count != NULL ? "FG.UVCOUNT" : "FG.UVEXPORT", 0, hll, NULL};
    (void)range;
    /* ceil((nkeys - 1) / MORE_KEYS) commands, at least one; one a key for
     * uv.lua, whose exports are always merged (made dense) */
    size_t further = nkeys - 1,
           ncmds = scripts ? nkeys : further > 0 ? (further + MORE_KEYS - 1) / MORE_KEYS : 1;
    if (ncmds == 1 && (count != NULL || !scripts)) {
        fg_code rc = fg_pipeline(s, 1, build_union, reply_error, parse_union, &call, err);
        if (rc == FG_CODE_OK && count != NULL) *count = call.count;
        return rc;
    }
    uint8_t regs[FG_UV_REGISTERS] = {0};
    call.name = "FG.UVEXPORT";
    call.regs = regs;
    fg_code rc = fg_pipeline(s, ncmds, build_union, reply_error, parse_union, &call, err);
    if (rc != FG_CODE_OK) return rc;
    if (count != NULL)
        *count = (int64_t)fg_uv_estimate(regs);
    else
        fg_uv_to_redis_hll(regs, hll);
    return FG_CODE_OK;
}

const fg_distinct_ops fg_remote_counters = {fg_remote_state, fg_remote_keep, uv_create, uv_add,
                                            uv_union};
