/*
 * test_target.c - regression target scaling (models/target.h): statistics
 * fitted on a split only, per output column, std 0 read as 1, the JSON
 * form and its errors, scale/unscale, the round trip through a trained
 * model's "trainyard.target" metadata (predictions come back in the
 * target's units; the same file without the key predicts the standardized
 * values), the regression metrics against scikit-learn's figures, and
 * hyperparameters.target_scaling.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models/nn.h"
#include "models/safetensors.h"
#include "models/target.h"
#include "models/train/train.h"
#include "synth_data.h"
#include "testutil.h"

static const char *const dir = tu_tmpdir;

/* Two target columns: rows 0..3 are the split, row 4 an outlier outside
 * it; column 1 is constant over the split. */
static void two_columns(synth *s)
{
    static const uint32_t shape[] = {1};
    synth_init(s, TY_TASK_REGRESSION, 5, shape, 1, TY_DTYPE_F32, 2, "none");
    const float y[5][2] = {{100000.0f, 7.0f},
                           {300000.0f, 7.0f},
                           {500000.0f, 7.0f},
                           {700000.0f, 7.0f},
                           {1e9f, -5.0f}};
    memcpy(s->yv, y, sizeof y);
}

static void test_fit_on_split_per_column(void **state)
{
    (void)state;
    synth s;
    two_columns(&s);
    const uint32_t split[] = {3, 0, 2, 1};
    nn_target t;
    ty_err err;
    assert_int_equal(nn_target_fit(&t, &s.ds, split, 4, &err), TY_OK);
    assert_int_equal(t.cols, 2);
    /* mean 400000, population std sqrt((3e5^2 + 1e5^2) * 2 / 4) */
    assert_float_equal(t.mean[0], 400000.0, 1e-9);
    assert_float_equal(t.std[0], sqrt(5e10), 1e-6);
    /* constant over the split: std 0 read as 1, mean the value */
    assert_float_equal(t.mean[1], 7.0, 0);
    assert_float_equal(t.std[1], 1.0, 0);
    /* all rows: the outlier moves both columns */
    nn_target all;
    assert_int_equal(nn_target_fit(&all, &s.ds, NULL, 5, &err), TY_OK);
    assert_true(all.mean[0] > 1e8);
    assert_true(all.std[1] > 1.0);
    nn_target_free(&all);

    /* scale and unscale, per column, in place */
    float y[4] = {700000.0f, 7.0f, 100000.0f, 9.0f};
    nn_target_scale(&t, y, y, 2);
    assert_float_equal(y[0], 300000.0 / sqrt(5e10), 1e-6);
    assert_float_equal(y[1], 0.0, 0);
    assert_float_equal(y[3], 2.0, 1e-6);
    nn_target_unscale(&t, y, 2);
    assert_float_equal(y[0], 700000.0, 0.1);
    assert_float_equal(y[1], 7.0, 1e-6);
    assert_float_equal(y[2], 100000.0, 0.1);
    assert_float_equal(y[3], 9.0, 1e-6);
    nn_target_free(&t);
    synth_free(&s);
}

static void test_fit_refuses_what_is_not_regression(void **state)
{
    (void)state;
    static const uint32_t shape[] = {2};
    synth s;
    synth_init(&s, TY_TASK_CLASSIFICATION, 4, shape, 1, TY_DTYPE_F32, 2,
               "none");
    nn_target t;
    ty_err err;
    assert_int_equal(nn_target_fit(&t, &s.ds, NULL, 4, &err), TY_EINVAL);
    assert_int_equal(t.cols, 0);
    synth_free(&s);
}

static void test_json_round_trip_and_errors(void **state)
{
    (void)state;
    synth s;
    two_columns(&s);
    nn_target t, back;
    ty_err err;
    assert_int_equal(nn_target_fit(&t, &s.ds, NULL, 4, &err), TY_OK);
    json_t *j = nn_target_to_json(&t);
    assert_string_equal(json_string_value(json_object_get(j, "kind")),
                        "standardize");
    /* through text, as the metadata holds it */
    char *text = json_dumps(j, JSON_COMPACT);
    json_t *parsed = json_loads(text, 0, NULL);
    assert_int_equal(nn_target_from_json(&back, parsed, 2, &err), TY_OK);
    for (uint32_t c = 0; c < 2; c++) {
        assert_true(back.mean[c] == t.mean[c]); /* exactly: %.17g */
        assert_true(back.std[c] == t.std[c]);
    }
    nn_target_free(&back);
    /* the wrong column count, a zero std, a bad kind: TY_EFORMAT */
    assert_int_equal(nn_target_from_json(&back, parsed, 3, &err), TY_EFORMAT);
    assert_non_null(strstr(err.msg, "mean"));
    json_array_set_new(json_object_get(parsed, "std"), 1, json_real(0.0));
    assert_int_equal(nn_target_from_json(&back, parsed, 2, &err), TY_EFORMAT);
    assert_non_null(strstr(err.msg, "std[1]"));
    json_object_set_new(parsed, "kind", json_string("minmax"));
    assert_int_equal(nn_target_from_json(&back, parsed, 2, &err), TY_EFORMAT);
    assert_int_equal(back.cols, 0);
    /* none, and absent: no scaling */
    json_t *none = json_pack("{s:s}", "kind", "none");
    assert_int_equal(nn_target_from_json(&back, none, 2, &err), TY_OK);
    assert_int_equal(back.cols, 0);
    assert_int_equal(nn_target_from_json(&back, NULL, 2, &err), TY_OK);
    assert_int_equal(back.cols, 0);
    float y[2] = {3.0f, 4.0f};
    nn_target_unscale(&back, y, 1); /* a no-op */
    assert_float_equal(y[0], 3.0, 0);
    json_decref(none);
    free(text);
    json_decref(parsed);
    json_decref(j);
    nn_target_free(&t);
    synth_free(&s);
}

/* scikit-learn 1.2: r2_score([3, -0.5, 2, 7], [2.5, 0.0, 2, 8]) =
 * 0.9486081370449679, mean_squared_error 0.375, mean_absolute_error 0.5;
 * the docs' two-output example [[0.5, 1], [-1, 1], [7, -6]] vs
 * [[0, 2], [-1, 2], [8, -5]], multioutput="uniform_average":
 * 0.9368005266622779. */
static void metrics_of(const float *y, const float *pred, uint32_t rows,
                       uint32_t cols, nn_reg_metrics *m)
{
    static const uint32_t shape[] = {1};
    synth s;
    synth_init(&s, TY_TASK_REGRESSION, rows, shape, 1, TY_DTYPE_F32, cols,
               "none");
    memcpy(s.yv, y, (size_t)rows * cols * sizeof *y);
    nn_reg_acc a;
    ty_err err;
    assert_int_equal(nn_reg_acc_init(&a, &s.ds, NULL, rows, &err), TY_OK);
    for (uint32_t i = 0; i < rows; i++) /* row by row, as evaluation adds */
        nn_reg_acc_add(&a, pred + i * cols, y + i * cols, 1);
    nn_reg_acc_result(&a, m);
    nn_reg_acc_free(&a);
    synth_free(&s);
}

static void test_metrics_match_sklearn(void **state)
{
    (void)state;
    nn_reg_metrics m;
    const float y1[] = {3.0f, -0.5f, 2.0f, 7.0f};
    const float p1[] = {2.5f, 0.0f, 2.0f, 8.0f};
    metrics_of(y1, p1, 4, 1, &m);
    assert_float_equal(m.r2, 0.9486081370449679, 1e-12);
    assert_float_equal(m.mse, 0.375, 1e-12);
    assert_float_equal(m.rmse, sqrt(0.375), 1e-12);
    assert_float_equal(m.mae, 0.5, 1e-12);
    const float y2[] = {0.5f, 1.0f, -1.0f, 1.0f, 7.0f, -6.0f};
    const float p2[] = {0.0f, 2.0f, -1.0f, 2.0f, 8.0f, -5.0f};
    metrics_of(y2, p2, 3, 2, &m);
    assert_float_equal(m.r2, 0.9368005266622779, 1e-9);
    /* a constant column: 1 when predicted exactly, else 0 (force_finite) */
    const float y3[] = {1.0f, 5.0f, 2.0f, 5.0f, 3.0f, 5.0f};
    const float p3[] = {1.0f, 5.0f, 2.0f, 5.0f, 3.0f, 5.0f};
    metrics_of(y3, p3, 3, 2, &m);
    assert_float_equal(m.r2, 1.0, 0);
    const float p4[] = {1.0f, 5.0f, 2.0f, 6.0f, 3.0f, 5.0f};
    metrics_of(y3, p4, 3, 2, &m);
    assert_float_equal(m.r2, 0.5, 1e-12); /* (1 + 0) / 2 */
}

/* y = 3e5 + 1e5 * (x0 - 2 x1 + 0.5 x2), x uniform in [-1, 1]; a second
 * column in other units (y2 = 0.01 * x1) when cols is 2. */
static void synth_prices(synth *s, uint32_t n, uint32_t cols)
{
    static const uint32_t shape[] = {3};
    synth_init(s, TY_TASK_REGRESSION, n, shape, 1, TY_DTYPE_F32, cols,
               "standardize");
    ty_rng r;
    ty_rng_seed(&r, 17, 2);
    float *x = s->x;
    for (uint32_t i = 0; i < n; i++) {
        for (int j = 0; j < 3; j++)
            x[i * 3 + j] = 2.0f * ty_rng_uniform(&r) - 1.0f;
        s->yv[i * cols] = 3e5f + 1e5f * (x[i * 3] - 2.0f * x[i * 3 + 1] +
                                         0.5f * x[i * 3 + 2]);
        if (cols == 2)
            s->yv[i * cols + 1] = 0.01f * x[i * 3 + 1];
    }
}

/* Trains on all but the last 64 rows (validated on those); settle: run
 * train_hparams_resolve_loss first, as every submit does. */
static void train_prices(const synth *s, const char *hp_text, const char *model,
                         train_epoch_metrics *fin, uint32_t cols, int settle)
{
    char spec_text[256];
    snprintf(spec_text, sizeof spec_text,
             "{\"layers\":[{\"type\":\"dense\",\"units\":16},{\"type\":"
             "\"relu\"},{\"type\":\"dense\",\"units\":%u}]}",
             cols);
    json_t *spec = json_loads(spec_text, 0, NULL);
    json_t *hpj = json_loads(hp_text, 0, NULL);
    train_hparams hp;
    ty_err err;
    assert_int_equal(train_hparams_parse(hpj, &hp, NULL, &err), TY_OK);
    if (settle)
        assert_int_equal(train_hparams_resolve_loss(&hp, TY_TASK_REGRESSION,
                                                    cols, NULL, &err),
                         TY_OK);
    uint32_t n = s->ds.num_examples;
    uint32_t *idx = malloc(n * sizeof *idx);
    for (uint32_t i = 0; i < n; i++)
        idx[i] = i;
    train_job job = {.spec = spec,
                     .hp = &hp,
                     .train = &s->ds,
                     .train_idx = idx,
                     .n_train = n - 64,
                     .val = &s->ds,
                     .val_idx = idx + n - 64,
                     .n_val = 64,
                     .model_path = model,
                     .threads = 1};
    ty_status st = train_run(&job, fin, &err);
    if (st != TY_OK)
        fail_msg("%s", err.msg);
    free(idx);
    json_decref(hpj);
    json_decref(spec);
}

static void test_model_round_trip_and_predict_units(void **state)
{
    (void)state;
    synth s;
    synth_prices(&s, 512, 2);
    char model[256], bare[256];
    snprintf(model, sizeof model, "%s/prices.safetensors", dir);
    snprintf(bare, sizeof bare, "%s/bare.safetensors", dir);
    train_epoch_metrics fin;
    train_prices(&s,
                 "{\"epochs\":30,\"batch_size\":32,\"learning_rate\":0.01,"
                 "\"seed\":3}",
                 model, &fin, 2, 1);
    /* the epoch's metrics are in the target's units */
    assert_true(isfinite(fin.val_rmse) && isfinite(fin.train_rmse));
    assert_true(fin.val_r2 > 0.9);
    assert_true(fin.train_r2 > 0.9);
    assert_true(fin.val_rmse > 100.0); /* prices, not standardized units */

    /* the file's key holds the training split's statistics */
    st_file f;
    ty_err err;
    assert_int_equal(st_open(model, &f, &err), TY_OK);
    const char *text = st_meta(&f, "trainyard.target");
    assert_non_null(text);
    json_t *tj = json_loads(text, 0, NULL);
    nn_target t, want;
    assert_int_equal(nn_target_from_json(&t, tj, 2, &err), TY_OK);
    uint32_t *split = malloc((512 - 64) * sizeof *split);
    for (uint32_t i = 0; i < 512 - 64; i++)
        split[i] = i;
    assert_int_equal(nn_target_fit(&want, &s.ds, split, 512 - 64, &err), TY_OK);
    for (uint32_t c = 0; c < 2; c++) {
        assert_true(t.mean[c] == want.mean[c]);
        assert_true(t.std[c] == want.std[c]);
    }
    /* the same weights without the key: an unscaled (older) model */
    json_t *meta = json_deep_copy(f.meta);
    json_object_del(meta, "trainyard.target");
    st_out_tensor out[16];
    assert_true(f.count <= 16);
    for (size_t i = 0; i < f.count; i++) {
        out[i] = (st_out_tensor){.name = f.tensors[i].name,
                                 .dtype = f.tensors[i].dtype,
                                 .ndim = f.tensors[i].ndim,
                                 .data = f.tensors[i].data};
        memcpy(out[i].shape, f.tensors[i].shape, sizeof out[i].shape);
    }
    assert_int_equal(st_write(bare, meta, out, f.count, &err), TY_OK);
    json_decref(meta);
    st_close(&f);

    nn_net *net, *old;
    assert_int_equal(nn_net_load(model, &net, &err), TY_OK);
    assert_int_equal(nn_net_load(bare, &old, &err), TY_OK);
    nn_workspace *ws = nn_workspace_create(net, 8);
    nn_workspace *wo = nn_workspace_create(old, 8);
    const float *x = (const float *)s.ds.x + 500 * 3; /* held out */
    float y[8 * 2], z[8 * 2];
    assert_int_equal(nn_net_predict(net, ws, x, 8, y, &err), TY_OK);
    assert_int_equal(nn_net_predict(old, wo, x, 8, z, &err), TY_OK);
    double rel = 0.0;
    for (uint32_t i = 0; i < 8; i++) {
        for (uint32_t c = 0; c < 2; c++) /* y = z * std + mean */
            assert_float_equal(y[i * 2 + c],
                               (double)z[i * 2 + c] * t.std[c] + t.mean[c],
                               1e-3 * t.std[c]);
        rel += fabs(y[i * 2] - s.yv[(500 + i) * 2]) / s.yv[(500 + i) * 2];
    }
    assert_true(rel / 8 < 0.1);     /* prices within 10% on average */
    assert_true(fabs(z[0]) < 10.0); /* the bare file: standardized units */

    /* evaluate: the metrics in the target's units, the loss standardized */
    double loss, acc;
    nn_reg_metrics m;
    assert_int_equal(
        nn_net_evaluate_metrics(net, &s.ds, NULL, &loss, &acc, &m, &err),
        TY_OK);
    assert_true(m.r2 > 0.9);
    assert_float_equal(m.rmse * m.rmse, m.mse, 1e-9 * m.mse);
    assert_true(loss < 1.0);  /* the objective, standardized */
    assert_true(m.mse > 1e3); /* price squared */
    nn_workspace_destroy(ws);
    nn_workspace_destroy(wo);
    nn_net_destroy(net);
    nn_net_destroy(old);
    nn_target_free(&t);
    nn_target_free(&want);
    json_decref(tj);
    free(split);
    synth_free(&s);
}

/* "none", and an unsettled default (a job admitted before target scaling:
 * it must resume as it began), train on the raw targets. */
static void test_none_keeps_raw_targets(void **state)
{
    (void)state;
    synth s;
    synth_prices(&s, 256, 1);
    static const char *const hps[] = {
        "{\"epochs\":2,\"batch_size\":32,\"seed\":3,"
        "\"target_scaling\":\"none\"}",
        "{\"epochs\":2,\"batch_size\":32,\"seed\":3}"};
    for (int k = 0; k < 2; k++) {
        char model[256];
        snprintf(model, sizeof model, "%s/raw%d.safetensors", dir, k);
        train_epoch_metrics fin;
        train_prices(&s, hps[k], model, &fin, 1, k == 0);
        st_file f;
        ty_err err;
        assert_int_equal(st_open(model, &f, &err), TY_OK);
        assert_null(st_meta(&f, "trainyard.target"));
        st_close(&f);
        /* metrics are still reported, in the same units */
        assert_true(isfinite(fin.val_rmse) && fin.val_rmse > 1e4);
    }
    synth_free(&s);
}

static void test_hparams_target_scaling(void **state)
{
    (void)state;
    tu_expect_hparams_error("{\"target_scaling\":\"minmax\"}",
                            "hyperparameters.target_scaling");
    tu_expect_hparams_error("{\"target_scaling\":1}",
                            "hyperparameters.target_scaling");
    ty_err err;
    train_hparams hp;
    json_t *norm;
    /* default: standardize for regression, spelled out */
    assert_int_equal(train_hparams_parse(NULL, &hp, &norm, &err), TY_OK);
    assert_null(json_object_get(norm, "target_scaling"));
    assert_int_equal(
        train_hparams_resolve_loss(&hp, TY_TASK_REGRESSION, 1, norm, &err),
        TY_OK);
    assert_string_equal(
        json_string_value(json_object_get(norm, "target_scaling")),
        "standardize");
    assert_int_equal(hp.target_scaling, TRAIN_TARGET_STANDARDIZE);
    json_decref(norm);
    /* classification: absent is fine, named is an error for the field */
    assert_int_equal(train_hparams_parse(NULL, &hp, &norm, &err), TY_OK);
    assert_int_equal(
        train_hparams_resolve_loss(&hp, TY_TASK_CLASSIFICATION, 3, norm, &err),
        TY_OK);
    assert_null(json_object_get(norm, "target_scaling"));
    json_decref(norm);
    json_t *j = json_pack("{s:s}", "target_scaling", "none");
    assert_int_equal(train_hparams_parse(j, &hp, &norm, &err), TY_OK);
    assert_string_equal(
        json_string_value(json_object_get(norm, "target_scaling")), "none");
    assert_int_equal(
        train_hparams_resolve_loss(&hp, TY_TASK_CLASSIFICATION, 3, norm, &err),
        TY_EINVAL);
    assert_string_equal(err.field, "hyperparameters.target_scaling");
    assert_int_equal(
        train_hparams_resolve_loss(&hp, TY_TASK_REGRESSION, 1, norm, &err),
        TY_OK);
    assert_int_equal(hp.target_scaling, TRAIN_TARGET_NONE);
    json_decref(norm);
    json_decref(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fit_on_split_per_column),
        cmocka_unit_test(test_fit_refuses_what_is_not_regression),
        cmocka_unit_test(test_json_round_trip_and_errors),
        cmocka_unit_test(test_metrics_match_sklearn),
        cmocka_unit_test(test_model_round_trip_and_predict_units),
        cmocka_unit_test(test_none_keeps_raw_targets),
        cmocka_unit_test(test_hparams_target_scaling),
    };
    return cmocka_run_group_tests(tests, tu_tmpdir_setup, tu_tmpdir_teardown);
}
