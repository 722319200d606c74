/*
 * cluster.h - Redis Cluster routing for libfloodgate (internal).
 *
 *   redis+cluster://[user:password@]host:port[,host:port...][?backend=B]
 *
 * The hosts are seeds: any reachable one tells the slot map (CLUSTER SLOTS),
 * and every command then goes to the master of its key's slot. See cluster.c.
 * ?backend= (url.h) holds for every node, the seeds and the masters met.
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

/* The seeds of a redis+cluster:// URL, each as a redis:// URL with the
 * URL's user, password and options: each(seed, arg) for each, which returns false
 * when out of memory. FG_CODE_INVALID with err filled for a URL refused. */
fg_code fg_cluster_seeds(const char *url, bool (*each)(const fg_url *seed, void *arg), void *arg,
                         fg_error *err);

/* An entry of CLUSTER SLOTS, [start, end, [host, port, ...], ...], as its
 * range and master (an empty host: the node that answered); false for an
 * entry that does not parse or names an unknown master ("?"). */
bool fg_cluster_slot_range(const redisReply *e, long long *start, long long *end,
                           const char **host, int *port);

/* "MOVED 3999 127.0.0.1:6381" or "ASK ...": the slot and the node, host
 * written into host[hostlen] (empty: the node that sent it). */
bool fg_cluster_redirect(const char *s, unsigned *slot, char *host, size_t hostlen, int *port);

/* The slot of a key: CRC16-XMODEM of the key, or of its hash tag (the text
 * between the first '{' and the next '}', when not empty), modulo 16384. */
unsigned fg_cluster_slot(const char *key, size_t len);

/* The dialect of the cluster's nodes, as the first node that can be
 * reached speaks it (a cluster's nodes are one server build); AUTO when
 * none can (err says why). */
fg_dialect fg_cluster_dialect(fg_cluster *cl, fg_error *err);

#endif
