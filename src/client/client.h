/*
 * client.h - what the files of libfloodgate share about an fg_client beyond
 * the public API (internal): the lock calls (lock.c) of a client of one
 * server, and what Redlock (redlock.c) shares with them: the parsing of a
 * grant, and randomness.
 *
 * A redis: or unix: client owns an fg_locks, made by lock.c at fg_open and
 * freed first by fg_close: the spare connections of calls that wait in the
 * server, and the renewal thread. A call that does not wait borrows the
 * client's shared connection instead, under the client's lock, like every
 * check. A mem: client owns an fg_mem_locks (mem_lock.h) instead, to which
 * lock.c hands its calls.
 */
#ifndef FG_CLIENT_H
#define FG_CLIENT_H

#include "backend.h"
#include "conn.h"
#include "floodgate.h"
#include "url.h"

/* The table of family f in c's backend, and c's state of that family in
 * *state; NULL with FG_CODE_UNSUPPORTED in err (the backend's message)
 * when the backend has none. */
const void *fg_client_family(fg_client *c, fg_family f, void **state, fg_error *err);

/* client.c: the shared connection, the caller's alone until
 * fg_client_give_conn. */
fg_conn *fg_client_take_conn(fg_client *c);
void fg_client_give_conn(fg_client *c);

typedef struct fg_policies fg_policies;

/* policy.c: the policy side of a client of `url` (fg_open's, parsed
 * already): its loader, the mem: table, the connections of waiting checks
 * and of a cluster's masters. NULL when out of memory. */
fg_policies *fg_policies_new(const char *url, const fg_options *opts, const fg_conn_config *cfg);
void fg_policies_free(fg_policies *p);

/* policy.c: fg_reset of a mem: client forgets the key's policy state too;
 * whether it had a live one. */
bool fg_policies_forget(fg_policies *p, const char *key);

/* client.c: the client's policy side. */
fg_policies *fg_client_policies(fg_client *c);

/* client.c: sends n commands to the client's server or cluster (routed by
 * their keys) in one round trip per node: codes[i] is FG_CODE_OK when
 * replies[i] is set (the caller frees it), else why it is not, with the
 * last failure in err. The failure policy does not apply. */
void fg_client_exchange(fg_client *c, const fg_command *cmds, size_t n, redisReply **replies,
                        fg_code *codes, fg_error *err);

#endif
