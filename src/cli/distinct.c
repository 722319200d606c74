/*
 * distinct.c - floodgate distinct: unique counting over time windows from
 * the command line (docs/uv.md).
 *
 *   floodgate distinct add KEY ITEM... [--at UNIX_US]
 *   floodgate distinct count KEY... (--last N[smhd] | --from UNIX_US --to UNIX_US)
 *
 * Each is one library call (fg_distinct_add, fg_distinct_count), which
 * checks the window and the time with the module's messages. A counter
 * lives on the server, so these commands refuse mem: (common.c).
 *
 * Exit codes (cli.h): 0 done, 2 error.
 */
#include <stdio.h>

#include "cli.h"
#include "floodgate.h"

static int distinct_add(fg_client *c, int npos, char **argv, const cli_opts *o) {
    cli_items it;
    bool changed;
    fg_error err;
    fg_code rc;
    if (npos < 2) return cli_error("distinct add takes KEY ITEM...");
    if (!cli_items_of(argv + 1, (size_t)npos - 1, &it)) return CLI_EXIT_ERROR;
    rc = fg_distinct_add(c, argv[0], it.items, it.lens, it.n, o->at_us, &changed, &err);
    cli_items_free(&it);
    if (rc != FG_CODE_OK) return cli_library_error(&err);
    if (o->json)
        printf("{\"changed\":%s}\n", changed ? "true" : "false");
    else
        puts(changed ? "changed" : "unchanged");
    return CLI_EXIT_OK;
}

static int distinct_count(fg_client *c, int npos, char **argv, const cli_opts *o) {
    int64_t count;
    fg_error err;
    if (npos < 1) return cli_error("distinct count takes KEY...");
    if (!o->has_window) return cli_error("distinct count needs --last N[smhd] or --from and --to");
    if (fg_distinct_count(c, (const char *const *)argv, (size_t)npos, o->window, &count, &err) !=
        FG_CODE_OK)
        return cli_library_error(&err);
    if (o->json)
        printf("{\"count\":%lld}\n", (long long)count);
    else
        printf("%lld\n", (long long)count);
    return CLI_EXIT_OK;
}

static const cli_subcommand subcommands[] = {
    {{"distinct add",
      "  floodgate distinct add KEY ITEM... [--at UNIX_US]\n"
      "      add items to KEY's counter, now or at UNIX_US (the server must allow it:\n"
      "      floodgate.explicit-time); prints \"changed\" or \"unchanged\"\n",
      CLI_NEEDS_SERVER | CLI_TAKES_AT},
     distinct_add},
    {{"distinct count",
      "  floodgate distinct count KEY... (--last N[smhd] | --from UNIX_US --to UNIX_US)\n"
      "      the distinct items of the keys' union over the last N seconds, minutes,\n"
      "      hours or days (--last 24h), or over [--from, --to)\n",
      CLI_NEEDS_SERVER | CLI_TAKES_WINDOW},
     distinct_count},
};

int cli_distinct(int argc, char **argv) {
    return cli_run_family("distinct",
                          "floodgate distinct: distinct items over time windows (docs/uv.md).",
                          subcommands, sizeof(subcommands) / sizeof(subcommands[0]), argc, argv);
}
