/*
 * client.h - what client.c gives the family files beyond the public API
 * (internal): a client's family, its backend's table and its state (see
 * backend.h).
 */
#ifndef FG_CLIENT_H
#define FG_CLIENT_H

#include "backend.h"
#include "floodgate.h"

/* The table of family f in c's backend, and c's state of that family in
 * *state; NULL with FG_CODE_UNSUPPORTED in err (the backend's message)
 * when the backend has none. */
const void *fg_client_family(fg_client *c, fg_family f, void **state, fg_error *err);

#endif
