/*
 * test_dataset_noecho.c - DS_CONVERT_NO_ECHO, for files fetched from URLs:
 * every CSV and IDX error that would quote the file (its first line, column
 * names, cells, magic number) still says what is wrong, but without a byte
 * of it. The same files converted without the flag are quoted, as an upload's
 * own data may be.
 */
#include "ds_testutil.h"

#define SECRET "s3cr3t"

typedef struct {
    const char *text;  /* the CSV */
    const char *label; /* label_column */
    const char *says;  /* what the NO_ECHO message must contain */
} csv_case;

static void test_csv_quotes_nothing(void **state)
{
    static const csv_case cases[] = {
        /* one column: an HTTP service's reply, a metrics page */
        {"# HELP " SECRET " total\n1\n", "y",
         "not a CSV file with a header: line 1 has 1 column"},
        {SECRET ";b;y\n1;2;3\n", "y", "it seems to use another separator"},
        /* the label is not among the columns */
        {SECRET "_a," SECRET "_b\n1,2\n", "y",
         "label column \"y\" is not in the header (it names 2 columns)"},
        /* a duplicate column name */
        {SECRET "," SECRET ",y\n1,2,3\n", "y",
         "line 1: columns 1 and 2 have the same name"},
        /* cells */
        {SECRET ",y\n,1\n", "y", "column 1 has no values"},
        /* more categories than the limit: named by number and line */
        {"a,y\n1,1\n2,1\n3,1\n4,1\n5,1\n6,1\n7,1\n8,1\n9,1\n10,1\n11,1\n"
         "12,1\n13,1\n14,1\n15,1\n16,1\n17,1\n18,1\n19,1\n20,1\n21,1\n"
         "22,1\n23,1\n24,1\n25,1\n26,1\n27,1\n28,1\n29,1\n30,1\n31,1\n"
         "32,1\n33,1\n34,1\n35,1\n36,1\n37,1\n38,1\n39,1\n40,1\n41,1\n"
         "42,1\n43,1\n44,1\n45,1\n46,1\n47,1\n48,1\n49,1\n50,1\n" SECRET ",1\n",
         "y",
         "column 1 has more than 50 distinct values (it is categorical: "
         "line 52 holds one that is not a number)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *in = dt_path(0, "in.csv"), *out = dt_path(1, "out.tyds");
        dt_write_str(in, cases[i].text);
        ty_err err = {0};
        ty_status st =
            ds_convert_csv_flags(in, cases[i].label, TY_TASK_CLASSIFICATION,
                                 DS_CONVERT_NO_ECHO, out, &err);
        if (st == TY_OK)
            fail_msg("case %zu converted", i);
        if (strstr(err.msg, SECRET))
            fail_msg("case %zu quotes the file: %s", i, err.msg);
        dt_assert_contains(err.msg, cases[i].says);
        /* without the flag the same file is quoted, as before */
        memset(&err, 0, sizeof err);
        st = ds_convert_csv(in, cases[i].label, TY_TASK_CLASSIFICATION, out,
                            &err);
        assert_int_not_equal(st, TY_OK);
        if (i != 5 && !strstr(err.msg, SECRET))
            fail_msg("case %zu: an upload's message lost its quote: %s", i,
                     err.msg);
    }
}

static void test_idx_quotes_no_magic(void **state)
{
    const char *img = dt_path(0, "img.idx"), *lab = dt_path(1, "lab.idx");
    const char *out = dt_path(2, "out.tyds");
    /* "{\"st" as a magic number: 0x7b227374 */
    dt_write_str(img, "{\"status\":\"ok\"}");
    dt_write(lab, "\0\0\x08\x01\0\0\0\x01\x00", 9);
    ty_err err = {0};
    assert_int_equal(
        ds_convert_idx_flags(img, lab, DS_CONVERT_NO_ECHO, out, &err),
        TY_EFORMAT);
    assert_null(strstr(err.msg, "7b22"));
    assert_string_equal(err.msg, "images file: not an IDX3 ubyte file: it does "
                                 "not start with the magic number 0x00000803");
    /* an int32 images file: the element type is not quoted either */
    dt_write(img, "\0\0\x0c\x03\0\0\0\x01\0\0\0\x01\0\0\0\x01\0\0\0\0", 20);
    memset(&err, 0, sizeof err);
    assert_int_equal(
        ds_convert_idx_flags(img, lab, DS_CONVERT_NO_ECHO, out, &err),
        TY_EFORMAT);
    assert_null(strstr(err.msg, "0x0c"));
    dt_assert_contains(err.msg, "not an IDX3 ubyte file");
    /* uploads keep the magic in the message */
    memset(&err, 0, sizeof err);
    dt_write_str(img, "{\"status\":\"ok\"}");
    assert_int_equal(ds_convert_idx(img, lab, out, &err), TY_EFORMAT);
    dt_assert_contains(err.msg, "bad magic 0x7b227374");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_csv_quotes_nothing),
        cmocka_unit_test(test_idx_quotes_no_magic),
    };
    return cmocka_run_group_tests(tests, tu_tmpdir_setup, tu_tmpdir_teardown);
}
