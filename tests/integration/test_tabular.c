/*
 * test_tabular.c - a CSV as it comes (issue 30, finding 4): a text column
 * and empty cells upload (they were 422s: "... is not a number", "missing
 * values are not supported"), the dataset document types its columns, a
 * model trains on it and predicts from raw rows, and the transform
 * endpoint shows what the network sees. The category limit is a 422 that
 * names the column and max_categories.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "harness.h"

static srv server;

static int setup(void **state)
{
    (void)state;
    return srv_start(&server, NULL, NULL);
}

static int teardown(void **state)
{
    (void)state;
    srv_stop(&server, 15);
    srv_cleanup(&server);
    return 0;
}

/* 120 rows: a number with empty cells, a city, a yes/no column. */
static void write_mixed_csv(const char *path)
{
    static const char *const cities[] = {"rome", "paris", "oslo"};
    char text[8192];
    size_t n = (size_t)snprintf(text, sizeof text, "size,city,garden,price\n");
    for (int i = 0; i < 120; i++) {
        char size[16] = "";
        if (i % 7)
            snprintf(size, sizeof size, "%d", 40 + (i * 13) % 90);
        n += (size_t)snprintf(text + n, sizeof text - n, "%s,%s,%s,%s\n", size,
                              cities[i % 3], i % 4 ? "yes" : "no",
                              i % 3 == 1 ? "high" : "low");
    }
    write_file(path, text, n);
}

static char ds_id[64];

static void test_mixed_csv_uploads(void **state)
{
    (void)state;
    char dir[PATH_MAX], path[PATH_MAX + 8], part[PATH_MAX + 16];
    temp_dir(dir);
    snprintf(path, sizeof path, "%s/mixed.csv", dir);
    write_mixed_csv(path);
    snprintf(part, sizeof part, "file=@%s", path);
    const char *parts[] = {"name=houses", "format=csv", "label_column=price",
                           part, NULL};
    resp *r = http_upload(&server, "/v1/datasets", parts);
    /* before typed columns: 422 "line 2, column 2 ("city"): "rome" is not
     * a number" */
    expect_status(r, 201);
    snprintf(ds_id, sizeof ds_id, "%s", str(r->json, "id"));
    json_t *cols = json_object_get(r->json, "columns");
    assert_int_equal(json_array_size(cols), 3);
    json_t *size = json_array_get(cols, 0), *city = json_array_get(cols, 1),
           *garden = json_array_get(cols, 2);
    assert_string_equal(str(size, "type"), "numeric");
    assert_int_equal(json_integer_value(json_object_get(size, "missing")), 18);
    assert_string_equal(str(city, "type"), "categorical");
    json_t *want = json_pack("[s, s, s]", "oslo", "paris", "rome");
    assert_true(json_equal(json_object_get(city, "categories"), want));
    json_decref(want);
    assert_string_equal(str(garden, "type"), "boolean");
    assert_int_equal(json_integer_value(json_array_get(
                         json_object_get(r->json, "input_shape"), 0)),
                     5);
    resp_free(r);

    /* the document the server keeps says the same */
    char url[128];
    snprintf(url, sizeof url, "/v1/datasets/%s", ds_id);
    r = http_get(&server, url);
    expect_status(r, 200);
    assert_true(json_is_array(json_object_get(r->json, "columns")));
    resp_free(r);

    /* examples come back as raw rows, the form predict takes: row 0 has
     * no size, city rome, garden no */
    snprintf(url, sizeof url, "/v1/datasets/%s/examples?limit=2", ds_id);
    r = http_get(&server, url);
    expect_status(r, 200);
    json_t *x = json_object_get(
        json_array_get(json_object_get(r->json, "items"), 0), "x");
    json_t *row0 = json_pack("[n, s, b]", "rome", 0);
    assert_true(json_equal(x, row0));
    json_decref(row0);
    resp_free(r);
}

static void test_train_and_predict_raw_rows(void **state)
{
    (void)state;
    assert_true(ds_id[0]);
    char body[512];
    snprintf(body, sizeof body,
             "{\"dataset\": \"%s\", \"model\": {\"layers\": [{\"type\": "
             "\"dense\", \"units\": 2}]}, \"hyperparameters\": {\"epochs\": 1, "
             "\"batch_size\": 16}}",
             ds_id);
    resp *r = http_json(&server, "POST", "/v1/jobs", body);
    expect_status(r, 202);
    json_t *job = wait_job(&server, str(r->json, "id"), 120);
    resp_free(r);
    assert_string_equal(str(job, "status"), "succeeded");
    char model[64], url[128];
    snprintf(model, sizeof model, "%s", str(job, "model"));
    json_decref(job);

    /* a missing size, an unseen city, "no" as it was written */
    snprintf(url, sizeof url, "/v1/models/%s/predict", model);
    r = http_json(&server, "POST", url,
                  "{\"inputs\": [[55, \"rome\", \"yes\"], [null, \"tokyo\", "
                  "\"no\"], {\"city\": \"oslo\"}]}");
    expect_status(r, 200);
    assert_int_equal(json_array_size(json_object_get(r->json, "predictions")),
                     3);
    resp_free(r);
    r = http_json(&server, "POST", url,
                  "{\"inputs\": [[55, \"rome\", \"perhaps\"]]}");
    expect_status(r, 422);
    assert_non_null(strstr(r->body, "garden"));
    resp_free(r);

    /* an integer past int64 is valid JSON: a number out of the float32
     * range (it was a 503, "out of memory, try again": jansson refused it) */
    r = http_json(&server, "POST", url,
                  "{\"inputs\": [[411111111111111111111111111111111111111111"
                  "11111111, \"rome\", \"yes\"]]}");
    expect_status(r, 422);
    assert_non_null(strstr(r->body, "float32 range"));
    resp_free(r);

    /* what the network sees: the unseen city is all zeros */
    snprintf(url, sizeof url, "/v1/models/%s/transform", model);
    r = http_json(&server, "POST", url,
                  "{\"inputs\": [[null, \"tokyo\", \"no\"]]}");
    expect_status(r, 200);
    json_t *names = json_object_get(r->json, "feature_names");
    assert_string_equal(json_string_value(json_array_get(names, 1)),
                        "city=oslo");
    json_t *row = json_array_get(json_object_get(r->json, "transformed"), 0);
    assert_int_equal(json_array_size(row), 5);
    for (size_t j = 1; j <= 3; j++)
        assert_true(json_real_value(json_array_get(row, j)) == 0.0);
    resp_free(r);

    /* the model document names its raw columns */
    snprintf(url, sizeof url, "/v1/models/%s", model);
    r = http_get(&server, url);
    expect_status(r, 200);
    assert_string_equal(str(r->json, "preprocess"), "tabular");
    assert_int_equal(json_array_size(json_object_get(r->json, "columns")), 3);
    resp_free(r);
}

static void test_category_limit_is_422(void **state)
{
    (void)state;
    char dir[PATH_MAX], path[PATH_MAX + 8], part[PATH_MAX + 16];
    char text[4096];
    size_t n = (size_t)snprintf(text, sizeof text, "code,y\n");
    for (int i = 0; i < 60; i++)
        n += (size_t)snprintf(text + n, sizeof text - n, "c%d,%d\n", i, i % 2);
    temp_dir(dir);
    snprintf(path, sizeof path, "%s/codes.csv", dir);
    write_file(path, text, n);
    snprintf(part, sizeof part, "file=@%s", path);
    const char *parts[] = {"name=codes", "format=csv", "label_column=y", part,
                           NULL};
    resp *r = http_upload(&server, "/v1/datasets", parts);
    expect_status(r, 422);
    assert_non_null(strstr(r->body, "column \\\"code\\\" has more than 50"));
    assert_string_equal(str(r->json, "field"), "max_categories");
    resp_free(r);
    const char *raised[] = {"name=codes",        "format=csv", "label_column=y",
                            "max_categories=60", part,         NULL};
    r = http_upload(&server, "/v1/datasets", raised);
    expect_status(r, 201);
    resp_free(r);
    const char *too_many[] = {
        "name=codes",          "format=csv", "label_column=y",
        "max_categories=5000", part,         NULL};
    r = http_upload(&server, "/v1/datasets", too_many);
    expect_status(r, 422);
    assert_string_equal(str(r->json, "field"), "max_categories");
    resp_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mixed_csv_uploads),
        cmocka_unit_test(test_train_and_predict_raw_rows),
        cmocka_unit_test(test_category_limit_is_422),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
