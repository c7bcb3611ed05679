/*
 * tokenizer.h - text to token ids and back: the byte tokenizer, a byte-level
 * BPE learned from a text upload, and a Hugging Face tokenizer.json
 * (byte-level BPE, as GPT-2's) whose encoding equals the `tokenizers`
 * library's byte for byte.
 *
 * A tokenizer is loaded from its description, the JSON a token dataset's
 * meta holds as "tokenizer" and a model's metadata as "trainyard.tokenizer"
 * (dataset.h, "Token datasets", has the stored forms). Loading is the only
 * costly step; a loaded tokenizer encodes from one thread at a time (it
 * keeps a cache of words it has seen), decodes from any.
 */
#ifndef TY_TOKENIZER_H
#define TY_TOKENIZER_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/ty.h"

typedef enum {
    TY_TOKENIZER_BYTE = 0,       /* one token per byte, vocabulary 256 */
    TY_TOKENIZER_BPE = 1,        /* byte-level BPE learned here */
    TY_TOKENIZER_HUGGINGFACE = 2 /* a tokenizer.json (byte-level BPE) */
} ty_tokenizer_type;

/* A learned BPE's vocabulary: more than 256 (the bytes), at most this. */
#define TY_TOKENIZER_BPE_MAX_VOCAB 65536u
/* A tokenizer.json's ids stay below this (the datasets' limit). */
#define TY_TOKENIZER_MAX_VOCAB (1u << 24)
/* The largest tokenizer.json read (GPT-2's is 1.4 MB, Llama 3's 9 MB). */
#define TY_TOKENIZER_MAX_JSON_BYTES (64u << 20)

typedef struct ty_tokenizer ty_tokenizer;

/* Loads a tokenizer from its description: the string "byte" (also
 * {"type": "byte"}), a learned BPE {"type": "bpe", "vocab_size", "merges"},
 * {"type": "huggingface", "tokenizer_json": {...}}, or a bare tokenizer.json
 * object (one with "model"). On error TY_EINVAL (TY_ENOMEM) with err->field
 * naming the part at fault under "tokenizer" ("tokenizer.model.merges[12]")
 * and *out NULL. A {"type": "bpe"} without merges is a request to learn one
 * (ty_tokenizer_request_parse), not a description: TY_EINVAL. */
ty_status ty_tokenizer_load(const json_t *desc, ty_tokenizer **out,
                            ty_err *err);

/* ty_tokenizer_load with field as the errors' prefix instead of
 * "tokenizer". */
ty_status ty_tokenizer_load_as(const json_t *desc, const char *field,
                               ty_tokenizer **out, ty_err *err);

/* ty_tokenizer_load from JSON text (a model's "trainyard.tokenizer"
 * metadata value); the bare text byte is the byte tokenizer too. Not JSON:
 * TY_EINVAL naming "tokenizer" with the line and column. */
ty_status ty_tokenizer_load_text(const char *text, size_t len,
                                 ty_tokenizer **out, ty_err *err);

/* Appends the ids of text (len bytes of UTF-8) to *ids (a malloc'd array
 * the caller frees; *ids NULL and *n 0 to start), *n counting them. Text
 * that is not UTF-8 is TY_EINVAL naming its byte offset (field "text");
 * TY_ENOMEM. On error *n is as it was (*ids may have moved). */
ty_status ty_tokenizer_encode(ty_tokenizer *tok, const char *text, size_t len,
                              uint32_t **ids, size_t *n, ty_err *err);

/* ty_tokenizer_encode of a piece of a longer text that does not start it
 * (cut at ty_tokenizer_cut): no prefix space is added to its start. */
ty_status ty_tokenizer_encode_more(ty_tokenizer *tok, const char *text,
                                   size_t len, uint32_t **ids, size_t *n,
                                   ty_err *err);

/* Where a long text may be cut so that encoding the two sides apart gives
 * the ids of the whole: the largest offset c in (0, len) such that text[0,
 * c) and text[c, len) encode (the second with ty_tokenizer_encode_more) as
 * the text does, or 0 when this text has none (then read on and try a
 * longer piece). Cuts fall before a space or newline between two printable
 * ASCII characters, away from any added token. tok NULL: any BPE without
 * added tokens (a learner's pieces). */
size_t ty_tokenizer_cut(const ty_tokenizer *tok, const char *text, size_t len);

/* The bytes of ids[0..n) into *out (malloc'd, NUL-terminated after *len
 * bytes; not necessarily UTF-8: a cut can split a character). Each id is
 * its token's bytes as the ByteLevel decoder gives them (added and special
 * tokens included, none skipped). An id past
 * the vocabulary, or one no token has, is TY_EINVAL naming its position
 * (field "ids[i]"); TY_ENOMEM. *out is NULL on error. */
ty_status ty_tokenizer_decode(const ty_tokenizer *tok, const uint32_t *ids,
                              size_t n, char **out, size_t *len, ty_err *err);

/* The number of ids: every id is below it. */
uint32_t ty_tokenizer_vocab_size(const ty_tokenizer *tok);

ty_tokenizer_type ty_tokenizer_type_of(const ty_tokenizer *tok);

/* "byte", "bpe" or "huggingface". */
const char *ty_tokenizer_type_name(ty_tokenizer_type t);

/* What a dataset document shows: {"type", "vocab_size", ...} (for a BPE,
 * "merges" counts them; for a tokenizer.json, "added_tokens" lists their
 * contents and "add_prefix_space"). New reference; NULL when out of
 * memory. */
json_t *ty_tokenizer_describe(const ty_tokenizer *tok);

/* The stored description (loads back with ty_tokenizer_load): borrowed,
 * valid while tok is. */
const json_t *ty_tokenizer_description(const ty_tokenizer *tok);

/* Frees; NULL is fine. */
void ty_tokenizer_free(ty_tokenizer *tok);

/* ---- what an upload asks for ------------------------------------------- */

/* A text upload's tokenizer: one to use, or a BPE to learn from the text. */
typedef struct {
    ty_tokenizer *tok;    /* owned; NULL to learn */
    uint32_t learn_vocab; /* > 0: learn a byte-level BPE of at most this */
} ty_tokenizer_request;

/* Reads the request from a JSON value (a body's "tokenizer"): "byte",
 * {"type": "byte"}, {"type": "bpe", "vocab_size": N} (learn: 256 < N <=
 * TY_TOKENIZER_BPE_MAX_VOCAB, else TY_EINVAL naming "tokenizer.vocab_size"),
 * or anything ty_tokenizer_load takes. Errors name fields under field. */
ty_status ty_tokenizer_request_parse(const json_t *value, const char *field,
                                     ty_tokenizer_request *req, ty_err *err);

/* The same from text (a form field or a file part): "byte" (blanks around
 * it ignored), else JSON. Not JSON: TY_EINVAL naming field and the line and
 * column. */
ty_status ty_tokenizer_request_parse_text(const char *text, size_t len,
                                          const char *field,
                                          ty_tokenizer_request *req,
                                          ty_err *err);

void ty_tokenizer_request_free(ty_tokenizer_request *req);

/* ---- learning a byte-level BPE ----------------------------------------- */

typedef struct ty_bpe_learner ty_bpe_learner;

/* A learner of at most vocab_size ids (TY_EINVAL naming
 * "tokenizer.vocab_size" outside 257..TY_TOKENIZER_BPE_MAX_VOCAB). */
ty_status ty_bpe_learner_create(uint32_t vocab_size, ty_bpe_learner **out,
                                ty_err *err);

/* Counts the words of a piece of the text (UTF-8; pieces cut where
 * ty_tokenizer_cut of any BPE says, or whole). */
ty_status ty_bpe_learner_feed(ty_bpe_learner *l, const char *text, size_t len,
                              ty_err *err);

/* Learns the merges: repeatedly the pair of adjacent ids that occurs most
 * often in the words counted (ties: the smaller left id, then the smaller
 * right id), while one occurs at least twice and the vocabulary has room.
 * *out gets the tokenizer (ids 0-255 the bytes, 256 + i merge i). */
ty_status ty_bpe_learner_finish(ty_bpe_learner *l, ty_tokenizer **out,
                                ty_err *err);

void ty_bpe_learner_free(ty_bpe_learner *l);

/* Learns from one whole text: create, feed, finish. */
ty_status ty_tokenizer_learn(uint32_t vocab_size, const char *text, size_t len,
                             ty_tokenizer **out, ty_err *err);

#endif
