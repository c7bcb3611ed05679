/*
 * tokenizer.c - the tokenizer API (tokenizer.h): loading by description,
 * encoding (added tokens, pre-tokenizer, BPE), cutting long texts, decoding,
 * the document's summary and an upload's request.
 *
 * Encoding follows the `tokenizers` library's pipeline for a byte-level BPE
 * tokenizer.json with no normalizer: the added tokens are found first
 * (leftmost-longest, the non-normalized ones in a first pass, the normalized
 * ones in the pieces left; lstrip/rstrip take the white space beside them),
 * then every other non-empty piece gets a leading space when
 * add_prefix_space asks and it has none, is split by the GPT-2 regex
 * (tokenizer_pretok.c) and each word is BPE-encoded (bpe.c). The byte
 * tokenizer and the learned BPE are the same pipeline with no added tokens
 * and no prefix space (the byte tokenizer has no merges).
 */
#include <stdlib.h>
#include <string.h>

#include "models/data/input.h"
#include "models/data/tokenizer.h"
#include "models/data/tokenizer_int.h"

static ty_status byte_tokenizer(ty_tokenizer **out, ty_err *err)
{
    ty_tokenizer *t = tok_alloc(TY_TOKENIZER_BYTE);
    if (!t || tok_pieces_begin(t, 256, 256) != TY_OK ||
        !(t->desc = json_string("byte"))) {
        ty_tokenizer_free(t);
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    }
    for (int b = 0; b < 256; b++) {
        t->byte_id[b] = b;
        t->piece_bytes[b] = (unsigned char)b;
        t->piece_off[b + 1] = (uint64_t)b + 1;
        t->has_piece[b] = 1;
    }
    *out = t;
    return TY_OK;
}

static ty_status type_error(const char *field, ty_err *err)
{
    return ty_fail(err, TY_EINVAL, field,
                   "tokenizer must be \"byte\", {\"type\": \"byte\"}, "
                   "{\"type\": \"bpe\", \"vocab_size\": N} or a Hugging Face "
                   "tokenizer.json (byte-level BPE)");
}

ty_status ty_tokenizer_load_as(const json_t *desc, const char *field,
                               ty_tokenizer **out, ty_err *err)
{
    char f[160];
    *out = NULL;
    if (json_is_string(desc))
        return !strcmp(json_string_value(desc), "byte")
                   ? byte_tokenizer(out, err)
                   : type_error(field, err);
    if (!json_is_object(desc))
        return type_error(field, err);
    const json_t *type = json_object_get(desc, "type");
    if (!type && json_object_get(desc, "model"))
        return tok_hf_load(desc, field, out, err);
    const char *ts = json_string_value(type);
    snprintf(f, sizeof f, "%s.type", field);
    if (!ts)
        return ty_fail(err, TY_EINVAL, f,
                       "type is required: \"byte\", \"bpe\" or "
                       "\"huggingface\" (or send a tokenizer.json)");
    if (!strcmp(ts, "byte"))
        return byte_tokenizer(out, err);
    if (!strcmp(ts, "bpe"))
        return tok_bpe_load(desc, field, out, err);
    if (!strcmp(ts, "huggingface")) {
        snprintf(f, sizeof f, "%s.tokenizer_json", field);
        const json_t *tj = json_object_get(desc, "tokenizer_json");
        if (!json_is_object(tj))
            return ty_fail(err, TY_EINVAL, f,
                           "a huggingface tokenizer's description holds its "
                           "tokenizer.json as the object tokenizer_json");
        return tok_hf_load(tj, f, out, err);
    }
    return ty_fail(err, TY_EINVAL, f,
                   "type must be \"byte\", \"bpe\" or \"huggingface\"");
}

ty_status ty_tokenizer_load(const json_t *desc, ty_tokenizer **out, ty_err *err)
{
    return ty_tokenizer_load_as(desc, "tokenizer", out, err);
}

/* ---- encoding ------------------------------------------------------------ */

typedef struct {
    ty_tokenizer *t;
    tok_ids *out;
} word_ctx;

static ty_status on_word(void *ctx, const unsigned char *p, size_t n,
                         ty_err *err)
{
    word_ctx *w = ctx;
    return tok_bpe_word(w->t, p, n, w->out, err);
}

/* One piece that is not an added token: prefix space, regex, BPE. */
static ty_status encode_plain(ty_tokenizer *t, const unsigned char *s, size_t n,
                              int prefix, tok_ids *out, ty_err *err)
{
    word_ctx w = {t, out};
    unsigned char *tmp = NULL;
    ty_status st;
    if (!n)
        return TY_OK;
    if (prefix && t->add_prefix_space && s[0] != ' ') {
        if (!(tmp = malloc(n + 1)))
            return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
        tmp[0] = ' ';
        memcpy(tmp + 1, s, n);
        s = tmp;
        n++;
    }
    if (t->use_regex)
        st = tok_pretokenize(s, n, on_word, &w, err);
    else
        st = tok_bpe_word(t, s, n, out, err);
    free(tmp);
    return st;
}

/* Rust regex \s (White_Space): our SPACE class. */
static int space_at(const unsigned char *s, size_t n, size_t i, size_t *len)
{
    return tok_uc_class_of(tok_utf8_at(s, n, i, len)) == TOK_UC_SPACE;
}

/* The start of the white space that ends s[0..end). */
static size_t space_run_before(const unsigned char *s, size_t end)
{
    size_t i = end;
    while (i > 0) {
        size_t j = i - 1, len;
        while (j > 0 && (s[j] & 0xC0) == 0x80)
            j--;
        if (!space_at(s, end, j, &len))
            break;
        i = j;
    }
    return i;
}

static size_t space_run_after(const unsigned char *s, size_t n, size_t i)
{
    size_t len, j = i;
    while (j < n && space_at(s, n, j, &len))
        j += len;
    return j - i;
}

/* The longest added token of this pass (normalized or not) at s[i], or -1. */
static int64_t added_at(const ty_tokenizer *t, int pass, const unsigned char *s,
                        size_t n, size_t i)
{
    int64_t best = -1;
    if (!t->added_first[pass][s[i]])
        return -1;
    for (size_t k = 0; k < t->num_added; k++) {
        const tok_added *a = &t->added[k];
        if (a->normalized != pass || a->len > n - i ||
            (best >= 0 && a->len <= t->added[best].len))
            continue;
        if (!memcmp(s + i, a->content, a->len))
            best = (int64_t)k;
    }
    return best;
}

/* Splits s[0..n) at this pass's added tokens (as find_matches); the pieces
 * between go on to the next pass (pass 1) or are encoded. *first says
 * whether a piece starting at the text's offset 0 is the text's first. */
static ty_status encode_pass(ty_tokenizer *t, int pass, const unsigned char *s,
                             size_t n, int at_start, tok_ids *out, ty_err *err);

static ty_status encode_gap(ty_tokenizer *t, int pass, const unsigned char *s,
                            size_t n, int at_start, tok_ids *out, ty_err *err)
{
    if (pass == 0)
        return encode_pass(t, 1, s, n, at_start, out, err);
    return encode_plain(t, s, n, at_start, out, err);
}

static ty_status encode_pass(ty_tokenizer *t, int pass, const unsigned char *s,
                             size_t n, int at_start, tok_ids *out, ty_err *err)
{
    size_t start_offset = 0, i = 0;
    ty_status st;
    /* at_start: 1 a new piece (prefix space allowed), 0 the continuation
     * of a piece of an earlier chunk (only for the piece at offset 0) */
    while (t->num_added && i < n) {
        int64_t k = added_at(t, pass, s, n, i);
        if (k < 0) {
            i++;
            continue;
        }
        const tok_added *a = &t->added[k];
        size_t start = i, stop = i + a->len;
        i = stop; /* the matcher goes on after the match */
        if (a->lstrip) {
            size_t ns = space_run_before(s, start);
            start = ns > start_offset ? ns : start_offset;
        }
        if (a->rstrip)
            stop += space_run_after(s, n, stop);
        if (start_offset < start &&
            (st = encode_gap(t, pass, s + start_offset, start - start_offset,
                             start_offset ? 1 : at_start, out, err)) != TY_OK)
            return st;
        if (tok_ids_push(out, a->id) != TY_OK)
            return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
        start_offset = stop;
    }
    if (start_offset < n)
        return encode_gap(t, pass, s + start_offset, n - start_offset,
                          start_offset ? 1 : at_start, out, err);
    return TY_OK;
}

static ty_status encode(ty_tokenizer *t, const char *text, size_t len,
                        int at_start, uint32_t **ids, size_t *n, ty_err *err)
{
    if (!ds_utf8_valid(text, len)) {
        size_t bad = 0, k;
        while ((k = ds_utf8_seq((const unsigned char *)text + bad, len - bad)) >
               0)
            bad += k;
        return ty_fail(err, TY_EINVAL, "text",
                       "the text is not valid UTF-8 at byte offset %zu", bad);
    }
    tok_ids out = {*ids, *n, *ids ? *n : 0};
    ty_status st = encode_pass(t, 0, (const unsigned char *)text, len, at_start,
                               &out, err);
    *ids = out.ids; /* it may have moved, also on failure */
    if (st == TY_OK)
        *n = out.n;
    return st;
}

ty_status ty_tokenizer_encode(ty_tokenizer *t, const char *text, size_t len,
                              uint32_t **ids, size_t *n, ty_err *err)
{
    return encode(t, text, len, 1, ids, n, err);
}

ty_status ty_tokenizer_encode_more(ty_tokenizer *t, const char *text,
                                   size_t len, uint32_t **ids, size_t *n,
                                   ty_err *err)
{
    return encode(t, text, len, 0, ids, n, err);
}

static int printable_ascii(unsigned char c) { return c > 0x20 && c < 0x7F; }

size_t ty_tokenizer_cut(const ty_tokenizer *t, const char *text, size_t len)
{
    const unsigned char *s = (const unsigned char *)text;
    size_t longest = 0, num_added = t ? t->num_added : 0;
    if (t && t->type == TY_TOKENIZER_BYTE) { /* between two characters */
        size_t c = len > 1 ? len - 1 : 0;
        while (c > 0 && (s[c] & 0xC0) == 0x80)
            c--;
        return c;
    }
    if (t && !t->use_regex)
        return 0; /* one piece is one word: no cut keeps it */
    for (size_t k = 0; k < num_added; k++)
        if (t->added[k].len > longest)
            longest = t->added[k].len;
    for (size_t c = len > 2 ? len - 2 : 0; c >= 1; c--) {
        if ((s[c] != ' ' && s[c] != '\n') || !printable_ascii(s[c - 1]) ||
            !printable_ascii(s[c + 1]))
            continue;
        /* no added token may start within reach of the cut */
        size_t lo = c > longest + 1 ? c - longest - 1 : 0;
        size_t hi = c + 2 < len ? c + 2 : len;
        int clear = 1;
        for (size_t i = lo; clear && i < hi && num_added; i++)
            for (size_t k = 0; k < num_added; k++)
                if (t->added[k].len <= len - i &&
                    !memcmp(s + i, t->added[k].content, t->added[k].len)) {
                    clear = 0;
                    break;
                }
        if (clear)
            return c;
    }
    return 0;
}

/* ---- decoding ------------------------------------------------------------ */

ty_status ty_tokenizer_decode(const ty_tokenizer *t, const uint32_t *ids,
                              size_t n, char **out, size_t *len, ty_err *err)
{
    size_t total = 0;
    *out = NULL;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] >= t->vocab_size || !t->has_piece[ids[i]]) {
            char f[48];
            snprintf(f, sizeof f, "ids[%zu]", i);
            return ty_fail(err, TY_EINVAL, f,
                           ids[i] >= t->vocab_size
                               ? "id %u (at position %zu) is past the "
                                 "vocabulary (%u ids)"
                               : "id %u (at position %zu) is no token of "
                                 "the vocabulary (%u ids)",
                           ids[i], i, t->vocab_size);
        }
        total += t->piece_off[ids[i] + 1] - t->piece_off[ids[i]];
    }
    char *s = malloc(total + 1);
    if (!s)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t a = t->piece_off[ids[i]], b = t->piece_off[ids[i] + 1];
        memcpy(s + o, t->piece_bytes + a, b - a);
        o += b - a;
    }
    s[o] = '\0';
    *out = s;
    *len = o;
    return TY_OK;
}

/* ---- what it is ---------------------------------------------------------- */

uint32_t ty_tokenizer_vocab_size(const ty_tokenizer *t)
{
    return t->vocab_size;
}

ty_tokenizer_type ty_tokenizer_type_of(const ty_tokenizer *t)
{
    return (ty_tokenizer_type)t->type;
}

const char *ty_tokenizer_type_name(ty_tokenizer_type type)
{
    static const char *const names[] = {"byte", "bpe", "huggingface"};
    return (unsigned)type < 3 ? names[type] : "unknown";
}

const json_t *ty_tokenizer_description(const ty_tokenizer *t)
{
    return t->desc;
}

/* The added tokens a summary lists at most. */
#define DESCRIBE_ADDED 16

json_t *ty_tokenizer_describe(const ty_tokenizer *t)
{
    json_t *d = json_pack("{s:s, s:I}", "type",
                          ty_tokenizer_type_name((ty_tokenizer_type)t->type),
                          "vocab_size", (json_int_t)t->vocab_size);
    if (!d || t->type == TY_TOKENIZER_BYTE)
        return d;
    int bad = json_object_set_new(d, "merges", json_integer(t->num_merges));
    if (t->type == TY_TOKENIZER_HUGGINGFACE) {
        json_t *a = json_array();
        for (size_t i = 0; a && i < t->num_added && i < DESCRIBE_ADDED; i++)
            bad |= json_array_append_new(a, json_string(t->added[i].content));
        bad |= !a || json_object_set_new(d, "added_tokens", a);
        bad |= json_object_set_new(d, "num_added_tokens",
                                   json_integer((json_int_t)t->num_added));
        bad |= json_object_set_new(d, "add_prefix_space",
                                   json_boolean(t->add_prefix_space));
    }
    if (bad) {
        json_decref(d);
        return NULL;
    }
    return d;
}

/* ---- an upload's request ------------------------------------------------- */

ty_status ty_tokenizer_load_text(const char *text, size_t len,
                                 ty_tokenizer **out, ty_err *err)
{
    ty_tokenizer_request req;
    *out = NULL;
    ty_status st =
        ty_tokenizer_request_parse_text(text, len, "tokenizer", &req, err);
    if (st != TY_OK)
        return st;
    if (!req.tok)
        return ty_fail(err, TY_EINVAL, "tokenizer",
                       "a bpe tokenizer to learn is no tokenizer yet: a "
                       "description holds its merges");
    *out = req.tok;
    return TY_OK;
}

void ty_tokenizer_request_free(ty_tokenizer_request *req)
{
    ty_tokenizer_free(req->tok);
    memset(req, 0, sizeof *req);
}

ty_status ty_tokenizer_request_parse(const json_t *value, const char *field,
                                     ty_tokenizer_request *req, ty_err *err)
{
    memset(req, 0, sizeof *req);
    const char *type = json_string_value(json_object_get(value, "type"));
    if (json_is_object(value) && type && !strcmp(type, "bpe") &&
        !json_object_get(value, "merges")) {
        char f[160];
        const json_t *vs = json_object_get(value, "vocab_size");
        const char *k;
        json_t *v;
        json_object_foreach ((json_t *)value, k, v) {
            if (strcmp(k, "type") && strcmp(k, "vocab_size")) {
                snprintf(f, sizeof f, "%s.%s", field, k);
                return ty_fail(err, TY_EINVAL, f,
                               "unknown key '%s': a bpe tokenizer to learn "
                               "takes type and vocab_size",
                               k);
            }
        }
        snprintf(f, sizeof f, "%s.vocab_size", field);
        if (!json_is_integer(vs) || json_integer_value(vs) <= 256 ||
            json_integer_value(vs) > TY_TOKENIZER_BPE_MAX_VOCAB)
            return ty_fail(err, TY_EINVAL, f,
                           "vocab_size is required for a bpe tokenizer: an "
                           "integer from 257 to %u (the 256 bytes and the "
                           "merges learned from the text)",
                           TY_TOKENIZER_BPE_MAX_VOCAB);
        req->learn_vocab = (uint32_t)json_integer_value(vs);
        return TY_OK;
    }
    return ty_tokenizer_load_as(value, field, &req->tok, err);
}

ty_status ty_tokenizer_request_parse_text(const char *text, size_t len,
                                          const char *field,
                                          ty_tokenizer_request *req,
                                          ty_err *err)
{
    size_t a = 0, b = len;
    memset(req, 0, sizeof *req);
    while (a < b && (text[a] == ' ' || (text[a] >= 9 && text[a] <= 13)))
        a++;
    while (b > a &&
           (text[b - 1] == ' ' || (text[b - 1] >= 9 && text[b - 1] <= 13)))
        b--;
    if (b - a == 4 && !memcmp(text + a, "byte", 4))
        return byte_tokenizer(&req->tok, err);
    if (len > TY_TOKENIZER_MAX_JSON_BYTES)
        return ty_fail(err, TY_EINVAL, field,
                       "the tokenizer is %zu bytes; at most %u are read", len,
                       TY_TOKENIZER_MAX_JSON_BYTES);
    json_error_t je;
    json_t *v = json_loadb(text, len, JSON_DECODE_ANY, &je);
    if (!v) {
        if (json_error_code(&je) == json_error_out_of_memory)
            return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
        return ty_fail(err, TY_EINVAL, field,
                       "the tokenizer is neither \"byte\" nor JSON (a "
                       "description or a tokenizer.json): line %d, column "
                       "%d: %s",
                       je.line, je.column, je.text);
    }
    ty_status st = ty_tokenizer_request_parse(v, field, req, err);
    json_decref(v);
    return st;
}
