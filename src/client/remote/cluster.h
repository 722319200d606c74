/*
 * cluster.h - Redis Cluster routing for libfloodgate (internal).
 *
 *   redis+cluster://[user:password@]host:port[,host:port...]
 *
 * The hosts are seeds: any reachable one tells the slot map (CLUSTER SLOTS),
 * and every command then goes to the master of its key's slot. See cluster.c.
 * Not thread-safe: the client holds its lock around every call.
 */
#ifndef FG_CLUSTER_H
#define FG_CLUSTER_H

#include <stdbool.h>

#include "conn.h"

#define FG_CLUSTER_SLOTS 16384

typedef struct fg_cluster fg_cluster;

/* Whether url has the redis+cluster:// scheme. */
bool fg_cluster_url(const char *url);

/* Parses a redis+cluster:// URL; connects to nothing yet. NULL with err
 * filled (FG_CODE_INVALID, FG_CODE_NOMEM) on failure. */
fg_cluster *fg_cluster_new(const char *url, const fg_conn_config *cfg, fg_error *err);
void fg_cluster_free(fg_cluster *cl);

/* Reads the slot map from the first node that answers. FG_CODE_IO when none
 * can be reached; FG_CODE_SERVER when one refuses AUTH or is no cluster. */
fg_code fg_cluster_refresh(fg_cluster *cl, fg_error *err);

/* Sends each command to the master of its key's slot, one pipeline per
 * node, and follows redirects. codes[i] is FG_CODE_OK when replies[i] holds
 * the answer (the caller frees it; it may be an error reply), otherwise why
 * there is none (FG_CODE_IO: unreachable; err tells the last failure). */
void fg_cluster_run(fg_cluster *cl, const fg_command *cmds, size_t n, redisReply **replies,
                    fg_code *codes, fg_error *err);

/* The slot of a key: CRC16-XMODEM of the key, or of its hash tag (the text
 * between the first '{' and the next '}', when not empty), modulo 16384. */
unsigned fg_cluster_slot(const char *key, size_t len);

#endif
