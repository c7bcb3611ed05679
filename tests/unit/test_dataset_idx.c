/*
 * test_dataset_idx.c - ds_convert_idx on IDX files built here (plain and
 * gzipped), every rejection it promises, and a real conversion of
 * Fashion-MNIST when the files are installed.
 */
#include "ds_testutil.h"

#include <time.h>
#include <zlib.h>

#define FASHION_DIR "/usr/share/datasets/fashion-mnist"

/* Writes an IDX file: magic, dims (big-endian), then len bytes of data, and
 * `extra` more bytes of 0xee. gzip compresses it. */
static void write_idx(const char *path, uint32_t magic, const uint32_t *dims,
                      int nd, const uint8_t *data, size_t len, size_t extra,
                      int gzip)
{
    size_t total = 4 + 4 * (size_t)nd + len + extra;
    uint8_t *buf = malloc(total);
    assert_non_null(buf);
    uint32_t words[1 + 4];
    words[0] = magic;
    for (int i = 0; i < nd; i++)
        words[1 + i] = dims[i];
    for (int i = 0; i < 1 + nd; i++) {
        buf[4 * i] = (uint8_t)(words[i] >> 24);
        buf[4 * i + 1] = (uint8_t)(words[i] >> 16);
        buf[4 * i + 2] = (uint8_t)(words[i] >> 8);
        buf[4 * i + 3] = (uint8_t)words[i];
    }
    if (len)
        memcpy(buf + 4 + 4 * nd, data, len);
    memset(buf + 4 + 4 * nd + len, 0xee, extra);
    if (gzip) {
        gzFile gz = gzopen(path, "wb");
        assert_non_null(gz);
        assert_int_equal(gzwrite(gz, buf, (unsigned)total), (int)total);
        assert_int_equal(gzclose(gz), Z_OK);
    } else {
        dt_write(path, buf, total);
    }
    free(buf);
}

/* n images of rows x cols with pixel (i, k) = (i * 7 + k) & 0xff, and
 * labels i % classes. */
static void write_mnist_like(uint32_t n, uint32_t rows, uint32_t cols,
                             unsigned classes, int gzip_images, int gzip_labels)
{
    size_t px = (size_t)n * rows * cols;
    uint8_t *pixels = malloc(px), *labels = malloc(n);
    assert_non_null(pixels);
    assert_non_null(labels);
    for (size_t i = 0; i < n; i++) {
        for (size_t k = 0; k < (size_t)rows * cols; k++)
            pixels[i * rows * cols + k] = (uint8_t)((i * 7 + k) & 0xff);
        labels[i] = (uint8_t)(i % classes);
    }
    uint32_t idims[3] = {n, rows, cols}, ldims[1] = {n};
    write_idx(dt_path(0, "images.idx"), 0x803, idims, 3, pixels, px, 0,
              gzip_images);
    write_idx(dt_path(1, "labels.idx"), 0x801, ldims, 1, labels, n, 0,
              gzip_labels);
    free(pixels);
    free(labels);
}

static ty_status convert(ty_err *err)
{
    ty_err_clear(err);
    return ds_convert_idx(dt_path(0, "images.idx"), dt_path(1, "labels.idx"),
                          dt_path(2, "out.tyds"), err);
}

static void convert_bad(ty_status want, const char *field, ty_err *err)
{
    ty_status st = convert(err);
    if (st != want)
        fail_msg("expected %s, got %s (%s)", ty_status_name(want),
                 ty_status_name(st), err->msg);
    assert_string_equal(err->field, field);
    assert_false(fs_exists(dt_path(2, "out.tyds")));
}

static void check_mnist_like(uint32_t n, uint32_t rows, uint32_t cols,
                             unsigned classes)
{
    ty_dataset ds;
    ty_err err;
    if (ty_dataset_open(dt_path(2, "out.tyds"), &ds, &err) != TY_OK)
        fail_msg("open: %s", err.msg);
    assert_int_equal(ds.task, TY_TASK_CLASSIFICATION);
    assert_int_equal(ds.num_examples, n);
    assert_int_equal(ds.ndim, 3);
    assert_int_equal(ds.shape[0], 1);
    assert_int_equal(ds.shape[1], rows);
    assert_int_equal(ds.shape[2], cols);
    assert_int_equal(ds.features, (uint64_t)rows * cols);
    assert_int_equal(ds.x_dtype, TY_DTYPE_U8);
    assert_int_equal(ds.num_classes, classes);
    assert_string_equal(dt_meta_str(&ds, "format"), "idx");
    assert_string_equal(dt_meta_str(&ds, "preprocess"), "scale_255");
    assert_string_equal(dt_meta_str(&ds, "x_dtype"), "uint8");
    assert_null(json_object_get(ds.meta, "feature_names"));
    json_t *want = json_array();
    for (unsigned c = 0; c < classes; c++)
        json_array_append_new(want, json_integer(c));
    assert_true(json_equal(json_object_get(ds.meta, "classes"), want));
    json_decref(want);
    const uint8_t *x = ds.x;
    float *row = malloc(ds.features * sizeof *row);
    assert_non_null(row);
    for (uint32_t i = 0; i < n; i++) {
        assert_int_equal(ds.y_class[i], (int32_t)(i % classes));
        for (size_t k = 0; k < ds.features; k += 5)
            assert_int_equal(x[i * ds.features + k], (i * 7 + k) & 0xff);
    }
    ty_dataset_example_f32(&ds, n - 1, row);
    assert_true(row[3] == (float)(((n - 1) * 7 + 3) & 0xff));
    free(row);
    ty_dataset_close(&ds);
}

static void test_idx3_plain(void **state)
{
    (void)state;
    ty_err err;
    write_mnist_like(50, 5, 4, 10, 0, 0);
    assert_int_equal(convert(&err), TY_OK);
    check_mnist_like(50, 5, 4, 10);
}

static void test_idx3_gzipped(void **state)
{
    (void)state;
    ty_err err;
    /* big enough that the pixels span many read chunks */
    write_mnist_like(3000, 28, 28, 10, 1, 1);
    assert_int_equal(convert(&err), TY_OK);
    check_mnist_like(3000, 28, 28, 10);
    /* and either file alone */
    write_mnist_like(40, 3, 3, 4, 1, 0);
    assert_int_equal(convert(&err), TY_OK);
    check_mnist_like(40, 3, 3, 4);
    write_mnist_like(40, 3, 3, 4, 0, 1);
    assert_int_equal(convert(&err), TY_OK);
    check_mnist_like(40, 3, 3, 4);
}

/* Sparse labels seen out of order: the classes are the labels that occur,
 * sorted, and each image's class index follows them. */
static void test_sparse_labels(void **state)
{
    (void)state;
    ty_err err;
    ty_dataset ds;
    uint8_t data[5 * 4] = {0}, labels[5] = {9, 3, 255, 3, 0};
    uint32_t d3[3] = {5, 2, 2}, dl[1] = {5};
    write_idx(dt_path(0, "images.idx"), 0x803, d3, 3, data, sizeof data, 0, 0);
    write_idx(dt_path(1, "labels.idx"), 0x801, dl, 1, labels, 5, 0, 0);
    assert_int_equal(convert(&err), TY_OK);
    assert_int_equal(ty_dataset_open(dt_path(2, "out.tyds"), &ds, &err), TY_OK);
    assert_int_equal(ds.num_classes, 4);
    dt_assert_json(json_object_get(ds.meta, "classes"), "[0,3,9,255]");
    const int32_t want[5] = {2, 1, 3, 1, 0};
    for (int i = 0; i < 5; i++)
        assert_int_equal(ds.y_class[i], want[i]);
    ty_dataset_close(&ds);
}

static void test_idx2_and_idx4_shapes(void **state)
{
    (void)state;
    ty_err err;
    ty_dataset ds;
    uint8_t data[3 * 2 * 2 * 2], labels[3] = {2, 0, 2};
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (uint8_t)i;
    uint32_t d2[2] = {3, 8}, d4[4] = {3, 2, 2, 2}, dl[1] = {3};
    write_idx(dt_path(1, "labels.idx"), 0x801, dl, 1, labels, 3, 0, 0);

    write_idx(dt_path(0, "images.idx"), 0x802, d2, 2, data, sizeof data, 0, 0);
    assert_int_equal(convert(&err), TY_OK);
    assert_int_equal(ty_dataset_open(dt_path(2, "out.tyds"), &ds, &err), TY_OK);
    assert_int_equal(ds.ndim, 1);
    assert_int_equal(ds.shape[0], 8);
    /* the classes are the labels that occur, in increasing order (1 never
     * does) */
    assert_int_equal(ds.num_classes, 2);
    dt_assert_json(json_object_get(ds.meta, "classes"), "[0,2]");
    assert_int_equal(ds.y_class[0], 1);
    assert_int_equal(ds.y_class[1], 0);
    assert_int_equal(ds.y_class[2], 1);
    assert_int_equal(((const uint8_t *)ds.x)[23], 23);
    ty_dataset_close(&ds);

    write_idx(dt_path(0, "images.idx"), 0x804, d4, 4, data, sizeof data, 0, 0);
    assert_int_equal(convert(&err), TY_OK);
    assert_int_equal(ty_dataset_open(dt_path(2, "out.tyds"), &ds, &err), TY_OK);
    dt_assert_json(json_object_get(ds.meta, "input_shape"), "[2,2,2]");
    assert_int_equal(ds.features, 8);
    ty_dataset_close(&ds);
}

static void test_wrong_magic(void **state)
{
    (void)state;
    ty_err err;
    uint8_t px[4] = {0}, lb[1] = {0};
    uint32_t di[3] = {1, 2, 2}, dl[1] = {1};
    write_idx(dt_path(0, "images.idx"), 0x803, di, 3, px, 4, 0, 0);
    write_idx(dt_path(1, "labels.idx"), 0x801, dl, 1, lb, 1, 0, 0);
    assert_int_equal(convert(&err), TY_OK);

    /* an idx2 magic with three dimensions' worth of header */
    write_idx(dt_path(0, "images.idx"), 0x00000802 | 0x01000000u, di, 3, px, 4,
              0, 0);
    convert_bad(TY_EFORMAT, "images", &err);
    assert_string_equal(err.msg, "images file: bad magic 0x01000802 (expected "
                                 "an IDX3 ubyte file, 0x00000803)");

    /* the labels file given as images */
    write_idx(dt_path(0, "images.idx"), 0x801, dl, 1, lb, 1, 0, 0);
    convert_bad(TY_EFORMAT, "images", &err);
    assert_string_equal(err.msg, "images file: bad magic 0x00000801 (expected "
                                 "an IDX3 ubyte file, 0x00000803; this looks "
                                 "like a labels file)");

    write_idx(dt_path(0, "images.idx"), 0x803, di, 3, px, 4, 0, 0);
    write_idx(dt_path(1, "labels.idx"), 0x803, di, 3, px, 4, 0, 0);
    convert_bad(TY_EFORMAT, "labels", &err);
    dt_assert_contains(err.msg, "labels file: bad magic 0x00000803 (expected "
                                "an IDX1 ubyte file, 0x00000801");

    dt_write_str(dt_path(1, "labels.idx"), "la");
    convert_bad(TY_EFORMAT, "labels", &err);
    assert_string_equal(err.msg, "labels file is too short to be an IDX file "
                                 "(2 bytes)");
}

static void test_non_ubyte_type(void **state)
{
    (void)state;
    ty_err err;
    uint8_t px[16] = {0}, lb[1] = {0};
    uint32_t di[3] = {1, 2, 2}, dl[1] = {1};
    write_idx(dt_path(0, "images.idx"), 0x0d03, di, 3, px, 16, 0, 0);
    write_idx(dt_path(1, "labels.idx"), 0x801, dl, 1, lb, 1, 0, 0);
    convert_bad(TY_EFORMAT, "images", &err);
    assert_string_equal(err.msg, "images file: element type 0x0d (float32) is "
                                 "not supported; only unsigned bytes (0x08) "
                                 "are");
    write_idx(dt_path(0, "images.idx"), 0x803, di, 3, px, 4, 0, 0);
    write_idx(dt_path(1, "labels.idx"), 0x0c01, dl, 1, px, 4, 0, 0);
    convert_bad(TY_EFORMAT, "labels", &err);
    dt_assert_contains(err.msg, "element type 0x0c (int32) is not supported");
}

static void test_truncated_images(void **state)
{
    (void)state;
    ty_err err;
    uint8_t px[100] = {0}, lb[10] = {0};
    uint32_t di[3] = {10, 3, 4}, dl[1] = {10};
    write_idx(dt_path(0, "images.idx"), 0x803, di, 3, px, 100, 0, 0);
    write_idx(dt_path(1, "labels.idx"), 0x801, dl, 1, lb, 10, 0, 0);
    convert_bad(TY_EFORMAT, "images", &err);
    assert_string_equal(err.msg, "images file is truncated: expected 120 bytes "
                                 "of pixels, found 100");

    /* the same, gzipped */
    write_idx(dt_path(0, "images.idx"), 0x803, di, 3, px, 100, 0, 1);
    convert_bad(TY_EFORMAT, "images", &err);
    assert_string_equal(err.msg, "images file is truncated: expected 120 bytes "
                                 "of pixels, found 100");

    /* a header cut short */
    dt_write(dt_path(0, "images.idx"), "\x00\x00\x08\x03\x00\x00\x00\x0a\x00",
             9);
    convert_bad(TY_EFORMAT, "images", &err);
    assert_string_equal(err.msg, "images file is truncated: its header ends "
                                 "after 9 bytes");

    /* truncated labels */
    write_idx(dt_path(0, "images.idx"), 0x803, di, 3, px, 100, 20, 0);
    write_idx(dt_path(1, "labels.idx"), 0x801, dl, 1, lb, 7, 0, 0);
    convert_bad(TY_EFORMAT, "labels", &err);
    assert_string_equal(err.msg, "labels file is truncated: expected 10 "
                                 "labels, found 7");
}

static void test_trailing_bytes(void **state)
{
    (void)state;
    ty_err err;
    uint8_t px[12] = {0}, lb[1] = {0};
    uint32_t di[3] = {1, 3, 4}, dl[1] = {1};
    write_idx(dt_path(0, "images.idx"), 0x803, di, 3, px, 12, 5, 0);
    write_idx(dt_path(1, "labels.idx"), 0x801, dl, 1, lb, 1, 0, 0);
    convert_bad(TY_EFORMAT, "images", &err);
    dt_assert_contains(err.msg, "images file has 5 bytes after the last image");

    write_idx(dt_path(0, "images.idx"), 0x803, di, 3, px, 12, 3, 1);
    convert_bad(TY_EFORMAT, "images", &err);
    dt_assert_contains(err.msg, "images file has 3 bytes after the last image");

    write_idx(dt_path(0, "images.idx"), 0x803, di, 3, px, 12, 0, 0);
    write_idx(dt_path(1, "labels.idx"), 0x801, dl, 1, lb, 1, 1, 1);
    convert_bad(TY_EFORMAT, "labels", &err);
    dt_assert_contains(err.msg, "labels file has 1 byte after the last label");
}

static void test_count_mismatch(void **state)
{
    (void)state;
    ty_err err;
    uint8_t px[12] = {0}, lb[2] = {0};
    uint32_t di[3] = {3, 2, 2}, dl[1] = {2};
    write_idx(dt_path(0, "images.idx"), 0x803, di, 3, px, 12, 0, 0);
    write_idx(dt_path(1, "labels.idx"), 0x801, dl, 1, lb, 2, 0, 0);
    convert_bad(TY_EFORMAT, "labels", &err);
    assert_string_equal(err.msg, "labels file has 2 labels but the images "
                                 "file has 3 images");
}

static void test_zero_dimension_and_limits(void **state)
{
    (void)state;
    ty_err err;
    uint8_t lb[1] = {0};
    uint32_t di[3] = {1, 0, 4}, dl[1] = {1};
    write_idx(dt_path(0, "images.idx"), 0x803, di, 3, NULL, 0, 0, 0);
    write_idx(dt_path(1, "labels.idx"), 0x801, dl, 1, lb, 1, 0, 0);
    convert_bad(TY_EFORMAT, "images", &err);
    assert_string_equal(err.msg, "images file: dimension 2 is 0");

    uint32_t huge[3] = {1, 1u << 13, 1u << 12};
    write_idx(dt_path(0, "images.idx"), 0x803, huge, 3, NULL, 0, 0, 0);
    convert_bad(TY_ETOOBIG, "images", &err);
    dt_assert_contains(err.msg, "more than 16777216 values");

    uint32_t many[3] = {TY_DS_MAX_EXAMPLES + 1, 1, 1};
    write_idx(dt_path(0, "images.idx"), 0x803, many, 3, NULL, 0, 0, 0);
    convert_bad(TY_ETOOBIG, "images", &err);

    /* a labels header that claims far more than the file holds costs no
     * memory: it is simply truncated */
    uint32_t di_ok[3] = {TY_DS_MAX_EXAMPLES, 1, 1},
             dl_big[1] = {TY_DS_MAX_EXAMPLES};
    write_idx(dt_path(0, "images.idx"), 0x803, di_ok, 3, NULL, 0, 0, 0);
    write_idx(dt_path(1, "labels.idx"), 0x801, dl_big, 1, lb, 1, 0, 0);
    convert_bad(TY_EFORMAT, "labels", &err);
    dt_assert_contains(err.msg, "labels file is truncated");
}

static void test_corrupt_gzip(void **state)
{
    (void)state;
    ty_err err;
    write_mnist_like(200, 8, 8, 10, 1, 0);
    /* damage the deflate stream in the middle */
    const char *p = dt_path(0, "images.idx");
    FILE *f = fopen(p, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long size = ftell(f);
    assert_true(size > 100);
    assert_int_equal(fseek(f, size / 2, SEEK_SET), 0);
    for (int i = 0; i < 16; i++)
        fputc(0xff, f);
    assert_int_equal(fclose(f), 0);
    convert_bad(TY_EFORMAT, "images", &err);
    dt_assert_contains(err.msg, "images file: the gzip data");

    /* a gzip file cut short */
    write_mnist_like(200, 8, 8, 10, 1, 0);
    assert_int_equal(truncate(p, 60), 0);
    convert_bad(TY_EFORMAT, "images", &err);
    dt_assert_contains(err.msg, "images file: the gzip data ends early");
}

/* ---- gzip bombs: a file is inflated only as far as its header declares ---- */

/* Appends gzip members that inflate to `zeros` zero bytes (a multiple of 16
 * MiB): one member compressed once and written again and again, so a
 * gigabyte of zeros is about 1 MB on disk and a millisecond to build. */
static void append_gzip_zeros(const char *path, uint64_t zeros)
{
    const size_t block = 16u << 20;
    unsigned char *raw = calloc(1, block);
    assert_non_null(raw);
    z_stream z;
    memset(&z, 0, sizeof z);
    assert_int_equal(
        deflateInit2(&z, 9, Z_DEFLATED, 16 + MAX_WBITS, 9, Z_DEFAULT_STRATEGY),
        Z_OK);
    uLong cap = deflateBound(&z, block);
    unsigned char *member = malloc(cap);
    assert_non_null(member);
    z.next_in = raw;
    z.avail_in = (uInt)block;
    z.next_out = member;
    z.avail_out = (uInt)cap;
    assert_int_equal(deflate(&z, Z_FINISH), Z_STREAM_END);
    size_t mlen = cap - z.avail_out;
    deflateEnd(&z);
    FILE *f = fopen(path, "ab");
    assert_non_null(f);
    for (uint64_t done = 0; done < zeros; done += block)
        assert_int_equal(fwrite(member, 1, mlen, f), mlen);
    assert_int_equal(fclose(f), 0);
    free(raw);
    free(member);
}

static ty_status convert_ex(ds_idx_opts *opts, ty_err *err)
{
    ty_err_clear(err);
    opts->inflated = 12345; /* must be overwritten */
    return ds_convert_idx_ex(dt_path(0, "images.idx"), dt_path(1, "labels.idx"),
                             dt_path(2, "out.tyds"), opts, err);
}

#define BOMB_N 10u
#define BOMB_IMAGES (16u + BOMB_N * 28u * 28u) /* declared bytes */
#define BOMB_LABELS (8u + BOMB_N)
#define TRAILER_MAX 65536u /* idx.c's IDX_TRAILER_MAX (DS_CHUNK) */

static void test_gzip_bomb_stops_at_declared_size(void **state)
{
    (void)state;
    ty_err err;
    ds_idx_opts o = {0};
    /* a valid gzipped pair, then 1 GiB of zeros after the images (64 KB of
     * gzip standing for a gigabyte) */
    write_mnist_like(BOMB_N, 28, 28, 10, 1, 1);
    append_gzip_zeros(dt_path(0, "images.idx"), 1ull << 30);
    ty_status st = convert_ex(&o, &err);
    printf("images bomb: %s, %llu bytes inflated\n", err.msg,
           (unsigned long long)o.inflated);
    assert_int_equal(st, TY_EFORMAT);
    assert_string_equal(err.field, "images");
    assert_string_equal(err.msg, "images file has more data than its header "
                                 "declares (7856 bytes); it was not read "
                                 "further");
    assert_false(fs_exists(dt_path(2, "out.tyds")));
    /* the declared bytes of both files, the first trailing byte past the
     * count kept for the message, and nothing more */
    assert_true(o.inflated >= BOMB_IMAGES + BOMB_LABELS);
    assert_true(o.inflated <= BOMB_IMAGES + BOMB_LABELS + TRAILER_MAX + 1);

    /* the same after the labels: the images are not even read */
    write_mnist_like(BOMB_N, 28, 28, 10, 1, 1);
    append_gzip_zeros(dt_path(1, "labels.idx"), 1ull << 30);
    st = convert_ex(&o, &err);
    assert_int_equal(st, TY_EFORMAT);
    assert_string_equal(err.field, "labels");
    assert_string_equal(err.msg, "labels file has more data than its header "
                                 "declares (18 bytes); it was not read "
                                 "further");
    assert_true(o.inflated <= 16 + BOMB_LABELS + TRAILER_MAX + 1);

    /* a few trailing bytes are still counted exactly */
    write_mnist_like(BOMB_N, 28, 28, 10, 1, 1);
    append_gzip_zeros(dt_path(1, "labels.idx"), 0);
    uint8_t lb[BOMB_N] = {0};
    uint32_t dl[1] = {BOMB_N};
    write_idx(dt_path(1, "labels.idx"), 0x801, dl, 1, lb, BOMB_N, TRAILER_MAX,
              1);
    assert_int_equal(convert_ex(&o, &err), TY_EFORMAT);
    dt_assert_contains(err.msg, "labels file has 65536 bytes after the last "
                                "label");
}

static void test_gzip_header_over_the_budget(void **state)
{
    (void)state;
    ty_err err;
    ds_idx_opts o = {0};
    /* 1000 images of 4096 x 4096 declared (16 GiB): refused from the header
     * by the default budget, with nothing inflated past the header */
    uint8_t px[16] = {0}, lb[1] = {0};
    uint32_t di[3] = {1000, 4096, 4096}, dl[1] = {1000};
    write_idx(dt_path(0, "images.idx"), 0x803, di, 3, px, 16, 0, 1);
    write_idx(dt_path(1, "labels.idx"), 0x801, dl, 1, lb, 1, 0, 1);
    assert_int_equal(convert_ex(&o, &err), TY_ETOOBIG);
    assert_string_equal(err.field, "images");
    assert_string_equal(err.msg, "images file is compressed and its header "
                                 "declares 16777216016 bytes; the compressed "
                                 "files of an upload may hold at most "
                                 "2147483648 bytes in all");
    assert_int_equal(o.inflated, 16);
    assert_false(fs_exists(dt_path(2, "out.tyds")));
    /* plain files are not inflated, so the budget does not apply: that one
     * is merely truncated */
    write_idx(dt_path(0, "images.idx"), 0x803, di, 3, px, 16, 0, 0);
    assert_int_equal(convert_ex(&o, &err), TY_EFORMAT);
    dt_assert_contains(err.msg, "truncated");

    /* the budget is shared by both files; exactly enough passes */
    write_mnist_like(BOMB_N, 28, 28, 10, 1, 1);
    o.max_inflated = BOMB_IMAGES + BOMB_LABELS;
    assert_int_equal(convert_ex(&o, &err), TY_OK);
    assert_int_equal(o.inflated, BOMB_IMAGES + BOMB_LABELS);
    o.max_inflated = BOMB_IMAGES + BOMB_LABELS - 1;
    assert_int_equal(convert_ex(&o, &err), TY_ETOOBIG);
    assert_string_equal(err.field, "labels");
    assert_int_equal(o.inflated, 16 + 8);
    /* only the compressed file counts */
    write_mnist_like(BOMB_N, 28, 28, 10, 0, 1);
    o.max_inflated = BOMB_LABELS;
    assert_int_equal(convert_ex(&o, &err), TY_OK);
    assert_int_equal(o.inflated, BOMB_LABELS);
}

static void test_gzip_truncated_inflates_no_more(void **state)
{
    (void)state;
    ty_err err;
    ds_idx_opts o = {0};
    /* a stream cut short: refused, having inflated less than it declares */
    write_mnist_like(3000, 28, 28, 10, 1, 0);
    assert_int_equal(truncate(dt_path(0, "images.idx"), 4000), 0);
    assert_int_equal(convert_ex(&o, &err), TY_EFORMAT);
    assert_string_equal(err.field, "images");
    assert_string_equal(err.msg, "images file: the gzip data ends early (the "
                                 "file is truncated)");
    assert_true(o.inflated > 16);
    assert_true(o.inflated < 16 + 3000u * 28 * 28);
    /* a whole stream holding less than its header declares */
    uint8_t px[100] = {0}, lb[1] = {0};
    uint32_t di[3] = {1000, 10, 10}, dl[1] = {1000};
    write_idx(dt_path(0, "images.idx"), 0x803, di, 3, px, 100, 0, 1);
    write_idx(dt_path(1, "labels.idx"), 0x801, dl, 1, lb, 1, 0, 1);
    assert_int_equal(convert_ex(&o, &err), TY_EFORMAT);
    assert_string_equal(err.msg, "labels file is truncated: expected 1000 "
                                 "labels, found 1");
    assert_int_equal(o.inflated, 16 + 9);
}

/* Reads a whole file into a fresh buffer. */
static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    assert_true(n > 0);
    rewind(f);
    unsigned char *b = malloc((size_t)n);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

static void test_gzip_valid_same_result(void **state)
{
    (void)state;
    ty_err err;
    ds_idx_opts o = {0};
    size_t plain_len, gz_len;
    write_mnist_like(3000, 28, 28, 10, 0, 0);
    assert_int_equal(convert_ex(&o, &err), TY_OK);
    assert_int_equal(o.inflated, 0);
    unsigned char *plain = slurp(dt_path(2, "out.tyds"), &plain_len);
    write_mnist_like(3000, 28, 28, 10, 1, 1);
    assert_int_equal(convert_ex(&o, &err), TY_OK);
    assert_int_equal(o.inflated, 16 + 3000u * 28 * 28 + 8 + 3000);
    unsigned char *gz = slurp(dt_path(2, "out.tyds"), &gz_len);
    assert_int_equal(gz_len, plain_len);
    assert_memory_equal(gz, plain, plain_len);
    free(gz);
    check_mnist_like(3000, 28, 28, 10);

    /* concatenated members are one stream, and bytes after the last member
     * that are not a member are ignored (as zlib's gzread did) */
    const char *ip = dt_path(0, "images.idx");
    uint8_t *px = malloc(3000u * 28 * 28);
    assert_non_null(px);
    for (size_t i = 0; i < 3000; i++)
        for (size_t k = 0; k < 28 * 28; k++)
            px[i * 28 * 28 + k] = (uint8_t)((i * 7 + k) & 0xff);
    uint32_t di[3] = {3000, 28, 28};
    write_idx(ip, 0x803, di, 3, px, 1000, 0, 1); /* header + 1000 pixels */
    gzFile g = gzopen(ip, "ab");                 /* a second member */
    assert_non_null(g);
    assert_int_equal(gzwrite(g, px + 1000, 3000u * 28 * 28 - 1000),
                     (int)(3000u * 28 * 28 - 1000));
    assert_int_equal(gzclose(g), Z_OK);
    FILE *f = fopen(ip, "ab");
    assert_non_null(f);
    fputs("trailing garbage", f);
    fclose(f);
    free(px);
    assert_int_equal(convert_ex(&o, &err), TY_OK);
    gz = slurp(dt_path(2, "out.tyds"), &gz_len);
    assert_int_equal(gz_len, plain_len);
    assert_memory_equal(gz, plain, plain_len);
    free(gz);
    free(plain);
}

static void test_missing_and_empty_files(void **state)
{
    (void)state;
    ty_err err;
    write_mnist_like(2, 2, 2, 2, 0, 0);
    assert_int_equal(ds_convert_idx(dt_path(3, "nope"),
                                    dt_path(1, "labels.idx"),
                                    dt_path(2, "out.tyds"), &err),
                     TY_EIO);
    assert_string_equal(err.field, "images");
    dt_write(dt_path(1, "labels.idx"), "", 0);
    convert_bad(TY_EFORMAT, "labels", &err);
    dt_assert_contains(err.msg, "labels file is too short to be an IDX file");
}

/* The real thing: Fashion-MNIST's training set as downloaded. */
static void test_fashion_mnist(void **state)
{
    (void)state;
    const char *images = FASHION_DIR "/train-images-idx3-ubyte.gz";
    const char *labels = FASHION_DIR "/train-labels-idx1-ubyte.gz";
    if (!fs_exists(images) || !fs_exists(labels)) {
        print_message("Fashion-MNIST not found in " FASHION_DIR "; skipping\n");
        skip();
    }
    ty_err err;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ty_status st =
        ds_convert_idx(images, labels, dt_path(2, "fashion.tyds"), &err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (st != TY_OK)
        fail_msg("conversion failed: %s", err.msg);
    print_message("Fashion-MNIST train: converted in %.3f s\n",
                  (double)(t1.tv_sec - t0.tv_sec) +
                      (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);

    ty_dataset ds;
    assert_int_equal(ty_dataset_open(dt_path(2, "fashion.tyds"), &ds, &err),
                     TY_OK);
    assert_int_equal(ds.num_examples, 60000);
    dt_assert_json(json_object_get(ds.meta, "input_shape"), "[1,28,28]");
    assert_int_equal(ds.num_classes, 10);
    dt_assert_json(json_object_get(ds.meta, "classes"),
                   "[0,1,2,3,4,5,6,7,8,9]");
    /* every class is well represented (6000 each in the training set) */
    uint32_t counts[10] = {0};
    for (uint32_t i = 0; i < ds.num_examples; i++)
        counts[ds.y_class[i]]++;
    for (int c = 0; c < 10; c++)
        assert_int_equal(counts[c], 6000);
    /* the first training image is an ankle boot (class 9) */
    assert_int_equal(ds.y_class[0], 9);
    ty_dataset_close(&ds);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idx3_plain),
        cmocka_unit_test(test_idx3_gzipped),
        cmocka_unit_test(test_sparse_labels),
        cmocka_unit_test(test_idx2_and_idx4_shapes),
        cmocka_unit_test(test_wrong_magic),
        cmocka_unit_test(test_non_ubyte_type),
        cmocka_unit_test(test_truncated_images),
        cmocka_unit_test(test_trailing_bytes),
        cmocka_unit_test(test_count_mismatch),
        cmocka_unit_test(test_zero_dimension_and_limits),
        cmocka_unit_test(test_corrupt_gzip),
        cmocka_unit_test(test_gzip_bomb_stops_at_declared_size),
        cmocka_unit_test(test_gzip_header_over_the_budget),
        cmocka_unit_test(test_gzip_truncated_inflates_no_more),
        cmocka_unit_test(test_gzip_valid_same_result),
        cmocka_unit_test(test_missing_and_empty_files),
        cmocka_unit_test(test_fashion_mnist),
    };
    return cmocka_run_group_tests(tests, tu_tmpdir_setup, tu_tmpdir_teardown);
}
