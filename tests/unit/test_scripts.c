/*
 * test_scripts.c - the server scripts as the library embeds and sends them
 * (remote/scripts.c): the embedded texts, the routing table, the script
 * form of the module's commands (EVALSHA and EVAL), the EVAL form of a
 * formatted EVALSHA, and the Functions library. That the SHA1s are the
 * server's and the scripts answer as the module is
 * tests/integration/test_script_backend.py's.
 */
#include "test_util.h"

#include <hiredis/hiredis.h>
#include <stdlib.h>
#include <string.h>

#include "floodgate.h"
#include "remote/scripts.h"

#define RUN "return run_named(commands, KEYS, ARGV)\n"

static void test_embedded_scripts(void **state) {
    (void)state;
    assert_true(fg_nscripts >= 1);
    for (size_t i = 0; i < fg_nscripts; i++) {
        const fg_script *s = &fg_scripts[i];
        assert_int_equal(strlen(s->sha), 40);
        assert_int_equal(strspn(s->sha, "0123456789abcdef"), 40);
        assert_int_equal(strlen(s->text), s->len);
        assert_true(s->len > strlen(RUN));
        assert_string_equal(s->text + s->len - strlen(RUN), RUN);
        /* a family's fast path (src/scripts/fast/) comes first, when it has
         * one, then base.lua, then the prelude unless the family says not */
        assert_true(strncmp(s->text, "-- base.lua", 11) == 0 ||
                    (strncmp(s->text, "do\n-- fast/", 11) == 0 && strstr(s->text, "\n-- base.lua")));
        assert_true((strstr(s->text, "\n-- prelude.lua") == NULL) ==
                    (strstr(s->text, "\n--@ no prelude\n") != NULL));
        assert_ptr_equal(fg_script_of_family(s->family), s);
    }
    assert_non_null(fg_script_of_family("ratelimit"));
    assert_null(fg_script_of_family("prelude"));
    assert_null(fg_script_of_family("base"));
    assert_non_null(fg_script_of_family("lock"));
    assert_non_null(fg_script_of_family(FG_SCRIPT_BLOOM));
    assert_null(fg_script_of_family("functions"));
}

/* The script form of a command given as words, joined by spaces (the
 * script's text as "<text>", its SHA1 as "<sha>"); "" when not routed. */
static const char *form(const char *words, bool eval) {
    static char out[512];
    char buf[256];
    const char *argv[32], *args[32 + FG_SCRIPT_EXTRA_ARGS];
    size_t lens[32], outlens[32 + FG_SCRIPT_EXTRA_ARGS];
    char nkeys[FG_SCRIPT_NKEYS_MAX];
    int argc = 0;
    strcpy(buf, words);
    for (char *w = strtok(buf, " "); w != NULL; w = strtok(NULL, " ")) {
        argv[argc] = w;
        lens[argc++] = strlen(w);
    }
    int n = fg_script_args(argc, argv, lens, eval, args, outlens, nkeys);
    const fg_script *s = NULL;
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        if (i > 0) strcat(out, " ");
        for (size_t f = 0; f < fg_nscripts; f++)
            if (args[i] == fg_scripts[f].text || args[i] == fg_scripts[f].sha) s = &fg_scripts[f];
        if (s != NULL && args[i] == s->text && outlens[i] == s->len)
            strcat(out, "<text>");
        else if (s != NULL && args[i] == s->sha && outlens[i] == 40)
            strcat(out, s == fg_script_of_family("ratelimit") ? "<sha>" : "<other sha>");
        else
            strncat(out, args[i], outlens[i]);
    }
    return out;
}

static void test_script_form(void **state) {
    (void)state;
    assert_string_equal(form("FG.TOKEN k 10 2 COST 3", false),
                        "EVALSHA <sha> 1 k FG.TOKEN 10 2 COST 3");
    assert_string_equal(form("FG.PEEK TOKEN k 10 2", false), "EVALSHA <sha> 1 k FG.PEEK TOKEN 10 2");
    assert_string_equal(form("FG.REFUND GCRA k 10 1 1000 COST 4 AT 5", true),
                        "EVAL <text> 1 k FG.REFUND GCRA 10 1 1000 COST 4 AT 5");
    assert_string_equal(form("CL.THROTTLE k 15 30 60 2", false),
                        "EVALSHA <sha> 1 k CL.THROTTLE 15 30 60 2");
    assert_string_equal(form("FG.RESET k", false), "EVALSHA <sha> 1 k FG.RESET");
    assert_string_equal(form("FG.INSPECT k", true), "EVAL <text> 1 k FG.INSPECT");
    assert_string_equal(form("fg.leaky k 5 1", false), "EVALSHA <sha> 1 k fg.leaky 5 1");
    /* Not the scripts': sent as they are. */
    assert_string_equal(form("BF.DEBUG k", false), "");
    /* bloom.lua's: the key moved, as a limit's (a server with BF.* of its
     * own keeps them as they are: conn.c). */
    assert_string_equal(form("BF.ADD k x", false), "EVALSHA <other sha> 1 k BF.ADD x");
    assert_string_equal(form("BF.INSERT k CAPACITY 10 ITEMS a b", true),
                        "EVAL <text> 1 k BF.INSERT CAPACITY 10 ITEMS a b");
    assert_string_equal(form("bf.card k", false), "EVALSHA <other sha> 1 k bf.card");
    /* lock.lua's: one key, or numkeys keys, moved (numkeys stays). */
    assert_string_equal(form("FG.LOCK k o 1000 WAIT 5", false),
                        "EVALSHA <other sha> 1 k FG.LOCK o 1000 WAIT 5");
    assert_string_equal(form("FG.MLOCK 2 {a}x {a}y o 1000", false),
                        "EVALSHA <other sha> 2 {a}x {a}y FG.MLOCK 2 o 1000");
    assert_string_equal(form("FG.UNWAIT 1 k o", true), "EVAL <text> 1 k FG.UNWAIT 1 o");
    /* numkeys past the arguments: the keys there are; not a number: none
     * (the script refuses it with the module's words). */
    assert_string_equal(form("FG.MUNLOCK 5 a b", false), "EVALSHA <other sha> 2 a b FG.MUNLOCK 5");
    assert_string_equal(form("FG.MLOCK x a o 1", false), "EVALSHA <other sha> 0 FG.MLOCK x a o 1");
    assert_string_equal(form("FG.TOKENS k 1 1", false), "");
    /* Too short to hold its key: the server's arity error, as sent. */
    assert_string_equal(form("FG.PEEK TOKEN", false), "");
    assert_string_equal(form("FG.TOKEN", false), "");
}

static void test_routes(void **state) {
    (void)state;
    static const char *const named[] = {"FG.TOKEN", "FG.LEAKY",    "FG.GCRA",     "FG.FIXED",
                                        "FG.SLIDING", "FG.SLIDELOG", "CL.THROTTLE", "GCRA",
                                        "FG.RESET", "FG.INSPECT",  "FG.PEEK",     "FG.REFUND"};
    for (size_t i = 0; i < sizeof(named) / sizeof(named[0]); i++) {
        const char *argv[] = {named[i], "TOKEN", "k"};
        size_t lens[] = {strlen(named[i]), 5, 1};
        const fg_script_route *rt = NULL;
        assert_non_null(fg_script_for(3, argv, lens, &rt));
        assert_int_equal(rt->key, strncmp(named[i], "FG.PEEK", 8) == 0 ||
                                          strncmp(named[i], "FG.REFUND", 10) == 0
                                      ? 2
                                      : 1);
    }
    for (size_t i = 0; i < fg_nscript_routes; i++) {
        const fg_script_route *rt = &fg_script_routes[i];
        if (rt->keys == FG_KEYS_COUNTED) /* numkeys just before the keys */
            assert_true(rt->key == 2 && rt->nkeys == 0);
        else
            assert_true(rt->key >= 1 && rt->nkeys >= 1 && rt->nkeys < 1000000);
    }
}

/* hiredis' formatting of words. */
static char *format(const char *words, size_t *len) {
    char buf[256], *cmd;
    const char *argv[32];
    size_t lens[32];
    int argc = 0;
    strcpy(buf, words);
    for (char *w = strtok(buf, " "); w != NULL; w = strtok(NULL, " ")) {
        argv[argc] = w;
        lens[argc++] = strlen(w);
    }
    const fg_script *s = fg_script_of_family("ratelimit");
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "<sha>") == 0) {
            argv[i] = s->sha;
            lens[i] = 40;
        } else if (strcmp(argv[i], "<text>") == 0) {
            argv[i] = s->text;
            lens[i] = s->len;
        }
    }
    int n = redisFormatCommandArgv(&cmd, argc, argv, lens);
    assert_true(n > 0);
    *len = (size_t)n;
    return cmd;
}

static void test_eval_of_formatted(void **state) {
    (void)state;
    size_t len, want_len, got_len;
    char *evalsha = format("EVALSHA <sha> 1 k FG.TOKEN 10 2 COST 3", &len);
    char *want = format("EVAL <text> 1 k FG.TOKEN 10 2 COST 3", &want_len);
    char *got = fg_script_eval_of(evalsha, len, &got_len);
    assert_non_null(got);
    assert_int_equal(got_len, want_len);
    assert_memory_equal(got, want, want_len);
    free(got);
    free(want);
    /* Anything but an EVALSHA of one of the scripts. */
    char *other = format("FG.TOKEN k 10 2", &want_len);
    assert_null(fg_script_eval_of(other, want_len, &got_len));
    free(other);
    other = format("EVALSHA 0123456789012345678901234567890123456789 1 k FG.TOKEN", &want_len);
    assert_null(fg_script_eval_of(other, want_len, &got_len));
    free(other);
    assert_null(fg_script_eval_of(evalsha, 30, &got_len)); /* cut */
    free(evalsha);
}

static void test_functions_library(void **state) {
    (void)state;
    size_t len = 0;
    const char *lib = fg_functions_library(&len);
    assert_int_equal(strlen(lib), len);
    assert_true(strncmp(lib, "#!lua name=floodgate\n", 21) == 0);
    assert_non_null(strstr(lib, "fg_function('FG.TOKEN')"));
    assert_non_null(strstr(lib, "fg_function('FG.PEEK')"));
    assert_ptr_equal(fg_functions_library(NULL), lib);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_embedded_scripts), cmocka_unit_test(test_script_form),
        cmocka_unit_test(test_routes),           cmocka_unit_test(test_eval_of_formatted),
        cmocka_unit_test(test_functions_library),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
