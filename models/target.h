/*
 * target.h - regression target scaling and regression metrics.
 *
 * A regression net trains on standardized targets, z = (y - mean[j]) /
 * std[j] per output column j, with the population mean and std of the
 * TRAINING examples (computed in double; std 0 read as 1), so the loss and
 * its gradients have the same scale whatever the target's units (a price
 * of 1e5..7e5 and a fraction of 0..1 train alike). The statistics are
 * stored in the model file ("trainyard.target", nn.h) and every output is
 * turned back into the target's own units, y = z * std[j] + mean[j], before
 * anyone sees it: predict, KServe, a deployment's replica, evaluate. A
 * model without the key (older files, imports) has none (cols 0) and its
 * outputs are taken as they come.
 *
 * The regression metrics (nn_reg_metrics) are computed in the target's
 * units; R^2 is scikit-learn's r2_score(multioutput="uniform_average"): the
 * mean over output columns of 1 - SS_res/SS_tot, a column whose targets
 * are all equal counting 1 when predicted exactly and 0 otherwise (its
 * force_finite rule).
 */
#ifndef TY_MODELS_TARGET_H
#define TY_MODELS_TARGET_H

#include <jansson.h>
#include <stdint.h>

#include "common/ty.h"
#include "models/data/dataset.h"

typedef struct {
    uint32_t cols;      /* 0: no scaling (identity) */
    double *mean, *std; /* cols each; owned */
} nn_target;

/* Fits t on the targets of examples idx (NULL = all; n of them) of ds, a
 * regression dataset with n >= 1: per-column population mean and std in
 * double, std 0 (or non-finite) read as 1. On failure TY_EINVAL or
 * TY_ENOMEM and t is zeroed. */
ty_status nn_target_fit(nn_target *t, const ty_dataset *ds, const uint32_t *idx,
                        uint32_t n, ty_err *err);

/* Parses "trainyard.target"'s JSON ({"kind":"standardize","mean":[..],
 * "std":[..]} with cols numbers each, std > 0; or {"kind":"none"}); j
 * NULL gives no scaling. TY_EFORMAT naming what is wrong; t is then
 * zeroed. */
ty_status nn_target_from_json(nn_target *t, const json_t *j, uint32_t cols,
                              ty_err *err);

/* The JSON form ({"kind":"standardize",...}, or {"kind":"none"} for no
 * scaling); NULL when out of memory. */
json_t *nn_target_to_json(const nn_target *t);

void nn_target_free(nn_target *t);

/* z (rows, cols) = standardized y (rows, cols); z may be y. */
void nn_target_scale(const nn_target *t, float *z, const float *y,
                     uint32_t rows);

/* y (rows, cols) back into the target's units, in place: y * std + mean
 * (in double, rounded once). A no-op without scaling. */
void nn_target_unscale(const nn_target *t, float *y, uint32_t rows);

/* Regression metrics in the target's own units: mean squared error, its
 * root, mean absolute error (all over every output value), and R^2 as
 * scikit-learn's r2_score(multioutput="uniform_average"). */
typedef struct nn_reg_metrics {
    double mse, rmse, mae, r2;
} nn_reg_metrics;

/* Sums of a regression evaluation in the target's units. */
typedef struct {
    uint32_t cols;
    uint64_t rows;
    double sae;        /* sum of |error| over all values */
    double *mean_y;    /* cols: the evaluated targets' means (pass 1) */
    double *sse, *sst; /* cols: squared errors, squared deviations */
} nn_reg_acc;

/* Starts an accumulator over examples idx (NULL = all; n) of ds: their
 * per-column target means, the first of two passes. TY_ENOMEM. */
ty_status nn_reg_acc_init(nn_reg_acc *a, const ty_dataset *ds,
                          const uint32_t *idx, uint32_t n, ty_err *err);
/* Adds rows predictions pred (rows, cols; target units) against the true
 * targets y (rows, cols). */
void nn_reg_acc_add(nn_reg_acc *a, const float *pred, const float *y,
                    uint32_t rows);
/* mse, rmse, mae and r2 of what was added (NAN each when nothing was). */
void nn_reg_acc_result(const nn_reg_acc *a, nn_reg_metrics *out);
void nn_reg_acc_free(nn_reg_acc *a);

#endif
