/*
 * http.c - libcurl requests for the client (see http.h). Each call makes
 * its own easy handle: the client does a handful of requests per run, so
 * reuse would buy nothing and cost shared state.
 */
#include "cli/http.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli/exit.h"

typedef struct {
    char *buf;
    size_t len, cap;
    int oom;
} membuf;

static size_t on_body(char *p, size_t sz, size_t n, void *ud)
{
    membuf *m = ud;
    size_t add = sz * n;
    if (m->len + add + 1 > m->cap) {
        size_t cap = m->cap ? m->cap : 4096;
        while (cap < m->len + add + 1)
            cap *= 2;
        char *nb = realloc(m->buf, cap);
        if (!nb) {
            m->oom = 1;
            return 0;
        }
        m->buf = nb;
        m->cap = cap;
    }
    memcpy(m->buf + m->len, p, add);
    m->len += add;
    m->buf[m->len] = '\0';
    return add;
}

typedef struct {
    cli_progress_fn fn;
    void *ctx;
    int upload;
} progress_ctx;

static int on_xferinfo(void *ud, curl_off_t dltotal, curl_off_t dlnow,
                       curl_off_t ultotal, curl_off_t ulnow)
{
    progress_ctx *p = ud;
    if (p->upload)
        p->fn(p->ctx, (double)ulnow, (double)ultotal);
    else
        p->fn(p->ctx, (double)dlnow, (double)dltotal);
    return 0;
}

/* Sets what every request shares; the header list is returned for freeing. */
/* A new easy handle, with out cleared; NULL (said on stderr) when libcurl
 * cannot make one. */
static CURL *handle_new(cli_resp *out)
{
    memset(out, 0, sizeof *out);
    CURL *c = curl_easy_init();
    if (!c)
        fprintf(stderr, "trainyard: cannot start libcurl\n");
    return c;
}

static struct curl_slist *setup(CURL *c, const cli_http *h, const char *path,
                                char *errbuf, struct curl_slist *hdrs)
{
    size_t n = strlen(h->url) + strlen(path) + 2;
    char *url = malloc(n);
    if (url) {
        /* A trailing slash on the base URL is the user's habit, not a path. */
        size_t b = strlen(h->url);
        while (b > 0 && h->url[b - 1] == '/')
            b--;
        snprintf(url, n, "%.*s%s", (int)b, h->url, path);
        curl_easy_setopt(c, CURLOPT_URL, url);
        free(url);
    }
    if (h->key && *h->key) {
        char auth[320];
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", h->key);
        hdrs = curl_slist_append(hdrs, auth);
    }
    hdrs = curl_slist_append(hdrs, "Accept: application/json");
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "trainyard-cli/" TRAINYARD_VERSION);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 15L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    /* Verification stays on: there is no switch to turn it off. */
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 2L);
    if (h->cacert && *h->cacert)
        curl_easy_setopt(c, CURLOPT_CAINFO, h->cacert);
    return hdrs;
}

/* Says which of DNS, connect or TLS failed. */
static int transport_error(const cli_http *h, CURLcode rc, const char *errbuf)
{
    const char *what;
    switch (rc) {
        case CURLE_COULDNT_RESOLVE_HOST:
        case CURLE_COULDNT_RESOLVE_PROXY: what = "DNS lookup failed"; break;
        case CURLE_COULDNT_CONNECT: what = "connection failed"; break;
        case CURLE_OPERATION_TIMEDOUT: what = "timed out"; break;
        case CURLE_PEER_FAILED_VERIFICATION:
#if LIBCURL_VERSION_NUM < 0x073e00
        case CURLE_SSL_CACERT:
#endif
        case CURLE_SSL_CACERT_BADFILE:
        case CURLE_SSL_ISSUER_ERROR:
        case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
            what = "TLS certificate verification failed (a private CA needs "
                   "--cacert FILE)";
            break;
        case CURLE_SSL_CONNECT_ERROR: what = "TLS handshake failed"; break;
        case CURLE_UNSUPPORTED_PROTOCOL:
        case CURLE_URL_MALFORMAT:
            what = "bad URL (it must start with http:// or https://)";
            break;
        case CURLE_GOT_NOTHING:
            what = strncmp(h->url, "http://", 7)
                       ? "no reply"
                       : "no reply (a server started with --tls-cert answers "
                         "only https://)";
            break;
        default: what = "transfer failed"; break;
    }
    fprintf(stderr, "trainyard: cannot reach %s: %s: %s\n", h->url, what,
            *errbuf ? errbuf : curl_easy_strerror(rc));
    return CLI_EXIT_UNREACHABLE;
}

static int finish(CURL *c, CURLcode rc, const cli_http *h, const char *errbuf,
                  membuf *m, cli_resp *out)
{
    if (rc != CURLE_OK) {
        free(m->buf);
        return transport_error(h, rc, errbuf);
    }
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &out->status);
    if (!m->buf)
        m->buf = calloc(1, 1);
    out->body = m->buf;
    out->len = m->len;
    char *ct = NULL;
    curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &ct);
    if (ct && strstr(ct, "json") && out->body)
        out->json = json_loadb(out->body, out->len, 0, NULL);
    return 0;
}

int cli_http_request(const cli_http *h, const char *method, const char *path,
                     const char *content_type, const char *body, size_t len,
                     cli_resp *out)
{
    CURL *c = handle_new(out);
    if (!c)
        return CLI_EXIT_UNREACHABLE;
    char errbuf[CURL_ERROR_SIZE] = "";
    struct curl_slist *hdrs = NULL;
    if (content_type) {
        char ct[160];
        snprintf(ct, sizeof ct, "Content-Type: %s", content_type);
        hdrs = curl_slist_append(hdrs, ct);
    }
    hdrs = setup(c, h, path, errbuf, hdrs);
    membuf m = {0};
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &m);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    if (body || !strcmp(method, "POST") || !strcmp(method, "PATCH")) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body ? body : "");
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    }
    CURLcode rc = curl_easy_perform(c);
    int ret = finish(c, rc, h, errbuf, &m, out);
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(c);
    return ret;
}

int cli_http_upload(const cli_http *h, const char *path,
                    const char *const *parts, size_t nparts,
                    cli_progress_fn progress, void *ctx, cli_resp *out)
{
    CURL *c = handle_new(out);
    if (!c)
        return CLI_EXIT_UNREACHABLE;
    char errbuf[CURL_ERROR_SIZE] = "";
    struct curl_slist *hdrs = setup(c, h, path, errbuf, NULL);
    curl_mime *mime = curl_mime_init(c);
    int ret = 0;
    for (size_t i = 0; i < nparts; i++) {
        const char *eq = strchr(parts[i], '=');
        if (!eq || eq == parts[i]) {
            fprintf(stderr,
                    "trainyard: '%s' is not field=value or "
                    "field=@file\n",
                    parts[i]);
            ret = CLI_EXIT_USAGE;
            goto out;
        }
        curl_mimepart *p = curl_mime_addpart(mime);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)(eq - parts[i]), parts[i]);
        curl_mime_name(p, name);
        if (eq[1] == '@') {
            FILE *f = fopen(eq + 2, "rb");
            if (!f) {
                fprintf(stderr, "trainyard: cannot open %s: %s\n", eq + 2,
                        strerror(errno));
                ret = CLI_EXIT_USAGE;
                goto out;
            }
            fclose(f);
            curl_mime_filedata(p, eq + 2);
            curl_mime_type(p, "application/octet-stream");
        } else {
            curl_mime_data(p, eq + 1, CURL_ZERO_TERMINATED);
        }
    }
    curl_easy_setopt(c, CURLOPT_MIMEPOST, mime);
    progress_ctx pc = {progress, ctx, 1};
    if (progress) {
        curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_xferinfo);
        curl_easy_setopt(c, CURLOPT_XFERINFODATA, &pc);
    }
    membuf m = {0};
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &m);
    CURLcode rc = curl_easy_perform(c);
    ret = finish(c, rc, h, errbuf, &m, out);
out:
    curl_mime_free(mime);
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(c);
    return ret;
}

typedef struct {
    CURL *c;
    FILE *f;
    membuf err; /* the body of a non-2xx reply */
    int failed; /* a write to f failed */
} download_ctx;

static size_t on_download(char *p, size_t sz, size_t n, void *ud)
{
    download_ctx *d = ud;
    long status = 0;
    curl_easy_getinfo(d->c, CURLINFO_RESPONSE_CODE, &status);
    if (status < 200 || status > 299)
        return on_body(p, sz, n, &d->err);
    if (fwrite(p, sz, n, d->f) != n) {
        d->failed = 1;
        return 0;
    }
    return sz * n;
}

int cli_http_download(const cli_http *h, const char *path, FILE *f,
                      cli_progress_fn progress, void *ctx, cli_resp *out)
{
    CURL *c = handle_new(out);
    if (!c)
        return CLI_EXIT_UNREACHABLE;
    char errbuf[CURL_ERROR_SIZE] = "";
    struct curl_slist *hdrs = setup(c, h, path, errbuf, NULL);
    download_ctx d = {.c = c, .f = f};
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_download);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &d);
    progress_ctx pc = {progress, ctx, 0};
    if (progress) {
        curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_xferinfo);
        curl_easy_setopt(c, CURLOPT_XFERINFODATA, &pc);
    }
    CURLcode rc = curl_easy_perform(c);
    int ret;
    if (d.failed) {
        fprintf(stderr, "trainyard: cannot write the download: %s\n",
                strerror(errno));
        free(d.err.buf);
        ret = CLI_EXIT_USAGE;
    } else {
        ret = finish(c, rc, h, errbuf, &d.err, out);
    }
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(c);
    return ret;
}

/* ---- Server-Sent Events ---- */

typedef struct {
    membuf line; /* the line being read */
    char id[32];
    char event[64];
    membuf data;
    cli_sse_fn fn;
    void *ctx;
    int stopped;
    CURL *c;
    membuf err; /* the body of a non-2xx reply */
} sse_ctx;

/* One complete line (without its end); a blank line dispatches. */
static int sse_line(sse_ctx *s, const char *line)
{
    if (!*line) {
        if (s->data.len || *s->event) {
            int stop = s->fn(s->ctx, s->id, *s->event ? s->event : "message",
                             s->data.buf ? s->data.buf : "");
            s->event[0] = '\0';
            s->data.len = 0;
            if (s->data.buf)
                s->data.buf[0] = '\0';
            return stop;
        }
        return 0;
    }
    if (line[0] == ':')
        return 0; /* a comment: keepalive */
    const char *colon = strchr(line, ':');
    size_t flen = colon ? (size_t)(colon - line) : strlen(line);
    const char *v = colon ? colon + 1 : "";
    if (*v == ' ')
        v++;
    if (flen == 2 && !strncmp(line, "id", 2))
        snprintf(s->id, sizeof s->id, "%s", v);
    else if (flen == 5 && !strncmp(line, "event", 5))
        snprintf(s->event, sizeof s->event, "%s", v);
    else if (flen == 4 && !strncmp(line, "data", 4)) {
        if (s->data.len)
            on_body("\n", 1, 1, &s->data);
        on_body((char *)v, 1, strlen(v), &s->data);
    }
    return 0;
}

static size_t on_sse(char *p, size_t sz, size_t n, void *ud)
{
    sse_ctx *s = ud;
    size_t total = sz * n;
    long status = 0;
    curl_easy_getinfo(s->c, CURLINFO_RESPONSE_CODE, &status);
    if (status < 200 || status > 299)
        return on_body(p, sz, n, &s->err);
    for (size_t i = 0; i < total; i++) {
        if (p[i] == '\n') {
            char *l = s->line.buf ? s->line.buf : "";
            size_t ll = s->line.len;
            if (ll && l[ll - 1] == '\r')
                l[ll - 1] = '\0';
            if (sse_line(s, l)) {
                s->stopped = 1;
                return 0; /* aborts the transfer */
            }
            s->line.len = 0;
            if (s->line.buf)
                s->line.buf[0] = '\0';
        } else if (on_body(p + i, 1, 1, &s->line) != 1) {
            return 0;
        }
    }
    return total;
}

int cli_http_sse(const cli_http *h, const char *path, const char *last_event_id,
                 cli_sse_fn on_event, void *ctx, int *stopped, cli_resp *out)
{
    *stopped = 0;
    CURL *c = handle_new(out);
    if (!c)
        return CLI_EXIT_UNREACHABLE;
    char errbuf[CURL_ERROR_SIZE] = "";
    struct curl_slist *hdrs = NULL;
    if (last_event_id && *last_event_id) {
        char hdr[64];
        snprintf(hdr, sizeof hdr, "Last-Event-ID: %s", last_event_id);
        hdrs = curl_slist_append(hdrs, hdr);
    }
    hdrs = setup(c, h, path, errbuf, hdrs);
    sse_ctx s = {.fn = on_event, .ctx = ctx, .c = c};
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_sse);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
    /* The server sends a keepalive every 15 s: a minute of silence is a
     * dead connection, to be reopened. */
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
    CURLcode rc = curl_easy_perform(c);
    int ret = 0;
    free(s.line.buf);
    free(s.data.buf);
    if (s.stopped) {
        *stopped = 1;
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &out->status);
        out->body = calloc(1, 1);
        free(s.err.buf);
    } else if (rc != CURLE_OK && rc != CURLE_PARTIAL_FILE &&
               rc != CURLE_RECV_ERROR && rc != CURLE_OPERATION_TIMEDOUT &&
               rc != CURLE_GOT_NOTHING) {
        free(s.err.buf);
        ret = transport_error(h, rc, errbuf);
    } else {
        /* A dropped stream is not an error here: the caller reconnects. */
        ret = finish(c, CURLE_OK, h, errbuf, &s.err, out);
    }
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(c);
    return ret;
}

int cli_http_check(const cli_resp *r)
{
    if (r->status >= 200 && r->status <= 299)
        return 0;
    const char *title = NULL, *detail = NULL, *field = NULL;
    if (r->json) {
        title = json_string_value(json_object_get(r->json, "title"));
        detail = json_string_value(json_object_get(r->json, "detail"));
        field = json_string_value(json_object_get(r->json, "field"));
    }
    if (title || detail) {
        fprintf(stderr, "trainyard: %s (HTTP %ld): %s", title ? title : "error",
                r->status, detail ? detail : "");
        if (field && *field)
            fprintf(stderr, " (field: %s)", field);
        fputc('\n', stderr);
    } else {
        /* Not a problem document (a proxy's page): its first line. */
        const char *b = r->body ? r->body : "";
        int n = (int)strcspn(b, "\r\n");
        fprintf(stderr, "trainyard: HTTP %ld%s%.*s\n", r->status,
                n > 0 ? ": " : "", n > 200 ? 200 : n, b);
    }
    if (r->status == 404)
        return CLI_EXIT_NOT_FOUND;
    if (r->status == 401 || r->status == 403)
        return CLI_EXIT_AUTH;
    if (r->status >= 400 && r->status <= 499)
        return CLI_EXIT_REJECTED;
    if (r->status >= 500)
        return CLI_EXIT_SERVER;
    /* 1xx/3xx: not what the API answers; the server is something else. */
    return CLI_EXIT_SERVER;
}

void cli_resp_free(cli_resp *r)
{
    free(r->body);
    json_decref(r->json);
    memset(r, 0, sizeof *r);
}

void cli_http_escape(const char *s, char *out, size_t size)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (; *s && o + 4 < size; s++) {
        unsigned char ch = (unsigned char)*s;
        if ((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
            (ch >= '0' && ch <= '9') || strchr("-._~", ch)) {
            out[o++] = (char)ch;
        } else {
            out[o++] = '%';
            out[o++] = hex[ch >> 4];
            out[o++] = hex[ch & 15];
        }
    }
    out[o] = '\0';
}
