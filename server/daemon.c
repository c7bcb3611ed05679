/*
 * daemon.c - the listening socket and the libmicrohttpd daemon: start and
 * graceful stop (see http.h).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/fetch.h"
#include "common/log.h"
#include "server/accesslog.h"
#include "server/guard.h"
#include "server/http_internal.h"

/* ---- daemon ---- */

int http_listen_open(const http_server_opts *cfg, int *port_out, ty_err *err)
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
        const char *host =
            strcmp(cfg->host, "localhost") ? cfg->host : "127.0.0.1";
        if (inet_pton(AF_INET, host, &a->sin_addr) != 1) {
            ty_fail(err, TY_EINVAL, "--listen",
                    "--listen: %s is not an IPv4 address (use a numeric "
                    "address such as 127.0.0.1 or 0.0.0.0)",
                    cfg->host);
            return -1;
        }
        len = sizeof *a;
    }
    int fd =
        socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
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
    /* A deep backlog: many connecting at once are queued, not refused. */
    if (listen(fd, 4096) != 0) {
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

/* Whether a libmicrohttpd message says only that the client went away (a
 * closed browser tab, a cancelled request): normal, so "debug", not "warn".
 * These are its words for the socket errors of a peer that is gone. */
static int peer_went_away(const char *msg)
{
    static const char *const gone[] = {
        "forcibly closed by remote peer", "no longer available for sending",
        "socket is not connected", "Socket has been disconnected",
        "Connection socket is closed"};
    for (size_t i = 0; i < TY_ARRAY_LEN(gone); i++)
        if (strstr(msg, gone[i]))
            return 1;
    return 0;
}

/* libmicrohttpd's messages come at the pace of the clients (one per
 * request that goes wrong, one per closed event stream): at most one a
 * second per message, its format being the cause. */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    static log_limit limit;
    log_repeat rep;
    if (!log_limit_take(&limit, fmt, &rep))
        return;
    char buf[512];
    vsnprintf(buf, sizeof buf, fmt, ap);
    size_t n = strlen(buf);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        buf[--n] = '\0';
    log_event_rep(&rep, peer_went_away(buf) ? "debug" : "warn", "http",
                  json_pack("{s:s}", "msg", buf));
}

/* The request callbacks, through the guard: it follows each request's
 * phase (headers, body, reply, kept alive) for its read deadlines. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn,
                                  const char *url, const char *method,
                                  const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **req_cls)
{
    if (!*req_cls)
        guard_headers_done(conn);
    else if (*upload_data_size > 0)
        guard_body_bytes(conn, *upload_data_size);
    else
        guard_body_done(conn);
    return http_on_request(cls, conn, url, method, version, upload_data,
                           upload_data_size, req_cls);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **req_cls,
                         enum MHD_RequestTerminationCode toe)
{
    guard_request_done(conn);
    http_on_completed(cls, conn, req_cls, toe);
}

ty_status http_server_start(const http_server_opts *opts, const route *routes,
                            size_t nroutes, int fd, ty_err *err)
{
    http_server.opts = *opts;
    http_server.routes = routes;
    http_server.nroutes = nroutes;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL |
                     MHD_USE_ERROR_LOG | MHD_USE_ITC |
                     MHD_ALLOW_SUSPEND_RESUME; /* event streams */
    if (opts->ipv6)
        flags |= MHD_USE_IPv6;
    /* HTTPS: TLS 1.2 and 1.3 only; GnuTLS's NORMAL set otherwise. */
    struct MHD_OptionItem tls_opts[] = {
        {MHD_OPTION_HTTPS_MEM_CERT, 0, (void *)opts->tls_cert},
        {MHD_OPTION_HTTPS_MEM_KEY, 0, (void *)opts->tls_key},
        {MHD_OPTION_HTTPS_PRIORITIES, 0,
         (void *)"NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2"},
        {MHD_OPTION_END, 0, NULL}};
    if (opts->tls_cert)
        flags |= MHD_USE_TLS;
    else
        tls_opts[0].option = MHD_OPTION_END;
    /* Limits on connections: 0 leaves libmicrohttpd's default. */
    struct MHD_OptionItem conn_opts[] = {
        {MHD_OPTION_CONNECTION_LIMIT, (intptr_t)opts->max_connections, NULL},
        {MHD_OPTION_PER_IP_CONNECTION_LIMIT, (intptr_t)opts->per_ip_connections,
         NULL},
        {MHD_OPTION_END, 0, NULL}};
    if (!opts->per_ip_connections)
        conn_opts[1].option = MHD_OPTION_END;
    if (!opts->max_connections) {
        conn_opts[0] = conn_opts[1];
        conn_opts[1].option = MHD_OPTION_END;
    }
    guard_opts go = {
        .header_timeout_s = opts->header_timeout_s,
        .body_timeout_s = opts->body_timeout_s,
        .body_min_rate = opts->body_min_rate,
        .request_timeout_s = opts->request_timeout_s,
        .idle_timeout_s = opts->connection_timeout_s,
        .auth_fail_rate = opts->auth_fail_rate,
        .auth_fail_burst = opts->auth_fail_burst,
    };
    ty_status gs = guard_start(&go, err);
    if (gs != TY_OK) {
        close(fd);
        return gs;
    }
    access_log_opts lo = {.sample = opts->access_log_sample,
                          .path = opts->access_log_path,
                          .max_bytes = opts->access_log_max_bytes};
    if ((gs = access_log_start(&lo, err)) != TY_OK) {
        close(fd);
        guard_stop();
        return gs;
    }
    if ((gs = http_offload_start(opts->work_threads, opts->wait_threads,
                                 opts->tenant_thread_share, err)) != TY_OK) {
        close(fd);
        guard_stop();
        access_log_stop();
        return gs;
    }
    http_server.daemon = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, NULL, MHD_OPTION_EXTERNAL_LOGGER,
        mhd_log, NULL, MHD_OPTION_LISTEN_SOCKET, fd,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)opts->threads,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
        MHD_OPTION_NOTIFY_CONNECTION, guard_on_connection, NULL,
        MHD_OPTION_URI_LOG_CALLBACK, guard_on_uri, NULL, MHD_OPTION_ARRAY,
        conn_opts, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)opts->connection_timeout_s,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 * 1024),
        MHD_OPTION_ARRAY, tls_opts, MHD_OPTION_END);
    if (!http_server.daemon) {
        close(fd);
        guard_stop();
        access_log_stop();
        http_offload_stop();
        if (opts->tls_cert)
            return ty_fail(err, TY_EINVAL, "--tls-key",
                           "cannot start HTTPS on %s: the TLS library "
                           "refused the certificate or key (is --tls-key "
                           "the private key of --tls-cert? the server log "
                           "line before this says more)",
                           opts->listen);
        return ty_fail(err, TY_EIO, NULL, "cannot start the HTTP server on %s",
                       opts->listen);
    }
    return TY_OK;
}

void http_server_stop(void)
{
    if (!http_server.daemon)
        return;
    /* libmicrohttpd must not be stopped with suspended connections. */
    http_streams_close_all();
    MHD_socket fd = MHD_quiesce_daemon(http_server.daemon);
    /* Requests in flight finish; a long URL fetch among them stops now. */
    fetch_abort_all();
    /* Requests handed to work threads are run and resumed: the daemon
     * must not stop with a suspended connection. */
    http_offload_stop();
    MHD_stop_daemon(http_server.daemon);
    guard_stop();
    access_log_stop();
    if (fd != MHD_INVALID_SOCKET)
        close(fd);
    http_server.daemon = NULL;
}
