/*
 * Integration test for regression on targets in natural units (issue 30,
 * finding 1): a CSV whose target is a price near 5e5 trained an MLP whose
 * predictions were a few thousand and whose evaluate said only "loss".
 *
 * The data is made here: 2,400 rows of 8 features x uniform in [-1, 1],
 * y = 5e5 + 1e5 * (w . x) + noise, noise normal with std 2e4 (prices from
 * about 1.1e5 to 8.9e5). Var(1e5 w.x) = 1e10 |w|^2 / 3 = 8.5e9 against
 * 4e8 of noise, so the best model reaches R^2 = 8.5 / 8.9 = 0.955; the test
 * checks that claim on its own data by least squares (normal equations in
 * double) on the same split: the linear fit's held-out R^2 must be >= 0.93.
 * The first 2,000 rows are uploaded as CSV (target in its units) and
 * trained on (README-like: adam, lr 0.001, batch 64, 64-64 ReLU MLP, 20
 * epochs, 20% validation); the last 400 are another CSV, never trained on,
 * for evaluate and predict.
 *
 * Checked: evaluate on the held-out rows answers mse, rmse, mae and r2 in
 * the target's units with r2 >= 0.9 and rmse^2 = mse; predictions are
 * prices (mean relative error below 8%; KServe's too, within 25% each,
 * and a deployment's replica's, equal to the in-process ones);
 * the job's metrics carry rmse, mae and r2, and each epoch record (and
 * curve point) train_rmse, val_rmse, val_mae and val_r2; target_scaling
 * other than standardize|none, or named for a classification dataset, is
 * a 422 naming the field.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/rng.h"
#include "harness.h"

#define ROWS 2400
#define TRAIN_ROWS 2000
#define FEATURES 8

static srv server;
static char files[PATH_MAX];
static char train_ds[64], test_ds[64];
static const double w[FEATURES] = {1.0, -0.5, 0.8, 0.3, -0.2, 0.6, 0.1, -0.4};
static double x[ROWS][FEATURES];
static double y[ROWS];

static const char *file_path(const char *name)
{
    static char p[4][PATH_MAX + 64];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", files, name);
    return p[k];
}

static void make_data(void)
{
    ty_rng r;
    ty_rng_seed(&r, 30, 1);
    for (int i = 0; i < ROWS; i++) {
        double s = 0.0;
        for (int j = 0; j < FEATURES; j++) {
            x[i][j] = 2.0 * ty_rng_uniform(&r) - 1.0;
            s += w[j] * x[i][j];
        }
        y[i] = 5e5 + 1e5 * s + 2e4 * ty_rng_normal(&r);
    }
}

static void write_csv(const char *path, int from, int to)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    for (int j = 0; j < FEATURES; j++)
        fprintf(f, "f%d,", j);
    fprintf(f, "price\n");
    for (int i = from; i < to; i++) {
        for (int j = 0; j < FEATURES; j++)
            fprintf(f, "%.6f,", x[i][j]);
        fprintf(f, "%.2f\n", y[i]);
    }
    fclose(f);
}

static void upload(const char *name, const char *csv, char *id_out)
{
    char n[64], a[PATH_MAX + 16];
    snprintf(n, sizeof n, "name=%s", name);
    snprintf(a, sizeof a, "file=@%s", csv);
    const char *parts[] = {
        n, "format=csv", "label_column=price", "task=regression", a, NULL};
    resp *r = http_upload(&server, "/v1/datasets", parts);
    if (r->status != 201)
        fail_msg("upload: %ld %s", r->status, r->body);
    snprintf(id_out, 64, "%s", str(r->json, "id"));
    resp_free(r);
}

static int setup(void **state)
{
    (void)state;
    if (srv_start(&server, NULL, NULL))
        return -1;
    temp_dir(files);
    make_data();
    write_csv(file_path("houses.csv"), 0, TRAIN_ROWS);
    write_csv(file_path("held_out.csv"), TRAIN_ROWS, ROWS);
    upload("houses", file_path("houses.csv"), train_ds);
    upload("houses-held-out", file_path("held_out.csv"), test_ds);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    srv_stop(&server, SIGTERM);
    srv_cleanup(&server);
    return 0;
}

/* The least-squares fit (intercept + 8 weights) on the training rows, by
 * the normal equations and Gauss-Jordan elimination with partial pivoting,
 * and its R^2 on the held-out rows. */
static double linear_r2(void)
{
    enum { P = FEATURES + 1 };
    double a[P][P + 1] = {{0}};
    for (int i = 0; i < TRAIN_ROWS; i++) {
        double row[P] = {1.0};
        for (int j = 0; j < FEATURES; j++)
            row[j + 1] = x[i][j];
        for (int r = 0; r < P; r++) {
            for (int c = 0; c < P; c++)
                a[r][c] += row[r] * row[c];
            a[r][P] += row[r] * y[i];
        }
    }
    for (int c = 0; c < P; c++) {
        int piv = c;
        for (int r = c + 1; r < P; r++)
            if (fabs(a[r][c]) > fabs(a[piv][c]))
                piv = r;
        for (int k = 0; k <= P; k++) {
            double t = a[c][k];
            a[c][k] = a[piv][k];
            a[piv][k] = t;
        }
        for (int r = 0; r < P; r++) {
            if (r == c)
                continue;
            double f = a[r][c] / a[c][c];
            for (int k = c; k <= P; k++)
                a[r][k] -= f * a[c][k];
        }
    }
    double mean = 0.0, ss_res = 0.0, ss_tot = 0.0;
    for (int i = TRAIN_ROWS; i < ROWS; i++)
        mean += y[i] / (ROWS - TRAIN_ROWS);
    for (int i = TRAIN_ROWS; i < ROWS; i++) {
        double p = a[0][P] / a[0][0];
        for (int j = 0; j < FEATURES; j++)
            p += a[j + 1][P] / a[j + 1][j + 1] * x[i][j];
        ss_res += (y[i] - p) * (y[i] - p);
        ss_tot += (y[i] - mean) * (y[i] - mean);
    }
    return 1.0 - ss_res / ss_tot;
}

static double num(const json_t *o, const char *k)
{
    const json_t *v = json_object_get(o, k);
    if (!json_is_number(v)) {
        char *t = json_dumps(o, JSON_COMPACT);
        fail_msg("%s is not a number in %s", k, t);
    }
    return json_number_value(v);
}

static void test_data_is_linear_enough(void **state)
{
    (void)state;
    double r2 = linear_r2();
    print_message("least squares held-out R^2 %.4f\n", r2);
    assert_true(r2 >= 0.93);
}

static void test_prices_train_and_predict_in_units(void **state)
{
    (void)state;
    char body[1024], path[256];
    snprintf(body, sizeof body,
             "{\"dataset\": \"%s\", \"validation\": {\"split\": 0.2},"
             " \"model\": {\"layers\": [{\"type\": \"dense\", \"units\": 64},"
             " {\"type\": \"relu\"}, {\"type\": \"dense\", \"units\": 64},"
             " {\"type\": \"relu\"}, {\"type\": \"dense\", \"units\": 1}]},"
             " \"hyperparameters\": {\"epochs\": 20, \"batch_size\": 64,"
             " \"optimizer\": \"adam\", \"learning_rate\": 0.001,"
             " \"seed\": 1}}",
             train_ds);
    resp *r = http_json(&server, "POST", "/v1/jobs", body);
    if (r->status != 202)
        fail_msg("submit: %ld %s", r->status, r->body);
    char job[64];
    snprintf(job, sizeof job, "%s", str(r->json, "id"));
    resp_free(r);
    json_t *j = wait_job(&server, job, 120);
    if (strcmp(str(j, "status"), "succeeded") != 0)
        fail_msg("job %s: %s", str(j, "status"), str(j, "error"));
    char model[64];
    snprintf(model, sizeof model, "%s", str(j, "model"));

    /* Predictions are prices: the held-out rows' mean relative error. */
    json_t *in = json_array();
    for (int i = TRAIN_ROWS; i < TRAIN_ROWS + 100; i++) {
        json_t *row = json_array();
        for (int k = 0; k < FEATURES; k++)
            json_array_append_new(row, json_real(x[i][k]));
        json_array_append_new(in, row);
    }
    json_t *req = json_pack("{s:o}", "inputs", in);
    char *text = json_dumps(req, JSON_COMPACT);
    snprintf(path, sizeof path, "/v1/models/%s/predict", model);
    r = http_json(&server, "POST", path, text);
    expect_status(r, 200);
    const json_t *pred = json_object_get(r->json, "predictions");
    assert_int_equal(json_array_size(pred), 100);
    double rel = 0.0;
    for (int i = 0; i < 100; i++) {
        const json_t *p = json_array_get(pred, (size_t)i);
        if (json_is_array(p))
            p = json_array_get(p, 0);
        rel += fabs(json_number_value(p) - y[TRAIN_ROWS + i]) /
               y[TRAIN_ROWS + i] / 100.0;
    }
    print_message(
        "predictions: mean relative error %.4f (first %.0f for "
        "%.0f)\n",
        rel,
        json_number_value(json_is_array(json_array_get(pred, 0))
                              ? json_array_get(json_array_get(pred, 0), 0)
                              : json_array_get(pred, 0)),
        y[TRAIN_ROWS]);
    assert_true(rel < 0.08);
    double local[100];
    for (int i = 0; i < 100; i++) {
        const json_t *p = json_array_get(pred, (size_t)i);
        local[i] =
            json_number_value(json_is_array(p) ? json_array_get(p, 0) : p);
    }
    resp_free(r);

    /* A deployment's replica answers the same prices. */
    char dep[64], body2[256];
    snprintf(body2, sizeof body2,
             "{\"name\": \"houses-live\", \"model\": \"%s\"}", model);
    r = http_json(&server, "POST", "/v1/deployments", body2);
    if (r->status != 201)
        fail_msg("deploy: %ld %s", r->status, r->body);
    snprintf(dep, sizeof dep, "%s", str(r->json, "id"));
    resp_free(r);
    snprintf(body2, sizeof body2, "/v1/deployments/%s", dep);
    int ready = 0;
    for (double end = now_seconds() + 60; !ready && now_seconds() < end;) {
        r = http_get(&server, body2);
        ready = r->status == 200 && str(r->json, "status") &&
                !strcmp(str(r->json, "status"), "ready");
        resp_free(r);
        if (!ready)
            usleep(100 * 1000);
    }
    assert_true(ready);
    r = http_json(&server, "POST", path, text);
    expect_status(r, 200);
    assert_true(json_is_string(json_object_get(r->json, "deployment")));
    pred = json_object_get(r->json, "predictions");
    assert_int_equal(json_array_size(pred), 100);
    for (int i = 0; i < 100; i++) {
        const json_t *p = json_array_get(pred, (size_t)i);
        double v =
            json_number_value(json_is_array(p) ? json_array_get(p, 0) : p);
        assert_true(fabs(v - local[i]) <= 1e-4 * fabs(local[i]));
    }
    resp_free(r);
    r = http_do(&server, "DELETE", body2, NULL, NULL, 0, NULL);
    resp_free(r);
    free(text);
    json_decref(req);

    /* KServe v2 answers in the same units (the model is "houses", after
     * its dataset). */
    json_t *data = json_array();
    for (int i = TRAIN_ROWS; i < TRAIN_ROWS + 2; i++)
        for (int k = 0; k < FEATURES; k++)
            json_array_append_new(data, json_real(x[i][k]));
    req =
        json_pack("{s:[{s:s, s:s, s:[i, i], s:o}]}", "inputs", "name", "input",
                  "datatype", "FP32", "shape", 2, FEATURES, "data", data);
    text = json_dumps(req, JSON_COMPACT);
    r = http_json(&server, "POST", "/v2/models/houses/infer", text);
    expect_status(r, 200);
    const json_t *kd = json_object_get(
        json_array_get(json_object_get(r->json, "outputs"), 0), "data");
    assert_int_equal(json_array_size(kd), 2);
    for (int i = 0; i < 2; i++)
        assert_true(fabs(json_number_value(json_array_get(kd, (size_t)i)) -
                         y[TRAIN_ROWS + i]) < 0.25 * y[TRAIN_ROWS + i]);
    resp_free(r);
    free(text);
    json_decref(req);

    /* Evaluate on rows never trained on: the target's units. */
    snprintf(body, sizeof body, "{\"dataset\": \"%s\"}", test_ds);
    snprintf(path, sizeof path, "/v1/models/%s/evaluate", model);
    r = http_json(&server, "POST", path, body);
    expect_status(r, 200);
    text = json_dumps(r->json, JSON_COMPACT);
    print_message("evaluate: %s\n", text);
    free(text);
    double mse = num(r->json, "mse"), rmse = num(r->json, "rmse"),
           mae = num(r->json, "mae"), r2 = num(r->json, "r2");
    assert_true(r2 >= 0.9);
    assert_true(fabs(rmse * rmse - mse) <= 1e-6 * mse);
    assert_true(mae <= rmse && mae > 0.0);
    assert_true(rmse > 1e4 && rmse < 5e4); /* noise std 2e4: price units */
    assert_true(json_is_null(json_object_get(r->json, "accuracy")));
    resp_free(r);

    /* The job's metrics and its epoch records. */
    const json_t *m = json_object_get(j, "metrics");
    assert_true(num(m, "r2") >= 0.9);
    assert_true(num(m, "rmse") > 1e4);
    assert_true(num(m, "mae") > 1e3);
    json_decref(j);
    snprintf(path, sizeof path, "/v1/jobs/%s/metrics", job);
    r = http_get(&server, path);
    expect_status(r, 200);
    const json_t *epochs = json_object_get(r->json, "epochs");
    assert_int_equal(json_array_size(epochs), 20);
    const json_t *last = json_array_get(epochs, 19);
    assert_true(num(last, "val_r2") >= 0.9);
    assert_true(num(last, "val_rmse") > 1e4);
    assert_true(num(last, "val_mae") > 1e3);
    assert_true(num(last, "train_rmse") > 1e4);
    resp_free(r);
    /* and the curves, point by point */
    snprintf(path, sizeof path, "/v1/jobs/%s/curves", job);
    r = http_get(&server, path);
    expect_status(r, 200);
    const json_t *pts =
        json_object_get(json_object_get(r->json, "epochs"), "points");
    assert_int_equal(json_array_size(pts), 20);
    assert_true(num(json_array_get(pts, 19), "val_r2") >= 0.9);
    assert_true(num(json_array_get(pts, 0), "val_rmse") > 1e4);
    resp_free(r);
}

static void test_target_scaling_is_checked(void **state)
{
    (void)state;
    char body[512];
    snprintf(body, sizeof body,
             "{\"dataset\": \"%s\", \"model\": {\"layers\": [{\"type\":"
             " \"dense\", \"units\": 1}]}, \"hyperparameters\":"
             " {\"target_scaling\": \"minmax\"}}",
             train_ds);
    resp *r = http_json(&server, "POST", "/v1/jobs?dry_run=true", body);
    expect_status(r, 422);
    assert_non_null(strstr(r->body, "hyperparameters.target_scaling"));
    resp_free(r);
    snprintf(body, sizeof body,
             "{\"dataset\": \"%s\", \"model\": {\"layers\": [{\"type\":"
             " \"dense\", \"units\": 1}]}, \"hyperparameters\":"
             " {\"target_scaling\": \"none\"}}",
             train_ds);
    r = http_json(&server, "POST", "/v1/jobs?dry_run=true", body);
    if (r->status != 200)
        fail_msg("dry run with none: %ld %s", r->status, r->body);
    resp_free(r);
    /* Named for a classification dataset it is an error, not ignored. */
    char a[PATH_MAX + 16], blobs[64];
    make_blobs_csv(file_path("blobs.csv"), 30, 3);
    snprintf(a, sizeof a, "file=@%s", file_path("blobs.csv"));
    const char *parts[] = {"name=blobs", "format=csv", "label_column=species",
                           a, NULL};
    r = http_upload(&server, "/v1/datasets", parts);
    expect_status(r, 201);
    snprintf(blobs, sizeof blobs, "%s", str(r->json, "id"));
    resp_free(r);
    snprintf(body, sizeof body,
             "{\"dataset\": \"%s\", \"model\": {\"layers\": [{\"type\":"
             " \"dense\", \"units\": 3}]}, \"hyperparameters\":"
             " {\"target_scaling\": \"standardize\"}}",
             blobs);
    r = http_json(&server, "POST", "/v1/jobs?dry_run=true", body);
    expect_status(r, 422);
    assert_non_null(strstr(r->body, "hyperparameters.target_scaling"));
    assert_non_null(strstr(r->body, "classification"));
    resp_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_data_is_linear_enough),
        cmocka_unit_test(test_prices_train_and_predict_in_units),
        cmocka_unit_test(test_target_scaling_is_checked),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
