/*
 * fetch.h - downloading a dataset file from a URL with libcurl.
 *
 * Only http and https (redirects too, at most 5); the size and time limits
 * apply to the whole transfer. Failures are TY_EFETCH with a sentence naming
 * the URL and what went wrong (DNS, refused, HTTP status, too large, timeout).
 */
#ifndef TY_FETCH_H
#define TY_FETCH_H

#include <stdint.h>

#include "common/ty.h"

/* Call once at process start, before threads. */
void fetch_global_init(void);

/* Makes every fetch in progress, and any started later, fail at once (for
 * shutdown). */
void fetch_abort_all(void);

/* Downloads url into path (created or truncated). allow_hosts is a
 * comma-separated list of host names the URL may name, or "*" for any; with a
 * list, redirects are not followed. field names the request field that held
 * the URL, for err->field. */
ty_status fetch_url_to_file(const char *url, const char *path,
                            uint64_t max_bytes, int timeout_s,
                            const char *allow_hosts, const char *field,
                            ty_err *err);

/* 1 if url's host is in allow_hosts ("*" allows any). */
int fetch_host_allowed(const char *url, const char *allow_hosts);

#endif
