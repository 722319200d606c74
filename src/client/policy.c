/*
 * policy.c - named policies (floodgate.h, "policies"): fg_policy_* on every
 * backend.
 *
 * Every call first checks what it is given the same way on every backend,
 * with the module's messages (policy_def.c): a name, a definition, a cost
 * and a timeout. Bad input is thus FG_CODE_INVALID without a round trip,
 * and a server only sees commands it accepts. Then it calls through the
 * policy table of the client's backend (backend.h): the client's table on
 * mem: (mem_policy.c), the module's FG.POLICY and FG.CHECK on a server or
 * cluster (remote_policy.c).
 *
 * The policy loader, the same on every backend: a check answered "ERR no
 * such policy" asks the loader once (without a lock held), sets what it
 * gives with fg_policy_set, and checks once more; a loader that has none
 * leaves the error as it was. The backend's policy state keeps the loader
 * (fg_loader).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "client.h"
#include "error.h"
#include "policy_def.h"

#define MISSING "ERR no such policy"

void fg_policy_def_init(fg_policy_def *def) {
    memset(def, 0, sizeof(*def));
    def->ban_after = 1;
    def->allowlist = def->denylist = (fg_list_spec){FG_LIST_EXACT, 0.001, 10000};
}

void fg_policy_names_free(char **names, size_t count) {
    for (size_t i = 0; names != NULL && i < count; i++)
        free(names[i]);
    free(names);
}

/* The check most calls start with: a client and a policy's name, and the
 * client's policies (FG_CODE_UNSUPPORTED when its backend has none). */
static fg_code begin(fg_client *c, const char *name, fg_family_ref *p, fg_error *err) {
    if (c == NULL || name == NULL)
        return fg_set_error(err, FG_CODE_INVALID, "a client and a policy name are required");
    fg_code rc = fg_policy_name_check(name, err);
    return rc != FG_CODE_OK ? rc : fg_client_family(c, FG_FAMILY_POLICIES, p, err);
}

/* ------------------------------------------------------------- changing */

fg_code fg_policy_set(fg_client *c, const char *name, const fg_policy_def *def, fg_error *err) {
    fg_policy_rules rules;
    fg_family_ref p;
    fg_code rc = begin(c, name, &p, err);
    if (rc == FG_CODE_OK && def == NULL)
        rc = fg_set_error(err, FG_CODE_INVALID, "a definition is required");
    if (rc == FG_CODE_OK) rc = fg_policy_def_convert(def, &rules, err);
    return rc != FG_CODE_OK ? rc : p.ops.policies->set(p.s, name, def, &rules, err);
}

fg_code fg_policy_delete(fg_client *c, const char *name, bool *deleted, fg_error *err) {
    fg_family_ref p;
    bool had;
    fg_code rc = begin(c, name, &p, err);
    if (rc == FG_CODE_OK) rc = p.ops.policies->del(p.s, name, &had, err);
    if (rc == FG_CODE_OK && deleted != NULL) *deleted = had;
    return rc;
}

fg_code fg_policy_list_add(fg_client *c, const char *name, bool deny, const void *const *items,
                           const size_t *lens, size_t n, int64_t *added, fg_error *err) {
    fg_family_ref p;
    int64_t count = 0;
    fg_code rc = begin(c, name, &p, err);
    if (rc == FG_CODE_OK)
        rc = fg_require_items(items, lens, n, deny ? "FG.POLICY|DENY" : "FG.POLICY|ALLOW", err);
    if (rc == FG_CODE_OK)
        rc = p.ops.policies->list_add(p.s, name, deny, items, lens, n, &count, err);
    if (rc == FG_CODE_OK && added != NULL) *added = count;
    return rc;
}

void fg_set_policy_loader(fg_client *c, fg_policy_loader loader, void *arg) {
    fg_family_ref p;
    if (c == NULL || fg_client_family(c, FG_FAMILY_POLICIES, &p, NULL) != FG_CODE_OK) return;
    fg_loader *l = p.ops.policies->loader(p.s);
    pthread_mutex_lock(&l->lock);
    l->fn = loader;
    l->arg = arg;
    pthread_mutex_unlock(&l->lock);
}

/* ------------------------------------------------------------- checking */

/* Asks the loader for a missing policy and sets what it gives: FG_CODE_OK
 * when set, else the set's error, or *none when the loader has none. */
static fg_code load(fg_client *c, const fg_family_ref *p, const char *name, bool *none,
                    fg_error *err) {
    fg_loader *l = p->ops.policies->loader(p->s);
    pthread_mutex_lock(&l->lock);
    fg_policy_loader loader = l->fn;
    void *arg = l->arg;
    pthread_mutex_unlock(&l->lock);
    fg_policy_def def;
    fg_policy_def_init(&def);
    *none = loader == NULL || !loader(name, &def, arg);
    return *none ? FG_CODE_INVALID : fg_policy_set(c, name, &def, err);
}

static fg_code check_policy(fg_client *c, const fg_policy_request *q, fg_policy_result *out,
                            fg_error *err) {
    fg_family_ref p;
    fg_code rc = begin(c, q->name, &p, err);
    if (rc == FG_CODE_OK && (q->key == NULL || out == NULL))
        rc = fg_set_error(err, FG_CODE_INVALID, "a key and a result are required");
    if (rc == FG_CODE_OK) rc = fg_policy_request_check(q->cost, q->waits, q->timeout_ms, err);
    if (rc != FG_CODE_OK) return rc;
    fg_error first;
    rc = p.ops.policies->check(p.s, q, out, &first);
    if (rc == FG_CODE_INVALID && strncmp(first.message, MISSING, strlen(MISSING)) == 0) {
        bool none;
        fg_code loaded = load(c, &p, q->name, &none, err);
        if (!none) return loaded == FG_CODE_OK ? p.ops.policies->check(p.s, q, out, err) : loaded;
    }
    if (rc != FG_CODE_OK && err != NULL) *err = first;
    return rc;
}

fg_code fg_policy_check(fg_client *c, const char *name, const char *key, const char *identity,
                        int64_t cost, fg_policy_result *out, fg_error *err) {
    fg_policy_request q = {name, key, identity, cost, false, 0};
    return check_policy(c, &q, out, err);
}

fg_code fg_policy_acquire(fg_client *c, const char *name, const char *key, const char *identity,
                          int64_t cost, int64_t timeout_ms, fg_policy_result *out, fg_error *err) {
    fg_policy_request q = {name, key, identity, cost, true, timeout_ms};
    return check_policy(c, &q, out, err);
}

/* ---------------------------------------------------------- reading back */

fg_code fg_policy_names(fg_client *c, char ***names, size_t *count, fg_error *err) {
    fg_family_ref p;
    if (c == NULL) return fg_set_error(err, FG_CODE_INVALID, "a client is required");
    fg_code rc = fg_client_family(c, FG_FAMILY_POLICIES, &p, err);
    return rc != FG_CODE_OK ? rc : p.ops.policies->names(p.s, names, count, err);
}

fg_code fg_policy_get(fg_client *c, const char *name, fg_policy_info *out, fg_error *err) {
    fg_family_ref p;
    fg_code rc = begin(c, name, &p, err);
    if (rc == FG_CODE_OK) rc = fg_require_result(out, err);
    return rc != FG_CODE_OK ? rc : p.ops.policies->get(p.s, name, out, err);
}
