/*
 * test_dataset.c - the dataset module's helpers and loader: task names,
 * ty_dataset_open on good and damaged TYDS files, example access, and
 * ty_dataset_class_map. The converters have their own suites
 * (test_dataset_csv.c, test_dataset_idx.c, test_dataset_npy.c).
 */
#include "ds_testutil.h"

#include <fcntl.h>
#include <time.h>

#define DS_PATH dt_path(0, "ds.tyds")

/* A small good dataset: 4 examples, 2 features, classes a, b, c. */
static void make_good(void)
{
    ty_err err;
    dt_write_str(dt_path(1, "in.csv"), "f1,f2,label\n1,2,a\n3,4,b\n5,6,c\n"
                                       "7,8,a\n");
    if (ds_convert_csv(dt_path(1, "in.csv"), "label", TY_TASK_CLASSIFICATION,
                       DS_PATH, &err) != TY_OK)
        fail_msg("convert: %s", err.msg);
}

/* Overwrites len bytes at off in the dataset file. */
static void patch(long off, const void *bytes, size_t len)
{
    int fd = open(DS_PATH, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, bytes, len, off), (ssize_t)len);
    assert_int_equal(close(fd), 0);
}

/* Writes a TYDS file by hand: the header, meta text, and zeros up to size
 * bytes in all. */
static void write_tyds(const char *meta, size_t size)
{
    size_t mlen = strlen(meta);
    unsigned char *buf = calloc(1, size > 16 + mlen ? size : 16 + mlen);
    assert_non_null(buf);
    memcpy(buf, "TYDS", 4);
    buf[4] = 1;
    for (int i = 0; i < 8; i++)
        buf[8 + i] = (unsigned char)((uint64_t)mlen >> (8 * i));
    memcpy(buf + 16, meta, mlen);
    dt_write(DS_PATH, buf, size);
    free(buf);
}

static void open_bad(const char *needle)
{
    ty_dataset ds;
    ty_err err;
    memset(&ds, 0xa5, sizeof ds);
    ty_status st = ty_dataset_open(DS_PATH, &ds, &err);
    if (st != TY_EFORMAT)
        fail_msg("expected TY_EFORMAT, got %s (%s)", ty_status_name(st),
                 err.msg);
    dt_assert_contains(err.msg, needle);
    dt_assert_contains(err.msg, DS_PATH);
    /* *ds is zeroed on error */
    assert_null(ds.meta);
    assert_null(ds.map);
    assert_null(ds.x);
    assert_int_equal(ds.num_examples, 0);
}

static void test_task_names(void **state)
{
    (void)state;
    assert_string_equal(ty_task_name(TY_TASK_CLASSIFICATION), "classification");
    assert_string_equal(ty_task_name(TY_TASK_REGRESSION), "regression");
    assert_int_equal(ty_task_parse("classification"), TY_TASK_CLASSIFICATION);
    assert_int_equal(ty_task_parse("regression"), TY_TASK_REGRESSION);
    assert_int_equal(ty_task_parse("Regression"), -1);
    assert_int_equal(ty_task_parse(""), -1);
    assert_int_equal(ty_task_parse(NULL), -1);
    assert_string_equal(ty_task_name((ty_task)9), "unknown");
}

static void test_open_good(void **state)
{
    (void)state;
    ty_dataset ds;
    ty_err err;
    make_good();
    assert_int_equal(ty_dataset_open(DS_PATH, &ds, &err), TY_OK);
    assert_int_equal(ds.num_examples, 4);
    assert_int_equal(ds.features, 2);
    assert_int_equal(ds.num_classes, 3);
    assert_int_equal(ds.y_class[3], 0);
    /* x and y sit where the meta says, aligned */
    const unsigned char *base = ds.map;
    assert_ptr_equal((const unsigned char *)ds.x,
                     base + dt_meta_int(&ds, "x_offset"));
    assert_ptr_equal((const unsigned char *)ds.y_class,
                     base + dt_meta_int(&ds, "y_offset"));
    assert_int_equal((uintptr_t)ds.x % 64, 0);
    float row[2];
    ty_dataset_example_f32(&ds, 2, row);
    assert_true(row[0] == 5.0f && row[1] == 6.0f);
    ty_dataset_close(&ds);
    assert_null(ds.meta);
    assert_null(ds.map);
    /* closing twice, or a zeroed struct, or NULL, is harmless */
    ty_dataset_close(&ds);
    ty_dataset_close(NULL);
}

static void test_open_damaged_header(void **state)
{
    (void)state;
    make_good();
    patch(0, "TYDZ", 4);
    open_bad("bad magic (not a TYDS file)");

    make_good();
    patch(4, "\x02", 1);
    open_bad("version 2 is not supported");

    make_good();
    patch(8, "\xff\xff\xff\x00", 4);
    open_bad("the meta is 16777215 bytes but the file has only");

    make_good();
    patch(16, "[", 1);
    open_bad("the meta is not a JSON object");

    dt_write(DS_PATH, "TYDS\x01\x00", 6);
    open_bad("is not a dataset file (only 6 bytes)");

    dt_write(DS_PATH, "", 0);
    open_bad("is not a dataset file (only 0 bytes)");
}

static void test_open_truncated(void **state)
{
    (void)state;
    make_good();
    int64_t size = fs_file_size(DS_PATH);
    assert_int_equal(truncate(DS_PATH, size - 4), 0);
    open_bad("the file is truncated");
    /* cut inside the meta */
    make_good();
    assert_int_equal(truncate(DS_PATH, 40), 0);
    open_bad("the meta is");
}

static void test_open_class_index_out_of_range(void **state)
{
    (void)state;
    ty_dataset ds;
    ty_err err;
    make_good();
    assert_int_equal(ty_dataset_open(DS_PATH, &ds, &err), TY_OK);
    long y_off = (long)dt_meta_int(&ds, "y_offset");
    ty_dataset_close(&ds);

    int32_t bad = 3;
    patch(y_off + 2 * 4, &bad, 4);
    open_bad("example 2 has class index 3, outside 0..2");
    bad = -1;
    patch(y_off + 1 * 4, &bad, 4);
    open_bad("example 1 has class index -1, outside 0..2");
}

static void test_open_bad_meta(void **state)
{
    (void)state;
    static const struct {
        const char *meta;
        const char *needle;
    } cases[] = {
        /* a good one first, so the rest each differ in one way */
        {"{\"version\":1,\"format\":\"npy\",\"task\":\"regression\","
         "\"num_examples\":2,\"input_shape\":[3],\"features\":3,"
         "\"x_dtype\":\"float32\",\"y_dim\":1,\"preprocess\":\"none\","
         "\"x_offset\":512,\"y_offset\":576}",
         NULL},
        {"{\"version\":1,\"format\":\"npy\","
         "\"num_examples\":2,\"input_shape\":[3],\"features\":3,"
         "\"x_dtype\":\"float32\",\"y_dim\":1,\"preprocess\":\"none\","
         "\"x_offset\":512,\"y_offset\":576}",
         "meta.task is required"},
        {"{\"version\":1,\"format\":\"npy\",\"task\":\"regression\","
         "\"num_examples\":\"2\",\"input_shape\":[3],\"features\":3,"
         "\"x_dtype\":\"float32\",\"y_dim\":1,\"preprocess\":\"none\","
         "\"x_offset\":512,\"y_offset\":576}",
         "meta.num_examples must be an "
         "integer"},
        {"{\"version\":1,\"format\":\"parquet\",\"task\":\"regression\","
         "\"num_examples\":2,\"input_shape\":[3],\"features\":3,"
         "\"x_dtype\":\"float32\",\"y_dim\":1,\"preprocess\":\"none\","
         "\"x_offset\":512,\"y_offset\":576}",
         "meta.format has an unknown "
         "value \"parquet\""},
        {"{\"version\":1,\"format\":\"npy\",\"task\":\"regression\","
         "\"num_examples\":2,\"input_shape\":[3],\"features\":4,"
         "\"x_dtype\":\"float32\",\"y_dim\":1,\"preprocess\":\"none\","
         "\"x_offset\":512,\"y_offset\":576}",
         "meta.features is 4 but "
         "input_shape holds 3"},
        {"{\"version\":1,\"format\":\"npy\",\"task\":\"regression\","
         "\"num_examples\":2,\"input_shape\":[1,1,1,1,3],\"features\":3,"
         "\"x_dtype\":\"float32\",\"y_dim\":1,\"preprocess\":\"none\","
         "\"x_offset\":512,\"y_offset\":576}",
         "meta.input_shape must be an "
         "array of 1 to 4"},
        {"{\"version\":1,\"format\":\"npy\",\"task\":\"regression\","
         "\"num_examples\":2,\"input_shape\":[0],\"features\":0,"
         "\"x_dtype\":\"float32\",\"y_dim\":1,\"preprocess\":\"none\","
         "\"x_offset\":512,\"y_offset\":576}",
         "meta.input_shape[0] must be"},
        {"{\"version\":1,\"format\":\"npy\",\"task\":\"regression\","
         "\"num_examples\":2,\"input_shape\":[3],\"features\":3,"
         "\"x_dtype\":\"float16\",\"y_dim\":1,\"preprocess\":\"none\","
         "\"x_offset\":512,\"y_offset\":576}",
         "meta.x_dtype has an unknown "
         "value"},
        {"{\"version\":1,\"format\":\"npy\",\"task\":\"regression\","
         "\"num_examples\":2,\"input_shape\":[3],\"features\":3,"
         "\"x_dtype\":\"float32\",\"y_dim\":1,\"preprocess\":\"none\","
         "\"x_offset\":500,\"y_offset\":576}",
         "meta offsets are inconsistent"},
        {"{\"version\":1,\"format\":\"npy\",\"task\":\"regression\","
         "\"num_examples\":2,\"input_shape\":[3],\"features\":3,"
         "\"x_dtype\":\"float32\",\"y_dim\":1,\"preprocess\":\"none\","
         "\"x_offset\":512,\"y_offset\":512}",
         "meta offsets are inconsistent"},
        {"{\"version\":1,\"format\":\"npy\",\"task\":\"regression\","
         "\"num_examples\":2,\"input_shape\":[3],\"features\":3,"
         "\"x_dtype\":\"float32\",\"y_dim\":1,\"preprocess\":\"none\","
         "\"x_offset\":0,\"y_offset\":576}",
         "meta offsets are inconsistent"},
        {"{\"version\":1,\"format\":\"npy\",\"task\":\"regression\","
         "\"num_examples\":2,\"input_shape\":[3],\"features\":3,"
         "\"x_dtype\":\"float32\",\"y_dim\":5,\"preprocess\":\"none\","
         "\"x_offset\":512,\"y_offset\":576}",
         "the file is truncated"},
        {"{\"version\":1,\"format\":\"npy\",\"task\":\"classification\","
         "\"num_examples\":2,\"input_shape\":[3],\"features\":3,"
         "\"x_dtype\":\"float32\",\"y_dim\":1,\"preprocess\":\"none\","
         "\"x_offset\":512,\"y_offset\":576}",
         "meta.num_classes is required"},
        {"{\"version\":1,\"format\":\"npy\",\"task\":\"classification\","
         "\"num_examples\":2,\"input_shape\":[3],\"features\":3,"
         "\"x_dtype\":\"float32\",\"y_dim\":1,\"preprocess\":\"none\","
         "\"num_classes\":2,\"classes\":[0],"
         "\"x_offset\":512,\"y_offset\":576}",
         "meta.classes must be an array "
         "of num_classes (2)"},
        {"{\"version\":1,\"format\":\"npy\",\"task\":\"classification\","
         "\"num_examples\":2,\"input_shape\":[3],\"features\":3,"
         "\"x_dtype\":\"float32\",\"y_dim\":2,\"preprocess\":\"none\","
         "\"num_classes\":1,\"classes\":[0],"
         "\"x_offset\":512,\"y_offset\":576}",
         "meta.y_dim must be 1 for "
         "classification"},
        {"{\"version\":1,\"format\":\"csv\",\"task\":\"regression\","
         "\"num_examples\":2,\"input_shape\":[3],\"features\":3,"
         "\"x_dtype\":\"float32\",\"y_dim\":1,\"preprocess\":\"none\","
         "\"feature_names\":[\"a\"],"
         "\"x_offset\":512,\"y_offset\":576}",
         "meta.feature_names must be an "
         "array of 3 names"},
        {"{\"version\":1,\"version\":1,\"format\":\"npy\","
         "\"task\":\"regression\","
         "\"num_examples\":2,\"input_shape\":[3],\"features\":3,"
         "\"x_dtype\":\"float32\",\"y_dim\":1,\"preprocess\":\"none\","
         "\"x_offset\":512,\"y_offset\":576}",
         "the meta is not a JSON object"},
    };
    for (size_t i = 0; i < TY_ARRAY_LEN(cases); i++) {
        write_tyds(cases[i].meta, 576 + 8);
        if (cases[i].needle) {
            open_bad(cases[i].needle);
            continue;
        }
        ty_dataset ds;
        ty_err err;
        if (ty_dataset_open(DS_PATH, &ds, &err) != TY_OK)
            fail_msg("the reference meta fails: %s", err.msg);
        assert_non_null(ds.y_value);
        assert_true(ds.y_value[1] == 0.0f);
        ty_dataset_close(&ds);
    }
}

static void test_open_missing_file(void **state)
{
    (void)state;
    ty_dataset ds;
    ty_err err;
    assert_int_equal(ty_dataset_open(dt_path(2, "nope.tyds"), &ds, &err),
                     TY_EIO);
    dt_assert_contains(err.msg, "nope.tyds");
    assert_null(ds.map);
}

static void test_example_f32_uint8(void **state)
{
    (void)state;
    /* a uint8 dataset, by hand: 2 examples of 3 pixels, classes [0] */
    const char *meta =
        "{\"version\":1,\"format\":\"idx\",\"task\":\"classification\","
        "\"num_examples\":2,\"input_shape\":[3],\"features\":3,"
        "\"x_dtype\":\"uint8\",\"y_dim\":1,\"preprocess\":\"scale_255\","
        "\"num_classes\":1,\"classes\":[0],\"x_offset\":512,\"y_offset\":576}";
    write_tyds(meta, 576 + 8);
    patch(512, "\x00\x80\xff\x01\x02\x03", 6);
    ty_dataset ds;
    ty_err err;
    assert_int_equal(ty_dataset_open(DS_PATH, &ds, &err), TY_OK);
    assert_int_equal(ds.x_dtype, TY_DTYPE_U8);
    float row[3];
    ty_dataset_example_f32(&ds, 0, row);
    assert_true(row[0] == 0.0f && row[1] == 128.0f && row[2] == 255.0f);
    ty_dataset_example_f32(&ds, 1, row);
    assert_true(row[0] == 1.0f && row[1] == 2.0f && row[2] == 3.0f);
    ty_dataset_close(&ds);
}

static void class_map_ok(const char *from, const char *to, const int32_t *want,
                         size_t n)
{
    json_t *jf = json_loads(from, 0, NULL), *jt = json_loads(to, 0, NULL);
    assert_non_null(jf);
    assert_non_null(jt);
    int32_t map[16];
    ty_err err;
    memset(map, 0xff, sizeof map);
    if (ty_dataset_class_map(jf, jt, map, &err) != TY_OK)
        fail_msg("class map %s -> %s failed: %s", from, to, err.msg);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(map[i], want[i]);
    json_decref(jf);
    json_decref(jt);
}

static void class_map_bad(const char *from, const char *to, const char *needle)
{
    json_t *jf = json_loads(from, JSON_DECODE_ANY, NULL);
    json_t *jt = json_loads(to, JSON_DECODE_ANY, NULL);
    int32_t map[16];
    ty_err err;
    assert_int_equal(ty_dataset_class_map(jf, jt, map, &err), TY_EINVAL);
    dt_assert_contains(err.msg, needle);
    json_decref(jf);
    json_decref(jt);
}

static void test_class_map(void **state)
{
    (void)state;
    class_map_ok("[\"b\",\"a\"]", "[\"a\",\"b\",\"c\"]", (int32_t[]){1, 0}, 2);
    class_map_ok("[0,1,2]", "[2,1,0]", (int32_t[]){2, 1, 0}, 3);
    class_map_ok("[]", "[\"a\"]", NULL, 0);
    class_map_ok("[0.0]", "[1, -0.0]", (int32_t[]){1}, 1);
    class_map_ok("[\"x\"]", "[\"x\",\"x\"]", (int32_t[]){0}, 1);
    /* a class missing as it is matches its other spelling under the class
     * rule: integer CSV labels were strings before it, integers since */
    class_map_ok("[1, -20, 3]", "[\"3\",\"-20\",\"1\"]", (int32_t[]){2, 1, 0},
                 3);
    class_map_ok("[\"3\",\"9\",\"0\"]", "[0,3,9]", (int32_t[]){1, 2, 0}, 3);
    /* ... but the value as it is comes first */
    class_map_ok("[1, \"1\"]", "[\"1\", 1]", (int32_t[]){1, 0}, 2);
    /* only canonical integer text is an integer's other spelling */
    class_map_bad("[1]", "[\"01\", \"+1\", \"1.0\", \" 1\"]",
                  "class 1 (index 0) is not one of the 4 "
                  "known classes");
    class_map_bad("[\"-0\"]", "[0]", "class \"-0\" (index 0)");
    class_map_bad("[\"9007199254740992\"]", "[9007199254740992]",
                  "class \"9007199254740992\" (index 0)");
    class_map_bad("[1.0]", "[\"1\"]", "class 1.0 (index 0)");
    /* the first class missing is named */
    class_map_bad("[\"a\",\"zz\",\"yy\"]", "[\"a\"]", "class \"zz\" (index 1)");
    class_map_bad("{}", "[]", "must be arrays");
    class_map_bad("[]", "\"a\"", "must be arrays");
}

static void test_class_map_large(void **state)
{
    (void)state;
    const size_t n = TY_DS_MAX_CLASSES;
    json_t *from = json_array(), *to = json_array();
    for (size_t i = 0; i < n; i++) {
        char s[32];
        snprintf(s, sizeof s, "class %zu", i);
        json_array_append_new(from, json_string(s));
        snprintf(s, sizeof s, "class %zu", n - 1 - i);
        json_array_append_new(to, json_string(s));
    }
    int32_t *map = malloc(n * sizeof *map);
    assert_non_null(map);
    ty_err err;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(ty_dataset_class_map(from, to, map, &err), TY_OK);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(map[i], (int32_t)(n - 1 - i));
    /* hashed, not quadratic: well under a second even under sanitizers */
    double secs = (double)(t1.tv_sec - t0.tv_sec) +
                  (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    assert_true(secs < 2.0);
    free(map);
    json_decref(from);
    json_decref(to);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_task_names),
        cmocka_unit_test(test_open_good),
        cmocka_unit_test(test_open_damaged_header),
        cmocka_unit_test(test_open_truncated),
        cmocka_unit_test(test_open_class_index_out_of_range),
        cmocka_unit_test(test_open_bad_meta),
        cmocka_unit_test(test_open_missing_file),
        cmocka_unit_test(test_example_f32_uint8),
        cmocka_unit_test(test_class_map),
        cmocka_unit_test(test_class_map_large),
    };
    return cmocka_run_group_tests(tests, tu_tmpdir_setup, tu_tmpdir_teardown);
}
