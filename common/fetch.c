/* fetch.c - bounded URL downloads with libcurl (see fetch.h). */
#include "common/fetch.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <stdatomic.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "common/log.h"

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

/* An address or network: IPv4 ones as IPv4-mapped IPv6, so that one prefix
 * test covers both families (an IPv4 /n is an IPv6 /(96+n)). */
typedef struct {
    unsigned char a[16];
    unsigned bits;
} net;

static const unsigned char v4mapped[12] = {0, 0, 0, 0, 0,    0,
                                           0, 0, 0, 0, 0xff, 0xff};

static void net_v4(net *n, uint32_t host_order, unsigned bits)
{
    memcpy(n->a, v4mapped, 12);
    n->a[12] = host_order >> 24;
    n->a[13] = host_order >> 16;
    n->a[14] = host_order >> 8;
    n->a[15] = host_order;
    n->bits = 96 + bits;
}

static int net_has(const net *n, const unsigned char a[16])
{
    unsigned full = n->bits / 8, rest = n->bits % 8;
    if (memcmp(n->a, a, full) != 0)
        return 0;
    if (!rest)
        return 1;
    unsigned char mask = (unsigned char)(0xff00 >> rest);
    return (n->a[full] & mask) == (a[full] & mask);
}

/* Parses one entry ("a.b.c.d", "a.b.c.d/n", "x::y", "x::y/n"; exact dotted
 * quads only). 1 on success. */
static int net_parse(const char *s, size_t len, net *n)
{
    char buf[64];
    while (len && (*s == ' ' || *s == '\t'))
        s++, len--;
    while (len && (s[len - 1] == ' ' || s[len - 1] == '\t'))
        len--;
    if (!len || len >= sizeof buf)
        return 0;
    memcpy(buf, s, len);
    buf[len] = '\0';
    int bits = -1;
    char *slash = strchr(buf, '/');
    if (slash) {
        *slash = '\0';
        const char *d = slash + 1;
        if (!*d || strlen(d) > 3)
            return 0;
        bits = 0;
        for (; *d; d++) {
            if (*d < '0' || *d > '9')
                return 0;
            bits = bits * 10 + (*d - '0');
        }
    }
    struct in_addr v4;
    if (inet_pton(AF_INET, buf, &v4) == 1) {
        if (bits > 32)
            return 0;
        net_v4(n, ntohl(v4.s_addr), bits < 0 ? 32 : (unsigned)bits);
        return 1;
    }
    if (inet_pton(AF_INET6, buf, n->a) == 1) {
        if (bits > 128)
            return 0;
        n->bits = bits < 0 ? 128 : (unsigned)bits;
        return 1;
    }
    return 0;
}

ty_status fetch_networks_check(const char *list, const char *flag, ty_err *err)
{
    for (const char *p = list ? list : ""; *p;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        net n;
        if (!net_parse(p, len, &n))
            return ty_fail(err, TY_EINVAL, flag,
                           "%s: '%.*s' is not an IPv4 or IPv6 address or "
                           "network (e.g. 10.0.0.0/8, 127.0.0.1, fd00::/8)",
                           flag, (int)(len > 64 ? 64 : len), p);
        p = comma ? comma + 1 : p + len;
    }
    return TY_OK;
}

/* Networks no fetch may reach unless allowed: what is not the public
 * internet. IPv4 ones also match their IPv4-mapped forms. */
static const char *const refused_networks[] = {
    "0.0.0.0/8",      /* "this network", 0.0.0.0 */
    "10.0.0.0/8",     /* RFC 1918 */
    "100.64.0.0/10",  /* CGNAT */
    "127.0.0.0/8",    /* loopback */
    "169.254.0.0/16", /* link-local, cloud metadata (169.254.169.254) */
    "172.16.0.0/12",  /* RFC 1918 */
    "192.0.0.0/24",   /* IETF protocol assignments */
    "192.168.0.0/16", /* RFC 1918 */
    "198.18.0.0/15",  /* benchmarking */
    "224.0.0.0/4",    /* multicast */
    "240.0.0.0/4",    /* reserved, 255.255.255.255 broadcast */
    "::/128",         /* unspecified */
    "::1/128",        /* loopback */
    "fc00::/7",       /* unique local */
    "fe80::/10",      /* link-local */
    "fec0::/10",      /* site-local (deprecated) */
    "ff00::/8",       /* multicast */
};

/* The 16 bytes of sa, with the IPv4 addresses that IPv6 carries (mapped
 * ::ffff:a.b.c.d, SIIT ::ffff:0:a.b.c.d, compatible ::a.b.c.d, NAT64
 * 64:ff9b::a.b.c.d) brought to their IPv4-mapped form. 0 if not IP. */
static int addr_bytes(const struct sockaddr *sa, size_t len,
                      unsigned char a[16])
{
    if (sa->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
        net n;
        net_v4(&n, ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr),
               32);
        memcpy(a, n.a, 16);
        return 1;
    }
    if (sa->sa_family != AF_INET6 || len < sizeof(struct sockaddr_in6))
        return 0;
    memcpy(a, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
    static const unsigned char siit[12] = {0, 0, 0,    0,    0, 0,
                                           0, 0, 0xff, 0xff, 0, 0};
    static const unsigned char nat64[12] = {0, 0x64, 0xff, 0x9b, 0, 0,
                                            0, 0,    0,    0,    0, 0};
    static const unsigned char zero[12] = {0};
    int embeds_v4 =
        !memcmp(a, siit, 12) || !memcmp(a, nat64, 12) ||
        (!memcmp(a, zero, 12) && (a[12] | a[13] | a[14] | (a[15] > 1 ? 1 : 0)));
    if (embeds_v4)
        memcpy(a, v4mapped, 12);
    return 1;
}

int fetch_addr_allowed(const struct sockaddr *sa, size_t len,
                       const char *allow_networks)
{
    unsigned char a[16];
    if (!addr_bytes(sa, len, a))
        return 0;
    net n;
    for (const char *p = allow_networks ? allow_networks : ""; *p;) {
        const char *comma = strchr(p, ',');
        size_t l = comma ? (size_t)(comma - p) : strlen(p);
        if (net_parse(p, l, &n) && net_has(&n, a))
            return 1;
        p = comma ? comma + 1 : p + l;
    }
    for (size_t i = 0; i < TY_ARRAY_LEN(refused_networks); i++)
        if (net_parse(refused_networks[i], strlen(refused_networks[i]), &n) &&
            net_has(&n, a))
            return 0;
    return 1;
}

/* What the open-socket callback saw, for the log. */
typedef struct {
    const char *allow_networks;
    int refused;
    char refused_addr[INET6_ADDRSTRLEN];
} guard;

/* Called by curl with the resolved address before each connection (each
 * redirect hop, each address tried): the place to refuse. */
static curl_socket_t open_socket(void *ctx, curlsocktype purpose,
                                 struct curl_sockaddr *sa)
{
    guard *g = ctx;
    if (purpose == CURLSOCKTYPE_IPCXN &&
        fetch_addr_allowed(&sa->addr, sa->addrlen, g->allow_networks))
        return socket(sa->family, sa->socktype | SOCK_CLOEXEC, sa->protocol);
    g->refused = 1;
    const void *in = NULL;
    if (sa->family == AF_INET)
        in = &((const struct sockaddr_in *)(const void *)&sa->addr)->sin_addr;
    else if (sa->family == AF_INET6)
        in = &((const struct sockaddr_in6 *)(const void *)&sa->addr)->sin6_addr;
    if (!in ||
        !inet_ntop(sa->family, in, g->refused_addr, sizeof g->refused_addr))
        snprintf(g->refused_addr, sizeof g->refused_addr, "?");
    return CURL_SOCKET_BAD;
}

/* The URL's host, for the log (never the whole URL: it may hold a password).
 * A tenant can ask for fetches as fast as it likes: at most a line a
 * second per host. */
static void log_failure(const char *url, const char *field, const guard *g,
                        const char *why)
{
    static log_limit limit;
    CURLU *u = curl_url();
    char *host = NULL;
    if (u && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK)
        curl_url_get(u, CURLUPART_HOST, &host, 0);
    log_repeat rep;
    if (log_limit_take(&limit, host ? host : "?", &rep)) {
        json_t *f = json_pack("{s:s, s:s, s:s}", "field", field ? field : "",
                              "host", host ? host : "?", "error", why);
        if (f && g->refused)
            json_object_set_new(f, "refused_address",
                                json_string(g->refused_addr));
        log_event_rep(&rep, "warn", "fetch_failed", f);
    }
    curl_free(host);
    curl_url_cleanup(u);
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
                            const char *allow_hosts, const char *allow_networks,
                            const char *field, ty_err *err)
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
    guard g = {.allow_networks = allow_networks};
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, any_host ? 1L : 0L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 5L);
    curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, open_socket);
    curl_easy_setopt(c, CURLOPT_OPENSOCKETDATA, &g);
    curl_easy_setopt(c, CURLOPT_PROXY, "");
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
                     "%s: the file is larger than the fetch limit of %llu "
                     "bytes",
                     field, (unsigned long long)max_bytes);
    else if (s.write_failed)
        st = ty_fail(err, TY_EIO, NULL, "cannot write the download of %s", url);
    else if (rc == CURLE_ABORTED_BY_CALLBACK)
        st = ty_fail(err, TY_EFETCH, field,
                     "%s: the fetch was stopped: the server is shutting down",
                     field);
    else if (rc != CURLE_OK) {
        log_failure(url, field, &g,
                    curl_err[0] ? curl_err : curl_easy_strerror(rc));
        st = ty_fail(err, TY_EFETCH, field, "%s: " FETCH_FAILED_MSG, field);
    } else if (code >= 400)
        st = ty_fail(err, TY_EFETCH, field,
                     "%s: cannot fetch this URL: its server answered HTTP %ld",
                     field, code);
    if (st == TY_OK)
        st = fs_fsync_fd(s.fd, path, err);
    close(s.fd);
    return st;
}
