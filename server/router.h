/*
 * router.h - the routing table: method + path pattern -> handler.
 *
 * Patterns are literal segments and "{name}" parameters ("/v1/jobs/{id}").
 * Matching is exact per segment; a trailing slash is ignored. A path that
 * matches some pattern under another method answers 405 with an Allow list.
 */
#ifndef TY_ROUTER_H
#define TY_ROUTER_H

#include <stddef.h>

typedef enum {
    HTTP_GET = 0,
    HTTP_HEAD,
    HTTP_POST,
    HTTP_PUT,
    HTTP_PATCH,
    HTTP_DELETE,
    HTTP_OPTIONS,
    HTTP_OTHER,
    HTTP_METHOD_COUNT
} http_method;

http_method http_method_parse(const char *s);
const char *http_method_name(http_method m);

typedef enum {
    ROUTE_PUBLIC = 0, /* no key needed */
    ROUTE_KEY,        /* any valid API key */
    ROUTE_ADMIN,      /* an admin key */
    ROUTE_TOKEN       /* a credential of its own, not an API key (the
                         remote worker's attempt token), checked by
                         http_server_opts.token_check */
} route_auth;

typedef enum {
    ROUTE_BODY_NONE = 0, /* a body is refused (413) */
    ROUTE_BODY_JSON,     /* application/json, buffered up to the JSON limit */
    ROUTE_BODY_UPLOAD,   /* multipart/form-data streamed to disk, or JSON */
    ROUTE_BODY_JSON_RAW, /* application/json, buffered up to the JSON limit
                            but not parsed: the handler reads the text
                            (http_req_body), e.g. to decode numbers without
                            a jansson tree */
    ROUTE_BODY_TENSOR    /* KServe v2: like JSON_RAW, and also with no
                            Content-Type (JSON) or application/octet-stream
                            (a JSON header and binary tensor data); a body
                            sent with Content-Encoding gzip or deflate is
                            inflated within the JSON limit */
} route_body;

struct api_ctx;
struct http_req;
typedef void (*route_handler)(struct api_ctx *app, struct http_req *req);

typedef struct {
    http_method method;
    const char *pattern;
    const char *name; /* stable name for logs and metrics */
    route_auth auth;
    route_body body;
    route_handler handler;
} route;

#define ROUTE_MAX_PARAMS 4
#define ROUTE_MAX_PARAM_LEN 256 /* a 200-byte name (store.h) fits */

typedef struct {
    const route *route;
    int nparams;
    char params[ROUTE_MAX_PARAMS][ROUTE_MAX_PARAM_LEN];
} route_match;

typedef enum {
    ROUTE_FOUND = 0,
    ROUTE_NOT_FOUND,         /* no pattern matches the path */
    ROUTE_METHOD_NOT_ALLOWED /* the path matches, the method does not */
} route_result;

/* Matches method and path (no query string) against table[0..n). HEAD matches
 * GET routes. On ROUTE_METHOD_NOT_ALLOWED, allow (if not NULL) gets the
 * comma-separated methods the path accepts. A parameter longer than
 * ROUTE_MAX_PARAM_LEN - 1 or empty does not match. */
route_result router_match(const route *table, size_t n, http_method method,
                          const char *path, route_match *out, char *allow,
                          size_t allow_len);

#endif
