/*
 * target.c - regression target scaling (fit, metadata form, scale and
 * unscale) and the regression metrics' sums (see target.h).
 *
 * Statistics are computed in double over the training examples in two
 * passes (mean, then squared deviations: no cancellation on targets like
 * prices near 1e6) and kept in double; scaling is computed in double and
 * rounded to float once.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/target.h"

void nn_target_free(nn_target *t)
{
    if (!t)
        return;
    free(t->mean);
    free(t->std);
    memset(t, 0, sizeof *t);
}

static ty_status target_alloc(nn_target *t, uint32_t cols, ty_err *err)
{
    memset(t, 0, sizeof *t);
    t->mean = calloc(cols, sizeof *t->mean);
    t->std = calloc(cols, sizeof *t->std);
    if (!t->mean || !t->std) {
        nn_target_free(t);
        return ty_fail(err, TY_ENOMEM, NULL,
                       "out of memory computing target statistics");
    }
    t->cols = cols;
    return TY_OK;
}

ty_status nn_target_fit(nn_target *t, const ty_dataset *ds, const uint32_t *idx,
                        uint32_t n, ty_err *err)
{
    memset(t, 0, sizeof *t);
    if (ds->task != TY_TASK_REGRESSION || !ds->y_value || !ds->y_dim || !n)
        return ty_fail(err, TY_EINVAL, NULL,
                       "target statistics need regression examples");
    const uint32_t c = ds->y_dim;
    ty_status st = target_alloc(t, c, err);
    if (st != TY_OK)
        return st;
    for (uint32_t i = 0; i < n; i++) {
        if ((idx ? idx[i] : i) >= ds->num_examples) {
            nn_target_free(t);
            return ty_fail(err, TY_EINVAL, NULL,
                           "example index %u is out of range",
                           idx ? idx[i] : i);
        }
        const float *y = ds->y_value + (size_t)(idx ? idx[i] : i) * c;
        for (uint32_t j = 0; j < c; j++)
            t->mean[j] += y[j];
    }
    for (uint32_t j = 0; j < c; j++)
        t->mean[j] /= n;
    for (uint32_t i = 0; i < n; i++) {
        const float *y = ds->y_value + (size_t)(idx ? idx[i] : i) * c;
        for (uint32_t j = 0; j < c; j++) {
            double d = (double)y[j] - t->mean[j];
            t->std[j] += d * d;
        }
    }
    for (uint32_t j = 0; j < c; j++) {
        double s = sqrt(t->std[j] / n);
        t->std[j] = s > 0.0 && isfinite(s) ? s : 1.0;
    }
    return TY_OK;
}

static json_t *double_array(const double *v, uint32_t n)
{
    json_t *a = json_array();
    for (uint32_t i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_real(v[i])) != 0) {
            json_decref(a);
            return NULL;
        }
    return a;
}

json_t *nn_target_to_json(const nn_target *t)
{
    if (!t || !t->cols)
        return json_pack("{s:s}", "kind", "none");
    return json_pack("{s:s, s:o, s:o}", "kind", "standardize", "mean",
                     double_array(t->mean, t->cols), "std",
                     double_array(t->std, t->cols));
}

static ty_status read_column(const json_t *a, const char *key, uint32_t cols,
                             int positive, double *out, ty_err *err)
{
    if (!json_is_array(a) || json_array_size(a) != cols)
        return ty_fail(err, TY_EFORMAT, NULL,
                       "trainyard.target.%s must be an array of %u numbers",
                       key, cols);
    for (uint32_t j = 0; j < cols; j++) {
        const json_t *v = json_array_get(a, j);
        double x = json_is_number(v) ? json_number_value(v) : NAN;
        if (!isfinite(x) || (positive && !(x > 0.0)))
            return ty_fail(err, TY_EFORMAT, NULL,
                           "trainyard.target.%s[%u] must be a finite%s number",
                           key, j, positive ? " positive" : "");
        out[j] = x;
    }
    return TY_OK;
}

ty_status nn_target_from_json(nn_target *t, const json_t *j, uint32_t cols,
                              ty_err *err)
{
    memset(t, 0, sizeof *t);
    if (!j)
        return TY_OK;
    const char *kind = json_string_value(json_object_get(j, "kind"));
    if (kind && !strcmp(kind, "none") && json_object_size(j) == 1)
        return TY_OK;
    if (!kind || strcmp(kind, "standardize") != 0 || json_object_size(j) != 3)
        return ty_fail(err, TY_EFORMAT, NULL,
                       "trainyard.target must be {\"kind\":\"none\"} or "
                       "{\"kind\":\"standardize\",\"mean\":[..],\"std\":[..]}");
    ty_status st = target_alloc(t, cols, err);
    if (st == TY_OK)
        st = read_column(json_object_get(j, "mean"), "mean", cols, 0, t->mean,
                         err);
    if (st == TY_OK)
        st =
            read_column(json_object_get(j, "std"), "std", cols, 1, t->std, err);
    if (st != TY_OK)
        nn_target_free(t);
    return st;
}

void nn_target_scale(const nn_target *t, float *z, const float *y,
                     uint32_t rows)
{
    const uint32_t c = t->cols;
    for (uint64_t i = 0; c && i < rows; i++)
        for (uint32_t j = 0; j < c; j++)
            z[i * c + j] =
                (float)(((double)y[i * c + j] - t->mean[j]) / t->std[j]);
}

void nn_target_unscale(const nn_target *t, float *y, uint32_t rows)
{
    const uint32_t c = t->cols;
    for (uint64_t i = 0; c && i < rows; i++)
        for (uint32_t j = 0; j < c; j++)
            y[i * c + j] =
                (float)((double)y[i * c + j] * t->std[j] + t->mean[j]);
}

/* ---- regression metrics ---- */

void nn_reg_acc_free(nn_reg_acc *a)
{
    if (!a)
        return;
    free(a->mean_y);
    free(a->sse);
    free(a->sst);
    memset(a, 0, sizeof *a);
}

ty_status nn_reg_acc_init(nn_reg_acc *a, const ty_dataset *ds,
                          const uint32_t *idx, uint32_t n, ty_err *err)
{
    memset(a, 0, sizeof *a);
    const uint32_t c = ds->y_dim ? ds->y_dim : 1;
    a->mean_y = calloc(c, sizeof *a->mean_y);
    a->sse = calloc(c, sizeof *a->sse);
    a->sst = calloc(c, sizeof *a->sst);
    if (!a->mean_y || !a->sse || !a->sst) {
        nn_reg_acc_free(a);
        return ty_fail(err, TY_ENOMEM, NULL,
                       "out of memory computing regression metrics");
    }
    a->cols = c;
    /* Rows out of range are the evaluation's error to report: skipped. */
    uint32_t seen = 0;
    for (uint32_t i = 0; ds->y_value && i < n; i++) {
        uint32_t row = idx ? idx[i] : i;
        if (row >= ds->num_examples)
            continue;
        const float *y = ds->y_value + (size_t)row * c;
        for (uint32_t j = 0; j < c; j++)
            a->mean_y[j] += y[j];
        seen++;
    }
    for (uint32_t j = 0; seen && j < c; j++)
        a->mean_y[j] /= seen;
    return TY_OK;
}

void nn_reg_acc_add(nn_reg_acc *a, const float *pred, const float *y,
                    uint32_t rows)
{
    const uint32_t c = a->cols;
    for (uint64_t i = 0; i < rows; i++)
        for (uint32_t j = 0; j < c; j++) {
            double e = (double)pred[i * c + j] - (double)y[i * c + j];
            double d = (double)y[i * c + j] - a->mean_y[j];
            a->sse[j] += e * e;
            a->sst[j] += d * d;
            a->sae += fabs(e);
        }
    a->rows += rows;
}

void nn_reg_acc_result(const nn_reg_acc *a, nn_reg_metrics *out)
{
    if (!a->rows || !a->cols) {
        *out = (nn_reg_metrics){NAN, NAN, NAN, NAN};
        return;
    }
    const double values = (double)a->rows * a->cols;
    double sse = 0.0, r2 = 0.0;
    for (uint32_t j = 0; j < a->cols; j++) {
        sse += a->sse[j];
        /* r2_score's force_finite: a constant column scores 1 when
         * predicted exactly, else 0. */
        if (a->sst[j] > 0.0)
            r2 += 1.0 - a->sse[j] / a->sst[j];
        else
            r2 += a->sse[j] == 0.0 ? 1.0 : 0.0;
    }
    out->mse = sse / values;
    out->rmse = sqrt(out->mse);
    out->mae = a->sae / values;
    out->r2 = r2 / a->cols;
}
