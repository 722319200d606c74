/*
 * ngx_http_floodgate_module.c - nginx's limit_req for a whole fleet: the
 * state of every zone lives in Redis (floodgate's module), so all the
 * nginx servers that share a Redis admit one rate between them.
 *
 * The directives are limit_req's, prefixed, and behave as its own do
 * (docs/nginx.md): a zone names a key and a rate; floodgate_limit_req
 * takes a burst and nodelay or delay=n; a request beyond the burst is
 * rejected with floodgate_limit_req_status (503), one within it is delayed
 * to conform to the rate unless nodelay; $floodgate_limit_req_status tells
 * which. nginx's leaky bucket (an "excess" in milli-requests draining at
 * the rate) is floodgate's leaky bucket of capacity burst + 1 at the same
 * rate: the same requests pass, and a passed request's delay is the time
 * its place in the bucket takes to drain, less one request's.
 *
 * Nothing blocks a worker. In PREACCESS every limit of the location is
 * checked at once through floodgate_async.h (one pipelined connection per
 * worker, on nginx's own events and timers: the fg_loop below), the
 * request is suspended (r->main->count) and resumed by the last answer. A
 * request that ends first cancels its checks in its pool cleanup, which
 * also keeps the request's state across internal redirects, so that a
 * request is counted once. When Redis cannot answer within the server's
 * timeout, fail=open passes the request and fail=closed rejects it.
 */
#include "ngx_http_floodgate.h"

static ngx_str_t fgx_status_names[] = {
    ngx_null_string,        ngx_string("PASSED"),          ngx_string("DELAYED"),
    ngx_string("REJECTED"), ngx_string("DELAYED_DRY_RUN"), ngx_string("REJECTED_DRY_RUN"),
};

/* A request's way through its checks: sent, answered, and when a limit
 * refused, the limits that passed given their request back. */
enum { FGX_WAITING = 1, FGX_ANSWERED, FGX_REFUNDING, FGX_REFUNDED, FGX_DONE };

typedef struct fgx_ctx_s fgx_ctx_t;

typedef struct {
    fgx_ctx_t *ctx;
    fgx_limit_t *limit;
    fg_async_call *call;
    char *key; /* a zone's, for its refund */
    ngx_uint_t checked;
    fg_code rc;
    fg_result result;
} fgx_answer_t;

struct fgx_ctx_s {
    ngx_http_request_t *r;
    ngx_uint_t state;
    ngx_uint_t status;
    ngx_uint_t pending;
    ngx_uint_t n;
    ngx_uint_t rejected_by; /* the limit that refused, while the others refund */
    fgx_answer_t *answers;
};

static ngx_int_t fgx_init(ngx_conf_t *cf);
static ngx_int_t fgx_add_variables(ngx_conf_t *cf);
static void *fgx_create_main_conf(ngx_conf_t *cf);
static char *fgx_init_main_conf(ngx_conf_t *cf, void *conf);
static void *fgx_create_loc_conf(ngx_conf_t *cf);
static char *fgx_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child);
static char *fgx_server(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
static char *fgx_zone(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
static char *fgx_limit_req(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
static char *fgx_policy(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
static ngx_int_t fgx_init_process(ngx_cycle_t *cycle);
static void fgx_exit_process(ngx_cycle_t *cycle);

static ngx_conf_enum_t fgx_log_levels[] = {
    {ngx_string("info"), NGX_LOG_INFO},
    {ngx_string("notice"), NGX_LOG_NOTICE},
    {ngx_string("warn"), NGX_LOG_WARN},
    {ngx_string("error"), NGX_LOG_ERR},
    {ngx_null_string, 0},
};

static ngx_conf_num_bounds_t fgx_status_bounds = {ngx_conf_check_num_bounds, 400, 599};

static ngx_command_t fgx_commands[] = {
    {ngx_string("floodgate_server"), NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE123, fgx_server,
     NGX_HTTP_MAIN_CONF_OFFSET, 0, NULL},
    {ngx_string("floodgate_fail_log_level"), NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1,
     ngx_conf_set_enum_slot, NGX_HTTP_MAIN_CONF_OFFSET, offsetof(fgx_main_conf_t, fail_log_level),
     &fgx_log_levels},
    {ngx_string("floodgate_limit_req_zone"), NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE3, fgx_zone,
     NGX_HTTP_MAIN_CONF_OFFSET, 0, NULL},
    {ngx_string("floodgate_limit_req"),
     NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_TAKE123, fgx_limit_req,
     NGX_HTTP_LOC_CONF_OFFSET, 0, NULL},
    {ngx_string("floodgate_limit_req_log_level"),
     NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_TAKE1,
     ngx_conf_set_enum_slot, NGX_HTTP_LOC_CONF_OFFSET, offsetof(fgx_loc_conf_t, log_level),
     &fgx_log_levels},
    {ngx_string("floodgate_limit_req_status"),
     NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_TAKE1,
     ngx_conf_set_num_slot, NGX_HTTP_LOC_CONF_OFFSET, offsetof(fgx_loc_conf_t, status_code),
     &fgx_status_bounds},
    {ngx_string("floodgate_limit_req_headers"),
     NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_FLAG,
     ngx_conf_set_flag_slot, NGX_HTTP_LOC_CONF_OFFSET, offsetof(fgx_loc_conf_t, headers), NULL},
    {ngx_string("floodgate_limit_req_dry_run"),
     NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_FLAG,
     ngx_conf_set_flag_slot, NGX_HTTP_LOC_CONF_OFFSET, offsetof(fgx_loc_conf_t, dry_run), NULL},
    {ngx_string("floodgate_policy"),
     NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_TAKE2, fgx_policy,
     NGX_HTTP_LOC_CONF_OFFSET, 0, NULL},
    {ngx_string("floodgate_limit_conn_zone"), NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE2, fgx_conn_zone,
     NGX_HTTP_MAIN_CONF_OFFSET, 0, NULL},
    {ngx_string("floodgate_limit_conn"),
     NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_TAKE2, fgx_limit_conn,
     NGX_HTTP_LOC_CONF_OFFSET, 0, NULL},
    {ngx_string("floodgate_limit_conn_status"),
     NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_TAKE1,
     ngx_conf_set_num_slot, NGX_HTTP_LOC_CONF_OFFSET, offsetof(fgx_loc_conf_t, conn_status_code),
     &fgx_status_bounds},
    {ngx_string("floodgate_limit_conn_dry_run"),
     NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_FLAG,
     ngx_conf_set_flag_slot, NGX_HTTP_LOC_CONF_OFFSET, offsetof(fgx_loc_conf_t, conn_dry_run), NULL},
    {ngx_string("floodgate_limit_conn_log_level"),
     NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_TAKE1,
     ngx_conf_set_enum_slot, NGX_HTTP_LOC_CONF_OFFSET, offsetof(fgx_loc_conf_t, conn_log_level),
     &fgx_log_levels},
    {ngx_string("floodgate_limit_conn_lease"),
     NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_TAKE1,
     ngx_conf_set_msec_slot, NGX_HTTP_LOC_CONF_OFFSET, offsetof(fgx_loc_conf_t, conn_lease), NULL},
    ngx_null_command,
};

static ngx_http_module_t fgx_module_ctx = {
    fgx_add_variables,    /* preconfiguration */
    fgx_init,             /* postconfiguration */
    fgx_create_main_conf, /* create main configuration */
    fgx_init_main_conf,   /* init main configuration */
    NULL,                 /* create server configuration */
    NULL,                 /* merge server configuration */
    fgx_create_loc_conf,  /* create location configuration */
    fgx_merge_loc_conf,   /* merge location configuration */
};

ngx_module_t ngx_http_floodgate_module = {
    NGX_MODULE_V1,
    &fgx_module_ctx,  /* module context */
    fgx_commands,     /* module directives */
    NGX_HTTP_MODULE,  /* module type */
    NULL,             /* init master */
    NULL,             /* init module */
    fgx_init_process, /* init process */
    NULL,             /* init thread */
    NULL,             /* exit thread */
    fgx_exit_process, /* exit process */
    NULL,             /* exit master */
    NGX_MODULE_V1_PADDING,
};

/* ================================================= the loop: nginx's events */

/* A watch is an nginx connection around hiredis's socket, with
 * level-triggered events: hiredis reads once per readiness. hiredis owns
 * the descriptor and closes it after unwatch. */
typedef struct {
    ngx_connection_t *c;
    void (*ready)(void *arg, int events);
    void *arg;
} fgx_watch_t;

static void fgx_on_io(ngx_event_t *ev) {
    ngx_connection_t *c = ev->data;
    fgx_watch_t *w = c->data;
    w->ready(w->arg, ev->write ? FG_EV_WRITE : FG_EV_READ);
}

static void *fgx_watch(void *loop, int fd, void (*ready)(void *arg, int events), void *arg) {
    fgx_watch_t *w = ngx_calloc(sizeof(*w), ngx_cycle->log);
    if (w == NULL) return NULL;
    ngx_connection_t *c = ngx_get_connection(fd, ngx_cycle->log);
    if (c == NULL) {
        ngx_free(w);
        return NULL;
    }
    c->data = w;
    c->log = ngx_cycle->log;
    c->read->log = c->log;
    c->write->log = c->log;
    c->read->handler = fgx_on_io;
    c->write->handler = fgx_on_io;
    w->c = c;
    w->ready = ready;
    w->arg = arg;
    return w;
}

static void fgx_want_one(ngx_event_t *ev, ngx_int_t event, int wanted) {
    if (wanted && !ev->active)
        (void)ngx_add_event(ev, event, NGX_LEVEL_EVENT);
    else if (!wanted && ev->active)
        (void)ngx_del_event(ev, event, 0);
}

static void fgx_want(void *p, int events) {
    fgx_watch_t *w = p;
    fgx_want_one(w->c->read, NGX_READ_EVENT, events & FG_EV_READ);
    fgx_want_one(w->c->write, NGX_WRITE_EVENT, events & FG_EV_WRITE);
}

static void fgx_unwatch(void *p) {
    fgx_watch_t *w = p;
    ngx_connection_t *c = w->c;
    fgx_want(w, 0);
    if (c->read->timer_set) ngx_del_timer(c->read);
    if (c->write->timer_set) ngx_del_timer(c->write);
    /* ngx_delete_posted_event is two statements: braces, not a bare if */
    if (c->read->posted) {
        ngx_delete_posted_event(c->read);
    }
    if (c->write->posted) {
        ngx_delete_posted_event(c->write);
    }
    ngx_free_connection(c);
    c->fd = (ngx_socket_t)-1;
    ngx_free(w);
}

typedef struct {
    ngx_event_t ev;
    void (*fire)(void *arg);
    void *arg;
} fgx_timer_t;

static void fgx_on_timer(ngx_event_t *ev) {
    fgx_timer_t *t = ev->data;
    t->fire(t->arg);
}

static void *fgx_timer(void *loop, void (*fire)(void *arg), void *arg) {
    fgx_timer_t *t = ngx_calloc(sizeof(*t), ngx_cycle->log);
    if (t == NULL) return NULL;
    t->ev.handler = fgx_on_timer;
    t->ev.data = t;
    t->ev.log = ngx_cycle->log;
    t->fire = fire;
    t->arg = arg;
    return t;
}

/* nginx ignores a new time within 300 ms of the old one: delete first. */
static void fgx_arm(void *p, int64_t after_ms) {
    fgx_timer_t *t = p;
    if (t->ev.timer_set) ngx_del_timer(&t->ev);
    ngx_add_timer(&t->ev, (ngx_msec_t)after_ms);
}

static void fgx_disarm(void *p) {
    fgx_timer_t *t = p;
    if (t->ev.timer_set) ngx_del_timer(&t->ev);
}

static void fgx_free_timer(void *p) {
    fgx_disarm(p);
    ngx_free(p);
}

static const fg_loop fgx_loop = {NULL,    fgx_watch,  fgx_want,  fgx_unwatch,
                                 fgx_timer, fgx_arm, fgx_disarm, fgx_free_timer};

/* ============================================ the failure policy's decisions */

/* Every check fail= decides is counted. The first after a quiet second is
 * logged with its request and its reason; those that follow within the
 * second are summed up in one line when it ends, so that an outage of
 * Redis cannot flood the log. The counts are the worker's. */
#define FGX_FAIL_LOG_MS 1000

static struct {
    ngx_uint_t total;    /* since the worker started */
    ngx_uint_t unlogged; /* since the last line */
    ngx_uint_t logged;   /* a line was written */
    ngx_msec_t logged_at;
    ngx_event_t flush;
} fgx_failures;

static void fgx_failures_flush(ngx_event_t *ev) {
    fgx_main_conf_t *mcf = ev->data;
    ngx_log_error(mcf->fail_log_level, ev->log, 0,
                  "floodgate: fail=%s: %ui more checks taken as %s in %M ms, %ui since the "
                  "worker started",
                  mcf->fail_closed ? "closed" : "open", fgx_failures.unlogged,
                  mcf->fail_closed ? "rejected" : "passed",
                  (ngx_msec_t)(ngx_current_msec - fgx_failures.logged_at), fgx_failures.total);
    fgx_failures.unlogged = 0;
    fgx_failures.logged_at = ngx_current_msec;
}

void fgx_failed(ngx_http_request_t *r, const char *kind, const ngx_str_t *name,
                const char *reason) {
    fgx_main_conf_t *mcf = ngx_http_get_module_main_conf(r, ngx_http_floodgate_module);
    ngx_msec_t since = ngx_current_msec - fgx_failures.logged_at;
    fgx_failures.total++;
    if (fgx_failures.flush.timer_set || (fgx_failures.logged && since < FGX_FAIL_LOG_MS)) {
        fgx_failures.unlogged++;
        if (!fgx_failures.flush.timer_set)
            ngx_add_timer(&fgx_failures.flush, FGX_FAIL_LOG_MS - since);
        return;
    }
    fgx_failures.logged = 1;
    fgx_failures.logged_at = ngx_current_msec;
    ngx_log_error(mcf->fail_log_level, r->connection->log, 0,
                  "floodgate: fail=%s: %s \"%V\" not checked, taken as %s: %s",
                  mcf->fail_closed ? "closed" : "open", kind, name,
                  mcf->fail_closed ? "rejected" : "passed", reason);
}

/* ====================================================== the worker's client */

static ngx_int_t fgx_init_process(ngx_cycle_t *cycle) {
    fgx_main_conf_t *mcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_floodgate_module);
    if (mcf == NULL || mcf->url.len == 0) return NGX_OK; /* no limits: fgx_merge_loc_conf */
    fgx_failures.flush.handler = fgx_failures_flush;
    fgx_failures.flush.data = mcf;
    fgx_failures.flush.log = cycle->log;
    fgx_failures.flush.cancelable = 1; /* a worker that exits does not wait for it */
    fg_options o;
    fg_options_init(&o);
    o.connect_timeout_ms = o.command_timeout_ms = (int)mcf->timeout;
    /* the library answers FG_CODE_IO; fgx_failed decides, counts and logs */
    o.on_failure = FG_ON_FAILURE_ERROR;
    fg_error err;
    mcf->client = fg_async_open((const char *)mcf->url.data, &o, &fgx_loop, &err);
    /* Never fail a worker (it would not be respawned): fail= decides. */
    if (mcf->client == NULL)
        ngx_log_error(NGX_LOG_EMERG, cycle->log, 0, "floodgate: %s: fail=%s decides every check",
                      err.message, mcf->fail_closed ? "closed" : "open");
    return NGX_OK;
}

static void fgx_exit_process(ngx_cycle_t *cycle) {
    fgx_main_conf_t *mcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_floodgate_module);
    if (mcf != NULL && mcf->client != NULL) fg_async_close(mcf->client);
    if (mcf != NULL) mcf->client = NULL;
}

/* ============================================================ the requests */

/* The request's state lives in a pool cleanup, found again after an
 * internal redirect zeroes the module contexts (the realip module's way). */
static void fgx_cleanup(void *data) {
    fgx_ctx_t *ctx = data;
    /* whatever the state: a start that failed half way has calls in flight,
     * and an answered call's handle is NULL already */
    for (ngx_uint_t i = 0; i < ctx->n; i++) fg_async_cancel(ctx->answers[i].call);
}

/* (A subrequest shares its main request's pool, so the pool holds the
 * states of both: each is known by its request.) */
static fgx_ctx_t *fgx_get_ctx(ngx_http_request_t *r) {
    fgx_ctx_t *ctx = ngx_http_get_module_ctx(r, ngx_http_floodgate_module);
    if (ctx != NULL) return ctx;
    for (ngx_pool_cleanup_t *cln = r->pool->cleanup; cln != NULL; cln = cln->next)
        if (cln->handler == fgx_cleanup && ((fgx_ctx_t *)cln->data)->r == r) {
            ctx = cln->data;
            ngx_http_set_ctx(r, ctx, ngx_http_floodgate_module);
            return ctx;
        }
    return NULL;
}

/* limit_req keeps its status on the main request, set by whichever of it
 * and its subrequests was limited (only one is: the status stops the
 * others); here it is the status of any state in their pool. */
static ngx_uint_t fgx_main_status(ngx_http_request_t *r) {
    for (ngx_pool_cleanup_t *cln = r->main->pool->cleanup; cln != NULL; cln = cln->next)
        if (cln->handler == fgx_cleanup && ((fgx_ctx_t *)cln->data)->status != 0)
            return ((fgx_ctx_t *)cln->data)->status;
    return 0;
}

static fgx_ctx_t *fgx_new_ctx(ngx_http_request_t *r, ngx_uint_t n) {
    ngx_pool_cleanup_t *cln = ngx_pool_cleanup_add(r->pool, sizeof(fgx_ctx_t));
    if (cln == NULL) return NULL;
    fgx_ctx_t *ctx = cln->data;
    ngx_memzero(ctx, sizeof(*ctx));
    ctx->answers = ngx_pcalloc(r->pool, n * sizeof(fgx_answer_t));
    if (ctx->answers == NULL) return NULL;
    ctx->r = r;
    ctx->n = n;
    cln->handler = fgx_cleanup;
    ngx_http_set_ctx(r, ctx, ngx_http_floodgate_module);
    return ctx;
}

size_t fgx_key_size(const char *kind, const ngx_str_t *name, const ngx_str_t *v) {
    return FG_REQUEST_KEY_ROOM(ngx_strlen(kind), name->len, v->len);
}

u_char *fgx_key_write(u_char *p, const char *kind, const ngx_str_t *name, const ngx_str_t *v) {
    size_t len = fg_request_key((char *)p, fgx_key_size(kind, name, v), kind,
                                (const char *)name->data, v->data, v->len);
    return p + len + 1;
}

static char *fgx_redis_key(ngx_http_request_t *r, const char *kind, const ngx_str_t *name,
                           const ngx_str_t *v) {
    u_char *key = ngx_pnalloc(r->pool, fgx_key_size(kind, name, v));
    if (key == NULL) return NULL;
    fgx_key_write(key, kind, name, v);
    return (char *)key;
}

void fgx_resume(ngx_http_request_t *r) {
    r->main->count--;
    r->read_event_handler = ngx_http_block_reading;
    r->write_event_handler = ngx_http_core_run_phases;
    ngx_connection_t *c = r->connection;
    ngx_http_core_run_phases(r);
    ngx_http_run_posted_requests(c); /* run from Redis's events, not the request's */
}

static void fgx_limit_failed(ngx_http_request_t *r, fgx_answer_t *a, const char *reason) {
    fgx_limit_t *l = a->limit;
    if (l->zone != NULL)
        fgx_failed(r, "zone", &l->zone->name, reason);
    else
        fgx_failed(r, "policy", &l->policy, reason);
}

static void fgx_answered(fg_code rc, const fg_result *result, const fg_error *err, void *arg) {
    fgx_answer_t *a = arg;
    fgx_ctx_t *ctx = a->ctx;
    ngx_http_request_t *r = ctx->r;
    a->rc = rc;
    if (result != NULL) a->result = *result;
    if (rc != FG_CODE_OK) fgx_limit_failed(r, a, err->message);
    if (--ctx->pending > 0) return;
    ctx->state = FGX_ANSWERED;
    fgx_resume(r);
}

static void fgx_policy_answered(fg_code rc, const fg_policy_result *result, const fg_error *err,
                                void *arg) {
    fgx_answered(rc, result != NULL ? &result->result : NULL, err, arg);
}

/* Sends the check of one limit, or of one policy: NGX_OK; NGX_DONE when it
 * was decided at once by fail=; NGX_DECLINED for an empty key. */
static ngx_int_t fgx_send(ngx_http_request_t *r, fgx_main_conf_t *mcf, fgx_limit_t *l,
                          fgx_answer_t *a) {
    ngx_str_t v;
    fg_error err;
    fg_code rc;
    if (ngx_http_complex_value(r, l->zone != NULL ? &l->zone->key : l->policy_key, &v) != NGX_OK)
        return NGX_ERROR;
    if (v.len == 0) return NGX_DECLINED; /* as limit_req: an empty key is not limited */
    if (mcf->client == NULL) {
        a->rc = FG_CODE_IO;
        fgx_limit_failed(r, a, FGX_NO_CLIENT);
        return NGX_DONE;
    }
    if (l->zone != NULL) {
        char *key = fgx_redis_key(r, "limit_req", &l->zone->name, &v);
        if (key == NULL) return NGX_ERROR;
        a->key = key;
        rc = fg_async_check(mcf->client, key, &l->limit, 1, fgx_answered, a, &a->call, &err);
    } else {
        char *key = fgx_redis_key(r, "policy", &l->policy, &v);
        if (key == NULL) return NGX_ERROR;
        /* the lists match the value as the key holds it, past "policy:name:" */
        const char *identity = key + sizeof("policy:") + l->policy.len;
        rc = fg_async_policy_check(mcf->client, (const char *)l->policy.data, key, identity, 1,
                                   fgx_policy_answered, a, &a->call, &err);
    }
    if (rc != FG_CODE_OK) {
        a->rc = rc;
        fgx_limit_failed(r, a, err.message);
        return NGX_DONE;
    }
    return NGX_OK;
}

/* The request waits for Redis: the phases stop until fgx_resume. */
static void fgx_wait(ngx_http_request_t *r, fgx_ctx_t *ctx, ngx_uint_t state) {
    ctx->state = state;
    r->main->count++;
    r->read_event_handler = ngx_http_test_reading;
    r->write_event_handler = ngx_http_request_empty_handler;
}

/* Sends the checks of every limit; NGX_DONE when the request waits. */
static ngx_int_t fgx_start(ngx_http_request_t *r, fgx_main_conf_t *mcf, fgx_loc_conf_t *lcf,
                           fgx_ctx_t *ctx) {
    fgx_limit_t *limits = lcf->limits->elts;
    for (ngx_uint_t i = 0; i < ctx->n; i++) {
        fgx_answer_t *a = &ctx->answers[i];
        a->ctx = ctx;
        a->limit = &limits[i];
        ngx_int_t rc = fgx_send(r, mcf, &limits[i], a);
        if (rc == NGX_ERROR) return NGX_ERROR;
        if (rc == NGX_DECLINED) continue;
        a->checked = 1;
        if (rc == NGX_OK) ctx->pending++;
    }
    if (ctx->pending == 0) {
        ctx->state = FGX_ANSWERED;
        return NGX_AGAIN; /* decided now, by the caller */
    }
    fgx_wait(r, ctx, FGX_WAITING);
    return NGX_DONE;
}

static void fgx_refunded(fg_code rc, int64_t units, const fg_error *err, void *arg) {
    (void)units;
    fgx_answer_t *a = arg;
    fgx_ctx_t *ctx = a->ctx;
    if (rc != FG_CODE_OK) fgx_limit_failed(ctx->r, a, err->message);
    if (--ctx->pending > 0) return;
    ctx->state = FGX_REFUNDED;
    fgx_resume(ctx->r);
}

/* All or nothing, as limit_req charges its zones only when all pass: when
 * one limit refused, the zones that passed give the request back (a
 * policy cannot). The refusal is answered once Redis has them, so that
 * the client's next request finds them back. NGX_DONE while it waits. */
static ngx_int_t fgx_refund(ngx_http_request_t *r, fgx_main_conf_t *mcf, fgx_ctx_t *ctx) {
    for (ngx_uint_t i = 0; i < ctx->n; i++) {
        fgx_answer_t *a = &ctx->answers[i];
        if (!a->checked || a->rc != FG_CODE_OK || !a->result.allowed || a->key == NULL) continue;
        fg_error err;
        if (fg_async_refund(mcf->client, a->key, &a->limit->limit, 1, fgx_refunded, a, &a->call,
                            &err) != FG_CODE_OK) {
            fgx_limit_failed(r, a, err.message);
            continue;
        }
        ctx->pending++;
    }
    if (ctx->pending == 0) return NGX_OK;
    fgx_wait(r, ctx, FGX_REFUNDING);
    return NGX_DONE;
}

/* As limit_req's: the phases go on once the write event's timer fired. */
static void fgx_delay(ngx_http_request_t *r) {
    ngx_event_t *wev = r->connection->write;
    if (wev->delayed) {
        if (ngx_handle_write_event(wev, 0) != NGX_OK)
            ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }
    if (ngx_handle_read_event(r->connection->read, 0) != NGX_OK) {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }
    r->read_event_handler = ngx_http_block_reading;
    r->write_event_handler = ngx_http_core_run_phases;
    ngx_http_core_run_phases(r);
}

/* A zone's bucket lets one request leak per interval: 1e9 ns over the
 * rate, to the nearest ns, as the library makes the bucket (params.c). */
static double fgx_interval_ms(const fgx_zone_t *z) {
    double ns = 1e9 / (z->rate / 1000.0);
    return (ns < 1 ? 1 : (double)(int64_t)(ns + 0.5)) / 1e6;
}

/* The bucket's level after a passed request, in requests: its reset
 * (the level as time, rounded up to the ms) over the interval. */
static double fgx_level(const fgx_limit_t *l, const fg_result *res) {
    return res->reset_after_ms / fgx_interval_ms(l->zone);
}

/* A passed request waits until it conforms to the rate: the time of the
 * bucket's level beyond 1 + delay requests. The reset is rounded up to
 * the ms, so the wait is rounded down: a request within its allowance
 * waits 0, as limit_req's does, whether or not the interval is a whole
 * number of ms. */
static ngx_msec_t fgx_wait_ms(const fgx_limit_t *l, const fg_result *res) {
    if (l->delay == FGX_NODELAY) return 0;
    double wait = res->reset_after_ms - fgx_interval_ms(l->zone) * (double)(1 + l->delay);
    return wait >= 1 ? (ngx_msec_t)wait : 0;
}

/* limit_req's excess, in thousandths of a request: the requests in the
 * bucket beyond the one being served (of a rejected request, the level it
 * found, which its own would have raised by one). */
static ngx_uint_t fgx_excess(const fgx_limit_t *l, const fg_result *res, ngx_uint_t allowed) {
    double excess = (fgx_level(l, res) - (allowed ? 1 : 0)) * 1000;
    return excess > 0 ? (ngx_uint_t)(excess + 0.5) : 0;
}

static ngx_int_t fgx_add_header(ngx_http_request_t *r, const char *name, u_char *value,
                                u_char *end) {
    ngx_table_elt_t *h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) return NGX_ERROR;
    h->hash = 1;
    h->key.data = (u_char *)name;
    h->key.len = ngx_strlen(name);
    h->value.data = value;
    h->value.len = end - value;
    return NGX_OK;
}

static int64_t fgx_seconds(int64_t ms) {
    return ms <= 0 ? 0 : (ms + 999) / 1000;
}

/* The IETF httpapi draft's fields, one list member per limit checked:
 *   RateLimit-Policy: "zone";q=<burst + 1>;w=<seconds to drain them>
 *   RateLimit: "zone";r=<remaining>;t=<seconds until full again>
 * and Retry-After on a rejection. */
static ngx_int_t fgx_add_headers(ngx_http_request_t *r, fgx_loc_conf_t *lcf, fgx_ctx_t *ctx,
                                 ngx_uint_t rejected_by) {
    fgx_limit_t *limits = lcf->limits->elts;
    size_t room = 0;
    for (ngx_uint_t i = 0; i < ctx->n; i++)
        room += (limits[i].zone != NULL ? limits[i].zone->name.len : 0) + 64;
    u_char *policy = ngx_pnalloc(r->pool, room), *now = ngx_pnalloc(r->pool, room);
    if (policy == NULL || now == NULL) return NGX_ERROR;
    u_char *p = policy, *q = now;
    for (ngx_uint_t i = 0; i < ctx->n; i++) {
        fgx_answer_t *a = &ctx->answers[i];
        if (!a->checked || a->rc != FG_CODE_OK || limits[i].zone == NULL) continue;
        fgx_limit_t *l = &limits[i];
        int64_t quota = (int64_t)l->burst + 1;
        int64_t window = fgx_seconds(quota * 1000000 / (int64_t)l->zone->rate);
        p = ngx_sprintf(p, "%s\"%V\";q=%L;w=%L", p == policy ? "" : ", ", &l->zone->name, quota,
                        window);
        q = ngx_sprintf(q, "%s\"%V\";r=%L;t=%L", q == now ? "" : ", ", &l->zone->name,
                        a->result.remaining, fgx_seconds(a->result.reset_after_ms));
    }
    if (p == policy) return NGX_OK;
    if (fgx_add_header(r, "RateLimit-Policy", policy, p) != NGX_OK ||
        fgx_add_header(r, "RateLimit", now, q) != NGX_OK)
        return NGX_ERROR;
    if (rejected_by == ctx->n || ctx->answers[rejected_by].rc != FG_CODE_OK ||
        ctx->answers[rejected_by].result.retry_after_ms < 0)
        return NGX_OK;
    u_char *retry = ngx_pnalloc(r->pool, NGX_INT64_LEN);
    if (retry == NULL) return NGX_ERROR;
    u_char *end = ngx_sprintf(retry, "%L", fgx_seconds(ctx->answers[rejected_by].result.retry_after_ms));
    return fgx_add_header(r, "Retry-After", retry, end);
}

/* A refused request: logged in limit_req's words, answered with the status
 * (in a dry run, passed on). */
static ngx_int_t fgx_reject(ngx_http_request_t *r, fgx_loc_conf_t *lcf, fgx_ctx_t *ctx) {
    ctx->state = FGX_DONE;
    ctx->status = lcf->dry_run ? FGX_REJECTED_DRY_RUN : FGX_REJECTED;
    ngx_uint_t level = lcf->log_level;
    fgx_limit_t *by = &((fgx_limit_t *)lcf->limits->elts)[ctx->rejected_by];
    fgx_answer_t *a = &ctx->answers[ctx->rejected_by];
    if (by->zone == NULL) {
        ngx_log_error(level, r->connection->log, 0, "limiting requests%s by policy \"%V\"",
                      lcf->dry_run ? ", dry run," : "", &by->policy);
    } else if (a->rc != FG_CODE_OK) { /* fail closed: no bucket was read */
        ngx_log_error(level, r->connection->log, 0, "limiting requests%s by zone \"%V\"",
                      lcf->dry_run ? ", dry run," : "", &by->zone->name);
    } else { /* limit_req's words */
        ngx_uint_t excess = fgx_excess(by, &a->result, 0);
        ngx_log_error(level, r->connection->log, 0,
                      "limiting requests%s, excess: %ui.%03ui by zone \"%V\"",
                      lcf->dry_run ? ", dry run" : "", excess / 1000, excess % 1000,
                      &by->zone->name);
    }
    return lcf->dry_run ? NGX_DECLINED : (ngx_int_t)lcf->status_code;
}

static ngx_int_t fgx_decide(ngx_http_request_t *r, fgx_main_conf_t *mcf, fgx_loc_conf_t *lcf,
                            fgx_ctx_t *ctx) {
    fgx_limit_t *limits = lcf->limits->elts;
    ngx_msec_t delay = 0;
    ngx_uint_t rejected_by = ctx->n, delayed_by = ctx->n, checked = 0;
    for (ngx_uint_t i = 0; i < ctx->n; i++) {
        fgx_answer_t *a = &ctx->answers[i];
        if (!a->checked) continue;
        checked = 1;
        ngx_uint_t allowed = a->rc == FG_CODE_OK ? a->result.allowed : !mcf->fail_closed;
        if (!allowed && rejected_by == ctx->n) rejected_by = i;
        if (allowed && a->rc == FG_CODE_OK && limits[i].zone != NULL) {
            ngx_msec_t wait = fgx_wait_ms(&limits[i], &a->result);
            if (wait > delay) {
                delay = wait;
                delayed_by = i;
            }
        }
    }
    ctx->state = FGX_DONE;
    if (lcf->headers && fgx_add_headers(r, lcf, ctx, rejected_by) != NGX_OK) return NGX_ERROR;
    if (rejected_by < ctx->n) {
        ctx->rejected_by = rejected_by;
        if (fgx_refund(r, mcf, ctx) == NGX_DONE) return NGX_DONE;
        return fgx_reject(r, lcf, ctx);
    }
    if (delay == 0) {
        ctx->status = checked ? FGX_PASSED : 0; /* as limit_req: no key, no status */
        return NGX_DECLINED;
    }
    ctx->status = lcf->dry_run ? FGX_DELAYED_DRY_RUN : FGX_DELAYED;
    ngx_uint_t level = lcf->log_level == NGX_LOG_INFO ? NGX_LOG_INFO : lcf->log_level + 1;
    ngx_uint_t excess = fgx_excess(&limits[delayed_by], &ctx->answers[delayed_by].result, 1);
    ngx_log_error(level, r->connection->log, 0, "delaying request%s, excess: %ui.%03ui, by zone \"%V\"",
                  lcf->dry_run ? ", dry run" : "", excess / 1000, excess % 1000,
                  &limits[delayed_by].zone->name);
    if (lcf->dry_run) return NGX_DECLINED;
    if (r->connection->read->ready) {
        ngx_post_event(r->connection->read, &ngx_posted_events); /* a macro with an if */
    } else if (ngx_handle_read_event(r->connection->read, 0) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }
    r->read_event_handler = ngx_http_test_reading;
    r->write_event_handler = fgx_delay;
    r->connection->write->delayed = 1;
    ngx_add_timer(r->connection->write, delay);
    return NGX_AGAIN;
}

static ngx_int_t fgx_handler(ngx_http_request_t *r) {
    fgx_loc_conf_t *lcf = ngx_http_get_module_loc_conf(r, ngx_http_floodgate_module);
    fgx_main_conf_t *mcf = ngx_http_get_module_main_conf(r, ngx_http_floodgate_module);
    if (lcf->limits == NULL) return NGX_DECLINED;
    fgx_ctx_t *ctx = fgx_get_ctx(r);
    if (ctx == NULL) {
        /* as limit_req: a subrequest is limited unless its main request (or
         * another of its subrequests) was */
        if (r != r->main && fgx_main_status(r) != 0) return NGX_DECLINED;
        if ((ctx = fgx_new_ctx(r, lcf->limits->nelts)) == NULL) return NGX_ERROR;
        ngx_int_t rc = fgx_start(r, mcf, lcf, ctx);
        if (rc != NGX_AGAIN) return rc;
    }
    switch (ctx->state) {
    case FGX_WAITING:
    case FGX_REFUNDING: return NGX_AGAIN;
    case FGX_ANSWERED: return fgx_decide(r, mcf, lcf, ctx);
    case FGX_REFUNDED: return fgx_reject(r, lcf, ctx);
    default: return NGX_DECLINED; /* decided before a delay or a redirect */
    }
}

void fgx_status_value(ngx_http_variable_value_t *v, ngx_uint_t status) {
    if (status == 0) {
        v->not_found = 1;
        return;
    }
    v->len = fgx_status_names[status].len;
    v->valid = 1;
    v->no_cacheable = 0;
    v->not_found = 0;
    v->data = fgx_status_names[status].data;
}

static ngx_int_t fgx_status_variable(ngx_http_request_t *r, ngx_http_variable_value_t *v,
                                     uintptr_t data) {
    fgx_status_value(v, fgx_main_status(r));
    return NGX_OK;
}

/* ========================================================= configuration */

static ngx_int_t fgx_add_variables(ngx_conf_t *cf) {
    static ngx_str_t req = ngx_string("floodgate_limit_req_status");
    static ngx_str_t conn = ngx_string("floodgate_limit_conn_status");
    ngx_http_variable_t *var = ngx_http_add_variable(cf, &req, NGX_HTTP_VAR_NOCACHEABLE);
    if (var == NULL) return NGX_ERROR;
    var->get_handler = fgx_status_variable;
    if ((var = ngx_http_add_variable(cf, &conn, NGX_HTTP_VAR_NOCACHEABLE)) == NULL)
        return NGX_ERROR;
    var->get_handler = fgx_conn_status_variable;
    return NGX_OK;
}

static ngx_int_t fgx_init(ngx_conf_t *cf) {
    ngx_http_core_main_conf_t *cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);
    /* limit_conn after limit_req, as nginx's own run, so that a delayed or
     * rejected request holds no slot meanwhile; a phase runs its handlers
     * in the reverse order of their registration */
    ngx_http_handler_pt *h = ngx_array_push(&cmcf->phases[NGX_HTTP_PREACCESS_PHASE].handlers);
    if (h == NULL) return NGX_ERROR;
    *h = fgx_conn_handler;
    if ((h = ngx_array_push(&cmcf->phases[NGX_HTTP_PREACCESS_PHASE].handlers)) == NULL)
        return NGX_ERROR;
    *h = fgx_handler;
    return NGX_OK;
}

static void *fgx_create_main_conf(ngx_conf_t *cf) {
    fgx_main_conf_t *mcf = ngx_pcalloc(cf->pool, sizeof(*mcf));
    if (mcf == NULL) return NULL;
    mcf->timeout = 1000;
    mcf->fail_log_level = NGX_CONF_UNSET_UINT;
    if (ngx_array_init(&mcf->zones, cf->pool, 4, sizeof(fgx_zone_t)) != NGX_OK ||
        ngx_array_init(&mcf->conn_zones, cf->pool, 4, sizeof(fgx_conn_zone_t)) != NGX_OK)
        return NULL;
    return mcf;
}

static char *fgx_init_main_conf(ngx_conf_t *cf, void *conf) {
    fgx_main_conf_t *mcf = conf;
    ngx_conf_init_uint_value(mcf->fail_log_level, NGX_LOG_ERR);
    return NGX_CONF_OK;
}

static void *fgx_create_loc_conf(ngx_conf_t *cf) {
    fgx_loc_conf_t *lcf = ngx_pcalloc(cf->pool, sizeof(*lcf));
    if (lcf == NULL) return NULL;
    lcf->status_code = NGX_CONF_UNSET_UINT;
    lcf->dry_run = NGX_CONF_UNSET;
    lcf->headers = NGX_CONF_UNSET;
    lcf->conn_status_code = NGX_CONF_UNSET_UINT;
    lcf->conn_dry_run = NGX_CONF_UNSET;
    lcf->conn_log_level = NGX_CONF_UNSET_UINT;
    lcf->conn_lease = NGX_CONF_UNSET_MSEC;
    lcf->log_level = NGX_CONF_UNSET_UINT;
    return lcf;
}

ngx_uint_t fgx_same(const ngx_str_t *a, const ngx_str_t *b) {
    return a->len == b->len && ngx_strncmp(a->data, b->data, a->len) == 0;
}

char *fgx_compile(ngx_conf_t *cf, ngx_str_t *value, ngx_http_complex_value_t *cv) {
    ngx_http_compile_complex_value_t ccv;
    ngx_memzero(&ccv, sizeof(ccv));
    ccv.cf = cf;
    ccv.value = value;
    ccv.complex_value = cv;
    return ngx_http_compile_complex_value(&ccv) == NGX_OK ? NGX_CONF_OK : NGX_CONF_ERROR;
}

/* zone=name, or limit_req_zone's and limit_conn_zone's zone=name:size, so
 * that their lines carry over with only the directives' names changed: the
 * size is checked as nginx checks it, and unused (the state is in Redis). */
char *fgx_zone_name(ngx_conf_t *cf, ngx_str_t *arg, ngx_str_t *name) {
    if (ngx_strncmp(arg->data, "zone=", 5) != 0 || arg->len == 5) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "invalid parameter \"%V\"", arg);
        return NGX_CONF_ERROR;
    }
    name->data = arg->data + 5;
    name->len = arg->len - 5;
    u_char *colon = ngx_strlchr(name->data, name->data + name->len, ':');
    if (colon != NULL) {
        ngx_str_t size = {(size_t)(name->data + name->len - colon - 1), colon + 1};
        ssize_t bytes = ngx_parse_size(&size);
        if (bytes == NGX_ERROR) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "invalid zone size \"%V\"", arg);
            return NGX_CONF_ERROR;
        }
        if (bytes < (ssize_t)(8 * ngx_pagesize)) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "zone \"%V\" is too small", arg);
            return NGX_CONF_ERROR;
        }
        name->len = (size_t)(colon - name->data);
        *colon = '\0'; /* the name is a C string from here on */
    }
    if (!fgx_key_name_ok(name)) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "invalid zone name \"%V\"", name);
        return NGX_CONF_ERROR;
    }
    return NGX_CONF_OK;
}

ngx_uint_t fgx_key_name_ok(const ngx_str_t *name) {
    return ngx_strlen(name->data) == name->len &&
           fg_request_key(NULL, 0, "kind", (const char *)name->data, "", 0) > 0;
}

/* A zone's name is the zone's alone, across both kinds, in nginx's words
 * for a name taken twice. */
char *fgx_zone_unique(ngx_conf_t *cf, ngx_command_t *cmd, const ngx_str_t *name,
                      ngx_uint_t conn) {
    fgx_main_conf_t *mcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_floodgate_module);
    const ngx_http_complex_value_t *req_key = NULL, *conn_key = NULL;
    fgx_zone_t *req = mcf->zones.elts;
    for (ngx_uint_t i = 0; i < mcf->zones.nelts; i++)
        if (fgx_same(&req[i].name, name)) req_key = &req[i].key;
    fgx_conn_zone_t *cz = mcf->conn_zones.elts;
    for (ngx_uint_t i = 0; i < mcf->conn_zones.nelts; i++)
        if (fgx_same(&cz[i].name, name)) conn_key = &cz[i].key;
    const ngx_http_complex_value_t *same = conn ? conn_key : req_key;
    if (same != NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "%V \"%V\" is already bound to key \"%V\"",
                           &cmd->name, name, &same->value);
        return NGX_CONF_ERROR;
    }
    if ((conn ? req_key : conn_key) != NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "the zone \"%V\" is already declared for a different use", name);
        return NGX_CONF_ERROR;
    }
    return NGX_CONF_OK;
}

/* A limit's zone, found by name among the http block's zones. */
static char *fgx_resolve(ngx_conf_t *cf, fgx_limit_t *l) {
    fgx_main_conf_t *mcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_floodgate_module);
    fgx_zone_t *zones = mcf->zones.elts;
    for (ngx_uint_t i = 0; i < mcf->zones.nelts; i++)
        if (fgx_same(&zones[i].name, &l->zone_name)) {
            l->zone = &zones[i];
            /* capacity burst + 1 at the zone's rate: limit_req's bucket */
            l->limit = fg_leaky_bucket((int64_t)l->burst + 1, zones[i].rate / 1000.0);
            return NGX_CONF_OK;
        }
    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "unknown floodgate_limit_req_zone \"%V\"",
                       &l->zone_name);
    return NGX_CONF_ERROR;
}

static char *fgx_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child) {
    fgx_loc_conf_t *prev = parent, *conf = child;
    fgx_main_conf_t *mcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_floodgate_module);
    if (conf->limits == NULL) conf->limits = prev->limits;
    if (conf->conn_limits == NULL) conf->conn_limits = prev->conn_limits;
    fgx_limit_t *l = conf->limits != NULL ? conf->limits->elts : NULL;
    for (ngx_uint_t i = 0; l != NULL && i < conf->limits->nelts; i++)
        if (l[i].zone == NULL && l[i].policy.len == 0 && fgx_resolve(cf, &l[i]) != NGX_CONF_OK)
            return NGX_CONF_ERROR;
    ngx_conf_merge_uint_value(conf->status_code, prev->status_code, NGX_HTTP_SERVICE_UNAVAILABLE);
    ngx_conf_merge_value(conf->dry_run, prev->dry_run, 0);
    ngx_conf_merge_value(conf->headers, prev->headers, 0);
    ngx_conf_merge_uint_value(conf->log_level, prev->log_level, NGX_LOG_ERR);
    if (fgx_conn_resolve(cf, conf) != NGX_CONF_OK) return NGX_CONF_ERROR;
    if ((conf->limits != NULL || conf->conn_limits != NULL) && mcf->url.len == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "no \"floodgate_server\" is defined");
        return NGX_CONF_ERROR;
    }
    ngx_conf_merge_uint_value(conf->conn_status_code, prev->conn_status_code,
                              NGX_HTTP_SERVICE_UNAVAILABLE);
    ngx_conf_merge_value(conf->conn_dry_run, prev->conn_dry_run, 0);
    ngx_conf_merge_uint_value(conf->conn_log_level, prev->conn_log_level, NGX_LOG_ERR);
    ngx_conf_merge_msec_value(conf->conn_lease, prev->conn_lease, 30000);
    return NGX_CONF_OK;
}

/* floodgate_server URL [timeout] [fail=open|closed] */
static char *fgx_server(ngx_conf_t *cf, ngx_command_t *cmd, void *conf) {
    fgx_main_conf_t *mcf = conf;
    ngx_str_t *value = cf->args->elts;
    if (mcf->url.len != 0) return "is duplicate";
    mcf->url.data = ngx_pnalloc(cf->pool, value[1].len + 1);
    if (mcf->url.data == NULL) return NGX_CONF_ERROR;
    ngx_memcpy(mcf->url.data, value[1].data, value[1].len);
    mcf->url.data[value[1].len] = '\0';
    mcf->url.len = value[1].len;
    for (ngx_uint_t i = 2; i < cf->args->nelts; i++) {
        if (ngx_strcmp(value[i].data, "fail=open") == 0) {
            mcf->fail_closed = 0;
        } else if (ngx_strcmp(value[i].data, "fail=closed") == 0) {
            mcf->fail_closed = 1;
        } else {
            ngx_str_t t = value[i];
            if (t.len > 8 && ngx_strncmp(t.data, "timeout=", 8) == 0) {
                t.data += 8;
                t.len -= 8;
            }
            ngx_int_t ms = ngx_parse_time(&t, 0);
            if (ms == NGX_ERROR || ms < 1 || ms > 3600000) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "invalid parameter \"%V\"", &value[i]);
                return NGX_CONF_ERROR;
            }
            mcf->timeout = (ngx_msec_t)ms;
        }
    }
    return NGX_CONF_OK;
}

/* floodgate_limit_req_zone key zone=name rate=Nr/s|Nr/m */
static char *fgx_zone(ngx_conf_t *cf, ngx_command_t *cmd, void *conf) {
    fgx_main_conf_t *mcf = conf;
    ngx_str_t *value = cf->args->elts;
    fgx_zone_t z;
    ngx_memzero(&z, sizeof(z));
    if (fgx_compile(cf, &value[1], &z.key) != NGX_CONF_OK) return NGX_CONF_ERROR;
    for (ngx_uint_t i = 2; i < cf->args->nelts; i++) {
        if (ngx_strncmp(value[i].data, "zone=", 5) == 0) {
            if (fgx_zone_name(cf, &value[i], &z.name) != NGX_CONF_OK) return NGX_CONF_ERROR;
            continue;
        }
        if (ngx_strncmp(value[i].data, "rate=", 5) == 0) {
            size_t len = value[i].len;
            u_char *p = value[i].data + len - 3;
            ngx_int_t scale = 1;
            if (len > 8 && ngx_strncmp(p, "r/s", 3) == 0)
                scale = 1;
            else if (len > 8 && ngx_strncmp(p, "r/m", 3) == 0)
                scale = 60;
            else
                len = 0;
            ngx_int_t rate = len > 0 ? ngx_atoi(value[i].data + 5, len - 8) : NGX_ERROR;
            if (rate <= 0) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "invalid rate \"%V\"", &value[i]);
                return NGX_CONF_ERROR;
            }
            z.rate = (ngx_uint_t)(rate * 1000 / scale);
            continue;
        }
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "invalid parameter \"%V\"", &value[i]);
        return NGX_CONF_ERROR;
    }
    if (z.name.len == 0 || z.rate == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "\"%V\" must have \"zone\" and \"rate\"",
                           &cmd->name);
        return NGX_CONF_ERROR;
    }
    if (fgx_zone_unique(cf, cmd, &z.name, 0) != NGX_CONF_OK) return NGX_CONF_ERROR;
    fgx_zone_t *slot = ngx_array_push(&mcf->zones);
    if (slot == NULL) return NGX_CONF_ERROR;
    *slot = z;
    return NGX_CONF_OK;
}

/* floodgate_policy name key=value: FG.CHECK of a named policy (set on
 * the server, docs/policies.md), checked with the location's limits. */
static char *fgx_policy(ngx_conf_t *cf, ngx_command_t *cmd, void *conf) {
    fgx_loc_conf_t *lcf = conf;
    ngx_str_t *value = cf->args->elts;
    fgx_limit_t l;
    ngx_memzero(&l, sizeof(l));
    if (ngx_strncmp(value[2].data, "key=", 4) != 0 || value[2].len == 4) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "invalid parameter \"%V\"", &value[2]);
        return NGX_CONF_ERROR;
    }
    l.policy = value[1]; /* nginx ends every argument with a NUL */
    if (!fgx_key_name_ok(&l.policy)) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "invalid policy name \"%V\"", &l.policy);
        return NGX_CONF_ERROR;
    }
    ngx_str_t key = {value[2].len - 4, value[2].data + 4};
    l.policy_key = ngx_pcalloc(cf->pool, sizeof(ngx_http_complex_value_t));
    if (l.policy_key == NULL) return NGX_CONF_ERROR;
    if (fgx_compile(cf, &key, l.policy_key) != NGX_CONF_OK) return NGX_CONF_ERROR;
    if (lcf->limits == NULL &&
        (lcf->limits = ngx_array_create(cf->pool, 1, sizeof(fgx_limit_t))) == NULL)
        return NGX_CONF_ERROR;
    fgx_limit_t *slot = ngx_array_push(lcf->limits);
    if (slot == NULL) return NGX_CONF_ERROR;
    *slot = l;
    return NGX_CONF_OK;
}

/* floodgate_limit_req zone=name [burst=n] [nodelay | delay=n] */
static char *fgx_limit_req(ngx_conf_t *cf, ngx_command_t *cmd, void *conf) {
    fgx_loc_conf_t *lcf = conf;
    ngx_str_t *value = cf->args->elts;
    fgx_limit_t l;
    ngx_memzero(&l, sizeof(l));
    for (ngx_uint_t i = 1; i < cf->args->nelts; i++) {
        if (ngx_strncmp(value[i].data, "zone=", 5) == 0 && value[i].len > 5) {
            l.zone_name.data = value[i].data + 5;
            l.zone_name.len = value[i].len - 5;
        } else if (ngx_strncmp(value[i].data, "burst=", 6) == 0) {
            ngx_int_t n = ngx_atoi(value[i].data + 6, value[i].len - 6);
            if (n < 0 || n > 1000000000) goto invalid;
            l.burst = (ngx_uint_t)n;
        } else if (ngx_strncmp(value[i].data, "delay=", 6) == 0) {
            ngx_int_t n = ngx_atoi(value[i].data + 6, value[i].len - 6);
            if (n <= 0 || n > 1000000000) goto invalid;
            l.delay = (ngx_uint_t)n;
        } else if (ngx_strcmp(value[i].data, "nodelay") == 0) {
            l.delay = FGX_NODELAY;
        } else {
            goto invalid;
        }
        continue;
    invalid:
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "invalid parameter \"%V\"", &value[i]);
        return NGX_CONF_ERROR;
    }
    if (l.zone_name.len == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "\"%V\" must have \"zone\" parameter",
                           &cmd->name);
        return NGX_CONF_ERROR;
    }
    if (lcf->limits == NULL &&
        (lcf->limits = ngx_array_create(cf->pool, 1, sizeof(fgx_limit_t))) == NULL)
        return NGX_CONF_ERROR;
    fgx_limit_t *limits = lcf->limits->elts;
    for (ngx_uint_t i = 0; i < lcf->limits->nelts; i++)
        if (fgx_same(&limits[i].zone_name, &l.zone_name)) return "is duplicate";
    fgx_limit_t *slot = ngx_array_push(lcf->limits);
    if (slot == NULL) return NGX_CONF_ERROR;
    *slot = l;
    return NGX_CONF_OK;
}
