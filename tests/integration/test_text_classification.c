/*
 * Integration tests for text classification datasets (issue 31) through a
 * live server: a CSV with a text_column uploaded as a form (byte tokenizer,
 * max_length truncating and padding; a learned BPE), its document (text
 * column, tokenizer, vocabulary, max_length, token counts, the first row
 * decoded), the examples endpoint (each row's ids without the padding, its
 * text and label), a CSV without text_column still tabular, and the
 * refusals (no such text column, invalid UTF-8 in a cell, max_length out of
 * range, the text column as the label, text_column on another format,
 * max_length without text_column, tokenizer on a tabular CSV): 422 naming
 * the field or the line, nothing stored.
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
static char csv_part[PATH_MAX + 16];

#define REVIEWS                                   \
    "id,text,label\n"                             \
    "1,great film,pos\n"                          \
    "2,\"dull, too long and far too loud\",neg\n" \
    "3,,pos\n"                                    \
    "4,caf\xc3\xa9 scene,neg\n"

static size_t dataset_count(void)
{
    resp *r = http_get(&server, "/v1/datasets?limit=1000");
    assert_int_equal(r->status, 200);
    size_t n = json_array_size(json_object_get(r->json, "items"));
    resp_free(r);
    return n;
}

static json_int_t num(const json_t *o, const char *k)
{
    const json_t *v = json_object_get(o, k);
    if (!json_is_integer(v))
        fail_msg("\"%s\" is not an integer", k);
    return json_integer_value(v);
}

static const char *write_csv(const char *name, const char *text)
{
    static char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", files, name);
    write_file(path, text, strlen(text));
    snprintf(csv_part, sizeof csv_part, "file=@%s", path);
    return csv_part;
}

static void test_upload_doc_examples(void **state)
{
    (void)state;
    const char *file = write_csv("reviews.csv", REVIEWS);
    const char *parts[] = {"name=reviews",
                           "format=csv",
                           "label_column=label",
                           "text_column=text",
                           "max_length=12",
                           file,
                           NULL};
    resp *r = http_upload(&server, "/v1/datasets", parts);
    expect_status(r, 201);
    json_t *doc = r->json;
    assert_string_equal(str(doc, "format"), "csv");
    assert_string_equal(str(doc, "task"), "classification");
    assert_string_equal(str(doc, "text_column"), "text");
    assert_string_equal(str(doc, "label_column"), "label");
    assert_string_equal(str(doc, "tokenizer"), "byte");
    assert_int_equal(num(doc, "vocab_size"), 256);
    assert_int_equal(num(doc, "max_length"), 12);
    assert_int_equal(num(doc, "num_examples"), 4);
    /* bytes: 10 + 31 + 0 + 11 */
    assert_int_equal(num(doc, "num_tokens"), 52);
    assert_int_equal(num(doc, "truncated_examples"), 1);
    assert_int_equal(json_integer_value(json_array_get(
                         json_object_get(doc, "input_shape"), 0)),
                     12);
    assert_null(json_object_get(doc, "feature_means"));
    json_t *sample = json_object_get(doc, "sample");
    assert_string_equal(str(sample, "text"), "great film");
    assert_string_equal(str(sample, "label"), "pos");
    assert_int_equal(json_array_size(json_object_get(sample, "ids")), 10);
    char path[256];
    snprintf(path, sizeof path, "/v1/datasets/%s/examples?limit=8",
             str(doc, "id"));
    resp_free(r);

    /* the stored document is the one returned */
    r = http_get(&server, path);
    expect_status(r, 200);
    assert_int_equal(num(r->json, "total"), 4);
    json_t *items = json_object_get(r->json, "items");
    assert_int_equal(json_array_size(items), 4);
    static const char *const texts[] = {"great film", "dull, too lo", "",
                                        "caf\xc3\xa9 scene"};
    static const char *const labels[] = {"pos", "neg", "pos", "neg"};
    for (size_t i = 0; i < 4; i++) {
        json_t *it = json_array_get(items, i);
        assert_string_equal(str(it, "text"), texts[i]);
        assert_string_equal(str(it, "label"), labels[i]);
        /* no padding among the ids: as many as the text's bytes */
        json_t *ids = json_object_get(it, "ids");
        assert_int_equal(json_array_size(ids), strlen(texts[i]));
        size_t k;
        json_t *v;
        json_array_foreach (ids, k, v)
            assert_true(json_integer_value(v) >= 0);
    }
    assert_int_equal(json_integer_value(json_array_get(
                         json_object_get(json_array_get(items, 0), "ids"), 0)),
                     'g');
    resp_free(r);
}

static void test_learned_bpe_json_body_refused_urls(void **state)
{
    (void)state;
    /* a learned BPE over the text column */
    const char *file =
        write_csv("spam.csv", "label,text\n"
                              "spam,win the prize win the prize\n"
                              "ham,the meeting is at noon\n"
                              "spam,win win win the prize\n");
    const char *parts[] = {"name=spam",
                           "format=csv",
                           "label_column=label",
                           "text_column=text",
                           "tokenizer={\"type\": \"bpe\", \"vocab_size\": 280}",
                           file,
                           NULL};
    resp *r = http_upload(&server, "/v1/datasets", parts);
    expect_status(r, 201);
    assert_string_equal(str(r->json, "tokenizer"), "bpe");
    assert_true(num(r->json, "vocab_size") > 256);
    assert_int_equal(num(r->json, "max_length"), 128);      /* the default */
    assert_true(num(r->json, "num_tokens") < 31 + 24 + 25); /* it merged */
    assert_string_equal(str(json_object_get(r->json, "sample"), "text"),
                        "win the prize win the prize");
    char path[256];
    snprintf(path, sizeof path, "/v1/datasets/%s/examples?offset=2&limit=1",
             str(r->json, "id"));
    resp_free(r);
    r = http_get(&server, path);
    expect_status(r, 200);
    json_t *it = json_array_get(json_object_get(r->json, "items"), 0);
    assert_string_equal(str(it, "text"), "win win win the prize");
    assert_string_equal(str(it, "label"), "spam");
    resp_free(r);
}

static void expect_refused(const char *const *parts, const char *field,
                           const char *needle)
{
    size_t before = dataset_count();
    resp *r = http_upload(&server, "/v1/datasets", parts);
    if (r->status != 422 || !strstr(str(r->json, "detail"), needle) ||
        strcmp(str(r->json, "field"), field))
        fprintf(stderr, "%ld %.*s\n", r->status, (int)r->len, r->body);
    assert_int_equal(r->status, 422);
    assert_string_equal(str(r->json, "field"), field);
    assert_non_null(strstr(str(r->json, "detail"), needle));
    assert_null(strstr(r->body, server.data));
    resp_free(r);
    assert_int_equal(dataset_count(), before);
}

static void test_refusals(void **state)
{
    (void)state;
    const char *file = write_csv("r.csv", REVIEWS);
    const char *missing[] = {
        "name=x",           "format=csv", "label_column=label",
        "text_column=body", file,         NULL};
    expect_refused(missing, "text_column", "text column \"body\" is not in");
    const char *same[] = {
        "name=x", "format=csv", "label_column=label", "text_column=label",
        file,     NULL};
    expect_refused(same, "text_column", "same column");
    const char *zero[] = {"name=x",
                          "format=csv",
                          "label_column=label",
                          "text_column=text",
                          "max_length=0",
                          file,
                          NULL};
    expect_refused(zero, "max_length", "from 1 to 8192");
    const char *big[] = {"name=x",
                         "format=csv",
                         "label_column=label",
                         "text_column=text",
                         "max_length=8193",
                         file,
                         NULL};
    expect_refused(big, "max_length", "from 1 to 8192");
    const char *notnum[] = {"name=x",
                            "format=csv",
                            "label_column=label",
                            "text_column=text",
                            "max_length=12x",
                            file,
                            NULL};
    expect_refused(notnum, "max_length", "from 1 to 8192");
    const char *nolen[] = {"name=x",        "format=csv", "label_column=label",
                           "max_length=12", file,         NULL};
    expect_refused(nolen, "max_length", "with a text_column");
    const char *tabtok[] = {
        "name=x",         "format=csv", "label_column=label",
        "tokenizer=byte", file,         NULL};
    expect_refused(tabtok, "tokenizer", "with a text_column");
    const char *regr[] = {"name=x",
                          "format=csv",
                          "label_column=label",
                          "text_column=text",
                          "task=regression",
                          file,
                          NULL};
    expect_refused(regr, "task", "always classification");
    const char *text_fmt[] = {"name=x", "format=text", "text_column=text", file,
                              NULL};
    expect_refused(text_fmt, "text_column", "csv datasets only");
    const char *badtok[] = {"name=x",
                            "format=csv",
                            "label_column=label",
                            "text_column=text",
                            "tokenizer={\"type\": \"bpe\", \"vocab_size\": 3}",
                            file,
                            NULL};
    expect_refused(badtok, "tokenizer.vocab_size", "from 257");

    const char *bad = write_csv("bad.csv", "label,text\n"
                                           "a,fine\n"
                                           "b,\"two\nlines\"\n"
                                           "a,caf\xc3\n");
    const char *utf8[] = {
        "name=x",           "format=csv", "label_column=label",
        "text_column=text", bad,          NULL};
    expect_refused(utf8, "file", "line 5, column 2: the text is not valid");

    /* JSON bodies take the same fields: refused before any download */
    size_t before = dataset_count();
    resp *r = http_json(&server, "POST", "/v1/datasets",
                        "{\"name\": \"x\", \"format\": \"npy\", "
                        "\"text_column\": \"text\", \"urls\": {}}");
    assert_int_equal(r->status, 422);
    assert_string_equal(str(r->json, "field"), "text_column");
    resp_free(r);
    r = http_json(&server, "POST", "/v1/datasets",
                  "{\"name\": \"x\", \"format\": \"csv\", \"label_column\": "
                  "\"label\", \"text_column\": \"text\", \"max_length\": "
                  "\"12\", \"urls\": {}}");
    assert_int_equal(r->status, 422);
    assert_string_equal(str(r->json, "field"), "max_length");
    resp_free(r);
    assert_int_equal(dataset_count(), before);
}

/* Without text_column a CSV is tabular as it always was: the text column
 * is a categorical feature. */
static void test_tabular_unchanged(void **state)
{
    (void)state;
    const char *file = write_csv("tab.csv", REVIEWS);
    const char *parts[] = {"name=tab", "format=csv", "label_column=label", file,
                           NULL};
    resp *r = http_upload(&server, "/v1/datasets", parts);
    expect_status(r, 201);
    assert_null(json_object_get(r->json, "text_column"));
    assert_null(json_object_get(r->json, "tokenizer"));
    assert_non_null(json_object_get(r->json, "columns"));
    assert_non_null(json_object_get(r->json, "feature_names"));
    resp_free(r);
}

static int setup(void **state)
{
    (void)state;
    if (srv_start(&server, NULL, NULL))
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_upload_doc_examples),
        cmocka_unit_test(test_learned_bpe_json_body_refused_urls),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_tabular_unchanged),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
