/*
 * windows.c - a token dataset's stretches as language-model examples (see
 * windows.h).
 */
#include "models/data/windows.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

ty_status ds_windows_make(const ty_tokens *tok, uint64_t first, uint64_t count,
                          uint32_t t, ty_dataset *out, ty_err *err)
{
    memset(out, 0, sizeof *out);
    if (first > tok->num_tokens || count > tok->num_tokens - first)
        return ty_fail(err, TY_EINVAL, NULL,
                       "the stretch of tokens is outside the dataset");
    const uint64_t n = ds_windows_count(count, t);
    if (n == 0)
        return ty_fail(err, TY_EINVAL, "hyperparameters.context_length",
                       "%llu tokens hold no window of %u tokens and its next "
                       "token; lower hyperparameters.context_length or give "
                       "more text",
                       (unsigned long long)count, t);
    if (n > TY_DS_MAX_EXAMPLES)
        return ty_fail(err, TY_ETOOBIG, "hyperparameters.context_length",
                       "%llu windows are more than the %u a run takes; raise "
                       "hyperparameters.context_length",
                       (unsigned long long)n, TY_DS_MAX_EXAMPLES);
    float *x = malloc((size_t)n * t * sizeof *x);
    float *y = malloc((size_t)n * t * sizeof *y);
    out->meta = json_pack("{s:s, s:s}", "task", "language_modeling",
                          "preprocess", "none");
    if (!x || !y || !out->meta) {
        free(x);
        free(y);
        json_decref(out->meta);
        out->meta = NULL;
        return ty_fail(err, TY_ENOMEM, NULL,
                       "out of memory making %llu windows of %u tokens",
                       (unsigned long long)n, t);
    }
    for (uint64_t i = 0; i < n; i++) {
        const uint64_t s = first + i * t;
        for (uint32_t k = 0; k < t; k++) {
            x[i * t + k] = (float)ty_tokens_at(tok, s + k);
            y[i * t + k] = (float)ty_tokens_at(tok, s + k + 1);
        }
    }
    out->task = TY_TASK_LANGUAGE_MODELING;
    out->num_examples = (uint32_t)n;
    out->ndim = 1;
    out->shape[0] = t;
    out->features = t;
    out->x_dtype = TY_DTYPE_F32;
    out->y_dim = t;
    out->num_classes = tok->vocab_size;
    out->x = x;
    out->y_value = y;
    return TY_OK;
}

void ds_windows_free(ty_dataset *ds)
{
    if (!ds)
        return;
    free((void *)ds->x);
    free((void *)ds->y_value);
    json_decref(ds->meta);
    memset(ds, 0, sizeof *ds);
}

void ds_lm_split(uint64_t n, double f, uint64_t *n_train, uint64_t *n_val)
{
    uint64_t v = f > 0.0 ? (uint64_t)llround((double)n * f) : 0;
    if (v > n)
        v = n;
    *n_val = v;
    *n_train = n - v;
}
