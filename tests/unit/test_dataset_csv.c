/*
 * test_dataset_csv.c - ds_convert_csv: good files read back through
 * ty_dataset_open, and every way a CSV upload can be wrong, with the message
 * a person would need to fix it.
 */
#include "ds_testutil.h"
#include "models/data/tabular.h"

#include <math.h>

/* Converts text as a CSV file; returns the status, message in *err. */
static ty_status convert(const char *text, const char *label, ty_task task,
                         ty_err *err)
{
    const char *csv = dt_path(0, "in.csv");
    dt_write_str(csv, text);
    ty_err_clear(err);
    return ds_convert_csv(csv, label, task, dt_path(1, "out.tyds"), err);
}

/* Converts text, expecting success, and opens the result. */
static void convert_ok(const char *text, const char *label, ty_task task,
                       ty_dataset *ds)
{
    ty_err err;
    ty_status st = convert(text, label, task, &err);
    if (st != TY_OK)
        fail_msg("conversion failed: %s: %s", ty_status_name(st), err.msg);
    st = ty_dataset_open(dt_path(1, "out.tyds"), ds, &err);
    if (st != TY_OK)
        fail_msg("open failed: %s", err.msg);
}

/* Converts text, expecting failure with status want; the output must not be
 * left behind. */
static void convert_bad(const char *text, const char *label, ty_task task,
                        ty_status want, ty_err *err)
{
    ty_status st = convert(text, label, task, err);
    if (st != want)
        fail_msg("expected %s, got %s (%s)", ty_status_name(want),
                 ty_status_name(st), err->msg);
    assert_true(err->msg[0] != '\0');
    assert_false(fs_exists(dt_path(1, "out.tyds")));
}

static void test_classification_string_labels(void **state)
{
    (void)state;
    ty_dataset ds;
    convert_ok("sepal_length,sepal_width,species,petal_length\n"
               "5.1,3.5,setosa,1.4\n"
               "7.0,3.2,versicolor,4.7\n"
               "6.3,3.3,virginica,6.0\n"
               "4.9,3.0,setosa,1.4\n"
               "6.4,3.2,versicolor,-4.5e-1\n",
               "species", TY_TASK_CLASSIFICATION, &ds);
    assert_int_equal(ds.task, TY_TASK_CLASSIFICATION);
    assert_int_equal(ds.num_examples, 5);
    assert_int_equal(ds.ndim, 1);
    assert_int_equal(ds.shape[0], 3);
    assert_int_equal(ds.features, 3);
    assert_int_equal(ds.x_dtype, TY_DTYPE_F32);
    assert_int_equal(ds.y_dim, 1);
    assert_int_equal(ds.num_classes, 3);
    assert_null(ds.y_value);
    dt_assert_json(json_object_get(ds.meta, "classes"),
                   "[\"setosa\",\"versicolor\",\"virginica\"]");
    dt_assert_json(json_object_get(ds.meta, "feature_names"),
                   "[\"sepal_length\",\"sepal_width\",\"petal_length\"]");
    dt_assert_json(json_object_get(ds.meta, "input_shape"), "[3]");
    assert_string_equal(dt_meta_str(&ds, "label_column"), "species");
    assert_string_equal(dt_meta_str(&ds, "format"), "csv");
    assert_string_equal(dt_meta_str(&ds, "task"), "classification");
    assert_string_equal(dt_meta_str(&ds, "x_dtype"), "float32");
    assert_string_equal(dt_meta_str(&ds, "preprocess"), "standardize");
    assert_int_equal(dt_meta_int(&ds, "version"), 1);
    assert_int_equal(dt_meta_int(&ds, "num_examples"), 5);
    assert_int_equal(dt_meta_int(&ds, "features"), 3);
    assert_int_equal(dt_meta_int(&ds, "y_dim"), 1);
    assert_int_equal(dt_meta_int(&ds, "num_classes"), 3);
    assert_int_equal(dt_meta_int(&ds, "x_offset") % 64, 0);
    assert_int_equal(dt_meta_int(&ds, "y_offset") % 64, 0);

    const int32_t want_y[] = {0, 1, 2, 0, 1};
    for (int i = 0; i < 5; i++)
        assert_int_equal(ds.y_class[i], want_y[i]);
    float row[3];
    ty_dataset_example_f32(&ds, 0, row);
    assert_true(row[0] == 5.1f && row[1] == 3.5f && row[2] == 1.4f);
    ty_dataset_example_f32(&ds, 4, row);
    assert_true(row[0] == 6.4f && row[1] == 3.2f && row[2] == -0.45f);
    ty_dataset_close(&ds);
}

/* The labels of column "l" of text (x,l rows) become classes_json, and row
 * i's class index is want_y[i]. */
static void check_labels(const char *text, const char *classes_json,
                         const int32_t *want_y, size_t rows)
{
    ty_dataset ds;
    convert_ok(text, "l", TY_TASK_CLASSIFICATION, &ds);
    dt_assert_json(json_object_get(ds.meta, "classes"), classes_json);
    assert_int_equal(ds.num_examples, rows);
    assert_int_equal(ds.num_classes,
                     json_array_size(json_object_get(ds.meta, "classes")));
    assert_int_equal(dt_meta_int(&ds, "num_classes"), ds.num_classes);
    for (size_t i = 0; i < rows; i++)
        if (ds.y_class[i] != want_y[i])
            fail_msg("row %zu: class index %d, expected %d", i, ds.y_class[i],
                     want_y[i]);
    ty_dataset_close(&ds);
}

static void test_integer_labels_are_sorted_integers(void **state)
{
    (void)state;
    /* digits in the order a shuffled dataset shows them first */
    const int digits[] = {3, 9, 1, 4, 0, 7, 2, 8, 6, 5, 3, 0, 9};
    char text[256] = "x,l\n";
    int32_t want[13];
    for (int i = 0; i < 13; i++) {
        size_t used = strlen(text);
        snprintf(text + used, sizeof text - used, "%d,%d\n", i, digits[i]);
        want[i] = digits[i]; /* labels 0..9: class index i is label i */
    }
    check_labels(text, "[0,1,2,3,4,5,6,7,8,9]", want, 13);

    /* numerically, not as text; negative ones too; a quoted "3" is 3 */
    const int32_t y1[] = {2, 0, 2, 3, 1};
    check_labels("x,l\n1,3\n2,-20\n3,\"3\"\n4,10\n5,0\n", "[-20,0,3,10]", y1,
                 5);
    /* up to 2^53 - 1 */
    const int32_t y2[] = {1, 0};
    check_labels("x,l\n1,9007199254740991\n2,-9007199254740991\n",
                 "[-9007199254740991,9007199254740991]", y2, 2);
}

static void test_other_numeric_labels_sort_numerically_as_written(void **state)
{
    (void)state;
    /* not all integers: the strings as written, in numeric order (equal
     * values bytewise: "1" and "1.0" stay two classes) */
    const int32_t y1[] = {3, 2, 0, 4, 1, 2};
    check_labels("x,l\n1,2.5\n2,1.0\n3,-0.5\n4,1e1\n5,1\n6,1.0\n",
                 "[\"-0.5\",\"1\",\"1.0\",\"2.5\",\"1e1\"]", y1, 6);
    /* integers not written canonically are numbers of this kind: "01" and
     * "1" would otherwise become one class */
    const int32_t y2[] = {1, 0, 2};
    check_labels("x,l\n1,1\n2,01\n3,+2\n", "[\"01\",\"1\",\"+2\"]", y2, 3);
    const int32_t y3[] = {1, 0, 2};
    check_labels("x,l\n1,0\n2,-0\n3,7\n", "[\"-0\",\"0\",\"7\"]", y3, 3);
    /* past 2^53 - 1 a JSON integer is not exact everywhere */
    const int32_t y4[] = {1, 0};
    check_labels("x,l\n1,9007199254740992\n2,5\n",
                 "[\"5\",\"9007199254740992\"]", y4, 2);
}

static void test_text_labels_sort_by_code_point(void **state)
{
    (void)state;
    /* bytewise: capitals before small letters, a prefix first, UTF-8 after
     * ASCII in code point order (U+00E9 before U+4E2D) */
    const int32_t y1[] = {4, 3, 0, 2, 5, 1, 6, 3};
    check_labels(
        "x,l\n1,b\n2,ab\n3,B\n4,a\n5,\xc3\xa9\n6,Z\n7,\xe4\xb8\xad\n8,ab\n",
        "[\"B\",\"Z\",\"a\",\"ab\",\"b\",\"\\u00e9\",\"\\u4e2d\"]", y1, 8);
    /* one label that is not a number makes them all text: "10" before "2" */
    const int32_t y2[] = {2, 0, 1, 3};
    check_labels("x,l\n1,2\n2,1\n3,10\n4,x\n", "[\"1\",\"10\",\"2\",\"x\"]", y2,
                 4);
    /* blanks inside quotes are kept, so " 3" is text */
    const int32_t y3[] = {1, 0};
    check_labels("x,l\n1,3\n2,\" 3\"\n", "[\" 3\",\"3\"]", y3, 2);
}

/* The most classes there may be, all integers in shuffled order: sorted,
 * every index where it belongs. */
static void test_many_integer_classes(void **state)
{
    (void)state;
    const uint32_t n = TY_DS_MAX_CLASSES;
    size_t cap = (size_t)n * 16 + 16, len = 0;
    char *text = malloc(cap);
    assert_non_null(text);
    len += (size_t)snprintf(text + len, cap - len, "x,l\n");
    /* 7919 is prime, so i * 7919 mod n visits every label once */
    for (uint32_t i = 0; i < n; i++)
        len += (size_t)snprintf(text + len, cap - len, "%u,%llu\n", i,
                                (unsigned long long)i * 7919 % n * 3);
    ty_dataset ds;
    convert_ok(text, "l", TY_TASK_CLASSIFICATION, &ds);
    free(text);
    assert_int_equal(ds.num_classes, n);
    const json_t *classes = json_object_get(ds.meta, "classes");
    for (uint32_t c = 0; c < n; c += 997)
        assert_int_equal(json_integer_value(json_array_get(classes, c)), 3 * c);
    for (uint32_t i = 0; i < n; i++)
        if ((uint64_t)ds.y_class[i] != (uint64_t)i * 7919 % n)
            fail_msg("row %u: class index %d", i, ds.y_class[i]);
    ty_dataset_close(&ds);
}

static void test_regression(void **state)
{
    (void)state;
    ty_dataset ds;
    convert_ok("price,rooms,area\n250000,3,80.5\n1.5e5,2,55\n-3,1,20\n",
               "price", TY_TASK_REGRESSION, &ds);
    assert_int_equal(ds.task, TY_TASK_REGRESSION);
    assert_int_equal(ds.num_examples, 3);
    assert_int_equal(ds.features, 2);
    assert_int_equal(ds.num_classes, 0);
    assert_null(ds.y_class);
    assert_non_null(ds.y_value);
    assert_null(json_object_get(ds.meta, "classes"));
    assert_null(json_object_get(ds.meta, "num_classes"));
    assert_true(ds.y_value[0] == 250000.0f);
    assert_true(ds.y_value[1] == 150000.0f);
    assert_true(ds.y_value[2] == -3.0f);
    float row[2];
    ty_dataset_example_f32(&ds, 0, row);
    assert_true(row[0] == 3.0f && row[1] == 80.5f);
    dt_assert_json(json_object_get(ds.meta, "feature_names"),
                   "[\"rooms\",\"area\"]");
    ty_dataset_close(&ds);
}

static void test_quoted_fields(void **state)
{
    (void)state;
    ty_dataset ds;
    convert_ok("\"a\",\"the, label\",\"b \"\"quoted\"\"\"\n"
               "\" 1.5 \",\"red, dark\",2\n"
               "3,\"say \"\"hi\"\"\",\"4\"\n"
               "5 ,  \"two\nlines\"  , 6\n"
               "7,plain,8\n",
               "the, label", TY_TASK_CLASSIFICATION, &ds);
    assert_int_equal(ds.num_examples, 4);
    dt_assert_json(json_object_get(ds.meta, "feature_names"),
                   "[\"a\",\"b \\\"quoted\\\"\"]");
    dt_assert_json(json_object_get(ds.meta, "classes"),
                   "[\"plain\",\"red, dark\",\"say \\\"hi\\\"\","
                   "\"two\\nlines\"]");
    const int32_t want_y[] = {1, 2, 3, 0};
    for (int i = 0; i < 4; i++)
        assert_int_equal(ds.y_class[i], want_y[i]);
    float row[2];
    ty_dataset_example_f32(&ds, 0, row);
    assert_true(row[0] == 1.5f && row[1] == 2.0f);
    ty_dataset_example_f32(&ds, 2, row);
    assert_true(row[0] == 5.0f && row[1] == 6.0f);
    ty_dataset_example_f32(&ds, 3, row);
    assert_true(row[0] == 7.0f && row[1] == 8.0f);
    ty_dataset_close(&ds);
}

static void test_line_numbers_after_multiline_field(void **state)
{
    (void)state;
    ty_err err;
    /* a quoted feature cell over three lines (a category), then a bad
     * regression target */
    convert_bad("x,y\n1,\"a\nb\nc\"\n2,b\nzz,c\n", "x", TY_TASK_REGRESSION,
                TY_EFORMAT, &err);
    dt_assert_contains(err.msg, "line 6, column 1 (\"x\"): \"zz\" is not a "
                                "number");
}

static void test_crlf_bom_and_trailing_blank_lines(void **state)
{
    (void)state;
    ty_dataset ds;
    convert_ok("\xef\xbb\xbf"
               "f1,f2,target\r\n1,2,yes\r\n3,4,no\r\n\r\n  \r\n",
               "target", TY_TASK_CLASSIFICATION, &ds);
    assert_int_equal(ds.num_examples, 2);
    /* the BOM is not part of the first column's name */
    dt_assert_json(json_object_get(ds.meta, "feature_names"),
                   "[\"f1\",\"f2\"]");
    dt_assert_json(json_object_get(ds.meta, "classes"), "[\"no\",\"yes\"]");
    assert_int_equal(ds.y_class[0], 1);
    assert_int_equal(ds.y_class[1], 0);
    float row[2];
    ty_dataset_example_f32(&ds, 1, row);
    assert_true(row[0] == 3.0f && row[1] == 4.0f);
    ty_dataset_close(&ds);
}

static void test_cr_only_and_no_final_newline(void **state)
{
    (void)state;
    ty_dataset ds;
    convert_ok("a,b\r1,x\r2,y", "b", TY_TASK_CLASSIFICATION, &ds);
    assert_int_equal(ds.num_examples, 2);
    dt_assert_json(json_object_get(ds.meta, "classes"), "[\"x\",\"y\"]");
    ty_dataset_close(&ds);
}

static void test_number_syntax(void **state)
{
    (void)state;
    ty_dataset ds;
    convert_ok("a,b,c,d,e,l\n"
               "+.5,5.,-1E3,\t 2e-2 ,007,k\n",
               "l", TY_TASK_CLASSIFICATION, &ds);
    float row[5];
    ty_dataset_example_f32(&ds, 0, row);
    assert_true(row[0] == 0.5f && row[1] == 5.0f && row[2] == -1000.0f &&
                row[3] == 0.02f && row[4] == 7.0f);
    ty_dataset_close(&ds);

    /* a cell that is not a number makes its column categorical: the
     * number cells are categories too, as written */
    static const char *const bad[] = {"0x10", "1.2.3", "1e", "3abc", ".",
                                      "-",    "1 2",   "e5", "1e+"};
    for (size_t i = 0; i < TY_ARRAY_LEN(bad); i++) {
        char text[128], want[128];
        snprintf(text, sizeof text, "a,l\n1,k\n%s,k\n", bad[i]);
        convert_ok(text, "l", TY_TASK_CLASSIFICATION, &ds);
        const json_t *col =
            json_array_get(json_object_get(ds.meta, "columns"), 0);
        assert_string_equal(json_string_value(json_object_get(col, "type")),
                            "categorical");
        snprintf(want, sizeof want, "[\"%s\",\"1\"]", bad[i]);
        if (strcmp(bad[i], "1") < 0)
            dt_assert_json(json_object_get(col, "categories"), want);
        assert_int_equal(ds.features, 2);
        assert_string_equal(
            json_string_value(json_object_get(ds.meta, "preprocess")),
            "tabular");
        ty_dataset_close(&ds);
    }
}

/* Many rows, so records straddle the reader's 64 KiB chunks (including a
 * CRLF split across two of them). */
static void test_many_rows_across_chunks(void **state)
{
    (void)state;
    const int rows = 30000;
    size_t cap = (size_t)rows * 40 + 64, len = 0;
    char *text = malloc(cap);
    assert_non_null(text);
    int split = 0;
    len += (size_t)snprintf(text + len, cap - len, "id,half,cls\r\n");
    for (int i = 0; i < rows; i++) {
        len += (size_t)snprintf(text + len, cap - len, "%d,%d.5,c%d", i, i / 2,
                                i % 7);
        /* pad the first row that would cross byte 65536 (trailing blanks
         * are dropped) so that its CR is the chunk's last byte */
        if (!split && len + 24 > 65536) {
            while (len < 65535)
                text[len++] = ' ';
            split = 1;
        }
        len += (size_t)snprintf(text + len, cap - len, "\r\n");
    }
    assert_memory_equal(text + 65535, "\r\n", 2);
    ty_dataset ds;
    convert_ok(text, "cls", TY_TASK_CLASSIFICATION, &ds);
    free(text);
    assert_int_equal(ds.num_examples, rows);
    assert_int_equal(ds.num_classes, 7);
    for (int i = 0; i < rows; i += 997) {
        float row[2];
        ty_dataset_example_f32(&ds, (uint32_t)i, row);
        assert_true(row[0] == (float)i);
        assert_true(row[1] == (float)(i / 2) + 0.5f);
        assert_int_equal(ds.y_class[i], i % 7);
    }
    ty_dataset_close(&ds);
}

static void test_ragged_row(void **state)
{
    (void)state;
    ty_err err;
    convert_bad("a,b,c,d,label\n1,2,3,4,x\n1,2,3,4,y\n1,2,3,4,x\n1,2,x\n",
                "label", TY_TASK_CLASSIFICATION, TY_EFORMAT, &err);
    assert_string_equal(err.msg, "line 5 has 3 columns but the header has 5");
    assert_string_equal(err.field, "file");

    convert_bad("a,label\n1,x,3\n", "label", TY_TASK_CLASSIFICATION, TY_EFORMAT,
                &err);
    assert_string_equal(err.msg, "line 2 has 3 columns but the header has 2");
}

/* A word among numbers makes a column categorical; with more distinct
 * values than the limit that is a 422 naming the column, the first word's
 * line and the upload parameter that raises the limit. */
static void test_non_numeric_cell(void **state)
{
    (void)state;
    ty_err err;
    char text[4096];
    snprintf(text, sizeof text,
             "sepal_length,sepal_width,petal_width,species\n");
    for (int i = 2; i < 62; i++)
        snprintf(text + strlen(text), sizeof text - strlen(text), "1,2,%d,a\n",
                 i);
    strcat(text, "1,2,abc,a\n");
    convert_bad(text, "species", TY_TASK_CLASSIFICATION, TY_EFORMAT, &err);
    assert_string_equal(err.field, "max_categories");
    dt_assert_contains(err.msg, "column \"petal_width\" has more than 50 "
                                "distinct values");
    dt_assert_contains(err.msg, "line 62 holds a value that is not a number");
    /* raised, it converts: 61 one-hot features and the two numbers */
    const char *in = dt_path(0, "in.csv"), *out = dt_path(1, "out.tyds");
    dt_write_str(in, text);
    assert_int_equal(ds_convert_csv_ex(in, "species", TY_TASK_CLASSIFICATION, 0,
                                       61, out, &err),
                     TY_OK);
    ty_dataset ds;
    assert_int_equal(ty_dataset_open(out, &ds, &err), TY_OK);
    assert_int_equal(ds.features, 63);
    ty_dataset_close(&ds);
    assert_int_equal(ds_convert_csv_ex(in, "species", TY_TASK_CLASSIFICATION, 0,
                                       TY_DS_CATEGORIES_MAX + 1, out, &err),
                     TY_EINVAL);
    assert_string_equal(err.field, "max_categories");
}

/* Empty cells are missing values (NaN in x, counted per column); NaN and
 * Inf text are words (the column is categorical); a column with no value
 * at all is an error; regression targets must still be finite numbers. */
static void test_empty_cell_nan_inf(void **state)
{
    (void)state;
    ty_err err;
    ty_dataset ds;
    convert_ok("a,b,l\n1,,x\n2,3.5,y\n", "l", TY_TASK_CLASSIFICATION, &ds);
    assert_string_equal(
        json_string_value(json_object_get(ds.meta, "preprocess")), "tabular");
    dt_assert_json(json_object_get(ds.meta, "columns"),
                   "[{\"name\":\"a\",\"type\":\"numeric\",\"missing\":0},"
                   "{\"name\":\"b\",\"type\":\"numeric\",\"missing\":1}]");
    float row[2];
    ty_dataset_example_f32(&ds, 0, row);
    assert_true(row[0] == 1.0f && isnan(row[1]));
    ty_dataset_close(&ds);
    convert_bad("a,b,l\n1,,x\n", "l", TY_TASK_CLASSIFICATION, TY_EFORMAT, &err);
    assert_string_equal(err.msg, "column \"b\" has no values (every cell is "
                                 "empty); leave it out of the file");
    convert_ok("a,b,l\n1,NaN,x\n-inf,1e39,y\n", "l", TY_TASK_CLASSIFICATION,
               &ds);
    dt_assert_json(json_object_get(ds.meta, "feature_names"),
                   "[\"a=-inf\",\"a=1\",\"b=1e39\",\"b=NaN\"]");
    ty_dataset_close(&ds);
    /* a regression target is checked as before */
    convert_bad("a,y\n1,2\n2,nan\n", "y", TY_TASK_REGRESSION, TY_EFORMAT, &err);
    dt_assert_contains(err.msg, "line 3, column 2 (\"y\"): \"nan\" is not a "
                                "finite number");
    convert_bad("a,y\n1,two\n", "y", TY_TASK_REGRESSION, TY_EFORMAT, &err);
    dt_assert_contains(err.msg, "\"two\" is not a number");
    convert_bad("a,y\n1,\n", "y", TY_TASK_REGRESSION, TY_EFORMAT, &err);
    dt_assert_contains(err.msg, "the cell is empty");
    /* and an empty class label is not a class */
    convert_bad("a,y\n1,\n", "y", TY_TASK_CLASSIFICATION, TY_EFORMAT, &err);
    dt_assert_contains(err.msg, "line 2, column 2 (\"y\"): the label is empty");
}

static void test_missing_label_column(void **state)
{
    (void)state;
    ty_err err;
    convert_bad("a,b,c\n1,2,3\n", "species", TY_TASK_CLASSIFICATION, TY_EFORMAT,
                &err);
    assert_string_equal(err.msg, "label column \"species\" is not in the "
                                 "header (columns: a, b, c)");
    assert_string_equal(err.field, "label_column");

    /* a wide header is listed in part */
    char text[4096] = "", name[64];
    for (int i = 0; i < 60; i++) {
        snprintf(name, sizeof name, "%sa_rather_long_column_name_%02d",
                 i ? "," : "", i);
        strcat(text, name);
    }
    strcat(text, "\n");
    convert_bad(text, "species", TY_TASK_CLASSIFICATION, TY_EFORMAT, &err);
    dt_assert_contains(err.msg, "(columns: a_rather_long_column_name_00, "
                                "a_rather_long_column_name_01, ");
    dt_assert_contains(err.msg, ", ...)");
    assert_true(strlen(err.msg) < 420);
}

static void test_binary_file_is_named_as_such(void **state)
{
    (void)state;
    ty_err err;
    /* Bytes of a gzip file, with no comma and no valid UTF-8. */
    convert_bad("\x1f\x8b\x08\x00\xde\xad\tbe\xef\n\x01\x02", "l",
                TY_TASK_CLASSIFICATION, TY_EFORMAT, &err);
    assert_non_null(strstr(err.msg, "not a text CSV file"));
    assert_null(strstr(err.msg, "tabs"));
}

static void test_header_problems(void **state)
{
    (void)state;
    ty_err err;
    convert_bad("a,b,a,l\n1,2,3,x\n", "l", TY_TASK_CLASSIFICATION, TY_EFORMAT,
                &err);
    assert_string_equal(err.msg, "line 1: the column name \"a\" appears twice "
                                 "(columns 1 and 3)");
    convert_bad("a,,l\n1,2,x\n", "l", TY_TASK_CLASSIFICATION, TY_EFORMAT, &err);
    assert_string_equal(err.msg, "line 1, column 2: the column name is empty");
    convert_bad("label\nx\n", "label", TY_TASK_CLASSIFICATION, TY_EFORMAT,
                &err);
    dt_assert_contains(err.msg, "only one column");
    convert_bad("a;b;label\n1;2;x\n", "label", TY_TASK_CLASSIFICATION,
                TY_EFORMAT, &err);
    dt_assert_contains(err.msg, "seems to use ';'");
    convert_bad("a,\xff\xfe,l\n1,2,x\n", "l", TY_TASK_CLASSIFICATION,
                TY_EFORMAT, &err);
    dt_assert_contains(err.msg, "column 2: the column name is not valid UTF-8");
}

static void test_empty_and_header_only(void **state)
{
    (void)state;
    ty_err err;
    convert_bad("", "l", TY_TASK_CLASSIFICATION, TY_EFORMAT, &err);
    dt_assert_contains(err.msg, "the file is empty");
    convert_bad("\xef\xbb\xbf\n\n", "l", TY_TASK_CLASSIFICATION, TY_EFORMAT,
                &err);
    dt_assert_contains(err.msg, "the file is empty");
    convert_bad("a,l\n", "l", TY_TASK_CLASSIFICATION, TY_EFORMAT, &err);
    assert_string_equal(err.msg, "the file has a header but no data rows");
    convert_bad("a,l\r\n\r\n", "l", TY_TASK_REGRESSION, TY_EFORMAT, &err);
    assert_string_equal(err.msg, "the file has a header but no data rows");
}

static void test_blank_line_in_the_middle(void **state)
{
    (void)state;
    ty_err err;
    convert_bad("a,l\n1,x\n\n2,y\n", "l", TY_TASK_CLASSIFICATION, TY_EFORMAT,
                &err);
    assert_string_equal(err.msg, "line 3 is blank (blank lines are allowed "
                                 "only at the end of the file)");
    convert_bad("\na,l\n1,x\n", "l", TY_TASK_CLASSIFICATION, TY_EFORMAT, &err);
    dt_assert_contains(err.msg, "line 1 is blank");
}

static void test_quote_errors(void **state)
{
    (void)state;
    ty_err err;
    convert_bad("a,l\n1,x\n2,\"open\n3,y\n", "l", TY_TASK_CLASSIFICATION,
                TY_EFORMAT, &err);
    assert_string_equal(err.msg, "line 3, column 2: the quoted field that "
                                 "starts here is not closed before the end "
                                 "of the file");
    convert_bad("a,l\n1,\"x\"y\n", "l", TY_TASK_CLASSIFICATION, TY_EFORMAT,
                &err);
    dt_assert_contains(err.msg, "line 2, column 2: unexpected 'y' after the "
                                "closing quote");
}

static void test_binary_and_limits(void **state)
{
    (void)state;
    ty_err err;
    const char nul[] = "a,l\n1,x\0y\n";
    const char *csv = dt_path(0, "in.csv");
    dt_write(csv, nul, sizeof nul - 1);
    assert_int_equal(ds_convert_csv(csv, "l", TY_TASK_CLASSIFICATION,
                                    dt_path(1, "out.tyds"), &err),
                     TY_EFORMAT);
    dt_assert_contains(err.msg, "line 2 contains a NUL byte");

    /* a label longer than TY_DS_MAX_LABEL_LEN */
    char text[TY_DS_MAX_LABEL_LEN + 64];
    int n = snprintf(text, sizeof text, "a,l\n1,");
    memset(text + n, 'z', TY_DS_MAX_LABEL_LEN + 1);
    strcpy(text + n + TY_DS_MAX_LABEL_LEN + 1, "\n");
    convert_bad(text, "l", TY_TASK_CLASSIFICATION, TY_ETOOBIG, &err);
    dt_assert_contains(err.msg,
                       "the label is 257 bytes long; the limit is 256");

    /* a line longer than TY_DS_MAX_LINE */
    size_t big = TY_DS_MAX_LINE + 100;
    char *huge = malloc(big + 16);
    assert_non_null(huge);
    strcpy(huge, "a,l\n1,");
    memset(huge + 6, 'q', big);
    strcpy(huge + 6 + big, "\n");
    convert_bad(huge, "l", TY_TASK_CLASSIFICATION, TY_ETOOBIG, &err);
    free(huge);
    assert_string_equal(err.msg, "line 2 is longer than 1048576 bytes");

    /* exactly TY_DS_MAX_LINE bytes is fine, with or without a final line
     * break; one more is not */
    for (int final_newline = 0; final_newline < 2; final_newline++) {
        huge = malloc(TY_DS_MAX_LINE + 16);
        assert_non_null(huge);
        strcpy(huge, "a,y\n1,");
        memset(huge + 6, '0', TY_DS_MAX_LINE - 3);
        strcpy(huge + 6 + TY_DS_MAX_LINE - 3, final_newline ? "7\n" : "7");
        ty_dataset ds;
        convert_ok(huge, "y", TY_TASK_REGRESSION, &ds);
        assert_true(ds.y_value[0] == 7.0f);
        ty_dataset_close(&ds);
        strcpy(huge + 6 + TY_DS_MAX_LINE - 3, "07");
        convert_bad(huge, "y", TY_TASK_REGRESSION, TY_ETOOBIG, &err);
        free(huge);
    }

    /* labels that are not UTF-8 cannot become JSON classes */
    convert_bad("a,l\n1,caf\xe9\n", "l", TY_TASK_CLASSIFICATION, TY_EFORMAT,
                &err);
    dt_assert_contains(err.msg, "the label is not valid UTF-8");
}

static void test_too_many_classes(void **state)
{
    (void)state;
    const uint32_t rows = TY_DS_MAX_CLASSES + 1;
    size_t cap = (size_t)rows * 16 + 16, len = 0;
    char *text = malloc(cap);
    assert_non_null(text);
    len += (size_t)snprintf(text + len, cap - len, "x,id\n");
    for (uint32_t i = 0; i < rows; i++)
        len += (size_t)snprintf(text + len, cap - len, "1,u%u\n", i);
    ty_err err;
    convert_bad(text, "id", TY_TASK_CLASSIFICATION, TY_ETOOBIG, &err);
    free(text);
    dt_assert_contains(err.msg, "line 100002, column 2 (\"id\"): more than "
                                "100000 distinct labels");
}

static void test_bad_arguments_and_cleanup(void **state)
{
    (void)state;
    ty_err err;
    const char *csv = dt_path(0, "in.csv");
    const char *out = dt_path(1, "out.tyds");
    dt_write_str(csv, "a,l\n1,x\n");
    assert_int_equal(
        ds_convert_csv(csv, NULL, TY_TASK_CLASSIFICATION, out, &err),
        TY_EINVAL);
    assert_string_equal(err.field, "label_column");
    assert_int_equal(ds_convert_csv(csv, "l", (ty_task)7, out, &err),
                     TY_EINVAL);
    assert_int_equal(ds_convert_csv(dt_path(2, "missing.csv"), "l",
                                    TY_TASK_CLASSIFICATION, out, &err),
                     TY_EIO);
    assert_string_equal(err.field, "file");
    assert_int_equal(
        ds_convert_csv(tu_tmpdir, "l", TY_TASK_CLASSIFICATION, out, &err),
        TY_EIO);
    assert_string_equal(err.msg, "file is not a regular file");

    /* a failed conversion removes whatever was at out_path */
    dt_write_str(out, "stale");
    dt_write_str(csv, "a,l\n1,x\n2\n");
    assert_int_equal(
        ds_convert_csv(csv, "l", TY_TASK_CLASSIFICATION, out, &err),
        TY_EFORMAT);
    assert_false(fs_exists(out));

    /* an output directory that does not exist is an I/O error */
    assert_int_equal(ds_convert_csv(csv, "l", TY_TASK_CLASSIFICATION,
                                    dt_path(3, "no/such/dir/out.tyds"), &err),
                     TY_EFORMAT);
    dt_write_str(csv, "a,l\n1,x\n");
    assert_int_equal(ds_convert_csv(csv, "l", TY_TASK_CLASSIFICATION,
                                    dt_path(3, "no/such/dir/out.tyds"), &err),
                     TY_EIO);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_classification_string_labels),
        cmocka_unit_test(test_integer_labels_are_sorted_integers),
        cmocka_unit_test(test_other_numeric_labels_sort_numerically_as_written),
        cmocka_unit_test(test_text_labels_sort_by_code_point),
        cmocka_unit_test(test_many_integer_classes),
        cmocka_unit_test(test_regression),
        cmocka_unit_test(test_quoted_fields),
        cmocka_unit_test(test_line_numbers_after_multiline_field),
        cmocka_unit_test(test_crlf_bom_and_trailing_blank_lines),
        cmocka_unit_test(test_cr_only_and_no_final_newline),
        cmocka_unit_test(test_number_syntax),
        cmocka_unit_test(test_many_rows_across_chunks),
        cmocka_unit_test(test_ragged_row),
        cmocka_unit_test(test_non_numeric_cell),
        cmocka_unit_test(test_empty_cell_nan_inf),
        cmocka_unit_test(test_missing_label_column),
        cmocka_unit_test(test_binary_file_is_named_as_such),
        cmocka_unit_test(test_header_problems),
        cmocka_unit_test(test_empty_and_header_only),
        cmocka_unit_test(test_blank_line_in_the_middle),
        cmocka_unit_test(test_quote_errors),
        cmocka_unit_test(test_binary_and_limits),
        cmocka_unit_test(test_too_many_classes),
        cmocka_unit_test(test_bad_arguments_and_cleanup),
    };
    return cmocka_run_group_tests(tests, tu_tmpdir_setup, tu_tmpdir_teardown);
}
