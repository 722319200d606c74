/*
 * t_bloom.c - Bloom filters: RedisBloom 2.4's BF.* commands (docs/bloom.md).
 *
 * Arguments, replies and error strings are RedisBloom 2.4.23's, down to its
 * parsers: BF.RESERVE finds EXPANSION and NONSCALING by name and checks
 * them in RedisBloom's order; BF.INSERT reads its options by their first
 * letters ("e" then "r" is ERROR, any other "e" EXPANSION, "n" with a third
 * letter "c" NOCREATE, any other "n" NONSCALING), and the first argument
 * that starts with "i" begins the items. Where RedisBloom accepts nonsense
 * (an expansion of 0, a capacity of 2^60, an unknown BF.RESERVE argument)
 * floodgate refuses it with a message of the same kind.
 *
 * Every command is deterministic -- the item's hash is the same on every
 * platform, and a filter grows by its own counters -- so a write is
 * replicated as the client sent it, and only when it changed the filter
 * (a created key counts): a BF.MADD whose items were all present sends
 * nothing to replicas or the AOF, and one that stopped at a full filter is
 * sent without the items it did not take. Each change signals the key (WATCH,
 * client-side caching) and emits a keyspace event of class "d" named after
 * the command (bf.add, bf.madd, bf.insert, bf.reserve, bf.loadchunk).
 *
 * BF.DEBUG gives RedisBloom's per-level lines (sizes, probes, rates)
 * computed from floodgate's own levels, which are sized differently: the
 * same shape, other numbers (docs/bloom.md).
 *
 * A filter being loaded by BF.LOADCHUNK (bloom_types.h) answers BF.INFO,
 * BF.CARD and BF.DEBUG from its header; lookups and adds refuse it, since the bits that
 * have not arrived would make them answer wrongly (a false "certainly not",
 * or an add that a later chunk overwrites).
 *
 * floodgate.bf-commands decides at load whether these commands are created:
 * RedisBloom (bundled with Redis 8) owns the same names, and whichever
 * module comes second cannot have them. `auto` creates them when no other
 * module has, `yes` always tries (a clash is then a warning), `no` never
 * does. Policies' Bloom lists do not use these commands, nor do the filters
 * already stored, whose data type is floodgate's own and always loads.
 */
#include "t_bloom.h"

#include <ctype.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>

#include "../core/messages.h"
#include "../core/params.h"
#include "args.h"
#include "bloom_types.h"

/* What BF.ADD, BF.MADD and BF.INSERT create when the key is empty: fixed,
 * so that a replica creates the same filter as its master. */
#define DEFAULT_ERROR     0.01
#define DEFAULT_CAPACITY  100
#define DEFAULT_EXPANSION 2

static const char ERR_NOT_FOUND[] = "ERR not found";
static const char ERR_LOADING[] = "ERR filter is still being loaded by BF.LOADCHUNK";

static long long stat_adds, stat_checks;

typedef struct filter_options {
    double error;
    long long capacity;
    long long expansion; /* ignored when nonscaling */
    bool nonscaling;
    bool nocreate;
} filter_options;

static const filter_options defaults = {DEFAULT_ERROR, DEFAULT_CAPACITY, DEFAULT_EXPANSION, false,
                                        false};

/* Replies an error; 0, so that a parser can return it. */
static int refuse(RedisModuleCtx *ctx, const char *error) {
    RedisModule_ReplyWithError(ctx, error);
    return 0;
}

/* ================================================================ writes */

/* After a command changed a filter: WATCH and keyspace subscribers get the
 * key. */
static void key_changed(RedisModuleCtx *ctx, RedisModuleString *keyname, const char *event) {
    RedisModule_SignalModifiedKey(ctx, keyname);
    RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_MODULE, event, keyname);
}

/* ... and replicas and the AOF get the command as it was sent. */
static void changed(RedisModuleCtx *ctx, RedisModuleString *keyname, const char *event) {
    RedisModule_ReplicateVerbatim(ctx);
    key_changed(ctx, keyname, event);
}

/* Creates a filter in an empty key opened for writing; replies and returns
 * NULL when it cannot be made (too big for the core, a memory bound, no
 * memory). */
static bloom_value *create_filter(RedisModuleCtx *ctx, RedisModuleKey *key,
                                  const filter_options *o) {
    const char *refusal;
    bloom_value *v = bloom_create(o->error, (uint64_t)o->capacity,
                                  o->nonscaling ? 0 : (uint32_t)o->expansion, &refusal);
    if (!v) {
        refuse(ctx, refusal);
        return NULL;
    }
    RedisModule_ModuleTypeSetValue(key, BloomType, v);
    return v;
}

/* The filter that an add writes to, created with `o` when the key is empty
 * (*created is then true). Replies and returns NULL when there is none. */
static bloom_value *filter_for_add(RedisModuleCtx *ctx, RedisModuleKey *key,
                                   const filter_options *o, bool *created) {
    bloom_value *v = NULL;
    *created = false;
    switch (bloom_lookup_key(key, &v)) {
    case BLOOM_WRONGTYPE: refuse(ctx, REDISMODULE_ERRORMSG_WRONGTYPE); return NULL;
    case BLOOM_FOUND:
        if (v->loading) refuse(ctx, ERR_LOADING);
        return v->loading ? NULL : v;
    case BLOOM_EMPTY: break;
    }
    if (o->nocreate) {
        refuse(ctx, ERR_NOT_FOUND);
        return NULL;
    }
    v = create_filter(ctx, key, o);
    *created = v != NULL;
    return v;
}

/* Adds the items in order, one answer each (in an array when `multi`),
 * stopping at the first that does not fit: its answer is the error. Sets
 * *added when any item was added; returns how many items were taken (all
 * but the one that did not fit and those after it). */
static int add_items(RedisModuleCtx *ctx, bloom_value *v, RedisModuleString **items, int n,
                     bool multi, bool *added) {
    int taken = 0;
    *added = false;
    if (multi) RedisModule_ReplyWithArray(ctx, REDISMODULE_POSTPONED_LEN);
    for (; taken < n; taken++) {
        size_t len;
        const char *item = RedisModule_StringPtrLen(items[taken], &len);
        const char *refusal;
        fg_bloom_add_result r = bloom_add(v, item, len, &refusal);
        stat_adds++;
        if (refusal) {
            refuse(ctx, refusal);
            break;
        }
        *added |= r == FG_BLOOM_ADDED;
        RedisModule_ReplyWithLongLong(ctx, r == FG_BLOOM_ADDED);
    }
    if (multi) RedisModule_ReplySetArrayLength(ctx, taken < n ? taken + 1 : taken);
    return taken;
}

/* The add commands' common path: argv[items_at..] are the items. A command
 * that stopped at an item that did not fit is replicated without that item
 * and those after it (their absence is what the replica must reproduce, and
 * a replica must never answer its master an error). */
static int add_to_key(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, int items_at,
                      const filter_options *o, bool multi, const char *name, const char *event) {
    RedisModuleKey *key = RedisModule_OpenKey(ctx, argv[1], REDISMODULE_READ | REDISMODULE_WRITE);
    bool created, added;
    bloom_value *v = filter_for_add(ctx, key, o, &created);
    int taken = v ? add_items(ctx, v, argv + items_at, argc - items_at, multi, &added) : 0;
    if (v && (added || created)) {
        if (taken == argc - items_at) {
            changed(ctx, argv[1], event);
        } else {
            RedisModule_Replicate(ctx, name, "v", argv + 1, (size_t)(items_at - 1 + taken));
            key_changed(ctx, argv[1], event);
        }
    }
    RedisModule_CloseKey(key);
    return REDISMODULE_OK;
}

/* BF.ADD key item */
static int add_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 3) return RedisModule_WrongArity(ctx);
    return add_to_key(ctx, argv, argc, 2, &defaults, false, "BF.ADD", "bf.add");
}

/* BF.MADD key item [item ...] */
static int madd_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc < 3) return RedisModule_WrongArity(ctx);
    return add_to_key(ctx, argv, argc, 2, &defaults, true, "BF.MADD", "bf.madd");
}

/* BF.INSERT's options, read as RedisBloom 2.4 reads them. Sets *items_at to
 * the first item; replies and returns 0 on bad input. */
static int parse_insert(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, filter_options *o,
                        int *items_at) {
    *o = defaults;
    int pos = 2, items = -1;
    while (pos < argc && items < 0) {
        size_t len;
        const char *arg = RedisModule_StringPtrLen(argv[pos], &len);
        int first = len ? tolower((unsigned char)arg[0]) : 0;
        if (first == 'i') {
            items = ++pos;
        } else if (first == 'e' || first == 'c') {
            if (++pos == argc) {
                RedisModule_WrongArity(ctx);
                return 0;
            }
            if (first == 'c') {
                if (RedisModule_StringToLongLong(argv[pos], &o->capacity) != REDISMODULE_OK)
                    return refuse(ctx, "Bad capacity");
            } else if (len > 1 && tolower((unsigned char)arg[1]) == 'r') {
                if (RedisModule_StringToDouble(argv[pos], &o->error) != REDISMODULE_OK)
                    return refuse(ctx, "Bad error rate");
            } else if (RedisModule_StringToLongLong(argv[pos], &o->expansion) != REDISMODULE_OK) {
                return refuse(ctx, "Bad expansion");
            }
            pos++;
        } else if (first == 'n') {
            if (len > 2 && tolower((unsigned char)arg[2]) == 'c')
                o->nocreate = true;
            else
                o->nonscaling = true;
            pos++;
        } else {
            return refuse(ctx, "Unknown argument received");
        }
    }
    if (items < 0 || items == argc) {
        RedisModule_WrongArity(ctx);
        return 0;
    }
    if (!(o->error >= FG_BLOOM_MIN_ERROR && o->error < 1) || o->capacity < 1 || o->expansion < 1)
        return refuse(ctx, "Bad argument received");
    char msg[FG_PARAM_MSG];
    if (!fg_param_bloom_capacity(o->capacity, msg, sizeof(msg))) return refuse(ctx, msg);
    if (o->expansion > FG_BLOOM_MAX_EXPANSION) return refuse(ctx, "Bad expansion");
    *items_at = items;
    return 1;
}

/* BF.INSERT key [CAPACITY c] [ERROR e] [EXPANSION x] [NOCREATE] [NONSCALING]
 *           ITEMS item [item ...] */
static int insert_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc < 4) return RedisModule_WrongArity(ctx);
    filter_options o;
    int items_at;
    if (!parse_insert(ctx, argv, argc, &o, &items_at)) return REDISMODULE_OK;
    return add_to_key(ctx, argv, argc, items_at, &o, true, "BF.INSERT", "bf.insert");
}

/* The first argument after the positional ones equal to `name`, or -1. */
static int option_at(RedisModuleString **argv, int argc, const char *name) {
    for (int i = 4; i < argc; i++)
        if (arg_is(argv[i], name)) return i;
    return -1;
}

/* BF.RESERVE's arguments, checked in RedisBloom 2.4's order; then anything
 * that is neither an option nor EXPANSION's value is refused. */
static int parse_reserve(RedisModuleCtx *ctx, RedisModuleString **argv, int argc,
                         filter_options *o) {
    char msg[FG_PARAM_MSG];
    *o = defaults;
    /* Text that is no number is a NaN to the core: a bad error rate. */
    if (RedisModule_StringToDouble(argv[2], &o->error) != REDISMODULE_OK) o->error = NAN;
    if (!fg_param_bloom_error(o->error, msg, sizeof(msg))) return refuse(ctx, msg);
    if (RedisModule_StringToLongLong(argv[3], &o->capacity) != REDISMODULE_OK)
        return refuse(ctx, "ERR bad capacity");
    if (!fg_param_bloom_capacity(o->capacity, msg, sizeof(msg))) return refuse(ctx, msg);
    int nonscaling_at = option_at(argv, argc, "NONSCALING");
    int expansion_at = option_at(argv, argc, "EXPANSION");
    o->nonscaling = nonscaling_at > 0;
    if (expansion_at == argc - 1) return refuse(ctx, "ERR no expansion");
    if (expansion_at > 0) {
        if (o->nonscaling) return refuse(ctx, "Nonscaling filters cannot expand");
        if (RedisModule_StringToLongLong(argv[expansion_at + 1], &o->expansion) != REDISMODULE_OK ||
            o->expansion < 1 || o->expansion > FG_BLOOM_MAX_EXPANSION)
            return refuse(ctx, FG_ERR_BF_BAD_EXPANSION);
    }
    for (int i = 4; i < argc; i++) {
        bool known = arg_is(argv[i], "NONSCALING") ||
                     (expansion_at > 0 && (i == expansion_at || i == expansion_at + 1));
        if (!known)
            return refuse(ctx, "ERR syntax error: the options are EXPANSION expansion and "
                               "NONSCALING");
    }
    return 1;
}

/* BF.RESERVE key error_rate capacity [EXPANSION expansion] [NONSCALING] */
static int reserve_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc < 4 || argc > 7) return RedisModule_WrongArity(ctx);
    filter_options o;
    if (!parse_reserve(ctx, argv, argc, &o)) return REDISMODULE_OK;
    RedisModuleKey *key = RedisModule_OpenKey(ctx, argv[1], REDISMODULE_READ | REDISMODULE_WRITE);
    bloom_value *v;
    bloom_lookup found = bloom_lookup_key(key, &v);
    if (found != BLOOM_EMPTY) {
        refuse(ctx, found == BLOOM_WRONGTYPE ? REDISMODULE_ERRORMSG_WRONGTYPE : FG_ERR_BF_EXISTS);
    } else if (create_filter(ctx, key, &o)) {
        changed(ctx, argv[1], "bf.reserve");
        RedisModule_ReplyWithSimpleString(ctx, "OK");
    }
    RedisModule_CloseKey(key);
    return REDISMODULE_OK;
}

/* BF.LOADCHUNK's answer once a header or a chunk has been stored. */
static void chunk_stored(RedisModuleCtx *ctx, RedisModuleString *keyname) {
    changed(ctx, keyname, "bf.loadchunk");
    RedisModule_ReplyWithSimpleString(ctx, "OK");
}

/* BF.LOADCHUNK key iterator data: iterator 1 creates the key from a
 * header; any other is 1 + the offset where its chunk of bits ends. */
static int loadchunk_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 4) return RedisModule_WrongArity(ctx);
    long long iter;
    if (RedisModule_StringToLongLong(argv[2], &iter) != REDISMODULE_OK)
        return RedisModule_ReplyWithError(ctx, "ERR Second argument must be numeric");
    size_t len;
    const char *data = RedisModule_StringPtrLen(argv[3], &len);
    RedisModuleKey *key = RedisModule_OpenKey(ctx, argv[1], REDISMODULE_READ | REDISMODULE_WRITE);
    bloom_value *v = NULL;
    const char *refusal;
    switch (bloom_lookup_key(key, &v)) {
    case BLOOM_WRONGTYPE: refuse(ctx, REDISMODULE_ERRORMSG_WRONGTYPE); break;
    case BLOOM_EMPTY:
        if (iter != 1) {
            refuse(ctx, ERR_NOT_FOUND);
        } else if ((v = bloom_header_decode(data, len, &refusal)) == NULL) {
            refuse(ctx, refusal);
        } else {
            RedisModule_ModuleTypeSetValue(key, BloomType, v);
            chunk_stored(ctx, argv[1]);
        }
        break;
    case BLOOM_FOUND:
        refusal = iter > 1 && (uint64_t)iter - 1 >= len
                      ? bloom_load_chunk(v, (uint64_t)iter - 1 - len, data, len)
                      : ERR_BAD_DATA;
        if (refusal)
            refuse(ctx, refusal);
        else
            chunk_stored(ctx, argv[1]);
        break;
    }
    RedisModule_CloseKey(key);
    return REDISMODULE_OK;
}

/* ================================================================= reads */

/* Opens a key for reading (NULL when missing) into *key and its filter into
 * *v (NULL when none). Replies and returns false when the key holds another
 * type. */
static bool open_for_reading(RedisModuleCtx *ctx, RedisModuleString *keyname, RedisModuleKey **key,
                             bloom_value **v) {
    *key = RedisModule_OpenKey(ctx, keyname, REDISMODULE_READ);
    *v = NULL;
    if (bloom_lookup_key(*key, v) == BLOOM_WRONGTYPE) {
        RedisModule_CloseKey(*key);
        refuse(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
        return false;
    }
    return true;
}

/* BF.EXISTS and BF.MEXISTS: 1 when an item may be in the filter, 0 when it
 * certainly is not (every item of a missing key). */
static int check_items(RedisModuleCtx *ctx, RedisModuleString *keyname, RedisModuleString **items,
                       int n, bool multi) {
    RedisModuleKey *key;
    bloom_value *v;
    if (!open_for_reading(ctx, keyname, &key, &v)) return REDISMODULE_OK;
    if (v && v->loading) {
        RedisModule_CloseKey(key);
        return RedisModule_ReplyWithError(ctx, ERR_LOADING);
    }
    if (multi) RedisModule_ReplyWithArray(ctx, n);
    for (int i = 0; i < n; i++) {
        size_t len;
        const char *item = RedisModule_StringPtrLen(items[i], &len);
        stat_checks++;
        RedisModule_ReplyWithLongLong(ctx, v && bloom_contains(v, item, len));
    }
    RedisModule_CloseKey(key);
    return REDISMODULE_OK;
}

/* BF.EXISTS key item */
static int exists_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 3) return RedisModule_WrongArity(ctx);
    return check_items(ctx, argv[1], argv + 2, 1, false);
}

/* BF.MEXISTS key item [item ...] */
static int mexists_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc < 3) return RedisModule_WrongArity(ctx);
    return check_items(ctx, argv[1], argv + 2, argc - 2, true);
}

/* BF.INFO's fields: their names in the reply, and as arguments. */
enum { INFO_CAPACITY, INFO_SIZE, INFO_FILTERS, INFO_ITEMS, INFO_EXPANSION, INFO_FIELDS };
static const char *const info_titles[INFO_FIELDS] = {"Capacity", "Size", "Number of filters",
                                                     "Number of items inserted", "Expansion rate"};
static const char *const info_names[INFO_FIELDS] = {"capacity", "size", "filters", "items",
                                                    "expansion"};

static void reply_info_value(RedisModuleCtx *ctx, const fg_bloom *f, int field) {
    switch (field) {
    case INFO_CAPACITY: RedisModule_ReplyWithLongLong(ctx, (long long)fg_bloom_capacity(f)); break;
    case INFO_SIZE: RedisModule_ReplyWithLongLong(ctx, (long long)fg_bloom_bytes(f)); break;
    case INFO_FILTERS: RedisModule_ReplyWithLongLong(ctx, f->nlevels); break;
    case INFO_ITEMS: RedisModule_ReplyWithLongLong(ctx, (long long)fg_bloom_items(f)); break;
    case INFO_EXPANSION:
        if (f->expansion == 0)
            RedisModule_ReplyWithNull(ctx);
        else
            RedisModule_ReplyWithLongLong(ctx, f->expansion);
    }
}

static int info_field(RedisModuleString *arg) {
    for (int i = 0; i < INFO_FIELDS; i++)
        if (arg_is(arg, info_names[i])) return i;
    return -1;
}

/* BF.INFO key [CAPACITY|SIZE|FILTERS|ITEMS|EXPANSION] */
static int info_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 2 && argc != 3) return RedisModule_WrongArity(ctx);
    RedisModuleKey *key;
    bloom_value *v;
    if (!open_for_reading(ctx, argv[1], &key, &v)) return REDISMODULE_OK;
    int field = argc == 3 ? info_field(argv[2]) : -1;
    if (!v) {
        RedisModule_ReplyWithError(ctx, ERR_NOT_FOUND);
    } else if (argc == 3 && field < 0) {
        RedisModule_ReplyWithError(ctx, "Invalid information value");
    } else {
        fg_bloom f = bloom_announced(v);
        RedisModule_ReplyWithArray(ctx, argc == 3 ? 1 : 2 * INFO_FIELDS);
        for (int i = 0; i < INFO_FIELDS; i++) {
            if (argc == 3 && i != field) continue;
            if (argc == 2) RedisModule_ReplyWithSimpleString(ctx, info_titles[i]);
            reply_info_value(ctx, &f, i);
        }
    }
    RedisModule_CloseKey(key);
    return REDISMODULE_OK;
}

/* BF.CARD key */
static int card_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 2) return RedisModule_WrongArity(ctx);
    RedisModuleKey *key;
    bloom_value *v;
    if (!open_for_reading(ctx, argv[1], &key, &v)) return REDISMODULE_OK;
    long long card = 0;
    if (v) {
        fg_bloom f = bloom_announced(v);
        card = (long long)fg_bloom_cardinality(&f);
    }
    RedisModule_ReplyWithLongLong(ctx, card);
    RedisModule_CloseKey(key);
    return REDISMODULE_OK;
}

/* BF.DEBUG's lines, in RedisBloom 2.4's words: "size:<items>", then per
 * level its bit array, the bits an item probes, the width of the item hash the
 * probes come from (64: XXH3 and the legacy hash alike, as in RedisBloom's
 * 64-bit filters), its capacity, its items and its target rate (%g). The
 * bytes are the array proper (BF.INFO's Size also counts the headers and
 * the alignment); an item probes k bits in each of its blocks. */
#define DEBUG_LINE_MAX   256
#define DEBUG_HASH_WIDTH 64

static void reply_debug_level(RedisModuleCtx *ctx, const fg_bloom_level *l) {
    char line[DEBUG_LINE_MAX];
    unsigned long long bytes = (unsigned long long)l->nblocks * FG_BLOOM_BLOCK_BYTES;
    int len = snprintf(line, sizeof(line),
                       "bytes:%llu bits:%llu hashes:%u hashwidth:%d capacity:%llu size:%llu "
                       "ratio:%g",
                       bytes, bytes * 8, (unsigned)l->k * l->blocks, DEBUG_HASH_WIDTH,
                       (unsigned long long)l->capacity, (unsigned long long)l->items, l->error);
    RedisModule_ReplyWithStringBuffer(ctx, line, (size_t)len);
}

/* BF.DEBUG key: the whole filter's items, then one line per level, oldest
 * first (a filter being loaded: as its header describes it, as BF.INFO). */
static int debug_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 2) return RedisModule_WrongArity(ctx);
    RedisModuleKey *key;
    bloom_value *v;
    if (!open_for_reading(ctx, argv[1], &key, &v)) return REDISMODULE_OK;
    if (!v) {
        RedisModule_ReplyWithError(ctx, ERR_NOT_FOUND);
    } else {
        fg_bloom f = bloom_announced(v);
        char line[DEBUG_LINE_MAX];
        int len = snprintf(line, sizeof(line), "size:%llu", (unsigned long long)fg_bloom_items(&f));
        RedisModule_ReplyWithArray(ctx, 1 + f.nlevels);
        RedisModule_ReplyWithStringBuffer(ctx, line, (size_t)len);
        for (uint32_t i = 0; i < f.nlevels; i++)
            reply_debug_level(ctx, &f.levels[i]);
    }
    RedisModule_CloseKey(key);
    return REDISMODULE_OK;
}

/* BF.SCANDUMP key iterator: iterator 0 gives the header and iterator 1;
 * iterator i the chunk at byte i - 1 of the bits and the iterator after
 * it; [0, ""] past the bits that have arrived. */
static int scandump_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 3) return RedisModule_WrongArity(ctx);
    RedisModuleKey *key;
    bloom_value *v;
    if (!open_for_reading(ctx, argv[1], &key, &v)) return REDISMODULE_OK;
    long long iter;
    if (!v) {
        RedisModule_ReplyWithError(ctx, ERR_NOT_FOUND);
    } else if (RedisModule_StringToLongLong(argv[2], &iter) != REDISMODULE_OK) {
        RedisModule_ReplyWithError(ctx, "Second argument must be numeric");
    } else if (iter == 0) {
        size_t len;
        char *header = bloom_header_encode(v, &len);
        RedisModule_ReplyWithArray(ctx, 2);
        RedisModule_ReplyWithLongLong(ctx, 1);
        RedisModule_ReplyWithStringBuffer(ctx, header, len);
        RedisModule_Free(header);
    } else {
        size_t len = 0;
        const char *chunk = iter > 0 ? bloom_chunk_at(v, (uint64_t)iter - 1, &len) : NULL;
        RedisModule_ReplyWithArray(ctx, 2);
        RedisModule_ReplyWithLongLong(ctx, chunk ? iter + (long long)len : 0);
        RedisModule_ReplyWithStringBuffer(ctx, chunk ? chunk : "", len);
    }
    RedisModule_CloseKey(key);
    return REDISMODULE_OK;
}

/* ========================================================= registration */

/* The family's commands (families.c checks their names, then creates them),
 * in lower case: the server's arity errors quote them. */
const command_spec bloom_commands[] = {
    {"bf.reserve", reserve_command, "write deny-oom", 1, 1},
    {"bf.add", add_command, "write deny-oom", 1, 1},
    {"bf.madd", madd_command, "write deny-oom", 1, 1},
    {"bf.insert", insert_command, "write deny-oom", 1, 1},
    {"bf.exists", exists_command, "readonly fast", 1, 1},
    {"bf.mexists", mexists_command, "readonly fast", 1, 1},
    {"bf.info", info_command, "readonly fast", 1, 1},
    {"bf.card", card_command, "readonly fast", 1, 1},
    {"bf.debug", debug_command, "readonly fast", 1, 1},
    {"bf.scandump", scandump_command, "readonly fast", 1, 1},
    {"bf.loadchunk", loadchunk_command, "write deny-oom", 1, 1},
    {0},
};

static int commands_mode = FAMILY_REGISTER_IF_FREE;

static int get_commands_mode(const char *name, void *privdata) {
    (void)name, (void)privdata;
    return commands_mode;
}

static int set_commands_mode(const char *name, int value, void *privdata, RedisModuleString **err) {
    (void)name, (void)privdata, (void)err;
    commands_mode = value;
    return REDISMODULE_OK;
}

int bloom_register_config(RedisModuleCtx *ctx) {
    static const char *names[] = {"auto", "yes", "no"};
    static const int modes[] = {FAMILY_REGISTER_IF_FREE, FAMILY_REGISTER, FAMILY_LEAVE_OUT};
    return RedisModule_RegisterEnumConfig(ctx, "bf-commands", FAMILY_REGISTER_IF_FREE,
                                          REDISMODULE_CONFIG_IMMUTABLE, names, modes, 3,
                                          get_commands_mode, set_commands_mode, NULL, NULL);
}

family_mode bloom_commands_mode(void) {
    return (family_mode)commands_mode;
}

void bloom_info(RedisModuleInfoCtx *ctx) {
    if (RedisModule_InfoAddSection(ctx, "bloom") != REDISMODULE_OK) return;
    RedisModule_InfoAddFieldLongLong(ctx, "bloom_adds", stat_adds);
    RedisModule_InfoAddFieldLongLong(ctx, "bloom_checks", stat_checks);
}
