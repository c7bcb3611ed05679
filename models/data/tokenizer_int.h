/*
 * tokenizer_int.h - the insides of the tokenizers (tokenizer.h) that its
 * files share: the tokenizer struct, the byte-level BPE engine (bpe.c), the
 * GPT-2 pre-tokenizer (pretok.c) and its Unicode classes
 * (tokenizer_unicode.c, generated), the tokenizer.json reader (tokenizer_hf.c)
 * and the learner (bpe_learn.c). Nothing outside models/data/tokenizer*.c and
 * bpe*.c includes it, except the unit and fuzz tests.
 */
#ifndef TY_TOKENIZER_INT_H
#define TY_TOKENIZER_INT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/ty.h"

/* as in tokenizer.h (which this header does not include: tokenizer.c
 * includes both, and headers of one folder may not include in a circle) */
typedef struct ty_tokenizer ty_tokenizer;

/* ---- Unicode classes of the GPT-2 pre-tokenizer regex ------------------- */

typedef enum {
    TOK_UC_OTHER = 0,
    TOK_UC_LETTER = 1, /* \p{L} */
    TOK_UC_NUMBER = 2, /* \p{N} */
    TOK_UC_SPACE = 3   /* \s (Oniguruma's: 9-13, 0x85, Zs, Zl, Zp) */
} tok_uc_class;

typedef struct {
    uint32_t lo, hi; /* inclusive */
    uint8_t cls;
} tok_uc_range;

extern const tok_uc_range tok_uc_ranges[];
extern const size_t tok_uc_num_ranges;

/* The class of code point cp. */
tok_uc_class tok_uc_class_of(uint32_t cp);

/* ---- hash tables ------------------------------------------------------ */

/* uint64 key -> uint64 value, open addressing; key UINT64_MAX is reserved. */
typedef struct {
    uint64_t *keys;
    uint64_t *vals;
    size_t cap, n; /* cap a power of two */
} tok_map;

ty_status tok_map_init(tok_map *m, size_t expect);
void tok_map_free(tok_map *m);
/* Sets key to val (replacing). TY_ENOMEM on failure. */
ty_status tok_map_put(tok_map *m, uint64_t key, uint64_t val);
/* 1 and *val when key is there, else 0. */
int tok_map_get(const tok_map *m, uint64_t key, uint64_t *val);

/* FNV-1a 64 of n bytes. */
uint64_t tok_hash_bytes(const void *p, size_t n);

/* ---- the tokenizer ---------------------------------------------------- */

typedef struct {
    char *content; /* UTF-8, NUL-terminated */
    size_t len;
    uint32_t id;
    int lstrip, rstrip, normalized;
} tok_added;

struct ty_tokenizer {
    int type;            /* ty_tokenizer_type */
    uint32_t vocab_size; /* ids run 0 .. vocab_size - 1 */
    /* decode: id i is bytes piece_bytes[piece_off[i] .. piece_off[i + 1]),
     * when has_piece[i] (an id in a gap of a tokenizer.json vocab has none) */
    uint64_t *piece_off;
    unsigned char *piece_bytes;
    unsigned char *has_piece;
    /* BPE (bpe and huggingface) */
    int64_t byte_id[256]; /* the symbol of each byte, -1 if none */
    tok_map merges;       /* (left << 32 | right) -> (rank << 32 | new id) */
    uint32_t num_merges;
    int add_prefix_space, use_regex, ignore_merges, byte_fallback, fuse_unk;
    int64_t unk_id;           /* -1 without an unk_token */
    int64_t fallback[256][2]; /* byte_fallback: <0xXX> ids of each byte's
                                 mapped character (1 or 2), -1 if missing */
    tok_map vocab_by_hash;    /* ignore_merges: hash of a mapped word -> id
                                 (verified against the piece) */
    tok_added *added;         /* added tokens, matching order: the
                                 non-normalized ones first pass, the
                                 normalized ones second */
    size_t num_added;
    unsigned char added_first[2][256]; /* [normalized][first byte]: some
                                          added token starts with it */
    json_t *desc; /* the stored description (tokenizer.h), owned */
    /* encode cache: word hash -> offset of its ids in cache_ids */
    tok_map cache;
    uint32_t *cache_ids;
    size_t cache_used, cache_cap;
};

/* An empty tokenizer of type t (NULL when out of memory). */
ty_tokenizer *tok_alloc(int type);

/* Sets id's piece; pieces must be set in increasing id order after
 * tok_pieces_begin(vocab_size, total bytes). */
ty_status tok_pieces_begin(ty_tokenizer *t, uint32_t vocab_size,
                           size_t total_bytes);

/* GPT-2's byte-to-unicode table: the code point byte b stands for. */
uint32_t tok_byte_char(unsigned b);

/* The byte a code point stands for, or -1 if it is none of the 256. */
int tok_char_byte(uint32_t cp);

/* ---- the GPT-2 pre-tokenizer (pretok.c) ---------------------------------- */

/* Calls fn on each pre-token of s (valid UTF-8, n bytes) as the GPT-2
 * regex splits it; stops at the first status fn returns that is not
 * TY_OK and returns it. */
typedef ty_status (*tok_piece_fn)(void *ctx, const unsigned char *p, size_t n,
                                  ty_err *err);
ty_status tok_pretokenize(const unsigned char *s, size_t n, tok_piece_fn fn,
                          void *ctx, ty_err *err);

/* Decodes the UTF-8 character at s[i] (valid); *len gets its length. */
uint32_t tok_utf8_at(const unsigned char *s, size_t n, size_t i, size_t *len);

/* ---- the BPE engine (bpe.c) --------------------------------------------- */

/* A growing id buffer. */
typedef struct {
    uint32_t *ids;
    size_t n, cap;
} tok_ids;

ty_status tok_ids_push(tok_ids *v, uint32_t id);

/* Appends the ids of one pre-token (raw bytes) to out. */
ty_status tok_bpe_word(ty_tokenizer *t, const unsigned char *w, size_t n,
                       tok_ids *out, ty_err *err);

/* The hf loader (tokenizer_hf.c): desc is a tokenizer.json object; field
 * prefixes error fields ("tokenizer"). */
ty_status tok_hf_load(const json_t *tj, const char *field, ty_tokenizer **out,
                      ty_err *err);

/* The learned BPE's loader (bpe_learn.c): {"type": "bpe", "vocab_size",
 * "merges"}. */
ty_status tok_bpe_load(const json_t *desc, const char *field,
                       ty_tokenizer **out, ty_err *err);

/* Builds a learned-BPE tokenizer from merges (pairs of ids, 2 * n values). */
ty_status tok_bpe_build(const uint32_t *merges, uint32_t n, ty_tokenizer **out,
                        ty_err *err);

#endif
