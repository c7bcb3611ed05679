/*
 * wremote_http.c - the remote worker shim's HTTP transfers (see
 * wremote_http.h): libcurl requests on one kept-alive handle, replies into
 * memory (JSON) or a file (a blob, hashed on the way), files uploaded as
 * multipart forms.
 *
 * What it keeps true:
 *  - every request carries the token header and speaks only http or https;
 *  - a JSON request has a whole-request timeout, a bulk one (a blob, an
 *    upload) a speed floor instead, so a big file is never cut short;
 *  - no answer is WRHTTP_RETRY only when a later try may get one (the
 *    server restarting, the network back): never for this side's doing,
 *    a certificate that does not verify, a bad URL, an unreadable file;
 *  - it never retries, sleeps or calls back into its caller.
 */
#include "node/wremote_http.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "common/sha256.h"
#include "common/ty.h"

#define CONNECT_TIMEOUT_S 5L
#define REQUEST_TIMEOUT_S 60L /* JSON requests, whole */
#define LOW_SPEED_BYTES 1024L /* blobs: slower than this ... */
#define LOW_SPEED_S 60L       /* ... for this long fails the transfer */
#define JSON_REPLY_MAX (16u << 20)

/* Where a reply's body goes: into memory (a JSON reply) or a file (a
 * blob), hashed on the way. */
typedef struct {
    char *mem; /* malloc'd, NUL-terminated */
    size_t len;
    int fd;                /* >= 0: the body goes here */
    char write_error[200]; /* why the body could not be kept; "" */
    sha256_ctx sha;
    char x_sha256[65]; /* the reply's X-Sha256 header, "" without */
} http_sink;

/* One request. */
typedef struct {
    const char *url;
    const char *json; /* POST this JSON body, or NULL */
    curl_mime *form;  /* POST this form, or NULL (GET) */
    int bulk;         /* a big transfer: a speed floor, no total timeout */
} http_req;

static size_t sink_write(char *data, size_t size, size_t nmemb, void *arg)
{
    http_sink *k = arg;
    size_t n = size * nmemb;
    if (k->fd >= 0) {
        ty_err err = {0};
        if (fs_write_full(k->fd, data, n, &err) != TY_OK) {
            snprintf(k->write_error, sizeof k->write_error, "%s", err.msg);
            return 0;
        }
        sha256_update(&k->sha, data, n);
        return n;
    }
    char *m =
        k->len + n > JSON_REPLY_MAX ? NULL : realloc(k->mem, k->len + n + 1);
    if (!m) {
        snprintf(k->write_error, sizeof k->write_error, "%s",
                 k->len + n > JSON_REPLY_MAX ? "the reply is too big"
                                             : "out of memory");
        return 0;
    }
    memcpy(m + k->len, data, n);
    k->mem = m;
    k->len += n;
    m[k->len] = '\0';
    return n;
}

static size_t sink_header(char *data, size_t size, size_t nmemb, void *arg)
{
    http_sink *k = arg;
    size_t n = size * nmemb;
    static const char name[] = "x-sha256:";
    size_t nl = strlen(name);
    if (n > nl && !strncasecmp(data, name, nl)) {
        const char *v = data + nl;
        const char *end = data + n;
        while (v < end && (*v == ' ' || *v == '\t'))
            v++;
        while (end > v &&
               (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' '))
            end--;
        if (end - v == 64) {
            memcpy(k->x_sha256, v, 64);
            k->x_sha256[64] = '\0';
        }
    }
    return n;
}

/* Stops a transfer once *h->stop is set: the shim points it at its
 * SIGTERM flag only until its child runs (afterwards a SIGTERM is the
 * child's to act on, and its last lines are still to be posted). */
static int transfer_progress(void *arg, curl_off_t dt, curl_off_t dn,
                             curl_off_t ut, curl_off_t un)
{
    const wrhttp_conn *h = arg;
    return h->stop && *h->stop;
}

/* Whether a transfer that got no answer may get one later (the server
 * restarting, the network back): not when it is this side's doing - a
 * certificate that does not verify, a bad URL, a file part that cannot
 * be read. */
static int transient(CURLcode rc)
{
    switch (rc) {
        case CURLE_UNSUPPORTED_PROTOCOL:
        case CURLE_URL_MALFORMAT:
        case CURLE_OUT_OF_MEMORY:
        case CURLE_READ_ERROR:
        case CURLE_PEER_FAILED_VERIFICATION:
        case CURLE_SSL_CACERT_BADFILE:
        case CURLE_SSL_CERTPROBLEM:
        case CURLE_SSL_CIPHER:
        case CURLE_SSL_ENGINE_NOTFOUND:
        case CURLE_SSL_ISSUER_ERROR:
        case CURLE_SSL_CRL_BADFILE:
        case CURLE_SSL_PINNEDPUBKEYNOTMATCH: return 0;
        default: return 1;
    }
}

static wrhttp_outcome outcome_of(long status)
{
    if (status >= 200 && status < 300)
        return WRHTTP_OK;
    if (status == 404)
        return WRHTTP_NOT_FOUND;
    if (status == 401)
        return WRHTTP_UNAUTHORIZED;
    if (status == 409)
        return WRHTTP_GONE;
    if (status >= 500 || status == 429)
        return WRHTTP_RETRY;
    return WRHTTP_FAILED;
}

/* A sink for a JSON reply (into memory), or for a blob (into fd >= 0). */
static void sink_init(http_sink *k, int fd)
{
    memset(k, 0, sizeof *k);
    k->fd = fd;
    sha256_init(&k->sha);
}

static void sink_free(http_sink *k)
{
    free(k->mem);
    k->mem = NULL;
}

/* Performs rq, its reply's body into sink (the caller's, initialised).
 * msg (n bytes) says what happened when the outcome is not WRHTTP_OK. */
static wrhttp_outcome http_do(wrhttp_conn *h, const http_req *rq,
                              http_sink *sink, char *msg, size_t n)
{
    CURL *c = h->curl;
    curl_easy_reset(c); /* keeps the connection */
    struct curl_slist *hdr = curl_slist_append(NULL, h->token_header);
    if (rq->json && hdr)
        hdr = curl_slist_append(hdr, "Content-Type: application/json");
    if (!hdr) {
        snprintf(msg, n, "out of memory");
        return WRHTTP_FAILED;
    }
    curl_easy_setopt(c, CURLOPT_URL, rq->url);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, CONNECT_TIMEOUT_S);
    if (rq->bulk) {
        curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, LOW_SPEED_BYTES);
        curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, LOW_SPEED_S);
    } else {
        curl_easy_setopt(c, CURLOPT_TIMEOUT, REQUEST_TIMEOUT_S);
    }
    if (h->ca_file)
        curl_easy_setopt(c, CURLOPT_CAINFO, h->ca_file);
    if (rq->json)
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, rq->json);
    if (rq->form)
        curl_easy_setopt(c, CURLOPT_MIMEPOST, rq->form);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, sink);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, sink_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, sink);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, transfer_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, h);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    CURLcode rc = curl_easy_perform(c);
    curl_slist_free_all(hdr);
    const char *method = rq->json || rq->form ? "POST" : "GET";
    if (rc == CURLE_ABORTED_BY_CALLBACK) {
        snprintf(msg, n, "%s %s: stopped by a signal", method, rq->url);
        return WRHTTP_FAILED;
    }
    if (sink->write_error[0]) {
        snprintf(msg, n, "%s %s: cannot keep what came: %s", method, rq->url,
                 sink->write_error);
        return WRHTTP_FAILED;
    }
    if (rc != CURLE_OK) {
        snprintf(msg, n, "%s %s: %s", method, rq->url, curl_easy_strerror(rc));
        return transient(rc) ? WRHTTP_RETRY : WRHTTP_FAILED;
    }
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    snprintf(msg, n, "%s %s: HTTP %ld", method, rq->url, status);
    return outcome_of(status);
}

/* GET url, its JSON reply into *doc (new). */
wrhttp_outcome wrhttp_get_json(wrhttp_conn *h, const char *url, json_t **doc,
                               char *msg, size_t n)
{
    http_sink k;
    sink_init(&k, -1);
    http_req rq = {.url = url};
    wrhttp_outcome o = http_do(h, &rq, &k, msg, n);
    *doc = o == WRHTTP_OK && k.mem ? json_loads(k.mem, 0, NULL) : NULL;
    if (o == WRHTTP_OK && !*doc) {
        snprintf(msg, n, "GET %s: the reply is not JSON", url);
        o = WRHTTP_FAILED;
    }
    sink_free(&k);
    return o;
}

/* GET url into the file path (created 0600, replaced); *sha gets the
 * content's, *x_sha256 the reply's X-Sha256 header ("" without). */
wrhttp_outcome wrhttp_get_file(wrhttp_conn *h, const char *url,
                               const char *path, char sha[65],
                               char x_sha256[65], char *msg, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(msg, n, "cannot create %s: %s", path, strerror(errno));
        return WRHTTP_FAILED;
    }
    http_sink k;
    sink_init(&k, fd);
    http_req rq = {.url = url, .bulk = 1};
    wrhttp_outcome o = http_do(h, &rq, &k, msg, n);
    uint8_t d[32];
    sha256_final(&k.sha, d);
    sha256_hex(d, sha);
    memcpy(x_sha256, k.x_sha256, 65);
    sink_free(&k);
    if (close(fd) != 0 && o == WRHTTP_OK) {
        snprintf(msg, n, "cannot write %s: %s", path, strerror(errno));
        o = WRHTTP_FAILED;
    }
    return o;
}

/* POST json to url; the reply's JSON into *reply (new; NULL when it is
 * not JSON: the caller reads it as "run"). */
wrhttp_outcome wrhttp_post_json(wrhttp_conn *h, const char *url,
                                const char *json, json_t **reply, char *msg,
                                size_t n)
{
    http_sink k;
    sink_init(&k, -1);
    http_req rq = {.url = url, .json = json};
    wrhttp_outcome o = http_do(h, &rq, &k, msg, n);
    *reply = o == WRHTTP_OK && k.mem ? json_loads(k.mem, 0, NULL) : NULL;
    sink_free(&k);
    return o;
}

/* A file part's bytes: len bytes of fd from base, read with pread so the
 * part can be sent again (a redirect or a retried connection rewinds). */
typedef struct {
    int fd;
    off_t base, len, pos;
} file_part;

static size_t file_part_read(char *buf, size_t size, size_t nitems, void *arg)
{
    file_part *f = arg;
    size_t want = size * nitems;
    if ((off_t)want > f->len - f->pos)
        want = (size_t)(f->len - f->pos);
    if (want == 0)
        return 0;
    ssize_t r;
    do
        r = pread(f->fd, buf, want, f->base + f->pos);
    while (r < 0 && errno == EINTR);
    if (r <= 0)
        return CURL_READFUNC_ABORT; /* the file shrank, or cannot be read */
    f->pos += r;
    return (size_t)r;
}

static int file_part_seek(void *arg, curl_off_t offset, int origin)
{
    file_part *f = arg;
    if (origin != SEEK_SET || offset < 0 || offset > f->len)
        return CURL_SEEKFUNC_CANTSEEK;
    f->pos = offset;
    return CURL_SEEKFUNC_OK;
}

/* POSTs f to url as multipart/form-data: the file part, then the text
 * field when it has one. The reply's body is not read. */
wrhttp_outcome wrhttp_post_file(wrhttp_conn *h, const char *url,
                                const wrhttp_file *f, char *msg, size_t n)
{
    file_part part = {.fd = f->fd, .base = f->base, .len = f->len};
    curl_mime *form = curl_mime_init(h->curl);
    curl_mimepart *p = form ? curl_mime_addpart(form) : NULL;
    int bad = !p || curl_mime_name(p, f->part) != CURLE_OK ||
              curl_mime_filename(p, f->filename) != CURLE_OK ||
              curl_mime_type(p, "application/octet-stream") != CURLE_OK ||
              curl_mime_data_cb(p, (curl_off_t)f->len, file_part_read,
                                file_part_seek, NULL, &part) != CURLE_OK;
    if (!bad && f->field) {
        p = curl_mime_addpart(form);
        bad = !p || curl_mime_name(p, f->field) != CURLE_OK ||
              curl_mime_data(p, f->value, CURL_ZERO_TERMINATED) != CURLE_OK;
    }
    wrhttp_outcome o = WRHTTP_FAILED;
    if (bad) {
        snprintf(msg, n, "out of memory for a form");
    } else {
        http_sink k;
        sink_init(&k, -1);
        http_req rq = {.url = url, .form = form, .bulk = 1};
        o = http_do(h, &rq, &k, msg, n);
        sink_free(&k);
    }
    curl_mime_free(form);
    return o;
}
