/*
 * Integration tests for text and tokens datasets (issue 31's text data)
 * through a live server: a UTF-8 text upload tokenized with the byte
 * tokenizer, token ids from an llm.c .bin and an int64 NPY made here, the
 * document (tokenizer, vocabulary, token count, sample), the examples
 * endpoint's token windows and their text, every refusal with its field
 * and offset while nothing is stored (the dataset count and the blob
 * folder unchanged), text and tokens fetched from URLs (a BPE tokenizer
 * or a missing vocab_size refused before anything is fetched). Training,
 * predicting and evaluating on text: test_lm.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static srv server;
static char files[PATH_MAX];
static char text_ds[64];

/* 13 bytes: é and ö are two bytes each. */
#define TEXT "h\xc3\xa9llo w\xc3\xb6rld"

static char *file_path(const char *name)
{
    static char p[4][PATH_MAX];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], PATH_MAX, "%s/%s", files, name);
    return p[k];
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

static size_t blob_count(void)
{
    char blobs[PATH_MAX + 8];
    snprintf(blobs, sizeof blobs, "%s/blobs", server.data);
    return count_files(blobs);
}

static size_t dataset_count(void)
{
    resp *r = http_get(&server, "/v1/datasets?limit=1000");
    assert_int_equal(r->status, 200);
    size_t n = json_array_size(json_object_get(r->json, "items"));
    resp_free(r);
    return n;
}

static json_t *upload_ok(const char *const *parts)
{
    resp *r = http_upload(&server, "/v1/datasets", parts);
    expect_status(r, 201);
    json_t *doc = json_incref(r->json);
    resp_free(r);
    return doc;
}

/* An llm.c .bin: 256 int32 (magic, version, count), then uint16 ids. */
static void write_bin(const char *path, int32_t magic, int32_t count,
                      const uint16_t *ids, size_t n)
{
    size_t len = 1024 + 2 * n;
    unsigned char *buf = calloc(1, len);
    assert_non_null(buf);
    int32_t h[3] = {magic, 1, count};
    memcpy(buf, h, sizeof h);
    memcpy(buf + 1024, ids, 2 * n);
    write_file(path, buf, len);
    free(buf);
}

static int setup(void **state)
{
    (void)state;
    /* the fetch-by-URL test's files are served on loopback */
    const char *flags[] = {"--fetch-allow-networks", "127.0.0.1/32", NULL};
    if (srv_start(&server, NULL, flags))
        return -1;
    temp_dir(files);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    srv_stop(&server, SIGTERM);
    srv_cleanup(&server);
    return 0;
}

static void test_text_upload_and_document(void **state)
{
    (void)state;
    write_file(file_path("t.txt"), TEXT, strlen(TEXT));
    char part[PATH_MAX + 16];
    snprintf(part, sizeof part, "file=@%s", file_path("t.txt"));
    const char *parts[] = {"name=greet", "format=text", part, NULL};
    json_t *doc = upload_ok(parts);
    snprintf(text_ds, sizeof text_ds, "%s", str(doc, "id"));
    json_decref(doc);

    char path[128];
    snprintf(path, sizeof path, "/v1/datasets/%s", text_ds);
    resp *r = http_get(&server, path);
    expect_status(r, 200);
    assert_string_equal(str(r->json, "format"), "text");
    assert_string_equal(str(r->json, "task"), "language_modeling");
    assert_string_equal(str(r->json, "tokenizer"), "byte");
    assert_int_equal(json_integer_value(json_object_get(r->json, "vocab_size")),
                     256);
    assert_int_equal(json_integer_value(json_object_get(r->json, "num_tokens")),
                     strlen(TEXT));
    assert_string_equal(str(json_object_get(r->json, "sample"), "text"), TEXT);
    resp_free(r);

    /* the tokenizer named explicitly is the same */
    const char *named[] = {"name=greet2", "format=text", "tokenizer=byte", part,
                           NULL};
    doc = upload_ok(named);
    assert_string_equal(str(doc, "tokenizer"), "byte");
    json_decref(doc);
}

static void test_text_windows(void **state)
{
    (void)state;
    char path[160];
    /* windows of 3 bytes: the second is "llo", the third " w\xc3" cuts the
     * ö, whose first byte shows as U+FFFD */
    snprintf(path, sizeof path,
             "/v1/datasets/%s/examples?length=3&offset=1&limit=2", text_ds);
    resp *r = http_get(&server, path);
    expect_status(r, 200);
    assert_int_equal(json_integer_value(json_object_get(r->json, "total")), 5);
    assert_int_equal(json_integer_value(json_object_get(r->json, "length")), 3);
    const json_t *items = json_object_get(r->json, "items");
    assert_int_equal(json_array_size(items), 2);
    const json_t *w1 = json_array_get(items, 0), *w2 = json_array_get(items, 1);
    assert_int_equal(json_integer_value(json_object_get(w1, "start")), 3);
    assert_string_equal(str(w1, "text"), "llo");
    const json_t *ids = json_object_get(w1, "ids");
    assert_int_equal(json_array_size(ids), 3);
    assert_int_equal(json_integer_value(json_array_get(ids, 0)), 'l');
    assert_string_equal(str(w2, "text"), " w\xef\xbf\xbd");
    assert_int_equal(
        json_integer_value(json_array_get(json_object_get(w2, "ids"), 2)),
        0xc3);
    resp_free(r);

    /* the default window is 64 tokens: all 13 in one */
    snprintf(path, sizeof path, "/v1/datasets/%s/examples", text_ds);
    r = http_get(&server, path);
    expect_status(r, 200);
    assert_int_equal(json_integer_value(json_object_get(r->json, "length")),
                     64);
    assert_string_equal(
        str(json_array_get(json_object_get(r->json, "items"), 0), "text"),
        TEXT);
    resp_free(r);

    snprintf(path, sizeof path, "/v1/datasets/%s/examples?length=0", text_ds);
    r = http_get(&server, path);
    expect_status(r, 400);
    resp_free(r);
    /* checked whatever the dataset, before it is looked up */
    r = http_get(&server, "/v1/datasets/ds_nope/examples?length=4097");
    expect_status(r, 400);
    assert_string_equal(str(r->json, "field"), "length");
    resp_free(r);
}

static void test_tokens_bin_and_npy(void **state)
{
    (void)state;
    const uint16_t ids[] = {50256, 0, 17, 42};
    write_bin(file_path("t.bin"), 20240520, 4, ids, 4);
    char part[PATH_MAX + 16];
    snprintf(part, sizeof part, "file=@%s", file_path("t.bin"));
    const char *parts[] = {"name=gpt2-shard", "format=tokens",
                           "vocab_size=50257", part, NULL};
    json_t *doc = upload_ok(parts);
    assert_string_equal(str(doc, "format"), "tokens");
    assert_true(json_is_null(json_object_get(doc, "tokenizer")));
    assert_int_equal(json_integer_value(json_object_get(doc, "vocab_size")),
                     50257);
    assert_int_equal(json_integer_value(json_object_get(doc, "num_tokens")), 4);
    const json_t *sample =
        json_object_get(json_object_get(doc, "sample"), "ids");
    assert_int_equal(json_array_size(sample), 4);
    assert_int_equal(json_integer_value(json_array_get(sample, 0)), 50256);

    char path[160];
    snprintf(path, sizeof path, "/v1/datasets/%s/examples?length=2&offset=1",
             str(doc, "id"));
    resp *r = http_get(&server, path);
    expect_status(r, 200);
    const json_t *w = json_array_get(json_object_get(r->json, "items"), 0);
    assert_int_equal(
        json_integer_value(json_array_get(json_object_get(w, "ids"), 1)), 42);
    assert_null(json_object_get(w, "text")); /* no tokenizer to decode */
    resp_free(r);
    json_decref(doc);

    const int64_t ids64[] = {5, 6, 7};
    write_npy_i64(file_path("t.npy"), ids64, 3);
    snprintf(part, sizeof part, "file=@%s", file_path("t.npy"));
    const char *np[] = {"name=np-tokens", "format=tokens", "vocab_size=8", part,
                        NULL};
    doc = upload_ok(np);
    assert_int_equal(json_integer_value(json_object_get(doc, "num_tokens")), 3);
    json_decref(doc);
}

/* Uploads parts expecting a 422 whose detail holds needle and whose field
 * is field; checks nothing was stored. */
static void expect_refused(const char *const *parts, const char *field,
                           const char *needle)
{
    size_t datasets = dataset_count(), blobs = blob_count();
    resp *r = http_upload(&server, "/v1/datasets", parts);
    if (r->status != 422 || !strstr(str(r->json, "detail"), needle))
        fprintf(stderr, "%ld %.*s\n", r->status, (int)r->len, r->body);
    assert_int_equal(r->status, 422);
    assert_non_null(strstr(str(r->json, "detail"), needle));
    assert_string_equal(str(r->json, "field"), field);
    resp_free(r);
    assert_int_equal(dataset_count(), datasets);
    assert_int_equal(blob_count(), blobs);
}

static void test_refusals_store_nothing(void **state)
{
    (void)state;
    char part[PATH_MAX + 16];
    const char *text[] = {"name=bad", "format=text", part, NULL};

    write_file(file_path("bad.txt"), "abc\xff", 4);
    snprintf(part, sizeof part, "file=@%s", file_path("bad.txt"));
    expect_refused(text, "file", "byte offset 3");
    write_file(file_path("empty.txt"), "", 0);
    snprintf(part, sizeof part, "file=@%s", file_path("empty.txt"));
    expect_refused(text, "file", "empty");

    snprintf(part, sizeof part, "file=@%s", file_path("t.txt"));
    const char *bpe[] = {"name=bad", "format=text",
                         "tokenizer={\"type\": \"bpe\", \"vocab_size\": 512}",
                         part, NULL};
    expect_refused(bpe, "tokenizer", "not supported yet");

    const uint16_t ids[] = {1, 2, 300};
    write_bin(file_path("v.bin"), 20240520, 3, ids, 3);
    snprintf(part, sizeof part, "file=@%s", file_path("v.bin"));
    const char *over[] = {"name=bad", "format=tokens", "vocab_size=256", part,
                          NULL};
    expect_refused(over, "file", "token 2 (at byte offset 1028) is 300");
    const char *novocab[] = {"name=bad", "format=tokens", part, NULL};
    expect_refused(novocab, "vocab_size", "vocab_size is required");
    write_bin(file_path("short.bin"), 20240520, 5, ids, 3);
    snprintf(part, sizeof part, "file=@%s", file_path("short.bin"));
    expect_refused(over, "file", "declares 5 tokens at byte offset 8");
    write_bin(file_path("magic.bin"), 1234, 3, ids, 3);
    snprintf(part, sizeof part, "file=@%s", file_path("magic.bin"));
    expect_refused(over, "file", "magic 20240520 at byte offset 0");

    /* a JSON body naming a URL: the tokenizer is refused before a fetch */
    resp *r = http_json(&server, "POST", "/v1/datasets",
                        "{\"name\": \"u\", \"format\": \"text\", \"urls\": "
                        "{\"file\": \"http://127.0.0.1:9/x.txt\"}, "
                        "\"tokenizer\": {\"type\": \"bpe\"}}");
    assert_int_equal(r->status, 422);
    assert_string_equal(str(r->json, "field"), "tokenizer");
    resp_free(r);
}

/* Serves files from the test folder, for the fetch-by-URL test. */
static enum MHD_Result serve_file(void *cls, struct MHD_Connection *c,
                                  const char *url, const char *method,
                                  const char *version, const char *data,
                                  size_t *size, void **ptr)
{
    (void)cls, (void)method, (void)version, (void)data, (void)size, (void)ptr;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s%s", files, url);
    int fd = strstr(url, "..") ? -1 : open(path, O_RDONLY);
    off_t len = fd < 0 ? -1 : lseek(fd, 0, SEEK_END);
    struct MHD_Response *r;
    enum MHD_Result ret;
    if (len < 0) {
        if (fd >= 0)
            close(fd);
        r = MHD_create_response_from_buffer(9, "not found",
                                            MHD_RESPMEM_PERSISTENT);
        ret = MHD_queue_response(c, 404, r);
    } else {
        r = MHD_create_response_from_fd((uint64_t)len, fd);
        ret = MHD_queue_response(c, 200, r);
    }
    MHD_destroy_response(r);
    return ret;
}

/* A JSON body naming URLs: the same formats, fields beside "urls". */
static void test_text_and_tokens_from_urls(void **state)
{
    (void)state;
    struct MHD_Daemon *d =
        MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL,
                         serve_file, NULL, MHD_OPTION_END);
    assert_non_null(d);
    int port = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT)->port;
    char body[512];
    snprintf(body, sizeof body,
             "{\"name\": \"fetched-text\", \"format\": \"text\", "
             "\"tokenizer\": \"byte\", \"urls\": {\"file\": "
             "\"http://127.0.0.1:%d/t.txt\"}}",
             port);
    resp *r = http_json(&server, "POST", "/v1/datasets", body);
    expect_status(r, 201);
    assert_int_equal(json_integer_value(json_object_get(r->json, "num_tokens")),
                     strlen(TEXT));
    assert_string_equal(str(json_object_get(r->json, "source"), "kind"),
                        "urls");
    resp_free(r);

    snprintf(body, sizeof body,
             "{\"name\": \"fetched-ids\", \"format\": \"tokens\", "
             "\"vocab_size\": 50257, \"urls\": {\"file\": "
             "\"http://127.0.0.1:%d/t.bin\"}}",
             port);
    r = http_json(&server, "POST", "/v1/datasets", body);
    expect_status(r, 201);
    assert_int_equal(json_integer_value(json_object_get(r->json, "num_tokens")),
                     4);
    resp_free(r);

    /* vocab_size is checked before anything is fetched */
    snprintf(body, sizeof body,
             "{\"name\": \"f\", \"format\": \"tokens\", \"urls\": "
             "{\"file\": \"http://127.0.0.1:%d/t.bin\"}}",
             port);
    r = http_json(&server, "POST", "/v1/datasets", body);
    assert_int_equal(r->status, 422);
    assert_string_equal(str(r->json, "field"), "vocab_size");
    resp_free(r);
    MHD_stop_daemon(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text_upload_and_document),
        cmocka_unit_test(test_text_windows),
        cmocka_unit_test(test_tokens_bin_and_npy),
        cmocka_unit_test(test_refusals_store_nothing),
        cmocka_unit_test(test_text_and_tokens_from_urls),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
