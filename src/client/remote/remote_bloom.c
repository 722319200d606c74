/*
 * remote_bloom.c - the Bloom filters of a client of a server or cluster:
 * BF.* commands on the client's shared connection, or routed by key on a
 * cluster (remote.c), items as binary-safe arguments. The server's own
 * BF.* answer them, or bloom.lua where it has none (conn.c). bloom.c
 * has checked the arguments, so a server only ever sees commands it
 * accepts.
 *
 * BF.MADD and BF.MEXISTS of many items are sent as commands of at most
 * ITEMS_PER_COMMAND items (an fg_command's arguments), all in one pipeline
 * (command.c): one round trip, and on a cluster they all go to the key's
 * node. The price: beyond ITEMS_PER_COMMAND items the call is not atomic on
 * a server (another client's command may run between two of its commands),
 * which a Bloom filter, whose adds commute, barely notices; a full
 * non-scaling filter stops every later command at its first item, so the
 * answer is the one a single command would give.
 *
 * Errors map as for limits (fg_reply_error), and RedisBloom's messages
 * without "ERR" are argument errors too. The failure policy (on_failure)
 * does not apply: a server that cannot be reached is FG_CODE_IO.
 */
#include "remote_bloom.h"

#include <string.h>

#include "command.h"
#include "error.h"
#include "messages.h"
#include "remote.h"

#define ITEMS_PER_COMMAND (FG_CMD_MAX_ARGS - 2) /* BF.MADD key item... */

/* ------------------------------------------------------------ replies */

/* RedisBloom answers a few argument errors without "ERR" (and the module
 * keeps its words); a filter the server had no memory for is
 * FG_CODE_NOMEM, as on mem:. */
static fg_code reply_error(const redisReply *r, fg_error *err) {
    static const char *const bare[] = {"Bad ",
                                       "Unknown argument",
                                       "Nonscaling filters cannot expand",
                                       "Invalid information value",
                                       "Second argument must be numeric",
                                       "non scaling filter is full"};
    fg_code rc = fg_reply_error(r, err);
    /* A filter the server had no memory for. */
    if (strcmp(r->str, FG_ERR_BF_NO_FILTER) == 0) rc = FG_CODE_NOMEM;
    for (size_t i = 0; rc == FG_CODE_SERVER && i < sizeof(bare) / sizeof(bare[0]); i++)
        if (strncmp(r->str, bare[i], strlen(bare[i])) == 0) rc = FG_CODE_INVALID;
    if (err != NULL) err->code = rc;
    return rc;
}

static fg_code unexpected(fg_error *err, const char *what) {
    return fg_set_error(err, FG_CODE_PROTOCOL,
                        "unexpected reply to %s (module without Bloom filters?)", what);
}

/* A reply 0 or 1, or an error. */
static fg_code parse_flag(const redisReply *r, bool *out, fg_error *err, const char *what) {
    if (r->type == REDIS_REPLY_ERROR) return reply_error(r, err);
    if (r->type != REDIS_REPLY_INTEGER || (r->integer != 0 && r->integer != 1))
        return unexpected(err, what);
    if (out != NULL) *out = r->integer == 1;
    return FG_CODE_OK;
}

/* BF.ADD or BF.EXISTS of one item: *out (may be NULL) from a 0 or 1. */
static fg_code server_item(fg_remote *r, const char *name, const char *key, const void *item,
                           size_t len, bool *out, fg_error *err) {
    fg_command cmd;
    redisReply *reply;
    fg_command_start(&cmd, name, key);
    fg_command_arg(&cmd, item, len);
    fg_code rc = fg_remote_round_trip(r, &cmd, 1, &reply, err);
    if (rc != FG_CODE_OK) return rc;
    rc = parse_flag(reply, out, err, name);
    freeReplyObject(reply);
    return rc;
}

/* -------------------------------------------------------------- items */

/* BF.MADD or BF.MEXISTS of n items, as ceil(n / ITEMS_PER_COMMAND)
 * commands in one pipeline (see the top comment): out[0..n) (may be NULL)
 * their answers. */
typedef struct items_call {
    const char *name, *key;
    const void *const *items;
    const size_t *lens;
    size_t n;
    bool *out;
} items_call;

/* Command k: the key, then items k * ITEMS_PER_COMMAND on. */
static void build_items(fg_command *cmd, size_t k, void *arg) {
    const items_call *call = arg;
    fg_command_start(cmd, call->name, call->key);
    size_t first = k * ITEMS_PER_COMMAND;
    for (size_t i = first; i < call->n && i < first + ITEMS_PER_COMMAND; i++)
        fg_command_arg(cmd, call->items[i], call->lens[i]);
}

/* The reply of command k: an array of its items' answers, up to an error
 * in the array, which is the answer. */
static fg_code parse_items(const redisReply *r, size_t k, void *arg, fg_error *err) {
    const items_call *call = arg;
    size_t first = k * ITEMS_PER_COMMAND;
    size_t count = call->n - first < ITEMS_PER_COMMAND ? call->n - first : ITEMS_PER_COMMAND;
    if (r->type != REDIS_REPLY_ARRAY || r->elements > count) return unexpected(err, call->name);
    for (size_t i = 0; i < r->elements; i++) {
        bool *out = call->out != NULL ? &call->out[first + i] : NULL;
        fg_code rc = parse_flag(r->element[i], out, err, call->name);
        if (rc != FG_CODE_OK) return rc;
    }
    return r->elements == count ? FG_CODE_OK : unexpected(err, call->name);
}

static fg_code server_items(fg_remote *r, const char *name, const char *key,
                            const void *const *items, const size_t *lens, size_t n, bool *out,
                            fg_error *err) {
    items_call call = {name, key, items, lens, n, out};
    size_t ncmds = (n + ITEMS_PER_COMMAND - 1) / ITEMS_PER_COMMAND;
    return fg_pipeline(r, ncmds, build_items, reply_error, parse_items, &call, err);
}

/* --------------------------------------------------------------- calls */

static fg_code bf_reserve(void *s, const char *key, const fg_bloom_options *o, fg_error *err) {
    fg_command cmd;
    redisReply *r;
    fg_command_start(&cmd, "BF.RESERVE", key);
    fg_command_double(&cmd, 0, o->error_rate);
    fg_command_num(&cmd, 1, o->capacity);
    if (o->expansion == 0) {
        fg_command_str(&cmd, "NONSCALING");
    } else {
        fg_command_str(&cmd, "EXPANSION");
        fg_command_num(&cmd, 2, o->expansion);
    }
    fg_code rc = fg_remote_round_trip(s, &cmd, 1, &r, err);
    if (rc != FG_CODE_OK) return rc;
    if (r->type == REDIS_REPLY_ERROR)
        rc = reply_error(r, err);
    else if (r->type != REDIS_REPLY_STATUS || strcmp(r->str, "OK") != 0)
        rc = unexpected(err, "BF.RESERVE");
    freeReplyObject(r);
    return rc;
}

static fg_code bf_add(void *s, const char *key, const void *item, size_t len, bool *added,
                      fg_error *err) {
    return server_item(s, "BF.ADD", key, item, len, added, err);
}

static fg_code bf_exists(void *s, const char *key, const void *item, size_t len, bool *exists,
                         fg_error *err) {
    return server_item(s, "BF.EXISTS", key, item, len, exists, err);
}

static fg_code bf_madd(void *s, const char *key, const void *const *items, const size_t *lens,
                       size_t n, bool *added, fg_error *err) {
    return server_items(s, "BF.MADD", key, items, lens, n, added, err);
}

static fg_code bf_mexists(void *s, const char *key, const void *const *items, const size_t *lens,
                          size_t n, bool *exists, fg_error *err) {
    return server_items(s, "BF.MEXISTS", key, items, lens, n, exists, err);
}

static fg_code bf_card(void *s, const char *key, int64_t *card, fg_error *err) {
    fg_command cmd;
    redisReply *r;
    fg_command_start(&cmd, "BF.CARD", key);
    fg_code rc = fg_remote_round_trip(s, &cmd, 1, &r, err);
    if (rc != FG_CODE_OK) return rc;
    if (r->type == REDIS_REPLY_ERROR)
        rc = reply_error(r, err);
    else if (r->type != REDIS_REPLY_INTEGER || r->integer < 0)
        rc = unexpected(err, "BF.CARD");
    else
        *card = r->integer;
    freeReplyObject(r);
    return rc;
}

const fg_bloom_ops fg_remote_blooms = {fg_remote_state, fg_remote_keep, bf_reserve, bf_add,
                                       bf_madd,         bf_exists,      bf_mexists, bf_card};
