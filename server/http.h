/*
 * http.h - the HTTP layer: libmicrohttpd daemon (thread pool + epoll), the
 * request lifecycle, and what handlers see of a request and how they reply.
 *
 * Lifecycle of a request: on its first callback the route is matched, the
 * API key (or a ROUTE_TOKEN route's token, through token_check) checked and
 * the declared body size compared with the route's limit: 401, 404, 405,
 * 413 and 415 are answered before any body is read, and the connection is
 * closed after the reply, so no body is read, stored or parsed without
 * good credentials. The body is then consumed chunk by chunk: JSON is
 * buffered up to --max-json-bytes; multipart uploads are streamed part by
 * part, small parts kept in memory and larger ones spooled to temp files
 * in <data>/tmp, so no upload is ever held whole in memory. When the body
 * is complete the handler runs once and replies. Temp files are removed
 * when the request completes, however it ends (a client gone mid-upload:
 * see server/guard.h). Every request is counted in the metrics and logged
 * as one JSON line (sampled by access_log_sample), both by a writer thread
 * off the request's path (server/accesslog.h).
 *
 * Errors are RFC 9457 problem documents (application/problem+json) with
 * "type", "title", "status", "detail", "instance" and, for validation errors,
 * "field".
 */
#ifndef TY_HTTP_H
#define TY_HTTP_H

#include <jansson.h>
#include <stddef.h>

#include "common/ty.h"
#include "server/router.h"
#include "store/store.h"

typedef struct http_req http_req;

/* A JSON body over this many bytes is "large": it holds one of
 * max_large_requests slots while it is read and handled, and the memory
 * given back to the system (malloc_trim) when it is done. */
#define HTTP_LARGE_BODY (4u << 20)

/* The check of a ROUTE_TOKEN route's credential, from the request's
 * headers and path alone: the server calls it before any of the body is
 * read, and the handler runs only after TY_OK. On TY_OK it names in
 * holder (holder_len bytes) who the request acts for, for the shares of
 * the large-body slots. TY_EINVAL: the credential is missing or unknown
 * (401, counted as a failed authentication of the client's address); any
 * other status is replied as http_reply_error replies it (err says why).
 * Must not reply itself; it may add reply headers on failure
 * (WWW-Authenticate). */
typedef ty_status (*http_token_check)(struct api_ctx *ctx, http_req *r,
                                      char *holder, size_t holder_len,
                                      ty_err *err);

/* What the server needs of its settings and of the rest of the process. */
typedef struct http_server_opts {
    const char *listen; /* as given, for messages */
    const char *host;   /* the numeric address to bind */
    int port;           /* 0 = any free port */
    int ipv6;
    int threads;               /* libmicrohttpd's thread pool */
    int connection_timeout_s;  /* idle connections are closed after */
    uint64_t max_json_bytes;   /* a JSON body's limit */
    uint64_t max_upload_bytes; /* a multipart body's limit */
    int max_large_requests;    /* JSON bodies over HTTP_LARGE_BODY in
                                  progress at once; more get 503 with
                                  Retry-After (0: no limit) */
    const char *tmp_dir;       /* spooled parts and temp files */
    const char *tls_cert;      /* PEM; NULL: plain HTTP */
    const char *tls_key;
    store *store;        /* API keys, for the routes' auth */
    struct api_ctx *ctx; /* handed to every handler */
    /* ROUTE_TOKEN routes' credential check; NULL: every such request is
     * answered 401. */
    http_token_check token_check;
    /* Slow and hostile clients (server/guard.h); 0 = libmicrohttpd's
     * default or no limit. */
    unsigned max_connections;    /* open connections at most */
    unsigned per_ip_connections; /* from one client address at most */
    int header_timeout_s;        /* a request's headers within */
    int body_timeout_s;          /* its body within this, plus 1 s per */
    unsigned body_min_rate;      /* this many bytes received */
    int request_timeout_s;       /* and its body within this at most */
    /* The request log (server/accesslog.h): one line in access_log_sample
     * successful requests (errors always), to access_log_path (NULL:
     * stderr) rotated past access_log_max_bytes (0: never). */
    unsigned access_log_sample;
    const char *access_log_path;
    uint64_t access_log_max_bytes;
    double auth_fail_rate;   /* failed authentications refilled per s */
    int auth_fail_burst;     /* allowed at once, per client address */
    int work_threads;        /* for http_req_offload; 0: none */
    int wait_threads;        /* for http_req_offload_wait; 0: none */
    int tenant_thread_share; /* percent of each pool's threads one tenant
                                may hold at once, 1..100 (0: the default,
                                HTTP_TENANT_THREAD_SHARE) */
} http_server_opts;

/* What one tenant may hold of each offload pool's threads by default, in
 * percent: half, so that one tenant's slow or flooding requests always
 * leave the other half to everyone else (see http_req_offload). */
#define HTTP_TENANT_THREAD_SHARE 50

/* Binds and listens on opts' host, port and ipv6 (the rest is unused):
 * the socket (close-on-exec), *bound_port the port it got. -1 when it
 * cannot (the port in use, an address that is not one: err says which,
 * naming --listen). A server binds first, before it makes anything a
 * failed start would leave behind. */
int http_listen_open(const http_server_opts *opts, int *bound_port,
                     ty_err *err);

/* Starts the daemon with opts (copied; the strings must outlive the
 * server) and the routes on fd, a socket from http_listen_open, which it
 * owns from here on: closed on failure, and by http_server_stop. */
ty_status http_server_start(const http_server_opts *opts, const route *routes,
                            size_t nroutes, int fd, ty_err *err);

/* Stops accepting, finishes requests in flight, and frees the daemon. */
void http_server_stop(void);

/* ---- what a handler reads ---- */

/* Path parameter i (in pattern order). */
const char *http_req_param(const http_req *r, int i);
/* A query-string argument, or NULL. */
const char *http_req_query(const http_req *r, const char *name);
/* A request header, or NULL. */
const char *http_req_header(const http_req *r, const char *name);
/* The request path. */
const char *http_req_path(const http_req *r);
/* The caller's key (tenant, admin flag); zeroed on public routes. */
const store_key *http_req_key(const http_req *r);
/* The parsed JSON body (borrowed), or NULL when the request had none. */
const json_t *http_req_json(const http_req *r);
/* A ROUTE_BODY_JSON_RAW body's text (not NUL-terminated) and its length
 * (NULL and 0 when none was sent). */
const char *http_req_body(const http_req *r, size_t *len);
/* 1 when the body was multipart/form-data. */
int http_req_is_multipart(const http_req *r);

/* Multipart form parts, by name. */
size_t http_req_form_count(const http_req *r);
const char *http_req_form_name(const http_req *r, size_t i);
/* 1 if a part with this name was sent. */
int http_req_form_has(const http_req *r, const char *name);
/* A part's value as text (NULL if absent, larger than 64 KiB, or holding a
 * NUL byte); surrounding whitespace is kept. */
const char *http_req_form_value(http_req *r, const char *name);
/* A path to a file holding the part's bytes (spooled if it was in memory),
 * NULL if absent or on I/O failure (err says which). The file is removed
 * when the request completes. */
const char *http_req_form_file(http_req *r, const char *name, ty_err *err);
/* The same, returning the status (TY_EINVAL when absent, TY_ENOSPC when the
 * disk is full, TY_EIO) and setting *path on success. */
ty_status http_req_form_path(http_req *r, const char *name, const char **path,
                             ty_err *err);

/* A fresh temp file path in <data>/tmp, removed when the request completes
 * (whatever the handler did with it). */
ty_status http_req_temp_path(http_req *r, const char *suffix, char *out,
                             size_t n, ty_err *err);

/* Records that the request's work (a predict: endpoint "predict",
 * "evaluate" or "kserve_infer", a static string) took seconds; counted in
 * the predict latency histogram (opm_predict) by the access log's writer
 * when the request completes, off the request's path. */
void http_req_time(http_req *r, const char *endpoint, double seconds);

/* ---- long handlers off the server's threads (offload.c) ---- */

typedef void (*http_offload_fn)(struct api_ctx *app, http_req *r);

/* Hands r to a work thread, where fn(app, r) runs and replies; the calling
 * handler must return at once without replying when this returns 1. The
 * connection is suspended meanwhile, so the libmicrohttpd thread serves its
 * other connections. The pool is shared by tenants (r's key's): each has
 * its own queue, a free thread serves the tenant holding the fewest, and
 * one tenant holds at most tenant_thread_share percent of the threads.
 * 0 (nothing done; the caller goes on itself) when r is already off,
 * already replied, there are no work threads, or no memory to queue it. */
int http_req_offload(http_req *r, http_offload_fn fn);

/* The same for a handler that mostly waits (a predict on a serving
 * replica): its pool has a thread per request that may wait at once
 * (--serving-threads); the compute pool takes it when there is none. */
int http_req_offload_wait(http_req *r, http_offload_fn fn);

/* ---- how a handler replies (exactly once) ---- */

/* Replies with a JSON document; body is stolen. The text is tyjson_dumps's
 * (every real its shortest decimal) and ends with a newline, as problem
 * documents do. */
void http_reply_json(http_req *r, unsigned status, json_t *body);
/* Replies with a problem document. field may be NULL. */
void http_reply_problem(http_req *r, unsigned status, const char *field,
                        const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Replies with the problem that a ty_status maps to, using err's message and
 * field: EINVAL/EFORMAT/EFETCH 422, ENOTFOUND 404, ECONFLICT 409,
 * ETOOBIG 413, ELIMIT 429 and EUNAVAILABLE 503 (set Retry-After first), ENOMEM 503, the rest 500 (whose detail is logged, and the
 * client told only that the server failed, with the request id). */
void http_reply_error(http_req *r, ty_status s, const ty_err *err);
/* Replies with the file at path (streamed from disk). download_name, when not
 * NULL, sets Content-Disposition: attachment. */
void http_reply_file(http_req *r, unsigned status, const char *content_type,
                     const char *path, const char *download_name);
/* Replies with static bytes (not copied; they must outlive the request). */
void http_reply_static(http_req *r, unsigned status, const char *content_type,
                       const void *data, size_t len);
/* Adds a header to the reply to come (e.g. Location). */
void http_reply_header(http_req *r, const char *name, const char *value);

/* ---- streamed replies (Server-Sent Events; events/hub.c) ---- */

typedef struct http_stream http_stream;

/* Writes up to max bytes of the stream into buf; returns how many, 0 when
 * nothing is ready now (the connection is then suspended, holding no
 * thread, until http_stream_wake), or -1 at the end of the stream. Runs on
 * an HTTP thread and must not block. */
typedef long (*http_stream_fill)(void *cls, char *buf, size_t max);

/* Replies 200 with content_type and a chunked body produced by fill. cls
 * belongs to the stream from now on: free_cls(cls) is called once the
 * connection is done with it (a client gone, the end, a shutdown), or at
 * once on failure. Returns the handle for http_stream_wake, valid until
 * free_cls has returned; NULL on failure (a 503 is replied). */
http_stream *http_reply_stream(http_req *r, const char *content_type,
                               http_stream_fill fill,
                               void (*free_cls)(void *cls), void *cls);

/* Makes the stream call its fill again soon: resumes it if it is
 * suspended, else makes its next "nothing ready" try again. Thread-safe. */
void http_stream_wake(http_stream *s);
/* Replies with data[0..len), which the reply takes (freed with free() when
 * sent, or at once when the reply cannot be made). */
void http_reply_buffer(http_req *r, unsigned status, const char *content_type,
                       char *data, size_t len);

#endif
