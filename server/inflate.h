/*
 * inflate.h - request bodies sent with Content-Encoding gzip or deflate,
 * inflated as they arrive, never past a limit: a small body that inflates
 * to gigabytes (a "zip bomb") is refused after at most limit + 1 inflated
 * bytes, whatever it declares.
 *
 * "deflate" is the zlib format (RFC 1950), as HTTP defines it and as
 * clients (tritonclient's request_compression_algorithm) send it; "gzip"
 * may hold several members one after the other (RFC 1952).
 */
#ifndef TY_SERVER_INFLATE_H
#define TY_SERVER_INFLATE_H

#include <stddef.h>
#include <stdint.h>

#include "common/ty.h"

typedef enum {
    INFLATE_IDENTITY = 0, /* no Content-Encoding, or "identity" */
    INFLATE_GZIP,
    INFLATE_DEFLATE,
    INFLATE_UNKNOWN /* anything else: the caller answers 415 */
} inflate_kind;

/* The kind a Content-Encoding header names (NULL: identity); names are
 * case-insensitive, "x-gzip" is gzip. */
inflate_kind inflate_kind_parse(const char *content_encoding);

typedef struct inflater inflater;

/* Takes inflated bytes; returns 0 when it cannot (out of memory). */
typedef int (*inflate_sink)(void *ctx, const char *data, size_t n);

/* A decoder of kind (GZIP or DEFLATE) whose output may total at most limit
 * bytes; NULL when out of memory. */
inflater *inflate_create(inflate_kind kind, uint64_t limit);
void inflate_destroy(inflater *z);

/* Inflates in[0..n) into sink. TY_ETOOBIG (nothing more is inflated) once
 * the output passes the limit; TY_EFORMAT for a corrupt stream or data
 * after its end; TY_ENOMEM when the sink fails. After an error every call
 * returns it again. */
ty_status inflate_feed(inflater *z, const void *in, size_t n, inflate_sink sink,
                       void *ctx, ty_err *err);

/* The body has ended: TY_EFORMAT when the stream is incomplete. */
ty_status inflate_finish(inflater *z, ty_err *err);

/* Bytes inflated so far. */
uint64_t inflate_total(const inflater *z);

#endif
