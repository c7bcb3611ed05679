/*
 * guard.c - request read deadlines (a watchdog thread) and the failed
 * authentication throttle (see guard.h).
 */
#include "server/guard.h"

#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "common/log.h"

typedef enum { PH_HEADERS, PH_BODY, PH_REPLY, PH_IDLE } phase;

typedef struct conn_rec {
    struct conn_rec *prev, *next;
    int fd;
    phase ph;
    int dropped;
    int nul_path;
    double deadline; /* monotonic seconds; 0 = none */
    double body_start;
    uint64_t body_bytes;
    /* The client's end of the stream seen with nothing left to read, in
     * phase gone_ph with body_bytes at gone_bytes (see gone_check). */
    int gone_seen;
    phase gone_ph;
    uint64_t gone_bytes;
} conn_rec;

#define AUTH_SLOTS 4096
#define AUTH_PROBE 8

typedef struct {
    unsigned char key[17]; /* key[0]: 0 empty, 4 IPv4, 6 IPv6 /64 */
    double tokens;
    double last;
} auth_slot;

static struct {
    guard_opts o;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    conn_rec *head;
    pthread_t thread;
    int running, stopping;
    unsigned long dropped;
    pthread_mutex_t auth_mu;
    auth_slot *auth;
} g = {.mu = PTHREAD_MUTEX_INITIALIZER,
       .cv = PTHREAD_COND_INITIALIZER,
       .auth_mu = PTHREAD_MUTEX_INITIALIZER};

static double mono_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static conn_rec *rec_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

static double after(double now, int s) { return s > 0 ? now + s : 0; }

/* ---- the watchdog ---- */

/* Whether the client of r has closed its side and nothing it sent is left
 * to read: then the request it is sending (headers, body) can never
 * complete. libmicrohttpd with epoll can miss that end when it comes with
 * the last bytes (it reads them, sees a short read and waits for an event
 * that has already come), and would hold the connection, and an upload's
 * temp file, until its idle timeout. Checked under g.mu, so r->fd is still
 * this connection's. */
static int client_gone(const conn_rec *r)
{
    char c;
    ssize_t n = recv(r->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 ||
           (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* 1 when r is to be shut down because its client has gone: seen gone on
 * two rounds in a row with no progress in between (same phase, no body
 * bytes), so a request that libmicrohttpd has read whole and is about to
 * answer, from a client that half-closed after sending it, is left alone.
 * Not while a reply is made or sent (PH_REPLY): that is not waiting on the
 * client. */
static int gone_check(conn_rec *r)
{
    if (r->ph == PH_REPLY || !client_gone(r)) {
        r->gone_seen = 0;
        return 0;
    }
    if (r->gone_seen && r->gone_ph == r->ph && r->gone_bytes == r->body_bytes)
        return 1;
    r->gone_seen = 1;
    r->gone_ph = r->ph;
    r->gone_bytes = r->body_bytes;
    return 0;
}

static void *watchdog(void *arg)
{
    (void)arg;
    /* Connections dropped since the last line: a slow-client flood is
     * one line a second with the sums, not one a tick. */
    static log_limit limit;
    unsigned pending[4] = {0, 0, 0, 0};
    pthread_mutex_lock(&g.mu);
    while (!g.stopping) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 250 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&g.cv, &g.mu, &ts);
        if (g.stopping)
            break;
        double now = mono_now();
        unsigned n[4] = {0, 0, 0, 0}, gone = 0;
        for (conn_rec *r = g.head; r; r = r->next) {
            if (r->dropped)
                continue;
            int overdue = r->deadline > 0 && now >= r->deadline;
            if (!overdue && !gone_check(r))
                continue;
            /* The record leaves the list (under g.mu) before
             * libmicrohttpd closes the socket, so fd is still this
             * connection's. libmicrohttpd sees the end of the stream and
             * closes the connection itself: the request is completed as
             * aborted and its temp files are removed (http_on_completed). */
            shutdown(r->fd, SHUT_RDWR);
            r->dropped = 1;
            if (overdue)
                n[r->ph]++;
            else
                gone++;
        }
        unsigned total = n[0] + n[1] + n[2] + n[3];
        g.dropped += total + gone;
        for (int k = 0; k < 4; k++)
            pending[k] += n[k];
        log_repeat rep;
        if (pending[0] + pending[1] + pending[2] + pending[3] &&
            log_limit_take(&limit, NULL, &rep)) {
            pthread_mutex_unlock(&g.mu);
            log_event("warn", "http_deadline",
                      json_pack("{s:s, s:i, s:i, s:i}", "msg",
                                "dropped connections past their read "
                                "deadline",
                                "headers", (int)pending[PH_HEADERS], "body",
                                (int)pending[PH_BODY], "idle",
                                (int)pending[PH_IDLE]));
            memset(pending, 0, sizeof pending);
            pthread_mutex_lock(&g.mu);
        }
    }
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

ty_status guard_start(const guard_opts *opts, ty_err *err)
{
    g.o = *opts;
    g.dropped = 0;
    pthread_mutex_lock(&g.auth_mu);
    free(g.auth);
    g.auth = NULL;
    if (opts->auth_fail_rate > 0) {
        g.auth = calloc(AUTH_SLOTS, sizeof *g.auth);
        if (!g.auth) {
            pthread_mutex_unlock(&g.auth_mu);
            return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
        }
    }
    pthread_mutex_unlock(&g.auth_mu);
    g.stopping = 0;
    /* Started even with no deadline: it also drops the connections whose
     * client has gone (gone_check). */
    int rc = pthread_create(&g.thread, NULL, watchdog, NULL);
    if (rc != 0)
        return ty_fail(err, TY_EIO, NULL,
                       "cannot start the connection watchdog: %s",
                       strerror(rc));
    g.running = 1;
    return TY_OK;
}

void guard_stop(void)
{
    if (g.running) {
        pthread_mutex_lock(&g.mu);
        g.stopping = 1;
        pthread_cond_signal(&g.cv);
        pthread_mutex_unlock(&g.mu);
        pthread_join(g.thread, NULL);
        g.running = 0;
    }
    pthread_mutex_lock(&g.auth_mu);
    free(g.auth);
    g.auth = NULL;
    pthread_mutex_unlock(&g.auth_mu);
}

unsigned long guard_dropped(void)
{
    pthread_mutex_lock(&g.mu);
    unsigned long n = g.dropped;
    pthread_mutex_unlock(&g.mu);
    return n;
}

/* ---- connections and their phases ---- */

void guard_on_connection(void *cls, struct MHD_Connection *c,
                         void **socket_context,
                         enum MHD_ConnectionNotificationCode code)
{
    (void)cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        conn_rec *r = calloc(1, sizeof *r);
        if (!r || !ci) {
            free(r);
            return;
        }
        r->fd = ci->connect_fd;
        r->ph = PH_HEADERS;
        r->deadline = after(mono_now(), g.o.header_timeout_s);
        pthread_mutex_lock(&g.mu);
        r->next = g.head;
        if (g.head)
            g.head->prev = r;
        g.head = r;
        pthread_mutex_unlock(&g.mu);
        *socket_context = r;
        return;
    }
    conn_rec *r = *socket_context;
    if (!r)
        return;
    pthread_mutex_lock(&g.mu);
    if (r->prev)
        r->prev->next = r->next;
    else
        g.head = r->next;
    if (r->next)
        r->next->prev = r->prev;
    pthread_mutex_unlock(&g.mu);
    free(r);
    *socket_context = NULL;
}

void *guard_on_uri(void *cls, const char *uri, struct MHD_Connection *c)
{
    (void)cls;
    conn_rec *r = rec_of(c);
    if (!r)
        return NULL;
    /* The path as sent, before libmicrohttpd decodes it. */
    size_t plen = strcspn(uri, "?");
    int nul = 0;
    for (size_t i = 0; i + 2 < plen; i++)
        if (uri[i] == '%' && uri[i + 1] == '0' && uri[i + 2] == '0') {
            nul = 1;
            break;
        }
    pthread_mutex_lock(&g.mu);
    r->nul_path = nul;
    if (r->ph == PH_IDLE) {
        r->ph = PH_HEADERS;
        r->deadline = after(mono_now(), g.o.header_timeout_s);
    }
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

int guard_path_has_nul(struct MHD_Connection *c)
{
    conn_rec *r = rec_of(c);
    if (!r)
        return 0;
    pthread_mutex_lock(&g.mu);
    int nul = r->nul_path;
    pthread_mutex_unlock(&g.mu);
    return nul;
}

static void body_deadline(conn_rec *r)
{
    double d = 0;
    if (g.o.body_timeout_s > 0) {
        d = r->body_start + g.o.body_timeout_s;
        if (g.o.body_min_rate > 0)
            d += (double)r->body_bytes / g.o.body_min_rate;
    }
    if (g.o.request_timeout_s > 0) {
        double cap = r->body_start + g.o.request_timeout_s;
        if (d <= 0 || cap < d)
            d = cap;
    }
    r->deadline = d;
}

void guard_headers_done(struct MHD_Connection *c)
{
    conn_rec *r = rec_of(c);
    if (!r)
        return;
    pthread_mutex_lock(&g.mu);
    r->ph = PH_BODY;
    r->body_start = mono_now();
    r->body_bytes = 0;
    body_deadline(r);
    pthread_mutex_unlock(&g.mu);
}

void guard_body_bytes(struct MHD_Connection *c, size_t n)
{
    conn_rec *r = rec_of(c);
    if (!r)
        return;
    pthread_mutex_lock(&g.mu);
    if (r->ph == PH_BODY) {
        r->body_bytes += n;
        body_deadline(r);
    }
    pthread_mutex_unlock(&g.mu);
}

void guard_body_done(struct MHD_Connection *c)
{
    conn_rec *r = rec_of(c);
    if (!r)
        return;
    pthread_mutex_lock(&g.mu);
    r->ph = PH_REPLY;
    r->deadline = 0;
    pthread_mutex_unlock(&g.mu);
}

void guard_request_done(struct MHD_Connection *c)
{
    conn_rec *r = rec_of(c);
    if (!r)
        return;
    pthread_mutex_lock(&g.mu);
    r->ph = PH_IDLE;
    r->nul_path = 0;
    r->deadline = after(mono_now(), g.o.idle_timeout_s);
    pthread_mutex_unlock(&g.mu);
}

/* ---- failed authentications ---- */

/* The bucket key of the client's address; 0 when it has none. */
static int addr_key(struct MHD_Connection *c, unsigned char key[17])
{
    memset(key, 0, 17);
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (!ci || !ci->client_addr)
        return 0;
    const struct sockaddr *sa = ci->client_addr;
    if (sa->sa_family == AF_INET) {
        key[0] = 4;
        memcpy(key + 1, &((const struct sockaddr_in *)sa)->sin_addr, 4);
        return 1;
    }
    if (sa->sa_family == AF_INET6) {
        const unsigned char *a =
            ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
        static const unsigned char mapped[12] = {0, 0, 0, 0, 0,    0,
                                                 0, 0, 0, 0, 0xff, 0xff};
        if (!memcmp(a, mapped, 12)) {
            key[0] = 4;
            memcpy(key + 1, a + 12, 4);
        } else {
            key[0] = 6;
            memcpy(key + 1, a, 8); /* one /64 is one client */
        }
        return 1;
    }
    return 0;
}

static uint32_t key_hash(const unsigned char key[17])
{
    return ty_hash(key, 17, TY_HASH_INIT);
}

static double refill(auth_slot *s, double now)
{
    double t = s->tokens + (now - s->last) * g.o.auth_fail_rate;
    return t > g.o.auth_fail_burst ? g.o.auth_fail_burst : t;
}

/* The slot for key (under auth_mu), made when create; NULL if none. */
static auth_slot *auth_find(const unsigned char key[17], int create, double now)
{
    uint32_t h = key_hash(key);
    auth_slot *victim = NULL;
    double best = -1;
    for (int i = 0; i < AUTH_PROBE; i++) {
        auth_slot *s = &g.auth[(h + (uint32_t)i) % AUTH_SLOTS];
        if (s->key[0] && !memcmp(s->key, key, 17))
            return s;
        double fill = s->key[0] ? refill(s, now) : 1e300;
        if (fill > best) {
            best = fill;
            victim = s;
        }
    }
    if (!create)
        return NULL;
    memcpy(victim->key, key, 17);
    victim->tokens = g.o.auth_fail_burst;
    victim->last = now;
    return victim;
}

int guard_auth_blocked(struct MHD_Connection *c, unsigned *retry_after_s)
{
    unsigned char key[17];
    if (g.o.auth_fail_rate <= 0 || !addr_key(c, key))
        return 0;
    int blocked = 0;
    pthread_mutex_lock(&g.auth_mu);
    if (g.auth) {
        double now = mono_now();
        auth_slot *s = auth_find(key, 0, now);
        if (s) {
            double t = refill(s, now);
            if (t < 1.0) {
                blocked = 1;
                double wait = (1.0 - t) / g.o.auth_fail_rate;
                unsigned w = (unsigned)wait;
                *retry_after_s = w < wait || w == 0 ? w + 1 : w;
            }
        }
    }
    pthread_mutex_unlock(&g.auth_mu);
    return blocked;
}

void guard_auth_failed(struct MHD_Connection *c)
{
    unsigned char key[17];
    if (g.o.auth_fail_rate <= 0 || !addr_key(c, key))
        return;
    pthread_mutex_lock(&g.auth_mu);
    if (g.auth) {
        double now = mono_now();
        auth_slot *s = auth_find(key, 1, now);
        s->tokens = refill(s, now) - 1.0;
        s->last = now;
    }
    pthread_mutex_unlock(&g.auth_mu);
}
