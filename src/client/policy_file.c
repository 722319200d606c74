/*
 * policy_file.c - fg_policies_apply_file: policies from a libconfig file
 * (docs/policies.md, "Config files and the command line").
 *
 * The whole file is read and every entry checked before anything is sent,
 * so a file with a mistake changes nothing. The checks are the library's
 * own (policy_def.c: those of fg_policy_set, with the module's ranges), run
 * field by field, so that a refusal names the file, the line and the field
 * where it was written: "policies.conf:7: policies[0].limits[1].rate: must
 * be greater than 0 and at most 1e+09". An unknown field is an error too,
 * so that a typo never silently drops a rule.
 *
 * libconfig 1.5 reads an integer without the L suffix into 32 bits and
 * silently keeps the low bits of a larger one (limit = 5000000000 would
 * become 705032704). Such a value is read again from the file's text and
 * refused with the spelling that works, rather than applied wrong.
 *
 * Then each policy is set as fg_policy_set sets it (on a cluster: on every
 * master) and its listed items added; the first failure stops the call,
 * with *applied telling how many policies were complete.
 */
#include "policy_file.h"

#include <errno.h>
#include <libconfig.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "policy_def.h"
#include "params.h"

#define FIELD_MAX 96
#define TEXT_MAX  1024

/* Where the parser is: the file, and the field being read. */
typedef struct parser {
    const char *path;
    fg_error *err;
} parser;

/* "path:line: field: problem", and FG_CODE_INVALID. */
static fg_code refuse(const parser *ps, const config_setting_t *s, const char *field,
                      const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static fg_code refuse(const parser *ps, const config_setting_t *s, const char *field,
                      const char *fmt, ...) {
    char what[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    const char *file = s != NULL && config_setting_source_file(s) != NULL
                           ? config_setting_source_file(s)
                           : ps->path;
    int line = s != NULL ? (int)config_setting_source_line(s) : 0;
    if (line > 0)
        return fg_set_error(ps->err, FG_CODE_INVALID, "%s:%d: %s: %s", file, line, field, what);
    return fg_set_error(ps->err, FG_CODE_INVALID, "%s: %s: %s", file, field, what);
}

/* A library refusal ("ERR <param> ...") as the field's: the parameter's
 * name becomes the field's. */
static fg_code refuse_as(const parser *ps, const config_setting_t *s, const char *field,
                         const char *name, const fg_error *why) {
    const char *msg = why->message;
    if (strncmp(msg, "ERR ", 4) == 0) msg += 4;
    const char *rest = strchr(msg, ' ');
    if (name != NULL && rest != NULL) return refuse(ps, s, field, "%s%s", name, rest);
    return refuse(ps, s, field, "%s", msg);
}

/* "parent.name" ("name" at the top). Field names are short; a
 * pathological nesting is cut, not overrun. */
static void join(char *out, const char *parent, const char *name) {
    if (snprintf(out, FIELD_MAX, "%s%s%s", parent, parent[0] != '\0' ? "." : "", name) >= FIELD_MAX)
        out[FIELD_MAX - 1] = '\0';
}

static void join_index(char *out, const char *parent, int i) {
    if (snprintf(out, FIELD_MAX, "%s[%d]", parent, i) >= FIELD_MAX) out[FIELD_MAX - 1] = '\0';
}

/* ------------------------------------------------------------ fields */

/* Every member of group s is one of names[] (NULL-terminated). */
static fg_code only(const parser *ps, const config_setting_t *s, const char *field,
                    const char *const *names, const char *which) {
    for (int i = 0; i < config_setting_length(s); i++) {
        const config_setting_t *m = config_setting_get_elem(s, (unsigned)i);
        bool known = false;
        for (const char *const *n = names; *n != NULL && !known; n++)
            known = strcmp(config_setting_name(m), *n) == 0;
        if (!known) {
            char f[FIELD_MAX];
            join(f, field, config_setting_name(m));
            return refuse(ps, m, f, "unknown field%s%s", which != NULL ? " of " : "",
                          which != NULL ? which : "");
        }
    }
    return FG_CODE_OK;
}

static fg_code group(const parser *ps, const config_setting_t *s, const char *field) {
    if (config_setting_is_group(s)) return FG_CODE_OK;
    return refuse(ps, s, field, "must be a group { ... }");
}

/* Whether the 32-bit value v of integer setting s is what libconfig kept
 * of a larger number written without L: its text, found on the setting's
 * line as "name = number" without L, is beyond 32 bits and has v as its
 * low bits (another setting of that name on the line cannot pass for it). */
static bool truncated(const config_setting_t *s, long long v) {
    const char *file = config_setting_source_file(s), *name = config_setting_name(s);
    FILE *f = file != NULL ? fopen(file, "r") : NULL;
    char text[TEXT_MAX];
    bool found = false;
    for (unsigned line = 1; f != NULL && fgets(text, sizeof(text), f) != NULL; line++) {
        if (line < config_setting_source_line(s)) continue;
        size_t len = strlen(name);
        for (const char *p = strstr(text, name); p != NULL && !found; p = strstr(p + 1, name)) {
            const char *at = p + len + strspn(p + len, " \t");
            if (*at != '=' && *at != ':') continue;
            char *end;
            errno = 0;
            long long written = strtoll(at + 1, &end, 0);
            /* An L number is another setting, which libconfig kept whole. */
            if (end == at + 1 || *end == 'L' || *end == 'l') continue;
            found = errno == ERANGE || ((written < INT32_MIN || written > INT32_MAX) &&
                                        (int32_t)(uint32_t)(unsigned long long)written == v);
        }
        break;
    }
    if (f != NULL) fclose(f);
    return found;
}

static fg_code integer(const parser *ps, const config_setting_t *s, const char *field,
                       int64_t *out) {
    int type = config_setting_type(s);
    if (type != CONFIG_TYPE_INT && type != CONFIG_TYPE_INT64)
        return refuse(ps, s, field, "must be an integer");
    long long v = config_setting_get_int64(s);
    if (type == CONFIG_TYPE_INT && truncated(s, v))
        return refuse(ps, s, field,
                      "does not fit libconfig's 32-bit integers: write it with an L "
                      "suffix (e.g. 5000000000L)");
    *out = v;
    return FG_CODE_OK;
}

static fg_code number(const parser *ps, const config_setting_t *s, const char *field, double *out) {
    if (config_setting_type(s) == CONFIG_TYPE_FLOAT) {
        *out = config_setting_get_float(s);
        return FG_CODE_OK;
    }
    int64_t v;
    if (!config_setting_is_number(s)) return refuse(ps, s, field, "must be a number");
    fg_code rc = integer(ps, s, field, &v);
    *out = (double)v;
    return rc;
}

static fg_code string(const parser *ps, const config_setting_t *s, const char *field,
                      const char **out) {
    if (config_setting_type(s) != CONFIG_TYPE_STRING)
        return refuse(ps, s, field, "must be a string in double quotes");
    *out = config_setting_get_string(s);
    return FG_CODE_OK;
}

/* The member `name` of group g: *m NULL when absent (refused when
 * required); field is set to its name. */
static fg_code member(const parser *ps, const config_setting_t *g, const char *gfield,
                      const char *name, bool required, config_setting_t **m, char *field) {
    join(field, gfield, name);
    *m = config_setting_get_member(g, name);
    if (*m == NULL && required) return refuse(ps, g, field, "missing");
    return FG_CODE_OK;
}

static fg_code member_number(const parser *ps, const config_setting_t *g, const char *gfield,
                             const char *name, bool required, double *out,
                             const config_setting_t **where) {
    char field[FIELD_MAX];
    config_setting_t *m;
    fg_code rc = member(ps, g, gfield, name, required, &m, field);
    *where = m;
    return rc != FG_CODE_OK || m == NULL ? rc : number(ps, m, field, out);
}

static fg_code member_integer(const parser *ps, const config_setting_t *g, const char *gfield,
                              const char *name, bool required, int64_t *out,
                              const config_setting_t **where) {
    char field[FIELD_MAX];
    config_setting_t *m;
    fg_code rc = member(ps, g, gfield, name, required, &m, field);
    *where = m;
    return rc != FG_CODE_OK || m == NULL ? rc : integer(ps, m, field, out);
}

/* ------------------------------------------------------------ limits */

typedef struct algorithm {
    const char *name;
    fg_algorithm algorithm;
    const char *fields[4]; /* "algorithm", then the integer, then the numbers */
    const char *params[3]; /* what the library's messages call them */
} algorithm;

static const algorithm algorithms[] = {
    {"token", FG_TOKEN_BUCKET, {"algorithm", "capacity", "rate"}, {"capacity", "refill_per_sec"}},
    {"leaky", FG_LEAKY_BUCKET, {"algorithm", "capacity", "rate"}, {"capacity", "leak_per_sec"}},
    {"gcra",
     FG_GCRA,
     {"algorithm", "capacity", "count", "period_ms"},
     {"capacity", "count", "period_ms"}},
    {"fixed", FG_FIXED_WINDOW, {"algorithm", "limit", "window_ms"}, {"limit", "window_ms"}},
    {"sliding", FG_SLIDING_WINDOW, {"algorithm", "limit", "window_ms"}, {"limit", "window_ms"}},
};

#define NALGORITHMS (sizeof(algorithms) / sizeof(algorithms[0]))

static const algorithm *find_algorithm(const char *name) {
    for (size_t i = 0; i < NALGORITHMS; i++)
        if (strcmp(algorithms[i].name, name) == 0) return &algorithms[i];
    return NULL;
}

/* The library's refusal of a limit, at the field it names. */
static fg_code refuse_limit(const parser *ps, const config_setting_t *g, const char *gfield,
                            const algorithm *a, const fg_error *why) {
    const char *msg = why->message + (strncmp(why->message, "ERR ", 4) == 0 ? 4 : 0);
    size_t len = strcspn(msg, " ");
    for (size_t i = 0; i < 3 && a->params[i] != NULL; i++) {
        config_setting_t *m = config_setting_get_member(g, a->fields[i + 1]);
        if (strlen(a->params[i]) != len || strncmp(msg, a->params[i], len) != 0 || m == NULL)
            continue;
        char field[FIELD_MAX];
        join(field, gfield, a->fields[i + 1]);
        return refuse_as(ps, m, field, a->fields[i + 1], why);
    }
    return refuse_as(ps, g, gfield, NULL, why);
}

static fg_code read_limit(const parser *ps, const config_setting_t *g, const char *gfield,
                          fg_limit *out) {
    char field[FIELD_MAX];
    config_setting_t *m;
    const char *name = "";
    fg_code rc = group(ps, g, gfield);
    if (rc == FG_CODE_OK) rc = member(ps, g, gfield, "algorithm", true, &m, field);
    if (rc == FG_CODE_OK) rc = string(ps, m, field, &name);
    if (rc != FG_CODE_OK) return rc;
    const algorithm *a = find_algorithm(name);
    if (a == NULL)
        return refuse(ps, m, field, "unknown algorithm '%s' (token, leaky, gcra, fixed, sliding)",
                      name);
    char which[40];
    snprintf(which, sizeof(which), "a %s limit", a->name);
    const char *const names[] = {a->fields[0], a->fields[1], a->fields[2], a->fields[3], NULL};
    if ((rc = only(ps, g, gfield, names, which)) != FG_CODE_OK) return rc;
    const config_setting_t *where;
    double x[2] = {0, 0};
    *out = (fg_limit){a->algorithm, 0, 0, 0};
    rc = member_integer(ps, g, gfield, a->fields[1], true, &out->limit, &where);
    for (int i = 0; i < 2 && rc == FG_CODE_OK && a->fields[i + 2] != NULL; i++)
        rc = member_number(ps, g, gfield, a->fields[i + 2], true, &x[i], &where);
    if (rc != FG_CODE_OK) return rc;
    if (a->algorithm == FG_GCRA) {
        out->rate = x[0];
        out->window_ms = x[1];
    } else if (a->algorithm == FG_TOKEN_BUCKET || a->algorithm == FG_LEAKY_BUCKET) {
        out->rate = x[0];
    } else {
        out->window_ms = x[0];
    }
    fg_policy_limit converted;
    fg_error why;
    if (fg_policy_limit_convert(out, &converted, &why) != FG_CODE_OK)
        return refuse_limit(ps, g, gfield, a, &why);
    return FG_CODE_OK;
}

static fg_code read_limits(const parser *ps, const config_setting_t *policy, const char *pfield,
                           fg_policy_def *def) {
    char field[FIELD_MAX], item[FIELD_MAX];
    config_setting_t *limits;
    fg_code rc = member(ps, policy, pfield, "limits", true, &limits, field);
    if (rc != FG_CODE_OK) return rc;
    if (!config_setting_is_list(limits) && !config_setting_is_array(limits))
        return refuse(ps, limits, field, "must be a list of limits ( { ... }, ... )");
    int n = config_setting_length(limits);
    if (n < 1 || n > FG_MAX_POLICY_LIMITS)
        return refuse(ps, limits, field, "a policy needs 1 to %d limits, not %d",
                      FG_MAX_POLICY_LIMITS, n);
    def->nlimits = (size_t)n;
    for (int i = 0; i < n && rc == FG_CODE_OK; i++) {
        join_index(item, field, i);
        rc = read_limit(ps, config_setting_get_elem(limits, (unsigned)i), item, &def->limits[i]);
    }
    return rc;
}

/* ----------------------------------------------------- penalty and lists */

static fg_code read_penalty(const parser *ps, const config_setting_t *policy, const char *pfield,
                            fg_policy_def *def) {
    static const char *const names[] = {"ban_ms", "after", "within_ms", NULL};
    char field[FIELD_MAX], f[FIELD_MAX];
    config_setting_t *g;
    const config_setting_t *ban, *after = NULL, *within = NULL;
    fg_code rc = member(ps, policy, pfield, "penalty", false, &g, field);
    if (rc != FG_CODE_OK || g == NULL) return rc;
    if ((rc = group(ps, g, field)) != FG_CODE_OK ||
        (rc = only(ps, g, field, names, NULL)) != FG_CODE_OK)
        return rc;
    rc = member_number(ps, g, field, "ban_ms", true, &def->ban_ms, &ban);
    if (rc == FG_CODE_OK)
        rc = member_integer(ps, g, field, "after", false, &def->ban_after, &after);
    if (rc == FG_CODE_OK)
        rc = member_number(ps, g, field, "within_ms", false, &def->ban_within_ms, &within);
    if (rc != FG_CODE_OK) return rc;
    char msg[160];
    join(f, field, "ban_ms");
    if (!fg_param_number(def->ban_ms, "ban_ms", FG_MAX_DURATION_MS, msg, sizeof(msg)))
        return refuse(ps, ban, f, "%s", msg + 4);
    fg_policy_penalty converted;
    fg_error why;
    if (fg_policy_penalty_convert(def->ban_ms, def->ban_after, def->ban_within_ms, &converted,
                                  &why) == FG_CODE_OK)
        return FG_CODE_OK;
    /* The library names AFTER and WITHIN as the command does. */
    const char *msg_name = why.message + 4;
    if (strncmp(msg_name, "AFTER ", 6) == 0 && after != NULL) {
        join(f, field, "after");
        return refuse_as(ps, after, f, "after", &why);
    }
    if (strncmp(msg_name, "WITHIN ", 7) == 0 && within != NULL) {
        join(f, field, "within_ms");
        return refuse_as(ps, within, f, "within_ms", &why);
    }
    join(f, field, "ban_ms");
    return refuse_as(ps, ban, f, "ban_ms", &why);
}

static fg_code read_items(const parser *ps, const config_setting_t *s, const char *field,
                          const char ***items, size_t *n) {
    if (!config_setting_is_list(s) && !config_setting_is_array(s))
        return refuse(ps, s, field, "must be a list of strings [ \"...\", ... ]");
    *n = (size_t)config_setting_length(s);
    if (*n == 0) return FG_CODE_OK;
    if ((*items = calloc(*n, sizeof(**items))) == NULL)
        return fg_set_error(ps->err, FG_CODE_NOMEM, "out of memory");
    char item[FIELD_MAX];
    fg_code rc = FG_CODE_OK;
    for (size_t i = 0; i < *n && rc == FG_CODE_OK; i++) {
        join_index(item, field, (int)i);
        rc = string(ps, config_setting_get_elem(s, (unsigned)i), item, &(*items)[i]);
    }
    return rc;
}

/* allowlist or denylist = { kind = "exact"|"bloom"; error; capacity; items }. */
static fg_code read_list(const parser *ps, const config_setting_t *policy, const char *pfield,
                         const char *name, fg_list_spec *spec, const char ***items, size_t *n) {
    static const char *const exact[] = {"kind", "items", NULL};
    static const char *const bloom[] = {"kind", "error", "capacity", "items", NULL};
    char field[FIELD_MAX], f[FIELD_MAX];
    config_setting_t *g, *m;
    const config_setting_t *error = NULL, *capacity = NULL;
    const char *kind = "exact";
    fg_code rc = member(ps, policy, pfield, name, false, &g, field);
    if (rc != FG_CODE_OK || g == NULL) return rc;
    if ((rc = group(ps, g, field)) != FG_CODE_OK) return rc;
    if ((rc = member(ps, g, field, "kind", false, &m, f)) != FG_CODE_OK ||
        (m != NULL && (rc = string(ps, m, f, &kind)) != FG_CODE_OK))
        return rc;
    bool is_bloom = strcmp(kind, "bloom") == 0;
    if (!is_bloom && strcmp(kind, "exact") != 0)
        return refuse(ps, m, f, "unknown kind '%s' (exact, bloom)", kind);
    spec->kind = is_bloom ? FG_LIST_BLOOM : FG_LIST_EXACT;
    if ((rc = only(ps, g, field, is_bloom ? bloom : exact,
                   is_bloom ? "a bloom list" : "an exact list")) != FG_CODE_OK)
        return rc;
    rc = member_number(ps, g, field, "error", false, &spec->error, &error);
    if (rc == FG_CODE_OK)
        rc = member_integer(ps, g, field, "capacity", false, &spec->capacity, &capacity);
    if (rc != FG_CODE_OK) return rc;
    /* The error first, with a valid capacity, then the capacity: the
     * refusal is the field's. */
    fg_list_spec probe = {FG_LIST_BLOOM, spec->error, 1};
    fg_error why;
    if (is_bloom && fg_list_spec_check(&probe, name, &why) != FG_CODE_OK) {
        join(f, field, "error");
        return refuse_as(ps, error != NULL ? error : g, f, NULL, &why);
    }
    if (is_bloom && fg_list_spec_check(spec, name, &why) != FG_CODE_OK) {
        join(f, field, "capacity");
        return refuse_as(ps, capacity != NULL ? capacity : g, f, NULL, &why);
    }
    if ((rc = member(ps, g, field, "items", false, &m, f)) != FG_CODE_OK || m == NULL) return rc;
    return read_items(ps, m, f, items, n);
}

/* ------------------------------------------------------------ policies */

static fg_code read_policy(const parser *ps, const config_setting_t *g, const char *pfield,
                           fg_policy_entry *e) {
    static const char *const names[] = {"name",      "limits",   "penalty", "shadow",
                                        "allowlist", "denylist", NULL};
    char field[FIELD_MAX];
    config_setting_t *m;
    fg_error why;
    e->line = (int)config_setting_source_line(g);
    fg_policy_def_init(&e->def);
    fg_code rc = group(ps, g, pfield);
    if (rc == FG_CODE_OK) rc = only(ps, g, pfield, names, "a policy");
    if (rc == FG_CODE_OK) rc = member(ps, g, pfield, "name", true, &m, field);
    if (rc == FG_CODE_OK) rc = string(ps, m, field, &e->name);
    if (rc == FG_CODE_OK && fg_policy_name_check(e->name, &why) != FG_CODE_OK)
        rc = refuse_as(ps, m, field, NULL, &why);
    if (rc == FG_CODE_OK) rc = read_limits(ps, g, pfield, &e->def);
    if (rc == FG_CODE_OK) rc = read_penalty(ps, g, pfield, &e->def);
    if (rc == FG_CODE_OK &&
        (rc = member(ps, g, pfield, "shadow", false, &m, field)) == FG_CODE_OK && m != NULL) {
        if (config_setting_type(m) != CONFIG_TYPE_BOOL)
            return refuse(ps, m, field, "must be true or false");
        e->def.shadow = config_setting_get_bool(m);
    }
    if (rc == FG_CODE_OK)
        rc = read_list(ps, g, pfield, "allowlist", &e->def.allowlist, &e->allow, &e->nallow);
    if (rc == FG_CODE_OK)
        rc = read_list(ps, g, pfield, "denylist", &e->def.denylist, &e->deny, &e->ndeny);
    /* Everything was checked field by field; this is what fg_policy_set
     * checks, in case the two ever disagree. */
    fg_policy_rules rules;
    if (rc == FG_CODE_OK && fg_policy_def_convert(&e->def, &rules, &why) != FG_CODE_OK)
        rc = refuse_as(ps, g, pfield, NULL, &why);
    return rc;
}

static fg_code read_policies(const parser *ps, fg_policy_file *f) {
    static const char *const top[] = {"policies", NULL};
    char field[FIELD_MAX];
    const config_setting_t *root = config_root_setting(f->config);
    config_setting_t *list;
    fg_code rc = only(ps, root, "", top, NULL);
    if (rc == FG_CODE_OK) rc = member(ps, root, "", "policies", true, &list, field);
    if (rc != FG_CODE_OK) return rc;
    if (!config_setting_is_list(list))
        return refuse(ps, list, field, "must be a list of policies ( { ... }, ... )");
    f->count = (size_t)config_setting_length(list);
    if (f->count > 0 && (f->entries = calloc(f->count, sizeof(*f->entries))) == NULL)
        return fg_set_error(ps->err, FG_CODE_NOMEM, "out of memory");
    for (size_t i = 0; i < f->count && rc == FG_CODE_OK; i++) {
        const config_setting_t *g = config_setting_get_elem(list, (unsigned)i);
        char pfield[FIELD_MAX];
        join_index(pfield, "policies", (int)i);
        rc = read_policy(ps, g, pfield, &f->entries[i]);
        for (size_t j = 0; j < i && rc == FG_CODE_OK; j++)
            if (strcmp(f->entries[j].name, f->entries[i].name) == 0) {
                join(field, pfield, "name");
                rc = refuse(ps, config_setting_get_member(g, "name"), field,
                            "policy '%s' is given twice (first at line %d)", f->entries[i].name,
                            f->entries[j].line);
            }
    }
    return rc;
}

fg_policy_file *fg_policy_file_read(const char *path, fg_error *err) {
    parser ps = {path, err};
    FILE *probe = fopen(path, "r"); /* for errno: libconfig only says "file I/O error" */
    if (probe == NULL) {
        fg_set_error(err, FG_CODE_INVALID, "%s: cannot read: %s", path, strerror(errno));
        return NULL;
    }
    fclose(probe);
    fg_policy_file *f = calloc(1, sizeof(*f));
    if (f == NULL || (f->config = malloc(sizeof(config_t))) == NULL) {
        free(f);
        fg_set_error(err, FG_CODE_NOMEM, "out of memory");
        return NULL;
    }
    f->path = path;
    config_init(f->config);
    fg_code rc;
    if (config_read_file(f->config, path) != CONFIG_TRUE) {
        const char *file = config_error_file(f->config);
        rc = fg_set_error(err, FG_CODE_INVALID, "%s:%d: %s", file != NULL ? file : path,
                          config_error_line(f->config), config_error_text(f->config));
    } else {
        rc = read_policies(&ps, f);
    }
    if (rc == FG_CODE_OK) return f;
    fg_policy_file_free(f);
    return NULL;
}

void fg_policy_file_free(fg_policy_file *f) {
    if (f == NULL) return;
    for (size_t i = 0; i < f->count; i++) {
        free(f->entries[i].allow);
        free(f->entries[i].deny);
    }
    free(f->entries);
    config_destroy(f->config);
    free(f->config);
    free(f);
}

/* ------------------------------------------------------------- applying */

static fg_code add_items(fg_client *c, const fg_policy_entry *e, bool deny, fg_error *err) {
    const char **items = deny ? e->deny : e->allow;
    size_t n = deny ? e->ndeny : e->nallow;
    if (n == 0) return FG_CODE_OK;
    size_t *lens = malloc(n * sizeof(*lens));
    if (lens == NULL) return fg_set_error(err, FG_CODE_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++)
        lens[i] = strlen(items[i]);
    fg_code rc =
        fg_policy_list_add(c, e->name, deny, (const void *const *)items, lens, n, NULL, err);
    free(lens);
    return rc;
}

/* A failure to apply entry i, told with its place in the file. */
static fg_code applying(const fg_policy_file *f, size_t i, fg_code rc, fg_error *err) {
    fg_error why = *err;
    return fg_set_error(err, rc, "%s:%d: policy '%s': %s", f->path, f->entries[i].line,
                        f->entries[i].name, why.message);
}

fg_code fg_policies_apply_file(fg_client *c, const char *path, size_t *applied, fg_error *given) {
    fg_error mine, *err = given != NULL ? given : &mine;
    if (applied != NULL) *applied = 0;
    if (c == NULL || path == NULL)
        return fg_set_error(err, FG_CODE_INVALID, "a client and a path are required");
    fg_policy_file *f = fg_policy_file_read(path, err);
    if (f == NULL) return err->code;
    fg_code rc = FG_CODE_OK;
    for (size_t i = 0; i < f->count && rc == FG_CODE_OK; i++) {
        const fg_policy_entry *e = &f->entries[i];
        rc = fg_policy_set(c, e->name, &e->def, err);
        if (rc == FG_CODE_OK) rc = add_items(c, e, false, err);
        if (rc == FG_CODE_OK) rc = add_items(c, e, true, err);
        if (rc != FG_CODE_OK)
            applying(f, i, rc, err);
        else if (applied != NULL)
            (*applied)++;
    }
    fg_policy_file_free(f);
    return rc;
}
