/*
 * http.c - libmicrohttpd glue: request state, body handling, replies and
 * request logs (see http.h).
 *
 * libmicrohttpd calls on_request several times per request: once with the
 * headers (state is created and checked), once per body chunk (consumed and
 * *upload_data_size set to 0), and once more with no data (the handler runs
 * and the reply is queued). A reply decided early (an auth failure, a body
 * over its limit) is queued at the first chance; the rest of the body, if
 * any, is discarded.
 */
#include "server/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "common/ids.h"
#include "server/auth.h"
#include "common/fetch.h"
#include "common/log.h"
#include "server/multipart.h"
#include "common/opmetrics.h"

#define FORM_MAX_PARTS 16
#define FORM_MEM_MAX (64 * 1024)
#define MAX_TEMP_FILES 8
#define MAX_REPLY_HEADERS 6
/* Past its limit, a body is discarded up to this many more bytes so the
 * client can read the 413; beyond that the connection is dropped. */
#define DISCARD_SLACK (16u << 20)

typedef enum { BODY_NONE, BODY_JSON, BODY_MULTIPART } body_kind;

typedef struct {
    char name[64];
    char *mem;
    size_t len, cap;
    int fd;                 /* >= 0 once spooled */
    char path[PATH_MAX];
} form_part;

struct http_req {
    ty_app *app;
    struct MHD_Connection *conn;
    http_method method;
    char method_name[16];
    char path[1024];
    route_match match;
    int routed;
    store_key key;
    char request_id[TY_ID_MAX];
    struct timespec start;

    body_kind body;
    uint64_t body_limit;
    uint64_t bytes_in;
    char *buf;               /* JSON body */
    size_t buf_len, buf_cap;
    mp_parser *mp;
    form_part parts[FORM_MAX_PARTS];
    int nparts;
    json_t *json;

    char temps[MAX_TEMP_FILES][PATH_MAX];
    int ntemps;

    /* the reply */
    int replied;
    int streamed;              /* the reply is an event stream */
    int queued;
    unsigned status;
    struct MHD_Response *response;
    uint64_t bytes_out;
    char hdr_name[MAX_REPLY_HEADERS][32];
    char hdr_value[MAX_REPLY_HEADERS][256];
    int nhdr;
};

static struct {
    ty_app *app;
    const route *routes;
    size_t nroutes;
} server;

/* ---- small helpers ---- */

static const char *reason_phrase(unsigned status)
{
    switch (status) {
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 409: return "Conflict";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 415: return "Unsupported Media Type";
    case 422: return "Unprocessable Content";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Error";
    }
}

static double elapsed_ms(const struct timespec *start)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - start->tv_sec) * 1e3 +
           (double)(now.tv_nsec - start->tv_nsec) / 1e6;
}

static int content_type_is(const char *ct, const char *want)
{
    if (!ct)
        return 0;
    size_t n = strlen(want);
    return strncasecmp(ct, want, n) == 0 &&
           (ct[n] == '\0' || ct[n] == ';' || ct[n] == ' ');
}

static int is_json_type(const char *ct)
{
    if (!ct)
        return 0;
    if (content_type_is(ct, "application/json"))
        return 1;
    /* application/problem+json and the like */
    const char *semi = strchr(ct, ';');
    size_t len = semi ? (size_t)(semi - ct) : strlen(ct);
    return len > 5 && strncasecmp(ct + len - 5, "+json", 5) == 0 &&
           strncasecmp(ct, "application/", 12) == 0;
}

/* ---- replies ---- */

static void set_reply(http_req *r, unsigned status, struct MHD_Response *resp,
                      const char *content_type, uint64_t len)
{
    if (r->replied) {
        if (resp)
            MHD_destroy_response(resp);
        return;
    }
    if (!resp) {
        /* Out of memory: let libmicrohttpd drop the connection. */
        r->replied = 1;
        r->status = 500;
        return;
    }
    r->replied = 1;
    r->status = status;
    r->response = resp;
    r->bytes_out = len;
    if (content_type)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                                content_type);
    MHD_add_response_header(resp, "X-Request-Id", r->request_id);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    for (int i = 0; i < r->nhdr; i++)
        MHD_add_response_header(resp, r->hdr_name[i], r->hdr_value[i]);
}

static void reply_json_typed(http_req *r, unsigned status, json_t *body,
                             const char *content_type)
{
    char *text = json_dumps(body, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(body);
    if (!text) {
        set_reply(r, 500, NULL, NULL, 0);
        return;
    }
    size_t len = strlen(text);
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    if (!resp)
        free(text);
    set_reply(r, status, resp, content_type, len);
}

void http_reply_json(http_req *r, unsigned status, json_t *body)
{
    reply_json_typed(r, status, body, "application/json");
}

static void reply_problem_text(http_req *r, unsigned status, const char *field,
                               const char *detail)
{
    json_t *p = json_object();
    json_object_set_new(p, "type", json_string("about:blank"));
    json_object_set_new(p, "title", json_string(reason_phrase(status)));
    json_object_set_new(p, "status", json_integer(status));
    json_object_set_new(p, "detail", json_string(detail));
    json_object_set_new(p, "instance", json_string(r->path));
    json_object_set_new(p, "request_id", json_string(r->request_id));
    if (field && *field)
        json_object_set_new(p, "field", json_string(field));
    /* KServe v2 clients read errors from "error". */
    if (strncmp(r->path, "/v2/", 4) == 0)
        json_object_set_new(p, "error", json_string(detail));
    reply_json_typed(r, status, p, "application/problem+json");
}

void http_reply_problem(http_req *r, unsigned status, const char *field,
                        const char *fmt, ...)
{
    char detail[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    reply_problem_text(r, status, field, detail);
}

void http_reply_error(http_req *r, ty_status s, const ty_err *err)
{
    const char *msg = err && err->msg[0] ? err->msg : ty_status_name(s);
    const char *field = err ? err->field : NULL;
    switch (s) {
    case TY_EINVAL:
    case TY_EFORMAT:
    case TY_EFETCH:
        reply_problem_text(r, 422, field, msg);
        return;
    case TY_ENOTFOUND:
        reply_problem_text(r, 404, field, msg);
        return;
    case TY_ECONFLICT:
        reply_problem_text(r, 409, field, msg);
        return;
    case TY_ETOOBIG:
        reply_problem_text(r, 413, field, msg);
        return;
    case TY_ENOMEM:
        reply_problem_text(r, 503, NULL,
                           "the server is out of memory; try again later or "
                           "with a smaller request");
        return;
    default:
        log_event("error", "internal_error",
                  json_pack("{s:s, s:s, s:s}", "request_id", r->request_id,
                            "status", ty_status_name(s), "detail", msg));
        http_reply_problem(r, 500, NULL,
                           "the server failed to handle this request; its log "
                           "has the details under request id %s",
                           r->request_id);
        return;
    }
}

void http_reply_file(http_req *r, unsigned status, const char *content_type,
                     const char *path, const char *download_name)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    int64_t size = fd >= 0 ? fs_file_size(path) : -1;
    if (fd < 0 || size < 0) {
        if (fd >= 0)
            close(fd);
        ty_err err;
        ty_fail(&err, TY_EIO, NULL, "cannot open %s: %s", path,
                strerror(errno));
        http_reply_error(r, TY_EIO, &err);
        return;
    }
    if (download_name) {
        char disp[300];
        snprintf(disp, sizeof disp, "attachment; filename=\"%s\"",
                 download_name);
        http_reply_header(r, "Content-Disposition", disp);
    }
    struct MHD_Response *resp =
        MHD_create_response_from_fd((uint64_t)size, fd);
    if (!resp)
        close(fd);
    set_reply(r, status, resp, content_type, (uint64_t)size);
}

void http_reply_static(http_req *r, unsigned status, const char *content_type,
                       const void *data, size_t len)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        len, (void *)data, MHD_RESPMEM_PERSISTENT);
    set_reply(r, status, resp, content_type, len);
}

void http_reply_buffer(http_req *r, unsigned status, const char *content_type,
                       char *data, size_t len)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, data, MHD_RESPMEM_MUST_FREE);
    if (!resp)
        free(data);
    set_reply(r, status, resp, content_type, len);
}

void http_reply_header(http_req *r, const char *name, const char *value)
{
    if (r->response) {
        MHD_add_response_header(r->response, name, value);
        return;
    }
    if (r->nhdr >= MAX_REPLY_HEADERS)
        return;
    snprintf(r->hdr_name[r->nhdr], sizeof r->hdr_name[0], "%s", name);
    snprintf(r->hdr_value[r->nhdr], sizeof r->hdr_value[0], "%s", value);
    r->nhdr++;
}

/* ---- accessors ---- */

const char *http_req_param(const http_req *r, int i)
{
    return i < r->match.nparams ? r->match.params[i] : "";
}

const char *http_req_query(const http_req *r, const char *name)
{
    return MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, name);
}

const char *http_req_header(const http_req *r, const char *name)
{
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

const char *http_req_path(const http_req *r) { return r->path; }
const store_key *http_req_key(const http_req *r) { return &r->key; }
const json_t *http_req_json(const http_req *r) { return r->json; }
int http_req_is_multipart(const http_req *r) { return r->body == BODY_MULTIPART; }
size_t http_req_form_count(const http_req *r) { return (size_t)r->nparts; }

const char *http_req_form_name(const http_req *r, size_t i)
{
    return i < (size_t)r->nparts ? r->parts[i].name : NULL;
}

static form_part *find_part(http_req *r, const char *name)
{
    for (int i = 0; i < r->nparts; i++)
        if (!strcmp(r->parts[i].name, name))
            return &r->parts[i];
    return NULL;
}

int http_req_form_has(const http_req *r, const char *name)
{
    return find_part((http_req *)r, name) != NULL;
}

const char *http_req_form_value(http_req *r, const char *name)
{
    form_part *p = find_part(r, name);
    if (!p || p->fd >= 0)
        return NULL;
    if (!p->mem) {
        p->mem = calloc(1, 1);
        if (!p->mem)
            return NULL;
    }
    if (memchr(p->mem, '\0', p->len))
        return NULL;
    return p->mem;
}

static ty_status part_spool(http_req *r, form_part *p, ty_err *err)
{
    snprintf(p->path, sizeof p->path, "%s/upload-XXXXXX", r->app->tmp_dir);
    p->fd = mkostemp(p->path, O_CLOEXEC);
    if (p->fd < 0) {
        p->path[0] = '\0';
        return ty_fail(err, TY_EIO, NULL, "cannot create a temp file in %s: %s",
                       r->app->tmp_dir, strerror(errno));
    }
    ty_status s = fs_write_full(p->fd, p->mem, p->len, err);
    free(p->mem);
    p->mem = NULL;
    p->len = p->cap = 0;
    return s;
}

const char *http_req_form_file(http_req *r, const char *name, ty_err *err)
{
    form_part *p = find_part(r, name);
    if (!p) {
        ty_fail(err, TY_EINVAL, name, "the form field '%s' is missing", name);
        return NULL;
    }
    if (p->fd < 0 && part_spool(r, p, err) != TY_OK)
        return NULL;
    return p->path;
}

ty_status http_req_temp_path(http_req *r, const char *suffix, char *out,
                             size_t n, ty_err *err)
{
    if (r->ntemps >= MAX_TEMP_FILES)
        return ty_fail(err, TY_EINTERNAL, NULL, "too many temp files");
    snprintf(out, n, "%s/%s-%d%s", r->app->tmp_dir, r->request_id, r->ntemps,
             suffix ? suffix : "");
    snprintf(r->temps[r->ntemps++], PATH_MAX, "%s", out);
    return TY_OK;
}

/* ---- multipart callbacks ---- */

static ty_status on_part_begin(void *ctx, const char *name,
                               const char *filename, const char *ctype,
                               ty_err *err)
{
    http_req *r = ctx;
    if (!*name || strlen(name) >= sizeof r->parts[0].name)
        return ty_fail(err, TY_EINVAL, NULL,
                       "every form field needs a name of 1 to 63 characters");
    if (find_part(r, name))
        return ty_fail(err, TY_EINVAL, name,
                       "the form field '%s' was sent more than once", name);
    if (r->nparts >= FORM_MAX_PARTS)
        return ty_fail(err, TY_EINVAL, NULL,
                       "too many form fields (at most %d)", FORM_MAX_PARTS);
    form_part *p = &r->parts[r->nparts++];
    memset(p, 0, sizeof *p);
    p->fd = -1;
    snprintf(p->name, sizeof p->name, "%s", name);
    return TY_OK;
}

static ty_status on_part_data(void *ctx, const char *data, size_t len,
                              ty_err *err)
{
    http_req *r = ctx;
    form_part *p = &r->parts[r->nparts - 1];
    if (p->fd < 0 && p->len + len > FORM_MEM_MAX) {
        ty_status s = part_spool(r, p, err);
        if (s != TY_OK)
            return s;
    }
    if (p->fd >= 0)
        return fs_write_full(p->fd, data, len, err);
    if (p->len + len + 1 > p->cap) {
        size_t cap = p->cap ? p->cap : 256;
        while (cap < p->len + len + 1)
            cap *= 2;
        char *m = realloc(p->mem, cap);
        if (!m)
            return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
        p->mem = m;
        p->cap = cap;
    }
    memcpy(p->mem + p->len, data, len);
    p->len += len;
    p->mem[p->len] = '\0';
    return TY_OK;
}

static ty_status on_part_end(void *ctx, ty_err *err) { return TY_OK; }

static const mp_callbacks form_callbacks = {on_part_begin, on_part_data,
                                            on_part_end};

/* ---- the request lifecycle ---- */

static void req_free(http_req *r)
{
    if (!r)
        return;
    for (int i = 0; i < r->nparts; i++) {
        form_part *p = &r->parts[i];
        if (p->fd >= 0)
            close(p->fd);
        if (p->path[0])
            unlink(p->path);
        free(p->mem);
    }
    for (int i = 0; i < r->ntemps; i++)
        unlink(r->temps[i]);
    mp_parser_destroy(r->mp);
    free(r->buf);
    json_decref(r->json);
    if (r->response)
        MHD_destroy_response(r->response);
    free(r);
}

/* Decides everything that can be decided from the headers. */
static void req_begin(http_req *r)
{
    char allow[64] = "";
    route_result rr = router_match(server.routes, server.nroutes, r->method,
                                   r->path, &r->match, allow, sizeof allow);
    if (rr == ROUTE_NOT_FOUND) {
        http_reply_problem(r, 404, NULL, "no endpoint at %s; see /openapi.yaml "
                           "for the API", r->path);
        return;
    }
    if (rr == ROUTE_METHOD_NOT_ALLOWED) {
        http_reply_header(r, "Allow", allow);
        http_reply_problem(r, 405, NULL, "%s does not accept %s (allowed: %s)",
                           r->path, r->method_name, allow);
        return;
    }
    r->routed = 1;
    const route *rt = r->match.route;

    if (rt->auth != ROUTE_PUBLIC) {
        ty_err err = {0};
        ty_status s = auth_check(r->app->store,
                                 http_req_header(r, "Authorization"), &r->key,
                                 &err);
        if (s == TY_EINVAL || s == TY_ENOTFOUND) {
            http_reply_header(r, "WWW-Authenticate", "Bearer realm=\"trainyard\"");
            http_reply_problem(r, 401, NULL, "%s", err.msg);
            return;
        }
        if (s != TY_OK) {
            http_reply_error(r, s, &err);
            return;
        }
        if (rt->auth == ROUTE_ADMIN && !r->key.is_admin) {
            http_reply_problem(r, 403, NULL, "this endpoint needs an admin key");
            return;
        }
    }

    const char *ct = http_req_header(r, "Content-Type");
    const char *cl = http_req_header(r, "Content-Length");
    const char *te = http_req_header(r, "Transfer-Encoding");
    uint64_t declared = cl ? strtoull(cl, NULL, 10) : 0;
    int has_body = declared > 0 || (te && strcasecmp(te, "identity") != 0);

    switch (rt->body) {
    case ROUTE_BODY_NONE:
        r->body_limit = 0;
        break;
    case ROUTE_BODY_JSON:
        r->body_limit = r->app->cfg.max_json_bytes;
        break;
    case ROUTE_BODY_UPLOAD:
        r->body_limit = content_type_is(ct, "multipart/form-data")
                            ? r->app->cfg.max_upload_bytes
                            : r->app->cfg.max_json_bytes;
        break;
    }
    if (!has_body)
        return;
    if (rt->body == ROUTE_BODY_NONE) {
        http_reply_problem(r, 413, NULL, "%s %s takes no request body",
                           r->method_name, rt->pattern);
        return;
    }
    if (declared > r->body_limit) {
        http_reply_problem(r, 413, NULL,
                           "the request body is %llu bytes; the limit for this "
                           "endpoint is %llu bytes",
                           (unsigned long long)declared,
                           (unsigned long long)r->body_limit);
        return;
    }
    if (rt->body == ROUTE_BODY_UPLOAD && content_type_is(ct, "multipart/form-data")) {
        char boundary[MP_MAX_BOUNDARY + 1];
        ty_err err = {0};
        if (mp_boundary_from_content_type(ct, boundary, &err) != TY_OK) {
            http_reply_problem(r, 400, NULL, "%s", err.msg);
            return;
        }
        r->mp = mp_parser_create(boundary, &form_callbacks, r);
        if (!r->mp) {
            http_reply_error(r, TY_ENOMEM, NULL);
            return;
        }
        r->body = BODY_MULTIPART;
        return;
    }
    if (!is_json_type(ct)) {
        http_reply_problem(r, 415, NULL,
                           "send the body as application/json%s (got %s)",
                           rt->body == ROUTE_BODY_UPLOAD
                               ? " or multipart/form-data"
                               : "",
                           ct ? ct : "no Content-Type");
        return;
    }
    r->body = BODY_JSON;
}

/* Consumes a body chunk. Returns 0 when the connection should be dropped. */
static int req_body_chunk(http_req *r, const char *data, size_t len)
{
    r->bytes_in += len;
    if (r->replied)
        return r->bytes_in <= r->body_limit + DISCARD_SLACK;
    if (r->bytes_in > r->body_limit) {
        http_reply_problem(r, 413, NULL,
                           "the request body is larger than the limit for this "
                           "endpoint (%llu bytes)",
                           (unsigned long long)r->body_limit);
        return 1;
    }
    if (r->body == BODY_JSON) {
        if (r->buf_len + len + 1 > r->buf_cap) {
            size_t cap = r->buf_cap ? r->buf_cap : 4096;
            while (cap < r->buf_len + len + 1)
                cap *= 2;
            char *b = realloc(r->buf, cap);
            if (!b) {
                http_reply_error(r, TY_ENOMEM, NULL);
                return 1;
            }
            r->buf = b;
            r->buf_cap = cap;
        }
        memcpy(r->buf + r->buf_len, data, len);
        r->buf_len += len;
        return 1;
    }
    if (r->body == BODY_MULTIPART) {
        ty_err err = {0};
        ty_status s = mp_parser_feed(r->mp, data, len, &err);
        if (s != TY_OK) {
            if (s == TY_EFORMAT)
                http_reply_problem(r, 400, err.field, "%s", err.msg);
            else
                http_reply_error(r, s, &err);
        }
    }
    return 1;
}

/* The body is complete: parse it and run the handler. */
static void req_finish(http_req *r)
{
    if (r->replied)
        return;
    if (r->body == BODY_JSON && r->buf_len > 0) {
        json_error_t jerr;
        r->json = json_loadb(r->buf, r->buf_len, JSON_REJECT_DUPLICATES, &jerr);
        if (!r->json) {
            http_reply_problem(r, 400, NULL,
                               "the request body is not valid JSON: %s (line "
                               "%d, column %d)",
                               jerr.text, jerr.line, jerr.column);
            return;
        }
        free(r->buf);
        r->buf = NULL;
    }
    if (r->body == BODY_MULTIPART) {
        ty_err err = {0};
        if (mp_parser_finish(r->mp, &err) != TY_OK) {
            http_reply_problem(r, 400, NULL, "%s", err.msg);
            return;
        }
    }
    r->match.route->handler(r->app, r);
    if (!r->replied)
        http_reply_problem(r, 500, NULL, "the handler for %s gave no reply",
                           r->match.route->name);
}

static enum MHD_Result queue_reply(http_req *r)
{
    r->queued = 1;
    if (!r->response)
        return MHD_NO;
    enum MHD_Result ret = MHD_queue_response(r->conn, r->status, r->response);
    MHD_destroy_response(r->response);
    r->response = NULL;
    return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn,
                                  const char *url, const char *method,
                                  const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    http_req *r = *con_cls;
    if (!r) {
        r = calloc(1, sizeof *r);
        if (!r)
            return MHD_NO;
        *con_cls = r;
        r->app = server.app;
        r->conn = conn;
        clock_gettime(CLOCK_MONOTONIC, &r->start);
        snprintf(r->method_name, sizeof r->method_name, "%s", method);
        r->method = http_method_parse(method);
        snprintf(r->path, sizeof r->path, "%s", url);
        if (ty_id_new("req_", r->request_id, NULL) != TY_OK)
            snprintf(r->request_id, sizeof r->request_id, "req_unknown");
        req_begin(r);
        if (r->replied)
            return queue_reply(r);
        return MHD_YES;
    }
    if (r->queued)
        return MHD_YES;
    if (*upload_data_size > 0) {
        int keep = req_body_chunk(r, upload_data, *upload_data_size);
        *upload_data_size = 0;
        return keep ? MHD_YES : MHD_NO;
    }
    req_finish(r);
    return queue_reply(r);
}

static void on_completed(void *cls, struct MHD_Connection *conn,
                         void **con_cls, enum MHD_RequestTerminationCode toe)
{
    http_req *r = *con_cls;
    if (!r)
        return;
    double ms = elapsed_ms(&r->start);
    json_t *f = json_pack(
        "{s:s, s:s, s:s, s:s, s:i, s:I, s:I, s:f}", "request_id",
        r->request_id, "method", r->method_name, "path", r->path, "route",
        r->routed ? r->match.route->name : "-", "status", (int)r->status,
        "bytes_in", (json_int_t)r->bytes_in, "bytes_out",
        (json_int_t)r->bytes_out, "duration_ms", ms);
    if (f && r->key.tenant_id[0])
        json_object_set_new(f, "tenant", json_string(r->key.tenant_id));
    if (f && toe != MHD_REQUEST_TERMINATED_COMPLETED_OK)
        json_object_set_new(f, "aborted", json_true());
    if (f && r->routed)
        json_object_set_new(f, "route_template",
                            json_string(r->match.route->pattern));
    log_event("info", "request", f);
    /* Metrics label the template, never the raw path: bounded cardinality. */
    /* An event stream lasts as long as its client stays: counted, not
     * timed, so it does not swamp its route's latency histogram. */
    opm_http_request(http_method_name(r->method),
                     r->routed ? r->match.route->pattern : "unmatched",
                     r->status, r->streamed ? -1.0 : ms / 1e3);
    req_free(r);
    *con_cls = NULL;
}

/* ---- daemon ---- */

static int listen_socket(const ty_config *cfg, int *port_out, ty_err *err)
{
    struct sockaddr_storage ss;
    socklen_t len;
    memset(&ss, 0, sizeof ss);
    if (cfg->ipv6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons((uint16_t)cfg->port);
        if (inet_pton(AF_INET6, cfg->host, &a->sin6_addr) != 1) {
            ty_fail(err, TY_EINVAL, "--listen",
                    "--listen: %s is not an IPv6 address", cfg->host);
            return -1;
        }
        len = sizeof *a;
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        a->sin_port = htons((uint16_t)cfg->port);
        const char *host = strcmp(cfg->host, "localhost") ? cfg->host
                                                          : "127.0.0.1";
        if (inet_pton(AF_INET, host, &a->sin_addr) != 1) {
            ty_fail(err, TY_EINVAL, "--listen",
                    "--listen: %s is not an IPv4 address (use a numeric "
                    "address such as 127.0.0.1 or 0.0.0.0)",
                    cfg->host);
            return -1;
        }
        len = sizeof *a;
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        ty_fail(err, TY_EIO, NULL, "socket: %s", strerror(errno));
        return -1;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&ss, len) != 0) {
        ty_fail(err, TY_EIO, "--listen", "cannot listen on %s: %s%s",
                cfg->listen, strerror(errno),
                errno == EADDRINUSE ? " (is another server running there? "
                                      "pick another port with --listen)"
                                    : "");
        close(fd);
        return -1;
    }
    if (listen(fd, 256) != 0) {
        ty_fail(err, TY_EIO, NULL, "listen: %s", strerror(errno));
        close(fd);
        return -1;
    }
    if (getsockname(fd, (struct sockaddr *)&ss, &len) == 0)
        *port_out = ntohs(ss.ss_family == AF_INET6
                              ? ((struct sockaddr_in6 *)&ss)->sin6_port
                              : ((struct sockaddr_in *)&ss)->sin_port);
    return fd;
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    char buf[512];
    vsnprintf(buf, sizeof buf, fmt, ap);
    size_t n = strlen(buf);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        buf[--n] = '\0';
    log_event("warn", "http", json_pack("{s:s}", "msg", buf));
}

ty_status http_server_start(ty_app *app, const route *routes, size_t nroutes,
                            ty_err *err)
{
    server.app = app;
    server.routes = routes;
    server.nroutes = nroutes;
    int port = 0;
    int fd = listen_socket(&app->cfg, &port, err);
    if (fd < 0)
        return TY_EIO;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL |
                     MHD_USE_ERROR_LOG | MHD_USE_ITC |
                     MHD_ALLOW_SUSPEND_RESUME; /* event streams */
    if (app->cfg.ipv6)
        flags |= MHD_USE_IPv6;
    /* HTTPS: TLS 1.2 and 1.3 only; GnuTLS's NORMAL set otherwise. */
    struct MHD_OptionItem tls_opts[] = {
        {MHD_OPTION_HTTPS_MEM_CERT, 0, app->tls.cert},
        {MHD_OPTION_HTTPS_MEM_KEY, 0, app->tls.key},
        {MHD_OPTION_HTTPS_PRIORITIES, 0,
         (void *)"NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2"},
        {MHD_OPTION_END, 0, NULL}};
    if (app->tls.cert)
        flags |= MHD_USE_TLS;
    else
        tls_opts[0].option = MHD_OPTION_END;
    app->daemon = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, NULL,
        MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, MHD_OPTION_LISTEN_SOCKET, fd,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)app->cfg.http_threads,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)app->cfg.connection_timeout_s,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(256 * 1024),
        MHD_OPTION_ARRAY, tls_opts, MHD_OPTION_END);
    if (!app->daemon) {
        close(fd);
        if (app->tls.cert)
            return ty_fail(err, TY_EINVAL, "--tls-key",
                           "cannot start HTTPS on %s: the TLS library "
                           "refused the certificate or key (is --tls-key "
                           "the private key of --tls-cert? the server log "
                           "line before this says more)",
                           app->cfg.listen);
        return ty_fail(err, TY_EIO, NULL,
                       "cannot start the HTTP server on %s", app->cfg.listen);
    }
    app->bound_port = port;
    return TY_OK;
}

static void streams_close_all(void);

void http_server_stop(ty_app *app)
{
    if (!app->daemon)
        return;
    /* libmicrohttpd must not be stopped with suspended connections. */
    streams_close_all();
    MHD_socket fd = MHD_quiesce_daemon(app->daemon);
    /* Requests in flight finish; a long URL fetch among them stops now. */
    fetch_abort_all();
    MHD_stop_daemon(app->daemon);
    if (fd != MHD_INVALID_SOCKET)
        close(fd);
    app->daemon = NULL;
}

/* ---- streamed replies ----
 *
 * A stream's content reader asks fill for bytes; when there are none it
 * suspends the connection (the pattern microhttpd.h prescribes for "no
 * body data yet": no thread waits, no busy loop) and http_stream_wake
 * resumes it. streams_mu makes "nothing ready, so suspend" and "wake"
 * atomic: a wake that comes while fill runs sets wake_pending, and the
 * reader then returns 0 without suspending, to be called again at once.
 * Every stream is on a list so that a shutdown can end them all: a
 * suspended connection must be resumed before the daemon stops. */

struct http_stream {
    struct MHD_Connection *conn;
    http_stream_fill fill;
    void (*free_cls)(void *cls);
    void *cls;
    int suspended;
    int wake_pending;
    http_stream *prev, *next;
};

static pthread_mutex_t streams_mu = PTHREAD_MUTEX_INITIALIZER;
static http_stream *streams_head;
static int streams_closing;

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    http_stream *s = cls;
    pthread_mutex_lock(&streams_mu);
    int closing = streams_closing;
    s->wake_pending = 0;
    pthread_mutex_unlock(&streams_mu);
    if (closing)
        return MHD_CONTENT_READER_END_OF_STREAM;
    long n = s->fill(s->cls, buf, max);
    if (n < 0)
        return MHD_CONTENT_READER_END_OF_STREAM;
    if (n > 0)
        return (ssize_t)n;
    pthread_mutex_lock(&streams_mu);
    if (!s->wake_pending && !streams_closing) {
        s->suspended = 1;
        MHD_suspend_connection(s->conn);
    }
    pthread_mutex_unlock(&streams_mu);
    return 0;
}

static void stream_free(void *cls)
{
    http_stream *s = cls;
    pthread_mutex_lock(&streams_mu);
    if (s->prev)
        s->prev->next = s->next;
    else
        streams_head = s->next;
    if (s->next)
        s->next->prev = s->prev;
    pthread_mutex_unlock(&streams_mu);
    /* The owner forgets the handle here; a wake racing with this finds s
     * still allocated and not suspended. */
    s->free_cls(s->cls);
    free(s);
}

http_stream *http_reply_stream(http_req *r, const char *content_type,
                               http_stream_fill fill,
                               void (*free_cls)(void *cls), void *cls)
{
    http_stream *s = r->replied ? NULL : calloc(1, sizeof *s);
    if (!s) {
        free_cls(cls);
        http_reply_error(r, TY_ENOMEM, NULL);
        return NULL;
    }
    r->streamed = 1;
    s->conn = r->conn;
    s->fill = fill;
    s->free_cls = free_cls;
    s->cls = cls;
    struct MHD_Response *resp = MHD_create_response_from_callback(
        MHD_SIZE_UNKNOWN, 16 * 1024, stream_reader, s, stream_free);
    if (!resp) {
        free_cls(cls);
        free(s);
        http_reply_error(r, TY_ENOMEM, NULL);
        return NULL;
    }
    pthread_mutex_lock(&streams_mu);
    s->next = streams_head;
    if (streams_head)
        streams_head->prev = s;
    streams_head = s;
    pthread_mutex_unlock(&streams_mu);
    /* Proxies (nginx) must not buffer an event stream. */
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    set_reply(r, 200, resp, content_type, 0);
    return s;
}

void http_stream_wake(http_stream *s)
{
    pthread_mutex_lock(&streams_mu);
    if (s->suspended) {
        s->suspended = 0;
        MHD_resume_connection(s->conn);
    } else {
        s->wake_pending = 1;
    }
    pthread_mutex_unlock(&streams_mu);
}

static void streams_close_all(void)
{
    pthread_mutex_lock(&streams_mu);
    streams_closing = 1;
    for (http_stream *s = streams_head; s; s = s->next) {
        if (s->suspended) {
            s->suspended = 0;
            MHD_resume_connection(s->conn);
        }
    }
    pthread_mutex_unlock(&streams_mu);
}
