/*
 * Integration tests for the class rule (models/data/dataset.h): a CSV whose
 * labels are digits, first seen in a shuffled order, gets the classes
 * 0..9 as JSON integers - the same as the same labels in NPY - so class
 * index i is digit i, and a model trained on it reports those classes and
 * predicts the class of its most probable output. A model from before the
 * rule (integer labels as strings, in order of first appearance; imported
 * here with such classes) keeps its classes and still meets the new
 * datasets.
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

#include "common/rng.h"
#include "harness.h"
#include "models/safetensors.h"

#define ROWS 200
#define FEATURES 8
#define CLASSES 10

static srv server;
static char files[PATH_MAX];
static char csv_ds[64], npy_ds[64];

/* The digits in the order the rows first show them. */
static const int order[CLASSES] = {3, 9, 1, 4, 0, 7, 2, 8, 6, 5};
static float proto[CLASSES][FEATURES]; /* each digit's centre */
static float x[ROWS][FEATURES];
static int label[ROWS];

static const char *file_path(const char *name)
{
    static char p[4][PATH_MAX + 64];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", files, name);
    return p[k];
}

/* Row i is digit order[i % 10]: its centre plus a little noise; centres
 * lie far apart, so a linear layer separates them. */
static void make_data(void)
{
    ty_rng r;
    ty_rng_seed(&r, 42, 0);
    for (int k = 0; k < CLASSES; k++)
        for (int j = 0; j < FEATURES; j++)
            proto[k][j] = 3.0f * ty_rng_normal(&r);
    for (int i = 0; i < ROWS; i++) {
        label[i] = order[i % CLASSES];
        for (int j = 0; j < FEATURES; j++)
            x[i][j] = proto[label[i]][j] + 0.3f * ty_rng_normal(&r);
    }
}

static void upload(const char *const *parts, char *id_out)
{
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

    FILE *f = fopen(file_path("digits.csv"), "w");
    if (!f)
        return -1;
    for (int j = 0; j < FEATURES; j++)
        fprintf(f, "f%d,", j);
    fprintf(f, "digit\n");
    for (int i = 0; i < ROWS; i++) {
        for (int j = 0; j < FEATURES; j++)
            fprintf(f, "%.4f,", (double)x[i][j]);
        fprintf(f, "%d\n", label[i]);
    }
    fclose(f);
    char a[PATH_MAX + 16], b[PATH_MAX + 16];
    snprintf(a, sizeof a, "file=@%s", file_path("digits.csv"));
    const char *csv[] = {"name=digits", "format=csv", "label_column=digit", a,
                         NULL};
    upload(csv, csv_ds);

    int64_t y[ROWS];
    for (int i = 0; i < ROWS; i++)
        y[i] = label[i];
    write_npy_f32(file_path("x.npy"), &x[0][0], ROWS, FEATURES);
    write_npy_i64(file_path("y.npy"), y, ROWS);
    snprintf(a, sizeof a, "x=@%s", file_path("x.npy"));
    snprintf(b, sizeof b, "y=@%s", file_path("y.npy"));
    const char *npy[] = {"name=digits-npy", "format=npy", a, b, NULL};
    upload(npy, npy_ds);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    srv_stop(&server, SIGTERM);
    srv_cleanup(&server);
    return 0;
}

/* classes is [0, 1, ..., 9] as JSON integers. */
static void expect_digit_classes(const json_t *classes)
{
    assert_int_equal(json_array_size(classes), CLASSES);
    for (int k = 0; k < CLASSES; k++) {
        const json_t *c = json_array_get(classes, (size_t)k);
        if (!json_is_integer(c) || json_integer_value(c) != k) {
            char *text = json_dumps(classes, JSON_COMPACT);
            fail_msg("classes %s are not the digits 0..9", text);
        }
    }
}

static void test_csv_digits_get_sorted_integer_classes(void **state)
{
    (void)state;
    char path[128];
    snprintf(path, sizeof path, "/v1/datasets/%s", csv_ds);
    resp *r = http_get(&server, path);
    expect_status(r, 200);
    assert_int_equal(
        json_integer_value(json_object_get(r->json, "num_classes")), CLASSES);
    expect_digit_classes(json_object_get(r->json, "classes"));
    json_t *csv_classes = json_incref(json_object_get(r->json, "classes"));
    resp_free(r);

    /* the same labels in NPY: the same classes */
    snprintf(path, sizeof path, "/v1/datasets/%s", npy_ds);
    r = http_get(&server, path);
    expect_status(r, 200);
    assert_true(json_equal(csv_classes, json_object_get(r->json, "classes")));
    resp_free(r);
    json_decref(csv_classes);

    /* each stored example's label is its digit */
    snprintf(path, sizeof path, "/v1/datasets/%s/examples?limit=12", csv_ds);
    r = http_get(&server, path);
    expect_status(r, 200);
    const json_t *items = json_object_get(r->json, "items");
    assert_int_equal(json_array_size(items), 12);
    for (size_t i = 0; i < 12; i++) {
        const json_t *l = json_object_get(json_array_get(items, i), "label");
        assert_true(json_is_integer(l));
        assert_int_equal(json_integer_value(l), label[i]);
    }
    resp_free(r);
}

/* POSTs inputs (n examples: the digit centres, then the first rows) to
 * model's /v1 predict and checks that each prediction is the class of the
 * most probable output; returns the reply. want[i] is example i's digit. */
static resp *predict_and_check(const char *model, const json_t *classes, int n,
                               const int *want, int as_text)
{
    json_t *inputs = json_array();
    for (int i = 0; i < n; i++) {
        const float *v = i < CLASSES ? proto[i] : x[i - CLASSES];
        json_t *row = json_array();
        for (int j = 0; j < FEATURES; j++)
            json_array_append_new(row, json_real(v[j]));
        json_array_append_new(inputs, row);
    }
    json_t *body = json_pack("{s:o}", "inputs", inputs);
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    char path[128];
    snprintf(path, sizeof path, "/v1/models/%s/predict", model);
    resp *r = http_json(&server, "POST", path, text);
    free(text);
    expect_status(r, 200);
    const json_t *outputs = json_object_get(r->json, "outputs");
    const json_t *pred = json_object_get(r->json, "predictions");
    assert_int_equal(json_array_size(pred), (size_t)n);
    for (int i = 0; i < n; i++) {
        const json_t *row = json_array_get(outputs, (size_t)i);
        assert_int_equal(json_array_size(row), CLASSES);
        size_t best = 0;
        for (size_t k = 1; k < CLASSES; k++)
            if (json_number_value(json_array_get(row, k)) >
                json_number_value(json_array_get(row, best)))
                best = k;
        const json_t *p = json_array_get(pred, (size_t)i);
        if (!json_equal((json_t *)p, json_array_get(classes, best)))
            fail_msg("example %d: prediction is not classes[%zu], the most "
                     "probable output",
                     i, best);
        /* and it is the right digit, in the type the classes have */
        if (as_text) {
            char digit[8];
            snprintf(digit, sizeof digit, "%d", want[i]);
            assert_true(json_is_string(p));
            assert_string_equal(json_string_value(p), digit);
        } else {
            assert_true(json_is_integer(p));
            assert_int_equal(json_integer_value(p), want[i]);
            /* with classes 0..9, the most probable output's index is the
             * digit itself, as a client reading the outputs alone expects */
            assert_int_equal(best, want[i]);
        }
    }
    return r;
}

static char trained_model[64];

static void test_trained_model_classes_and_predictions(void **state)
{
    (void)state;
    char b[1024];
    snprintf(b, sizeof b,
             "{\"name\": \"digits\", \"dataset\": \"%s\","
             " \"model\": {\"layers\": [{\"type\": \"dense\", \"units\": 10}]},"
             " \"hyperparameters\": {\"epochs\": 40, \"batch_size\": 16,"
             " \"optimizer\": \"adam\", \"learning_rate\": 0.05, \"seed\": 1}}",
             csv_ds);
    resp *r = http_json(&server, "POST", "/v1/jobs", b);
    expect_status(r, 202);
    char job[64];
    snprintf(job, sizeof job, "%s", str(r->json, "id"));
    resp_free(r);
    json_t *j = wait_job(&server, job, 120);
    assert_non_null(j);
    if (strcmp(str(j, "status"), "succeeded") != 0) {
        char *text = json_dumps(j, JSON_COMPACT);
        fail_msg("job: %s", text);
    }
    snprintf(trained_model, sizeof trained_model, "%s", str(j, "model"));
    json_decref(j);

    /* GET /v1/models/{id} shows the classes, sorted integers */
    char path[128];
    snprintf(path, sizeof path, "/v1/models/%s", trained_model);
    r = http_get(&server, path);
    expect_status(r, 200);
    expect_digit_classes(json_object_get(r->json, "classes"));
    assert_int_equal(
        json_integer_value(json_object_get(r->json, "num_outputs")), CLASSES);
    json_t *classes = json_incref(json_object_get(r->json, "classes"));
    resp_free(r);

    int want[2 * CLASSES];
    for (int i = 0; i < 2 * CLASSES; i++)
        want[i] = i < CLASSES ? i : label[i - CLASSES];
    r = predict_and_check(trained_model, classes, 2 * CLASSES, want, 0);
    resp_free(r);
    json_decref(classes);

    /* evaluated on the NPY copy of its data: the classes meet */
    snprintf(path, sizeof path, "/v1/models/%s/evaluate", trained_model);
    snprintf(b, sizeof b, "{\"dataset\": \"%s\"}", npy_ds);
    r = http_json(&server, "POST", path, b);
    expect_status(r, 200);
    assert_true(json_number_value(json_object_get(r->json, "accuracy")) > 0.95);
    resp_free(r);
}

/* A model from before the rule: its classes are the digits as strings in
 * the order the rows first showed them, and its outputs follow that order.
 * Its weights are the nearest-centre classifier (output k scores
 * centre(classes[k]) . x - |centre|^2 / 2), so the test knows what it
 * predicts without training it. */
static void test_model_from_before_keeps_its_classes(void **state)
{
    (void)state;
    float w[CLASSES * FEATURES], bias[CLASSES];
    for (int k = 0; k < CLASSES; k++) {
        const float *c = proto[order[k]];
        float sq = 0;
        for (int j = 0; j < FEATURES; j++) {
            w[k * FEATURES + j] = c[j];
            sq += c[j] * c[j];
        }
        bias[k] = -sq / 2;
    }
    st_out_tensor t[2] = {
        {"0.weight", ST_F32, 2, {CLASSES, FEATURES}, w},
        {"0.bias", ST_F32, 1, {CLASSES}, bias},
    };
    ty_err err = {0};
    assert_int_equal(st_write(file_path("old.safetensors"), NULL, t, 2, &err),
                     TY_OK);
    char classes_text[128] = "", meta[512], weights[PATH_MAX + 16];
    for (int k = 0; k < CLASSES; k++) {
        size_t used = strlen(classes_text);
        snprintf(classes_text + used, sizeof classes_text - used, "%s\"%d\"",
                 k ? ", " : "", order[k]);
    }
    snprintf(meta, sizeof meta,
             "metadata={\"spec\": {\"layers\": [{\"type\": \"dense\", "
             "\"units\": 10}]}, \"task\": \"classification\", "
             "\"input_shape\": [8], \"classes\": [%s]}",
             classes_text);
    snprintf(weights, sizeof weights, "weights=@%s",
             file_path("old.safetensors"));
    const char *parts[] = {weights, meta, "name=before", NULL};
    resp *r = http_upload(&server, "/v1/models", parts);
    expect_status(r, 201);
    char id[64];
    snprintf(id, sizeof id, "%s", str(r->json, "id"));
    resp_free(r);

    /* its classes are as they were */
    char path[128];
    snprintf(path, sizeof path, "/v1/models/%s", id);
    r = http_get(&server, path);
    expect_status(r, 200);
    json_t *classes = json_incref(json_object_get(r->json, "classes"));
    assert_int_equal(json_array_size(classes), CLASSES);
    for (int k = 0; k < CLASSES; k++) {
        char digit[8];
        snprintf(digit, sizeof digit, "%d", order[k]);
        assert_string_equal(
            json_string_value(json_array_get(classes, (size_t)k)), digit);
    }
    resp_free(r);

    /* predictions map through them */
    int want[2 * CLASSES];
    for (int i = 0; i < 2 * CLASSES; i++)
        want[i] = i < CLASSES ? i : label[i - CLASSES];
    r = predict_and_check(id, classes, 2 * CLASSES, want, 1);
    resp_free(r);
    json_decref(classes);

    /* and it meets a dataset uploaded since (digits as integers): 3 is "3" */
    snprintf(path, sizeof path, "/v1/models/%s/evaluate", id);
    char b[128];
    snprintf(b, sizeof b, "{\"dataset\": \"%s\"}", csv_ds);
    r = http_json(&server, "POST", path, b);
    expect_status(r, 200);
    assert_true(json_number_value(json_object_get(r->json, "accuracy")) > 0.95);
    resp_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_csv_digits_get_sorted_integer_classes),
        cmocka_unit_test(test_trained_model_classes_and_predictions),
        cmocka_unit_test(test_model_from_before_keeps_its_classes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
