/*
 * policy_registry.c - the named policies of the server.
 *
 * A policy is kept twice: as the core's fg_policy_rules, which checks use,
 * and as the words FG.POLICY SET was given, which FG.POLICY GET shows and
 * the RDB stores. Loading parses the stored words again with the parser of
 * the command, so a policy that loads is exactly one that FG.POLICY SET
 * would have made from those words, with the same conversions and the same
 * refusals; and a replica, which receives FG.POLICY SET verbatim, parses
 * the same words into the same rules as its master.
 *
 * Numbers are read as the single-algorithm commands read them (args.h,
 * core/params.h): a LIMIT rule is refused with the message FG.TOKEN or
 * FG.FIXED would give for the same numbers.
 *
 * Lists: an exact list is a dict of its items; a Bloom list is a scalable
 * filter (bloom_types.h, expansion 2), so it grows past its capacity
 * instead of failing, and never forgets an item, nor removes one. Replacing
 * a policy keeps a list whose kind (exact or Bloom) is unchanged, with the
 * filter it was made with; a list whose kind changes starts empty.
 *
 * Aux data (the type's encoding version 1): a version, the number of
 * policies, then per policy its name, its words, and its two lists (the
 * kind, then the exact items, or the Bloom filter's dump header and bit
 * chunks as bloom_types.c dumps them, checked as BF.LOADCHUNK checks them).
 * Counters are not saved: they count since the server started.
 */
#include "policy_registry.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../core/messages.h"
#include "../core/params.h"
#include "args.h"

#define AUX_VERSION     1
#define BLOOM_EXPANSION 2
#define MAX_RULE_WORDS  256 /* far above what valid rules can hold (about 55) */
#define QUOTED_MAX      64  /* bytes of a user's word quoted in an error */

static RedisModuleDict *policies; /* name -> policy */

/* ------------------------------------------------------------------ names */

static RedisModuleDict *registry(void) {
    if (!policies) policies = RedisModule_CreateDict(NULL);
    return policies;
}

policy *registry_find(const char *name, size_t len) {
    return RedisModule_DictGetC(registry(), (void *)name, len, NULL);
}

uint64_t registry_count(void) {
    return RedisModule_DictSize(registry());
}

void registry_for_each(void (*fn)(policy *p, void *arg), void *arg) {
    RedisModuleDictIter *it = RedisModule_DictIteratorStartC(registry(), "^", NULL, 0);
    policy *p;
    while (RedisModule_DictNextC(it, NULL, (void **)&p))
        fn(p, arg);
    RedisModule_DictIteratorStop(it);
}

/* ------------------------------------------------------------------ lists */

const char *list_kind_name(list_kind kind) {
    return kind == LIST_BLOOM ? "bloom" : "exact";
}

/* Makes the empty list a spec describes; false with the reply that
 * refuses its Bloom filter (too large, a memory bound, no memory). */
static bool list_make(policy_list *l, const list_spec *spec, const char **refusal) {
    memset(l, 0, sizeof(*l));
    l->kind = spec->kind;
    if (spec->kind == LIST_EXACT) {
        l->exact = RedisModule_CreateDict(NULL);
        return true;
    }
    l->bloom = bloom_create(spec->error, (uint64_t)spec->capacity, BLOOM_EXPANSION, refusal);
    return l->bloom != NULL;
}

static void list_free(policy_list *l) {
    if (l->exact) RedisModule_FreeDict(NULL, l->exact);
    if (l->bloom) bloom_destroy(l->bloom);
    memset(l, 0, sizeof(*l));
}

int list_add(policy_list *l, const char *item, size_t len, const char **refusal) {
    *refusal = NULL;
    if (l->kind == LIST_EXACT)
        return RedisModule_DictSetC(l->exact, (void *)item, len, (void *)1) == REDISMODULE_OK;
    fg_bloom_add_result r = bloom_add(l->bloom, item, len, refusal);
    return *refusal ? -1 : r == FG_BLOOM_ADDED;
}

const char *list_refusal_reason(const char *refusal) {
    return strncmp(refusal, "ERR ", 4) == 0 ? refusal + 4 : refusal;
}

bool list_contains(const policy_list *l, const char *item, size_t len) {
    if (l->kind == LIST_BLOOM) return bloom_contains(l->bloom, item, len);
    if (RedisModule_DictSize(l->exact) == 0) return false;
    int missing = 1;
    RedisModule_DictGetC(l->exact, (void *)item, len, &missing);
    return !missing;
}

bool list_remove(policy_list *l, const char *item, size_t len) {
    return l->kind == LIST_EXACT &&
           RedisModule_DictDelC(l->exact, (void *)item, len, NULL) == REDISMODULE_OK;
}

uint64_t list_entries(const policy_list *l) {
    return l->kind == LIST_EXACT ? RedisModule_DictSize(l->exact) : fg_bloom_items(&l->bloom->f);
}

/* --------------------------------------------------------------- policies */

static policy *policy_new(const char *name, size_t name_len) {
    policy *p = RedisModule_Alloc(sizeof(*p));
    memset(p, 0, sizeof(*p));
    memcpy(p->name, name, name_len);
    p->name_len = name_len;
    p->ban_at = p->after_at = p->within_at = -1;
    return p;
}

static void policy_free(policy *p) {
    for (int i = 0; i < p->nwords; i++)
        RedisModule_FreeString(NULL, p->words[i]);
    RedisModule_Free(p->words);
    list_free(&p->allow);
    list_free(&p->deny);
    RedisModule_Free(p);
}

/* ---------------------------------------------------------------- parsing */

typedef struct algorithm {
    const char *word;
    fg_policy_algorithm id;
    int nparams;
    const char *params; /* their names, for a rule that lacks some */
} algorithm;

static const algorithm algorithms[] = {
    {"TOKEN", FG_POLICY_TOKEN, 2, "capacity refill_per_sec"},
    {"LEAKY", FG_POLICY_LEAKY, 2, "capacity leak_per_sec"},
    {"GCRA", FG_POLICY_GCRA, 3, "capacity count period_ms"},
    {"FIXED", FG_POLICY_FIXED, 2, "limit window_ms"},
    {"SLIDING", FG_POLICY_SLIDING, 2, "limit window_ms"},
};
#define ALGORITHM_COUNT (sizeof(algorithms) / sizeof(algorithms[0]))

static const algorithm *algorithm_of(fg_policy_algorithm a) {
    for (size_t i = 0; i < ALGORITHM_COUNT; i++)
        if (algorithms[i].id == a) return &algorithms[i];
    return &algorithms[0]; /* rules hold known algorithms only */
}

const char *policy_algorithm_word(fg_policy_algorithm a) {
    return algorithm_of(a)->word;
}

int policy_algorithm_params(fg_policy_algorithm a) {
    return algorithm_of(a)->nparams;
}

/* What a parse works through: the words, the next one, the message. */
typedef struct parser {
    RedisModuleString **words;
    int nwords, at;
    char *msg;
    size_t msglen;
    bool penalty, shadow, allowlist, denylist; /* rules seen */
} parser;

static bool refuse(parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static bool refuse(parser *ps, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ps->msg, ps->msglen, fmt, ap);
    va_end(ap);
    return false;
}

/* A user's word for an error message: at most QUOTED_MAX bytes, control
 * bytes replaced, so the message stays one printable line. */
static const char *quoted(RedisModuleString *word, char buf[QUOTED_MAX + 1]) {
    size_t len;
    const char *s = RedisModule_StringPtrLen(word, &len);
    if (len > QUOTED_MAX) len = QUOTED_MAX;
    for (size_t i = 0; i < len; i++)
        buf[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
    buf[len] = '\0';
    return buf;
}

/* Whether `n` words follow the current one. */
static bool has_values(const parser *ps, int n) {
    return ps->at + n < ps->nwords;
}

static RedisModuleString *value(const parser *ps, int i) {
    return ps->words[ps->at + i];
}

static bool read_duration(parser *ps, RedisModuleString *w, const char *name, int64_t *us) {
    double ms;
    return read_decimal(w, name, &ms, ps->msg, ps->msglen) &&
           fg_param_duration_us(ms, name, us, ps->msg, ps->msglen);
}

/* The numbers of a limit, read and converted as the command of the same
 * algorithm reads them (t_ratelimit.c). */
static bool parse_limit_params(parser *ps, const algorithm *a, RedisModuleString **w,
                               fg_policy_limit *l) {
    int64_t integer;
    double x, y;
    char *msg = ps->msg;
    size_t n = ps->msglen;
    l->algorithm = a->id;
    switch (a->id) {
    case FG_POLICY_TOKEN:
    case FG_POLICY_LEAKY: {
        const char *rate = a->id == FG_POLICY_TOKEN ? "refill_per_sec" : "leak_per_sec";
        return read_integer(w[0], "capacity", INT64_MIN, INT64_MAX, &integer, msg, n) &&
               read_decimal(w[1], rate, &x, msg, n) &&
               fg_param_bucket(integer, x, rate, &l->p.bucket, msg, n);
    }
    case FG_POLICY_GCRA:
        return read_integer(w[0], "capacity", INT64_MIN, INT64_MAX, &integer, msg, n) &&
               read_decimal(w[1], "count", &x, msg, n) &&
               read_decimal(w[2], "period_ms", &y, msg, n) &&
               fg_param_gcra(integer, x, y, &l->p.bucket, msg, n);
    case FG_POLICY_FIXED:
        return read_integer(w[0], "limit", INT64_MIN, INT64_MAX, &l->p.fixed.limit, msg, n) &&
               read_decimal(w[1], "window_ms", &x, msg, n) &&
               fg_param_window(l->p.fixed.limit, INT64_MAX, x, &l->p.fixed.window_us, msg, n);
    case FG_POLICY_SLIDING:
        return read_integer(w[0], "limit", INT64_MIN, INT64_MAX, &l->p.sliding.limit, msg, n) &&
               read_decimal(w[1], "window_ms", &x, msg, n) &&
               fg_param_window(l->p.sliding.limit, INT64_MAX, x, &l->p.sliding.window_us, msg, n);
    }
    return false;
}

/* LIMIT <algorithm> numbers... */
static bool parse_limit(parser *ps, policy *p) {
    char q[QUOTED_MAX + 1];
    if (p->rules.nlimits == FG_POLICY_MAX_LIMITS)
        return refuse(ps, FG_ERR_POLICY_NLIMITS, FG_POLICY_MAX_LIMITS);
    if (!has_values(ps, 1)) return refuse(ps, "ERR LIMIT needs an algorithm");
    const algorithm *a = NULL;
    for (size_t i = 0; i < ALGORITHM_COUNT; i++)
        if (arg_is(value(ps, 1), algorithms[i].word)) a = &algorithms[i];
    if (!a) return refuse(ps, FG_ERR_POLICY_ALGORITHM, quoted(value(ps, 1), q));
    if (!has_values(ps, 1 + a->nparams))
        return refuse(ps, "ERR LIMIT %s needs %s", a->word, a->params);
    fg_policy_limit *l = &p->rules.limits[p->rules.nlimits];
    if (!parse_limit_params(ps, a, ps->words + ps->at + 2, l)) return false;
    p->limit_at[p->rules.nlimits++] = ps->at + 1;
    ps->at += 2 + a->nparams;
    return true;
}

/* PENALTY ban_ms [AFTER n] [WITHIN window_ms] */
static bool parse_penalty(parser *ps, policy *p) {
    fg_policy_penalty *pen = &p->rules.penalty;
    if (!has_values(ps, 1)) return refuse(ps, "ERR PENALTY needs ban_ms");
    if (!read_duration(ps, value(ps, 1), "ban_ms", &pen->ban_us)) return false;
    p->ban_at = ps->at + 1;
    ps->at += 2;
    while (ps->at < ps->nwords) {
        bool after = arg_is(value(ps, 0), "AFTER");
        if (!after && !arg_is(value(ps, 0), "WITHIN")) break;
        const char *word = after ? "AFTER" : "WITHIN";
        int *seen = after ? &p->after_at : &p->within_at;
        if (*seen >= 0) return refuse(ps, ERR_GIVEN_TWICE, word);
        if (!has_values(ps, 1)) return refuse(ps, ERR_NEEDS_VALUE, word);
        bool ok = after ? read_integer(value(ps, 1), "AFTER", 1, FG_POLICY_MAX_AFTER, &pen->after,
                                       ps->msg, ps->msglen)
                        : read_duration(ps, value(ps, 1), "WITHIN", &pen->within_us);
        if (!ok) return false;
        *seen = ps->at + 1;
        ps->at += 2;
    }
    if (p->after_at < 0) pen->after = 1;
    if (p->within_at < 0) pen->within_us = pen->ban_us;
    return true;
}

/* ALLOWLIST|DENYLIST EXACT | BLOOM error capacity */
static bool parse_list(parser *ps, const char *rule, list_spec *spec) {
    if (has_values(ps, 1) && arg_is(value(ps, 1), "EXACT")) {
        spec->kind = LIST_EXACT;
        ps->at += 2;
        return true;
    }
    if (!has_values(ps, 1) || !arg_is(value(ps, 1), "BLOOM"))
        return refuse(ps, FG_ERR_POLICY_LIST, rule);
    if (!has_values(ps, 3)) return refuse(ps, "ERR %s BLOOM needs error capacity", rule);
    double error;
    if (!read_decimal(value(ps, 2), "error", &error, ps->msg, ps->msglen) ||
        !fg_param_list_error(error, ps->msg, ps->msglen) ||
        !read_integer(value(ps, 3), "capacity", 1, FG_BLOOM_MAX_CAPACITY, &spec->capacity, ps->msg,
                      ps->msglen))
        return false;
    spec->kind = LIST_BLOOM;
    spec->error = error;
    ps->at += 4;
    return true;
}

/* A rule that may be given once: false (with the message) the second time. */
static bool once(parser *ps, bool *seen, const char *rule) {
    if (*seen) return refuse(ps, ERR_GIVEN_TWICE, rule);
    *seen = true;
    return true;
}

static bool parse_rule(parser *ps, policy *p) {
    RedisModuleString *w = value(ps, 0);
    char q[QUOTED_MAX + 1];
    if (arg_is(w, "LIMIT")) return parse_limit(ps, p);
    if (arg_is(w, "PENALTY")) return once(ps, &ps->penalty, "PENALTY") && parse_penalty(ps, p);
    if (arg_is(w, "SHADOW")) {
        if (!once(ps, &ps->shadow, "SHADOW")) return false;
        p->rules.shadow = true;
        ps->at++;
        return true;
    }
    if (arg_is(w, "ALLOWLIST"))
        return once(ps, &ps->allowlist, "ALLOWLIST") && parse_list(ps, "ALLOWLIST", &p->allow_spec);
    if (arg_is(w, "DENYLIST"))
        return once(ps, &ps->denylist, "DENYLIST") && parse_list(ps, "DENYLIST", &p->deny_spec);
    return refuse(ps, "ERR unknown rule '%s'", quoted(w, q));
}

/* Whether a request can be decided at all: a bucket whose capacity times
 * its emission interval overflows fails every check, as FG.TOKEN fails
 * with the same numbers. Tried at time 0, so that the answer never depends
 * on the clock (a replica or a loader must accept what the master did). */
static bool decidable(const fg_policy_rules *rules) {
    fg_policy_state s, next;
    fg_policy_decision d;
    fg_policy_state_init(&s, rules);
    return fg_policy_decide(&s, rules, 0, 1, &d, &next) != FG_EOVERFLOW;
}

static void keep_words(policy *p, RedisModuleString **words, int nwords) {
    p->words = RedisModule_Alloc(sizeof(*p->words) * (size_t)(nwords ? nwords : 1));
    for (int i = 0; i < nwords; i++) {
        size_t len;
        const char *s = RedisModule_StringPtrLen(words[i], &len);
        p->words[i] = RedisModule_CreateString(NULL, s, len);
    }
    p->nwords = nwords;
}

policy *policy_parse(const char *name, size_t name_len, RedisModuleString **words, int nwords,
                     char *msg, size_t msglen) {
    if (!fg_policy_name_valid(name, name_len)) {
        snprintf(msg, msglen, "%s", FG_ERR_POLICY_NAME);
        return NULL;
    }
    policy *p = policy_new(name, name_len);
    parser ps = {.words = words, .nwords = nwords, .msg = msg, .msglen = msglen};
    bool ok = true;
    while (ok && ps.at < nwords)
        ok = parse_rule(&ps, p);
    if (ok && p->rules.nlimits == 0) ok = refuse(&ps, FG_ERR_POLICY_NLIMITS, FG_POLICY_MAX_LIMITS);
    if (ok && !fg_policy_rules_valid(&p->rules))
        ok = refuse(&ps, "ERR these rules are out of the core's ranges");
    if (ok && !decidable(&p->rules)) ok = refuse(&ps, FG_ERR_OVERFLOW);
    if (!ok) {
        policy_free(p);
        return NULL;
    }
    keep_words(p, words, nwords);
    return p;
}

/* ------------------------------------------------------------ installing */

bool registry_install(policy *p, char *msg, size_t msglen) {
    policy *old = registry_find(p->name, p->name_len);
    bool keep_allow = old && old->allow.kind == p->allow_spec.kind;
    bool keep_deny = old && old->deny.kind == p->deny_spec.kind;
    const char *refusal = NULL;
    if ((!keep_allow && !list_make(&p->allow, &p->allow_spec, &refusal)) ||
        (!keep_deny && !list_make(&p->deny, &p->deny_spec, &refusal))) {
        snprintf(msg, msglen, FG_ERR_POLICY_LIST_MAKE, list_refusal_reason(refusal));
        policy_free(p);
        return false;
    }
    if (old) {
        if (keep_allow) {
            p->allow = old->allow;
            memset(&old->allow, 0, sizeof(old->allow)); /* now p's */
        }
        if (keep_deny) {
            p->deny = old->deny;
            memset(&old->deny, 0, sizeof(old->deny));
        }
        p->counters = old->counters;
        RedisModule_DictReplaceC(registry(), p->name, p->name_len, p);
        policy_free(old);
    } else {
        RedisModule_DictSetC(registry(), p->name, p->name_len, p);
    }
    return true;
}

bool registry_delete(const char *name, size_t len) {
    policy *p = NULL;
    if (RedisModule_DictDelC(registry(), (void *)name, len, &p) != REDISMODULE_OK) return false;
    policy_free(p);
    return true;
}

void registry_clear(void) {
    if (!policies || RedisModule_DictSize(policies) == 0) return;
    RedisModuleDictIter *it = RedisModule_DictIteratorStartC(policies, "^", NULL, 0);
    policy *p;
    while (RedisModule_DictNextC(it, NULL, (void **)&p))
        policy_free(p);
    RedisModule_DictIteratorStop(it);
    RedisModule_FreeDict(NULL, policies);
    policies = NULL;
}

/* --------------------------------------------------------------- aux data */

static void save_list(RedisModuleIO *io, const policy_list *l) {
    RedisModule_SaveUnsigned(io, l->kind);
    if (l->kind == LIST_EXACT) {
        RedisModule_SaveUnsigned(io, RedisModule_DictSize(l->exact));
        RedisModuleDictIter *it = RedisModule_DictIteratorStartC(l->exact, "^", NULL, 0);
        size_t len;
        char *item;
        while ((item = RedisModule_DictNextC(it, &len, NULL)))
            RedisModule_SaveStringBuffer(io, item, len);
        RedisModule_DictIteratorStop(it);
        return;
    }
    size_t len;
    char *header = bloom_header_encode(l->bloom, &len);
    RedisModule_SaveStringBuffer(io, header, len);
    RedisModule_Free(header);
    uint64_t received = bloom_received_bytes(l->bloom);
    for (uint64_t offset = 0; offset < received; offset += len) {
        const char *chunk = bloom_chunk_at(l->bloom, offset, &len);
        RedisModule_SaveStringBuffer(io, chunk, len);
    }
}

static void save_policy(policy *p, void *io) {
    RedisModule_SaveStringBuffer(io, p->name, p->name_len);
    RedisModule_SaveUnsigned(io, (uint64_t)p->nwords);
    for (int i = 0; i < p->nwords; i++) {
        size_t len;
        const char *w = RedisModule_StringPtrLen(p->words[i], &len);
        RedisModule_SaveStringBuffer(io, w, len);
    }
    save_list(io, &p->allow);
    save_list(io, &p->deny);
}

void registry_aux_save(RedisModuleIO *io) {
    RedisModule_SaveUnsigned(io, AUX_VERSION);
    RedisModule_SaveUnsigned(io, registry_count());
    registry_for_each(save_policy, io);
}

/* A string buffer and its length; NULL on a read error. */
static char *load_buffer(RedisModuleIO *io, size_t *len) {
    *len = 0;
    char *s = RedisModule_LoadStringBuffer(io, len);
    return RedisModule_IsIOError(io) ? NULL : s;
}

static bool load_exact(RedisModuleIO *io, policy_list *l) {
    uint64_t n = RedisModule_LoadUnsigned(io);
    if (RedisModule_IsIOError(io)) return false;
    l->exact = RedisModule_CreateDict(NULL);
    for (uint64_t i = 0; i < n; i++) {
        size_t len;
        char *item = load_buffer(io, &len);
        if (!item) return false;
        const char *refusal;
        int added = list_add(l, item, len, &refusal);
        RedisModule_Free(item);
        if (added != 1) return false; /* a duplicate: not a list we wrote */
    }
    return true;
}

/* The header, then chunks until every byte of the filter has arrived. */
static bool load_bloom(RedisModuleIO *io, policy_list *l) {
    size_t len;
    char *header = load_buffer(io, &len);
    if (!header) return false;
    const char *refusal;
    l->bloom = bloom_header_decode(header, len, &refusal);
    RedisModule_Free(header);
    if (!l->bloom) return false;
    while (l->bloom->loading) {
        char *chunk = load_buffer(io, &len);
        if (!chunk) return false;
        refusal = bloom_load_chunk(l->bloom, bloom_received_bytes(l->bloom), chunk, len);
        RedisModule_Free(chunk);
        if (refusal) return false;
    }
    return true;
}

/* A list of the kind its rule says. */
static bool load_list(RedisModuleIO *io, policy_list *l, list_kind kind) {
    uint64_t stored = RedisModule_LoadUnsigned(io);
    if (RedisModule_IsIOError(io) || stored != kind) return false;
    l->kind = kind;
    return kind == LIST_EXACT ? load_exact(io, l) : load_bloom(io, l);
}

/* One policy, parsed from its words; NULL (logged) when it is not one that
 * FG.POLICY SET could have made. */
static policy *load_policy(RedisModuleIO *io) {
    size_t name_len;
    char *name = load_buffer(io, &name_len);
    if (!name) return NULL;
    uint64_t nwords = RedisModule_LoadUnsigned(io);
    policy *p = NULL;
    RedisModuleString *words[MAX_RULE_WORDS];
    uint64_t loaded = 0;
    if (!RedisModule_IsIOError(io) && nwords <= MAX_RULE_WORDS) {
        for (; loaded < nwords; loaded++) {
            size_t len;
            char *w = load_buffer(io, &len);
            if (!w) break;
            words[loaded] = RedisModule_CreateString(NULL, w, len);
            RedisModule_Free(w);
        }
    }
    if (loaded == nwords && nwords <= MAX_RULE_WORDS) {
        char msg[POLICY_MSG_MAX];
        p = policy_parse(name, name_len, words, (int)nwords, msg, sizeof(msg));
        if (!p) RedisModule_LogIOError(io, "warning", "floodgate: a stored policy: %s", msg);
    }
    for (uint64_t i = 0; i < loaded; i++)
        RedisModule_FreeString(NULL, words[i]);
    RedisModule_Free(name);
    if (p && (!load_list(io, &p->allow, p->allow_spec.kind) ||
              !load_list(io, &p->deny, p->deny_spec.kind))) {
        RedisModule_LogIOError(io, "warning", "floodgate: the lists of policy '%.*s' are damaged",
                               (int)p->name_len, p->name);
        policy_free(p);
        p = NULL;
    }
    return p;
}

int registry_aux_load(RedisModuleIO *io) {
    registry_clear();
    uint64_t version = RedisModule_LoadUnsigned(io);
    uint64_t count = RedisModule_LoadUnsigned(io);
    if (RedisModule_IsIOError(io) || version != AUX_VERSION) return REDISMODULE_ERR;
    for (uint64_t i = 0; i < count; i++) {
        policy *p = load_policy(io);
        if (!p) return REDISMODULE_ERR;
        if (RedisModule_DictSetC(registry(), p->name, p->name_len, p) != REDISMODULE_OK) {
            policy_free(p); /* the same name twice */
            return REDISMODULE_ERR;
        }
    }
    return REDISMODULE_OK;
}
