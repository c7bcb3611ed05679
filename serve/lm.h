/*
 * lm.h - language models (task language_modeling) in the predict service:
 * prompts in, the next token's most likely ids out, and the model's
 * tokenizer both ways (POST /v1/models/{id}/tokenize and /detokenize, for
 * text classifiers too, whose predict takes texts: serve_lm_texts).
 *
 * A prompt is a string (encoded with the model's tokenizer, the one of the
 * data it was trained on) or an array of token ids. A prompt longer than
 * the model's context keeps its last context_length tokens (the reply says
 * so: "truncated"). The reply per prompt: {"tokens": the ids used,
 * "next_tokens": [{"id", "text" (the token decoded; null when it is not
 * whole UTF-8 on its own, e.g. one byte of a multi-byte character),
 * "probability"}], best first}. Sampling whole texts is the next step
 * (streaming generation); this is one forward per prompt.
 */
#ifndef TY_SERVE_LM_H
#define TY_SERVE_LM_H

#include <jansson.h>
#include <stdint.h>

#include "common/ty.h"
#include "serve/decode.h"
#include "serve/encode.h"

struct serve_model;
struct nn_net;
struct serve_env;

#define SERVE_LM_TOP_K 5u /* next tokens shown by default */
#define SERVE_LM_MAX_TOP_K 1000u

/* text (len bytes of UTF-8) to ids (*ids malloc'd, *n of them) with net's
 * tokenizer. TY_EINVAL naming field when the model has none or the text is
 * not UTF-8 (with its byte offset). */
ty_status serve_lm_encode(const struct nn_net *net, const char *text,
                          size_t len, const char *field, uint32_t **ids,
                          size_t *n, ty_err *err);

/* ids back to bytes into *out (malloc'd, NUL-terminated; *len bytes, which
 * may not be whole UTF-8 when ids cut a character). An id >= vocab, or one
 * the tokenizer has no token for: TY_EINVAL naming field. */
ty_status serve_lm_decode(const struct nn_net *net, uint32_t vocab,
                          const uint32_t *ids, size_t n, const char *field,
                          char **out, size_t *len, ty_err *err);

/* serve_predict's work for a language model m (opened and admitted by the
 * caller): the prompts of b into the reply. Errors name "inputs[i]" or
 * "top_k" (TY_EINVAL, 422). */
ty_status serve_lm_predict(struct serve_model *m, const struct nn_net *net,
                           const serve_predict_body *b, serve_buf *reply,
                           ty_err *err);

/* A text classifier's inputs (texts, or arrays of token ids) into x (one
 * row of t floats each: the first t ids, then -1 padding), as the model's
 * training data was cut. Errors name "inputs[i]" (TY_EINVAL). */
ty_status serve_lm_texts(const struct nn_net *net, const serve_predict_body *b,
                         uint32_t t, float *x, ty_err *err);

/* serve_evaluate's work for a language model m and the token dataset
 * file at path (the caller checked both are language modeling): the mean
 * next-token loss over the dataset's consecutive windows of the model's
 * context length. *reply: {"model", "dataset" (ds_id), "num_examples"
 * (windows), "num_tokens" (positions scored), "loss", "perplexity",
 * "accuracy" (null), "device"}. A vocabulary that is not the model's, or
 * a dataset too short for one window: TY_EINVAL naming "dataset". */
ty_status serve_lm_evaluate(struct serve_model *m, const struct nn_net *net,
                            const char *path, const char *ds_id, json_t **reply,
                            ty_err *err);

/* POST /v1/models/{id}/tokenize {"content": text} -> {"model", "tokens"}
 * and /detokenize {"tokens": [ids]} -> {"model", "content"} with the
 * tenant's language model's tokenizer (as llama.cpp's server names them).
 * Another task's model, a model without a tokenizer, text that is not
 * UTF-8 or an id outside the vocabulary: TY_EINVAL naming the field. The
 * detokenized content is valid UTF-8 (a cut character's bytes are
 * replaced by U+FFFD, and "complete": false says so). */
ty_status serve_lm_tokenize(const struct serve_env *env, const char *tenant_id,
                            const char *model_id, const json_t *body,
                            json_t **reply, ty_err *err);
ty_status serve_lm_detokenize(const struct serve_env *env,
                              const char *tenant_id, const char *model_id,
                              const json_t *body, json_t **reply, ty_err *err);

#endif
