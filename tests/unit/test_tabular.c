/*
 * test_tabular.c - typed CSV columns (models/data/tabular.c) and the
 * "tabular" preprocessing (models/preprocess_tab.c): how cells are typed
 * (numbers, booleans, categories, missing), the category limit, how raw
 * cells are encoded (an unseen category is all zeros), how a dataset's
 * columns map onto a model's, and the model metadata's round trip.
 */
#include "ds_testutil.h"
#include "models/data/tabular.h"
#include "models/nn_internal.h"

#include <math.h>

/* Converts text (label column "y", classification) and opens it. */
static void open_csv(const char *text, uint32_t max_categories, ty_dataset *ds)
{
    const char *in = dt_path(0, "in.csv"), *out = dt_path(1, "out.tyds");
    ty_err err = {0};
    dt_write_str(in, text);
    ty_status st = ds_convert_csv_ex(in, "y", TY_TASK_CLASSIFICATION, 0,
                                     max_categories, out, &err);
    if (st != TY_OK)
        fail_msg("conversion failed: %s", err.msg);
    assert_int_equal(ty_dataset_open(out, ds, &err), TY_OK);
}

static void test_words(void **state)
{
    (void)state;
    assert_int_equal(ds_bool_word("TRUE", 4), 1);
    assert_int_equal(ds_bool_word(" yes ", 5), 1);
    assert_int_equal(ds_bool_word("False", 5), 0);
    assert_int_equal(ds_bool_word("no", 2), 0);
    assert_int_equal(ds_bool_word("1", 1), -1);
    assert_int_equal(ds_bool_word("t", 1), -1);
    assert_int_equal(ds_bool_word("nope", 4), -1);
    float f = 0;
    assert_int_equal(ds_number_f32(" 2.5e1", 6, &f), DS_NUM_OK);
    assert_true(f == 25.0f);
    /* not NUL-terminated at len: the rest is not read */
    assert_int_equal(ds_number_f32("12345", 2, &f), DS_NUM_OK);
    assert_true(f == 12.0f);
    assert_int_equal(ds_number_f32("", 0, &f), DS_NUM_EMPTY);
    assert_int_equal(ds_number_f32("nan", 3, &f), DS_NUM_NOT_FINITE);
    assert_int_equal(ds_number_f32("1e40", 4, &f), DS_NUM_RANGE);
    assert_int_equal(ds_number_f32("rome", 4, &f), DS_NUM_SYNTAX);
}

/* Each type, missing cells counted, categories sorted by byte value, the
 * one-hot layout, and booleans as 0/1. */
static void test_types(void **state)
{
    (void)state;
    ty_dataset ds;
    open_csv("age,city,member,y\n"
             "30,rome,true,a\n"
             ",Zürich,NO,b\n"
             "41.5,berlin,,a\n"
             "22,rome,Yes,b\n"
             "7,\"\",false,a\n",
             0, &ds);
    dt_assert_json(json_object_get(ds.meta, "columns"),
                   "[{\"name\":\"age\",\"type\":\"numeric\",\"missing\":1},"
                   "{\"name\":\"city\",\"type\":\"categorical\",\"categories\":"
                   "[\"Zürich\",\"berlin\",\"rome\"],\"missing\":1},"
                   "{\"name\":\"member\",\"type\":\"boolean\",\"missing\":1}]");
    dt_assert_json(json_object_get(ds.meta, "feature_names"),
                   "[\"age\",\"city=Zürich\",\"city=berlin\",\"city=rome\","
                   "\"member\"]");
    assert_string_equal(dt_meta_str(&ds, "preprocess"), "tabular");
    assert_int_equal(ds.features, 5);
    float r[5];
    ty_dataset_example_f32(&ds, 0, r);
    assert_true(r[0] == 30.0f && r[1] == 0 && r[2] == 0 && r[3] == 1 &&
                r[4] == 1.0f);
    ty_dataset_example_f32(&ds, 1, r);
    assert_true(isnan(r[0]) && r[1] == 1 && r[4] == 0.0f);
    ty_dataset_example_f32(&ds, 2, r);
    assert_true(r[0] == 41.5f && r[2] == 1 && isnan(r[4]));
    /* a missing category is all zeros */
    ty_dataset_example_f32(&ds, 4, r);
    assert_true(r[1] == 0 && r[2] == 0 && r[3] == 0 && r[4] == 0.0f);
    ty_dataset_close(&ds);

    /* numeric and complete: stored as before */
    open_csv("a,b,y\n1,2,x\n3,4,z\n", 0, &ds);
    assert_string_equal(dt_meta_str(&ds, "preprocess"), "standardize");
    dt_assert_json(json_object_get(ds.meta, "feature_names"), "[\"a\",\"b\"]");
    ty_dataset_close(&ds);
}

/* The limit is per column, counts distinct values, and may be raised. */
static void test_category_limit(void **state)
{
    (void)state;
    const char *in = dt_path(0, "in.csv"), *out = dt_path(1, "out.tyds");
    dt_write_str(in, "c,y\nu,1\nv,1\nw,1\nu,1\n");
    ty_err err = {0};
    assert_int_equal(
        ds_convert_csv_ex(in, "y", TY_TASK_CLASSIFICATION, 0, 2, out, &err),
        TY_EFORMAT);
    assert_string_equal(err.field, "max_categories");
    dt_assert_contains(err.msg, "column \"c\" has more than 2 distinct values");
    dt_assert_contains(err.msg, "line 2 holds a value that is not a number");
    assert_false(fs_exists(out));
    /* a cell that is not UTF-8 (a category) is named by its line and its
     * column in the file, the label's column counted */
    dt_write_str(in, "y,a,c\n1,2,x\n1,3,\xff\n");
    assert_int_equal(
        ds_convert_csv_ex(in, "y", TY_TASK_CLASSIFICATION, 0, 0, out, &err),
        TY_EFORMAT);
    assert_string_equal(err.msg, "line 3, column 3: the cell is not valid "
                                 "UTF-8 (save the file as UTF-8)");
    ty_dataset ds;
    open_csv("c,y\nu,1\nv,1\nw,1\nu,1\n", 3, &ds);
    assert_int_equal(ds.features, 3);
    ty_dataset_close(&ds);
}

static void schema_of(ds_tab_schema *s, const char *json)
{
    json_t *cols = json_loads(json, 0, NULL);
    ty_err err = {0};
    assert_non_null(cols);
    if (ds_tab_schema_init(s, cols, &err) != TY_OK)
        fail_msg("schema: %s", err.msg);
    json_decref(cols);
}

#define SCHEMA                                                               \
    "[{\"name\":\"age\",\"type\":\"numeric\"},"                              \
    "{\"name\":\"city\",\"type\":\"categorical\",\"categories\":[\"paris\"," \
    "\"rome\"]},{\"name\":\"member\",\"type\":\"boolean\"}]"

/* Raw JSON rows: arrays and objects, numbers as text, null and "" missing,
 * an unseen category all zeros; errors name the cell. */
static void test_encode_json(void **state)
{
    (void)state;
    ds_tab_schema s;
    schema_of(&s, SCHEMA);
    assert_int_equal(s.width, 4);
    float x[4];
    ty_err err = {0};
    json_t *row = json_loads("[\"41\", \"rome\", true]", 0, NULL);
    assert_int_equal(ds_tab_encode_json(&s, row, x, "inputs[0]", &err), TY_OK);
    assert_true(x[0] == 41.0f && x[1] == 0 && x[2] == 1 && x[3] == 1.0f);
    json_decref(row);
    row = json_loads("{\"city\": \"tokyo\", \"member\": \"no\"}", 0, NULL);
    assert_int_equal(ds_tab_encode_json(&s, row, x, "inputs[1]", &err), TY_OK);
    assert_true(isnan(x[0]) && x[1] == 0 && x[2] == 0 && x[3] == 0.0f);
    json_decref(row);
    row = json_loads("[null, \"\", null]", 0, NULL);
    assert_int_equal(ds_tab_encode_json(&s, row, x, "inputs[2]", &err), TY_OK);
    assert_true(isnan(x[0]) && x[1] == 0 && x[2] == 0 && isnan(x[3]));
    json_decref(row);

    row = json_loads("[1, \"rome\"]", 0, NULL);
    assert_int_equal(ds_tab_encode_json(&s, row, x, "inputs[3]", &err),
                     TY_EINVAL);
    dt_assert_contains(err.msg, "inputs[3] has 2 values; the model takes rows "
                                "of 3 columns");
    json_decref(row);
    row = json_loads("[\"old\", \"rome\", true]", 0, NULL);
    assert_int_equal(ds_tab_encode_json(&s, row, x, "inputs[4]", &err),
                     TY_EINVAL);
    assert_string_equal(err.field, "inputs[4][0]");
    dt_assert_contains(err.msg, "column \"age\", numeric");
    json_decref(row);
    row = json_loads("[1, \"rome\", \"maybe\"]", 0, NULL);
    assert_int_equal(ds_tab_encode_json(&s, row, x, "inputs[5]", &err),
                     TY_EINVAL);
    dt_assert_contains(err.msg, "expected true, false, yes, no");
    json_decref(row);
    row = json_loads("{\"agee\": 3}", 0, NULL);
    assert_int_equal(ds_tab_encode_json(&s, row, x, "inputs[6]", &err),
                     TY_EINVAL);
    dt_assert_contains(err.msg, "the model has no column \"agee\"");
    json_decref(row);
    row = json_loads("[1, 2.5, true]", 0, NULL);
    assert_int_equal(ds_tab_encode_json(&s, row, x, "inputs[7]", &err),
                     TY_EINVAL);
    dt_assert_contains(err.msg, "expected a category as a string");
    json_decref(row);
    ds_tab_schema_free(&s);
}

/* A dataset's columns onto a model's: by name, categories by text. */
static void test_remap(void **state)
{
    (void)state;
    ds_tab_schema m, d;
    int64_t src[4];
    int identity = 0;
    ty_err err = {0};
    schema_of(&m, SCHEMA);
    schema_of(&d, SCHEMA);
    assert_int_equal(ds_tab_remap(&m, &d, src, &identity, &err), TY_OK);
    assert_true(identity);
    ds_tab_schema_free(&d);
    /* reordered, a category the model lacks, one the data lacks */
    schema_of(&d,
              "[{\"name\":\"member\",\"type\":\"numeric\"},"
              "{\"name\":\"city\",\"type\":\"categorical\",\"categories\":"
              "[\"oslo\",\"rome\"]},{\"name\":\"age\",\"type\":\"numeric\"}]");
    assert_int_equal(ds_tab_remap(&m, &d, src, &identity, &err), TY_OK);
    assert_false(identity);
    assert_true(src[0] == 3 && src[1] == -1 && src[2] == 2 && src[3] == 0);
    ds_tab_schema_free(&d);
    schema_of(&d, "[{\"name\":\"age\",\"type\":\"numeric\"},"
                  "{\"name\":\"city\",\"type\":\"numeric\"},"
                  "{\"name\":\"member\",\"type\":\"boolean\"}]");
    assert_int_equal(ds_tab_remap(&m, &d, src, &identity, &err), TY_EINVAL);
    dt_assert_contains(err.msg, "column \"city\" is categorical in the model "
                                "but numeric in the data");
    ds_tab_schema_free(&d);
    schema_of(&d, "[{\"name\":\"age\",\"type\":\"numeric\"}]");
    assert_int_equal(ds_tab_remap(&m, &d, src, &identity, &err), TY_EINVAL);
    dt_assert_contains(err.msg, "the data has no column \"city\"");
    ds_tab_schema_free(&d);
    ds_tab_schema_free(&m);
}

static void test_schema_errors(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "[]",
        "[{\"name\":\"a\"}]",
        "[{\"name\":\"a\",\"type\":\"text\"}]",
        "[{\"name\":\"a\",\"type\":\"numeric\"},{\"name\":\"a\",\"type\":"
        "\"numeric\"}]",
        "[{\"name\":\"a\",\"type\":\"categorical\"}]",
        "[{\"name\":\"a\",\"type\":\"categorical\",\"categories\":[\"b\","
        "\"a\"]}]",
    };
    for (size_t i = 0; i < TY_ARRAY_LEN(bad); i++) {
        ds_tab_schema s;
        ty_err err = {0};
        json_t *cols = json_loads(bad[i], 0, NULL);
        assert_non_null(cols);
        if (ds_tab_schema_init(&s, cols, &err) != TY_EFORMAT)
            fail_msg("case %zu was taken", i);
        json_decref(cols);
    }
}

/* Statistics of a column with a missing cell, as scikit-learn's
 * SimpleImputer(mean) + StandardScaler; the preprocessing's JSON (the
 * model's metadata) read back gives the same doubles and inputs. */
static void test_preprocess_round_trip(void **state)
{
    (void)state;
    ty_dataset ds;
    open_csv("v,c,k,y\n1,a,1,x\n,b,1,z\n3,a,1,x\n", 0, &ds);
    nn_preproc pp, back;
    ty_err err = {0};
    assert_int_equal(nn_preproc_fit(&pp, "tabular", &ds, NULL, 3, &err), TY_OK);
    assert_int_equal(ds.features, 4);
    assert_true(pp.tab_impute[0] == 2.0 && pp.tab_mean[0] == 2.0);
    assert_true(pp.tab_std[0] == sqrt(2.0 / 3.0));
    /* a constant column is left unscaled; one-hot features are copied */
    assert_true(pp.tab_std[3] == 1.0 && pp.tab_std[1] == 0.0);
    json_t *j = nn_preproc_to_json(&pp);
    char *text = json_dumps(j, JSON_COMPACT);
    json_t *read = json_loads(text, 0, NULL);
    assert_int_equal(nn_preproc_from_json(&back, read, 4, &err), TY_OK);
    for (int f = 0; f < 4; f++)
        assert_true(back.tab_impute[f] == pp.tab_impute[f] &&
                    back.tab_mean[f] == pp.tab_mean[f] &&
                    back.tab_std[f] == pp.tab_std[f]);
    float raw[4] = {NAN, 0, 1, 1}, a[4], b[4];
    nn_preproc_apply(&pp, a, raw, 1);
    nn_preproc_apply(&back, b, raw, 1);
    assert_memory_equal(a, b, sizeof a);
    assert_true(a[0] == 0.0f && a[1] == 0.0f && a[2] == 1.0f && a[3] == 0.0f);
    /* a model's preprocessing that does not fit its inputs is refused */
    nn_preproc_free(&back);
    assert_int_equal(nn_preproc_from_json(&back, read, 5, &err), TY_EFORMAT);
    free(text);
    json_decref(j);
    json_decref(read);
    nn_preproc_free(&pp);
    ty_dataset_close(&ds);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_words),
        cmocka_unit_test(test_types),
        cmocka_unit_test(test_category_limit),
        cmocka_unit_test(test_encode_json),
        cmocka_unit_test(test_remap),
        cmocka_unit_test(test_schema_errors),
        cmocka_unit_test(test_preprocess_round_trip),
    };
    return cmocka_run_group_tests(tests, tu_tmpdir_setup, tu_tmpdir_teardown);
}
