/*
 * http.c - the request lifecycle: request state, routing, auth, body
 * handling (JSON, multipart) and request logs (see http.h). Replies are in
 * reply.c, the daemon in daemon.c.
 *
 * libmicrohttpd calls on_request several times per request: once with the
 * headers (state is created and checked), once per body chunk (consumed and
 * *upload_data_size set to 0), and once more with no data (the handler runs
 * and the reply is queued). A reply decided early (an auth failure, a body
 * over its limit) is queued at the first chance; the rest of the body, if
 * any, is discarded.
 */
#include "server/http_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
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
#include "server/accesslog.h"
#include "server/auth.h"
#include "server/guard.h"
#include "server/inflate.h"
#include "common/fetch.h"
#include "common/log.h"
#include "server/multipart.h"

http_server_state http_server;

/* Large bodies in progress (see HTTP_LARGE_BODY): in all, and by who
 * holds them (http_req.holder). At most max_large_requests at once, and at
 * most large_share() of them for one holder, so that one tenant (or one
 * remote worker's job) cannot take every slot while others wait. Only a
 * request whose credentials are known good takes one: the credentials are
 * checked from the headers, before any slot is asked for. The table holds
 * a row for each holder with a slot; there are never more holders than
 * slots taken. */
#define LARGE_HOLDERS 1024
static struct {
    pthread_mutex_t mu;
    int total;
    struct {
        char who[HTTP_HOLDER_MAX];
        int n; /* 0: the row is free */
    } rows[LARGE_HOLDERS];
} large = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* The most large-body slots one holder may have at once: half of them
 * (at least one), so the other half is always there for everyone else. */
static int large_share(int max) { return max > 1 ? max / 2 : 1; }

/* who's row, or a free one when it has none (-1 when none is free);
 * under large.mu. Rows past max are never needed: a holder has a slot. */
static int large_row(const char *who, int max)
{
    int free_row = -1;
    for (int i = 0; i < max && i < LARGE_HOLDERS; i++) {
        if (large.rows[i].n && !strcmp(large.rows[i].who, who))
            return i;
        if (!large.rows[i].n && free_row < 0)
            free_row = i;
    }
    return free_row;
}

/* Takes a large-body slot for r; 0 (and a 503 with Retry-After queued)
 * when all are taken, or when r's holder has its share of them. Refused
 * at once rather than queued: a waiting request would hold a thread of
 * libmicrohttpd's pool, and its body is not read yet, so refusing costs
 * nothing. */
static int large_take(http_req *r)
{
    if (r->large)
        return 1;
    int max = http_server.opts.max_large_requests;
    int share = large_share(max);
    /* Defensive: no public route takes a body that large. */
    int anonymous = !r->routed || r->match.route->auth == ROUTE_PUBLIC;
    int held = 0, busy = 0, over = 0;
    pthread_mutex_lock(&large.mu);
    /* With no limit (max 0) there is no share either: no row. */
    int i = anonymous || max <= 0 ? -1 : large_row(r->holder, max);
    if (anonymous || (max > 0 && (i < 0 || large.total >= max))) {
        busy = 1;
    } else if (i >= 0 && large.rows[i].n >= share) {
        over = 1;
        held = large.rows[i].n;
    } else {
        if (i >= 0 && !large.rows[i].n)
            snprintf(large.rows[i].who, sizeof large.rows[i].who, "%s",
                     r->holder);
        if (i >= 0)
            large.rows[i].n++;
        large.total++;
        r->large = 1;
    }
    pthread_mutex_unlock(&large.mu);
    if (r->large)
        return 1;
    http_reply_header(r, "Retry-After", "1");
    if (over)
        http_reply_problem(r, 503, NULL,
                           "the server is busy: one tenant may have %d of "
                           "its %d large requests (bodies over %u bytes) in "
                           "progress at once, and you have %d; retry "
                           "shortly",
                           share, max, HTTP_LARGE_BODY, held);
    else if (busy && anonymous)
        http_reply_problem(r, 503, NULL,
                           "the server is busy: a body over %u bytes needs "
                           "credentials; retry shortly",
                           HTTP_LARGE_BODY);
    else
        http_reply_problem(r, 503, NULL,
                           "the server is busy with %d other large requests "
                           "(bodies over %u bytes); retry shortly",
                           max, HTTP_LARGE_BODY);
    return 0;
}

/* Gives r's large-body slot back. */
static void large_give(http_req *r)
{
    pthread_mutex_lock(&large.mu);
    int i = large_row(r->holder, http_server.opts.max_large_requests);
    if (i >= 0 && large.rows[i].n > 0)
        large.rows[i].n--;
    large.total--;
    pthread_mutex_unlock(&large.mu);
}

/* ---- small helpers ---- */

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

/* KServe v2 clients (tritonclient) send JSON without a Content-Type. */
static int is_v2_path(const char *path)
{
    return !strncmp(path, "/v2", 3) && (path[3] == '\0' || path[3] == '/');
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

void http_req_time(http_req *r, const char *endpoint, double seconds)
{
    r->timed = endpoint;
    r->timed_s = seconds;
}
const store_key *http_req_key(const http_req *r) { return &r->key; }
const json_t *http_req_json(const http_req *r) { return r->json; }
const char *http_req_body(const http_req *r, size_t *len)
{
    *len = r->buf ? r->buf_len : 0;
    return r->buf_len ? r->buf : NULL;
}
int http_req_is_multipart(const http_req *r)
{
    return r->body == BODY_MULTIPART;
}
size_t http_req_form_count(const http_req *r)
{
    return r->files ? (size_t)r->files->nparts : 0;
}

/* r's files, allocated on first use; NULL when out of memory. */
static struct http_files *req_files(http_req *r)
{
    if (!r->files)
        r->files = calloc(1, sizeof *r->files);
    return r->files;
}

const char *http_req_form_name(const http_req *r, size_t i)
{
    return i < http_req_form_count(r) ? r->files->parts[i].name : NULL;
}

static form_part *find_part(http_req *r, const char *name)
{
    for (size_t i = 0; i < http_req_form_count(r); i++)
        if (!strcmp(r->files->parts[i].name, name))
            return &r->files->parts[i];
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
    snprintf(p->path, sizeof p->path, "%s/upload-XXXXXX",
             http_server.opts.tmp_dir);
    p->fd = mkostemp(p->path, O_CLOEXEC);
    if (p->fd < 0) {
        p->path[0] = '\0';
        return ty_fail(err, ty_errno_status(errno), NULL,
                       "cannot create a temp file in %s: %s",
                       http_server.opts.tmp_dir, strerror(errno));
    }
    ty_status s = fs_write_full(p->fd, p->mem, p->len, err);
    free(p->mem);
    p->mem = NULL;
    p->len = p->cap = 0;
    return s;
}

ty_status http_req_form_path(http_req *r, const char *name, const char **path,
                             ty_err *err)
{
    *path = NULL;
    form_part *p = find_part(r, name);
    if (!p)
        return ty_fail(err, TY_EINVAL, name, "the form field '%s' is missing",
                       name);
    ty_status s = p->fd < 0 ? part_spool(r, p, err) : TY_OK;
    if (s == TY_OK)
        *path = p->path;
    return s;
}

const char *http_req_form_file(http_req *r, const char *name, ty_err *err)
{
    const char *path;
    http_req_form_path(r, name, &path, err);
    return path;
}

ty_status http_req_temp_path(http_req *r, const char *suffix, char *out,
                             size_t n, ty_err *err)
{
    struct http_files *f = req_files(r);
    if (!f)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    if (f->ntemps >= MAX_TEMP_FILES)
        return ty_fail(err, TY_EINTERNAL, NULL, "too many temp files");
    snprintf(out, n, "%s/%s-%d%s", http_server.opts.tmp_dir, r->request_id,
             f->ntemps, suffix ? suffix : "");
    snprintf(f->temps[f->ntemps++], PATH_MAX, "%s", out);
    return TY_OK;
}

/* ---- multipart callbacks ---- */

static ty_status on_part_begin(void *ctx, const char *name,
                               const char *filename, const char *ctype,
                               ty_err *err)
{
    http_req *r = ctx;
    struct http_files *f = req_files(r);
    if (!f)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    if (!*name || strlen(name) >= sizeof f->parts[0].name)
        return ty_fail(err, TY_EINVAL, NULL,
                       "every form field needs a name of 1 to 63 characters");
    if (find_part(r, name))
        return ty_fail(err, TY_EINVAL, name,
                       "the form field '%s' was sent more than once", name);
    if (f->nparts >= FORM_MAX_PARTS)
        return ty_fail(err, TY_EINVAL, NULL,
                       "too many form fields (at most %d)", FORM_MAX_PARTS);
    form_part *p = &f->parts[f->nparts++];
    memset(p, 0, sizeof *p);
    p->fd = -1;
    snprintf(p->name, sizeof p->name, "%s", name);
    return TY_OK;
}

static ty_status on_part_data(void *ctx, const char *data, size_t len,
                              ty_err *err)
{
    http_req *r = ctx;
    form_part *p = &r->files->parts[r->files->nparts - 1];
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
    struct http_files *f = r->files;
    for (int i = 0; f && i < f->nparts; i++) {
        form_part *p = &f->parts[i];
        if (p->fd >= 0)
            close(p->fd);
        if (p->path[0])
            unlink(p->path);
        free(p->mem);
    }
    for (int i = 0; f && i < f->ntemps; i++)
        unlink(f->temps[i]);
    free(f);
    mp_parser_destroy(r->mp);
    inflate_destroy(r->inflate);
    free(r->buf);
    json_decref(r->json);
    if (r->response)
        MHD_destroy_response(r->response);
    if (r->large) {
        large_give(r);
        /* What a large body's handling freed goes back to the system
         * instead of staying in malloc's arenas. */
        malloc_trim(0);
    }
    free(r);
}

/* A JSON body on a route that takes none is read up to this size, and
 * allowed when it is {} (what many clients send with every POST). */
#define NOBODY_JSON_MAX 1024

static enum MHD_Result count_content_length(void *cls, enum MHD_ValueKind kind,
                                            const char *key, const char *value)
{
    (void)kind;
    (void)value;
    if (key && !strcasecmp(key, "Content-Length"))
        (*(int *)cls)++;
    return MHD_YES;
}

/* Answers requests that are malformed as HTTP, whatever their route:
 * returns 1 when it replied. */
static int req_protocol_check(http_req *r)
{
    if (guard_path_has_nul(r->conn)) {
        http_reply_problem(r, 400, NULL,
                           "the request path holds an encoded NUL byte (%%00)");
        return 1;
    }
    int ncl = 0;
    MHD_get_connection_values(r->conn, MHD_HEADER_KIND, count_content_length,
                              &ncl);
    const char *cl = http_req_header(r, "Content-Length");
    if (ncl > 1 || (cl && strchr(cl, ','))) {
        http_reply_problem(r, 400, NULL,
                           "the request has more than one Content-Length");
        return 1;
    }
    const char *te = http_req_header(r, "Transfer-Encoding");
    /* Both framings at once (RFC 9112 section 6.1): libmicrohttpd would
     * read the body as chunked, a proxy in front might go by the length,
     * and the two would disagree on where this request ends and the next
     * begins (request smuggling). Refused, and the connection closed with
     * the reply, since its framing cannot be trusted. */
    if (te && cl) {
        http_reply_problem(r, 400, NULL,
                           "the request has both Content-Length and "
                           "Transfer-Encoding; send one of them");
        return 1;
    }
    if (te && strcasecmp(te, "chunked") && strcasecmp(te, "identity")) {
        http_reply_problem(r, 501, NULL,
                           "Transfer-Encoding %.64s is not supported; send "
                           "the body with a Content-Length or chunked",
                           te);
        return 1;
    }
    return 0;
}

/* Checks r's credentials from its headers, before any of its body is
 * read: an API key (ROUTE_KEY, ROUTE_ADMIN) or a token of the route's own
 * (ROUTE_TOKEN, through http_server_opts.token_check). Returns 1 when
 * they are good (r->key and r->holder filled); else the reply is queued
 * (429 for an address with no failed authentications left, 401, 403, or
 * the check's error) and, since it is queued before the body,
 * libmicrohttpd reads none of it and closes the connection after it. */
static int req_authenticate(http_req *r, const route *rt)
{
    unsigned retry = 0;
    if (guard_auth_blocked(r->conn, &retry)) {
        char ra[16];
        snprintf(ra, sizeof ra, "%u", retry);
        http_reply_header(r, "Retry-After", ra);
        http_reply_problem(r, 429, NULL,
                           "too many failed authentications from this "
                           "address; try again in %u s",
                           retry);
        return 0;
    }
    ty_err err = {0};
    ty_status s;
    if (rt->auth == ROUTE_TOKEN) {
        http_token_check check = http_server.opts.token_check;
        s = check ? check(r->app, r, r->holder, sizeof r->holder, &err)
                  : ty_fail(&err, TY_EINVAL, NULL,
                            "this endpoint's credential cannot be checked");
        if (s == TY_EINVAL) {
            guard_auth_failed(r->conn);
            http_reply_problem(r, 401, NULL, "%s", err.msg);
            return 0;
        }
    } else {
        s = auth_check(http_server.opts.store,
                       http_req_header(r, "Authorization"), &r->key, &err);
        if (s == TY_EINVAL || s == TY_ENOTFOUND) {
            guard_auth_failed(r->conn);
            http_reply_header(r, "WWW-Authenticate",
                              "Bearer realm=\"trainyard\"");
            http_reply_problem(r, 401, NULL, "%s", err.msg);
            return 0;
        }
        if (s == TY_OK)
            snprintf(r->holder, sizeof r->holder, "tenant:%s",
                     r->key.tenant_id);
    }
    if (s != TY_OK) {
        http_reply_error(r, s, &err);
        return 0;
    }
    if (rt->auth == ROUTE_ADMIN && !r->key.is_admin) {
        http_reply_problem(r, 403, NULL, "this endpoint needs an admin key");
        return 0;
    }
    return 1;
}

/* Decides everything that can be decided from the headers. */
static void req_begin(http_req *r)
{
    if (req_protocol_check(r))
        return;
    char allow[64] = "";
    route_result rr =
        router_match(http_server.routes, http_server.nroutes, r->method,
                     r->path, &r->match, allow, sizeof allow);
    if (rr == ROUTE_NOT_FOUND) {
        http_reply_problem(r, 404, NULL,
                           "no endpoint at %s; see /openapi.yaml "
                           "for the API",
                           r->path);
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

    if (rt->auth != ROUTE_PUBLIC && !req_authenticate(r, rt))
        return;

    const char *ct = http_req_header(r, "Content-Type");
    const char *cl = http_req_header(r, "Content-Length");
    const char *te = http_req_header(r, "Transfer-Encoding");
    uint64_t declared = cl ? strtoull(cl, NULL, 10) : 0;
    int has_body = declared > 0 || (te && strcasecmp(te, "identity") != 0);

    switch (rt->body) {
        case ROUTE_BODY_NONE: r->body_limit = 0; break;
        case ROUTE_BODY_JSON:
        case ROUTE_BODY_JSON_RAW:
        case ROUTE_BODY_TENSOR:
            r->body_limit = http_server.opts.max_json_bytes;
            break;
        case ROUTE_BODY_UPLOAD:
            r->body_limit = content_type_is(ct, "multipart/form-data")
                                ? http_server.opts.max_upload_bytes
                                : http_server.opts.max_json_bytes;
            break;
    }
    if (!has_body)
        return;
    int v2_json = !ct && is_v2_path(r->path);
    if (rt->body == ROUTE_BODY_NONE && (is_json_type(ct) || v2_json) &&
        declared <= NOBODY_JSON_MAX) {
        r->body_limit = NOBODY_JSON_MAX;
        r->body = BODY_JSON;
        r->nobody_json = 1;
        return;
    }
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
    if (rt->body == ROUTE_BODY_UPLOAD &&
        content_type_is(ct, "multipart/form-data")) {
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
    inflate_kind enc =
        inflate_kind_parse(http_req_header(r, "Content-Encoding"));
    if (enc != INFLATE_IDENTITY) {
        if (rt->body != ROUTE_BODY_TENSOR || enc == INFLATE_UNKNOWN) {
            http_reply_problem(r, 415, NULL,
                               "Content-Encoding %.64s is not accepted here%s",
                               http_req_header(r, "Content-Encoding"),
                               rt->body == ROUTE_BODY_TENSOR
                                   ? "; send gzip, deflate or identity"
                                   : "; send the body uncompressed");
            return;
        }
        r->inflate = inflate_create(enc, r->body_limit);
        if (!r->inflate) {
            http_reply_error(r, TY_ENOMEM, NULL);
            return;
        }
    }
    int tensor_ok = rt->body == ROUTE_BODY_TENSOR &&
                    (!ct || content_type_is(ct, "application/octet-stream"));
    if (!is_json_type(ct) && !v2_json && !tensor_ok) {
        http_reply_problem(
            r, 415, NULL, "send the body as application/json%s (got %s)",
            rt->body == ROUTE_BODY_UPLOAD   ? " or multipart/form-data"
            : rt->body == ROUTE_BODY_TENSOR ? " or application/octet-stream"
                                            : "",
            ct ? ct : "no Content-Type");
        return;
    }
    r->body = BODY_JSON;
    r->raw = rt->body == ROUTE_BODY_JSON_RAW || rt->body == ROUTE_BODY_TENSOR;
    r->declared = declared;
    if (declared > HTTP_LARGE_BODY)
        large_take(r);
}

/* Appends to the buffered body (an inflater's sink); 0 when it cannot (a
 * reply is queued: 503 for no large-body slot or no memory). */
static int body_append(void *ctx, const char *data, size_t len)
{
    http_req *r = ctx;
    if (r->buf_len + len > HTTP_LARGE_BODY && !large_take(r))
        return 0;
    if (r->buf_len + len + 1 > r->buf_cap) {
        /* Sized by Content-Length when there is one (no doubling). */
        size_t cap = r->buf_cap                        ? r->buf_cap
                     : r->declared >= r->buf_len + len ? (size_t)r->declared + 1
                                                       : 4096;
        while (cap < r->buf_len + len + 1)
            cap *= 2;
        char *b = realloc(r->buf, cap);
        if (!b) {
            http_reply_error(r, TY_ENOMEM, NULL);
            return 0;
        }
        r->buf = b;
        r->buf_cap = cap;
    }
    memcpy(r->buf + r->buf_len, data, len);
    r->buf_len += len;
    return 1;
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
    if (r->body == BODY_JSON && r->inflate) {
        ty_err err = {0};
        ty_status s = inflate_feed(r->inflate, data, len, body_append, r, &err);
        if (s != TY_OK && !r->replied) {
            if (s == TY_EFORMAT)
                http_reply_problem(r, 400, NULL, "%s", err.msg);
            else if (s == TY_ETOOBIG)
                http_reply_problem(r, 413, NULL, "%s", err.msg);
            else
                http_reply_error(r, s, &err);
        }
        return 1;
    }
    if (r->body == BODY_JSON) {
        body_append(r, data, len);
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
    ty_err zerr = {0};
    if (r->inflate && inflate_finish(r->inflate, &zerr) != TY_OK) {
        http_reply_problem(r, 400, NULL, "%s", zerr.msg);
        return;
    }
    if (r->body == BODY_JSON && r->buf_len > 0 && !r->raw) {
        json_error_t jerr;
        r->json = json_loadb(r->buf, r->buf_len, JSON_REJECT_DUPLICATES, &jerr);
        if (!r->json && json_error_code(&jerr) == json_error_out_of_memory) {
            /* the parser's allocation failed: not the client's fault */
            http_reply_error(r, TY_ENOMEM, NULL);
            return;
        }
        if (!r->json) {
            http_reply_problem(r, 400, NULL,
                               "the request body is not valid JSON: %s (line "
                               "%d, column %d)",
                               jerr.text, jerr.line, jerr.column);
            return;
        }
        free(r->buf);
        r->buf = NULL;
        if (r->nobody_json) {
            int empty = json_is_object(r->json) && !json_object_size(r->json);
            json_decref(r->json);
            r->json = NULL;
            if (!empty) {
                http_reply_problem(r, 413, NULL,
                                   "%s %s takes no request body (an empty "
                                   "JSON object {} is allowed)",
                                   r->method_name, r->match.route->pattern);
                return;
            }
        }
    }
    if (r->body == BODY_MULTIPART) {
        ty_err err = {0};
        if (mp_parser_finish(r->mp, &err) != TY_OK) {
            http_reply_problem(r, 400, NULL, "%s", err.msg);
            return;
        }
    }
    r->match.route->handler(r->app, r);
    if (r->offloaded)
        return; /* a work thread replies */
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

enum MHD_Result http_on_request(void *cls, struct MHD_Connection *conn,
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
        r->app = http_server.opts.ctx;
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
    if (r->offloaded) /* resumed: the work thread has replied */
        return r->replied ? queue_reply(r) : MHD_YES;
    if (*upload_data_size > 0) {
        int keep = req_body_chunk(r, upload_data, *upload_data_size);
        *upload_data_size = 0;
        return keep ? MHD_YES : MHD_NO;
    }
    req_finish(r);
    if (r->offloaded && !r->queued)
        return MHD_YES;
    return queue_reply(r);
}

void http_on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                       enum MHD_RequestTerminationCode toe)
{
    http_req *r = *con_cls;
    if (!r)
        return;
    access_rec rec;
    snprintf(rec.request_id, sizeof rec.request_id, "%s", r->request_id);
    snprintf(rec.method, sizeof rec.method, "%s", r->method_name);
    rec.method_label = http_method_name(r->method);
    snprintf(rec.path, sizeof rec.path, "%s", r->path);
    rec.route = r->routed ? r->match.route->name : NULL;
    /* Metrics label the template, never the raw path: bounded cardinality.
     * An event stream lasts as long as its client stays: counted, not
     * timed, so it does not swamp its route's latency histogram. */
    rec.route_template = r->routed ? r->match.route->pattern : NULL;
    rec.status = r->status;
    rec.bytes_in = r->bytes_in;
    rec.bytes_out = r->bytes_out;
    rec.ms = r->streamed ? -1.0 : elapsed_ms(&r->start);
    snprintf(rec.tenant, sizeof rec.tenant, "%s", r->key.tenant_id);
    rec.aborted = toe != MHD_REQUEST_TERMINATED_COMPLETED_OK;
    rec.timed = r->timed;
    rec.timed_s = r->timed_s;
    access_log_put(&rec);
    req_free(r);
    *con_cls = NULL;
}
