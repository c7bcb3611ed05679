/*
 * openai.h - OpenAI's completions API over the generation of
 * serve/generate.h (POST /openai/v1/completions, GET /openai/v1/models),
 * as llama.cpp's server, vLLM and KServe expose it, so the `openai`
 * client works with base_url .../openai/v1 and the tenant's key.
 *
 * Request: {"model" (a language model's id or name, or a deployment's
 * name), "prompt" (a string or a list of strings), "max_tokens" (16),
 * "temperature" (1), "top_p" (1), "top_k" (0: off; -1 too, as vLLM),
 * "seed" (absent: one drawn for the request), "stop" (a string or up to
 * 4), "n" (choices per prompt; prompts times n at most 16), "stream",
 * "stream_options"
 * {"include_usage"}, "logprobs" (0 to 5, not with stream), "echo",
 * "user"}. Any other key is a 422 naming it; penalties, best_of,
 * logit_bias and suffix are refused unless at their no-op values.
 *
 * Reply: {"id": "cmpl-...", "object": "text_completion", "created",
 * "model", "choices": [{"text", "index", "logprobs", "finish_reason"}],
 * "usage": {"prompt_tokens", "completion_tokens", "total_tokens"}}; choice
 * i * n + j is prompt i's j-th. Streamed: one chunk object per piece of
 * text ({"id", "object", "created", "model", "choices": [{"text", "index",
 * "logprobs": null, "finish_reason": null}]}), a chunk with each choice's
 * finish_reason, then (include_usage) one with "choices": [] and
 * "usage"; the API layer ends the stream with "data: [DONE]".
 *
 * Every request is checked, and every choice's decoder made, before any
 * text: a bad one fails whole (TY_EINVAL naming the field, "prompt[1]" for
 * the second prompt). Choices run one after another.
 */
#ifndef TY_SERVE_OPENAI_H
#define TY_SERVE_OPENAI_H

#include <jansson.h>

#include "common/ty.h"

struct serve_env;

#define SERVE_OAI_MAX_CHOICES 16 /* prompts times n, in one request */
#define SERVE_OAI_MAX_PROMPTS 16
#define SERVE_OAI_MAX_IDS 65536 /* token ids in one prompt */

typedef struct serve_oai serve_oai;

/* A streamed chunk (the object; the callee takes it). Nonzero: the client
 * left, stop. */
typedef int (*serve_oai_emit)(void *ctx, json_t *chunk);

ty_status serve_oai_open(const struct serve_env *env, const char *tenant_id,
                         const json_t *body, serve_oai **out, ty_err *err);
/* Whether the request asked to stream. */
int serve_oai_streams(const serve_oai *o);
/* The body's checks alone (no model, no choice opened). For fuzzing. */
ty_status serve_oai_check_body(const json_t *body, ty_err *err);
/* Runs every choice; streaming, hands each chunk to emit as it comes. */
ty_status serve_oai_run(serve_oai *o, serve_oai_emit emit, void *ctx,
                        ty_err *err);
/* The reply (not streamed) after a run; NULL when out of memory. */
json_t *serve_oai_result(const serve_oai *o);
void serve_oai_close(serve_oai *o);

/* GET /openai/v1/models: the tenant's language models that have a
 * tokenizer, {"object": "list", "data": [{"id" (the name, or the id when
 * it has none), "object": "model", "created", "owned_by": "trainyard"}]}. */
ty_status serve_oai_models(const struct serve_env *env, const char *tenant_id,
                           json_t **reply, ty_err *err);

#endif
