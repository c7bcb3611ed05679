/*
 * fuzz_multipart - server/multipart.c: the Content-Type's boundary and the
 * body, fed in chunks. Input: "<Content-Type>\n<body>"; the first body byte
 * also picks the chunk size (1 to 64, or all at once), so boundaries and
 * headers split across feeds are covered.
 */
#include <stdint.h>
#include <string.h>

#include "server/multipart.h"
#include "tests/fuzz/fuzz_util.h"

typedef struct {
    int in_part;
    size_t bytes;
} counts;

static ty_status begin(void *ctx, const char *name, const char *filename,
                       const char *content_type, ty_err *err)
{
    counts *c = ctx;
    /* The strings must be readable C strings. */
    c->bytes += strlen(name) + (filename ? strlen(filename) : 0) +
                (content_type ? strlen(content_type) : 0);
    if (c->in_part)
        abort(); /* a part began inside another */
    c->in_part = 1;
    return TY_OK;
}

static ty_status data(void *ctx, const char *p, size_t len, ty_err *err)
{
    counts *c = ctx;
    if (!c->in_part)
        abort(); /* data outside a part */
    for (size_t i = 0; i < len; i++)
        c->bytes += (unsigned char)p[i] & 1; /* touches every byte */
    return TY_OK;
}

static ty_status end(void *ctx, ty_err *err)
{
    counts *c = ctx;
    if (!c->in_part)
        abort();
    c->in_part = 0;
    return TY_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t size)
{
    size_t ct_len, body_len;
    const uint8_t *body;
    fz_split(d, size, "\n", &ct_len, &body, &body_len);
    char *ct = fz_strndup(d, ct_len);
    char boundary[MP_MAX_BOUNDARY + 1];
    ty_err err = {0};
    if (mp_boundary_from_content_type(ct, boundary, &err) != TY_OK) {
        free(ct);
        return 0;
    }
    free(ct);
    if (strlen(boundary) > MP_MAX_BOUNDARY)
        abort();
    mp_callbacks cb = {begin, data, end};
    counts c = {0};
    mp_parser *p = mp_parser_create(boundary, &cb, &c);
    if (!p)
        return 0;
    size_t chunk = body_len ? (body[0] % 65) : 0;
    if (chunk == 0)
        chunk = body_len ? body_len : 1;
    ty_status st = TY_OK;
    for (size_t off = 0; off < body_len && st == TY_OK; off += chunk) {
        size_t n = body_len - off < chunk ? body_len - off : chunk;
        st = mp_parser_feed(p, (const char *)body + off, n, &err);
    }
    if (st == TY_OK && mp_parser_finish(p, &err) == TY_OK && c.in_part)
        abort(); /* finished with a part still open */
    mp_parser_destroy(p);
    return 0;
}
