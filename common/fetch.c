/* fetch.c - bounded URL downloads with libcurl (see fetch.h). */
#include "common/fetch.h"

#include <curl/curl.h>
#include <stdatomic.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common/fsutil.h"

typedef struct {
    int fd;
    uint64_t written;
    uint64_t max_bytes;
    int too_big;
    int write_failed;
} sink;

static size_t on_data(char *data, size_t size, size_t nmemb, void *ctx)
{
    sink *s = ctx;
    size_t len = size * nmemb;
    if (s->written + len > s->max_bytes) {
        s->too_big = 1;
        return 0;
    }
    if (fs_write_full(s->fd, data, len, NULL) != TY_OK) {
        s->write_failed = 1;
        return 0;
    }
    s->written += len;
    return len;
}

static atomic_int aborting;

void fetch_global_init(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

void fetch_abort_all(void) { aborting = 1; }

static int on_progress(void *ctx, curl_off_t dltotal, curl_off_t dlnow,
                       curl_off_t ultotal, curl_off_t ulnow)
{
    return aborting ? 1 : 0;
}

int fetch_host_allowed(const char *url, const char *allow_hosts)
{
    if (!strcmp(allow_hosts, "*"))
        return 1;
    CURLU *u = curl_url();
    char *host = NULL;
    int ok = 0;
    if (u && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK) {
        size_t hlen = strlen(host);
        for (const char *p = allow_hosts; *p && !ok;) {
            const char *comma = strchr(p, ',');
            size_t len = comma ? (size_t)(comma - p) : strlen(p);
            while (len && *p == ' ')
                p++, len--;
            while (len && p[len - 1] == ' ')
                len--;
            ok = len == hlen && strncasecmp(p, host, len) == 0;
            p = comma ? comma + 1 : p + len;
        }
    }
    curl_free(host);
    curl_url_cleanup(u);
    return ok;
}

ty_status fetch_url_to_file(const char *url, const char *path,
                            uint64_t max_bytes, int timeout_s,
                            const char *allow_hosts, const char *field,
                            ty_err *err)
{
    if (strncasecmp(url, "http://", 7) != 0 &&
        strncasecmp(url, "https://", 8) != 0)
        return ty_fail(err, TY_EINVAL, field,
                       "%s must be an http:// or https:// URL", field);
    int any_host = !strcmp(allow_hosts, "*");
    if (!fetch_host_allowed(url, allow_hosts))
        return ty_fail(err, TY_EINVAL, field,
                       "%s names a host this server may not fetch from "
                       "(allowed: %s)",
                       field, allow_hosts);
    sink s = {.max_bytes = max_bytes};
    s.fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (s.fd < 0)
        return ty_fail(err, TY_EIO, NULL, "cannot create %s: %s", path,
                       strerror(errno));
    CURL *c = curl_easy_init();
    if (!c) {
        close(s.fd);
        return ty_fail(err, TY_ENOMEM, NULL, "cannot start a download");
    }
    char curl_err[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, any_host ? 1L : 0L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 5L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, (long)timeout_s);
    curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)max_bytes);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, curl_err);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "trainyard/" TRAINYARD_VERSION);
    CURLcode rc = curl_easy_perform(c);
    long code = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(c);
    ty_status st = TY_OK;
    if (s.too_big || rc == CURLE_FILESIZE_EXCEEDED)
        st = ty_fail(err, TY_ETOOBIG, field,
                     "%s is larger than the fetch limit of %llu bytes", url,
                     (unsigned long long)max_bytes);
    else if (s.write_failed)
        st = ty_fail(err, TY_EIO, NULL, "cannot write the download of %s", url);
    else if (rc == CURLE_ABORTED_BY_CALLBACK)
        st = ty_fail(err, TY_EFETCH, field,
                     "fetching %s was stopped: the server is shutting down",
                     url);
    else if (rc == CURLE_OPERATION_TIMEDOUT)
        st = ty_fail(err, TY_EFETCH, field,
                     "fetching %s took longer than %d seconds", url, timeout_s);
    else if (rc != CURLE_OK)
        st = ty_fail(err, TY_EFETCH, field, "cannot fetch %s: %s", url,
                     curl_err[0] ? curl_err : curl_easy_strerror(rc));
    else if (code >= 400)
        st = ty_fail(err, TY_EFETCH, field, "fetching %s failed: HTTP %ld", url,
                     code);
    if (st == TY_OK)
        st = fs_fsync_fd(s.fd, path, err);
    close(s.fd);
    return st;
}
