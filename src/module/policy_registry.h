/*
 * policy_registry.h - the named policies of the server (docs/policies.md):
 * their rules, the words they were given in, their allow and deny lists and
 * their counters; saved as the aux data of fg-plstat.
 */
#ifndef FG_POLICY_REGISTRY_H
#define FG_POLICY_REGISTRY_H

#include <stdbool.h>

#include "../core/policy.h"
#include "../core/policy_check.h"
#include "bloom_types.h"
#include "redismodule_api.h"

#define POLICY_NAME_MAX FG_POLICY_NAME_MAX
#define POLICY_MSG_MAX  200 /* room for an error message */

typedef enum list_kind { LIST_EXACT, LIST_BLOOM } list_kind;

/* How a list is to be kept, as its rule says. */
typedef struct list_spec {
    list_kind kind;
    double error;     /* LIST_BLOOM */
    int64_t capacity; /* LIST_BLOOM */
} list_spec;

typedef struct policy_list {
    list_kind kind;
    RedisModuleDict *exact; /* LIST_EXACT: the items */
    bloom_value *bloom;     /* LIST_BLOOM */
} policy_list;

/* Final answers since the server started (waited: requests that waited). */
typedef struct policy {
    char name[POLICY_NAME_MAX];
    size_t name_len;
    fg_policy_rules rules;
    /* The rules' words as FG.POLICY SET was given them, for FG.POLICY GET
     * and the RDB: where each limit's algorithm word is, and the words of
     * the penalty (-1: absent, the default applies). */
    RedisModuleString **words;
    int nwords;
    int limit_at[FG_POLICY_MAX_LIMITS];
    int ban_at, after_at, within_at;
    list_spec allow_spec, deny_spec;
    policy_list allow, deny;
    fg_policy_counters counters;
} policy;

/* The policy of that name, NULL when there is none. */
policy *registry_find(const char *name, size_t len);
uint64_t registry_count(void);

/* Calls fn on every policy, in name order. */
void registry_for_each(void (*fn)(policy *p, void *arg), void *arg);

/* The word of an algorithm in a LIMIT rule (TOKEN, ...), and how many
 * numbers follow it. */
const char *policy_algorithm_word(fg_policy_algorithm a);
int policy_algorithm_params(fg_policy_algorithm a);

/* Parses the rules of FG.POLICY SET into a new policy (not registered, no
 * lists yet). NULL with an "ERR ..." message when they are not valid. */
policy *policy_parse(const char *name, size_t name_len, RedisModuleString **words, int nwords,
                     char *msg, size_t msglen);

/* Registers a parsed policy, replacing the one of the same name: lists
 * whose kind is unchanged and the counters are carried over, the old policy
 * is freed. False with a message (and p freed, nothing changed) when a new
 * Bloom list cannot be made. */
bool registry_install(policy *p, char *msg, size_t msglen);

/* Deletes a policy and its lists; false when there was none. */
bool registry_delete(const char *name, size_t len);

/* Deletes every policy. */
void registry_clear(void);

/* The lists. add: 1 when the item is new (a Bloom list: reported new), 0
 * when it was there, -1 when a Bloom list could not grow, with *refusal the
 * reply that says why. remove: whether it was there (exact lists only). */
int list_add(policy_list *l, const char *item, size_t len, const char **refusal);
/* A refusal's reply without its "ERR ", to follow the list's own words. */
const char *list_refusal_reason(const char *refusal);
bool list_contains(const policy_list *l, const char *item, size_t len);
bool list_remove(policy_list *l, const char *item, size_t len);
uint64_t list_entries(const policy_list *l);
const char *list_kind_name(list_kind kind);

/* The registry as aux data: the whole of it, always (at least its version
 * and count), so that loading a file replaces what the server had. */
void registry_aux_save(RedisModuleIO *io);
int registry_aux_load(RedisModuleIO *io);

#endif
