/*
 * fuzz_tokens - models/data/tokens.c through ds_convert_text and
 * ds_convert_tokens. The first byte picks the converter: even, text (the
 * rest of the input is the file); odd, tokens (the next three bytes give
 * vocab_size, little-endian, 0 meaning "missing", the rest is the NPY or
 * .bin file). A success must leave a token dataset that opens, with the
 * text's bytes as its tokens; the UTF-8 check must give the same verdict
 * fed whole and fed a byte at a time.
 */
#include <stdint.h>

#include "models/data/dataset.h"
#include "models/data/tokens.h"
#include "tests/fuzz/fuzz_util.h"

static void check_utf8_cuts(const uint8_t *p, size_t n)
{
    ds_utf8_check whole, bytewise;
    uint64_t bad_w = 0, bad_b = 0;
    ds_utf8_check_init(&whole);
    ds_utf8_check_init(&bytewise);
    int ok_w = ds_utf8_check_feed(&whole, p, n, &bad_w) &&
               ds_utf8_check_end(&whole, &bad_w);
    int ok_b = 1;
    for (size_t i = 0; i < n && ok_b; i++)
        ok_b = ds_utf8_check_feed(&bytewise, p + i, 1, &bad_b);
    ok_b = ok_b && ds_utf8_check_end(&bytewise, &bad_b);
    if (ok_w != ok_b || (!ok_w && (bad_w != bad_b || bad_w >= n)))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t size)
{
    if (!size)
        return 0;
    char in[256], out[256];
    snprintf(out, sizeof out, "%s/out.ds", fz_dir());
    ty_err err = {0};
    ty_status st;
    int text = d[0] % 2 == 0;
    const uint8_t *body = d + 1;
    size_t n = size - 1;
    uint32_t vocab = 0;
    if (text) {
        check_utf8_cuts(body, n);
        fz_write("in.txt", body, n, in);
        st = ds_convert_text(in, 0, out, &err);
    } else {
        if (n < 3)
            return 0;
        vocab = (uint32_t)body[0] | (uint32_t)body[1] << 8 |
                (uint32_t)body[2] << 16;
        body += 3;
        n -= 3;
        fz_write("in.tok", body, n, in);
        st = ds_convert_tokens(in, vocab, 0, out, &err);
    }
    if (st == TY_OK) {
        ty_tokens t;
        if (ty_tokens_open(out, &t, &err) != TY_OK)
            abort();
        if (text && (t.num_tokens != n || !t.byte_tokenizer))
            abort();
        for (uint64_t i = 0; text && i < n; i++)
            if (ty_tokens_at(&t, i) != body[i])
                abort();
        if (!text && t.vocab_size != vocab)
            abort();
        ty_tokens_close(&t);
    } else if (!err.msg[0] || access(out, F_OK) == 0) {
        abort(); /* a failure says why and leaves nothing */
    }
    unlink(out);
    return 0;
}
