/*
 * fuzz_tokenizer - models/data/tokenizer*.c: a tokenizer read from text (as
 * an upload's tokenizer part: "byte", a description or a tokenizer.json),
 * then a text encoded with it. The input is "<tokenizer>\0<text>" (no NUL:
 * all tokenizer, text "héllo wörld it's 12"). A tokenizer that loads must
 * encode any valid UTF-8 text to ids below its vocabulary, the same ids
 * whole and in the pieces ty_tokenizer_cut makes, and (a BPE learned or the
 * byte tokenizer, whose every id decodes) decode back to the text. A text
 * that is not UTF-8 must be refused, never encoded.
 */
#include <stdint.h>

#include "models/data/input.h"
#include "models/data/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

static void check_encode(ty_tokenizer *tok, const char *text, size_t n)
{
    ty_err err = {0};
    uint32_t *ids = NULL, *cut_ids = NULL;
    size_t nid = 0, ncut = 0, done = 0;
    ty_status st = ty_tokenizer_encode(tok, text, n, &ids, &nid, &err);
    if (!ds_utf8_valid(text, n)) {
        if (st != TY_EINVAL)
            abort();
        free(ids);
        return;
    }
    if (st != TY_OK)
        abort();
    for (size_t i = 0; i < nid; i++)
        if (ids[i] >= ty_tokenizer_vocab_size(tok))
            abort();
    while (done < n) {
        size_t c = ty_tokenizer_cut(tok, text + done, n - done);
        size_t len = c ? c : n - done;
        st = done ? ty_tokenizer_encode_more(tok, text + done, len, &cut_ids,
                                             &ncut, &err)
                  : ty_tokenizer_encode(tok, text, len, &cut_ids, &ncut, &err);
        if (st != TY_OK)
            abort();
        done += len;
    }
    if (ncut != nid || (nid && memcmp(ids, cut_ids, nid * sizeof *ids)))
        abort();
    if (ty_tokenizer_type_of(tok) != TY_TOKENIZER_HUGGINGFACE) {
        char *back = NULL;
        size_t blen = 0;
        if (ty_tokenizer_decode(tok, ids, nid, &back, &blen, &err) != TY_OK ||
            blen != n || memcmp(back, text, n))
            abort();
        free(back);
    }
    free(ids);
    free(cut_ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t size)
{
    const char *nul = memchr(d, 0, size);
    size_t tlen = nul ? (size_t)(nul - (const char *)d) : size;
    const char *text = nul ? nul + 1 : "h\xc3\xa9llo w\xc3\xb6rld it's 12";
    size_t n = nul ? size - tlen - 1 : strlen(text);
    ty_tokenizer_request req;
    ty_err err = {0};
    if (ty_tokenizer_request_parse_text((const char *)d, tlen, "tokenizer",
                                        &req, &err) != TY_OK) {
        if (!err.field[0] && !err.msg[0])
            abort(); /* a refusal says why */
        return 0;
    }
    if (req.learn_vocab) { /* learn from the text itself */
        ty_tokenizer *t = NULL;
        if (ds_utf8_valid(text, n) &&
            ty_tokenizer_learn(req.learn_vocab, text, n, &t, &err) == TY_OK) {
            check_encode(t, text, n);
            /* its description loads back to the same tokenizer */
            ty_tokenizer *again = NULL;
            if (ty_tokenizer_load(ty_tokenizer_description(t), &again, &err))
                abort();
            ty_tokenizer_free(again);
        }
        ty_tokenizer_free(t);
    } else {
        check_encode(req.tok, text, n);
        json_t *sum = ty_tokenizer_describe(req.tok);
        json_decref(sum);
    }
    ty_tokenizer_request_free(&req);
    return 0;
}
