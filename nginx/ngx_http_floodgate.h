/*
 * ngx_http_floodgate.h - what the files of the nginx module share: the
 * configuration, the worker's client, and the limit_conn family's entry
 * points (ngx_http_floodgate_conn.c).
 */
#ifndef NGX_HTTP_FLOODGATE_H
#define NGX_HTTP_FLOODGATE_H

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <floodgate_async.h>

#define FGX_NODELAY NGX_MAX_INT_T_VALUE

/* $floodgate_limit_req_status and $floodgate_limit_conn_status, as nginx's
 * $limit_req_status and $limit_conn_status (which has no DELAYED). */
enum { FGX_PASSED = 1, FGX_DELAYED, FGX_REJECTED, FGX_DELAYED_DRY_RUN, FGX_REJECTED_DRY_RUN };

typedef struct {
    ngx_str_t name;
    ngx_http_complex_value_t key;
    ngx_uint_t rate; /* milli-requests per second, as limit_req keeps it */
} fgx_zone_t;

typedef struct {
    ngx_str_t name;
    ngx_http_complex_value_t key;
} fgx_conn_zone_t;

typedef struct {
    ngx_str_t url; /* NUL-terminated */
    ngx_msec_t timeout;
    ngx_flag_t fail_closed;
    ngx_uint_t fail_log_level; /* floodgate_fail_log_level */
    ngx_array_t zones;      /* fgx_zone_t */
    ngx_array_t conn_zones; /* fgx_conn_zone_t */
    fg_async *client;       /* this worker's */
} fgx_main_conf_t;

/* A floodgate_limit_req, or a floodgate_policy (zone NULL): checked
 * together, all or nothing. */
typedef struct {
    ngx_str_t zone_name;
    fgx_zone_t *zone;
    ngx_uint_t burst;
    ngx_uint_t delay; /* excess requests passed without a delay */
    fg_limit limit;
    ngx_str_t policy; /* NUL-terminated */
    ngx_http_complex_value_t *policy_key;
} fgx_limit_t;

typedef struct {
    ngx_str_t zone_name;
    fgx_conn_zone_t *zone;
    ngx_uint_t n;
} fgx_conn_limit_t;

typedef struct {
    ngx_array_t *limits; /* fgx_limit_t; inherited only when a level has none */
    ngx_uint_t status_code;
    ngx_flag_t dry_run;
    ngx_flag_t headers;
    ngx_uint_t log_level;
    ngx_array_t *conn_limits; /* fgx_conn_limit_t, inherited the same way */
    ngx_uint_t conn_status_code;
    ngx_flag_t conn_dry_run;
    ngx_uint_t conn_log_level;
    ngx_msec_t conn_lease;
} fgx_loc_conf_t;

extern ngx_module_t ngx_http_floodgate_module;

/* floodgate_limit_conn_zone, floodgate_limit_conn, and their resolution
 * when a location's configuration is merged. */
char *fgx_conn_zone(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
char *fgx_limit_conn(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
char *fgx_conn_resolve(ngx_conf_t *cf, fgx_loc_conf_t *conf);

/* The PREACCESS handler of limit_conn, and $floodgate_limit_conn_status. */
ngx_int_t fgx_conn_handler(ngx_http_request_t *r);
ngx_int_t fgx_conn_status_variable(ngx_http_request_t *r, ngx_http_variable_value_t *v,
                                   uintptr_t data);

/* A check of r's that Redis did not answer (reason) and fail= decides:
 * counted, and logged at floodgate_fail_log_level at most once a second.
 * kind and name: "zone" or "policy" and its name. */
void fgx_failed(ngx_http_request_t *r, const char *kind, const ngx_str_t *name,
                const char *reason);
#define FGX_NO_CLIENT "no client (the worker could not open one: see the log)"

/* Resumes a request suspended for its checks (r->main->count was raised):
 * the phases run again from the handler that suspended it. */
void fgx_resume(ngx_http_request_t *r);

/* Configuration helpers: names equal; a complex value compiled; a
 * "zone=name" argument (a name fgx_key_name_ok takes). */
ngx_uint_t fgx_same(const ngx_str_t *a, const ngx_str_t *b);
char *fgx_compile(ngx_conf_t *cf, ngx_str_t *value, ngx_http_complex_value_t *cv);
char *fgx_zone_name(ngx_conf_t *cf, ngx_str_t *arg, ngx_str_t *name);

/* Whether a zone's or a policy's name can stand in a key (fgx_key_write):
 * printable, no ':'. */
ngx_uint_t fgx_key_name_ok(const ngx_str_t *name);

/* NGX_CONF_OK when no zone has the name yet; conn: for a
 * floodgate_limit_conn_zone. */
char *fgx_zone_unique(ngx_conf_t *cf, ngx_command_t *cmd, const ngx_str_t *name,
                      ngx_uint_t conn);

/* The Redis key of a request's value v: "kind:name:value", kind
 * "limit_req", "limit_conn" or "policy", name the zone's or the policy's
 * (NUL-terminated, as nginx's arguments are), the value escaped so that no
 * request names another's state (fg_request_key). Written with its NUL at
 * p, which holds fgx_key_size bytes; returns the byte after the NUL. */
size_t fgx_key_size(const char *kind, const ngx_str_t *name, const ngx_str_t *v);
u_char *fgx_key_write(u_char *p, const char *kind, const ngx_str_t *name, const ngx_str_t *v);

/* A status of $floodgate_limit_*_status as the variable's value (0: not
 * found). */
void fgx_status_value(ngx_http_variable_value_t *v, ngx_uint_t status);

#endif
