/*
 * guard.h - what keeps slow and hostile clients from taking the server:
 * read deadlines per request and a throttle on failed authentications.
 *
 * Deadlines. libmicrohttpd's connection timeout is an idle timeout: it
 * restarts with every byte, so a client that trickles one header byte a
 * second holds its connection for ever. The guard records every connection
 * (MHD_OPTION_NOTIFY_CONNECTION) and the phase its request is in, and a
 * watchdog thread shuts down the socket of any connection past its
 * deadline, which libmicrohttpd then closes as a client abort:
 *   - headers: a request's headers must be complete header_timeout_s after
 *     the connection opened (or, on a kept-alive connection, after its
 *     request line arrived);
 *   - body: the body must be complete body_timeout_s after the headers,
 *     plus one second for every body_min_rate bytes received, and at most
 *     request_timeout_s after the headers;
 *   - kept alive between requests: the next request line must come within
 *     idle_timeout_s (libmicrohttpd closes a silent connection then anyway;
 *     this bounds one whose request line trickles);
 *   - while the handler runs and the reply is sent, no deadline (event
 *     streams last as long as their client).
 * The watchdog also shuts down a connection, outside its reply, whose
 * client has closed its side with nothing left unread (seen on two rounds
 * in a row): libmicrohttpd with epoll can miss an end of stream that comes
 * with the last bytes and would keep such a connection, and the temp file
 * of an upload cut short, until the idle timeout.
 *
 * Failed authentications are counted per client address (IPv4, or the /64
 * of an IPv6 address) in a token bucket: auth_fail_burst failures at once,
 * refilled at auth_fail_rate per second. An address with an empty bucket
 * gets 429 with Retry-After on authenticated routes, without its key being
 * checked. The table has a fixed size: when it is full, the entry that
 * would be fullest again is reused.
 */
#ifndef TY_GUARD_H
#define TY_GUARD_H

#include <microhttpd.h>
#include <stddef.h>

#include "common/ty.h"

typedef struct {
    int header_timeout_s;   /* 0 = no header deadline */
    int body_timeout_s;     /* the body's base deadline; 0 = none */
    unsigned body_min_rate; /* bytes that extend the body deadline 1 s */
    int request_timeout_s;  /* headers to end of body at most; 0 = none */
    int idle_timeout_s;     /* kept alive, waiting for the next request */
    double auth_fail_rate;  /* failures refilled per second; 0 = off */
    int auth_fail_burst;    /* failures allowed at once */
} guard_opts;

/* Starts the watchdog and clears the auth table; TY_ENOMEM or TY_EIO
 * when it cannot. */
ty_status guard_start(const guard_opts *opts, ty_err *err);
/* Stops the watchdog; after the daemon has stopped. */
void guard_stop(void);

/* libmicrohttpd callbacks: MHD_OPTION_NOTIFY_CONNECTION and
 * MHD_OPTION_URI_LOG_CALLBACK (returns NULL: no request context). */
void guard_on_connection(void *cls, struct MHD_Connection *c,
                         void **socket_context,
                         enum MHD_ConnectionNotificationCode code);
void *guard_on_uri(void *cls, const char *uri, struct MHD_Connection *c);

/* The request's phases, from the request callbacks. */
void guard_headers_done(struct MHD_Connection *c);
void guard_body_bytes(struct MHD_Connection *c, size_t n);
void guard_body_done(struct MHD_Connection *c);
void guard_request_done(struct MHD_Connection *c);

/* 1 when the request's path, as sent, encodes a NUL byte (%00), which the
 * decoded path passed to the handler hides. */
int guard_path_has_nul(struct MHD_Connection *c);

/* 1 when the client's address has used up its failed authentications;
 * *retry_after_s is then when the next one is allowed. */
int guard_auth_blocked(struct MHD_Connection *c, unsigned *retry_after_s);
/* Counts a failed authentication against the client's address. */
void guard_auth_failed(struct MHD_Connection *c);

/* Connections the watchdog has dropped since start, past a deadline or
 * with their client gone (for logs and tests). */
unsigned long guard_dropped(void);

#endif
