/*
 * policy_file.h - policies read from a config file in libconfig's syntax
 * (internal; docs/policies.md, "Config files and the command line"): the
 * parser behind fg_policies_apply_file, which checks every entry before
 * anything is sent. See policy_file.c.
 */
#ifndef FG_POLICY_FILE_H
#define FG_POLICY_FILE_H

#include <stddef.h>

#include "floodgate.h"

/* One policy of a file: a checked name and definition, and the items of
 * its lists (the file's strings: valid until fg_policy_file_free). */
typedef struct fg_policy_entry {
    const char *name;
    int line; /* where its group begins */
    fg_policy_def def;
    const char **allow, **deny;
    size_t nallow, ndeny;
} fg_policy_entry;

typedef struct fg_policy_file {
    const char *path;
    fg_policy_entry *entries;
    size_t count;
    struct config_t *config; /* the parsed file, which holds the strings */
} fg_policy_file;

/* Reads and checks every policy of the file at `path`. NULL with err
 * filled (FG_CODE_INVALID, "path:line: field: problem"; FG_CODE_NOMEM) at
 * the first problem. */
fg_policy_file *fg_policy_file_read(const char *path, fg_error *err);
void fg_policy_file_free(fg_policy_file *f);

#endif
