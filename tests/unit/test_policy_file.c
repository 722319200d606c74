/*
 * test_policy_file.c - policies from libconfig files (policy_file.c): good
 * files read into exact definitions and applied on mem:, and every refusal
 * with the file, line and field it names, before anything is applied.
 */
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "floodgate.h"
#include "mem/mem_policy.h"
#include "policy_file.h"

static char path[64];

/* Writes text to a fresh temporary file, named in `path`. */
static void write_file(const char *text) {
    snprintf(path, sizeof(path), "/tmp/fg-policy-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static fg_policy_file *read_ok(const char *text) {
    write_file(text);
    fg_error err = {0};
    fg_policy_file *f = fg_policy_file_read(path, &err);
    if (f == NULL) print_error("%s\n", err.message);
    assert_non_null(f);
    return f;
}

/* The file is refused with "<path>:<where>" where `where` is the rest. */
static void refused(const char *text, const char *where) {
    write_file(text);
    fg_error err = {0};
    fg_policy_file *f = fg_policy_file_read(path, &err);
    char expected[512];
    snprintf(expected, sizeof(expected), "%s%s", path, where);
    if (f != NULL || strcmp(err.message, expected) != 0)
        print_error("got \"%s\"\nexpected \"%s\"\n", f != NULL ? "(accepted)" : err.message,
                    expected);
    assert_null(f);
    assert_int_equal(err.code, FG_CODE_INVALID);
    assert_string_equal(err.message, expected);
    unlink(path);
}

static const char DOC_EXAMPLE[] =
    "# policies.conf\n"
    "policies = (\n"
    "  {\n"
    "    name = \"api.search\";\n"
    "    limits = (\n"
    "      { algorithm = \"token\"; capacity = 10; rate = 10.0; },\n"
    "      { algorithm = \"fixed\"; limit = 1000; window_ms = 86400000.0; }\n"
    "    );\n"
    "    penalty = { ban_ms = 60000.0; after = 5; within_ms = 10000.0; };\n"
    "    shadow = false;\n"
    "    denylist = { kind = \"bloom\"; error = 0.001; capacity = 100000;\n"
    "                 items = [ \"10.0.0.66\", \"10.0.0.67\" ]; };\n"
    "    allowlist = { kind = \"exact\"; items = [ \"monitor\" ]; };\n"
    "  }\n"
    ");\n";

/* ------------------------------------------------------------ good files */

static void test_the_example_of_the_docs(void **state) {
    (void)state;
    fg_policy_file *f = read_ok(DOC_EXAMPLE);
    assert_int_equal(f->count, 1);
    const fg_policy_entry *e = &f->entries[0];
    assert_string_equal(e->name, "api.search");
    assert_int_equal(e->line, 3);
    assert_int_equal(e->def.nlimits, 2);
    assert_int_equal(e->def.limits[0].algorithm, FG_TOKEN_BUCKET);
    expect_i64(e->def.limits[0].limit, 10);
    assert_true(e->def.limits[0].rate == 10.0);
    assert_int_equal(e->def.limits[1].algorithm, FG_FIXED_WINDOW);
    expect_i64(e->def.limits[1].limit, 1000);
    assert_true(e->def.limits[1].window_ms == 86400000.0);
    assert_true(e->def.ban_ms == 60000.0);
    expect_i64(e->def.ban_after, 5);
    assert_true(e->def.ban_within_ms == 10000.0);
    assert_false(e->def.shadow);
    assert_int_equal(e->def.denylist.kind, FG_LIST_BLOOM);
    assert_true(e->def.denylist.error == 0.001);
    expect_i64(e->def.denylist.capacity, 100000);
    assert_int_equal(e->def.allowlist.kind, FG_LIST_EXACT);
    assert_int_equal(e->ndeny, 2);
    assert_string_equal(e->deny[0], "10.0.0.66");
    assert_string_equal(e->deny[1], "10.0.0.67");
    assert_int_equal(e->nallow, 1);
    assert_string_equal(e->allow[0], "monitor");
    fg_policy_file_free(f);
    unlink(path);
}

static void test_every_algorithm_and_the_defaults(void **state) {
    (void)state;
    fg_policy_file *f = read_ok(
        "policies = (\n"
        "  { name = \"a\"; limits = ( { algorithm = \"leaky\"; capacity = 3; rate = 2; },\n"
        "      { algorithm = \"gcra\"; capacity = 5; count = 2; period_ms = 1500; },\n"
        "      { algorithm = \"sliding\"; limit = 0x10; window_ms = 250.5; },\n"
        "      { algorithm = \"fixed\"; limit = 5000000000L; window_ms = 1e3; } ); },\n"
        "  { name = \"b/c-d_e.f\"; limits = ( { algorithm = \"token\"; capacity = 1; rate = 0.5; } "
        ");\n"
        "    penalty = { ban_ms = 10; }; shadow = true;\n"
        "    allowlist = { items = ( \"x\", \"\" ); }; denylist = { kind = \"exact\"; }; }\n"
        ");\n");
    assert_int_equal(f->count, 2);
    const fg_policy_def *a = &f->entries[0].def, *b = &f->entries[1].def;
    assert_int_equal(a->nlimits, 4);
    assert_int_equal(a->limits[0].algorithm, FG_LEAKY_BUCKET);
    assert_true(a->limits[0].rate == 2.0);
    assert_int_equal(a->limits[1].algorithm, FG_GCRA);
    assert_true(a->limits[1].rate == 2.0 && a->limits[1].window_ms == 1500.0);
    assert_int_equal(a->limits[2].algorithm, FG_SLIDING_WINDOW);
    expect_i64(a->limits[2].limit, 16);
    assert_true(a->limits[2].window_ms == 250.5);
    expect_i64(a->limits[3].limit, 5000000000LL);
    assert_true(a->ban_ms == 0); /* no penalty */
    assert_int_equal(f->entries[0].nallow + f->entries[0].ndeny, 0);
    assert_string_equal(f->entries[1].name, "b/c-d_e.f");
    assert_int_equal(f->entries[1].line, 6);
    assert_true(b->ban_ms == 10.0 && b->ban_within_ms == 0);
    expect_i64(b->ban_after, 1);
    assert_true(b->shadow);
    assert_int_equal(f->entries[1].nallow, 2);
    assert_string_equal(f->entries[1].allow[1], "");
    fg_policy_file_free(f);
    unlink(path);
}

static void test_no_policies_is_no_error(void **state) {
    (void)state;
    fg_policy_file *f = read_ok("policies = ();\n");
    assert_int_equal(f->count, 0);
    fg_policy_file_free(f);
    unlink(path);
}

static fg_client *open_mem(void) {
    fg_error err;
    fg_client *c = fg_open("mem:", NULL, &err);
    assert_non_null(c);
    return c;
}

static fg_policy_result check(fg_client *c, const char *name, const char *key, const char *id) {
    fg_policy_result r;
    fg_error err;
    fg_code rc = fg_policy_check(c, name, key, id, 1, &r, &err);
    if (rc != FG_CODE_OK) print_error("%s\n", err.message);
    assert_int_equal(rc, FG_CODE_OK);
    return r;
}

static void test_applied_on_mem(void **state) {
    (void)state;
    fg_client *c = open_mem();
    write_file(DOC_EXAMPLE);
    size_t applied = 0;
    fg_error err;
    assert_int_equal(fg_policies_apply_file(c, path, &applied, &err), FG_CODE_OK);
    assert_int_equal(applied, 1);
    fg_policy_result r = check(c, "api.search", "user:1", NULL);
    assert_true(r.result.allowed);
    expect_i64(r.result.remaining, 9);
    r = check(c, "api.search", "user:1", "10.0.0.67");
    assert_false(r.result.allowed);
    assert_int_equal(r.decided_by, FG_BY_DENYLIST);
    r = check(c, "api.search", "user:1", "monitor");
    assert_int_equal(r.decided_by, FG_BY_ALLOWLIST);
    fg_policy_info info;
    assert_int_equal(fg_policy_get(c, "api.search", &info, &err), FG_CODE_OK);
    expect_i64(info.deny_entries, 2);
    expect_i64(info.allow_entries, 1);
    fg_close(c);
    unlink(path);
}

/* The second entry is wrong: nothing at all is applied. */
static void test_a_bad_entry_applies_nothing(void **state) {
    (void)state;
    fg_client *c = open_mem();
    write_file("policies = (\n"
               "  { name = \"first\"; limits = ( { algorithm = \"token\"; capacity = 1; rate = 1; "
               "} ); },\n"
               "  { name = \"second\"; limits = ( { algorithm = \"token\"; capacity = 0; rate = 1; "
               "} ); }\n"
               ");\n");
    size_t applied = 7;
    fg_error err;
    assert_int_equal(fg_policies_apply_file(c, path, &applied, &err), FG_CODE_INVALID);
    assert_int_equal(applied, 0);
    char expected[256];
    snprintf(expected, sizeof(expected),
             "%s:3: policies[1].limits[0].capacity: capacity must be between 1 and "
             "9223372036854775807",
             path);
    assert_string_equal(err.message, expected);
    char **names;
    size_t n;
    assert_int_equal(fg_policy_names(c, &names, &n, &err), FG_CODE_OK);
    assert_int_equal(n, 0);
    fg_policy_names_free(names, n);
    assert_int_equal(fg_policies_apply_file(c, "/nonexistent/p.conf", &applied, NULL),
                     FG_CODE_INVALID);
    fg_close(c);
    unlink(path);
}

/* ------------------------------------------------------------ refusals */

#define ONE(limit) "policies = ( { name = \"p\"; limits = ( " limit " ); } );\n"
#define TOKEN      "{ algorithm = \"token\"; capacity = 1; rate = 1; }"
#define WITH(rest) "policies = ( { name = \"p\"; limits = ( " TOKEN " );\n" rest " } );\n"

static void test_files_that_cannot_be_read(void **state) {
    (void)state;
    fg_error err;
    assert_null(fg_policy_file_read("/nonexistent/p.conf", &err));
    assert_int_equal(err.code, FG_CODE_INVALID);
    assert_string_equal(err.message, "/nonexistent/p.conf: cannot read: No such file or directory");
    refused("policies = (\n  { name = \"p\" \n", ":3: syntax error");
    refused("a = 1;\na = 2;\n", ":2: duplicate setting name");
}

static void test_the_top_level(void **state) {
    (void)state;
    refused("", ": policies: missing");
    refused("policies = ();\npolices = ();\n", ":2: polices: unknown field");
    refused("policies = { name = \"p\"; };\n",
            ":1: policies: must be a list of policies ( { ... }, ... )");
    refused("policies = [ 1 ];\n", ":1: policies: must be a list of policies ( { ... }, ... )");
    refused("policies = ( \"p\" );\n", ":1: policies[0]: must be a group { ... }");
}

static void test_policy_fields(void **state) {
    (void)state;
    refused("policies = (\n { limits = ( " TOKEN " ); }\n);\n", ":2: policies[0].name: missing");
    refused("policies = ( { name = 5; } );\n",
            ":1: policies[0].name: must be a string in double quotes");
    refused("policies = ( { name = \"a b\"; } );\n",
            ":1: policies[0].name: policy name must be 1 to 64 letters, digits, '_', '-', '.' or "
            "'/'");
    refused("policies = ( { name = \"p\";\n limts = (); } );\n",
            ":2: policies[0].limts: unknown field of a policy");
    refused("policies = ( { name = \"p\"; } );\n", ":1: policies[0].limits: missing");
    refused("policies = ( { name = \"p\"; limits = (); } );\n",
            ":1: policies[0].limits: a policy needs 1 to 8 limits, not 0");
    refused("policies = ( { name = \"p\"; limits = ( " TOKEN "," TOKEN "," TOKEN "," TOKEN "," TOKEN
            "," TOKEN "," TOKEN "," TOKEN "," TOKEN " ); } );\n",
            ":1: policies[0].limits: a policy needs 1 to 8 limits, not 9");
    refused("policies = ( { name = \"p\"; limits = " TOKEN "; } );\n",
            ":1: policies[0].limits: must be a list of limits ( { ... }, ... )");
    refused(WITH("shadow = 1;"), ":2: policies[0].shadow: must be true or false");
    refused("policies = (\n"
            "  { name = \"p\"; limits = ( " TOKEN " ); },\n"
            "  { name = \"p\"; limits = ( " TOKEN " ); }\n);\n",
            ":3: policies[1].name: policy 'p' is given twice (first at line 2)");
}

static void test_limit_fields(void **state) {
    (void)state;
    refused(ONE("5"), ":1: policies[0].limits[0]: must be a group { ... }");
    refused(ONE("{ capacity = 1; }"), ":1: policies[0].limits[0].algorithm: missing");
    refused(ONE("{ algorithm = \"slidelog\"; limit = 1; window_ms = 1; }"),
            ":1: policies[0].limits[0].algorithm: unknown algorithm 'slidelog' (token, leaky, "
            "gcra, fixed, sliding)");
    refused(ONE("{ algorithm = \"token\"; capacity = 1; rate = 1;\n window_ms = 5.0; }"),
            ":2: policies[0].limits[0].window_ms: unknown field of a token limit");
    refused(ONE("{ algorithm = \"fixed\"; limit = 1; }"),
            ":1: policies[0].limits[0].window_ms: missing");
    refused(ONE("{ algorithm = \"token\"; capacity = 1.5; rate = 1; }"),
            ":1: policies[0].limits[0].capacity: must be an integer");
    refused(ONE("{ algorithm = \"token\"; capacity = 1; rate = \"fast\"; }"),
            ":1: policies[0].limits[0].rate: must be a number");
    refused(ONE("{ algorithm = \"fixed\";\n limit = 5000000000; window_ms = 1000; }"),
            ":2: policies[0].limits[0].limit: does not fit libconfig's 32-bit integers: write it "
            "with an L suffix (e.g. 5000000000L)");
    /* A small integer is not taken for a large L one of the same name on
     * its line, whose low 32 bits it equals (it once was). */
    fg_policy_file *f = read_ok(
        "policies = ( { name = \"two\"; limits = ( { algorithm = \"fixed\"; limit = 4294967297L; "
        "window_ms = 1000.0; }, { algorithm = \"fixed\"; limit = 1; window_ms = 2000.0; } ); } );\n");
    fg_policy_file_free(f);
    unlink(path);
}

/* The library's ranges, at the field that is out of them. */
static void test_limit_ranges(void **state) {
    (void)state;
    refused(ONE("{ algorithm = \"token\"; capacity = 0; rate = 1; }"),
            ":1: policies[0].limits[0].capacity: capacity must be between 1 and "
            "9223372036854775807");
    refused(ONE("{ algorithm = \"token\"; capacity = 1;\n rate = 0; }"),
            ":2: policies[0].limits[0].rate: rate must be greater than 0 and at most 1e+09");
    refused(ONE("{ algorithm = \"leaky\"; capacity = 1; rate = 2e9; }"),
            ":1: policies[0].limits[0].rate: rate must be greater than 0 and at most 1e+09");
    refused(ONE("{ algorithm = \"fixed\"; limit = -3; window_ms = 10; }"),
            ":1: policies[0].limits[0].limit: limit must be between 1 and 9223372036854775807");
    refused(ONE("{ algorithm = \"sliding\"; limit = 3; window_ms = 0.0001; }"),
            ":1: policies[0].limits[0].window_ms: window_ms must be at least 0.001 (one "
            "microsecond)");
    refused(ONE("{ algorithm = \"gcra\"; capacity = 1; count = 0; period_ms = 10; }"),
            ":1: policies[0].limits[0].count: count must be greater than 0 and at most 1e+18");
    refused(ONE("{ algorithm = \"gcra\"; capacity = 1; count = 1; period_ms = 2e12; }"),
            ":1: policies[0].limits[0].period_ms: period_ms must be greater than 0 and at most "
            "1e+12");
    refused(ONE("{ algorithm = \"gcra\"; capacity = 1; count = 1000; period_ms = 0.0001; }"),
            ":1: policies[0].limits[0]: rate too high: count per period_ms must leave at least "
            "one nanosecond per unit");
}

static void test_penalty(void **state) {
    (void)state;
    refused(WITH("penalty = 5;"), ":2: policies[0].penalty: must be a group { ... }");
    refused(WITH("penalty = { ban_ms = 5; afterwards = 2; };"),
            ":2: policies[0].penalty.afterwards: unknown field");
    refused(WITH("penalty = { after = 2; };"), ":2: policies[0].penalty.ban_ms: missing");
    refused(WITH("penalty = { ban_ms = 0; };"),
            ":2: policies[0].penalty.ban_ms: ban_ms must be greater than 0 and at most 1e+12");
    refused(WITH("penalty = { ban_ms = 0.0000001; };"),
            ":2: policies[0].penalty.ban_ms: ban_ms must be at least 0.001 (one microsecond)");
    refused(WITH("penalty = { ban_ms = 5; after = 0; };"),
            ":2: policies[0].penalty.after: after must be between 1 and 1000000");
    refused(WITH("penalty = { ban_ms = 5; after = 2.5; };"),
            ":2: policies[0].penalty.after: must be an integer");
    refused(WITH("penalty = { ban_ms = 5; within_ms = -1.0; };"),
            ":2: policies[0].penalty.within_ms: within_ms must be greater than 0 and at most "
            "1e+12");
}

static void test_lists(void **state) {
    (void)state;
    refused(WITH("denylist = [ \"a\" ];"), ":2: policies[0].denylist: must be a group { ... }");
    refused(WITH("denylist = { kind = \"fuzzy\"; };"),
            ":2: policies[0].denylist.kind: unknown kind 'fuzzy' (exact, bloom)");
    refused(WITH("allowlist = { kind = \"exact\"; capacity = 5; };"),
            ":2: policies[0].allowlist.capacity: unknown field of an exact list");
    refused(WITH("allowlist = { kind = \"bloom\"; size = 5; };"),
            ":2: policies[0].allowlist.size: unknown field of a bloom list");
    refused(WITH("denylist = { kind = \"bloom\"; error = 1.0; capacity = 5; };"),
            ":2: policies[0].denylist.error: error must be at least 1e-09 and less than 1");
    refused(WITH("denylist = { kind = \"bloom\"; capacity = 0; };"),
            ":2: policies[0].denylist.capacity: capacity must be between 1 and 1099511627776");
    refused(WITH("denylist = { items = \"a\"; };"),
            ":2: policies[0].denylist.items: must be a list of strings [ \"...\", ... ]");
    refused(WITH("denylist = { items = ( \"a\", 5 ); };"),
            ":2: policies[0].denylist.items[1]: must be a string in double quotes");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_example_of_the_docs),
        cmocka_unit_test(test_every_algorithm_and_the_defaults),
        cmocka_unit_test(test_no_policies_is_no_error),
        cmocka_unit_test(test_applied_on_mem),
        cmocka_unit_test(test_a_bad_entry_applies_nothing),
        cmocka_unit_test(test_files_that_cannot_be_read),
        cmocka_unit_test(test_the_top_level),
        cmocka_unit_test(test_policy_fields),
        cmocka_unit_test(test_limit_fields),
        cmocka_unit_test(test_limit_ranges),
        cmocka_unit_test(test_penalty),
        cmocka_unit_test(test_lists),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
