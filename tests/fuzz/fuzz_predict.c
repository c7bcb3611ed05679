/*
 * fuzz_predict - the predict inputs as the server decodes them: the body
 * text straight into floats (serve/decode.h), for REST predict
 * (serve_predict_parse) and for KServe v2 infer (serve_infer_scan, then
 * serve_infer_decode of inputs[0].data into serve_infer_room floats). The
 * model's feature count is the first byte's (1 to 256) and the KServe
 * tensor's total the second's times it. No model is opened: run_open
 * needs a store. A body the predict decoder accepts must be JSON to
 * jansson too (the decoder only skims the inputs before reading them).
 */
#include <stdint.h>
#include <stdlib.h>

#include <jansson.h>

#include "serve/decode.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t size)
{
    if (size < 2)
        return 0;
    uint64_t f = (uint64_t)d[0] + 1;
    uint64_t total = f * ((uint64_t)d[1] + 1);
    const char *text = (const char *)d + 2;
    size_t len = size - 2;

    ty_err err = {0};
    float *x = NULL;
    uint64_t n = 0;
    ty_status s = serve_predict_parse(text, len, f, &x, &n, &err);
    if (s != TY_OK && !err.msg[0])
        abort(); /* every failure says why */
    if (s == TY_OK && (n == 0 || n > SERVE_MAX_EXAMPLES))
        abort();
    /* The inputs are skimmed, then read strictly: a body the decoder
     * accepts is JSON as jansson reads it (big integers as reals, as the
     * decoder reads every number). */
    if (s == TY_OK) {
        json_error_t je;
        json_t *doc = json_loadb(text, len,
                                 JSON_REJECT_DUPLICATES |
                                     JSON_DECODE_INT_AS_REAL,
                                 &je);
        if (!doc && json_error_code(&je) != json_error_out_of_memory)
            abort();
        json_decref(doc);
    }
    if (s == TY_OK) {
        /* Touch every float the decoder says it wrote (ASan checks the
         * allocation is that big). */
        volatile float sum = 0;
        for (uint64_t i = 0; i < n * f; i++)
            sum += x[i];
        (void)sum;
    }
    free(x);

    ty_err err2 = {0};
    serve_infer_body b = {0};
    if (serve_infer_scan(text, len, &b, &err2) == TY_OK && b.data.p) {
        uint64_t room = serve_infer_room(b.data, total);
        /* Exactly room floats, so ASan sees a write past them. */
        float *y = malloc((room ? room : 1) * sizeof *y);
        if (!y)
            abort();
        ty_err err3 = {0};
        if (serve_infer_decode(b.data, total, "inputs[0].data", y, &err3) !=
                TY_OK &&
            !err3.msg[0])
            abort();
        free(y);
    } else if (!b.doc && !err2.msg[0]) {
        abort();
    }
    serve_infer_body_free(&b);
    return 0;
}
