/*
 * Integration tests for the text upload's tokenizers (issue 31) through a
 * live server: a byte-level BPE learned from the upload (form field JSON),
 * a Hugging Face tokenizer.json sent as a file part (a small one built here:
 * the 256 byte symbols, five merges, an added <|endoftext|>), the document
 * (tokenizer, tokenizer_info, vocabulary, the sample decoded), the examples
 * endpoint's windows decoded back to the text, and the refusals (a merge
 * naming a token the vocab lacks, a WordPiece model, a normalizer, a
 * tokenizer that is not JSON, a tokenizer on a tokens dataset, a bad
 * vocab_size): 422 naming the field, nothing stored.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static srv server;
static char files[PATH_MAX];

static char *file_path(const char *name)
{
    static char p[4][PATH_MAX];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], PATH_MAX, "%s/%s", files, name);
    return p[k];
}

static size_t dataset_count(void)
{
    resp *r = http_get(&server, "/v1/datasets?limit=1000");
    assert_int_equal(r->status, 200);
    size_t n = json_array_size(json_object_get(r->json, "items"));
    resp_free(r);
    return n;
}

/* GPT-2's bytes_to_unicode: the code point byte b stands for. */
static unsigned byte_char(unsigned b)
{
    int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) ||
                    (b >= 0xAE && b <= 0xFF);
    if (printable)
        return b;
    unsigned k = 0;
    for (unsigned x = 0; x < b; x++)
        k += !((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) ||
               (x >= 0xAE && x <= 0xFF));
    return 256 + k;
}

static void utf8(unsigned cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = '\0';
    } else {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        out[2] = '\0';
    }
}

/* A byte-level BPE tokenizer.json: ids 0-255 the bytes, then "he" 256,
 * "ll" 257, "hell" 258, "hello" 259, "Ġw" 260; <|endoftext|> 261. */
static json_t *small_tokenizer(void)
{
    json_t *vocab = json_object();
    for (unsigned b = 0; b < 256; b++) {
        char k[4];
        utf8(byte_char(b), k);
        json_object_set_new(vocab, k, json_integer(b));
    }
    const char *extra[] = {"he", "ll", "hell", "hello", "\xc4\xa0w"};
    for (int i = 0; i < 5; i++)
        json_object_set_new(vocab, extra[i], json_integer(256 + i));
    json_t *tj = json_pack(
        "{s:s, s:n, s:n, s:n, s:[{s:i, s:s, s:b, s:b, s:b, s:b, s:b}],"
        " s:{s:s, s:b, s:b, s:b}, s:{s:s}, s:{s:s, s:n, s:n, s:o,"
        " s:[[s,s], [s,s], [s,s], [s,s], [s,s]]}}",
        "version", "1.0", "truncation", "padding", "normalizer", "added_tokens",
        "id", 261, "content", "<|endoftext|>", "single_word", 0, "lstrip", 0,
        "rstrip", 0, "normalized", 1, "special", 1, "pre_tokenizer", "type",
        "ByteLevel", "add_prefix_space", 0, "trim_offsets", 1, "use_regex", 1,
        "decoder", "type", "ByteLevel", "model", "type", "BPE", "dropout",
        "unk_token", "vocab", vocab, "merges", "h", "e", "l", "l", "he", "ll",
        "hell", "o", "\xc4\xa0", "w");
    assert_non_null(tj);
    return tj;
}

static void write_json(const char *path, const json_t *j)
{
    char *s = json_dumps(j, JSON_COMPACT);
    write_file(path, s, strlen(s));
    free(s);
}

static json_t *upload_ok(const char *const *parts)
{
    resp *r = http_upload(&server, "/v1/datasets", parts);
    expect_status(r, 201);
    json_t *doc = json_incref(r->json);
    resp_free(r);
    return doc;
}

/* The text of the dataset's first window of length tokens. */
static char *window_text(const char *id, size_t length, json_t **ids)
{
    char path[256];
    snprintf(path, sizeof path, "/v1/datasets/%s/examples?limit=1&length=%zu",
             id, length);
    resp *r = http_get(&server, path);
    expect_status(r, 200);
    json_t *w = json_array_get(json_object_get(r->json, "items"), 0);
    assert_non_null(w);
    char *text = strdup(str(w, "text"));
    if (ids)
        *ids = json_incref(json_object_get(w, "ids"));
    resp_free(r);
    return text;
}

#define HF_TEXT "hello world<|endoftext|>hello"

static void test_tokenizer_json_file_part(void **state)
{
    (void)state;
    char tpart[PATH_MAX + 16], fpart[PATH_MAX + 16];
    json_t *tj = small_tokenizer();
    write_json(file_path("tokenizer.json"), tj);
    json_decref(tj);
    write_file(file_path("hf.txt"), HF_TEXT, strlen(HF_TEXT));
    snprintf(tpart, sizeof tpart, "tokenizer=@%s", file_path("tokenizer.json"));
    snprintf(fpart, sizeof fpart, "file=@%s", file_path("hf.txt"));
    const char *parts[] = {"name=hf", "format=text", tpart, fpart, NULL};
    json_t *doc = upload_ok(parts);
    assert_string_equal(str(doc, "tokenizer"), "huggingface");
    json_t *info = json_object_get(doc, "tokenizer_info");
    assert_string_equal(str(info, "type"), "huggingface");
    assert_int_equal(json_integer_value(json_object_get(info, "vocab_size")),
                     262);
    assert_int_equal(json_integer_value(json_object_get(doc, "vocab_size")),
                     262);
    assert_int_equal(json_integer_value(json_object_get(doc, "num_tokens")), 8);
    assert_string_equal(str(json_object_get(doc, "sample"), "text"), HF_TEXT);
    /* the ids the tokenizers library gives this text */
    json_t *ids = NULL;
    char *text = window_text(str(doc, "id"), 64, &ids);
    assert_string_equal(text, HF_TEXT);
    const int want[] = {259, 260, 111, 114, 108, 100, 261, 259};
    assert_int_equal(json_array_size(ids), 8);
    for (size_t i = 0; i < 8; i++)
        assert_int_equal(json_integer_value(json_array_get(ids, i)), want[i]);
    free(text);
    json_decref(ids);
    json_decref(doc);
}

static void test_learned_bpe(void **state)
{
    (void)state;
    char fpart[PATH_MAX + 16];
    /* a text with repeats to merge, and characters of several bytes */
    size_t cap = 1 << 16, n = 0;
    char *txt = malloc(cap);
    assert_non_null(txt);
    for (int i = 0; n + 64 < cap; i++)
        n += (size_t)snprintf(txt + n, cap - n,
                              "%s the quick fox %d said "
                              "h\xc3\xa9llo w\xc3\xb6rld.\n",
                              i % 3 ? "It's" : "ROMEO:", i % 17);
    write_file(file_path("learn.txt"), txt, n);
    snprintf(fpart, sizeof fpart, "file=@%s", file_path("learn.txt"));
    const char *parts[] = {"name=learned", "format=text",
                           "tokenizer={\"type\": \"bpe\", \"vocab_size\": 300}",
                           fpart, NULL};
    json_t *doc = upload_ok(parts);
    assert_string_equal(str(doc, "tokenizer"), "bpe");
    json_int_t vocab = json_integer_value(json_object_get(doc, "vocab_size"));
    json_int_t tokens = json_integer_value(json_object_get(doc, "num_tokens"));
    assert_true(vocab > 256 && vocab <= 300);
    assert_true(tokens > 0 && (size_t)tokens < n / 2); /* it merged */
    /* the windows, one after the other, decode to the text uploaded */
    assert_true(tokens <= 64 * 4096);
    size_t at = 0;
    for (json_int_t k = 0; k * 4096 < tokens; k += 64) {
        char path[256];
        snprintf(path, sizeof path,
                 "/v1/datasets/%s/examples?offset=%lld&limit=64&length=4096",
                 str(doc, "id"), (long long)k);
        resp *r = http_get(&server, path);
        expect_status(r, 200);
        json_t *items = json_object_get(r->json, "items"), *w;
        size_t i;
        json_array_foreach (items, i, w) {
            const char *t = str(w, "text");
            assert_true(at + strlen(t) <= n);
            assert_memory_equal(t, txt + at, strlen(t));
            at += strlen(t);
        }
        resp_free(r);
    }
    assert_int_equal(at, n);
    free(txt);
    json_decref(doc);
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

static void refused_tokenizer(json_t *tj, const char *field, const char *needle)
{
    char tpart[PATH_MAX + 16], fpart[PATH_MAX + 16];
    write_json(file_path("bad.json"), tj);
    json_decref(tj);
    snprintf(tpart, sizeof tpart, "tokenizer=@%s", file_path("bad.json"));
    snprintf(fpart, sizeof fpart, "file=@%s", file_path("hf.txt"));
    const char *parts[] = {"name=bad", "format=text", tpart, fpart, NULL};
    expect_refused(parts, field, needle);
}

static void test_refusals(void **state)
{
    (void)state;
    write_file(file_path("hf.txt"), HF_TEXT, strlen(HF_TEXT));
    json_t *tj = small_tokenizer();
    json_t *merges = json_object_get(json_object_get(tj, "model"), "merges");
    json_array_set_new(merges, 1, json_pack("[s, s]", "l", "zz"));
    refused_tokenizer(tj, "tokenizer.model.merges[1]", "not in model.vocab");

    tj = small_tokenizer();
    json_object_set_new(json_object_get(tj, "model"), "type",
                        json_string("WordPiece"));
    refused_tokenizer(tj, "tokenizer.model.type", "WordPiece is not supported");

    tj = small_tokenizer();
    json_object_set_new(tj, "normalizer", json_pack("{s:s}", "type", "NFKC"));
    refused_tokenizer(tj, "tokenizer.normalizer.type", "not supported");

    tj = small_tokenizer();
    json_object_set_new(json_array_get(json_object_get(tj, "added_tokens"), 0),
                        "id", json_integer(7));
    refused_tokenizer(tj, "tokenizer.added_tokens[0].id", "gives it id 261");

    char fpart[PATH_MAX + 16];
    snprintf(fpart, sizeof fpart, "file=@%s", file_path("hf.txt"));
    const char *notjson[] = {"name=bad", "format=text", "tokenizer=bpe-ish",
                             fpart, NULL};
    expect_refused(notjson, "tokenizer", "neither \"byte\" nor JSON");
    const char *big[] = {"name=bad", "format=text",
                         "tokenizer={\"type\": \"bpe\", \"vocab_size\": 70000}",
                         fpart, NULL};
    expect_refused(big, "tokenizer.vocab_size", "from 257 to 65536");
    const char *kind[] = {"name=bad", "format=text",
                          "tokenizer={\"type\": \"sentencepiece\"}", fpart,
                          NULL};
    expect_refused(kind, "tokenizer.type", "must be");
    const char *tokens[] = {"name=bad",       "format=tokens", "vocab_size=10",
                            "tokenizer=byte", fpart,           NULL};
    expect_refused(tokens, "tokenizer", "text datasets only");
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
        cmocka_unit_test(test_tokenizer_json_file_part),
        cmocka_unit_test(test_learned_bpe),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
