/*
 * fetch.h - downloading a dataset file from a URL with libcurl.
 *
 * Only http and https (redirects too, at most 5); the size and time limits
 * apply to the whole transfer. Every connection, on every redirect hop, is
 * checked against the address it is about to connect to (not the URL's
 * spelling of it): loopback, private, link-local, CGNAT, multicast,
 * unspecified, broadcast and reserved addresses, and the IPv4-mapped and
 * -compatible IPv6 forms of them, are refused unless an operator allowed
 * them (allow_networks). Proxies from the environment are not used (the
 * check needs the target's own address).
 *
 * Failures are TY_EFETCH. The message never quotes the reply, and every
 * failure that depends on the target (refused address, DNS, connection
 * refused or reset, TLS, timeout) gets the same sentence, so that a tenant
 * cannot map the server's network through it; the detail goes to the log.
 */
#ifndef TY_FETCH_H
#define TY_FETCH_H

#include <stdint.h>
#include <sys/socket.h>

#include "common/ty.h"

/* Call once at process start, before threads. */
void fetch_global_init(void);

/* Makes every fetch in progress, and any started later, fail at once (for
 * shutdown). */
void fetch_abort_all(void);

/* Downloads url into path (created or truncated). allow_hosts is a
 * comma-separated list of host names the URL may name, or "*" for any; with a
 * list, redirects are not followed. allow_networks is a list for
 * fetch_networks_check ("" or NULL: none) of addresses that may be fetched
 * from although fetch_addr_allowed would refuse them. field names the request
 * field that held the URL, for err->field. */
ty_status fetch_url_to_file(const char *url, const char *path,
                            uint64_t max_bytes, int timeout_s,
                            const char *allow_hosts, const char *allow_networks,
                            const char *field, ty_err *err);

/* The sentence of every target-dependent fetch failure (see above). */
#define FETCH_FAILED_MSG                                                      \
    "cannot fetch this URL: its host did not resolve, could not be reached, " \
    "refused the connection or did not answer in time, or its address is "    \
    "one this server does not fetch from"

/* Checks list: comma-separated IPv4 or IPv6 addresses, each with an optional
 * /prefix length ("10.0.0.0/8, 127.0.0.1, fd00::/8"); "" is the empty list.
 * On error TY_EINVAL (field flag) naming the entry. */
ty_status fetch_networks_check(const char *list, const char *flag, ty_err *err);

/* 1 if a connection to sa (AF_INET or AF_INET6, len bytes) may be made: a
 * global address, or one inside allow_networks (a checked list, or NULL). */
int fetch_addr_allowed(const struct sockaddr *sa, size_t len,
                       const char *allow_networks);

/* 1 if url's host is in allow_hosts ("*" allows any). */
int fetch_host_allowed(const char *url, const char *allow_hosts);

#endif
