/*
 * ngx_http_floodgate_conn.c - nginx's limit_conn for a whole fleet: the
 * requests being processed per key, counted across every nginx server
 * that shares a Redis.
 *
 * A request takes a slot of a semaphore per limit (FG.ACQUIRE key n owner
 * 1 lease): its owner is the request's own id, the lease
 * floodgate_limit_conn_lease. While the request lasts, a timer renews the
 * lease every third of it (FG.EXTEND); when it ends, its pool cleanup
 * gives the slot back (FG.RELEASE, not waited for). A worker that dies
 * gives nothing back, and renews nothing: its slots come back when their
 * leases end. A request is refused when a semaphore is full, and takes no
 * slot then.
 *
 * A slot outlives its request when an acquire is still in flight as the
 * request ends (the client went away): its memory is the module's, not
 * the request pool's, and the acquire's answer gives the slot back if it
 * was granted, then frees it.
 */
#include "ngx_http_floodgate.h"

enum { FGC_WAITING = 1, FGC_ANSWERED, FGC_DONE };

typedef struct fgc_ctx_s fgc_ctx_t;

typedef struct {
    fgc_ctx_t *ctx; /* NULL once the request is gone */
    fg_async *client;
    fg_async_call *extend;
    ngx_event_t renew;
    ngx_msec_t lease;
    ngx_uint_t pending; /* the acquire is in flight */
    ngx_uint_t granted;
    fg_code rc;
    const ngx_str_t *zone; /* its name, for the log */
    char *owner; /* in key's allocation */
    char key[];
} fgc_slot_t;

struct fgc_ctx_s {
    ngx_http_request_t *r;
    ngx_uint_t state;
    ngx_uint_t status;
    ngx_uint_t pending;
    ngx_uint_t n;
    fgc_slot_t **slots; /* NULL: the limit's key was empty */
};

static ngx_uint_t fgc_requests; /* this worker's, for owner ids */

/* -------------------------------------------------------------- slots */

static void fgc_released(fg_code rc, int64_t left, const fg_error *err, void *arg) {
    if (rc != FG_CODE_OK)
        ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0,
                      "floodgate: a slot was not given back (its lease will): %s", err->message);
}

/* Gives a granted slot back and frees it (its renewal stopped). */
static void fgc_slot_free(fgc_slot_t *s) {
    if (s->renew.timer_set) ngx_del_timer(&s->renew);
    if (s->extend != NULL) fg_async_cancel(s->extend);
    if (s->granted) {
        fg_error err;
        if (fg_async_semaphore_release(s->client, s->key, s->owner, 1, fgc_released, NULL, &err) !=
            FG_CODE_OK)
            fgc_released(FG_CODE_INVALID, 0, &err, NULL);
    }
    ngx_free(s);
}

static void fgc_renewed(fg_code rc, int64_t extended, const fg_error *err, void *arg) {
    fgc_slot_t *s = arg;
    if (rc != FG_CODE_OK || !extended)
        ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0,
                      "floodgate: the slot of \"%s\" was not renewed: %s", s->key,
                      rc != FG_CODE_OK ? err->message : "its lease had ended");
}

static void fgc_renew(ngx_event_t *ev) {
    fgc_slot_t *s = ev->data;
    fg_error err;
    if (s->extend == NULL &&
        fg_async_extend(s->client, s->key, s->owner, (int64_t)s->lease, fgc_renewed, s,
                        &s->extend, &err) != FG_CODE_OK)
        ngx_log_error(NGX_LOG_WARN, ev->log, 0, "floodgate: %s", err.message);
    ngx_add_timer(&s->renew, s->lease / 3);
}

/* --------------------------------------------------------- the request */

static void fgc_cleanup(void *data) {
    fgc_ctx_t *ctx = data;
    for (ngx_uint_t i = 0; i < ctx->n; i++) {
        fgc_slot_t *s = ctx->slots[i];
        if (s == NULL) continue;
        if (s->pending)
            s->ctx = NULL; /* the acquire's answer frees it */
        else
            fgc_slot_free(s);
    }
}

/* A request's state, in its pool (shared by a subrequest with its main
 * request: each state is known by its request). */
static fgc_ctx_t *fgc_get_ctx(ngx_http_request_t *r) {
    for (ngx_pool_cleanup_t *cln = r->pool->cleanup; cln != NULL; cln = cln->next)
        if (cln->handler == fgc_cleanup && ((fgc_ctx_t *)cln->data)->r == r) return cln->data;
    return NULL;
}

/* limit_conn's status is the main request's, set by whichever of it and
 * its subrequests was limited (the status stops the others). */
static ngx_uint_t fgc_main_status(ngx_http_request_t *r) {
    for (ngx_pool_cleanup_t *cln = r->main->pool->cleanup; cln != NULL; cln = cln->next)
        if (cln->handler == fgc_cleanup && ((fgc_ctx_t *)cln->data)->status != 0)
            return ((fgc_ctx_t *)cln->data)->status;
    return 0;
}

static void fgc_granted(fg_code rc, const fg_lock_grant *grant, const fg_error *err, void *arg) {
    fgc_slot_t *s = arg;
    s->pending = 0;
    s->rc = rc;
    s->granted = rc == FG_CODE_OK && grant->acquired;
    fgc_ctx_t *ctx = s->ctx;
    if (ctx == NULL) { /* the request is gone */
        fgc_slot_free(s);
        return;
    }
    ngx_http_request_t *r = ctx->r;
    if (rc != FG_CODE_OK) fgx_failed(r, "zone", s->zone, err->message);
    if (--ctx->pending > 0) return;
    ctx->state = FGC_ANSWERED;
    fgx_resume(r);
}

/* A slot of limit l for r: "limit_conn:zone:key", owner "host:pid:n". */
static fgc_slot_t *fgc_slot_new(ngx_http_request_t *r, fgc_ctx_t *ctx, fgx_conn_limit_t *l,
                                ngx_str_t *v, fgx_main_conf_t *mcf, fgx_loc_conf_t *lcf) {
    size_t ownerlen = ngx_cycle->hostname.len + 2 * NGX_INT64_LEN + 3;
    fgc_slot_t *s = ngx_calloc(sizeof(*s) + fgx_key_size("limit_conn", &l->zone->name, v) + ownerlen + 1,
                               r->connection->log);
    if (s == NULL) return NULL;
    u_char *p = fgx_key_write((u_char *)s->key, "limit_conn", &l->zone->name, v);
    s->owner = (char *)p;
    p = ngx_sprintf(p, "%V:%P:%ui", &ngx_cycle->hostname, ngx_pid, fgc_requests);
    *p = '\0';
    s->ctx = ctx;
    s->zone = &l->zone->name;
    s->client = mcf->client;
    s->lease = lcf->conn_lease;
    s->renew.handler = fgc_renew;
    s->renew.data = s;
    s->renew.log = ngx_cycle->log;
    return s;
}

static ngx_int_t fgc_start(ngx_http_request_t *r, fgx_main_conf_t *mcf, fgx_loc_conf_t *lcf,
                           fgc_ctx_t *ctx) {
    fgx_conn_limit_t *limits = lcf->conn_limits->elts;
    fgc_requests++;
    for (ngx_uint_t i = 0; i < ctx->n; i++) {
        ngx_str_t v;
        if (ngx_http_complex_value(r, &limits[i].zone->key, &v) != NGX_OK) return NGX_ERROR;
        if (v.len == 0) continue; /* as limit_conn: an empty key is not limited */
        fgc_slot_t *s = fgc_slot_new(r, ctx, &limits[i], &v, mcf, lcf);
        if (s == NULL) return NGX_ERROR;
        ctx->slots[i] = s;
        fg_error err;
        s->rc = mcf->client == NULL
                    ? FG_CODE_IO
                    : fg_async_semaphore_acquire(mcf->client, s->key, (int64_t)limits[i].n,
                                                 s->owner, 1, (int64_t)lcf->conn_lease,
                                                 fgc_granted, s, NULL, &err);
        if (s->rc != FG_CODE_OK) { /* decided at once by fail= */
            fgx_failed(r, "zone", s->zone,
                       mcf->client == NULL ? FGX_NO_CLIENT
                                           : err.message);
            continue;
        }
        s->pending = 1;
        ctx->pending++;
    }
    if (ctx->pending == 0) {
        ctx->state = FGC_ANSWERED;
        return NGX_AGAIN;
    }
    ctx->state = FGC_WAITING;
    r->main->count++;
    r->read_event_handler = ngx_http_test_reading;
    r->write_event_handler = ngx_http_request_empty_handler;
    return NGX_DONE;
}

static ngx_int_t fgc_decide(ngx_http_request_t *r, fgx_main_conf_t *mcf, fgx_loc_conf_t *lcf,
                            fgc_ctx_t *ctx) {
    fgx_conn_limit_t *limits = lcf->conn_limits->elts;
    ngx_uint_t refused_by = ctx->n, checked = 0;
    for (ngx_uint_t i = 0; i < ctx->n; i++) {
        fgc_slot_t *s = ctx->slots[i];
        if (s == NULL) continue;
        checked = 1;
        ngx_uint_t taken = s->rc == FG_CODE_OK ? s->granted : !mcf->fail_closed;
        if (!taken && refused_by == ctx->n) refused_by = i;
    }
    ctx->state = FGC_DONE;
    if (refused_by == ctx->n || lcf->conn_dry_run) {
        ctx->status = refused_by == ctx->n ? (checked ? FGX_PASSED : 0) : FGX_REJECTED_DRY_RUN;
        for (ngx_uint_t i = 0; i < ctx->n; i++)
            if (ctx->slots[i] != NULL && ctx->slots[i]->granted)
                ngx_add_timer(&ctx->slots[i]->renew, lcf->conn_lease / 3);
        if (refused_by < ctx->n)
            ngx_log_error(lcf->conn_log_level, r->connection->log, 0,
                          "limiting connections, dry run, by zone \"%V\"",
                          &limits[refused_by].zone->name);
        return NGX_DECLINED;
    }
    ctx->status = FGX_REJECTED;
    ngx_log_error(lcf->conn_log_level, r->connection->log, 0,
                  "limiting connections by zone \"%V\"", &limits[refused_by].zone->name);
    /* the slots taken are given back now (the cleanup finds none) */
    for (ngx_uint_t i = 0; i < ctx->n; i++) {
        if (ctx->slots[i] != NULL) fgc_slot_free(ctx->slots[i]);
        ctx->slots[i] = NULL;
    }
    return (ngx_int_t)lcf->conn_status_code;
}

ngx_int_t fgx_conn_handler(ngx_http_request_t *r) {
    fgx_loc_conf_t *lcf = ngx_http_get_module_loc_conf(r, ngx_http_floodgate_module);
    fgx_main_conf_t *mcf = ngx_http_get_module_main_conf(r, ngx_http_floodgate_module);
    if (lcf->conn_limits == NULL) return NGX_DECLINED;
    fgc_ctx_t *ctx = fgc_get_ctx(r);
    if (ctx == NULL) {
        /* as limit_conn: a subrequest is limited unless its main request
         * (or another of its subrequests) was */
        if (r != r->main && fgc_main_status(r) != 0) return NGX_DECLINED;
        ngx_pool_cleanup_t *cln = ngx_pool_cleanup_add(r->pool, sizeof(fgc_ctx_t));
        if (cln == NULL) return NGX_ERROR;
        ctx = cln->data;
        ngx_memzero(ctx, sizeof(*ctx));
        ctx->r = r;
        ctx->n = lcf->conn_limits->nelts;
        ctx->slots = ngx_pcalloc(r->pool, ctx->n * sizeof(fgc_slot_t *));
        if (ctx->slots == NULL) return NGX_ERROR;
        cln->handler = fgc_cleanup;
        ngx_int_t rc = fgc_start(r, mcf, lcf, ctx);
        if (rc != NGX_AGAIN) return rc;
    }
    switch (ctx->state) {
    case FGC_WAITING: return NGX_AGAIN;
    case FGC_ANSWERED: return fgc_decide(r, mcf, lcf, ctx);
    default: return NGX_DECLINED; /* decided before a redirect */
    }
}

ngx_int_t fgx_conn_status_variable(ngx_http_request_t *r, ngx_http_variable_value_t *v,
                                   uintptr_t data) {
    fgx_status_value(v, fgc_main_status(r));
    return NGX_OK;
}

/* ------------------------------------------------------- configuration */

/* floodgate_limit_conn_zone key zone=name */
char *fgx_conn_zone(ngx_conf_t *cf, ngx_command_t *cmd, void *conf) {
    fgx_main_conf_t *mcf = conf;
    ngx_str_t *value = cf->args->elts;
    fgx_conn_zone_t z;
    ngx_memzero(&z, sizeof(z));
    if (fgx_compile(cf, &value[1], &z.key) != NGX_CONF_OK ||
        fgx_zone_name(cf, &value[2], &z.name) != NGX_CONF_OK)
        return NGX_CONF_ERROR;
    if (fgx_zone_unique(cf, cmd, &z.name, 1) != NGX_CONF_OK) return NGX_CONF_ERROR;
    fgx_conn_zone_t *slot = ngx_array_push(&mcf->conn_zones);
    if (slot == NULL) return NGX_CONF_ERROR;
    *slot = z;
    return NGX_CONF_OK;
}

/* floodgate_limit_conn zone n */
char *fgx_limit_conn(ngx_conf_t *cf, ngx_command_t *cmd, void *conf) {
    fgx_loc_conf_t *lcf = conf;
    ngx_str_t *value = cf->args->elts;
    ngx_int_t n = ngx_atoi(value[2].data, value[2].len);
    if (n <= 0 || n > 1000000) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "invalid number of connections \"%V\"",
                           &value[2]);
        return NGX_CONF_ERROR;
    }
    if (lcf->conn_limits == NULL &&
        (lcf->conn_limits = ngx_array_create(cf->pool, 1, sizeof(fgx_conn_limit_t))) == NULL)
        return NGX_CONF_ERROR;
    fgx_conn_limit_t *limits = lcf->conn_limits->elts;
    for (ngx_uint_t i = 0; i < lcf->conn_limits->nelts; i++)
        if (fgx_same(&limits[i].zone_name, &value[1])) return "is duplicate";
    fgx_conn_limit_t *l = ngx_array_push(lcf->conn_limits);
    if (l == NULL) return NGX_CONF_ERROR;
    ngx_memzero(l, sizeof(*l));
    l->zone_name = value[1];
    l->n = (ngx_uint_t)n;
    return NGX_CONF_OK;
}

char *fgx_conn_resolve(ngx_conf_t *cf, fgx_loc_conf_t *conf) {
    fgx_main_conf_t *mcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_floodgate_module);
    fgx_conn_limit_t *l = conf->conn_limits != NULL ? conf->conn_limits->elts : NULL;
    fgx_conn_zone_t *zones = mcf->conn_zones.elts;
    for (ngx_uint_t i = 0; l != NULL && i < conf->conn_limits->nelts; i++) {
        for (ngx_uint_t k = 0; l[i].zone == NULL && k < mcf->conn_zones.nelts; k++)
            if (fgx_same(&zones[k].name, &l[i].zone_name)) l[i].zone = &zones[k];
        if (l[i].zone == NULL) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "unknown floodgate_limit_conn_zone \"%V\"",
                               &l[i].zone_name);
            return NGX_CONF_ERROR;
        }
    }
    return NGX_CONF_OK;
}
