/*
 * preprocess.c - input preprocessing: fitted on the training examples, stored
 * in the model's metadata, and applied while raw examples are copied into the
 * network's input buffer (training gathers, predict, evaluate), so the three
 * paths see identical inputs for identical raw values.
 *
 * Kinds: none (also a text column's "tokens": ids stay ids); scale (x * factor; "scale_255" uses 1/255); standardize
 * ((x - mean[j]) / std[j] per feature j, population std over the training
 * examples, std 0 read as 1). Statistics are computed in double and stored
 * as float; the float values are what is applied and what is saved.
 * tabular: CSV columns with missing values, booleans and categories
 * (preprocess_tab.c; statistics in double, for parity with scikit-learn).
 */
/* GCC 12's -O2 "very cheap" vectorizer skips the row loops below. */
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic")

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/nn_internal.h"

void nn_preproc_free(nn_preproc *pp)
{
    if (!pp)
        return;
    free(pp->mean);
    free(pp->std);
    free(pp->tab_impute);
    free(pp->tab_mean);
    free(pp->tab_std);
    json_decref(pp->tab_columns);
    memset(pp, 0, sizeof *pp);
}

static double example_value(const ty_dataset *ds, uint64_t row, uint64_t j)
{
    if (ds->x_dtype == TY_DTYPE_U8)
        return ((const uint8_t *)ds->x)[row * ds->features + j];
    return ((const float *)ds->x)[row * ds->features + j];
}

static ty_status fit_standardize(nn_preproc *pp, const ty_dataset *ds,
                                 const uint32_t *idx, uint32_t n, ty_err *err)
{
    uint64_t f = ds->features;
    double *acc = calloc(f, sizeof *acc);
    pp->mean = malloc(f * sizeof *pp->mean);
    pp->std = malloc(f * sizeof *pp->std);
    if (!acc || !pp->mean || !pp->std) {
        free(acc);
        return ty_fail(err, TY_ENOMEM, NULL,
                       "out of memory computing feature statistics");
    }
    /* Two passes (mean, then squared deviations): no cancellation. */
    for (uint32_t i = 0; i < n; i++) {
        uint64_t row = idx ? idx[i] : i;
        for (uint64_t j = 0; j < f; j++)
            acc[j] += example_value(ds, row, j);
    }
    for (uint64_t j = 0; j < f; j++) {
        pp->mean[j] = (float)(acc[j] / n);
        acc[j] = 0.0;
    }
    for (uint32_t i = 0; i < n; i++) {
        uint64_t row = idx ? idx[i] : i;
        for (uint64_t j = 0; j < f; j++) {
            double d = example_value(ds, row, j) - (double)pp->mean[j];
            acc[j] += d * d;
        }
    }
    for (uint64_t j = 0; j < f; j++) {
        float s = (float)sqrt(acc[j] / n);
        pp->std[j] = s > 0.0f && isfinite(s) ? s : 1.0f;
    }
    free(acc);
    return TY_OK;
}

ty_status nn_preproc_fit(nn_preproc *pp, const char *name, const ty_dataset *ds,
                         const uint32_t *idx, uint32_t n, ty_err *err)
{
    memset(pp, 0, sizeof *pp);
    pp->features = ds->features;
    /* "tokens": token ids of a text column (-1 padding), used as they are */
    if (!name || !strcmp(name, "none") || !strcmp(name, "tokens")) {
        pp->kind = NN_PRE_NONE;
        return TY_OK;
    }
    if (!strcmp(name, "scale_255")) {
        pp->kind = NN_PRE_SCALE;
        pp->factor = 1.0 / 255.0;
        return TY_OK;
    }
    if (!strcmp(name, "standardize")) {
        if (n == 0)
            return ty_fail(err, TY_EINVAL, NULL,
                           "standardize needs at least one training example");
        pp->kind = NN_PRE_STANDARDIZE;
        ty_status st = fit_standardize(pp, ds, idx, n, err);
        if (st != TY_OK)
            nn_preproc_free(pp);
        return st;
    }
    if (!strcmp(name, "tabular")) {
        ty_status st = nn_preproc_tab_fit(pp, ds, idx, n, err);
        if (st != TY_OK)
            nn_preproc_free(pp);
        return st;
    }
    return ty_fail(err, TY_EINVAL, NULL,
                   "unknown preprocess '%.64s' in the dataset; expected "
                   "scale_255, standardize, tabular, tokens or none",
                   name);
}

static json_t *float_array(const float *v, uint64_t n)
{
    json_t *a = json_array();
    for (uint64_t i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_real(v[i])) != 0) {
            json_decref(a);
            return NULL;
        }
    return a;
}

json_t *nn_preproc_to_json(const nn_preproc *pp)
{
    switch (pp->kind) {
        case NN_PRE_SCALE:
            return json_pack("{s:s, s:f}", "kind", "scale", "factor",
                             pp->factor);
        case NN_PRE_STANDARDIZE:
            return json_pack("{s:s, s:o, s:o}", "kind", "standardize", "mean",
                             float_array(pp->mean, pp->features), "std",
                             float_array(pp->std, pp->features));
        case NN_PRE_TABULAR: return nn_preproc_tab_to_json(pp);
        default: return json_pack("{s:s}", "kind", "none");
    }
}

static ty_status read_floats(const json_t *a, const char *name, uint64_t n,
                             int positive, float *out, ty_err *err)
{
    if (!json_is_array(a) || json_array_size(a) != n)
        return ty_fail(err, TY_EFORMAT, NULL,
                       "preprocess %s must be an array of %llu numbers", name,
                       (unsigned long long)n);
    for (uint64_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(a, i);
        double d = json_number_value(v);
        float f = (float)d;
        if (!json_is_number(v) || !isfinite(f) || (positive && !(f > 0.0f)))
            return ty_fail(err, TY_EFORMAT, NULL,
                           "preprocess %s[%llu] must be a finite%s number",
                           name, (unsigned long long)i,
                           positive ? " positive" : "");
        out[i] = f;
    }
    return TY_OK;
}

ty_status nn_preproc_from_json(nn_preproc *pp, const json_t *j,
                               uint64_t features, ty_err *err)
{
    memset(pp, 0, sizeof *pp);
    pp->features = features;
    const char *kind = json_string_value(json_object_get(j, "kind"));
    if (!json_is_object(j) || !kind)
        return ty_fail(err, TY_EFORMAT, NULL,
                       "preprocess must be an object with a \"kind\"");
    size_t keys = json_object_size(j);
    if (!strcmp(kind, "none") && keys == 1) {
        pp->kind = NN_PRE_NONE;
        return TY_OK;
    }
    if (!strcmp(kind, "scale") && keys == 2) {
        const json_t *f = json_object_get(j, "factor");
        double d = json_number_value(f);
        if (!json_is_number(f) || !isfinite((float)d) || !(d > 0.0))
            return ty_fail(
                err, TY_EFORMAT, NULL,
                "preprocess factor must be a finite positive number");
        pp->kind = NN_PRE_SCALE;
        pp->factor = d;
        return TY_OK;
    }
    if (!strcmp(kind, "standardize") && keys == 3) {
        pp->kind = NN_PRE_STANDARDIZE;
        pp->mean = malloc(features * sizeof *pp->mean);
        pp->std = malloc(features * sizeof *pp->std);
        ty_status st = TY_OK;
        if (!pp->mean || !pp->std)
            st = ty_fail(err, TY_ENOMEM, NULL,
                         "out of memory loading the model");
        if (st == TY_OK)
            st = read_floats(json_object_get(j, "mean"), "mean", features, 0,
                             pp->mean, err);
        if (st == TY_OK)
            st = read_floats(json_object_get(j, "std"), "std", features, 1,
                             pp->std, err);
        if (st != TY_OK)
            nn_preproc_free(pp);
        return st;
    }
    if (!strcmp(kind, "tabular")) {
        ty_status st = nn_preproc_tab_from_json(pp, j, err);
        if (st != TY_OK)
            nn_preproc_free(pp);
        return st;
    }
    return ty_fail(
        err, TY_EFORMAT, NULL,
        "preprocess must be {\"kind\":\"none\"}, {\"kind\":\"scale\","
        "\"factor\":f}, {\"kind\":\"standardize\",\"mean\":[..],"
        "\"std\":[..]} or {\"kind\":\"tabular\",\"columns\":[..]}");
}

/* The one definition of each transform, for float and byte rows alike. */
#define PREPROC_ROW(NAME, T)                                           \
    static void NAME(const nn_preproc *pp, float *restrict dst,        \
                     const T *restrict src)                            \
    {                                                                  \
        const uint64_t f = pp->features;                               \
        switch (pp->kind) {                                            \
            case NN_PRE_SCALE: {                                       \
                const float s = (float)pp->factor;                     \
                for (uint64_t j = 0; j < f; j++)                       \
                    dst[j] = (float)src[j] * s;                        \
                break;                                                 \
            }                                                          \
            case NN_PRE_STANDARDIZE: {                                 \
                const float *restrict mean = pp->mean, *restrict std = \
                                                           pp->std;    \
                for (uint64_t j = 0; j < f; j++)                       \
                    dst[j] = ((float)src[j] - mean[j]) / std[j];       \
                break;                                                 \
            }                                                          \
            default:                                                   \
                for (uint64_t j = 0; j < f; j++)                       \
                    dst[j] = (float)src[j];                            \
        }                                                              \
    }
PREPROC_ROW(row_f32, float)
PREPROC_ROW(row_u8, uint8_t)

void nn_preproc_apply(const nn_preproc *pp, float *dst, const float *src,
                      uint32_t n)
{
    if (pp->kind == NN_PRE_TABULAR) {
        for (uint32_t i = 0; i < n; i++)
            nn_preproc_tab_row(pp, dst + (size_t)i * pp->features,
                               src + (size_t)i * pp->features);
        return;
    }
    for (uint32_t i = 0; i < n; i++)
        row_f32(pp, dst + (size_t)i * pp->features,
                src + (size_t)i * pp->features);
}

#define PREFETCH_ROWS 4 /* rows ahead: a shuffled gather misses every row */

static void prefetch_row(const ty_dataset *ds, uint64_t row)
{
    size_t bytes = ds->features * (ds->x_dtype == TY_DTYPE_U8 ? 1 : 4);
    const char *p = (const char *)ds->x + row * bytes;
    for (size_t off = 0; off < bytes; off += 64)
        __builtin_prefetch(p + off);
}

void nn_preproc_gather(const nn_preproc *pp, float *dst, const ty_dataset *ds,
                       const uint32_t *idx, uint32_t first, uint32_t n)
{
    const uint64_t f = pp->features;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t row = idx ? idx[first + i] : (uint64_t)first + i;
        if (idx && i + PREFETCH_ROWS < n)
            prefetch_row(ds, idx[first + i + PREFETCH_ROWS]);
        if (pp->kind == NN_PRE_TABULAR)
            nn_preproc_tab_row(pp, dst + i * f, (const float *)ds->x + row * f);
        else if (ds->x_dtype == TY_DTYPE_U8)
            row_u8(pp, dst + i * f, (const uint8_t *)ds->x + row * f);
        else
            row_f32(pp, dst + i * f, (const float *)ds->x + row * f);
    }
}
