/*
 * fuzz_tensor - a KServe v2 infer body as the server reads it: the split
 * of a binary body at its Inference-Header-Content-Length
 * (serve_tensor_split), the JSON header (serve_infer_scan), inputs[0].data
 * as JSON of a datatype (serve_tensor_from_json) and the binary part as
 * raw data of it (serve_tensor_from_binary), the classification strings
 * of what was decoded, and the body as a gzip or deflate stream inflated
 * within a small limit (server/inflate.h).
 *
 * Input: byte 0 the datatype (and the compression), byte 1 the element
 * count (1 to 256), byte 2 where the JSON header ends (a fraction of the
 * rest), then the body.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/tensor.h"
#include "server/inflate.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t size);

static int sink(void *ctx, const char *data, size_t n)
{
    size_t *total = ctx;
    volatile char c = n ? data[n - 1] : 0; /* ASan checks the bytes exist */
    (void)c;
    *total += n;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t size)
{
    if (size < 3)
        return 0;
    serve_dtype dt = (serve_dtype)(d[0] % SERVE_DT_COUNT);
    uint64_t n = (uint64_t)d[1] + 1;
    const char *body = (const char *)d + 3;
    size_t len = size - 3;
    char hdr[32];
    snprintf(hdr, sizeof hdr, "%zu", (size_t)((uint64_t)len * d[2] / 255));

    ty_err err = {0};
    size_t json_len = 0;
    if (serve_tensor_split(len, d[2] == 255 ? NULL : hdr, &json_len, &err) !=
        TY_OK) {
        if (!err.msg[0])
            abort(); /* every failure says why */
        return 0;
    }
    float *x = malloc(n * sizeof *x); /* exactly n: ASan sees a write past */
    if (!x)
        abort();
    serve_infer_body b = {0};
    if (json_len && serve_infer_scan(body, json_len, &b, &err) == TY_OK) {
        ty_err e2 = {0};
        ty_status s = serve_tensor_from_json(dt, b.data, n, "input", x, &e2);
        if (s != TY_OK && !e2.msg[0])
            abort();
        if (s == TY_OK) {
            char text[64];
            uint32_t k = n < 8 ? (uint32_t)n : 8, idx[8], scratch[8];
            serve_tensor_top(x, k, idx, scratch);
            for (uint32_t i = 0; i < k; i++)
                if (idx[i] >= k)
                    abort();
            serve_tensor_class_text(x[0], idx[0], NULL, text, sizeof text);
        }
    }
    serve_infer_body_free(&b);
    size_t esize = serve_dtype_size(dt);
    if (esize) {
        size_t raw = len - json_len, m = raw / esize;
        if (m > n)
            m = n;
        ty_err e3 = {0};
        ty_status s = serve_tensor_from_binary(dt, body + json_len, raw, m,
                                               "input", x, &e3);
        if (s != TY_OK && !e3.msg[0])
            abort();
        if (s == TY_OK && raw != m * esize)
            abort(); /* a size that does not match is refused */
    }
    free(x);

    inflater *z =
        inflate_create(d[0] & 0x80 ? INFLATE_DEFLATE : INFLATE_GZIP, 4096);
    if (!z)
        abort();
    size_t total = 0, half = len / 2;
    ty_err e4 = {0};
    if (inflate_feed(z, body, half, sink, &total, &e4) == TY_OK &&
        inflate_feed(z, body + half, len - half, sink, &total, &e4) == TY_OK)
        inflate_finish(z, &e4);
    if (total > 4096 || total != inflate_total(z))
        abort(); /* never past the limit */
    inflate_destroy(z);
    return 0;
}
