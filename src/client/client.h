/*
 * client.h - what client.c gives the family files beyond the public API
 * (internal): a client's family, its backend's table and the client's
 * state of it (see backend.h).
 */
#ifndef FG_CLIENT_H
#define FG_CLIENT_H

#include "backend.h"
#include "floodgate.h"

/* A family of a client, as its file calls it: the backend's table, in the
 * member of the family's type, and the client's state of that family. */
typedef struct fg_family_ref {
    union {
        const struct fg_limit_ops *limits;
        const struct fg_bloom_ops *bloom;
        const struct fg_distinct_ops *distinct;
        const struct fg_lock_ops *locks;
        const struct fg_policy_ops *policies;
    } ops;
    void *s;
} fg_family_ref;

/* Family f of c (c not NULL); FG_CODE_UNSUPPORTED, with the backend's
 * message, when c's backend has none. */
fg_code fg_client_family(fg_client *c, fg_family f, fg_family_ref *out, fg_error *err);

#endif
