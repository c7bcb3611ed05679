/*
 * tokenizer_hf.c - reads a Hugging Face tokenizer.json into a tokenizer that
 * encodes exactly as the `tokenizers` library (0.22) does.
 *
 * Taken: model BPE (vocab; merges as "a b" strings or [a, b] pairs; unk_token,
 * fuse_unk, byte_fallback, ignore_merges; dropout null or 0), pre_tokenizer
 * ByteLevel (add_prefix_space, use_regex), no normalizer, post_processor and
 * decoder null or ByteLevel, added_tokens (lstrip, rstrip, normalized).
 * Refused with a message naming the field, never encoded differently: other
 * models (WordPiece, Unigram, WordLevel), normalizers, other pre-tokenizers
 * and post-processors (which add special tokens), single_word added tokens,
 * a continuing_subword_prefix or end_of_word_suffix, dropout. truncation and
 * padding are ignored: a text is encoded whole.
 *
 * Ids are the library's: an added token has its vocab id when its content
 * is in the model's vocab, else the next id from the vocab's size on, in the
 * file's order; a file whose added_tokens say otherwise is refused (the
 * library would warn and use its own). Duplicate vocab ids and repeated
 * added tokens are refused too.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/data/tokenizer.h"
#include "models/data/tokenizer_int.h"

typedef struct {
    const char *field; /* "tokenizer" */
    ty_err *err;
} ctx;

static ty_status bad(ctx *c, const char *sub, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static ty_status bad(ctx *c, const char *sub, const char *fmt, ...)
{
    char f[128], msg[400];
    va_list ap;
    snprintf(f, sizeof f, "%s.%s", c->field, sub);
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ty_fail(c->err, TY_EINVAL, f, "%s", msg);
}

/* A JSON bool or null/absent (then def) into *out; else an error. */
static ty_status get_bool(ctx *c, const json_t *o, const char *key,
                          const char *sub, int def, int *out)
{
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return TY_OK;
    }
    if (!json_is_boolean(v))
        return bad(c, sub, "%s must be true or false", key);
    *out = json_is_true(v);
    return TY_OK;
}

/* Component (normalizer, decoder, ...) must be null or of a type in ok. */
static ty_status check_component(ctx *c, const json_t *tj, const char *key,
                                 const char *ok, const char *why)
{
    const json_t *v = json_object_get(tj, key);
    if (!v || json_is_null(v))
        return TY_OK;
    const char *type = json_string_value(json_object_get(v, "type"));
    char sub[64];
    snprintf(sub, sizeof sub, "%s.type", key);
    if (ok && type && !strcmp(type, ok))
        return TY_OK;
    return bad(c, sub, "%s %s is not supported (%s)", key,
               type ? type : "without a type", why);
}

/* 1 if every character of s is one of GPT-2's 256 byte characters. */
static int all_byte_chars(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t len;
        if (tok_char_byte(tok_utf8_at(s, n, i, &len)) < 0)
            return 0;
        i += len;
    }
    return 1;
}

/* A token string's bytes as the ByteLevel decoder gives them: each byte
 * character's byte when all are, else the string's own UTF-8. Writes at
 * most n bytes to out and returns the count. */
static size_t token_bytes(const unsigned char *s, size_t n, unsigned char *out)
{
    if (!all_byte_chars(s, n)) {
        memcpy(out, s, n);
        return n;
    }
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t len;
        out[o++] = (unsigned char)tok_char_byte(tok_utf8_at(s, n, i, &len));
        i += len;
    }
    return o;
}

static int64_t vocab_id(const json_t *vocab, const char *s)
{
    const json_t *v = json_object_get(vocab, s);
    return json_is_integer(v) ? (int64_t)json_integer_value(v) : -1;
}

static size_t put_utf8(uint32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | cp >> 6);
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2; /* byte characters stay below U+0800 */
}

static ty_status read_merges(ctx *c, ty_tokenizer *t, const json_t *vocab,
                             const json_t *merges)
{
    size_t n = json_array_size(merges), rank = 0;
    char *buf = NULL, sub[64];
    size_t cap = 0;
    int pairs = n && json_is_array(json_array_get(merges, 0));
    ty_status st = TY_OK;
    if (tok_map_init(&t->merges, n) != TY_OK)
        return ty_fail(c->err, TY_ENOMEM, NULL, "out of memory");
    for (size_t i = 0; i < n && st == TY_OK; i++) {
        const json_t *m = json_array_get(merges, i);
        const char *a, *b;
        size_t la, lb;
        snprintf(sub, sizeof sub, "model.merges[%zu]", i);
        if (pairs) {
            if (!json_is_array(m) || json_array_size(m) != 2 ||
                !json_is_string(json_array_get(m, 0)) ||
                !json_is_string(json_array_get(m, 1))) {
                st = bad(c, sub,
                         "each merge must be a pair of token strings "
                         "[a, b], as the first is");
                break;
            }
            a = json_string_value(json_array_get(m, 0));
            b = json_string_value(json_array_get(m, 1));
            la = json_string_length(json_array_get(m, 0));
            lb = json_string_length(json_array_get(m, 1));
        } else {
            if (!json_is_string(m)) {
                st = bad(c, sub,
                         "each merge must be a string \"a b\", as the "
                         "first is");
                break;
            }
            const char *s = json_string_value(m);
            if (!strncmp(s, "#version", 8))
                continue; /* the library skips these lines */
            const char *sp = strchr(s, ' ');
            if (!sp || strchr(sp + 1, ' ')) {
                st = bad(c, sub,
                         "a merge string must be two tokens split by "
                         "one space (\"a b\")");
                break;
            }
            a = s;
            la = (size_t)(sp - s);
            b = sp + 1;
            lb = strlen(b);
        }
        if (la + lb + 1 > cap) {
            cap = (la + lb + 1) * 2;
            char *p = realloc(buf, cap);
            if (!p) {
                st = ty_fail(c->err, TY_ENOMEM, NULL, "out of memory");
                break;
            }
            buf = p;
        }
        memcpy(buf, a, la);
        buf[la] = '\0';
        int64_t ia = vocab_id(vocab, buf);
        memcpy(buf, b, lb);
        buf[lb] = '\0';
        int64_t ib = vocab_id(vocab, buf);
        memcpy(buf, a, la);
        memcpy(buf + la, b, lb);
        buf[la + lb] = '\0';
        int64_t inew = vocab_id(vocab, buf);
        if (ia < 0 || ib < 0 || inew < 0) {
            st = bad(c, sub, "merge %zu's %s is not in model.vocab", i,
                     ia < 0   ? "left token"
                     : ib < 0 ? "right token"
                              : "merged token");
            break;
        }
        if (tok_map_put(&t->merges, (uint64_t)ia << 32 | (uint64_t)ib,
                        (uint64_t)rank << 32 | (uint64_t)inew) != TY_OK)
            st = ty_fail(c->err, TY_ENOMEM, NULL, "out of memory");
        rank++;
    }
    t->num_merges = (uint32_t)rank;
    free(buf);
    return st;
}

static ty_status read_model(ctx *c, ty_tokenizer *t, const json_t *model,
                            const json_t **vocab_out)
{
    ty_status st;
    if (!json_is_object(model))
        return bad(c, "model", "model must be an object (a BPE model)");
    const char *type = json_string_value(json_object_get(model, "type"));
    if (json_object_get(model, "type") && (!type || strcmp(type, "BPE")))
        return bad(c, "model.type",
                   "model type %s is not supported: only byte-level BPE "
                   "(as GPT-2's) is",
                   type ? type : "(not a string)");
    const json_t *vocab = json_object_get(model, "vocab");
    const json_t *merges = json_object_get(model, "merges");
    if (!json_is_object(vocab))
        return bad(c, "model.vocab",
                   "model.vocab must be an object of token -> id");
    if (!json_is_array(merges))
        return bad(c, "model.merges", "model.merges must be an array");
    const json_t *drop = json_object_get(model, "dropout");
    if (drop && !json_is_null(drop) &&
        !(json_is_number(drop) && json_number_value(drop) == 0))
        return bad(c, "model.dropout",
                   "dropout must be null or 0: a random encoding is not "
                   "supported");
    const char *ps[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const json_t *v = json_object_get(model, ps[i]);
        char sub[64];
        snprintf(sub, sizeof sub, "model.%s", ps[i]);
        if (v && !json_is_null(v) &&
            !(json_is_string(v) && !json_string_length(v)))
            return bad(c, sub,
                       "%s is not supported (byte-level BPE has "
                       "none)",
                       ps[i]);
    }
    if ((st = get_bool(c, model, "fuse_unk", "model.fuse_unk", 0,
                       &t->fuse_unk)) ||
        (st = get_bool(c, model, "byte_fallback", "model.byte_fallback", 0,
                       &t->byte_fallback)) ||
        (st = get_bool(c, model, "ignore_merges", "model.ignore_merges", 0,
                       &t->ignore_merges)))
        return st;
    const json_t *unk = json_object_get(model, "unk_token");
    if (unk && !json_is_null(unk)) {
        if (!json_is_string(unk) ||
            (t->unk_id = vocab_id(vocab, json_string_value(unk))) < 0)
            return bad(c, "model.unk_token",
                       "unk_token must be null or a token of model.vocab");
    }
    /* the ids: in range and each given once */
    const char *key;
    json_t *v;
    json_object_foreach ((json_t *)vocab, key, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) >= TY_TOKENIZER_MAX_VOCAB)
            return bad(c, "model.vocab",
                       "token '%.40s' has id %s: ids are integers from 0 to "
                       "%u",
                       key,
                       json_is_integer(v) ? "out of range" : "not an integer",
                       TY_TOKENIZER_MAX_VOCAB - 1);
    }
    *vocab_out = vocab;
    return read_merges(c, t, vocab, merges);
}

static ty_status read_pre_tokenizer(ctx *c, ty_tokenizer *t, const json_t *tj)
{
    const json_t *p = json_object_get(tj, "pre_tokenizer");
    const char *type = json_string_value(json_object_get(p, "type"));
    int trim;
    ty_status st;
    if (!p || json_is_null(p))
        return bad(c, "pre_tokenizer",
                   "pre_tokenizer is required: ByteLevel (byte-level BPE, as "
                   "GPT-2's)");
    if (!type || strcmp(type, "ByteLevel"))
        return bad(c, "pre_tokenizer.type",
                   "pre_tokenizer %s is not supported: only ByteLevel",
                   type ? type : "without a type");
    if ((st = get_bool(c, p, "add_prefix_space",
                       "pre_tokenizer.add_prefix_space", 1,
                       &t->add_prefix_space)) ||
        (st = get_bool(c, p, "use_regex", "pre_tokenizer.use_regex", 1,
                       &t->use_regex)) ||
        (st = get_bool(c, p, "trim_offsets", "pre_tokenizer.trim_offsets", 1,
                       &trim)))
        return st;
    return TY_OK;
}

static ty_status read_added(ctx *c, ty_tokenizer *t, const json_t *vocab,
                            const json_t *added, uint32_t *next_id)
{
    size_t n = json_array_size(added);
    char sub[64];
    ty_status st;
    if (added && !json_is_null(added) && !json_is_array(added))
        return bad(c, "added_tokens", "added_tokens must be an array");
    t->added = calloc(n ? n : 1, sizeof *t->added);
    if (!t->added)
        return ty_fail(c->err, TY_ENOMEM, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const json_t *a = json_array_get(added, i);
        const json_t *content = json_object_get(a, "content");
        const json_t *id = json_object_get(a, "id");
        int single = 0, special = 0;
        tok_added *ta = &t->added[t->num_added];
        snprintf(sub, sizeof sub, "added_tokens[%zu]", i);
        if (!json_is_object(a) || !json_is_string(content) ||
            !json_is_integer(id))
            return bad(c, sub,
                       "an added token needs content (a string) and "
                       "id (an integer)");
        snprintf(sub, sizeof sub, "added_tokens[%zu].single_word", i);
        if ((st = get_bool(c, a, "single_word", sub, 0, &single)))
            return st;
        if (single)
            return bad(c, sub, "single_word added tokens are not supported");
        snprintf(sub, sizeof sub, "added_tokens[%zu]", i);
        if ((st = get_bool(c, a, "lstrip", sub, 0, &ta->lstrip)) ||
            (st = get_bool(c, a, "rstrip", sub, 0, &ta->rstrip)) ||
            (st = get_bool(c, a, "special", sub, 0, &special)) ||
            (st = get_bool(c, a, "normalized", sub, !special, &ta->normalized)))
            return st;
        const char *s = json_string_value(content);
        size_t len = json_string_length(content);
        if (!len)
            continue; /* the library ignores empty ones */
        for (size_t k = 0; k < t->num_added; k++)
            if (t->added[k].len == len && !memcmp(t->added[k].content, s, len))
                return bad(c, sub,
                           "added token %zu repeats an earlier one's "
                           "content",
                           i);
        int64_t want = vocab_id(vocab, s);
        if (want < 0)
            want = (*next_id)++;
        snprintf(sub, sizeof sub, "added_tokens[%zu].id", i);
        if (json_integer_value(id) != want)
            return bad(c, sub,
                       "added token %zu has id %lld, but the tokenizers "
                       "library gives it id %lld (its vocab id, or the next "
                       "after the vocab's %zu tokens)",
                       i, (long long)json_integer_value(id), (long long)want,
                       json_object_size(vocab));
        if (want >= TY_TOKENIZER_MAX_VOCAB)
            return bad(c, sub, "added token ids must stay below %u",
                       TY_TOKENIZER_MAX_VOCAB);
        if (!(ta->content = malloc(len + 1)))
            return ty_fail(c->err, TY_ENOMEM, NULL, "out of memory");
        memcpy(ta->content, s, len + 1);
        ta->len = len;
        ta->id = (uint32_t)want;
        t->added_first[ta->normalized ? 1 : 0][(unsigned char)s[0]] = 1;
        t->num_added++;
    }
    return TY_OK;
}

/* The decode pieces of every id, the byte symbols, the byte fallbacks and
 * (ignore_merges) the whole-word table. */
static ty_status build_tables(ctx *c, ty_tokenizer *t, const json_t *vocab)
{
    uint32_t vs = 0;
    size_t total = 0;
    const char *key;
    json_t *v;
    json_object_foreach ((json_t *)vocab, key, v) {
        if ((uint32_t)json_integer_value(v) + 1 > vs)
            vs = (uint32_t)json_integer_value(v) + 1;
        total += strlen(key);
    }
    for (size_t i = 0; i < t->num_added; i++) {
        if (t->added[i].id + 1 > vs)
            vs = t->added[i].id + 1;
        total += t->added[i].len;
    }
    unsigned char *owner = calloc(vs ? vs : 1, 1); /* 1 vocab, 2 added */
    uint64_t *len = calloc(vs ? vs : 1, sizeof *len);
    const char **str = calloc(vs ? vs : 1, sizeof *str);
    if (!owner || !len || !str || tok_pieces_begin(t, vs, total) != TY_OK ||
        (t->ignore_merges &&
         tok_map_init(&t->vocab_by_hash, json_object_size(vocab)) != TY_OK)) {
        free(owner);
        free(len);
        free(str);
        return ty_fail(c->err, TY_ENOMEM, NULL, "out of memory");
    }
    ty_status st = TY_OK;
    json_object_foreach ((json_t *)vocab, key, v) {
        uint32_t id = (uint32_t)json_integer_value(v);
        if (owner[id]) {
            st = bad(c, "model.vocab",
                     "id %u is given to two tokens ('%.40s' and '%.40s')", id,
                     str[id], key);
            break;
        }
        owner[id] = 1;
        str[id] = key;
    }
    for (size_t i = 0; st == TY_OK && i < t->num_added; i++)
        if (!owner[t->added[i].id]) { /* not in the vocab: its content */
            owner[t->added[i].id] = 2;
            str[t->added[i].id] = t->added[i].content;
        }
    uint64_t at = 0;
    for (uint32_t id = 0; st == TY_OK && id < vs; id++) {
        t->piece_off[id] = at;
        if (owner[id]) {
            size_t n = strlen(str[id]);
            at += token_bytes((const unsigned char *)str[id], n,
                              t->piece_bytes + at);
            t->has_piece[id] = 1;
            if (t->ignore_merges && owner[id] == 1 &&
                all_byte_chars((const unsigned char *)str[id], n)) {
                uint64_t h = tok_hash_bytes(t->piece_bytes + t->piece_off[id],
                                            at - t->piece_off[id]),
                         old;
                while (tok_map_get(&t->vocab_by_hash, h, &old))
                    h++;
                if (tok_map_put(&t->vocab_by_hash, h, id) != TY_OK)
                    st = ty_fail(c->err, TY_ENOMEM, NULL, "out of memory");
            }
        }
    }
    if (st == TY_OK)
        t->piece_off[vs] = at;
    for (unsigned b = 0; st == TY_OK && b < 256; b++) {
        char ch[4];
        size_t n = put_utf8(tok_byte_char(b), ch);
        ch[n] = '\0';
        t->byte_id[b] = vocab_id(vocab, ch);
        int ok = 1;
        for (size_t k = 0; k < n; k++) {
            char name[8];
            snprintf(name, sizeof name, "<0x%02X>", (unsigned char)ch[k]);
            t->fallback[b][k] = vocab_id(vocab, name);
            ok &= t->fallback[b][k] >= 0;
        }
        if (!ok)
            t->fallback[b][0] = t->fallback[b][1] = -1;
    }
    free(owner);
    free(len);
    free(str);
    return st;
}

ty_status tok_hf_load(const json_t *tj, const char *field, ty_tokenizer **out,
                      ty_err *err)
{
    ctx c = {field, err};
    ty_tokenizer *t = tok_alloc(TY_TOKENIZER_HUGGINGFACE);
    const json_t *vocab = NULL;
    ty_status st;
    *out = NULL;
    if (!t)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    const json_t *ver = json_object_get(tj, "version");
    if (ver && !(json_is_string(ver) && !strcmp(json_string_value(ver), "1.0")))
        st = bad(&c, "version", "version must be \"1.0\"");
    else if (!json_object_get(tj, "model"))
        st = bad(&c, "model", "a tokenizer.json needs a model");
    else
        st = TY_OK;
    if (st == TY_OK &&
        !(st = check_component(&c, tj, "normalizer", NULL,
                               "a normalizer changes the text first; none "
                               "is supported")) &&
        !(st = check_component(&c, tj, "post_processor", "ByteLevel",
                               "it would add special tokens; only ByteLevel "
                               "or null is supported")) &&
        !(st = check_component(&c, tj, "decoder", "ByteLevel",
                               "only ByteLevel or null is supported")) &&
        !(st = read_pre_tokenizer(&c, t, tj)) &&
        !(st = read_model(&c, t, json_object_get(tj, "model"), &vocab))) {
        uint32_t next = (uint32_t)json_object_size(vocab);
        if (!(st = read_added(&c, t, vocab, json_object_get(tj, "added_tokens"),
                              &next)))
            st = build_tables(&c, t, vocab);
    }
    if (st == TY_OK) {
        json_t *copy = json_deep_copy(tj);
        t->desc = copy ? json_pack("{s:s, s:I, s:o}", "type", "huggingface",
                                   "vocab_size", (json_int_t)t->vocab_size,
                                   "tokenizer_json", copy)
                       : NULL;
        if (!t->desc)
            st = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    }
    if (st != TY_OK) {
        ty_tokenizer_free(t);
        return st;
    }
    *out = t;
    return TY_OK;
}
