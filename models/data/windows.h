/*
 * windows.h - a language model's examples: consecutive windows of a token
 * dataset (models/data/dataset.h "Token datasets") as an in-memory
 * ty_dataset the trainer and evaluation take like any other.
 *
 * Window i of a stretch [first, first + count) of the tokens is x =
 * tokens[s, s + T) and its targets y = tokens[s + 1, s + T + 1), s = first
 * + i T: every position predicts the next token. A stretch of count tokens
 * has floor((count - 1) / T) windows; the tokens after the last whole one
 * are not used. x and y hold the ids as float32 (exact below 2^24), task
 * TY_TASK_LANGUAGE_MODELING, input_shape [T], y_dim T, and num_classes the
 * vocabulary size. The two arrays take 8 bytes a token.
 *
 * A job's validation is a held-out stretch, never windows of the training
 * text: with a split fraction f the last round(N f) tokens (ds_lm_split).
 */
#ifndef TY_DS_WINDOWS_H
#define TY_DS_WINDOWS_H

#include <stdint.h>

#include "common/ty.h"
#include "models/data/dataset.h"

/* Windows of length t over tokens [first, first + count) of tok into *out
 * (zeroed first). TY_EINVAL when the stretch holds no whole window (it
 * needs t + 1 tokens), naming hyperparameters.context_length; TY_ENOMEM;
 * TY_ETOOBIG past TY_DS_MAX_EXAMPLES windows. Free with ds_windows_free. */
ty_status ds_windows_make(const ty_tokens *tok, uint64_t first, uint64_t count,
                          uint32_t t, ty_dataset *out, ty_err *err);

void ds_windows_free(ty_dataset *ds);

/* The token counts of a split of n tokens with validation fraction f (0 <=
 * f < 1): *n_val = round(n f), the last ones; *n_train the rest. */
void ds_lm_split(uint64_t n, double f, uint64_t *n_train, uint64_t *n_val);

/* Windows of length t in a stretch of count tokens. */
static inline uint64_t ds_windows_count(uint64_t count, uint32_t t)
{
    return t && count > t ? (count - 1) / t : 0;
}

#endif
