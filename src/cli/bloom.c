/*
 * bloom.c - floodgate bloom: the module's Bloom filters from the command
 * line (docs/bloom.md).
 *
 *   floodgate bloom reserve KEY [--error E] [--capacity N] [--expansion X]
 *   floodgate bloom add KEY ITEM...
 *   floodgate bloom exists KEY ITEM...
 *   floodgate bloom card KEY
 *
 * Each is one library call (fg_bf_reserve, fg_bf_madd, fg_bf_mexists,
 * fg_bf_card), so the options are checked by the library with BF.RESERVE's
 * messages. A filter lives on the server, so these commands refuse mem:
 * (common.c). add and exists print one line per item: "added ITEM" or
 * "present ITEM", "present ITEM" or "absent ITEM".
 *
 * Exit codes (cli.h): 0 done (exists: every item may be present), 1 exists:
 * some item is certainly absent, 2 error.
 */
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "floodgate.h"

#define BLOOM_TAKES CLI_NEEDS_SERVER

static int bloom_reserve(fg_client *c, int npos, char **argv, const cli_opts *o) {
    fg_error err;
    if (npos != 1) return cli_error("bloom reserve takes one KEY");
    if (fg_bf_reserve(c, argv[0], &o->bloom, &err) != FG_CODE_OK) return cli_library_error(&err);
    if (o->json)
        puts("{\"reserved\":true}");
    else
        puts("reserved");
    return CLI_EXIT_OK;
}

/* The answers of add or exists, one per item: yes is `word`, no is `other`. */
static void print_items(char **items, const bool *answers, size_t n, const char *field,
                        const char *word, const char *other, int json) {
    if (json) printf("{\"%s\":{", field);
    for (size_t i = 0; i < n; i++) {
        if (!json) {
            printf("%s %s\n", answers[i] ? word : other, items[i]);
            continue;
        }
        if (i > 0) putchar(',');
        cli_print_json_string(items[i]);
        printf(":%s", answers[i] ? "true" : "false");
    }
    if (json) puts("}}");
}

/* add (exists == 0) or exists of the items after KEY. */
static int add_or_exists(fg_client *c, int npos, char **argv, const cli_opts *o, int exists) {
    cli_items it;
    bool *answers;
    fg_error err;
    fg_code rc;
    int all = 1;
    if (npos < 2) return cli_error("bloom %s takes KEY ITEM...", exists ? "exists" : "add");
    if (!cli_items_of(argv + 1, (size_t)npos - 1, &it)) return CLI_EXIT_ERROR;
    if ((answers = malloc(it.n * sizeof(*answers))) == NULL) {
        cli_items_free(&it);
        return cli_error("out of memory");
    }
    rc = exists ? fg_bf_mexists(c, argv[0], it.items, it.lens, it.n, answers, &err)
                : fg_bf_madd(c, argv[0], it.items, it.lens, it.n, answers, &err);
    if (rc == FG_CODE_OK) {
        print_items(argv + 1, answers, it.n, exists ? "exists" : "added",
                    exists ? "present" : "added", exists ? "absent" : "present", o->json);
        for (size_t i = 0; i < it.n; i++)
            all = all && answers[i];
    }
    cli_items_free(&it);
    free(answers);
    if (rc != FG_CODE_OK) return cli_library_error(&err);
    return !exists || all ? CLI_EXIT_OK : CLI_EXIT_DENIED;
}

static int bloom_add(fg_client *c, int npos, char **argv, const cli_opts *o) {
    return add_or_exists(c, npos, argv, o, 0);
}

static int bloom_exists(fg_client *c, int npos, char **argv, const cli_opts *o) {
    return add_or_exists(c, npos, argv, o, 1);
}

static int bloom_card(fg_client *c, int npos, char **argv, const cli_opts *o) {
    int64_t card;
    fg_error err;
    if (npos != 1) return cli_error("bloom card takes one KEY");
    if (fg_bf_card(c, argv[0], &card, &err) != FG_CODE_OK) return cli_library_error(&err);
    if (o->json)
        printf("{\"card\":%lld}\n", (long long)card);
    else
        printf("%lld\n", (long long)card);
    return CLI_EXIT_OK;
}

static const cli_subcommand subcommands[] = {
    {{"bloom reserve",
      "  floodgate bloom reserve KEY [--error E] [--capacity N] [--expansion X]\n"
      "      create a filter for N items (default 100) at false-positive rate E\n"
      "      (default 0.01), growing X times per level (default 2; 0: never)\n",
      BLOOM_TAKES | CLI_TAKES_BLOOM},
     bloom_reserve},
    {{"bloom add",
      "  floodgate bloom add KEY ITEM...\n"
      "      add items (a missing KEY is created with the defaults); each line says\n"
      "      \"added ITEM\", or \"present ITEM\" when it was (maybe) there already\n",
      BLOOM_TAKES},
     bloom_add},
    {{"bloom exists",
      "  floodgate bloom exists KEY ITEM...\n"
      "      \"present ITEM\" (maybe added) or \"absent ITEM\" (certainly not); exit 1\n"
      "      when any is absent\n",
      BLOOM_TAKES},
     bloom_exists},
    {{"bloom card", "  floodgate bloom card KEY\n      the distinct items added, estimated\n",
      BLOOM_TAKES},
     bloom_card},
};

int cli_bloom(int argc, char **argv) {
    return cli_run_family("bloom", "floodgate bloom: Bloom filters on the server (docs/bloom.md).",
                          subcommands, sizeof(subcommands) / sizeof(subcommands[0]), argc, argv);
}
