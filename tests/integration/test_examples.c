/*
 * Integration tests for GET /v1/datasets/{id}/examples: items nested in the
 * example's shape with the stored values (uint8 pixels as 0-255) for IDX and
 * NPY images, CSV features with class names and regression targets, and the
 * offset/limit bounds; and the class counts and feature means a dataset's
 * doc carries from its upload. Another tenant's dataset is 404 in
 * test_tenants.c's isolation table.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static srv server;
static char files[PATH_MAX];
static char idx_ds[64], npy_ds[64], csv_ds[64], reg_ds[64];

#define N_IMG 10
#define ROWS 3
#define COLS 4

/* Pixel c of image i: distinct per image and position, 0..255. */
static unsigned char pixel(int i, int c)
{
    return (unsigned char)(i * 17 + c * 5);
}

static char *file_path(const char *name)
{
    static char p[4][PATH_MAX];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], PATH_MAX, "%s/%s", files, name);
    return p[k];
}

static void make_idx(const char *images, const char *labels)
{
    unsigned char img[16 + N_IMG * ROWS * COLS], lab[8 + N_IMG];
    unsigned char h3[16] = {0, 0, 8, 3,    0, 0, 0, N_IMG,
                            0, 0, 0, ROWS, 0, 0, 0, COLS};
    unsigned char h1[8] = {0, 0, 8, 1, 0, 0, 0, N_IMG};
    memcpy(img, h3, 16);
    memcpy(lab, h1, 8);
    for (int i = 0; i < N_IMG; i++) {
        lab[8 + i] = (unsigned char)(i % 3);
        for (int c = 0; c < ROWS * COLS; c++)
            img[16 + i * ROWS * COLS + c] = pixel(i, c);
    }
    write_file(images, img, sizeof img);
    write_file(labels, lab, sizeof lab);
}

/* x: uint8 (N_IMG, 1, ROWS, COLS) as NPY 1.0. */
static void make_npy_u8(const char *path)
{
    char head[128];
    int n = snprintf(head, sizeof head,
                     "{'descr': '|u1', 'fortran_order': False, 'shape': "
                     "(%d, 1, %d, %d), }",
                     N_IMG, ROWS, COLS);
    int total = 10 + n + 1;
    int pad = (64 - total % 64) % 64;
    unsigned short hl = (unsigned short)(n + pad + 1);
    unsigned char buf[512];
    size_t len = 0;
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (unsigned char)(hl & 0xff);
    buf[9] = (unsigned char)(hl >> 8);
    len = 10;
    memcpy(buf + len, head, (size_t)n);
    len += (size_t)n;
    memset(buf + len, ' ', (size_t)pad);
    len += (size_t)pad;
    buf[len++] = '\n';
    for (int i = 0; i < N_IMG; i++)
        for (int c = 0; c < ROWS * COLS; c++)
            buf[len++] = pixel(i, c);
    write_file(path, buf, len);
}

static void upload(const char *const *parts, char id[64])
{
    resp *r = http_upload(&server, "/v1/datasets", parts);
    if (r->status != 201)
        fprintf(stderr, "upload: %ld %.*s\n", r->status, (int)r->len, r->body);
    assert_int_equal(r->status, 201);
    snprintf(id, 64, "%s", json_string_value(json_object_get(r->json, "id")));
    resp_free(r);
}

static int setup(void **state)
{
    if (srv_start(&server, NULL, NULL))
        return -1;
    temp_dir(files);
    make_idx(file_path("img.idx3"), file_path("lab.idx1"));
    char a[PATH_MAX + 16], b[PATH_MAX + 16];
    snprintf(a, sizeof a, "images=@%s", file_path("img.idx3"));
    snprintf(b, sizeof b, "labels=@%s", file_path("lab.idx1"));
    const char *idx[] = {"name=idx", "format=idx", a, b, NULL};
    upload(idx, idx_ds);

    make_npy_u8(file_path("x.npy"));
    int64_t y[N_IMG];
    for (int i = 0; i < N_IMG; i++)
        y[i] = 2 - i % 3;
    write_npy_i64(file_path("y.npy"), y, N_IMG);
    snprintf(a, sizeof a, "x=@%s", file_path("x.npy"));
    snprintf(b, sizeof b, "y=@%s", file_path("y.npy"));
    const char *npy[] = {"name=npy", "format=npy", a, b, NULL};
    upload(npy, npy_ds);

    const char *csv = "a,b,kind\n1.5,-2,cat\n0.25,3e2,dog\n7,8,cat\n";
    write_file(file_path("c.csv"), csv, strlen(csv));
    snprintf(a, sizeof a, "file=@%s", file_path("c.csv"));
    const char *c[] = {"name=csv", "format=csv", "label_column=kind", a, NULL};
    upload(c, csv_ds);
    const char *reg = "a,t\n1,0.5\n2,-4.25\n";
    write_file(file_path("r.csv"), reg, strlen(reg));
    snprintf(a, sizeof a, "file=@%s", file_path("r.csv"));
    const char *rc[] = {
        "name=reg", "format=csv", "label_column=t", "task=regression", a, NULL};
    upload(rc, reg_ds);
    return 0;
}

static int teardown(void **state)
{
    srv_stop(&server, SIGTERM);
    srv_cleanup(&server);
    return 0;
}

static resp *examples(const char *ds, const char *query)
{
    char path[256];
    snprintf(path, sizeof path, "/v1/datasets/%s/examples%s", ds, query);
    return http_get(&server, path);
}

/* Checks that item's x is [1][ROWS][COLS] of image i's pixels. */
static void expect_image(const json_t *item, int i)
{
    assert_int_equal(json_integer_value(json_object_get(item, "index")), i);
    const json_t *x = json_object_get(item, "x");
    assert_true(json_is_array(x));
    assert_int_equal(json_array_size(x), 1);
    const json_t *plane = json_array_get(x, 0);
    assert_int_equal(json_array_size(plane), ROWS);
    for (int y = 0; y < ROWS; y++) {
        const json_t *row = json_array_get(plane, (size_t)y);
        assert_int_equal(json_array_size(row), COLS);
        for (int c = 0; c < COLS; c++) {
            const json_t *v = json_array_get(row, (size_t)c);
            assert_true(json_is_integer(v));
            assert_int_equal(json_integer_value(v), pixel(i, y * COLS + c));
        }
    }
}

static void test_idx_images(void **state)
{
    resp *r = examples(idx_ds, "?offset=2&limit=3");
    assert_int_equal(r->status, 200);
    assert_string_equal(json_string_value(json_object_get(r->json, "dataset")),
                        idx_ds);
    assert_int_equal(json_integer_value(json_object_get(r->json, "offset")), 2);
    assert_int_equal(json_integer_value(json_object_get(r->json, "total")),
                     N_IMG);
    const json_t *items = json_object_get(r->json, "items");
    assert_int_equal(json_array_size(items), 3);
    for (int k = 0; k < 3; k++) {
        const json_t *it = json_array_get(items, (size_t)k);
        expect_image(it, 2 + k);
        /* IDX classes are the label numbers. */
        const json_t *label = json_object_get(it, "label");
        assert_true(json_is_integer(label));
        assert_int_equal(json_integer_value(label), (2 + k) % 3);
    }
    resp_free(r);
}

static void test_npy_images_default_limit(void **state)
{
    resp *r = examples(npy_ds, "");
    assert_int_equal(r->status, 200);
    assert_int_equal(json_integer_value(json_object_get(r->json, "offset")), 0);
    const json_t *items = json_object_get(r->json, "items");
    assert_int_equal(json_array_size(items), 8);
    for (int i = 0; i < 8; i++) {
        const json_t *it = json_array_get(items, (size_t)i);
        expect_image(it, i);
        assert_int_equal(json_integer_value(json_object_get(it, "label")),
                         2 - i % 3);
    }
    resp_free(r);
}

static void test_csv_features_and_class_names(void **state)
{
    resp *r = examples(csv_ds, "?limit=64");
    assert_int_equal(r->status, 200);
    assert_int_equal(json_integer_value(json_object_get(r->json, "total")), 3);
    const json_t *items = json_object_get(r->json, "items");
    assert_int_equal(json_array_size(items), 3);
    static const double want[3][2] = {{1.5, -2}, {0.25, 300}, {7, 8}};
    static const char *const labels[3] = {"cat", "dog", "cat"};
    for (int i = 0; i < 3; i++) {
        const json_t *it = json_array_get(items, (size_t)i);
        const json_t *x = json_object_get(it, "x");
        assert_int_equal(json_array_size(x), 2);
        for (int j = 0; j < 2; j++)
            assert_true(json_number_value(json_array_get(x, (size_t)j)) ==
                        want[i][j]);
        assert_string_equal(json_string_value(json_object_get(it, "label")),
                            labels[i]);
    }
    resp_free(r);

    r = examples(reg_ds, "?offset=1");
    assert_int_equal(r->status, 200);
    items = json_object_get(r->json, "items");
    assert_int_equal(json_array_size(items), 1);
    const json_t *it = json_array_get(items, 0);
    assert_int_equal(json_integer_value(json_object_get(it, "index")), 1);
    assert_true(
        json_number_value(json_array_get(json_object_get(it, "x"), 0)) == 2);
    assert_true(json_is_number(json_object_get(it, "label")));
    assert_true(json_number_value(json_object_get(it, "label")) == -4.25);
    resp_free(r);
}

static void test_offset_and_limit_bounds(void **state)
{
    /* The last page is short; past the end is an empty list, not an error. */
    resp *r = examples(idx_ds, "?offset=9&limit=8");
    assert_int_equal(r->status, 200);
    assert_int_equal(json_array_size(json_object_get(r->json, "items")), 1);
    resp_free(r);
    const char *empty[] = {"?offset=10", "?offset=1000000"};
    for (size_t k = 0; k < 2; k++) {
        r = examples(idx_ds, empty[k]);
        assert_int_equal(r->status, 200);
        assert_int_equal(json_array_size(json_object_get(r->json, "items")), 0);
        assert_int_equal(json_integer_value(json_object_get(r->json, "total")),
                         N_IMG);
        resp_free(r);
    }
    r = examples(idx_ds, "?limit=64");
    assert_int_equal(r->status, 200);
    assert_int_equal(json_array_size(json_object_get(r->json, "items")), N_IMG);
    resp_free(r);

    static const struct {
        const char *q, *field;
    } bad[] = {
        {"?limit=0", "limit"},   {"?limit=65", "limit"},
        {"?limit=abc", "limit"}, {"?limit=", "limit"},
        {"?limit=2.5", "limit"}, {"?offset=-1", "offset"},
        {"?offset=x", "offset"}, {"?offset=99999999999999999999", "offset"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        r = examples(idx_ds, bad[k].q);
        if (r->status != 400)
            fprintf(stderr, "%s: %ld\n", bad[k].q, r->status);
        assert_int_equal(r->status, 400);
        assert_string_equal(
            json_string_value(json_object_get(r->json, "field")), bad[k].field);
        resp_free(r);
    }
}

static void test_unknown_dataset_is_404(void **state)
{
    resp *r = examples("ds_aaaaaaaaaaaaaaaaaaaa", "");
    assert_int_equal(r->status, 404);
    resp_free(r);
    /* And without a key, 401 before anything else. */
    char path[256];
    snprintf(path, sizeof path, "/v1/datasets/%s/examples", idx_ds);
    r = http_do(&server, "GET", path, NULL, NULL, 0, "");
    assert_int_equal(r->status, 401);
    resp_free(r);
}

/* Expects doc[key] to be these n numbers (n 0: absent). */
static void expect_numbers(const json_t *doc, const char *key,
                           const double *want, size_t n)
{
    const json_t *a = json_object_get(doc, key);
    if (!n) {
        assert_null(a);
        return;
    }
    assert_true(json_is_array(a));
    assert_int_equal(json_array_size(a), n);
    for (size_t i = 0; i < n; i++) {
        double got = json_number_value(json_array_get(a, i));
        if (got < want[i] - 1e-6 || got > want[i] + 1e-6)
            fprintf(stderr, "%s[%zu]: %g, not %g\n", key, i, got, want[i]);
        assert_true(got >= want[i] - 1e-6 && got <= want[i] + 1e-6);
    }
}

/* The upload counts each class (in class order) and, for flat inputs,
 * averages each feature; images get no means, regression no counts. */
static void test_doc_class_counts_and_feature_means(void **state)
{
    static const double idx_counts[] = {4, 3, 3}; /* labels i % 3 */
    static const double npy_counts[] = {3, 3, 4}; /* labels 2 - i % 3 */
    static const double csv_counts[] = {2, 1};    /* cat, dog */
    static const double csv_means[] = {(1.5 + 0.25 + 7) / 3,
                                       (-2 + 300.0 + 8) / 3};
    static const double reg_means[] = {1.5};
    static const struct {
        const char *id;
        const double *counts, *means;
        size_t n_counts, n_means;
    } cases[] = {
        {idx_ds, idx_counts, NULL, 3, 0},
        {npy_ds, npy_counts, NULL, 3, 0},
        {csv_ds, csv_counts, csv_means, 2, 2},
        {reg_ds, NULL, reg_means, 0, 1},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char path[128];
        snprintf(path, sizeof path, "/v1/datasets/%s", cases[k].id);
        resp *r = http_get(&server, path);
        assert_int_equal(r->status, 200);
        expect_numbers(r->json, "class_counts", cases[k].counts,
                       cases[k].n_counts);
        expect_numbers(r->json, "feature_means", cases[k].means,
                       cases[k].n_means);
        resp_free(r);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idx_images),
        cmocka_unit_test(test_npy_images_default_limit),
        cmocka_unit_test(test_csv_features_and_class_names),
        cmocka_unit_test(test_offset_and_limit_bounds),
        cmocka_unit_test(test_unknown_dataset_is_404),
        cmocka_unit_test(test_doc_class_counts_and_feature_means),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
