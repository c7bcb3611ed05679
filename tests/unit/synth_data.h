/* synth_data.h - small synthetic datasets built in memory as ty_dataset
 * structs (no dataset file, no dataset.c), for the engine's tests. */
#ifndef TY_TEST_SYNTH_DATA_H
#define TY_TEST_SYNTH_DATA_H

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "models/data/dataset.h"

typedef struct {
    ty_dataset ds;
    void *x;
    int32_t *y;
    float *yv;
} synth;

static inline void synth_free(synth *s)
{
    free(s->x);
    free(s->y);
    free(s->yv);
    json_decref(s->ds.meta);
    memset(s, 0, sizeof *s);
}

static inline void synth_init(synth *s, ty_task task, uint32_t n,
                              const uint32_t *shape, uint32_t ndim,
                              ty_dtype dtype, uint32_t outputs,
                              const char *preprocess)
{
    memset(s, 0, sizeof *s);
    ty_dataset *d = &s->ds;
    d->task = task;
    d->num_examples = n;
    d->ndim = ndim;
    d->features = 1;
    for (uint32_t i = 0; i < ndim; i++) {
        d->shape[i] = shape[i];
        d->features *= shape[i];
    }
    d->x_dtype = dtype;
    size_t xs = dtype == TY_DTYPE_U8 ? 1 : sizeof(float);
    s->x = calloc((size_t)n * d->features, xs);
    d->x = s->x;
    if (task == TY_TASK_CLASSIFICATION) {
        d->y_dim = 1;
        d->num_classes = outputs;
        s->y = calloc(n, sizeof *s->y);
        d->y_class = s->y;
    } else {
        d->y_dim = outputs;
        s->yv = calloc((size_t)n * outputs, sizeof *s->yv);
        d->y_value = s->yv;
    }
    d->meta = json_pack("{s:s}", "preprocess", preprocess);
}

/* XOR of signs: class (x0 > 0) != (x1 > 0), points kept 0.1 away from the
 * axes, plus two noise features. Standardized floats. */
static inline void synth_xor(synth *s, uint32_t n, uint64_t seed)
{
    static const uint32_t shape[] = {4};
    synth_init(s, TY_TASK_CLASSIFICATION, n, shape, 1, TY_DTYPE_F32, 2,
               "standardize");
    json_object_set_new(s->ds.meta, "classes",
                        json_pack("[s, s]", "same", "different"));
    ty_rng r;
    ty_rng_seed(&r, seed, 1);
    float *x = s->x;
    for (uint32_t i = 0; i < n; i++) {
        float a = 2.0f * ty_rng_uniform(&r) - 1.0f;
        float b = 2.0f * ty_rng_uniform(&r) - 1.0f;
        a += a < 0 ? -0.1f : 0.1f;
        b += b < 0 ? -0.1f : 0.1f;
        x[i * 4 + 0] = 3.0f * a + 10.0f; /* off-center, scaled: standardize */
        x[i * 4 + 1] = 0.5f * b;
        x[i * 4 + 2] = ty_rng_normal(&r);
        x[i * 4 + 3] = 7.0f; /* constant: std 0 read as 1 */
        s->y[i] = (a > 0) != (b > 0);
    }
}

/* y = 2 x0 - 3 x1 + 0.5 x2 + 1, x uniform in [-1, 1]. */
static inline void synth_linear(synth *s, uint32_t n, uint64_t seed)
{
    static const uint32_t shape[] = {3};
    synth_init(s, TY_TASK_REGRESSION, n, shape, 1, TY_DTYPE_F32, 1, "none");
    ty_rng r;
    ty_rng_seed(&r, seed, 2);
    float *x = s->x;
    for (uint32_t i = 0; i < n; i++) {
        for (int j = 0; j < 3; j++)
            x[i * 3 + j] = 2.0f * ty_rng_uniform(&r) - 1.0f;
        s->yv[i] =
            2.0f * x[i * 3] - 3.0f * x[i * 3 + 1] + 0.5f * x[i * 3 + 2] + 1.0f;
    }
}

/* 1 x side x side byte images; class 1 when the left half is brighter than
 * the right. Classes are the numbers 0 and 1, preprocess scale_255. */
static inline void synth_images_sized(synth *s, uint32_t n, uint32_t side,
                                      uint64_t seed)
{
    const uint32_t shape[] = {1, side, side};
    const uint32_t f = side * side;
    synth_init(s, TY_TASK_CLASSIFICATION, n, shape, 3, TY_DTYPE_U8, 2,
               "scale_255");
    json_object_set_new(s->ds.meta, "classes", json_pack("[i, i]", 0, 1));
    ty_rng r;
    ty_rng_seed(&r, seed, 3);
    uint8_t *x = s->x;
    for (uint32_t i = 0; i < n; i++) {
        int left = 0, right = 0;
        for (uint32_t j = 0; j < f; j++) {
            x[i * f + j] = (uint8_t)ty_rng_below(&r, 256);
            if (j % side < side / 2)
                left += x[i * f + j];
            else
                right += x[i * f + j];
        }
        s->y[i] = left > right;
    }
}

static inline void synth_images(synth *s, uint32_t n, uint64_t seed)
{
    synth_images_sized(s, n, 4, seed);
}

#endif
