/*
 * generate.h - text generation from a language model, as Triton's
 * generate extension asks for it (POST /v2/models/{name}/generate):
 *
 *   {"text_input": "the prompt",
 *    "parameters": {"max_tokens": 16, "temperature": 1.0, "top_k": 0,
 *                   "top_p": 1.0, "seed": 0, "stop": "\n" | ["a", "b"]}}
 *   -> {"model_name", "model_version": "1", "text_output",
 *       "finish_reason": "length" | "stop", "prompt_tokens",
 *       "completion_tokens"}
 *
 * The prompt is encoded with the model's tokenizer and run through the
 * key/value-cache decoder (models/nn_decode.h) in one step, then one token
 * a step chosen by models/sample.h (temperature 0: greedy) from a stream
 * seeded by "seed" alone, so the same request gives the same text. Stop
 * strings (serve/stop.h) end the text before them, across token
 * boundaries; text_output is whole UTF-8. The request's sequence runs in
 * its model's engine with every other request's (node/gen_engine.c:
 * continuous batching): in this process, or, for a deployed model, in a
 * replica of its deployment (the deployment's limits first; the tokens
 * come back over node/rframe.h's generation frames, the text is made
 * here).
 *
 * Errors (TY_EINVAL, a 422 naming the field): a body that is not this
 * object or has other keys; text_input missing, not a string, encoding to
 * no token, or longer than the context ("text_input"); max_tokens below 1
 * or past the context after the prompt, temperature, top_p, top_k, seed,
 * stop as the parameters' checks say ("parameters.<name>"); a model that is
 * not a language model with a tokenizer. TY_ENOTFOUND for a model the
 * tenant does not have. A deployed model: TY_ELIMIT at its deployment's
 * limits (429), TY_EUNAVAILABLE when no replica became ready, TY_EDEVICE
 * when its replicas failed.
 */
#ifndef TY_SERVE_GENERATE_H
#define TY_SERVE_GENERATE_H

#include <jansson.h>
#include <stddef.h>

#include "common/ty.h"

struct serve_env;

#define SERVE_GEN_MAX_TOKENS 16u /* parameters.max_tokens' default */

/* The whole request: *reply is the object above. */
ty_status serve_generate(const struct serve_env *env, const char *tenant_id,
                         const char *model_ref, const json_t *body,
                         json_t **reply, ty_err *err);

/* The body's checks alone (no model): what serve_generate refuses of a
 * body before it looks at the model. For fuzzing. */
ty_status serve_gen_check_body(const json_t *body, ty_err *err);

/* In steps, for streaming (POST /v2/models/{name}/generate_stream):
 * serve_gen_open checks the request and readies the model and its decoder
 * (every error above happens here, before any text); serve_gen_run writes
 * the text, handing each piece to chunk as it becomes safe to send (whole
 * UTF-8, never part of a stop string); a chunk returning nonzero (the
 * client left) ends the run at once with finish_reason "cancelled".
 * serve_gen_result is the reply's object (text_output "" unless
 * with_text); serve_gen_close frees all (NULL is fine). One thread at a
 * time per serve_gen. env is copied: it need not outlive serve_gen_open
 * (the pointers in it must). */
typedef struct serve_gen serve_gen;
typedef int (*serve_gen_chunk)(void *ctx, const char *text, size_t len);

ty_status serve_gen_open(const struct serve_env *env, const char *tenant_id,
                         const char *model_ref, const json_t *body,
                         serve_gen **out, ty_err *err);
/* serve_gen_open with the prompt as token ids (OpenAI's prompt as ids):
 * body's text_input is not read (give ""); an id outside the model's
 * vocabulary is TY_EINVAL naming "text_input". ids need not outlive the
 * call. serve_gen_prompt_text is the prompt as text (ids decoded, bytes
 * that are not whole UTF-8 each U+FFFD; malloc'd, NULL when out of
 * memory). */
ty_status serve_gen_open_ids(const struct serve_env *env, const char *tenant_id,
                             const char *model_ref, const json_t *body,
                             const uint32_t *ids, size_t n_ids, serve_gen **out,
                             ty_err *err);
char *serve_gen_prompt_text(const serve_gen *g);
ty_status serve_gen_run(serve_gen *g, serve_gen_chunk chunk, void *ctx,
                        ty_err *err);
/* serve_gen_run in halves, to run several side by side (OpenAI's n):
 * start hands the sequence to the engine (an error: nothing runs, do not
 * wait); wait gives serve_gen_run's outcome. chunk runs on the engine's
 * thread, one sequence's at a time. */
ty_status serve_gen_start(serve_gen *g, serve_gen_chunk chunk, void *ctx,
                          ty_err *err);
ty_status serve_gen_wait(serve_gen *g, ty_err *err);
/* serve_gen_wait for n (at most SERVE_GEN_WAIT_MAX) started together:
 * outs[i], errs[i] each one's outcome. On a deployment's replica each
 * token is taken as it comes, whichever generation's, so every one's
 * chunks go out as they are written (and a client that left stops each at
 * its next chunk); in this process the engine steps them together
 * anyway. */
#define SERVE_GEN_WAIT_MAX 64
void serve_gen_wait_all(serve_gen *const *gs, uint32_t n, ty_status *outs,
                        ty_err *errs);
json_t *serve_gen_result(const serve_gen *g, int with_text);
const char *serve_gen_model_name(const serve_gen *g);
void serve_gen_close(serve_gen *g);

/* For OpenAI's completions (serve/openai.h), before serve_gen_run: the
 * choice's index picks the seed's stream (the choices of one request
 * differ, each reproducible); serve_gen_want_logprobs keeps each token's
 * logprob and its top (at most 5) alternatives'. After the run: the text,
 * the finish reason, the token counts, and the logprobs as OpenAI's
 * completions object ({"tokens", "token_logprobs", "top_logprobs",
 * "text_offset"}, offsets counted from offset; null when not asked). */
void serve_gen_set_choice(serve_gen *g, uint32_t choice);
ty_status serve_gen_want_logprobs(serve_gen *g, uint32_t top, ty_err *err);
const char *serve_gen_text(const serve_gen *g, size_t *len);
const char *serve_gen_finish(const serve_gen *g);
void serve_gen_counts(const serve_gen *g, uint32_t *prompt,
                      uint32_t *completion);
json_t *serve_gen_logprobs_json(const serve_gen *g, size_t offset);
/* The same for generated tokens [from, to) only, the first at offset
 * (streaming: the tokens a chunk's text carries). */
json_t *serve_gen_logprobs_range(const serve_gen *g, uint32_t from, uint32_t to,
                                 size_t offset);

#endif
