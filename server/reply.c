/*
 * reply.c - how a handler replies: JSON, problem documents, files, static
 * bytes and buffers, and streamed replies (see http.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "common/jsonutil.h"
#include "common/log.h"
#include "server/http_internal.h"

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
        case 429: return "Too Many Requests";
        case 500: return "Internal Server Error";
        case 501: return "Not Implemented";
        case 503: return "Service Unavailable";
        case 507: return "Insufficient Storage";
        default: return "Error";
    }
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
    /* JSON is never to be sniffed into something a browser runs. */
    if (content_type && strstr(content_type, "json"))
        MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    for (int i = 0; i < r->nhdr; i++)
        MHD_add_response_header(resp, r->hdr_name[i], r->hdr_value[i]);
}

static void reply_json_typed(http_req *r, unsigned status, json_t *body,
                             const char *content_type)
{
    size_t len = 0;
    char *text =
        tyjson_dumps_line(body, JSON_COMPACT | JSON_PRESERVE_ORDER, &len);
    json_decref(body);
    if (!text) {
        set_reply(r, 500, NULL, NULL, 0);
        return;
    }
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
    /* KServe v2 clients read errors from "error" (GET /v2 included). */
    if (!strncmp(r->path, "/v2", 3) &&
        (r->path[3] == '\0' || r->path[3] == '/'))
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
        case TY_EFETCH: reply_problem_text(r, 422, field, msg); return;
        case TY_ENOTFOUND: reply_problem_text(r, 404, field, msg); return;
        case TY_ECONFLICT: reply_problem_text(r, 409, field, msg); return;
        case TY_ETOOBIG: reply_problem_text(r, 413, field, msg); return;
        case TY_ELIMIT:
            /* The caller may have said when with a Retry-After header. */
            reply_problem_text(r, 429, field, msg);
            return;
        case TY_EUNAVAILABLE:
            /* The same: a Retry-After set before, if the caller knows. */
            reply_problem_text(r, 503, field, msg);
            return;
        case TY_ENOMEM:
            reply_problem_text(
                r, 503, NULL,
                "the server is out of memory; try again later or "
                "with a smaller request");
            return;
        case TY_ENOSPC:
            /* The detail names files under the data folder: it goes to the
             * log, the client learns only the cause. */
            log_event_limited(NULL, "error", "disk_full",
                              json_pack("{s:s, s:s}", "request_id",
                                        r->request_id, "detail", msg));
            reply_problem_text(
                r, 507, NULL,
                "the server's disk is full; nothing was stored. Try again "
                "once the operator has freed space");
            return;
        default:
            log_event("error", "internal_error",
                      json_pack("{s:s, s:s, s:s}", "request_id", r->request_id,
                                "status", ty_status_name(s), "detail", msg));
            http_reply_problem(
                r, 500, NULL,
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
    struct MHD_Response *resp = MHD_create_response_from_fd((uint64_t)size, fd);
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

void http_streams_close_all(void)
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
