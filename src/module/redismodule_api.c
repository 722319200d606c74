/*
 * redismodule_api.c - the module API function pointers, defined once, and the
 * handshake that fills them from the server.
 */
#include "redismodule_api.h"

#define FG_DEFINE_API(ret, name, params) ret(*RedisModule_##name) params = NULL;
FG_REQUIRED_APIS(FG_DEFINE_API)
FG_OPTIONAL_APIS(FG_DEFINE_API)
#undef FG_DEFINE_API

typedef int (*get_api_fn)(const char *name, void *target);

int fg_api_init(RedisModuleCtx *ctx, const char *name, int ver) {
    /* The server stores its GetApi function in the context's first field. */
    get_api_fn get_api = (get_api_fn)((void **)ctx)[0];
    int missing = 0;

#define FG_FETCH_REQUIRED(ret, api, params)                                                        \
    if (get_api("RedisModule_" #api, (void *)&RedisModule_##api) != REDISMODULE_OK) missing = 1;
#define FG_FETCH_OPTIONAL(ret, api, params)                                                        \
    get_api("RedisModule_" #api, (void *)&RedisModule_##api);
    FG_REQUIRED_APIS(FG_FETCH_REQUIRED)
    FG_OPTIONAL_APIS(FG_FETCH_OPTIONAL)
#undef FG_FETCH_REQUIRED
#undef FG_FETCH_OPTIONAL

    if (missing) return REDISMODULE_ERR;
    if (RedisModule_IsModuleNameBusy(name)) return REDISMODULE_ERR;
    RedisModule_SetModuleAttribs(ctx, name, ver, REDISMODULE_APIVER_1);
    return REDISMODULE_OK;
}
