/*
 * key_dict.c - a dict keyed by database and key name (key_dict.h).
 *
 * The dict key is the db number's bytes followed by the key name, built on
 * the stack for the usual short names, so a lookup allocates nothing.
 */
#include "key_dict.h"

#include <string.h>

typedef struct dict_key {
    char stack[256];
    char *buf;
    size_t len;
} dict_key;

static void dict_key_make(dict_key *n, int dbid, RedisModuleString *key) {
    size_t klen;
    const char *k = RedisModule_StringPtrLen(key, &klen);
    n->len = sizeof(dbid) + klen;
    n->buf = n->len <= sizeof(n->stack) ? n->stack : RedisModule_Alloc(n->len);
    memcpy(n->buf, &dbid, sizeof(dbid));
    memcpy(n->buf + sizeof(dbid), k, klen);
}

static void dict_key_done(dict_key *n) {
    if (n->buf != n->stack) RedisModule_Free(n->buf);
}

void *key_dict_get(RedisModuleDict *d, int dbid, RedisModuleString *key) {
    if (RedisModule_DictSize(d) == 0) return NULL;
    dict_key n;
    dict_key_make(&n, dbid, key);
    void *value = RedisModule_DictGetC(d, n.buf, n.len, NULL);
    dict_key_done(&n);
    return value;
}

void key_dict_set(RedisModuleDict *d, int dbid, RedisModuleString *key, void *value) {
    dict_key n;
    dict_key_make(&n, dbid, key);
    RedisModule_DictSetC(d, n.buf, n.len, value);
    dict_key_done(&n);
}

void key_dict_del(RedisModuleDict *d, int dbid, RedisModuleString *key) {
    dict_key n;
    dict_key_make(&n, dbid, key);
    RedisModule_DictDelC(d, n.buf, n.len, NULL);
    dict_key_done(&n);
}
