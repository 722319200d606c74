/*
 * backends.c - the backends there are, and the URLs each serves (url.c and
 * cluster.h say what the URLs look like):
 *
 *   (NULL), "", mem:      fg_backend_mem (backend_mem.c)
 *   redis://, unix://     fg_backend_redis (backend_remote.c)
 *   redis+cluster://      fg_backend_cluster (backend_remote.c)
 *
 * A new backend is a file that defines its fg_backend, declared in a header
 * of its own, and a line here.
 */
#include "backends.h"

#include "mem/backend_mem.h"
#include "remote/backend_remote.h"
#include "remote/cluster.h"
#include "url.h"

const fg_backend *fg_backend_for(const char *url, fg_error *err) {
    fg_url u;
    if (fg_cluster_url(url)) return &fg_backend_cluster;
    if (fg_url_parse(url, &u, err) != FG_CODE_OK) return NULL;
    switch (u.kind) {
    case FG_URL_MEM: return &fg_backend_mem;
    case FG_URL_TCP:
    case FG_URL_UNIX: return &fg_backend_redis;
    }
    return NULL;
}
