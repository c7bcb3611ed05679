/*
 * Integration tests: a real `trainyard serve` driven over HTTP. Covers the
 * public endpoints, auth, datasets in every format (upload and fetch), the
 * 4xx paths, training through to predictions (REST and KServe v2), model
 * import (POST /v1/models), cancel, and the SIGKILL-restart resume.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <fcntl.h>
#include <math.h>
#include <microhttpd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>
#include <sqlite3.h>
#include <zlib.h>

#include "common/fsutil.h"
#include "common/rng.h"
#include "harness.h"
#include "node/placement.h"
#include "models/safetensors.h"

static srv server;           /* shared by the tests that need no restart */
static char files[PATH_MAX]; /* test data files */

/* ---- test data ---- */

/* n images of rows x cols: class 1 is bright on top, class 0 at the bottom. */
static void make_idx(const char *images, const char *labels, int n, int rows,
                     int cols, int gzip)
{
    size_t px = (size_t)rows * cols;
    unsigned char *img = malloc(16 + (size_t)n * px),
                  *lab = malloc(8 + (size_t)n);
    unsigned char h3[16] = {0,
                            0,
                            8,
                            3,
                            (unsigned char)(n >> 24),
                            (unsigned char)(n >> 16),
                            (unsigned char)(n >> 8),
                            (unsigned char)n,
                            0,
                            0,
                            0,
                            (unsigned char)rows,
                            0,
                            0,
                            0,
                            (unsigned char)cols};
    unsigned char h1[8] = {0,
                           0,
                           8,
                           1,
                           (unsigned char)(n >> 24),
                           (unsigned char)(n >> 16),
                           (unsigned char)(n >> 8),
                           (unsigned char)n};
    memcpy(img, h3, 16);
    memcpy(lab, h1, 8);
    ty_rng r;
    ty_rng_seed(&r, 11, 0);
    for (int i = 0; i < n; i++) {
        int k = i % 2;
        lab[8 + i] = (unsigned char)k;
        for (int y = 0; y < rows; y++)
            for (int x = 0; x < cols; x++) {
                int top = y < rows / 2;
                int bright = (top == k);
                img[16 + (size_t)i * px + (size_t)y * cols + x] =
                    (unsigned char)(bright ? 180 + ty_rng_below(&r, 70)
                                           : ty_rng_below(&r, 60));
            }
    }
    if (gzip) {
        gzFile g = gzopen(images, "wb");
        gzwrite(g, img, (unsigned)(16 + (size_t)n * px));
        gzclose(g);
    } else {
        write_file(images, img, 16 + (size_t)n * px);
    }
    write_file(labels, lab, 8 + (size_t)n);
    free(img);
    free(lab);
}

/* x (n, d) float32, y int64 class = argmax of the first 3 features. */
static void make_npy_classes(const char *xp, const char *yp, int n, int d,
                             uint64_t seed)
{
    float *x = malloc(sizeof(float) * (size_t)n * d);
    int64_t *y = malloc(sizeof(int64_t) * (size_t)n);
    ty_rng r;
    ty_rng_seed(&r, seed, 0);
    for (int i = 0; i < n; i++) {
        int best = 0;
        for (int j = 0; j < d; j++) {
            x[(size_t)i * d + j] = ty_rng_normal(&r);
            if (j < 3 && x[(size_t)i * d + j] > x[(size_t)i * d + best])
                best = j;
        }
        y[i] = best;
    }
    write_npy_f32(xp, x, (size_t)n, (size_t)d);
    write_npy_i64(yp, y, (size_t)n);
    free(x);
    free(y);
}

static char *file_path(const char *name)
{
    static char p[8][PATH_MAX];
    static int next;
    char *out = p[next++ % 8];
    snprintf(out, PATH_MAX, "%s/%s", files, name);
    return out;
}

/* Uploads and returns the new dataset's id (static buffer per call site). */
static void upload_ok(const srv *s, const char *const *parts, char id[64])
{
    resp *r = http_upload(s, "/v1/datasets", parts);
    if (r->status != 201)
        fprintf(stderr, "upload failed: %ld %s\n", r->status, r->body);
    assert_int_equal(r->status, 201);
    assert_non_null(r->json);
    snprintf(id, 64, "%s", json_string_value(json_object_get(r->json, "id")));
    assert_true(strncmp(id, "ds_", 3) == 0);
    resp_free(r);
}

static char csv_ds[64], idx_ds[64], npy_ds[64];

static int group_setup(void **state)
{
    temp_dir(files);
    make_blobs_csv(file_path("blobs.csv"), 300, 7);
    make_idx(file_path("img.idx3.gz"), file_path("lab.idx1"), 200, 8, 8, 1);
    make_npy_classes(file_path("x.npy"), file_path("y.npy"), 600, 6, 3);
    /* The fetch-by-URL tests' files are served on loopback. */
    const char *flags[] = {"--fetch-allow-networks", "127.0.0.1/32", NULL};
    return srv_start(&server, NULL, flags);
}

static int group_teardown(void **state)
{
    int ws = srv_stop(&server, SIGTERM);
    srv_cleanup(&server);
    fs_remove_tree(files, NULL);
    /* A graceful stop exits 0. */
    return WIFEXITED(ws) && WEXITSTATUS(ws) == 0 ? 0 : -1;
}

/* ---- public endpoints and auth ---- */

static void test_health_and_openapi_are_public(void **state)
{
    resp *r = http_do(&server, "GET", "/healthz", NULL, NULL, 0, "");
    assert_int_equal(r->status, 200);
    assert_string_equal(json_string_value(json_object_get(r->json, "status")),
                        "ok");
    resp_free(r);
    r = http_do(&server, "GET", "/readyz", NULL, NULL, 0, "");
    assert_int_equal(r->status, 200);
    resp_free(r);
    r = http_do(&server, "GET", "/openapi.yaml", NULL, NULL, 0, "");
    assert_int_equal(r->status, 200);
    assert_non_null(strstr(r->body, "openapi: 3.1"));
    assert_non_null(strstr(r->content_type, "yaml"));
    resp_free(r);
}

static void test_v1_and_v2_need_a_key(void **state)
{
    static const char *const paths[] = {"/v1/datasets", "/v1/jobs",
                                        "/v1/models", "/v2/health/live"};
    for (size_t i = 0; i < 4; i++) {
        resp *r = http_do(&server, "GET", paths[i], NULL, NULL, 0, "");
        assert_int_equal(r->status, 401);
        assert_non_null(strstr(r->content_type, "application/problem+json"));
        assert_non_null(
            strstr(json_string_value(json_object_get(r->json, "detail")),
                   "Authorization: Bearer"));
        resp_free(r);
        r = http_do(&server, "GET", paths[i], NULL, NULL, 0,
                    "ty_aaaaaaaaaaaaaaaaaaaa_"
                    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
        assert_int_equal(r->status, 401);
        resp_free(r);
    }
    /* A key with the right id but a wrong secret is refused too. */
    char forged[128];
    snprintf(forged, sizeof forged, "%s", server.key);
    forged[strlen(forged) - 1] = forged[strlen(forged) - 1] == 'a' ? 'b' : 'a';
    resp *r = http_do(&server, "GET", "/v1/datasets", NULL, NULL, 0, forged);
    assert_int_equal(r->status, 401);
    resp_free(r);
    r = http_get(&server, "/v2/health/live");
    assert_int_equal(r->status, 200);
    assert_true(json_is_true(json_object_get(r->json, "live")));
    resp_free(r);
}

static void test_unknown_route_and_method(void **state)
{
    resp *r = http_get(&server, "/v1/nothing");
    assert_int_equal(r->status, 404);
    assert_non_null(strstr(r->content_type, "application/problem+json"));
    assert_int_equal(json_integer_value(json_object_get(r->json, "status")),
                     404);
    resp_free(r);
    r = http_do(&server, "PUT", "/v1/datasets", NULL, NULL, 0, NULL);
    assert_int_equal(r->status, 405);
    resp_free(r);
}

/* ---- datasets ---- */

static void test_upload_csv(void **state)
{
    char part[PATH_MAX + 8];
    snprintf(part, sizeof part, "file=@%s", file_path("blobs.csv"));
    const char *parts[] = {
        "name=blobs",          "format=csv", "label_column=species",
        "task=classification", part,         NULL};
    resp *r = http_upload(&server, "/v1/datasets", parts);
    assert_int_equal(r->status, 201);
    json_t *d = r->json;
    snprintf(csv_ds, sizeof csv_ds, "%s",
             json_string_value(json_object_get(d, "id")));
    assert_string_equal(json_string_value(json_object_get(d, "format")), "csv");
    assert_string_equal(json_string_value(json_object_get(d, "task")),
                        "classification");
    assert_int_equal(json_integer_value(json_object_get(d, "num_examples")),
                     300);
    assert_int_equal(json_integer_value(
                         json_array_get(json_object_get(d, "input_shape"), 0)),
                     4);
    assert_int_equal(json_integer_value(json_object_get(d, "num_classes")), 3);
    assert_string_equal(
        json_string_value(json_array_get(json_object_get(d, "classes"), 1)),
        "versicolor");
    assert_int_equal(json_string_length(json_object_get(d, "sha256")), 64);
    assert_true(json_integer_value(json_object_get(d, "bytes")) > 300 * 4 * 4);
    assert_non_null(json_object_get(d, "created_at"));
    char loc[128];
    snprintf(loc, sizeof loc, "/v1/datasets/%s", csv_ds);
    assert_string_equal(r->location, loc);
    resp_free(r);
    r = http_get(&server, loc);
    assert_int_equal(r->status, 200);
    assert_string_equal(json_string_value(json_object_get(r->json, "name")),
                        "blobs");
    resp_free(r);
}

static void test_upload_idx_gz_and_npy(void **state)
{
    char a[PATH_MAX + 8], b[PATH_MAX + 8];
    snprintf(a, sizeof a, "images=@%s", file_path("img.idx3.gz"));
    snprintf(b, sizeof b, "labels=@%s", file_path("lab.idx1"));
    const char *idx[] = {"name=tiny images", "format=idx", a, b, NULL};
    resp *r = http_upload(&server, "/v1/datasets", idx);
    assert_int_equal(r->status, 201);
    snprintf(idx_ds, sizeof idx_ds, "%s",
             json_string_value(json_object_get(r->json, "id")));
    json_t *shape = json_object_get(r->json, "input_shape");
    assert_int_equal(json_array_size(shape), 3);
    assert_int_equal(json_integer_value(json_array_get(shape, 0)), 1);
    assert_int_equal(json_integer_value(json_array_get(shape, 1)), 8);
    assert_int_equal(
        json_integer_value(json_object_get(r->json, "num_classes")), 2);
    resp_free(r);

    snprintf(a, sizeof a, "x=@%s", file_path("x.npy"));
    snprintf(b, sizeof b, "y=@%s", file_path("y.npy"));
    const char *npy[] = {"name=vectors", "format=npy", a, b, NULL};
    upload_ok(&server, npy, npy_ds);
}

static void test_list_paginates(void **state)
{
    resp *r = http_get(&server, "/v1/datasets?limit=2");
    assert_int_equal(r->status, 200);
    json_t *items = json_object_get(r->json, "items");
    assert_int_equal(json_array_size(items), 2);
    /* Newest first. */
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(items, 0), "id")),
        npy_ds);
    const char *cursor =
        json_string_value(json_object_get(r->json, "next_cursor"));
    assert_non_null(cursor);
    char path[256];
    snprintf(path, sizeof path, "/v1/datasets?limit=2&cursor=%s", cursor);
    resp *r2 = http_get(&server, path);
    assert_int_equal(r2->status, 200);
    json_t *items2 = json_object_get(r2->json, "items");
    assert_true(json_array_size(items2) >= 1);
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(items2, 0), "id")),
        csv_ds);
    resp_free(r);
    resp_free(r2);
    r = http_get(&server, "/v1/datasets?limit=0");
    assert_int_equal(r->status, 400);
    assert_string_equal(json_string_value(json_object_get(r->json, "field")),
                        "limit");
    resp_free(r);
    r = http_get(&server, "/v1/datasets?cursor=bogus");
    assert_int_equal(r->status, 400);
    resp_free(r);
}

static void expect_upload_422(const char *const *parts, const char *needle)
{
    resp *r = http_upload(&server, "/v1/datasets", parts);
    if (r->status != 422 || !strstr(r->body, needle))
        fprintf(stderr, "expected 422 with '%s', got %ld %s\n", needle,
                r->status, r->body);
    assert_int_equal(r->status, 422);
    assert_non_null(strstr(r->content_type, "application/problem+json"));
    assert_non_null(
        strstr(json_string_value(json_object_get(r->json, "detail")), needle));
    resp_free(r);
}

static void test_bad_uploads_get_422(void **state)
{
    write_file(file_path("ragged.csv"), "a,b,label\n1,2,x\n3,4\n", 20);
    /* a word in a feature column makes it categorical (issue 30); a
     * regression target must still be a number */
    write_file(file_path("nan.csv"), "a,b,label\n1,2,5\n3,4,abc\n", 24);
    char p1[PATH_MAX + 8], p2[PATH_MAX + 8];
    snprintf(p1, sizeof p1, "file=@%s", file_path("ragged.csv"));
    const char *ragged[] = {"name=r", "format=csv", "label_column=label", p1,
                            NULL};
    expect_upload_422(ragged, "line 3");
    snprintf(p1, sizeof p1, "file=@%s", file_path("nan.csv"));
    const char *nonnum[] = {
        "name=n",          "format=csv", "label_column=label",
        "task=regression", p1,           NULL};
    expect_upload_422(nonnum, "line 3, column 3");
    const char *nolabel[] = {"name=n", "format=csv", "label_column=nope", p1,
                             NULL};
    expect_upload_422(nolabel, "nope");
    const char *missing[] = {"name=n", "format=csv", "label_column=label",
                             NULL};
    expect_upload_422(missing, "'file' is missing");
    const char *badfmt[] = {"name=n", "format=parquet", p1, NULL};
    expect_upload_422(badfmt, "csv, idx, npy, text or tokens");
    const char *unknown[] = {"name=n", "format=csv", "label_column=label",
                             p1,       "colour=red", NULL};
    expect_upload_422(unknown, "colour");

    /* IDX: wrong magic, and labels that do not match the images. */
    write_file(file_path("bad.idx"), "\x00\x00\x08\x07\x00\x00\x00\x01", 8);
    snprintf(p1, sizeof p1, "images=@%s", file_path("bad.idx"));
    snprintf(p2, sizeof p2, "labels=@%s", file_path("lab.idx1"));
    const char *magic[] = {"name=i", "format=idx", p1, p2, NULL};
    expect_upload_422(magic, "magic");
    make_idx(file_path("img50.idx3"), file_path("lab50.idx1"), 50, 8, 8, 0);
    snprintf(p1, sizeof p1, "images=@%s", file_path("img50.idx3"));
    const char *count[] = {"name=i", "format=idx", p1, p2, NULL};
    expect_upload_422(count, "200");

    /* Nothing was stored by the failures. */
    resp *r = http_get(&server, "/v1/datasets?limit=100");
    assert_int_equal(json_array_size(json_object_get(r->json, "items")), 3);
    resp_free(r);
}

/* Appends gzip members holding `zeros` zero bytes (a multiple of 16 MiB),
 * compressed once: a gigabyte of zeros is about 1 MB on disk. */
static void append_gzip_zeros(const char *path, uint64_t zeros)
{
    const size_t block = 16u << 20;
    unsigned char *raw = calloc(1, block);
    z_stream z;
    memset(&z, 0, sizeof z);
    assert_non_null(raw);
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

/* A gzip bomb (a valid IDX header and pixels, then 1 GiB of zeros in about
 * 1 MB) is refused at the first byte past what the header declares, and a
 * compressed header declaring more than --max-upload-bytes before any data
 * is inflated: 422s naming the images field. */
static void test_gzip_bomb_upload_422(void **state)
{
    (void)state;
    char p1[PATH_MAX + 8], p2[PATH_MAX + 8];
    make_idx(file_path("bomb.idx3.gz"), file_path("bomb.idx1"), 200, 8, 8, 1);
    append_gzip_zeros(file_path("bomb.idx3.gz"), 1ull << 30);
    snprintf(p1, sizeof p1, "images=@%s", file_path("bomb.idx3.gz"));
    snprintf(p2, sizeof p2, "labels=@%s", file_path("bomb.idx1"));
    const char *bomb[] = {"name=b", "format=idx", p1, p2, NULL};
    expect_upload_422(bomb, "images file has more data than its header "
                            "declares (12816 bytes)");
    resp *r = http_upload(&server, "/v1/datasets", bomb);
    assert_string_equal(json_string_value(json_object_get(r->json, "field")),
                        "images");
    resp_free(r);

    /* 200 images of 4096 x 4096 declared: 3.4 GB, over the 2 GiB limit */
    unsigned char head[16] = {0, 0, 8,  3, 0, 0, 0,  200,
                              0, 0, 16, 0, 0, 0, 16, 0};
    gzFile g = gzopen(file_path("huge.idx3.gz"), "wb");
    assert_non_null(g);
    assert_int_equal(gzwrite(g, head, sizeof head), (int)sizeof head);
    assert_int_equal(gzclose(g), Z_OK);
    snprintf(p1, sizeof p1, "images=@%s", file_path("huge.idx3.gz"));
    const char *huge[] = {"name=h", "format=idx", p1, p2, NULL};
    expect_upload_422(huge, "images file is compressed and its header "
                            "declares 3355443216 bytes; the compressed files "
                            "of an upload may hold at most 2147483648 bytes");
}

static void test_bad_request_bodies(void **state)
{
    resp *r = http_json(&server, "POST", "/v1/jobs", "{not json");
    assert_int_equal(r->status, 400);
    assert_non_null(
        strstr(json_string_value(json_object_get(r->json, "detail")),
               "not valid JSON"));
    resp_free(r);
    r = http_do(&server, "POST", "/v1/jobs", "text/plain", "hi", 2, NULL);
    assert_int_equal(r->status, 415);
    resp_free(r);
    r = http_json(&server, "POST", "/v1/jobs", "[1,2]");
    assert_int_equal(r->status, 400);
    resp_free(r);
    /* A route that takes no body: {} (what many clients send with every
     * POST) counts as none, anything else is refused. */
    r = http_do(&server, "POST", "/v1/jobs/job_x/cancel", "application/json",
                "{}", 2, NULL);
    assert_int_equal(r->status, 404);
    resp_free(r);
    r = http_do(&server, "POST", "/v1/jobs/job_x/cancel", "application/json",
                "{\"a\": 1}", 8, NULL);
    assert_int_equal(r->status, 413);
    resp_free(r);
}

/* Serves files from the test folder, for the fetch-by-URL tests. */
static enum MHD_Result serve_file(void *cls, struct MHD_Connection *c,
                                  const char *url, const char *method,
                                  const char *version, const char *data,
                                  size_t *size, void **ptr)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s%s", files, url);
    int64_t len = strstr(url, "..") ? -1 : fs_file_size(path);
    struct MHD_Response *r;
    enum MHD_Result ret;
    if (len < 0) {
        r = MHD_create_response_from_buffer(9, "not found",
                                            MHD_RESPMEM_PERSISTENT);
        ret = MHD_queue_response(c, 404, r);
    } else {
        r = MHD_create_response_from_fd((uint64_t)len, open(path, 0));
        ret = MHD_queue_response(c, 200, r);
    }
    MHD_destroy_response(r);
    return ret;
}

static void test_fetch_from_urls(void **state)
{
    struct MHD_Daemon *d =
        MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL,
                         serve_file, NULL, MHD_OPTION_END);
    assert_non_null(d);
    int port = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT)->port;
    char body[1024];
    snprintf(body, sizeof body,
             "{\"name\": \"fetched\", \"format\": \"idx\", \"urls\": "
             "{\"images\": \"http://127.0.0.1:%d/img.idx3.gz\", "
             "\"labels\": \"http://127.0.0.1:%d/lab.idx1\"}}",
             port, port);
    resp *r = http_json(&server, "POST", "/v1/datasets", body);
    assert_int_equal(r->status, 201);
    assert_int_equal(
        json_integer_value(json_object_get(r->json, "num_examples")), 200);
    char del[128];
    snprintf(del, sizeof del, "/v1/datasets/%s",
             json_string_value(json_object_get(r->json, "id")));
    resp_free(r);

    snprintf(
        body, sizeof body,
        "{\"name\": \"f\", \"format\": \"csv\", \"label_column\": \"species\", "
        "\"urls\": {\"file\": \"http://127.0.0.1:%d/missing.csv\"}}",
        port);
    r = http_json(&server, "POST", "/v1/datasets", body);
    assert_int_equal(r->status, 422);
    assert_non_null(strstr(r->body, "HTTP 404"));
    assert_string_equal(json_string_value(json_object_get(r->json, "field")),
                        "urls.file");
    resp_free(r);

    r = http_json(
        &server, "POST", "/v1/datasets",
        "{\"name\": \"f\", \"format\": \"csv\", \"label_column\": \"s\", "
        "\"urls\": {\"file\": \"ftp://127.0.0.1/x.csv\"}}");
    assert_int_equal(r->status, 422);
    assert_non_null(strstr(r->body, "http:// or https://"));
    resp_free(r);

    /* Nothing listens on port 1. */
    r = http_json(
        &server, "POST", "/v1/datasets",
        "{\"name\": \"f\", \"format\": \"csv\", \"label_column\": \"s\", "
        "\"urls\": {\"file\": \"http://127.0.0.1:1/x.csv\"}}");
    assert_int_equal(r->status, 422);
    assert_non_null(strstr(r->body, "cannot fetch"));
    resp_free(r);
    MHD_stop_daemon(d);

    r = http_do(&server, "DELETE", del, NULL, NULL, 0, NULL);
    assert_int_equal(r->status, 204);
    resp_free(r);
    r = http_get(&server, del);
    assert_int_equal(r->status, 404);
    resp_free(r);
}

/* ---- jobs, models, predictions ---- */

static void expect_job_422(const char *body, const char *field)
{
    resp *r = http_json(&server, "POST", "/v1/jobs", body);
    if (r->status != 422)
        fprintf(stderr, "expected 422 for %s, got %ld %s\n", body, r->status,
                r->body);
    assert_int_equal(r->status, 422);
    const char *got = json_string_value(json_object_get(r->json, "field"));
    if (!got || strcmp(got, field))
        fprintf(stderr, "expected field %s, got %s (%s)\n", field,
                got ? got : "none", r->body);
    assert_non_null(got);
    assert_string_equal(got, field);
    resp_free(r);
}

static void test_job_validation_errors(void **state)
{
    char b[1024];
    snprintf(b, sizeof b,
             "{\"dataset\": \"ds_nope\", \"model\": {\"layers\": []}}");
    expect_job_422(b, "dataset");
    snprintf(b, sizeof b,
             "{\"dataset\": \"%s\", \"model\": {\"layers\": [{\"type\": "
             "\"dense\", \"units\": 10}]}}",
             idx_ds);
    resp *r = http_json(&server, "POST", "/v1/jobs", b);
    assert_int_equal(r->status, 422);
    assert_non_null(strstr(
        json_string_value(json_object_get(r->json, "detail")), "flatten"));
    resp_free(r);
    snprintf(b, sizeof b,
             "{\"dataset\": \"%s\", \"model\": {\"layers\": [{\"type\": "
             "\"dense\", \"units\": 5}]}}",
             csv_ds);
    expect_job_422(b, "model.layers[0].units");
    snprintf(b, sizeof b,
             "{\"dataset\": \"%s\", \"model\": {\"layers\": [{\"type\": "
             "\"conv9d\"}]}}",
             csv_ds);
    expect_job_422(b, "model.layers[0].type");
    snprintf(b, sizeof b,
             "{\"dataset\": \"%s\", \"model\": {\"layers\": [{\"type\": "
             "\"dense\", \"units\": 3, \"colour\": 1}]}}",
             csv_ds);
    expect_job_422(b, "model.layers[0].colour");
    snprintf(
        b, sizeof b,
        "{\"dataset\": \"%s\", \"model\": {\"layers\": [{\"type\": \"dense\", "
        "\"units\": 3}]}, \"hyperparameters\": {\"epochs\": 0}}",
        csv_ds);
    expect_job_422(b, "hyperparameters.epochs");
    snprintf(
        b, sizeof b,
        "{\"dataset\": \"%s\", \"model\": {\"layers\": [{\"type\": \"dense\", "
        "\"units\": 3}]}, \"hyperparameters\": {\"optimiser\": \"adam\"}}",
        csv_ds);
    expect_job_422(b, "hyperparameters.optimiser");
    /* Augmentation needs images; its padding, room in them. */
    snprintf(b, sizeof b,
             "{\"dataset\": \"%s\", \"model\": {\"layers\": [{\"type\": "
             "\"dense\", \"units\": 3}]}, \"hyperparameters\": {\"augment\": "
             "{\"horizontal_flip\": true}}}",
             csv_ds);
    expect_job_422(b, "hyperparameters.augment");
    snprintf(b, sizeof b,
             "{\"dataset\": \"%s\", \"model\": {\"layers\": [{\"type\": "
             "\"dense\", \"units\": 3}]}, \"hyperparameters\": {\"augment\": "
             "{\"vertical_flip\": true}}}",
             csv_ds);
    expect_job_422(b, "hyperparameters.augment.vertical_flip");
    snprintf(b, sizeof b,
             "{\"dataset\": \"%s\", \"model\": {\"layers\": [{\"type\": "
             "\"flatten\"}, {\"type\": \"dense\", \"units\": 2}]}, "
             "\"hyperparameters\": {\"augment\": {\"crop_padding\": 5000}}}",
             idx_ds);
    expect_job_422(b, "hyperparameters.augment.crop_padding");
    snprintf(
        b, sizeof b,
        "{\"dataset\": \"%s\", \"model\": {\"layers\": [{\"type\": \"dense\", "
        "\"units\": 3}]}, \"validation\": {\"dataset\": \"%s\"}}",
        csv_ds, npy_ds);
    expect_job_422(b, "validation.dataset");
    snprintf(b, sizeof b,
             "{\"dataset\": \"%s\", \"model\": {\"layers\": [{\"type\": "
             "\"dense\", \"units\": 3}]}, \"validation\": {\"split\": 1.5}}",
             csv_ds);
    expect_job_422(b, "validation.split");
    /* The loss must fit the dataset (3 classes here). */
    snprintf(b, sizeof b,
             "{\"dataset\": \"%s\", \"model\": {\"layers\": [{\"type\": "
             "\"dense\", \"units\": 1}]}, \"hyperparameters\": {\"loss\": "
             "\"binary_cross_entropy\"}}",
             csv_ds);
    expect_job_422(b, "hyperparameters.loss");
    snprintf(
        b, sizeof b,
        "{\"dataset\": \"%s\", \"model\": {\"layers\": [{\"type\": \"dense\", "
        "\"units\": 3}]}, \"hyperparameters\": {\"loss\": \"mse\"}}",
        csv_ds);
    expect_job_422(b, "hyperparameters.loss");
    snprintf(
        b, sizeof b,
        "{\"dataset\": \"%s\", \"model\": {\"layers\": [{\"type\": \"dense\", "
        "\"units\": 3}]}, \"hyperparameters\": {\"lr_schedule\": {\"type\": "
        "\"step\", \"step_epochs\": 2, \"gamma\": 0}}}",
        csv_ds);
    expect_job_422(b, "hyperparameters.lr_schedule.gamma");
    snprintf(b, sizeof b, "{\"dataset\": \"%s\", \"modle\": {}}", csv_ds);
    expect_job_422(b, "modle");
    /* None of these made a job. */
    r = http_get(&server, "/v1/jobs");
    assert_int_equal(json_array_size(json_object_get(r->json, "items")), 0);
    resp_free(r);
}

static char csv_model[64];

/* Issue 30, finding 7: reals as the shortest decimal that reads back (0.1,
 * not 0.10000000000000001; adam's default beta1 0.9, not
 * 0.90000000000000002), and every JSON reply ends with a newline, so a
 * shell prompt after curl starts on a line of its own. */
static void test_json_numbers_are_short(void **state)
{
    char b[1024];
    snprintf(b, sizeof b,
             "{\"name\": \"short-numbers\", \"dataset\": \"%s\","
             " \"validation\": {\"split\": 0.1},"
             " \"model\": {\"layers\": [{\"type\": \"dense\", \"units\": 3}]},"
             " \"hyperparameters\": {\"epochs\": 1, \"optimizer\": \"adam\","
             " \"learning_rate\": 0.003}}",
             csv_ds);
    resp *r = http_json(&server, "POST", "/v1/jobs", b);
    assert_int_equal(r->status, 202);
    char job[64], path[256];
    snprintf(job, sizeof job, "%s",
             json_string_value(json_object_get(r->json, "id")));
    int created_ends_line = r->len > 0 && r->body[r->len - 1] == '\n';
    resp_free(r);

    snprintf(path, sizeof path, "/v1/jobs/%s", job);
    r = http_get(&server, path);
    assert_int_equal(r->status, 200);
    if (!strstr(r->body, "\"split\":0.1,") &&
        !strstr(r->body, "\"split\":0.1}"))
        fail_msg("no \"split\":0.1 in %s", r->body);
    if (!strstr(r->body, "\"beta1\":0.9,") &&
        !strstr(r->body, "\"beta1\":0.9}"))
        fail_msg("no \"beta1\":0.9 in %s", r->body);
    if (!strstr(r->body, "\"learning_rate\":0.003"))
        fail_msg("no \"learning_rate\":0.003 in %s", r->body);
    /* No 17-digit noise anywhere: no number with 15 or more digits after
     * its point (0.10000000000000001 has 17). */
    for (const char *q = r->body; (q = strchr(q, '.')) != NULL; q++) {
        size_t digits = strspn(q + 1, "0123456789");
        if (digits >= 15 && q > r->body && q[-1] >= '0' && q[-1] <= '9')
            fail_msg("a 17-digit number at ...%.40s", q - 1);
    }
    assert_true(r->len > 0 && r->body[r->len - 1] == '\n');
    assert_true(r->len < 2 || r->body[r->len - 2] == '}');
    assert_non_null(r->json); /* jansson reads it, newline and all */
    resp_free(r);
    assert_true(created_ends_line); /* the 202 too */

    /* Lists and problem documents too. */
    r = http_get(&server, "/v1/jobs?limit=1");
    assert_int_equal(r->status, 200);
    assert_true(r->len > 0 && r->body[r->len - 1] == '\n');
    resp_free(r);
    r = http_get(&server, "/v1/jobs/job_nope");
    assert_int_equal(r->status, 404);
    assert_non_null(strstr(r->content_type, "application/problem+json"));
    assert_true(r->len > 0 && r->body[r->len - 1] == '\n');
    assert_non_null(r->json);
    resp_free(r);

    json_t *j = wait_job(&server, job, 120);
    assert_non_null(j);
    json_decref(j);
}

static void test_train_predict_evaluate_csv(void **state)
{
    char b[1024];
    snprintf(b, sizeof b,
             "{\"name\": \"blobs-mlp\", \"dataset\": \"%s\", \"validation\": "
             "{\"split\": 0.2},"
             " \"model\": {\"layers\": [{\"type\": \"dense\", \"units\": 16}, "
             "{\"type\": \"relu\"},"
             " {\"type\": \"dense\", \"units\": 3}]},"
             " \"hyperparameters\": {\"epochs\": 30, \"batch_size\": 16, "
             "\"optimizer\": \"adam\","
             " \"learning_rate\": 0.01, \"seed\": 1}}",
             csv_ds);
    resp *r = http_json(&server, "POST", "/v1/jobs", b);
    assert_int_equal(r->status, 202);
    char job[64];
    snprintf(job, sizeof job, "%s",
             json_string_value(json_object_get(r->json, "id")));
    assert_string_equal(json_string_value(json_object_get(r->json, "status")),
                        "queued");
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(r->json, "hyperparameters"), "seed")),
                     1);
    resp_free(r);

    json_t *j = wait_job(&server, job, 120);
    assert_non_null(j);
    if (strcmp(json_string_value(json_object_get(j, "status")), "succeeded"))
        fprintf(stderr, "job: %s\n", json_dumps(j, 0));
    assert_string_equal(json_string_value(json_object_get(j, "status")),
                        "succeeded");
    snprintf(csv_model, sizeof csv_model, "%s",
             json_string_value(json_object_get(j, "model")));
    /* It ran where the harness's --train-device cpu says. */
    assert_string_equal(json_string_value(json_object_get(j, "device")), "cpu");
    json_t *m = json_object_get(j, "metrics");
    assert_true(json_real_value(json_object_get(m, "val_accuracy")) > 0.9);
    assert_true(json_number_value(json_object_get(
                    json_object_get(j, "progress"), "fraction")) == 1.0);
    json_decref(j);

    /* Per-epoch history. */
    char path[256];
    snprintf(path, sizeof path, "/v1/jobs/%s/metrics", job);
    r = http_get(&server, path);
    assert_int_equal(r->status, 200);
    json_t *epochs = json_object_get(r->json, "epochs");
    assert_int_equal(json_array_size(epochs), 30);
    assert_int_equal(json_integer_value(
                         json_object_get(json_array_get(epochs, 29), "epoch")),
                     30);
    double first = json_real_value(
        json_object_get(json_array_get(epochs, 0), "train_loss"));
    double last = json_real_value(
        json_object_get(json_array_get(epochs, 29), "train_loss"));
    assert_true(last < first);
    resp_free(r);

    /* A page of it, newest first, with the count. */
    snprintf(path, sizeof path,
             "/v1/jobs/%s/metrics?order=desc&limit=5&offset=2", job);
    r = http_get(&server, path);
    assert_int_equal(r->status, 200);
    assert_int_equal(json_integer_value(json_object_get(r->json, "total")), 30);
    epochs = json_object_get(r->json, "epochs");
    assert_int_equal(json_array_size(epochs), 5);
    assert_int_equal(
        json_integer_value(json_object_get(json_array_get(epochs, 0), "epoch")),
        28);
    resp_free(r);
    /* As CSV: a header and a line per epoch. */
    snprintf(path, sizeof path, "/v1/jobs/%s/metrics?format=csv", job);
    r = http_get(&server, path);
    assert_int_equal(r->status, 200);
    assert_non_null(strstr(r->content_type, "text/csv"));
    assert_int_equal(strncmp(r->body, "epoch,train_loss,", 17), 0);
    int lines = 0;
    for (size_t i = 0; i < r->len; i++)
        lines += r->body[i] == '\n';
    assert_int_equal(lines, 31);
    resp_free(r);
    /* The curves in at most 10 points: each the mean of 3 epochs. */
    snprintf(path, sizeof path, "/v1/jobs/%s/curves?points=10", job);
    r = http_get(&server, path);
    assert_int_equal(r->status, 200);
    json_t *ce = json_object_get(r->json, "epochs");
    assert_int_equal(json_integer_value(json_object_get(ce, "per_point")), 3);
    assert_int_equal(json_array_size(json_object_get(ce, "points")), 10);
    assert_true(json_array_size(json_object_get(
                    json_object_get(r->json, "steps"), "points")) >= 1);
    resp_free(r);
    static const char *const bad[] = {"metrics?limit=0",    "metrics?order=up",
                                      "metrics?format=xml", "metrics?offset=-1",
                                      "curves?points=5",    "curves?points=x"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(path, sizeof path, "/v1/jobs/%s/%s", job, bad[i]);
        r = http_get(&server, path);
        assert_int_equal(r->status, 400);
        resp_free(r);
    }
    /* The best epoch is kept in the latest metrics. */
    j = get_job(&server, job);
    json_t *best = json_object_get(json_object_get(j, "metrics"), "best");
    assert_string_equal(json_string_value(json_object_get(best, "metric")),
                        "val_accuracy");
    assert_true(json_integer_value(json_object_get(best, "epoch")) >= 1);
    json_decref(j);
    /* A dry run: the estimate, and no job. */
    r = http_get(&server, "/v1/jobs?limit=1000");
    size_t njobs = json_array_size(json_object_get(r->json, "items"));
    resp_free(r);
    r = http_json(&server, "POST", "/v1/jobs?dry_run=true", b);
    assert_int_equal(r->status, 200);
    assert_int_equal(json_integer_value(json_object_get(r->json, "parameters")),
                     4 * 16 + 16 + 16 * 3 + 3);
    assert_true(json_integer_value(
                    json_object_get(r->json, "estimated_memory_bytes")) > 0);
    resp_free(r);
    r = http_get(&server, "/v1/jobs?limit=1000");
    assert_int_equal(json_array_size(json_object_get(r->json, "items")), njobs);
    resp_free(r);

    /* The model. */
    snprintf(path, sizeof path, "/v1/models/%s", csv_model);
    r = http_get(&server, path);
    assert_int_equal(r->status, 200);
    assert_string_equal(json_string_value(json_object_get(r->json, "job")),
                        job);
    assert_string_equal(
        json_string_value(json_object_get(r->json, "trained_on")), "cpu");
    assert_int_equal(
        json_integer_value(json_object_get(r->json, "param_count")),
        4 * 16 + 16 + 16 * 3 + 3);
    assert_string_equal(json_string_value(json_array_get(
                            json_object_get(r->json, "classes"), 2)),
                        "virginica");
    resp_free(r);

    /* Predict in raw units: one example near each blob centre. */
    snprintf(path, sizeof path, "/v1/models/%s/predict", csv_model);
    r = http_json(
        &server, "POST", path,
        "{\"inputs\": [[0, 5, 100, 0], [10, 2, 100, 2], [20, -1, 100, 4]]}");
    assert_int_equal(r->status, 200);
    json_t *pred = json_object_get(r->json, "predictions");
    assert_string_equal(json_string_value(json_array_get(pred, 0)), "setosa");
    assert_string_equal(json_string_value(json_array_get(pred, 1)),
                        "versicolor");
    assert_string_equal(json_string_value(json_array_get(pred, 2)),
                        "virginica");
    assert_string_equal(json_string_value(json_object_get(r->json, "device")),
                        "cpu");
    json_t *row = json_array_get(json_object_get(r->json, "outputs"), 0);
    double sum = 0;
    for (size_t i = 0; i < json_array_size(row); i++)
        sum += json_number_value(json_array_get(row, i));
    assert_true(fabs(sum - 1.0) < 1e-4);
    resp_free(r);

    /* Predict errors. */
    r = http_json(&server, "POST", path, "{\"inputs\": [[1, 2, 3]]}");
    assert_int_equal(r->status, 422);
    assert_non_null(strstr(r->body, "takes 4"));
    resp_free(r);
    r = http_json(&server, "POST", path, "{\"inputs\": [[1, 2, \"x\", 4]]}");
    assert_int_equal(r->status, 422);
    resp_free(r);
    r = http_json(&server, "POST", "/v1/models/mdl_nope/predict",
                  "{\"inputs\": [[1]]}");
    assert_int_equal(r->status, 404);
    resp_free(r);

    /* Evaluate on the training set itself. */
    snprintf(path, sizeof path, "/v1/models/%s/evaluate", csv_model);
    snprintf(b, sizeof b, "{\"dataset\": \"%s\"}", csv_ds);
    r = http_json(&server, "POST", path, b);
    assert_int_equal(r->status, 200);
    assert_true(json_real_value(json_object_get(r->json, "accuracy")) > 0.95);
    assert_int_equal(
        json_integer_value(json_object_get(r->json, "num_examples")), 300);
    assert_string_equal(json_string_value(json_object_get(r->json, "device")),
                        "cpu");
    resp_free(r);
    snprintf(b, sizeof b, "{\"dataset\": \"%s\"}", idx_ds);
    r = http_json(&server, "POST", path, b);
    assert_int_equal(r->status, 422);
    resp_free(r);

    /* Weights download is a safetensors file. */
    snprintf(path, sizeof path, "/v1/models/%s/weights", csv_model);
    r = http_get(&server, path);
    assert_int_equal(r->status, 200);
    assert_true(r->len > 8);
    uint64_t hlen;
    memcpy(&hlen, r->body, 8);
    assert_true(hlen + 8 < r->len);
    assert_int_equal(r->body[8], '{');
    resp_free(r);
}

/* Issue 30, 6: a succeeded job's progress is complete. The trainer reports
 * its position at most every quarter second, so a short run's last line
 * names an early step; the success must not leave "step 1 of 57, fraction
 * 1" (nor a time left) behind. */
static void test_succeeded_progress_is_complete(void **state)
{
    char b[512];
    snprintf(b, sizeof b,
             "{\"dataset\": \"%s\", \"model\": {\"layers\": [{\"type\": "
             "\"dense\", \"units\": 3}]},"
             " \"hyperparameters\": {\"epochs\": 3, \"batch_size\": 16}}",
             csv_ds);
    resp *r = http_json(&server, "POST", "/v1/jobs", b);
    assert_int_equal(r->status, 202);
    char job[64];
    snprintf(job, sizeof job, "%s", str(r->json, "id"));
    resp_free(r);
    json_t *j = wait_job(&server, job, 120);
    assert_non_null(j);
    assert_string_equal(str(j, "status"), "succeeded");
    const json_t *p = json_object_get(j, "progress");
    char *text = json_dumps(p, JSON_COMPACT);
    json_int_t step = json_integer_value(json_object_get(p, "step"));
    json_int_t total = json_integer_value(json_object_get(p, "total_steps"));
    json_t *eta = json_object_get(p, "eta_seconds");
    if (total <= 0 || step != total ||
        json_number_value(json_object_get(p, "fraction")) != 1.0 ||
        json_integer_value(json_object_get(p, "epoch")) != 3 ||
        json_integer_value(json_object_get(p, "epochs")) != 3 ||
        (eta && json_number_value(eta) > 0))
        fail_msg("a succeeded job's progress is not complete: %s", text);
    free(text);
    json_decref(j);
}

static void test_kserve_v2(void **state)
{
    char path[256];
    snprintf(path, sizeof path, "/v2/models/%s", csv_model);
    resp *r = http_get(&server, path);
    assert_int_equal(r->status, 200);
    assert_string_equal(json_string_value(json_object_get(r->json, "name")),
                        csv_model);
    json_t *in = json_array_get(json_object_get(r->json, "inputs"), 0);
    assert_string_equal(json_string_value(json_object_get(in, "datatype")),
                        "FP32");
    resp_free(r);
    snprintf(path, sizeof path, "/v2/models/%s/ready", csv_model);
    r = http_get(&server, path);
    assert_int_equal(r->status, 200);
    resp_free(r);

    snprintf(path, sizeof path, "/v2/models/%s/infer", csv_model);
    r = http_json(
        &server, "POST", path,
        "{\"id\": \"42\", \"inputs\": [{\"name\": \"input\", \"shape\": [2, 4],"
        " \"datatype\": \"FP32\", \"data\": [0, 5, 100, 0, 20, -1, 100, 4]}]}");
    assert_int_equal(r->status, 200);
    assert_string_equal(json_string_value(json_object_get(r->json, "id")),
                        "42");
    json_t *out = json_array_get(json_object_get(r->json, "outputs"), 0);
    assert_int_equal(
        json_integer_value(json_array_get(json_object_get(out, "shape"), 0)),
        2);
    assert_int_equal(
        json_integer_value(json_array_get(json_object_get(out, "shape"), 1)),
        3);
    json_t *data = json_object_get(out, "data");
    assert_int_equal(json_array_size(data), 6);
    assert_true(json_real_value(json_array_get(data, 0)) > 0.5); /* setosa */
    assert_true(json_real_value(json_array_get(data, 5)) > 0.5); /* virginica */
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(r->json, "parameters"), "device")),
                        "cpu");
    resp_free(r);

    /* KServe clients read "error". */
    r = http_json(&server, "POST", path,
                  "{\"inputs\": [{\"name\": \"input\", \"shape\": [1, 3],"
                  " \"datatype\": \"FP32\", \"data\": [1, 2, 3]}]}");
    assert_int_equal(r->status, 400); /* KServe: request errors are 400 */
    assert_non_null(json_object_get(r->json, "error"));
    resp_free(r);

    /* The classification extension (issue 29): the count is a whole
     * number; tritonclient's class_count is the client's name for it and
     * as a parameter is refused, not ignored. */
    static const char *const counts[] = {"-5", "4611686018427387904", "1.5",
                                         "\"x\"", "2"};
    for (int named = 0; named < 2; named++) {
        const char *param = named ? "class_count" : "classification";
        for (size_t i = 0; i < sizeof counts / sizeof *counts; i++) {
            if (!named && i == 4)
                continue; /* classification 2 is good: below */
            char body[512], field[64];
            snprintf(body, sizeof body,
                     "{\"inputs\": [{\"name\": \"input\", \"shape\": [1, 4],"
                     " \"datatype\": \"FP32\", \"data\": [0, 5, 100, 0]}],"
                     " \"outputs\": [{\"name\": \"output\", \"parameters\":"
                     " {\"%s\": %s}}]}",
                     param, counts[i]);
            r = http_json(&server, "POST", path, body);
            snprintf(field, sizeof field, "outputs[0].parameters.%s", param);
            if (r->status != 400 || !str(r->json, "field") ||
                strcmp(str(r->json, "field"), field) != 0)
                fail_msg("%s %s: %ld %s", param, counts[i], r->status, r->body);
            assert_non_null(strstr(str(r->json, "error"), param));
            resp_free(r);
        }
    }
    /* A good count: the top classes; more than the model has: all of
     * them (as Triton). */
    for (int k = 2; k <= 10; k += 8) {
        char body[512];
        snprintf(body, sizeof body,
                 "{\"inputs\": [{\"name\": \"input\", \"shape\": [1, 4],"
                 " \"datatype\": \"FP32\", \"data\": [0, 5, 100, 0]}],"
                 " \"outputs\": [{\"name\": \"output\", \"parameters\":"
                 " {\"classification\": %d}}]}",
                 k);
        r = http_json(&server, "POST", path, body);
        assert_int_equal(r->status, 200);
        out = json_array_get(json_object_get(r->json, "outputs"), 0);
        assert_string_equal(str(out, "datatype"), "BYTES");
        assert_int_equal(json_integer_value(
                             json_array_get(json_object_get(out, "shape"), 1)),
                         k < 3 ? k : 3);
        assert_non_null(strstr(
            json_string_value(json_array_get(json_object_get(out, "data"), 0)),
            ":0:setosa"));
        resp_free(r);
    }

    r = http_get(&server, "/v2/models/mdl_nope");
    assert_int_equal(r->status, 404);
    resp_free(r);
}

static void test_train_images_nested_predict(void **state)
{
    char b[1024];
    snprintf(b, sizeof b,
             "{\"dataset\": \"%s\", \"model\": {\"layers\": [{\"type\": "
             "\"flatten\"},"
             " {\"type\": \"dense\", \"units\": 8}, {\"type\": \"tanh\"}, "
             "{\"type\": \"dropout\", \"rate\": 0.1},"
             " {\"type\": \"dense\", \"units\": 2}]},"
             " \"hyperparameters\": {\"epochs\": 10, \"batch_size\": 20, "
             "\"optimizer\": \"sgd\","
             " \"learning_rate\": 0.1, \"momentum\": 0.9}}",
             idx_ds);
    resp *r = http_json(&server, "POST", "/v1/jobs", b);
    assert_int_equal(r->status, 202);
    char job[64];
    snprintf(job, sizeof job, "%s",
             json_string_value(json_object_get(r->json, "id")));
    resp_free(r);
    json_t *j = wait_job(&server, job, 120);
    assert_string_equal(json_string_value(json_object_get(j, "status")),
                        "succeeded");
    char path[256];
    snprintf(path, sizeof path, "/v1/models/%s/predict",
             json_string_value(json_object_get(j, "model")));
    json_decref(j);
    /* One image nested as [1][8][8] (bright top: class 1), one flat. */
    char body[4096] = "{\"inputs\": [[[";
    for (int y = 0; y < 8; y++) {
        strcat(body, y ? ",[" : "[");
        for (int x = 0; x < 8; x++)
            strcat(body, x ? (y < 4 ? ",230" : ",10") : (y < 4 ? "230" : "10"));
        strcat(body, "]");
    }
    strcat(body, "]], [");
    for (int i = 0; i < 64; i++)
        strcat(body, i ? (i < 32 ? ",5" : ",240") : "5");
    strcat(body, "]]}");
    r = http_json(&server, "POST", path, body);
    assert_int_equal(r->status, 200);
    json_t *pred = json_object_get(r->json, "predictions");
    assert_int_equal(json_integer_value(json_array_get(pred, 0)), 1);
    assert_int_equal(json_integer_value(json_array_get(pred, 1)), 0);
    resp_free(r);
}

static int is_running(const json_t *job)
{
    const char *st = json_string_value(json_object_get(job, "status"));
    return st && !strcmp(st, "running") &&
           json_integer_value(
               json_object_get(json_object_get(job, "progress"), "step")) > 0;
}

/* ---- model import ---- */

/* The import test's model: input [4] scaled by 0.5, dense 5, relu, dense 3,
 * classes a, b, c. Weights are small fixed numbers so the test can compute
 * the expected probabilities itself. */
#define IMP_META                                                             \
    "metadata={\"spec\": {\"layers\": [{\"type\": \"dense\", \"units\": 5}," \
    " {\"type\": \"relu\"}, {\"type\": \"dense\", \"units\": 3}]},"          \
    " \"task\": \"classification\", \"input_shape\": [4],"                   \
    " \"classes\": [\"a\", \"b\", \"c\"],"                                   \
    " \"preprocess\": {\"kind\": \"scale\", \"factor\": 0.5}}"

static float imp_w0[5 * 4], imp_b0[5], imp_w1[3 * 5], imp_b1[3];

static void imp_weights(void)
{
    for (int i = 0; i < 20; i++)
        imp_w0[i] = (float)((i * 7) % 11 - 5) / 8.0f;
    for (int i = 0; i < 5; i++)
        imp_b0[i] = (float)(i - 2) / 10.0f;
    for (int i = 0; i < 15; i++)
        imp_w1[i] = (float)((i * 5) % 9 - 4) / 6.0f;
    for (int i = 0; i < 3; i++)
        imp_b1[i] = (float)i / 4.0f;
}

/* The probabilities the model gives raw example x (4 values). */
static void imp_expected(const float *x, double p[3])
{
    double h[5], z[3], m = -1e300, sum = 0;
    for (int o = 0; o < 5; o++) {
        h[o] = imp_b0[o];
        for (int i = 0; i < 4; i++)
            h[o] += (double)imp_w0[o * 4 + i] * (x[i] * 0.5f);
        h[o] = h[o] > 0 ? h[o] : 0;
    }
    for (int o = 0; o < 3; o++) {
        z[o] = imp_b1[o];
        for (int i = 0; i < 5; i++)
            z[o] += (double)imp_w1[o * 5 + i] * h[i];
        m = z[o] > m ? z[o] : m;
    }
    for (int o = 0; o < 3; o++)
        sum += (p[o] = exp(z[o] - m));
    for (int o = 0; o < 3; o++)
        p[o] /= sum;
}

typedef enum {
    IMP_GOOD = 0,
    IMP_WRONG_SHAPE, /* 0.weight [5, 3] */
    IMP_EXTRA,       /* and a 4.weight */
    IMP_MISSING,     /* no 2.bias */
    IMP_F64,         /* 2.bias as F64 */
    IMP_NAN          /* a NaN in 0.bias */
} imp_variant;

/* Writes the import test's weights as a PyTorch state dict would have them:
 * a batchnorm-style I64 num_batches_tracked counter included, no metadata. */
static void imp_write(const char *path, imp_variant v)
{
    int64_t counter = 7;
    double b1d[3] = {0, 0.25, 0.5};
    float b0[5];
    memcpy(b0, imp_b0, sizeof b0);
    if (v == IMP_NAN)
        b0[2] = NAN;
    st_out_tensor t[6] = {
        {"0.weight", ST_F32, 2, {5, v == IMP_WRONG_SHAPE ? 3 : 4}, imp_w0},
        {"0.bias", ST_F32, 1, {5}, b0},
        {"2.weight", ST_F32, 2, {3, 5}, imp_w1},
        {"2.bias",
         v == IMP_F64 ? ST_F64 : ST_F32,
         1,
         {3},
         v == IMP_F64 ? (const void *)b1d : imp_b1},
        {"1.num_batches_tracked", ST_I64, 0, {0}, &counter},
        {"4.weight", ST_F32, 1, {3}, imp_b1},
    };
    size_t n = v == IMP_EXTRA ? 6 : 5;
    if (v == IMP_MISSING) {
        t[3] = t[4];
        n = 4;
    }
    ty_err err = {0};
    assert_int_equal(st_write(path, NULL, t, n, &err), TY_OK);
}

static size_t count_files(const char *dir)
{
    DIR *d = opendir(dir);
    size_t n = 0;
    if (!d)
        return 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char sub[PATH_MAX];
        snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name);
        DIR *inner = opendir(sub);
        if (inner) {
            closedir(inner);
            n += count_files(sub);
        } else {
            n++;
        }
    }
    closedir(d);
    return n;
}

static size_t model_count(void)
{
    resp *r = http_get(&server, "/v1/models?limit=1000");
    assert_int_equal(r->status, 200);
    size_t n = json_array_size(json_object_get(r->json, "items"));
    resp_free(r);
    return n;
}

static void test_import_model_predicts(void **state)
{
    imp_weights();
    char p1[PATH_MAX + 16], path[256], id[64];
    imp_write(file_path("imp.safetensors"), IMP_GOOD);
    snprintf(p1, sizeof p1, "weights=@%s", file_path("imp.safetensors"));
    const char *parts[] = {p1, IMP_META, "name=from-torch", NULL};
    resp *r = http_upload(&server, "/v1/models", parts);
    if (r->status != 201)
        fprintf(stderr, "import: %ld %s\n", r->status, r->body);
    assert_int_equal(r->status, 201);
    snprintf(id, sizeof id, "%s",
             json_string_value(json_object_get(r->json, "id")));
    assert_true(strncmp(id, "mdl_", 4) == 0);
    snprintf(path, sizeof path, "/v1/models/%s", id);
    assert_string_equal(r->location, path);
    assert_true(json_is_null(json_object_get(r->json, "job")));
    assert_string_equal(json_string_value(json_object_get(r->json, "name")),
                        "from-torch");
    assert_int_equal(
        json_integer_value(json_object_get(r->json, "param_count")),
        20 + 5 + 15 + 3);
    assert_string_equal(
        json_string_value(json_object_get(r->json, "preprocess")), "scale");
    char sha[65];
    snprintf(sha, sizeof sha, "%s",
             json_string_value(json_object_get(r->json, "sha256")));
    resp_free(r);
    r = http_get(&server, path);
    assert_int_equal(r->status, 200);
    assert_string_equal(json_string_value(json_array_get(
                            json_object_get(r->json, "classes"), 1)),
                        "b");
    resp_free(r);

    /* Predictions are the model's, preprocessing applied. */
    const float x[2][4] = {{1, -2, 3, 0.5f}, {-1, 4, 0, 2}};
    snprintf(path, sizeof path, "/v1/models/%s/predict", id);
    r = http_json(&server, "POST", path,
                  "{\"inputs\": [[1, -2, 3, 0.5], [-1, 4, 0, 2]]}");
    assert_int_equal(r->status, 200);
    for (int i = 0; i < 2; i++) {
        double want[3];
        imp_expected(x[i], want);
        json_t *row = json_array_get(json_object_get(r->json, "outputs"), i);
        for (int k = 0; k < 3; k++)
            assert_true(fabs(json_number_value(json_array_get(row, k)) -
                             want[k]) < 1e-5);
    }
    resp_free(r);

    /* KServe serves it too. */
    snprintf(path, sizeof path, "/v2/models/%s/ready", id);
    r = http_get(&server, path);
    assert_int_equal(r->status, 200);
    resp_free(r);

    /* The stored file carries the metadata and no step counter, so it
     * imports again on its own, as the same blob. */
    snprintf(path, sizeof path, "/v1/models/%s/weights", id);
    r = http_get(&server, path);
    assert_int_equal(r->status, 200);
    st_file f;
    ty_err err = {0};
    assert_int_equal(st_parse(r->body, r->len, &f, &err), TY_OK);
    assert_null(st_find(&f, "1.num_batches_tracked"));
    assert_non_null(st_find(&f, "2.bias"));
    assert_string_equal(st_meta(&f, "trainyard.task"), "classification");
    st_close(&f);
    write_file(file_path("imp_again.safetensors"), r->body, r->len);
    resp_free(r);
    snprintf(p1, sizeof p1, "weights=@%s", file_path("imp_again.safetensors"));
    const char *alone[] = {p1, NULL};
    r = http_upload(&server, "/v1/models", alone);
    assert_int_equal(r->status, 201);
    assert_string_equal(json_string_value(json_object_get(r->json, "sha256")),
                        sha);
    assert_string_equal(json_string_value(json_object_get(r->json, "name")),
                        "imported");
    resp_free(r);
}

static void expect_import_422(const char *const *parts, const char *needle,
                              const char *field)
{
    resp *r = http_upload(&server, "/v1/models", parts);
    const char *detail = json_string_value(json_object_get(r->json, "detail"));
    if (r->status != 422 || !detail || !strstr(detail, needle))
        fprintf(stderr, "expected 422 with '%s', got %ld %s\n", needle,
                r->status, r->body);
    assert_int_equal(r->status, 422);
    assert_non_null(strstr(detail, needle));
    if (field)
        assert_string_equal(
            json_string_value(json_object_get(r->json, "field")), field);
    resp_free(r);
}

static void test_import_model_rejects(void **state)
{
    imp_weights();
    char blobs[PATH_MAX + 8];
    snprintf(blobs, sizeof blobs, "%s/blobs", server.data);
    size_t models_before = model_count(), blobs_before = count_files(blobs);
    char p1[PATH_MAX + 16];
    const char *parts[] = {p1, IMP_META, NULL};
    static const struct {
        imp_variant v;
        const char *needle;
    } bad[] = {
        {IMP_WRONG_SHAPE, "'0.weight' must be F32 [5, 4], got F32 [5, 3]"},
        {IMP_EXTRA, "1 the spec does not name (4.weight)"},
        {IMP_MISSING, "1 of them missing (2.bias)"},
        {IMP_F64, "'2.bias' must be F32 [3], got F64 [3]"},
        {IMP_NAN, "NaN"},
    };
    for (size_t i = 0; i < TY_ARRAY_LEN(bad); i++) {
        char name[64];
        snprintf(name, sizeof name, "bad%zu.safetensors", i);
        imp_write(file_path(name), bad[i].v);
        snprintf(p1, sizeof p1, "weights=@%s", file_path(name));
        expect_import_422(parts, bad[i].needle, "weights");
    }

    /* Bad metadata, each naming its field. */
    imp_write(file_path("good.safetensors"), IMP_GOOD);
    snprintf(p1, sizeof p1, "weights=@%s", file_path("good.safetensors"));
    const char *task[] = {
        p1,
        "metadata={\"spec\": {\"layers\": [{\"type\": \"dense\", \"units\": "
        "3}]},"
        " \"task\": \"clustering\", \"input_shape\": [4], \"num_outputs\": 3}",
        NULL};
    expect_import_422(task, "classification or regression", "metadata.task");
    const char *units[] = {
        p1,
        "metadata={\"spec\": {\"layers\": [{\"type\": \"dense\", \"units\": "
        "0}]},"
        " \"task\": \"regression\", \"input_shape\": [4], \"num_outputs\": 3}",
        NULL};
    expect_import_422(units, "units", "metadata.spec.layers[0].units");
    const char *outs[] = {p1,
                          "metadata={\"spec\": {\"layers\": [{\"type\": "
                          "\"dense\", \"units\": 3}]},"
                          " \"task\": \"regression\", \"input_shape\": [4]}",
                          NULL};
    expect_import_422(outs, "num_outputs is required", "metadata.num_outputs");
    const char *shape[] = {
        p1,
        "metadata={\"spec\": {\"layers\": [{\"type\": \"dense\", \"units\": "
        "3}]},"
        " \"task\": \"regression\", \"input_shape\": [], \"num_outputs\": 3}",
        NULL};
    expect_import_422(shape, "input_shape", "metadata.input_shape");
    const char *extra[] = {
        p1,
        "metadata={\"spec\": {\"layers\": [{\"type\": \"dense\", \"units\": "
        "3}]},"
        " \"task\": \"regression\", \"input_shape\": [4], \"num_outputs\": 3,"
        " \"colour\": 1}",
        NULL};
    expect_import_422(extra, "colour", NULL);
    const char *notjson[] = {p1, "metadata={spec", NULL};
    expect_import_422(notjson, "JSON", "metadata");
    /* No metadata part, and none in the file. */
    const char *nometa[] = {p1, NULL};
    expect_import_422(nometa, "no trainyard metadata", "metadata");
    /* Not a safetensors file; no weights at all; an unknown part. */
    snprintf(p1, sizeof p1, "weights=@%s", file_path("blobs.csv"));
    expect_import_422(parts, "safetensors", "weights");
    const char *noweights[] = {IMP_META, NULL};
    expect_import_422(noweights, "'weights' is missing", "weights");
    snprintf(p1, sizeof p1, "weights=@%s", file_path("good.safetensors"));
    const char *unknown[] = {p1, IMP_META, "colour=red", NULL};
    expect_import_422(unknown, "colour", "colour");

    /* JSON is not an import. */
    resp *r = http_json(&server, "POST", "/v1/models", "{\"spec\": {}}");
    assert_int_equal(r->status, 415);
    resp_free(r);

    /* Nothing was stored by the failures. */
    assert_int_equal(model_count(), models_before);
    assert_int_equal(count_files(blobs), blobs_before);
}

static void test_cancel(void **state)
{
    char b[1024];
    snprintf(b, sizeof b,
             "{\"dataset\": \"%s\", \"model\": {\"layers\": [{\"type\": "
             "\"dense\", \"units\": 512},"
             " {\"type\": \"relu\"}, {\"type\": \"dense\", \"units\": 3}]},"
             " \"hyperparameters\": {\"epochs\": 100000, \"batch_size\": 4}}",
             npy_ds);
    resp *r = http_json(&server, "POST", "/v1/jobs", b);
    assert_int_equal(r->status, 202);
    char job[64], path[256];
    snprintf(job, sizeof job, "%s",
             json_string_value(json_object_get(r->json, "id")));
    resp_free(r);
    json_t *j = wait_job_until(&server, job, 60, is_running);
    assert_true(is_running(j));
    json_decref(j);
    snprintf(path, sizeof path, "/v1/jobs/%s/cancel", job);
    r = http_do(&server, "POST", path, NULL, NULL, 0, NULL);
    assert_int_equal(r->status, 202);
    resp_free(r);
    j = wait_job(&server, job, 30);
    assert_string_equal(json_string_value(json_object_get(j, "status")),
                        "cancelled");
    json_decref(j);
    /* Cancelling again is a conflict; an unknown job is 404. */
    r = http_do(&server, "POST", path, NULL, NULL, 0, NULL);
    assert_int_equal(r->status, 409);
    resp_free(r);
    r = http_do(&server, "POST", "/v1/jobs/job_nope/cancel", NULL, NULL, 0,
                NULL);
    assert_int_equal(r->status, 404);
    resp_free(r);
    /* Status filter. */
    r = http_get(&server, "/v1/jobs?status=cancelled");
    assert_int_equal(json_array_size(json_object_get(r->json, "items")), 1);
    resp_free(r);
    r = http_get(&server, "/v1/jobs?status=sleeping");
    assert_int_equal(r->status, 400);
    resp_free(r);
}

static void test_dataset_in_use_cannot_be_deleted(void **state)
{
    char b[1024], path[128];
    snprintf(b, sizeof b,
             "{\"dataset\": \"%s\", \"model\": {\"layers\": [{\"type\": "
             "\"dense\", \"units\": 3}]},"
             " \"hyperparameters\": {\"epochs\": 100000}}",
             npy_ds);
    resp *r = http_json(&server, "POST", "/v1/jobs", b);
    assert_int_equal(r->status, 202);
    char job[64];
    snprintf(job, sizeof job, "%s",
             json_string_value(json_object_get(r->json, "id")));
    resp_free(r);
    snprintf(path, sizeof path, "/v1/datasets/%s", npy_ds);
    r = http_do(&server, "DELETE", path, NULL, NULL, 0, NULL);
    assert_int_equal(r->status, 409);
    assert_non_null(strstr(r->body, job));
    resp_free(r);
    snprintf(b, sizeof b, "/v1/jobs/%s/cancel", job);
    r = http_do(&server, "POST", b, NULL, NULL, 0, NULL);
    assert_true(r->status == 200 || r->status == 202);
    resp_free(r);
    json_decref(wait_job(&server, job, 30));
}

static void test_worker_crash_fails_only_the_job(void **state)
{
    char b[1024], job[64];
    snprintf(b, sizeof b,
             "{\"dataset\": \"%s\", \"model\": {\"layers\": [{\"type\": "
             "\"dense\", \"units\": 512},"
             " {\"type\": \"relu\"}, {\"type\": \"dense\", \"units\": 3}]},"
             " \"hyperparameters\": {\"epochs\": 100000, \"batch_size\": 4,"
             " \"max_attempts\": 1}}",
             npy_ds);
    resp *r = http_json(&server, "POST", "/v1/jobs", b);
    assert_int_equal(r->status, 202);
    snprintf(job, sizeof job, "%s",
             json_string_value(json_object_get(r->json, "id")));
    resp_free(r);
    /* One attempt: no retry (test_scheduling.c covers retries). */
    json_decref(wait_job_until(&server, job, 60, is_running));
    pid_t pid = find_worker(&server, job);
    assert_true(pid > 0);
    assert_int_equal(kill(pid, SIGKILL), 0);
    json_t *j = wait_job(&server, job, 30);
    assert_string_equal(json_string_value(json_object_get(j, "status")),
                        "failed");
    const char *error = json_string_value(json_object_get(j, "error"));
    assert_non_null(error);
    assert_non_null(strstr(error, "signal 9"));
    /* The end of the worker's log, not where the server keeps it. */
    assert_null(strstr(error, server.data));
    assert_null(strstr(error, "worker.log"));
    json_decref(j);
    /* The server carries on. */
    r = http_get(&server, "/v1/datasets");
    assert_int_equal(r->status, 200);
    resp_free(r);
}

/* ---- limits ---- */

static void test_upload_limit_is_413(void **state)
{
    srv small;
    const char *flags[] = {"--max-upload-bytes", "64K", "--max-json-bytes",
                           "1K", NULL};
    assert_int_equal(srv_start(&small, NULL, flags), 0);
    make_blobs_csv(file_path("big.csv"), 5000, 7);
    char part[PATH_MAX + 8];
    snprintf(part, sizeof part, "file=@%s", file_path("big.csv"));
    const char *parts[] = {"name=big", "format=csv", "label_column=species",
                           part, NULL};
    resp *r = http_upload(&small, "/v1/datasets", parts);
    assert_int_equal(r->status, 413);
    assert_non_null(strstr(r->content_type, "problem+json"));
    resp_free(r);
    char body[2048];
    memset(body, ' ', sizeof body);
    body[0] = '{';
    body[sizeof body - 1] = '}';
    r = http_do(&small, "POST", "/v1/jobs", "application/json", body,
                sizeof body, NULL);
    assert_int_equal(r->status, 413);
    resp_free(r);
    /* The server is still fine. */
    r = http_do(&small, "GET", "/healthz", NULL, NULL, 0, "");
    assert_int_equal(r->status, 200);
    resp_free(r);
    srv_stop(&small, SIGTERM);
    srv_cleanup(&small);
}

/* --max-job-memory: a job whose training would take more is refused at
 * submit with a 422 on batch_size that says how much it needs; a small one
 * runs, and every epoch reports the peak it held, which is the estimate
 * (exact: the trainer allocates exactly what train_memory counts). */
static void test_job_memory_limit(void **state)
{
    srv small;
    const char *flags[] = {"--max-job-memory", "256K", NULL};
    assert_int_equal(srv_start(&small, NULL, flags), 0);
    char a[PATH_MAX + 8], b[PATH_MAX + 8], ds[64], body[1024], job[64];
    snprintf(a, sizeof a, "x=@%s", file_path("x.npy"));
    snprintf(b, sizeof b, "y=@%s", file_path("y.npy"));
    const char *npy[] = {"name=vectors", "format=npy", a, b, NULL};
    upload_ok(&small, npy, ds);

    snprintf(
        body, sizeof body,
        "{\"dataset\": \"%s\", \"model\": {\"layers\": [{\"type\": \"dense\","
        " \"units\": 256}, {\"type\": \"relu\"}, {\"type\": \"dense\", "
        "\"units\": 3}]},"
        " \"hyperparameters\": {\"epochs\": 2, \"batch_size\": 512}}",
        ds);
    resp *r = http_json(&small, "POST", "/v1/jobs", body);
    if (r->status != 422)
        fprintf(stderr, "expected 422, got %ld %s\n", r->status, r->body);
    assert_int_equal(r->status, 422);
    assert_string_equal(json_string_value(json_object_get(r->json, "field")),
                        "hyperparameters.batch_size");
    const char *detail = json_string_value(json_object_get(r->json, "detail"));
    assert_non_null(detail);
    assert_non_null(strstr(detail, "at batch 512"));
    assert_non_null(strstr(detail, "allows 256 KiB per job"));
    resp_free(r);

    snprintf(
        body, sizeof body,
        "{\"dataset\": \"%s\", \"model\": {\"layers\": [{\"type\": \"dense\","
        " \"units\": 16}, {\"type\": \"relu\"}, {\"type\": \"dense\", "
        "\"units\": 3}]},"
        " \"hyperparameters\": {\"epochs\": 2, \"batch_size\": 8}}",
        ds);
    r = http_json(&small, "POST", "/v1/jobs", body);
    assert_int_equal(r->status, 202);
    snprintf(job, sizeof job, "%s",
             json_string_value(json_object_get(r->json, "id")));
    json_int_t est =
        json_integer_value(json_object_get(r->json, "estimated_memory_bytes"));
    assert_true(est > 0 && est <= 256 * 1024);
    /* Queued: not placed yet. */
    assert_true(json_is_null(json_object_get(r->json, "device")));
    resp_free(r);
    json_t *j = wait_job(&small, job, 60);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "status")),
                        "succeeded");
    assert_int_equal(
        json_integer_value(json_object_get(j, "estimated_memory_bytes")), est);
    json_decref(j);
    char path[256];
    snprintf(path, sizeof path, "/v1/jobs/%s/metrics", job);
    r = http_get(&small, path);
    assert_int_equal(r->status, 200);
    json_t *epochs = json_object_get(r->json, "epochs");
    assert_int_equal(json_array_size(epochs), 2);
    for (size_t i = 0; i < 2; i++) {
        const json_t *ep = json_array_get(epochs, i);
        assert_int_equal(
            json_integer_value(json_object_get(ep, "peak_memory_bytes")), est);
        /* Where and how it ran: the CPU, fp32, no graphs, nothing skipped. */
        assert_string_equal(json_string_value(json_object_get(ep, "device")),
                            "cpu");
        assert_string_equal(json_string_value(json_object_get(ep, "precision")),
                            "fp32");
        assert_true(json_is_null(json_object_get(ep, "cuda_graph")));
        assert_true(json_is_null(json_object_get(ep, "loss_scale")));
        assert_int_equal(
            json_integer_value(json_object_get(ep, "skipped_steps")), 0);
        assert_true(json_is_integer(json_object_get(ep, "skipped_steps")));
    }
    resp_free(r);
    srv_stop(&small, SIGTERM);
    srv_cleanup(&small);
}

/* ---- devices ---- */

/* Trains a tiny job on s and returns it finished (caller decrefs). */
static json_t *train_tiny(const srv *s, const char *ds)
{
    char b[512], job[64];
    snprintf(b, sizeof b,
             "{\"dataset\": \"%s\", \"model\": {\"layers\": [{\"type\": "
             "\"dense\", \"units\": 3}]},"
             " \"hyperparameters\": {\"epochs\": 2, \"batch_size\": 32}}",
             ds);
    resp *r = http_json(s, "POST", "/v1/jobs", b);
    assert_int_equal(r->status, 202);
    snprintf(job, sizeof job, "%s",
             json_string_value(json_object_get(r->json, "id")));
    resp_free(r);
    json_t *j = wait_job(s, job, 120);
    assert_non_null(j);
    if (strcmp(json_string_value(json_object_get(j, "status")), "succeeded"))
        fprintf(stderr, "job: %s\n", json_dumps(j, 0));
    assert_string_equal(json_string_value(json_object_get(j, "status")),
                        "succeeded");
    return j;
}

/* Sets the model's recorded training device, as a GPU server would have
 * (the server must be stopped). */
static void set_trained_on(const char *data, const char *model,
                           const char *device)
{
    char db_path[PATH_MAX + 16];
    snprintf(db_path, sizeof db_path, "%s/trainyard.db", data);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(db_path, &db), SQLITE_OK);
    sqlite3_stmt *st = NULL;
    assert_int_equal(
        sqlite3_prepare_v2(
            db,
            "UPDATE models SET doc = json_set(doc, '$.trained_on', ?) "
            "WHERE id = ?",
            -1, &st, NULL),
        SQLITE_OK);
    sqlite3_bind_text(st, 1, device, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, model, -1, SQLITE_STATIC);
    assert_int_equal(sqlite3_step(st), SQLITE_DONE);
    assert_int_equal(sqlite3_changes(db), 1);
    sqlite3_finalize(st);
    sqlite3_close(db);
}

/* --train-device auto trains on cuda:0 where this machine has a GPU, else
 * on the CPU, and says so on the job, every epoch and the model. A model
 * whose record says it was trained on a GPU this server lacks serves on
 * the CPU (predict, evaluate, KServe), as does one trained on cuda:0 on a
 * machine without a GPU. An explicit device the machine lacks stops the
 * start, naming the flag, before any admin key exists. */
static void test_train_device_auto_and_gpu_model_on_cpu(void **state)
{
    int count = place_cuda_count(NULL, 0);
    const char *here = count > 0 ? "cuda:0" : "cpu";
    srv s;
    const char *aut[] = {"--train-device", "auto", NULL};
    assert_int_equal(srv_start(&s, NULL, aut), 0);
    char a[PATH_MAX + 8], b[PATH_MAX + 8], ds[64], path[256], body[256];
    snprintf(a, sizeof a, "x=@%s", file_path("x.npy"));
    snprintf(b, sizeof b, "y=@%s", file_path("y.npy"));
    const char *npy[] = {"name=vectors", "format=npy", a, b, NULL};
    upload_ok(&s, npy, ds);
    json_t *j = train_tiny(&s, ds);
    assert_string_equal(json_string_value(json_object_get(j, "device")), here);
    char job[64], model[64];
    snprintf(job, sizeof job, "%s",
             json_string_value(json_object_get(j, "id")));
    snprintf(model, sizeof model, "%s",
             json_string_value(json_object_get(j, "model")));
    json_decref(j);
    snprintf(path, sizeof path, "/v1/jobs/%s/metrics", job);
    resp *r = http_get(&s, path);
    json_t *epochs = json_object_get(r->json, "epochs");
    assert_int_equal(json_array_size(epochs), 2);
    for (size_t i = 0; i < 2; i++) {
        const json_t *ep = json_array_get(epochs, i);
        assert_string_equal(json_string_value(json_object_get(ep, "device")),
                            here);
        /* The whole device's use, on a GPU only. */
        assert_true(count > 0 ? json_integer_value(json_object_get(
                                    ep, "device_memory_used_bytes")) > 0
                              : json_is_null(json_object_get(
                                    ep, "device_memory_used_bytes")));
    }
    resp_free(r);
    snprintf(path, sizeof path, "/v1/models/%s", model);
    r = http_get(&s, path);
    assert_string_equal(
        json_string_value(json_object_get(r->json, "trained_on")), here);
    resp_free(r);
    /* What it predicts where it was trained: the same after the moves. */
    snprintf(path, sizeof path, "/v1/models/%s/predict", model);
    r = http_json(&s, "POST", path, "{\"inputs\": [[1, 0, 0, 0, 0, 0]]}");
    assert_int_equal(r->status, 200);
    json_t *trained_out = json_incref(json_object_get(r->json, "outputs"));
    resp_free(r);
    srv_stop(&s, SIGTERM);

    /* cuda:1000 exists nowhere; cuda:0 exists only on a GPU machine. */
    static const char *const gpus[] = {"cuda:1000", "cuda:0"};
    for (size_t g = 0; g < 2; g++) {
        const char *expect = g == 1 && count > 0 ? "cuda:0" : "cpu";
        set_trained_on(s.data, model, gpus[g]);
        srv again;
        assert_int_equal(srv_start(&again, s.data, NULL), 0);
        snprintf(path, sizeof path, "/v1/models/%s", model);
        r = http_get(&again, path);
        assert_string_equal(
            json_string_value(json_object_get(r->json, "trained_on")), gpus[g]);
        resp_free(r);
        snprintf(path, sizeof path, "/v1/models/%s/predict", model);
        r = http_json(&again, "POST", path,
                      "{\"inputs\": [[1, 0, 0, 0, 0, 0]]}");
        if (r->status != 200)
            fprintf(stderr, "predict: %ld %s\n", r->status, r->body);
        assert_int_equal(r->status, 200);
        assert_string_equal(
            json_string_value(json_object_get(r->json, "device")), expect);
        assert_int_equal(
            json_array_size(json_object_get(r->json, "predictions")), 1);
        /* The same weights: the same outputs, to float rounding when a
         * GPU computes them. */
        json_t *row = json_array_get(json_object_get(r->json, "outputs"), 0);
        json_t *want = json_array_get(trained_out, 0);
        assert_int_equal(json_array_size(row), 3);
        for (size_t k = 0; k < 3; k++)
            assert_true(fabs(json_number_value(json_array_get(row, k)) -
                             json_number_value(json_array_get(want, k))) <
                        1e-5);
        resp_free(r);
        snprintf(path, sizeof path, "/v1/models/%s/evaluate", model);
        snprintf(body, sizeof body, "{\"dataset\": \"%s\"}", ds);
        r = http_json(&again, "POST", path, body);
        assert_int_equal(r->status, 200);
        assert_string_equal(
            json_string_value(json_object_get(r->json, "device")), expect);
        assert_int_equal(
            json_integer_value(json_object_get(r->json, "num_examples")), 600);
        assert_true(
            isfinite(json_number_value(json_object_get(r->json, "loss"))));
        resp_free(r);
        snprintf(path, sizeof path, "/v2/models/%s/infer", model);
        r = http_json(
            &again, "POST", path,
            "{\"inputs\": [{\"name\": \"input\", \"shape\": [1, 6],"
            " \"datatype\": \"FP32\", \"data\": [1, 0, 0, 0, 0, 0]}]}");
        assert_int_equal(r->status, 200);
        assert_string_equal(
            json_string_value(json_object_get(
                json_object_get(r->json, "parameters"), "device")),
            expect);
        resp_free(r);
        srv_stop(&again, SIGTERM);
    }
    json_decref(trained_out);
    srv_cleanup(&s);

    /* A device past the last: no start, the flag named, no admin key. */
    srv bad;
    char flag[32], key[PATH_MAX + 16];
    snprintf(flag, sizeof flag, "cuda:%d", count);
    const char *missing[] = {"--train-device", flag, NULL};
    assert_int_equal(srv_start(&bad, NULL, missing), -1);
    snprintf(key, sizeof key, "%s/admin.key", bad.data);
    assert_int_equal(access(key, F_OK), -1);
    FILE *f = fopen(bad.log, "r");
    assert_non_null(f);
    char text[4096] = "";
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    assert_non_null(strstr(text, "--train-device"));
    srv_cleanup(&bad);
}

/* hyperparameters.precision: a bad value is a 422 naming it; bf16 on this
 * CPU server trains (in fp32, as every epoch record says). */
static void test_precision_jobs(void **state)
{
    char b[1024], job[64], path[256];
    snprintf(
        b, sizeof b,
        "{\"dataset\": \"%s\", \"model\": {\"layers\": [{\"type\": \"dense\", "
        "\"units\": 3}]}, \"hyperparameters\": {\"precision\": \"fp64\"}}",
        csv_ds);
    expect_job_422(b, "hyperparameters.precision");
    snprintf(
        b, sizeof b,
        "{\"dataset\": \"%s\", \"model\": {\"layers\": [{\"type\": \"dense\","
        " \"units\": 8}, {\"type\": \"relu\"}, {\"type\": \"dense\", "
        "\"units\": 3}]},"
        " \"hyperparameters\": {\"epochs\": 3, \"batch_size\": 16, "
        "\"precision\": \"bf16\"}}",
        csv_ds);
    resp *r = http_json(&server, "POST", "/v1/jobs", b);
    assert_int_equal(r->status, 202);
    snprintf(job, sizeof job, "%s",
             json_string_value(json_object_get(r->json, "id")));
    resp_free(r);
    json_t *j = wait_job(&server, job, 120);
    assert_non_null(j);
    if (strcmp(json_string_value(json_object_get(j, "status")), "succeeded"))
        fprintf(stderr, "bf16 job: %s\n", json_dumps(j, 0));
    assert_string_equal(json_string_value(json_object_get(j, "status")),
                        "succeeded");
    /* what was asked stays in the job's hyperparameters */
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(j, "hyperparameters"),
                                          "precision")),
        "bf16");
    json_decref(j);
    snprintf(path, sizeof path, "/v1/jobs/%s/metrics", job);
    r = http_get(&server, path);
    assert_int_equal(r->status, 200);
    json_t *epochs = json_object_get(r->json, "epochs");
    assert_int_equal(json_array_size(epochs), 3);
    for (size_t i = 0; i < 3; i++) {
        const json_t *ep = json_array_get(epochs, i);
        assert_string_equal(json_string_value(json_object_get(ep, "precision")),
                            "fp32");
        assert_true(json_is_null(json_object_get(ep, "loss_scale")));
        assert_int_equal(
            json_integer_value(json_object_get(ep, "skipped_steps")), 0);
    }
    resp_free(r);
}

/* ---- crash safety ---- */

static int past_epoch_2(const json_t *job)
{
    return json_integer_value(
               json_object_get(json_object_get(job, "metrics"), "epoch")) >= 2;
}

static void test_sigkill_restart_resumes(void **state)
{
    srv s;
    assert_int_equal(srv_start(&s, NULL, NULL), 0);
    char xp[PATH_MAX + 8], yp[PATH_MAX + 8], ds[64], job[64], b[1024],
        path[256];
    make_npy_classes(file_path("cx.npy"), file_path("cy.npy"), 3000, 32, 5);
    snprintf(xp, sizeof xp, "x=@%s", file_path("cx.npy"));
    snprintf(yp, sizeof yp, "y=@%s", file_path("cy.npy"));
    const char *parts[] = {"name=crash", "format=npy", xp, yp, NULL};
    upload_ok(&s, parts, ds);
    /* A model from before the crash, to find intact after it. */
    snprintf(b, sizeof b,
             "{\"dataset\": \"%s\", \"model\": {\"layers\": [{\"type\": "
             "\"dense\", \"units\": 3}]},"
             " \"hyperparameters\": {\"epochs\": 1}}",
             ds);
    resp *r = http_json(&s, "POST", "/v1/jobs", b);
    snprintf(job, sizeof job, "%s",
             json_string_value(json_object_get(r->json, "id")));
    resp_free(r);
    json_t *j = wait_job(&s, job, 60);
    char model[64];
    snprintf(model, sizeof model, "%s",
             json_string_value(json_object_get(j, "model")));
    json_decref(j);

    snprintf(b, sizeof b,
             "{\"dataset\": \"%s\", \"model\": {\"layers\": [{\"type\": "
             "\"dense\", \"units\": 512},"
             " {\"type\": \"relu\"}, {\"type\": \"dense\", \"units\": 512}, "
             "{\"type\": \"relu\"},"
             " {\"type\": \"dense\", \"units\": 3}]},"
             " \"hyperparameters\": {\"epochs\": 12, \"batch_size\": 32, "
             "\"seed\": 3}}",
             ds);
    r = http_json(&s, "POST", "/v1/jobs", b);
    assert_int_equal(r->status, 202);
    snprintf(job, sizeof job, "%s",
             json_string_value(json_object_get(r->json, "id")));
    resp_free(r);
    j = wait_job_until(&s, job, 120, past_epoch_2);
    assert_true(past_epoch_2(j));
    assert_string_equal(json_string_value(json_object_get(j, "status")),
                        "running");
    json_decref(j);

    assert_true(find_worker(&s, job) > 0);
    srv_stop(&s, SIGKILL);
    /* The worker dies with its server, so a restart never runs the job
     * twice at once. */
    double deadline = now_seconds() + 5;
    while (find_worker(&s, job) && now_seconds() < deadline)
        usleep(50 * 1000);
    assert_int_equal(find_worker(&s, job), 0);

    srv again;
    assert_int_equal(srv_start(&again, s.data, NULL), 0);
    snprintf(path, sizeof path, "/v1/datasets/%s", ds);
    r = http_get(&again, path);
    assert_int_equal(r->status, 200);
    resp_free(r);
    snprintf(path, sizeof path, "/v1/models/%s/predict", model);
    snprintf(b, sizeof b, "{\"inputs\": [[");
    for (int i = 0; i < 32; i++)
        strcat(b, i ? ",0.5" : "0.5");
    strcat(b, "]]}");
    r = http_json(&again, "POST", path, b);
    assert_int_equal(r->status, 200);
    resp_free(r);

    j = wait_job(&again, job, 300);
    if (strcmp(json_string_value(json_object_get(j, "status")), "succeeded"))
        fprintf(stderr, "job after restart: %s\n", json_dumps(j, 0));
    assert_string_equal(json_string_value(json_object_get(j, "status")),
                        "succeeded");
    assert_int_equal(json_integer_value(json_object_get(j, "attempts")), 2);
    /* It resumed from a checkpoint instead of starting over. */
    json_t *resumed =
        json_object_get(json_object_get(j, "progress"), "resumed_from_epoch");
    assert_true(json_integer_value(resumed) >= 2);
    json_decref(j);
    snprintf(path, sizeof path, "/v1/jobs/%s/metrics", job);
    r = http_get(&again, path);
    json_t *epochs = json_object_get(r->json, "epochs");
    assert_int_equal(json_array_size(epochs), 12);
    for (size_t i = 0; i < 12; i++)
        assert_int_equal(json_integer_value(json_object_get(
                             json_array_get(epochs, i), "epoch")),
                         (json_int_t)i + 1);
    resp_free(r);
    srv_stop(&again, SIGTERM);
    srv_cleanup(&again);
}

/* The names in a folder other than . and .., or -1 when it is absent. */
static int folder_entries(const char *dir, char *names, size_t size)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    size_t o = 0;
    names[0] = '\0';
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        n++;
        if (o < size)
            o += (size_t)snprintf(names + o, size - o, "%s ", e->d_name);
    }
    closedir(d);
    return n;
}

/* Issue 30, 9: a server that cannot start leaves a fresh data folder as it
 * found it: one that did not exist is not left behind, an empty one stays
 * empty, neither with an admin key or a database. A port in use (the
 * shared server's) stops it before it touches the folder; a failure after
 * the folder was set up (devices that cannot be read) undoes it. */
static void test_failed_start_leaves_fresh_folder(void **state)
{
    char root[PATH_MAX], absent[PATH_MAX + 16], empty[PATH_MAX + 16];
    char later[PATH_MAX + 16], listen[64], names[512];
    temp_dir(root);
    snprintf(absent, sizeof absent, "%s/absent", root);
    snprintf(empty, sizeof empty, "%s/empty", root);
    snprintf(later, sizeof later, "%s/later", root);
    assert_int_equal(mkdir(empty, 0750), 0);
    snprintf(listen, sizeof listen, "127.0.0.1:%d", server.port);
    const char *in_use[] = {"--listen", listen, NULL};
    const char *no_devices[] = {"--devices", "sim:/nonexistent/devices.json",
                                NULL};
    const struct {
        const char *dir;
        const char *const *flags;
        const char *says;
        int entries; /* -1: absent */
    } cases[] = {{absent, in_use, "Address already in use", -1},
                 {empty, in_use, "Address already in use", 0},
                 {later, no_devices, "/nonexistent/devices.json", -1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        srv s;
        assert_int_not_equal(srv_start(&s, cases[i].dir, cases[i].flags), 0);
        char *log = NULL;
        size_t n = 0;
        assert_int_equal(fs_read_all(s.log, 1 << 20, &log, &n, NULL), TY_OK);
        if (!strstr(log, cases[i].says))
            fail_msg("the server's log does not say why (%s): %s",
                     cases[i].says, log);
        int entries = folder_entries(cases[i].dir, names, sizeof names);
        if (entries != cases[i].entries)
            fail_msg("the failed start left %s %s (%s); its log: %.2000s",
                     cases[i].dir, entries < 0 ? "absent" : "behind", names,
                     log);
        free(log);
        unlink(s.log);
    }
    /* The empty folder has its own mode still. */
    struct stat st;
    assert_int_equal(stat(empty, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0750);
    fs_remove_tree(root, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_health_and_openapi_are_public),
        cmocka_unit_test(test_v1_and_v2_need_a_key),
        cmocka_unit_test(test_unknown_route_and_method),
        cmocka_unit_test(test_upload_csv),
        cmocka_unit_test(test_upload_idx_gz_and_npy),
        cmocka_unit_test(test_list_paginates),
        cmocka_unit_test(test_bad_uploads_get_422),
        cmocka_unit_test(test_gzip_bomb_upload_422),
        cmocka_unit_test(test_bad_request_bodies),
        cmocka_unit_test(test_fetch_from_urls),
        cmocka_unit_test(test_job_validation_errors),
        cmocka_unit_test(test_json_numbers_are_short),
        cmocka_unit_test(test_train_predict_evaluate_csv),
        cmocka_unit_test(test_succeeded_progress_is_complete),
        cmocka_unit_test(test_kserve_v2),
        cmocka_unit_test(test_train_images_nested_predict),
        cmocka_unit_test(test_import_model_predicts),
        cmocka_unit_test(test_import_model_rejects),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_dataset_in_use_cannot_be_deleted),
        cmocka_unit_test(test_worker_crash_fails_only_the_job),
        cmocka_unit_test(test_upload_limit_is_413),
        cmocka_unit_test(test_sigkill_restart_resumes),
        cmocka_unit_test(test_job_memory_limit),
        cmocka_unit_test(test_train_device_auto_and_gpu_model_on_cpu),
        cmocka_unit_test(test_precision_jobs),
        cmocka_unit_test(test_failed_start_leaves_fresh_folder),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
