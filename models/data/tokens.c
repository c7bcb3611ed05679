/*
 * tokens.c - the language-modeling converters: text (UTF-8, tokenized with
 * the byte tokenizer, a BPE learned from it or a tokenizer.json; see
 * tokenizer.h) and tokens (ids made elsewhere: NPY or llm.c's .bin) into a
 * token dataset (dataset.h, "Token datasets").
 *
 * Both stream: the byte tokenizer's text in two passes (check and count,
 * then write), a BPE's in three (check, and learn the BPE when asked; count
 * the tokens; write them), each reading the text in pieces cut where the
 * tokenizer says the encoding does not change (ty_tokenizer_cut); tokens in
 * one pass (the header gives the count, each id is checked as it is
 * written). On any failure the output is removed, so nothing half-made is
 * ever stored.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/data/dataset.h"
#include "models/data/file.h"
#include "models/data/input.h"
#include "models/data/npy.h"
#include "models/data/tokenizer.h"
#include "models/data/tokens.h"

/* ---- UTF-8 ----------------------------------------------------------------- */

void ds_utf8_check_init(ds_utf8_check *c) { memset(c, 0, sizeof *c); }

int ds_utf8_check_feed(ds_utf8_check *c, const unsigned char *p, size_t n,
                       uint64_t *bad)
{
    for (size_t i = 0; i < n; i++, c->offset++) {
        unsigned char b = p[i];
        if (c->need) {
            if (b < c->lo || b > c->hi) {
                *bad = c->seq_start;
                return 0;
            }
            c->lo = 0x80;
            c->hi = 0xBF;
            c->need--;
            continue;
        }
        c->seq_start = c->offset;
        c->lo = 0x80;
        c->hi = 0xBF;
        if (b < 0x80)
            continue;
        if (b >= 0xC2 && b <= 0xDF)
            c->need = 1;
        else if (b >= 0xE0 && b <= 0xEF) {
            c->need = 2;
            if (b == 0xE0)
                c->lo = 0xA0; /* no overlong forms */
            if (b == 0xED)
                c->hi = 0x9F; /* no surrogates */
        } else if (b >= 0xF0 && b <= 0xF4) {
            c->need = 3;
            if (b == 0xF0)
                c->lo = 0x90;
            if (b == 0xF4)
                c->hi = 0x8F; /* nothing past U+10FFFF */
        } else {
            *bad = c->offset;
            return 0;
        }
    }
    return 1;
}

int ds_utf8_check_end(const ds_utf8_check *c, uint64_t *bad)
{
    if (c->need) {
        *bad = c->seq_start;
        return 0;
    }
    return 1;
}

/* ---- the output ------------------------------------------------------------ */

/* The meta of a token dataset (dataset.h), NULL when out of memory. */
static json_t *tokens_meta(const char *format, uint64_t num_tokens,
                           uint32_t vocab_size, const json_t *tokenizer)
{
    json_t *meta =
        json_pack("{s:i, s:s, s:s, s:I, s:I, s:s, s:O}", "version",
                  (int)DS_VERSION, "format", format, "task",
                  ty_task_name(TY_TASK_LANGUAGE_MODELING), "num_tokens",
                  (json_int_t)num_tokens, "vocab_size", (json_int_t)vocab_size,
                  "token_dtype", vocab_size <= 65536 ? "uint16" : "uint32",
                  "tokenizer", tokenizer ? (json_t *)tokenizer : json_null());
    return meta;
}

/* ---- text ------------------------------------------------------------------ */

ty_status ds_convert_text(const char *path, unsigned flags,
                          const char *out_path, ty_err *err)
{
    (void)flags; /* messages name offsets, never the file's bytes */
    ds_input in;
    ds_writer w = DS_WRITER_INIT;
    ds_utf8_check check;
    unsigned char *buf = malloc(DS_CHUNK);
    uint16_t *ids = malloc(DS_CHUNK * sizeof *ids);
    json_t *meta = NULL;
    uint64_t bad = 0;
    size_t got;
    ty_status st;

    memset(&in, 0, sizeof in);
    in.fd = -1;
    if (!buf || !ids) {
        st = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
        goto fail;
    }
    if ((st = ds_input_open(&in, path, 0, "file", "the text file", err)))
        goto fail;
    ds_utf8_check_init(&check);
    for (;;) {
        if ((st = ds_input_read(&in, buf, DS_CHUNK, &got, err)))
            goto fail;
        if (!got)
            break;
        if (!ds_utf8_check_feed(&check, buf, got, &bad)) {
            st = ty_fail(err, TY_EFORMAT, "file",
                         "the text file is not valid UTF-8: the byte sequence "
                         "at byte offset %llu is not a UTF-8 character",
                         (unsigned long long)bad);
            goto fail;
        }
    }
    if (!ds_utf8_check_end(&check, &bad)) {
        st = ty_fail(err, TY_EFORMAT, "file",
                     "the text file is not valid UTF-8: it ends inside the "
                     "character that starts at byte offset %llu",
                     (unsigned long long)bad);
        goto fail;
    }
    if (!check.offset) {
        st = ty_fail(err, TY_EFORMAT, "file",
                     "the text file is empty: there is nothing to train on");
        goto fail;
    }
    uint64_t n = check.offset;
    json_t *byte = json_string("byte");
    meta = byte ? tokens_meta("text", n, TY_DS_BYTE_VOCAB, byte) : NULL;
    json_decref(byte);
    if (!meta) {
        st = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
        goto fail;
    }
    if ((st = ds_writer_create(&w, out_path, meta, n * sizeof *ids, 0, err)) ||
        (st = ds_input_seek(&in, 0, err)))
        goto fail;
    for (uint64_t done = 0; done < n; done += got) {
        if ((st = ds_input_read(&in, buf, DS_CHUNK, &got, err)))
            goto fail;
        if (!got || got > n - done) {
            st = ty_fail(err, TY_EIO, "file",
                         "the text file changed while it was read");
            goto fail;
        }
        for (size_t i = 0; i < got; i++)
            ids[i] = buf[i];
        if ((st = ds_writer_write(&w, ids, got * sizeof *ids, err)))
            goto fail;
    }
    if ((st = ds_writer_begin_y(&w, err)) || (st = ds_writer_finish(&w, err)))
        goto fail;
    goto done;
fail:
    ds_writer_discard(&w, out_path);
done:
    ds_input_close(&in);
    json_decref(meta);
    free(buf);
    free(ids);
    return st;
}

/* ---- text with a BPE ------------------------------------------------------ */

/* A pass over the text in pieces cut where tok (NULL: any BPE without added
 * tokens, as when learning) allows: each piece goes to fn. */
#define PIECE_BYTES (1u << 20)

typedef ty_status (*piece_fn)(void *ctx, const char *p, size_t n, int first,
                              ty_err *err);

static ty_status text_pieces(ds_input *in, const ty_tokenizer *tok,
                             ds_utf8_check *check, piece_fn fn, void *ctx,
                             ty_err *err)
{
    size_t cap = 2 * PIECE_BYTES, used = 0, got;
    char *buf = malloc(cap);
    int first = 1, eof = 0;
    uint64_t bad = 0;
    ty_status st = TY_OK;
    if (!buf)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    while (!eof) {
        if (cap - used < DS_CHUNK) {
            char *b = realloc(buf, cap * 2);
            if (!b) {
                st = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
                break;
            }
            buf = b;
            cap *= 2;
        }
        if ((st = ds_input_read(in, buf + used, DS_CHUNK, &got, err)))
            break;
        if (check && got &&
            !ds_utf8_check_feed(check, (unsigned char *)buf + used, got,
                                &bad)) {
            st = ty_fail(err, TY_EFORMAT, "file",
                         "the text file is not valid UTF-8: the byte sequence "
                         "at byte offset %llu is not a UTF-8 character",
                         (unsigned long long)bad);
            break;
        }
        used += got;
        eof = !got;
        if (!eof && used < PIECE_BYTES)
            continue;
        if (eof && check && !ds_utf8_check_end(check, &bad)) {
            st = ty_fail(err, TY_EFORMAT, "file",
                         "the text file is not valid UTF-8: it ends inside "
                         "the character that starts at byte offset %llu",
                         (unsigned long long)bad);
            break;
        }
        if (!fn) { /* the check alone */
            used = 0;
            continue;
        }
        size_t cut = eof ? used : ty_tokenizer_cut(tok, buf, used);
        if (!cut || (eof && !used))
            continue; /* no cut yet: read on */
        if ((st = fn(ctx, buf, cut, first, err)))
            break;
        first = 0;
        memmove(buf, buf + cut, used - cut);
        used -= cut;
    }
    free(buf);
    return st;
}

static ty_status learn_piece(void *ctx, const char *p, size_t n, int first,
                             ty_err *err)
{
    (void)first;
    return ty_bpe_learner_feed(ctx, p, n, err);
}

typedef struct {
    ty_tokenizer *tok;
    uint32_t *ids;
    size_t cap;
    uint64_t count; /* tokens so far */
    ds_writer *w;   /* NULL while counting */
    uint32_t size;  /* bytes per stored id */
} encode_ctx;

static ty_status encode_piece(void *ctx, const char *p, size_t n, int first,
                              ty_err *err)
{
    encode_ctx *e = ctx;
    size_t got = 0;
    ty_status st =
        first ? ty_tokenizer_encode(e->tok, p, n, &e->ids, &got, err)
              : ty_tokenizer_encode_more(e->tok, p, n, &e->ids, &got, err);
    if (st != TY_OK) {
        if (st == TY_EINVAL) { /* not UTF-8 (the file changed) */
            char msg[sizeof err->msg];
            memcpy(msg, err->msg, sizeof msg);
            st = ty_fail(err, TY_EFORMAT, "file", "%s", msg);
        }
        return st;
    }
    e->count += got;
    if (!e->w) {
        free(e->ids);
        e->ids = NULL;
        return TY_OK;
    }
    if (e->size == 2) { /* narrow in place */
        uint16_t *narrow = (uint16_t *)e->ids;
        for (size_t i = 0; i < got; i++)
            narrow[i] = (uint16_t)e->ids[i];
    }
    st = ds_writer_write(e->w, e->ids, got * e->size, err);
    free(e->ids); /* the next piece starts a fresh array */
    e->ids = NULL;
    return st;
}

ty_status ds_convert_text_tok(const char *path, const ty_tokenizer_request *req,
                              unsigned flags, const char *out_path, ty_err *err)
{
    ds_input in;
    ds_writer w = DS_WRITER_INIT;
    ds_utf8_check check;
    ty_bpe_learner *learner = NULL;
    ty_tokenizer *learned = NULL;
    encode_ctx e = {0};
    json_t *meta = NULL;
    ty_status st;

    if (!req || (!req->tok && !req->learn_vocab) ||
        (req->tok && ty_tokenizer_type_of(req->tok) == TY_TOKENIZER_BYTE))
        return ds_convert_text(path, flags, out_path, err);
    memset(&in, 0, sizeof in);
    in.fd = -1;
    if ((st = ds_input_open(&in, path, 0, "file", "the text file", err)))
        goto fail;
    ds_utf8_check_init(&check);
    if (req->learn_vocab &&
        (st = ty_bpe_learner_create(req->learn_vocab, &learner, err)))
        goto fail;
    /* pass 1: the check (and the words, when learning) */
    if ((st = text_pieces(&in, req->tok, &check, learner ? learn_piece : NULL,
                          learner, err)))
        goto fail;
    if (!check.offset) {
        st = ty_fail(err, TY_EFORMAT, "file",
                     "the text file is empty: there is nothing to train on");
        goto fail;
    }
    if (learner && (st = ty_bpe_learner_finish(learner, &learned, err)))
        goto fail;
    e.tok = learned ? learned : req->tok;
    /* pass 2: count the tokens */
    if ((st = ds_input_seek(&in, 0, err)) ||
        (st = text_pieces(&in, e.tok, NULL, encode_piece, &e, err)))
        goto fail;
    if (!e.count) {
        st = ty_fail(err, TY_EFORMAT, "file",
                     "the text encodes to no tokens with this tokenizer (its "
                     "vocabulary has none of the text's characters)");
        goto fail;
    }
    uint32_t vocab = ty_tokenizer_vocab_size(e.tok);
    e.size = vocab <= 65536 ? 2 : 4;
    if (!(meta = tokens_meta("text", e.count, vocab,
                             ty_tokenizer_description(e.tok)))) {
        st = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
        goto fail;
    }
    uint64_t n = e.count;
    /* pass 3: write them */
    e.count = 0;
    e.w = &w;
    free(e.ids);
    e.ids = NULL;
    if ((st = ds_writer_create(&w, out_path, meta, n * e.size, 0, err)) ||
        (st = ds_input_seek(&in, 0, err)) ||
        (st = text_pieces(&in, e.tok, NULL, encode_piece, &e, err)))
        goto fail;
    if (e.count != n) {
        st = ty_fail(err, TY_EIO, "file",
                     "the text file changed while it was read");
        goto fail;
    }
    if ((st = ds_writer_begin_y(&w, err)) || (st = ds_writer_finish(&w, err)))
        goto fail;
    goto done;
fail:
    ds_writer_discard(&w, out_path);
done:
    ds_input_close(&in);
    json_decref(meta);
    free(e.ids);
    ty_bpe_learner_free(learner);
    ty_tokenizer_free(learned);
    return st;
}

/* ---- tokens ---------------------------------------------------------------- */

static int32_t le32(const unsigned char *p)
{
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 |
                     (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

ty_status ds_bin_header_check(const unsigned char *hdr, size_t got,
                              uint64_t file_size, uint64_t *count, ty_err *err)
{
    if (got < DS_BIN_HEADER_BYTES)
        return ty_fail(err, TY_EFORMAT, "file",
                       "the .bin token file is truncated in its header: %zu "
                       "bytes, the header is %u (256 int32)",
                       got, DS_BIN_HEADER_BYTES);
    if (le32(hdr) != DS_BIN_MAGIC)
        return ty_fail(err, TY_EFORMAT, "file",
                       "the .bin token file has magic %d at byte offset 0; "
                       "llm.c token files start with %d",
                       le32(hdr), DS_BIN_MAGIC);
    if (le32(hdr + 4) != DS_BIN_VERSION)
        return ty_fail(err, TY_EFORMAT, "file",
                       "the .bin token file has version %d at byte offset 4; "
                       "version %d (uint16 tokens) is supported",
                       le32(hdr + 4), DS_BIN_VERSION);
    int32_t n = le32(hdr + 8);
    uint64_t have =
        file_size > DS_BIN_HEADER_BYTES ? file_size - DS_BIN_HEADER_BYTES : 0;
    if (n <= 0)
        return ty_fail(err, TY_EFORMAT, "file",
                       "the .bin token file declares %d tokens at byte offset "
                       "8; it must hold at least one",
                       n);
    if ((uint64_t)n * 2 != have)
        return ty_fail(
            err, TY_EFORMAT, "file",
            "the .bin token file declares %d tokens at byte offset 8 (%llu "
            "bytes of uint16 from byte offset %u) but %llu bytes follow the "
            "header%s",
            n, (unsigned long long)n * 2, DS_BIN_HEADER_BYTES,
            (unsigned long long)have,
            (uint64_t)n * 2 > have ? ": the file is truncated" : "");
    *count = (uint64_t)n;
    return TY_OK;
}

/* One id of size bytes (signed for NPY int32/int64) at p, as int64. */
static int64_t read_id(const unsigned char *p, size_t size, int is_signed)
{
    switch (size) {
        case 1: return p[0];
        case 2: return p[0] | p[1] << 8;
        case 4: return is_signed ? le32(p) : (int64_t)(uint32_t)le32(p);
        default: {
            int64_t v;
            memcpy(&v, p, 8);
            return v;
        }
    }
}

ty_status ds_convert_tokens(const char *path, uint32_t vocab_size,
                            unsigned flags, const char *out_path, ty_err *err)
{
    (void)flags;
    ds_input in;
    ds_writer w = DS_WRITER_INIT;
    unsigned char head[DS_BIN_HEADER_BYTES];
    unsigned char *buf = malloc(DS_CHUNK * 8);
    uint32_t *ids = malloc(DS_CHUNK * sizeof *ids);
    json_t *meta = NULL;
    uint64_t n = 0, data_offset;
    size_t isz, got;
    int is_signed = 0;
    ty_status st;

    memset(&in, 0, sizeof in);
    in.fd = -1;
    if (!buf || !ids) {
        st = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
        goto fail;
    }
    if (vocab_size < 1 || vocab_size > TY_DS_MAX_VOCAB) {
        st = ty_fail(err, TY_EINVAL, "vocab_size",
                     "vocab_size is required for tokens: an integer from 1 to "
                     "%u (ids run from 0 to vocab_size - 1)",
                     TY_DS_MAX_VOCAB);
        goto fail;
    }
    if ((st = ds_input_open(&in, path, 0, "file", "the token file", err)) ||
        (st = ds_input_read_full(&in, head, 6, &got, err)))
        goto fail;
    if (got == 6 && !memcmp(head, "\x93NUMPY", 6)) {
        ds_npy_info info;
        if ((st = ds_input_seek(&in, 0, err)) ||
            (st = ds_npy_probe(&in, &info, err)))
            goto fail;
        if (!info.is_int || info.ndim != 1 || !info.count) {
            st = ty_fail(err, TY_EFORMAT, "file",
                         "the token file must be a 1-D NPY array of integer "
                         "ids (uint16, int32 or int64) with at least one; it "
                         "has %u dimension%s of '%s'%s",
                         info.ndim, info.ndim == 1 ? "" : "s", info.descr,
                         info.count ? "" : " and no values");
            goto fail;
        }
        n = info.count;
        isz = info.itemsize;
        is_signed = info.is_signed;
        data_offset = info.data_offset;
    } else {
        size_t more = 0;
        if (got == 6 && (st = ds_input_read_full(&in, head + 6, sizeof head - 6,
                                                 &more, err)))
            goto fail;
        if (got < 4 || le32(head) != DS_BIN_MAGIC) {
            st = ty_fail(err, TY_EFORMAT, "file",
                         "the token file is neither an NPY array (it starts "
                         "with \\x93NUMPY) nor an llm.c .bin file (magic %d "
                         "at byte offset 0)",
                         DS_BIN_MAGIC);
            goto fail;
        }
        if ((st = ds_bin_header_check(head, got + more, (uint64_t)in.file_size,
                                      &n, err)))
            goto fail;
        isz = 2;
        data_offset = DS_BIN_HEADER_BYTES;
    }
    if (!(meta = tokens_meta("tokens", n, vocab_size, NULL))) {
        st = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
        goto fail;
    }
    size_t out_size = vocab_size <= 65536 ? 2 : 4;
    if ((st = ds_writer_create(&w, out_path, meta, n * out_size, 0, err)))
        goto fail;
    for (uint64_t done = 0; done < n;) {
        size_t want = n - done < DS_CHUNK ? (size_t)(n - done) : DS_CHUNK;
        if ((st = ds_input_read_full(&in, buf, want * isz, &got, err)))
            goto fail;
        if (got < want * isz) { /* the size was checked: it shrank */
            st = ty_fail(err, TY_EFORMAT, "file",
                         "the token file is truncated at byte offset %llu",
                         (unsigned long long)(data_offset + done * isz + got));
            goto fail;
        }
        for (size_t i = 0; i < want; i++) {
            int64_t v = read_id(buf + i * isz, isz, is_signed);
            if (v < 0 || v >= (int64_t)vocab_size) {
                st = ty_fail(
                    err, TY_EFORMAT, "file",
                    "token %llu (at byte offset %llu) is %lld, "
                    "outside 0..%u (vocab_size %u)",
                    (unsigned long long)(done + i),
                    (unsigned long long)(data_offset + (done + i) * isz),
                    (long long)v, vocab_size - 1, vocab_size);
                goto fail;
            }
            if (out_size == 2)
                ((uint16_t *)ids)[i] = (uint16_t)v;
            else
                ids[i] = (uint32_t)v;
        }
        if ((st = ds_writer_write(&w, ids, want * out_size, err)))
            goto fail;
        done += want;
    }
    if ((st = ds_writer_begin_y(&w, err)) || (st = ds_writer_finish(&w, err)))
        goto fail;
    goto done;
fail:
    ds_writer_discard(&w, out_path);
done:
    ds_input_close(&in);
    json_decref(meta);
    free(buf);
    free(ids);
    return st;
}
