/*
 * test_dataset_npy.c - ds_convert_npy on NPY files written here: every
 * supported dtype for x and y, the three header versions and the header
 * spellings numpy (and older numpys) produce, task inference, the class
 * rule (the labels that occur, in increasing order, the same classes a CSV
 * of the same labels gets), Fortran-ordered arrays (converted to the same
 * dataset as the C-ordered array), and each rejection with its message.
 */
#include "ds_testutil.h"

#include <math.h>

/* Writes an NPY file of format version major.minor whose header is dict
 * (padded with spaces and a newline so the data starts at a multiple of 64,
 * as numpy does), followed by len bytes of data. */
static void write_npy_raw(const char *path, int major, int minor,
                          const char *dict, const void *data, size_t len)
{
    size_t pre = major == 1 ? 10 : 12, dlen = strlen(dict);
    size_t hlen = dlen + 1;
    hlen += (64 - (pre + hlen) % 64) % 64;
    size_t total = pre + hlen + len;
    unsigned char *buf = malloc(total);
    assert_non_null(buf);
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)major;
    buf[7] = (unsigned char)minor;
    for (size_t i = 0; i < pre - 8; i++)
        buf[8 + i] = (unsigned char)(hlen >> (8 * i));
    memcpy(buf + pre, dict, dlen);
    memset(buf + pre + dlen, ' ', hlen - dlen - 1);
    buf[pre + hlen - 1] = '\n';
    if (len)
        memcpy(buf + pre + hlen, data, len);
    dt_write(path, buf, total);
    free(buf);
}

/* Encodes n values as descr's type into out; returns the byte count. */
static size_t encode(const char *descr, const double *v, size_t n, void *out)
{
    unsigned char *p = out;
    char t = descr[1];
    int size = descr[2] - '0';
    for (size_t i = 0; i < n; i++) {
        if (t == 'f' && size == 4) {
            float f = (float)v[i];
            memcpy(p + 4 * i, &f, 4);
        } else if (t == 'f') {
            memcpy(p + 8 * i, &v[i], 8);
        } else if (t == 'u') {
            p[i] = (unsigned char)v[i];
        } else if (size == 4) {
            int32_t x = (int32_t)v[i];
            memcpy(p + 4 * i, &x, 4);
        } else {
            int64_t x = (int64_t)v[i];
            memcpy(p + 8 * i, &x, 8);
        }
    }
    return n * (size_t)size;
}

/* Writes a version 1.0 file of n values of descr with the given shape text
 * ("(3, 2)"). */
static void write_npy(const char *path, const char *descr, const char *shape,
                      const double *v, size_t n)
{
    char dict[256];
    snprintf(dict, sizeof dict,
             "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr,
             shape);
    void *data = malloc(n * 8 + 1);
    assert_non_null(data);
    size_t len = encode(descr, v, n, data);
    write_npy_raw(path, 1, 0, dict, data, len);
    free(data);
}

/* Writes v, the n values of an array of shape dims (ndim axes) in C order, as
 * a Fortran-ordered version 1.0 file: np.save(path, np.asfortranarray(a)).
 * The first index runs fastest in the file. */
static void write_npy_fortran(const char *path, const char *descr,
                              const uint64_t *dims, int ndim, const double *v,
                              size_t n)
{
    double *f = malloc((n ? n : 1) * sizeof *f);
    assert_non_null(f);
    for (size_t c = 0; c < n; c++) {
        size_t rest = c, off = 0, fstride = 1, cstride = n;
        for (int a = 0; a < ndim; a++) {
            cstride /= dims[a];
            size_t idx = rest / cstride;
            rest %= cstride;
            off += idx * fstride;
            fstride *= dims[a];
        }
        f[off] = v[c];
    }
    char shape[128] = "(";
    for (int a = 0; a < ndim; a++) {
        size_t used = strlen(shape);
        snprintf(shape + used, sizeof shape - used, "%s%llu", a ? ", " : "",
                 (unsigned long long)dims[a]);
    }
    strcat(shape, ndim == 1 ? ",)" : ")");
    char dict[256];
    snprintf(dict, sizeof dict,
             "{'descr': '%s', 'fortran_order': True, 'shape': %s, }", descr,
             shape);
    void *data = malloc(n * 8 + 1);
    assert_non_null(data);
    size_t len = encode(descr, f, n, data);
    write_npy_raw(path, 1, 0, dict, data, len);
    free(data);
    free(f);
}

#define X_PATH dt_path(0, "x.npy")
#define Y_PATH dt_path(1, "y.npy")
#define OUT_PATH dt_path(2, "out.tyds")

static const double x6[] = {0, 1, 2, 3, 4, 5};
static const double y3[] = {1, 0, 2};

static ty_status convert(int task, ty_err *err)
{
    ty_err_clear(err);
    return ds_convert_npy(X_PATH, Y_PATH, task, OUT_PATH, err);
}

static void convert_ok(int task, ty_dataset *ds)
{
    ty_err err;
    ty_status st = convert(task, &err);
    if (st != TY_OK)
        fail_msg("conversion failed: %s: %s", ty_status_name(st), err.msg);
    if (ty_dataset_open(OUT_PATH, ds, &err) != TY_OK)
        fail_msg("open failed: %s", err.msg);
}

static void convert_bad(int task, ty_status want, const char *field,
                        ty_err *err)
{
    ty_status st = convert(task, err);
    if (st != want)
        fail_msg("expected %s, got %s (%s)", ty_status_name(want),
                 ty_status_name(st), err->msg);
    assert_string_equal(err->field, field);
    assert_false(fs_exists(OUT_PATH));
}

static void test_each_x_dtype(void **state)
{
    (void)state;
    static const char *const dtypes[] = {"<f4", "<f8", "|u1",
                                         "<u1", "<i4", "<i8"};
    for (size_t d = 0; d < TY_ARRAY_LEN(dtypes); d++) {
        ty_dataset ds;
        write_npy(X_PATH, dtypes[d], "(3, 2)", x6, 6);
        write_npy(Y_PATH, "<i8", "(3,)", y3, 3);
        convert_ok(-1, &ds);
        int u8 = dtypes[d][1] == 'u';
        assert_int_equal(ds.x_dtype, u8 ? TY_DTYPE_U8 : TY_DTYPE_F32);
        assert_string_equal(dt_meta_str(&ds, "preprocess"),
                            u8 ? "scale_255" : "none");
        assert_string_equal(dt_meta_str(&ds, "x_dtype"),
                            u8 ? "uint8" : "float32");
        assert_string_equal(dt_meta_str(&ds, "format"), "npy");
        assert_int_equal(ds.num_examples, 3);
        dt_assert_json(json_object_get(ds.meta, "input_shape"), "[2]");
        for (uint32_t i = 0; i < 3; i++) {
            float row[2];
            ty_dataset_example_f32(&ds, i, row);
            assert_true(row[0] == (float)(2 * i) &&
                        row[1] == (float)(2 * i + 1));
        }
        ty_dataset_close(&ds);
    }
}

static void test_each_y_dtype_and_task_inference(void **state)
{
    (void)state;
    static const struct {
        const char *descr;
        ty_task inferred;
    } cases[] = {
        {"|u1", TY_TASK_CLASSIFICATION}, {"<i4", TY_TASK_CLASSIFICATION},
        {"<i8", TY_TASK_CLASSIFICATION}, {"<f4", TY_TASK_REGRESSION},
        {"<f8", TY_TASK_REGRESSION},
    };
    write_npy(X_PATH, "<f4", "(3, 2)", x6, 6);
    for (size_t c = 0; c < TY_ARRAY_LEN(cases); c++) {
        ty_dataset ds;
        write_npy(Y_PATH, cases[c].descr, "(3,)", y3, 3);
        convert_ok(-1, &ds);
        assert_int_equal(ds.task, cases[c].inferred);
        assert_int_equal(ds.y_dim, 1);
        if (ds.task == TY_TASK_CLASSIFICATION) {
            assert_int_equal(ds.num_classes, 3);
            dt_assert_json(json_object_get(ds.meta, "classes"), "[0,1,2]");
            for (int i = 0; i < 3; i++)
                assert_int_equal(ds.y_class[i], (int32_t)y3[i]);
        } else {
            assert_null(json_object_get(ds.meta, "classes"));
            for (int i = 0; i < 3; i++)
                assert_true(ds.y_value[i] == (float)y3[i]);
        }
        ty_dataset_close(&ds);

        /* an explicit task wins: float labels with whole values may be
         * classes, integer labels may be regression targets */
        ty_task other = cases[c].inferred == TY_TASK_CLASSIFICATION
                            ? TY_TASK_REGRESSION
                            : TY_TASK_CLASSIFICATION;
        convert_ok((int)other, &ds);
        assert_int_equal(ds.task, other);
        if (other == TY_TASK_CLASSIFICATION)
            assert_int_equal(ds.y_class[2], 2);
        else
            assert_true(ds.y_value[2] == 2.0f);
        ty_dataset_close(&ds);
    }
}

/* The classes are the labels that occur, in increasing order: not 0..max
 * (labels {3, 7, 100} are 3 classes, not 101). */
static void test_classes_are_the_labels_that_occur(void **state)
{
    (void)state;
    ty_dataset ds;
    const double y[] = {0, 4, 4};
    write_npy(X_PATH, "<f4", "(3, 2)", x6, 6);
    write_npy(Y_PATH, "<i4", "(3,)", y, 3);
    convert_ok(-1, &ds);
    assert_int_equal(ds.num_classes, 2);
    assert_int_equal(dt_meta_int(&ds, "num_classes"), 2);
    dt_assert_json(json_object_get(ds.meta, "classes"), "[0,4]");
    assert_int_equal(ds.y_class[0], 0);
    assert_int_equal(ds.y_class[1], 1);
    assert_int_equal(ds.y_class[2], 1);
    ty_dataset_close(&ds);

    /* (N, 1) is one label per example too */
    write_npy(Y_PATH, "<i4", "(3, 1)", y, 3);
    convert_ok(-1, &ds);
    assert_int_equal(ds.y_dim, 1);
    assert_int_equal(ds.y_class[1], 1);
    ty_dataset_close(&ds);

    /* sparse labels, first seen out of order, in every integer dtype and as
     * whole floats */
    static const double sparse[] = {100, 7, 3, 7, 99999, 3};
    static const char *const descrs[] = {"<i8", "<i4", "<f8", "<f4"};
    double x12[12];
    for (int i = 0; i < 12; i++)
        x12[i] = i;
    write_npy(X_PATH, "<f4", "(6, 2)", x12, 12);
    for (size_t d = 0; d < TY_ARRAY_LEN(descrs); d++) {
        write_npy(Y_PATH, descrs[d], "(6,)", sparse, 6);
        convert_ok(TY_TASK_CLASSIFICATION, &ds);
        dt_assert_json(json_object_get(ds.meta, "classes"), "[3,7,100,99999]");
        assert_int_equal(ds.num_classes, 4);
        const int32_t want[] = {2, 1, 0, 1, 3, 0};
        for (int i = 0; i < 6; i++)
            assert_int_equal(ds.y_class[i], want[i]);
        ty_dataset_close(&ds);
    }
    const double bytes[] = {200, 5, 5, 17, 200, 255};
    write_npy(Y_PATH, "|u1", "(6,)", bytes, 6);
    convert_ok(-1, &ds);
    dt_assert_json(json_object_get(ds.meta, "classes"), "[5,17,200,255]");
    assert_int_equal(ds.y_class[0], 2);
    assert_int_equal(ds.y_class[5], 3);
    ty_dataset_close(&ds);
}

/* The same labels as an NPY y and as a CSV label column give the same
 * classes and the same class indices. */
static void test_same_classes_as_csv(void **state)
{
    (void)state;
    static const double labels[] = {3, 9, 1, 4, 0, 7, 2, 8, 6, 5, 9, 100, 3};
    const size_t n = TY_ARRAY_LEN(labels);
    char csv[512] = "f,label\n";
    double x[TY_ARRAY_LEN(labels)];
    for (size_t i = 0; i < n; i++) {
        size_t used = strlen(csv);
        snprintf(csv + used, sizeof csv - used, "%zu,%.0f\n", i, labels[i]);
        x[i] = (double)i;
    }
    dt_write_str(dt_path(3, "in.csv"), csv);
    ty_err err;
    ty_dataset from_csv, from_npy;
    if (ds_convert_csv(dt_path(3, "in.csv"), "label", TY_TASK_CLASSIFICATION,
                       dt_path(4, "csv.tyds"), &err) != TY_OK ||
        ty_dataset_open(dt_path(4, "csv.tyds"), &from_csv, &err) != TY_OK)
        fail_msg("%s", err.msg);
    write_npy(X_PATH, "<f4", "(13,)", x, n);
    write_npy(Y_PATH, "<i8", "(13,)", labels, n);
    convert_ok(-1, &from_npy);
    dt_assert_json(json_object_get(from_npy.meta, "classes"),
                   "[0,1,2,3,4,5,6,7,8,9,100]");
    assert_true(json_equal(json_object_get(from_csv.meta, "classes"),
                           json_object_get(from_npy.meta, "classes")));
    assert_int_equal(from_csv.num_classes, from_npy.num_classes);
    assert_memory_equal(from_csv.y_class, from_npy.y_class,
                        n * sizeof *from_csv.y_class);
    ty_dataset_close(&from_csv);
    ty_dataset_close(&from_npy);
}

static void test_header_versions(void **state)
{
    (void)state;
    const char *dict = "{'descr': '<f4', 'fortran_order': False, "
                       "'shape': (3, 2), }";
    float data[6] = {0, 1, 2, 3, 4, 5};
    write_npy(Y_PATH, "<i4", "(3,)", y3, 3);
    for (int major = 1; major <= 3; major++) {
        ty_dataset ds;
        write_npy_raw(X_PATH, major, 0, dict, data, sizeof data);
        convert_ok(-1, &ds);
        assert_int_equal(ds.num_examples, 3);
        assert_true(((const float *)ds.x)[5] == 5.0f);
        ty_dataset_close(&ds);
    }
    ty_err err;
    write_npy_raw(X_PATH, 4, 0, dict, data, sizeof data);
    convert_bad(-1, TY_EFORMAT, "x", &err);
    assert_string_equal(err.msg, "x.npy: NPY format version 4.0 is not "
                                 "supported (1.0, 2.0 and 3.0 are)");
    write_npy_raw(X_PATH, 1, 1, dict, data, sizeof data);
    convert_bad(-1, TY_EFORMAT, "x", &err);
    dt_assert_contains(err.msg, "version 1.1 is not supported");
}

static void test_header_spellings(void **state)
{
    (void)state;
    static const char *const dicts[] = {
        "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }",
        "{'descr':'<f4','fortran_order':False,'shape':(3,2)}",
        "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (3, 2)}",
        "{ 'shape' : ( 3 , 2 , ) , 'fortran_order' : False , 'descr' : '<f4' , "
        "}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (3L, 2L), }",
        "{'descr': '<f4',\n 'fortran_order': False,\n 'shape': (3, 2)}",
    };
    float data[6] = {0, 1, 2, 3, 4, 5};
    write_npy(Y_PATH, "<i4", "(3,)", y3, 3);
    for (size_t i = 0; i < TY_ARRAY_LEN(dicts); i++) {
        ty_dataset ds;
        write_npy_raw(X_PATH, 1, 0, dicts[i], data, sizeof data);
        convert_ok(-1, &ds);
        assert_int_equal(ds.num_examples, 3);
        assert_int_equal(ds.features, 2);
        ty_dataset_close(&ds);
    }
}

static void test_malformed_headers(void **state)
{
    (void)state;
    static const struct {
        const char *dict;
        const char *why;
    } cases[] = {
        {"{'descr': '<f4', 'shape': (3, 2), }", "must have the keys"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), "
         "'extra': 1}",
         "unknown or repeated key"},
        {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, "
         "'shape': (3, 2)}",
         "unknown or repeated key"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (6)}",
         "(N) is not a tuple"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': [3, 2]}",
         "shape must be a tuple"},
        {"{'descr': '<f4', 'fortran_order': 0, 'shape': (3, 2)}",
         "fortran_order must be True or False"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2)} x",
         "unexpected text after the dict"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2)",
         "expected ',' or '}'"},
        {"{'descr' '<f4', 'fortran_order': False, 'shape': (3, 2)}",
         "expected ':'"},
        {"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (3,)}",
         "structured dtypes are not supported"},
        {"{'descr': '<f4', 'fortran_order': False, "
         "'shape': (99999999999999999999999, 2)}",
         "a size is too large"},
    };
    float data[6] = {0};
    write_npy(Y_PATH, "<i4", "(3,)", y3, 3);
    for (size_t i = 0; i < TY_ARRAY_LEN(cases); i++) {
        ty_err err;
        write_npy_raw(X_PATH, 1, 0, cases[i].dict, data, sizeof data);
        convert_bad(-1, TY_EFORMAT, "x", &err);
        dt_assert_contains(err.msg, "x.npy: the header is not a valid NPY "
                                    "header (");
        dt_assert_contains(err.msg, cases[i].why);
    }

    /* not NPY at all, and cut short in the header */
    ty_err err;
    dt_write_str(X_PATH, "a,b\n1,2\n");
    convert_bad(-1, TY_EFORMAT, "x", &err);
    dt_assert_contains(err.msg, "x.npy is not an NPY file");
    dt_write(X_PATH, "\x93NUMPY\x01\x00\x40\x00{'descr'", 17);
    convert_bad(-1, TY_EFORMAT, "x", &err);
    assert_string_equal(err.msg, "x.npy is truncated in its header");
    dt_write(X_PATH, "\x93NUMPY\x02\x00\x00\x00\x10\x00", 12);
    convert_bad(-1, TY_EFORMAT, "x", &err);
    dt_assert_contains(err.msg, "the header is 1048576 bytes long");
}

/* The converted dataset's bytes (the whole file). */
static char *read_out(size_t *len)
{
    char *data = NULL;
    ty_err err;
    if (fs_read_all(OUT_PATH, SIZE_MAX, &data, len, &err) != TY_OK)
        fail_msg("%s", err.msg);
    return data;
}

/* x of shape dims (ndim axes, values v in C order) and y (n labels or
 * targets of ydescr, shape yshape), converted once from C-ordered files and
 * once with x (and y, when fortran_y) Fortran-ordered: the two datasets must
 * be the same bytes. */
static void check_fortran_same(const char *xdescr, const uint64_t *dims,
                               int ndim, const double *v, const char *ydescr,
                               const uint64_t *ydims, int yndim,
                               const double *y, int task)
{
    size_t n = 1, yn = 1;
    char shape[128] = "(", yshape[64] = "(";
    for (int a = 0; a < ndim; a++) {
        n *= dims[a];
        size_t used = strlen(shape);
        snprintf(shape + used, sizeof shape - used, "%s%llu", a ? ", " : "",
                 (unsigned long long)dims[a]);
    }
    for (int a = 0; a < yndim; a++) {
        yn *= ydims[a];
        size_t used = strlen(yshape);
        snprintf(yshape + used, sizeof yshape - used, "%s%llu", a ? ", " : "",
                 (unsigned long long)ydims[a]);
    }
    strcat(shape, ndim == 1 ? ",)" : ")");
    strcat(yshape, yndim == 1 ? ",)" : ")");
    ty_err err;
    size_t c_len, f_len;

    write_npy(X_PATH, xdescr, shape, v, n);
    write_npy(Y_PATH, ydescr, yshape, y, yn);
    if (convert(task, &err) != TY_OK)
        fail_msg("C order: %s", err.msg);
    char *c_bytes = read_out(&c_len);

    write_npy_fortran(X_PATH, xdescr, dims, ndim, v, n);
    write_npy_fortran(Y_PATH, ydescr, ydims, yndim, y, yn);
    if (convert(task, &err) != TY_OK)
        fail_msg("Fortran order (x %s %s): %s", xdescr, shape, err.msg);
    char *f_bytes = read_out(&f_len);
    assert_int_equal(c_len, f_len);
    if (memcmp(c_bytes, f_bytes, c_len) != 0)
        fail_msg("x %s %s, y %s %s: the datasets differ", xdescr, shape, ydescr,
                 yshape);
    free(c_bytes);
    free(f_bytes);
}

static void test_fortran_order_converted(void **state)
{
    (void)state;
    static const char *const dtypes[] = {"<f4", "<f8", "|u1", "<i4", "<i8"};
    double v[5 * 2 * 3 * 4 * 2], yv[5 * 3];
    for (size_t i = 0; i < TY_ARRAY_LEN(v); i++)
        v[i] = (double)((i * 37) % 251); /* fits every dtype, all distinct
                                            within an example */
    static const double labels[] = {4, 0, 9, 4, 2};
    for (size_t i = 0; i < TY_ARRAY_LEN(yv); i++)
        yv[i] = (double)i * 0.5 - 3;
    static const uint64_t shapes[][5] = {
        {5, 3}, {5, 2, 3}, {5, 2, 3, 4}, {5, 2, 3, 4, 2}, {5, 1, 3}, {5, 4, 1},
    };
    static const int ndims[] = {2, 3, 4, 5, 3, 3};
    const uint64_t y_n[] = {5}, y_nk[] = {5, 3};
    for (size_t d = 0; d < TY_ARRAY_LEN(dtypes); d++)
        for (size_t s = 0; s < TY_ARRAY_LEN(ndims); s++) {
            /* classification labels (N,) and regression targets (N, k) */
            check_fortran_same(dtypes[d], shapes[s], ndims[s], v, "<i8", y_n, 1,
                               labels, -1);
            check_fortran_same(dtypes[d], shapes[s], ndims[s], v, "<f4", y_nk,
                               2, yv, TY_TASK_REGRESSION);
        }
    /* a single example, and a single value per example */
    const uint64_t one[] = {1, 3, 4}, col[] = {5, 1}, y1[] = {1};
    check_fortran_same("<f8", one, 3, v, "<i4", y1, 1, labels, -1);
    check_fortran_same("<f8", col, 2, v, "<i4", y_n, 1, labels, -1);

    /* messages name a value by its C position, wherever the file keeps it */
    ty_err err;
    const uint64_t x6d[] = {3, 2};
    write_npy(Y_PATH, "<i4", "(3,)", y3, 3);
    const double nan_x[] = {0, 1, 2, 3, NAN, 5};
    write_npy_fortran(X_PATH, "<f4", x6d, 2, nan_x, 6);
    convert_bad(TY_TASK_REGRESSION, TY_EFORMAT, "x", &err);
    assert_string_equal(err.msg, "x.npy: example 2, value 0 is NaN (NaN and "
                                 "Inf are not allowed)");
}

/* A file numpy 1.24 wrote: np.save(f, np.asfortranarray(np.arange(24,
 * dtype='<i4').reshape(2, 3, 4) * 3 - 5)); its header, then its data as it
 * lies in the file (first index fastest). */
static void test_fortran_file_from_numpy(void **state)
{
    (void)state;
    static const int32_t data[24] = {-5, 31, 7,  43, 19, 55, -2, 34,
                                     10, 46, 22, 58, 1,  37, 13, 49,
                                     25, 61, 4,  40, 16, 52, 28, 64};
    write_npy_raw(X_PATH, 1, 0,
                  "{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3, "
                  "4), }",
                  data, sizeof data);
    assert_int_equal(fs_file_size(X_PATH), 128 + sizeof data);
    const double y[] = {1, 0};
    write_npy(Y_PATH, "<i8", "(2,)", y, 2);
    ty_dataset ds;
    convert_ok(-1, &ds);
    dt_assert_json(json_object_get(ds.meta, "input_shape"), "[3,4]");
    const float *x = ds.x;
    for (int i = 0; i < 24; i++)
        if (x[i] != (float)(3 * i - 5))
            fail_msg("x[%d] is %g, expected %d", i, (double)x[i], 3 * i - 5);
    ty_dataset_close(&ds);
}

/* Fortran-ordered float32 x of shape dims (3 axes) converted, checked value
 * by value against the array. */
static void check_fortran_large(const uint64_t dims[3])
{
    const size_t per = (size_t)(dims[1] * dims[2]), n = (size_t)dims[0] * per;
    double *v = malloc(n * sizeof *v);
    double *y = malloc(dims[0] * sizeof *y);
    assert_non_null(v);
    assert_non_null(y);
    for (size_t i = 0; i < n; i++)
        v[i] = (double)(i % 1000003);
    for (size_t i = 0; i < dims[0]; i++)
        y[i] = (double)(i % 7);
    char yshape[32];
    snprintf(yshape, sizeof yshape, "(%llu,)", (unsigned long long)dims[0]);
    write_npy_fortran(X_PATH, "<f4", dims, 3, v, n);
    write_npy(Y_PATH, "|u1", yshape, y, dims[0]);
    ty_dataset ds;
    convert_ok(-1, &ds);
    assert_int_equal(ds.num_examples, dims[0]);
    const float *x = ds.x;
    for (size_t i = 0; i < n; i++)
        if (x[i] != (float)v[i])
            fail_msg("x[%zu] is %g, expected %g", i, (double)x[i], v[i]);
    ty_dataset_close(&ds);
    free(v);
    free(y);
}

/* Fortran-ordered x larger than one gathered block (16 MiB), so blocks
 * follow one another and the last is partial: many small examples (a read
 * per value and block), and a few large ones (blocks of 6 of 9 examples,
 * each read taking many values' runs and the other examples' between). */
static void test_fortran_order_many_blocks(void **state)
{
    (void)state;
    const uint64_t many_small[3] = {70001, 4, 16};
    check_fortran_large(many_small);
    const uint64_t few_large[3] = {9, 600, 1000};
    check_fortran_large(few_large);
}

static void test_unsupported_dtypes(void **state)
{
    (void)state;
    ty_err err;
    write_npy(Y_PATH, "<i4", "(3,)", y3, 3);
    float data[6] = {0};
    write_npy_raw(X_PATH, 1, 0,
                  "{'descr': '>f4', 'fortran_order': False, 'shape': (3, 2), }",
                  data, sizeof data);
    convert_bad(-1, TY_EFORMAT, "x", &err);
    assert_string_equal(err.msg, "x.npy: dtype '>f4' is big-endian; save it "
                                 "little-endian (e.g. a.astype('<f4'))");

    static const char *const others[] = {"<c8", "|O",  "|b1", "<f2",
                                         "<u4", "|i1", "<U5"};
    for (size_t i = 0; i < TY_ARRAY_LEN(others); i++) {
        char dict[128], want[160];
        snprintf(dict, sizeof dict,
                 "{'descr': '%s', 'fortran_order': False, 'shape': (3, 2), }",
                 others[i]);
        write_npy_raw(X_PATH, 1, 0, dict, data, sizeof data);
        convert_bad(-1, TY_EFORMAT, "x", &err);
        snprintf(want, sizeof want,
                 "x.npy: dtype '%s' is not supported (use float32, float64, "
                 "uint8, uint16, int32 or int64)",
                 others[i]);
        assert_string_equal(err.msg, want);
    }

    /* y is held to the same dtypes */
    write_npy(X_PATH, "<f4", "(3, 2)", x6, 6);
    write_npy_raw(Y_PATH, 1, 0,
                  "{'descr': '>i8', 'fortran_order': False, 'shape': (3,), }",
                  data, 24);
    convert_bad(-1, TY_EFORMAT, "y", &err);
    dt_assert_contains(err.msg, "y.npy: dtype '>i8' is big-endian");
}

static void test_truncated_and_trailing(void **state)
{
    (void)state;
    ty_err err;
    const char *dict = "{'descr': '<f4', 'fortran_order': False, "
                       "'shape': (100, 4), }";
    float data[401] = {0};
    double y[100] = {0};
    write_npy(Y_PATH, "<i4", "(100,)", y, 100);

    write_npy_raw(X_PATH, 1, 0, dict, data, 1200);
    convert_bad(-1, TY_EFORMAT, "x", &err);
    assert_string_equal(err.msg, "x.npy is truncated: its header declares "
                                 "shape (100, 4) of '<f4' (1600 bytes of "
                                 "data), found 1200");
    write_npy_raw(X_PATH, 1, 0, dict, data, 1604);
    convert_bad(-1, TY_EFORMAT, "x", &err);
    assert_string_equal(err.msg, "x.npy has 4 bytes after the data its header "
                                 "declares (shape (100, 4) of '<f4')");

    write_npy_raw(X_PATH, 1, 0, dict, data, 1600);
    write_npy_raw(Y_PATH, 1, 0,
                  "{'descr': '<i4', 'fortran_order': False, 'shape': (100,), }",
                  data, 399);
    convert_bad(-1, TY_EFORMAT, "y", &err);
    assert_string_equal(err.msg, "y.npy is truncated: its header declares "
                                 "shape (100,) of '<i4' (400 bytes of data), "
                                 "found 399");
}

static void test_count_mismatch(void **state)
{
    (void)state;
    ty_err err;
    write_npy(X_PATH, "<f4", "(3, 2)", x6, 6);
    write_npy(Y_PATH, "<i4", "(2,)", y3, 2);
    convert_bad(-1, TY_EFORMAT, "y", &err);
    assert_string_equal(err.msg, "y.npy has 2 labels but x.npy has 3 "
                                 "examples");
}

static void test_regression_with_several_targets(void **state)
{
    (void)state;
    ty_dataset ds;
    const double y[] = {0.5, -1, 2, 3.25, 4, 5, 6, 7, 8};
    write_npy(X_PATH, "<f8", "(3, 2)", x6, 6);
    write_npy(Y_PATH, "<f4", "(3, 3)", y, 9);
    convert_ok(-1, &ds);
    assert_int_equal(ds.task, TY_TASK_REGRESSION);
    assert_int_equal(ds.y_dim, 3);
    assert_int_equal(dt_meta_int(&ds, "y_dim"), 3);
    for (int i = 0; i < 9; i++)
        assert_true(ds.y_value[i] == (float)y[i]);
    ty_dataset_close(&ds);

    /* integer targets are classes unless told otherwise, and classes need
     * one label per example */
    ty_err err;
    write_npy(Y_PATH, "<i4", "(3, 3)", y, 9);
    convert_bad(-1, TY_EFORMAT, "y", &err);
    dt_assert_contains(err.msg, "y.npy has shape (3, 3); classification needs "
                                "one class index per example");
    convert_ok(TY_TASK_REGRESSION, &ds);
    assert_int_equal(ds.y_dim, 3);
    assert_true(ds.y_value[3] == 3.0f);
    ty_dataset_close(&ds);

    write_npy(Y_PATH, "<f4", "(3, 1, 1)", y, 3);
    convert_bad(-1, TY_EFORMAT, "y", &err);
    dt_assert_contains(err.msg, "y needs shape (N,) or (N, k)");
}

static void test_class_label_checks(void **state)
{
    (void)state;
    ty_err err;
    write_npy(X_PATH, "<f4", "(3, 2)", x6, 6);

    const double negative[] = {0, -1, 2};
    write_npy(Y_PATH, "<i8", "(3,)", negative, 3);
    convert_bad(-1, TY_EFORMAT, "y", &err);
    assert_string_equal(err.msg, "y.npy: label -1 of example 1 is negative; "
                                 "class indices start at 0");

    const double fraction[] = {0, 1, 1.5};
    write_npy(Y_PATH, "<f8", "(3,)", fraction, 3);
    convert_bad(TY_TASK_CLASSIFICATION, TY_EFORMAT, "y", &err);
    dt_assert_contains(err.msg, "y.npy: label 1.5 of example 2 is not a whole "
                                "number");

    const double big[] = {0, 100000, 1};
    write_npy(Y_PATH, "<i4", "(3,)", big, 3);
    convert_bad(-1, TY_ETOOBIG, "y", &err);
    dt_assert_contains(err.msg, "y.npy: label 100000 of example 1 is too "
                                "large; at most 100000 classes");

    const double nan_label[] = {0, NAN, 1};
    write_npy(Y_PATH, "<f4", "(3,)", nan_label, 3);
    convert_bad(TY_TASK_CLASSIFICATION, TY_EFORMAT, "y", &err);
    dt_assert_contains(err.msg, "example 1, value 0 is NaN");
    convert_bad(TY_TASK_REGRESSION, TY_EFORMAT, "y", &err);
    dt_assert_contains(err.msg, "y.npy: example 1, value 0 is NaN");
}

static void test_x_value_checks(void **state)
{
    (void)state;
    ty_err err;
    write_npy(Y_PATH, "<i4", "(3,)", y3, 3);

    const double with_nan[] = {0, 1, 2, NAN, 4, 5};
    write_npy(X_PATH, "<f4", "(3, 2)", with_nan, 6);
    convert_bad(-1, TY_EFORMAT, "x", &err);
    assert_string_equal(err.msg, "x.npy: example 1, value 1 is NaN (NaN and "
                                 "Inf are not allowed)");

    const double with_inf[] = {0, 1, 2, 3, -INFINITY, 5};
    write_npy(X_PATH, "<f8", "(3, 2)", with_inf, 6);
    convert_bad(-1, TY_EFORMAT, "x", &err);
    dt_assert_contains(err.msg, "x.npy: example 2, value 0 is infinite");

    const double huge[] = {0, 1, 2, 3, 4, 1e300};
    write_npy(X_PATH, "<f8", "(3, 2)", huge, 6);
    convert_bad(-1, TY_EFORMAT, "x", &err);
    dt_assert_contains(err.msg, "example 2, value 1 (1e+300) is outside the "
                                "float32 range");
}

static void test_x_shapes(void **state)
{
    (void)state;
    ty_err err;
    ty_dataset ds;
    write_npy(Y_PATH, "<i4", "(3,)", y3, 3);

    write_npy(X_PATH, "<f4", "(3,)", x6, 3);
    convert_ok(-1, &ds);
    dt_assert_json(json_object_get(ds.meta, "input_shape"), "[1]");
    assert_true(((const float *)ds.x)[2] == 2.0f);
    ty_dataset_close(&ds);

    double v[3 * 24];
    for (int i = 0; i < 72; i++)
        v[i] = i;
    write_npy(X_PATH, "|u1", "(3, 1, 2, 3, 4)", v, 72);
    convert_ok(-1, &ds);
    dt_assert_json(json_object_get(ds.meta, "input_shape"), "[1,2,3,4]");
    assert_int_equal(ds.features, 24);
    assert_int_equal(((const uint8_t *)ds.x)[71], 71);
    ty_dataset_close(&ds);

    write_npy(X_PATH, "|u1", "(3, 1, 2, 3, 4, 1)", v, 72);
    convert_bad(-1, TY_EFORMAT, "x", &err);
    dt_assert_contains(err.msg, "at most 4 dimensions after the examples");

    write_npy(X_PATH, "<f4", "()", v, 1);
    convert_bad(-1, TY_EFORMAT, "x", &err);
    dt_assert_contains(err.msg, "x.npy holds a single value");

    write_npy(X_PATH, "<f4", "(0, 2)", v, 0);
    convert_bad(-1, TY_EFORMAT, "x", &err);
    assert_string_equal(err.msg, "x.npy has shape (0, 2), which holds no "
                                 "data");

    write_npy(X_PATH, "<f4", "(3, 0)", v, 0);
    convert_bad(-1, TY_EFORMAT, "x", &err);

    write_npy(X_PATH, "<f4", "(3, 5000, 5000)", v, 0);
    convert_bad(-1, TY_ETOOBIG, "x", &err);
    dt_assert_contains(err.msg, "more than 16777216 values per example");
}

/* A larger array than one read chunk, in float64, so conversion happens over
 * many chunks. */
static void test_many_chunks(void **state)
{
    (void)state;
    const size_t n = 700, f = 300;
    double *v = malloc(n * f * sizeof *v);
    double *y = malloc(n * sizeof *y);
    assert_non_null(v);
    assert_non_null(y);
    for (size_t i = 0; i < n * f; i++)
        v[i] = (double)i * 0.25;
    for (size_t i = 0; i < n; i++)
        y[i] = (double)(i % 13);
    write_npy(X_PATH, "<f8", "(700, 300)", v, n * f);
    write_npy(Y_PATH, "|u1", "(700,)", y, n);
    ty_dataset ds;
    convert_ok(-1, &ds);
    assert_int_equal(ds.num_examples, n);
    assert_int_equal(ds.num_classes, 13);
    const float *x = ds.x;
    for (size_t i = 0; i < n * f; i += 1237)
        assert_true(x[i] == (float)v[i]);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(ds.y_class[i], (int32_t)(i % 13));
    ty_dataset_close(&ds);
    free(v);
    free(y);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    ty_err err;
    write_npy(X_PATH, "<f4", "(3, 2)", x6, 6);
    write_npy(Y_PATH, "<i4", "(3,)", y3, 3);
    assert_int_equal(convert(5, &err), TY_EINVAL);
    assert_string_equal(err.field, "task");
    assert_int_equal(
        ds_convert_npy(X_PATH, dt_path(3, "none.npy"), -1, OUT_PATH, &err),
        TY_EIO);
    assert_string_equal(err.field, "y");
    assert_false(fs_exists(OUT_PATH));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_x_dtype),
        cmocka_unit_test(test_each_y_dtype_and_task_inference),
        cmocka_unit_test(test_classes_are_the_labels_that_occur),
        cmocka_unit_test(test_same_classes_as_csv),
        cmocka_unit_test(test_header_versions),
        cmocka_unit_test(test_header_spellings),
        cmocka_unit_test(test_malformed_headers),
        cmocka_unit_test(test_fortran_order_converted),
        cmocka_unit_test(test_fortran_file_from_numpy),
        cmocka_unit_test(test_fortran_order_many_blocks),
        cmocka_unit_test(test_unsupported_dtypes),
        cmocka_unit_test(test_truncated_and_trailing),
        cmocka_unit_test(test_count_mismatch),
        cmocka_unit_test(test_regression_with_several_targets),
        cmocka_unit_test(test_class_label_checks),
        cmocka_unit_test(test_x_value_checks),
        cmocka_unit_test(test_x_shapes),
        cmocka_unit_test(test_many_chunks),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, tu_tmpdir_setup, tu_tmpdir_teardown);
}
