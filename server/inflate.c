/*
 * inflate.c - Content-Encoding of request bodies (see inflate.h).
 *
 * Output goes through a fixed buffer whose room is cut to what the limit
 * leaves plus one byte, so zlib never produces more than one byte past the
 * limit, however much the input would inflate to.
 */
#include "server/inflate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

#define OUT_CHUNK (64 * 1024)

struct inflater {
    z_stream zs;
    inflate_kind kind;
    uint64_t limit, total;
    int ended;        /* the current stream (member) is complete */
    ty_status failed; /* sticky */
    char failed_msg[256];
    unsigned char out[OUT_CHUNK];
};

inflate_kind inflate_kind_parse(const char *ce)
{
    if (!ce)
        return INFLATE_IDENTITY;
    while (*ce == ' ' || *ce == '\t')
        ce++;
    size_t n = strlen(ce);
    while (n && (ce[n - 1] == ' ' || ce[n - 1] == '\t'))
        n--;
    if (n == 0 || (n == 8 && !strncasecmp(ce, "identity", 8)))
        return INFLATE_IDENTITY;
    if ((n == 4 && !strncasecmp(ce, "gzip", 4)) ||
        (n == 6 && !strncasecmp(ce, "x-gzip", 6)))
        return INFLATE_GZIP;
    if (n == 7 && !strncasecmp(ce, "deflate", 7))
        return INFLATE_DEFLATE;
    return INFLATE_UNKNOWN;
}

inflater *inflate_create(inflate_kind kind, uint64_t limit)
{
    if (kind != INFLATE_GZIP && kind != INFLATE_DEFLATE)
        return NULL;
    inflater *z = calloc(1, sizeof *z);
    if (!z)
        return NULL;
    z->kind = kind;
    z->limit = limit;
    int bits = kind == INFLATE_GZIP ? 16 + MAX_WBITS : MAX_WBITS;
    if (inflateInit2(&z->zs, bits) != Z_OK) {
        free(z);
        return NULL;
    }
    return z;
}

void inflate_destroy(inflater *z)
{
    if (!z)
        return;
    inflateEnd(&z->zs);
    free(z);
}

uint64_t inflate_total(const inflater *z) { return z->total; }

static const char *kind_name(const inflater *z)
{
    return z->kind == INFLATE_GZIP ? "gzip" : "deflate (zlib)";
}

/* Records a failure (every later call returns it again). */
static ty_status fail(inflater *z, ty_status s, ty_err *err)
{
    z->failed = s;
    return ty_fail(err, s, NULL, "%s", z->failed_msg);
}

ty_status inflate_feed(inflater *z, const void *in, size_t n, inflate_sink sink,
                       void *ctx, ty_err *err)
{
    if (z->failed)
        return ty_fail(err, z->failed, NULL, "%s", z->failed_msg);
    const unsigned char *p = in;
    for (;;) {
        if (z->ended) {
            if (n == 0)
                return TY_OK;
            /* Another gzip member may follow; a zlib stream is one. */
            if (z->kind != INFLATE_GZIP || inflateReset(&z->zs) != Z_OK) {
                snprintf(z->failed_msg, sizeof z->failed_msg,
                         "the request body holds data after the end of its "
                         "%s stream",
                         kind_name(z));
                return fail(z, TY_EFORMAT, err);
            }
            z->ended = 0;
        }
        z->zs.next_in = (unsigned char *)p;
        z->zs.avail_in = n > UINT32_MAX ? UINT32_MAX : (uInt)n;
        uInt fed = z->zs.avail_in;
        uint64_t room = z->limit - z->total + 1; /* one past the limit */
        z->zs.next_out = z->out;
        z->zs.avail_out = room < OUT_CHUNK ? (uInt)room : OUT_CHUNK;
        uInt avail = z->zs.avail_out;
        int rc = inflate(&z->zs, Z_NO_FLUSH);
        size_t got = avail - z->zs.avail_out;
        size_t used = fed - z->zs.avail_in;
        p += used;
        n -= used;
        if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR) {
            snprintf(z->failed_msg, sizeof z->failed_msg,
                     "the request body is not valid %s (its "
                     "Content-Encoding): %s",
                     kind_name(z), z->zs.msg ? z->zs.msg : "corrupt data");
            return fail(z, TY_EFORMAT, err);
        }
        z->total += got;
        if (z->total > z->limit) {
            snprintf(z->failed_msg, sizeof z->failed_msg,
                     "the request body inflates (Content-Encoding %s) to "
                     "more than the limit for this endpoint (%llu bytes)",
                     kind_name(z), (unsigned long long)z->limit);
            return fail(z, TY_ETOOBIG, err);
        }
        if (got && !sink(ctx, (const char *)z->out, got)) {
            snprintf(z->failed_msg, sizeof z->failed_msg, "out of memory");
            return fail(z, TY_ENOMEM, err);
        }
        if (rc == Z_STREAM_END) {
            z->ended = 1;
            continue;
        }
        /* Done with this input once zlib has all of it and no output is
         * left waiting (the buffer was not filled). */
        if ((n == 0 && z->zs.avail_out != 0) || (used == 0 && got == 0))
            return TY_OK;
    }
}

ty_status inflate_finish(inflater *z, ty_err *err)
{
    if (z->failed)
        return ty_fail(err, z->failed, NULL, "%s", z->failed_msg);
    if (!z->ended) {
        snprintf(z->failed_msg, sizeof z->failed_msg,
                 "the request body is not valid %s (its Content-Encoding): "
                 "the stream ends early",
                 kind_name(z));
        return fail(z, TY_EFORMAT, err);
    }
    return TY_OK;
}
