/*
 * hf_gpt2.h - Hugging Face GPT-2 checkpoints in and out: a
 * `transformers` GPT2LMHeadModel's model.safetensors + config.json becomes
 * a trainyard language model, and a trainyard GPT model goes back to that
 * layout ("hf-gpt2").
 *
 * config.json gives the spec
 *   [embedding {dim: n_embd}, positional_embedding {},
 *    transformer_block {heads: n_head, mlp_ratio: n_inner / n_embd (4)}
 *      x n_layer,
 *    layernorm {eps: layer_norm_epsilon}, lm_head {tie_embedding}]
 * with input_shape [n_positions], num_outputs vocab_size and task
 * "language_modeling". The tensors are renamed (HF's names with or without
 * the "transformer." prefix) and GPT-2's Conv1D weights, stored (in, out),
 * transposed to nn.Linear's (out, in):
 *   wte.weight (V, C)              -> 0.weight
 *   wpe.weight (T, C)              -> 1.weight
 *   h.i.ln_1.{weight,bias}         -> (2+i).ln_1.*
 *   h.i.attn.c_attn.weight (C, 3C) -> (2+i).attn.in_proj_weight (3C, C)
 *   h.i.attn.c_attn.bias           -> (2+i).attn.in_proj_bias
 *   h.i.attn.c_proj.weight (C, C)  -> (2+i).attn.out_proj.weight, transposed
 *   h.i.attn.c_proj.bias           -> (2+i).attn.out_proj.bias
 *   h.i.ln_2.{weight,bias}         -> (2+i).ln_2.*
 *   h.i.mlp.c_fc.weight (C, R)     -> (2+i).mlp.0.weight (R, C)
 *   h.i.mlp.c_fc.bias              -> (2+i).mlp.0.bias
 *   h.i.mlp.c_proj.weight (R, C)   -> (2+i).mlp.2.weight (C, R)
 *   h.i.mlp.c_proj.bias            -> (2+i).mlp.2.bias
 *   ln_f.{weight,bias}             -> (2+L).*
 *   lm_head.weight (V, C)          -> absent or equal to wte when tied
 *                                     (tie_word_embeddings, the default);
 *                                     (3+L).weight when untied
 * h.i.attn.bias and h.i.attn.masked_bias (the causal mask buffers older
 * checkpoints carry) are dropped. F16 and BF16 weights are widened to F32
 * exactly. What GPT2LMHeadModel would compute differently is refused, never
 * approximated: an activation other than gelu_new / gelu_pytorch_tanh,
 * scale_attn_by_inverse_layer_idx, reorder_and_upcast_attn, unscaled
 * attention, cross-attention, a layer_norm_epsilon other than the blocks'
 * 1e-5, a tensor missing, misshapen or of another kind.
 */
#ifndef TY_HF_GPT2_H
#define TY_HF_GPT2_H

#include <jansson.h>

#include "common/ty.h"
#include "models/nn.h"

/* The layout's name, as the API spells it. */
#define HF_GPT2_LAYOUT "hf-gpt2"

/* Writes the trainyard model file out_path from the GPT-2 checkpoint
 * weights_path (safetensors) and its config (config.json, parsed).
 * tokenizer (tokenizer.json, parsed; NULL when none) is checked against the
 * vocabulary and becomes the model's tokenizer ("trainyard.tokenizer":
 * {"type": "huggingface", "tokenizer_json": {...}}). Nothing is loaded: nn_net_load
 * checks the result as it does any model. Fails with TY_EINVAL (a config
 * key: err->field "config.<key>"; the tokenizer: "tokenizer"), TY_EFORMAT
 * (the weights: err->field "weights", the message names the tensor),
 * TY_ENOMEM, TY_EIO; out_path may then hold nothing or a partial file for
 * the caller to remove. */
ty_status hf_gpt2_convert(const char *weights_path, const json_t *config,
                          const json_t *tokenizer, const char *out_path,
                          ty_err *err);

/* hf_gpt2_convert, then nn_net_load of the result into *net (NULL on
 * failure). A refusal of the loader is TY_EFORMAT on "weights". */
ty_status hf_gpt2_import(const char *weights_path, const json_t *config,
                         const json_t *tokenizer, const char *out_path,
                         nn_net **net, ty_err *err);

/* The GPT-2 layout of the trainyard model file model_path: its weights as
 * GPT2LMHeadModel's state dict ("transformer." names, Conv1D (in, out)
 * weights; lm_head.weight only when untied) written to weights_out (NULL:
 * not written), its config.json into *config (NULL: not made) and, when
 * the model carries an imported tokenizer.json, that into *tokenizer (else
 * NULL; NULL: not asked). A model that is not a GPT (its spec has another
 * layer, another order, non-causal attention) is TY_EINVAL with err->field
 * "layout" and a message naming the layer; a damaged file TY_EFORMAT;
 * TY_ENOMEM, TY_EIO, TY_ENOTFOUND. On failure nothing is returned. */
ty_status hf_gpt2_export(const char *model_path, const char *weights_out,
                         json_t **config, json_t **tokenizer, ty_err *err);

#endif
