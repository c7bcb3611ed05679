/*
 * http_internal.h - what the HTTP server's files share (http.c: the request
 * lifecycle; reply.c: replies and streams; daemon.c: the listening daemon).
 * Not for the rest of the product: handlers see http.h.
 */
#ifndef TY_HTTP_INTERNAL_H
#define TY_HTTP_INTERNAL_H

#include <limits.h>
#include <microhttpd.h>
#include <time.h>

#include "common/ids.h"
#include "server/http.h"
#include "server/multipart.h"

#define FORM_MAX_PARTS 16
#define FORM_MEM_MAX (64 * 1024)
#define MAX_TEMP_FILES 8
#define MAX_REPLY_HEADERS 6
#define HTTP_HOLDER_MAX 96
/* Past its limit, a body is discarded up to this many more bytes so the
 * client can read the 413; beyond that the connection is dropped. */
#define DISCARD_SLACK (16u << 20)

typedef enum { BODY_NONE, BODY_JSON, BODY_MULTIPART } body_kind;

typedef struct {
    char name[64];
    char *mem;
    size_t len, cap;
    int fd; /* >= 0 once spooled */
    char path[PATH_MAX];
} form_part;

struct http_files {
    form_part parts[FORM_MAX_PARTS];
    int nparts;
    char temps[MAX_TEMP_FILES][PATH_MAX];
    int ntemps;
};

struct http_req {
    struct api_ctx *app; /* the handlers' context (http_server_opts.ctx) */
    struct MHD_Connection *conn;
    http_method method;
    char method_name[16];
    char path[1024];
    route_match match;
    int routed;
    store_key key;
    /* Who the request acts for, once its credentials are good: "tenant:"
     * and the key's tenant, or what a ROUTE_TOKEN route's check named;
     * the unit of the large-body share (large_take). Empty on public
     * routes. */
    char holder[HTTP_HOLDER_MAX];
    char request_id[TY_ID_MAX];
    struct timespec start;

    body_kind body;
    int nobody_json; /* a JSON body on a route that takes none: {} only */
    uint64_t body_limit;
    uint64_t bytes_in;
    char *buf; /* JSON body */
    size_t buf_len, buf_cap;
    uint64_t declared;        /* Content-Length, 0 when none */
    int raw;                  /* ROUTE_BODY_JSON_RAW: buf is not parsed */
    int large;                /* holds one of the large-body slots */
    struct inflater *inflate; /* Content-Encoding gzip/deflate; NULL: none */
    mp_parser *mp;
    json_t *json;
    /* Form parts and temp files: ~100 KB of names and paths, allocated by
     * the first request that needs them (uploads), not by every one. */
    struct http_files *files;

    /* the reply */
    int replied;
    int streamed; /* the reply is an event stream */
    int queued;
    int offloaded;     /* handed to a work thread (offload.c) */
    const char *timed; /* http_req_time's endpoint, or NULL */
    double timed_s;
    unsigned status;
    struct MHD_Response *response;
    uint64_t bytes_out;
    char hdr_name[MAX_REPLY_HEADERS][32];
    char hdr_value[MAX_REPLY_HEADERS][256];
    int nhdr;
};

/* The running server: its options, routes and daemon (one per process). */
typedef struct {
    http_server_opts opts;
    const route *routes;
    size_t nroutes;
    struct MHD_Daemon *daemon;
} http_server_state;

extern http_server_state http_server;

/* libmicrohttpd's request and completion callbacks (http.c). */
enum MHD_Result http_on_request(void *cls, struct MHD_Connection *conn,
                                const char *url, const char *method,
                                const char *version, const char *upload_data,
                                size_t *upload_data_size, void **req_cls);
void http_on_completed(void *cls, struct MHD_Connection *conn, void **req_cls,
                       enum MHD_RequestTerminationCode toe);

/* The work threads of http_req_offload (offload.c): started with the
 * daemon, each pool shared by tenants with share percent of its threads
 * for one tenant at most (0: HTTP_TENANT_THREAD_SHARE); stopping runs
 * every request handed over and resumes it. */
ty_status http_offload_start(int nthreads, int nwait, int share, ty_err *err);
void http_offload_stop(void);

/* Ends every open stream (reply.c); before the daemon stops. */
void http_streams_close_all(void);

#endif
