/*
 * test_dataset_text_csv.c - text classification CSVs (text_csv.c,
 * ds_convert_csv_text): each row's text cell tokenized on its own (byte
 * tokenizer, a BPE learned from the column, a tokenizer.json), truncated to
 * max_length and padded with -1; an empty cell a row of padding; the meta
 * the engine and the API read; the errors naming their line and column or
 * field, with no output left; and the "tokens" preprocess leaving the ids as
 * they are.
 */
#include "ds_testutil.h"

#include "models/data/tokenizer.h"
#include "models/nn_internal.h"

#define IN_PATH dt_path(0, "in.csv")
#define OUT_PATH dt_path(1, "out.tyds")

static void expect_no_output(void)
{
    assert_int_equal(access(OUT_PATH, F_OK), -1);
}

/* Row i's values as ints (ids, -1 padding), asserting they are whole. */
static void row_ids(const ty_dataset *ds, uint32_t i, int *out)
{
    const float *x = (const float *)ds->x + (size_t)i * ds->features;
    for (uint64_t j = 0; j < ds->features; j++) {
        assert_true(x[j] == (float)(int)x[j]);
        out[j] = (int)x[j];
    }
}

static void convert_ok(const char *csv, const ty_tokenizer_request *req,
                       uint32_t max_length, ty_dataset *ds)
{
    ty_err err = {0};
    dt_write_str(IN_PATH, csv);
    ty_status st = ds_convert_csv_text(IN_PATH, "label", "text", req,
                                       max_length, 0, OUT_PATH, &err);
    if (st != TY_OK)
        fail_msg("conversion failed: %s (field %s)", err.msg, err.field);
    assert_int_equal(ty_dataset_open(OUT_PATH, ds, &err), TY_OK);
}

static void test_byte_truncation_padding(void **state)
{
    (void)state;
    ty_dataset ds;
    /* other columns are ignored; a quoted cell keeps its comma and line
     * break; an empty cell is all padding */
    convert_ok("id,text,label,other\n"
               "1,hi,pos,x\n"
               "2,\"a,\nb\",neg,y\n"
               "3,,pos,\n"
               "4,abcdefgh,neg,z\n",
               NULL, 5, &ds);
    assert_int_equal(ds.task, TY_TASK_CLASSIFICATION);
    assert_int_equal(ds.num_examples, 4);
    assert_int_equal(ds.features, 5);
    dt_assert_json(json_object_get(ds.meta, "input_shape"), "[5]");
    assert_string_equal(dt_meta_str(&ds, "preprocess"), "tokens");
    assert_string_equal(dt_meta_str(&ds, "format"), "csv");
    assert_string_equal(dt_meta_str(&ds, "text_column"), "text");
    assert_string_equal(dt_meta_str(&ds, "label_column"), "label");
    dt_assert_json(json_object_get(ds.meta, "tokenizer"), "\"byte\"");
    assert_int_equal(dt_meta_int(&ds, "vocab_size"), 256);
    assert_int_equal(dt_meta_int(&ds, "max_length"), 5);
    assert_int_equal(dt_meta_int(&ds, "num_tokens"), 2 + 4 + 0 + 8);
    assert_int_equal(dt_meta_int(&ds, "truncated_examples"), 1);
    dt_assert_json(json_object_get(ds.meta, "classes"), "[\"neg\",\"pos\"]");
    assert_null(json_object_get(ds.meta, "columns"));
    int ids[5];
    static const int want[4][5] = {{'h', 'i', -1, -1, -1},
                                   {'a', ',', '\n', 'b', -1},
                                   {-1, -1, -1, -1, -1},
                                   {'a', 'b', 'c', 'd', 'e'}};
    static const int want_y[4] = {1, 0, 1, 0};
    for (uint32_t i = 0; i < 4; i++) {
        row_ids(&ds, i, ids);
        assert_memory_equal(ids, want[i], sizeof ids);
        assert_int_equal(ds.y_class[i], want_y[i]);
    }

    /* the "tokens" preprocess: ids (and padding) reach the net unchanged */
    nn_preproc pp;
    ty_err err = {0};
    assert_int_equal(nn_preproc_fit(&pp, "tokens", &ds, NULL, 4, &err), TY_OK);
    float got[4 * 5];
    nn_preproc_gather(&pp, got, &ds, NULL, 0, 4);
    assert_memory_equal(got, ds.x, sizeof got);
    nn_preproc_free(&pp);
    ty_dataset_close(&ds);
    unlink(OUT_PATH);
}

/* Every id of row i decoded with the meta's tokenizer is text. */
static void expect_row_text(const ty_dataset *ds, uint32_t i, const char *text)
{
    ty_tokenizer *tok = NULL;
    ty_err err = {0};
    assert_int_equal(
        ty_tokenizer_load(json_object_get(ds->meta, "tokenizer"), &tok, &err),
        TY_OK);
    int ids[64];
    uint32_t u[64];
    size_t n = 0;
    assert_true(ds->features <= 64);
    row_ids(ds, i, ids);
    while (n < ds->features && ids[n] >= 0) {
        u[n] = (uint32_t)ids[n];
        n++;
    }
    char *out = NULL;
    size_t len = 0;
    assert_int_equal(ty_tokenizer_decode(tok, u, n, &out, &len, &err), TY_OK);
    assert_int_equal(len, strlen(text));
    assert_memory_equal(out, text, len);
    free(out);
    ty_tokenizer_free(tok);
}

static void test_bpe_learned_from_column(void **state)
{
    (void)state;
    ty_tokenizer_request req = {0};
    ty_err err = {0};
    assert_int_equal(ty_tokenizer_request_parse_text(
                         "{\"type\": \"bpe\", \"vocab_size\": 300}", 34,
                         "tokenizer", &req, &err),
                     TY_OK);
    ty_dataset ds;
    /* the label column's words ("spam") must not be learned: only the
     * text column's cells are the BPE's corpus */
    convert_ok("label,text\n"
               "spam,the cat the cat\n"
               "ham,the cat sat\n"
               "spam,the the the\n"
               "ham,\n",
               &req, 16, &ds);
    const json_t *tok = json_object_get(ds.meta, "tokenizer");
    assert_string_equal(json_string_value(json_object_get(tok, "type")), "bpe");
    long long vocab = dt_meta_int(&ds, "vocab_size");
    assert_true(vocab > 256 && vocab <= 300);
    /* "the" is the commonest word: learned, so row 2 is fewer ids than
     * bytes */
    assert_true(dt_meta_int(&ds, "num_tokens") < 15 + 11 + 11);
    assert_int_equal(dt_meta_int(&ds, "truncated_examples"), 0);
    expect_row_text(&ds, 0, "the cat the cat");
    expect_row_text(&ds, 2, "the the the");
    expect_row_text(&ds, 3, "");
    int ids[16];
    row_ids(&ds, 2, ids);
    assert_true(ids[0] >= 256); /* "the" is one id */
    ty_dataset_close(&ds);
    ty_tokenizer_request_free(&req);
    unlink(OUT_PATH);
}

/* A tokenizer.json: 256 byte symbols, "he" = 256 by merge "h e". */
static void test_tokenizer_json(void **state)
{
    (void)state;
    static const char json[] =
        "{\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": "
        "false}, \"model\": {\"type\": \"BPE\", \"vocab\": {%s\"he\": 256}, "
        "\"merges\": [\"h e\"]}}";
    /* the vocabulary: GPT-2's printable byte symbols; the others by
     * bytes_to_unicode's order */
    char vocab[8192] = "";
    size_t used = 0;
    unsigned next = 256;
    for (unsigned b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) ||
                        (b >= 0xAE && b <= 0xFF);
        unsigned cp = printable ? b : next++;
        char sym[8];
        if (cp == '"' || cp == '\\')
            snprintf(sym, sizeof sym, "\\%c", (char)cp);
        else if (cp < 0x80)
            snprintf(sym, sizeof sym, "%c", (char)cp);
        else
            snprintf(sym, sizeof sym, "%c%c", (char)(0xC0 | cp >> 6),
                     (char)(0x80 | (cp & 0x3F)));
        used += (size_t)snprintf(vocab + used, sizeof vocab - used,
                                 "\"%s\": %u, ", sym, b);
    }
    char *text = malloc(sizeof json + used);
    assert_non_null(text);
    int len = snprintf(text, sizeof json + used, json, vocab);
    ty_tokenizer_request req = {0};
    ty_err err = {0};
    if (ty_tokenizer_request_parse_text(text, (size_t)len, "tokenizer", &req,
                                        &err) != TY_OK)
        fail_msg("tokenizer.json: %s", err.msg);
    free(text);
    ty_dataset ds;
    convert_ok("text,label\nhehe,1\nhe he,0\n", &req, 3, &ds);
    assert_int_equal(dt_meta_int(&ds, "vocab_size"), 257);
    int ids[3];
    row_ids(&ds, 0, ids);
    static const int want0[3] = {256, 256, -1};
    assert_memory_equal(ids, want0, sizeof ids);
    row_ids(&ds, 1, ids);
    static const int want1[3] = {256, ' ', 256}; /* "he", " he": Ġ, he */
    assert_memory_equal(ids, want1, sizeof ids);
    assert_int_equal(dt_meta_int(&ds, "truncated_examples"), 0);
    dt_assert_json(json_object_get(ds.meta, "classes"), "[0,1]");
    assert_int_equal(ds.y_class[0], 1);
    ty_dataset_close(&ds);
    ty_tokenizer_request_free(&req);
    unlink(OUT_PATH);
}

static void expect_error(const char *csv, const char *label, const char *text,
                         uint32_t max_length, ty_status want_st,
                         const char *field, const char *needle)
{
    ty_err err = {0};
    dt_write_str(IN_PATH, csv);
    ty_status st = ds_convert_csv_text(IN_PATH, label, text, NULL, max_length,
                                       0, OUT_PATH, &err);
    if (st != want_st)
        fail_msg("status %d, want %d (%s)", st, want_st, err.msg);
    assert_string_equal(err.field, field);
    dt_assert_contains(err.msg, needle);
    expect_no_output();
}

static void test_errors(void **state)
{
    (void)state;
    const char *ok = "text,label\nhello,a\n";
    expect_error(ok, "label", "body", 8, TY_EFORMAT, "text_column",
                 "text column \"body\" is not in the header");
    expect_error(ok, "label", "body", 8, TY_EFORMAT, "text_column",
                 "columns: text, label");
    expect_error(ok, "y", "text", 8, TY_EFORMAT, "label_column",
                 "label column \"y\"");
    expect_error(ok, "label", "label", 8, TY_EINVAL, "text_column",
                 "same column");
    expect_error(ok, "label", "text", 0, TY_EINVAL, "max_length",
                 "from 1 to 8192");
    expect_error(ok, "label", "text", TY_DS_TEXT_MAX_LENGTH + 1, TY_EINVAL,
                 "max_length", "from 1 to 8192");
    /* invalid UTF-8 in a cell: its line and column (and byte in the cell) */
    expect_error("label,other,text\na,x,fine\nb,y,ok \xc3(\n", "label", "text",
                 8, TY_EFORMAT, "file",
                 "line 3, column 3: the text is not valid UTF-8");
    expect_error("label,other,text\na,x,fine\nb,y,ok \xc3(\n", "label", "text",
                 8, TY_EFORMAT, "file", "at byte 4 of the cell");
    /* a quoted cell over two lines: the next record's line is right */
    expect_error("text,label\n\"two\nlines\",a\nx\n", "label", "text", 8,
                 TY_EFORMAT, "file", "line 4 has 1 column but the header");
    expect_error("text,label\nhi,\n", "label", "text", 8, TY_EFORMAT, "file",
                 "line 2, column 2 (\"label\"): the label is empty");
    expect_error("text,label\n", "label", "text", 8, TY_EFORMAT, "file",
                 "no data rows");
    expect_error("", "label", "text", 8, TY_EFORMAT, "file", "empty");
}

/* The same text column read with DS_CONVERT_NO_ECHO quotes no column name. */
static void test_no_echo(void **state)
{
    (void)state;
    ty_err err = {0};
    dt_write_str(IN_PATH, "secret_col,label\nx,a\n");
    assert_int_equal(ds_convert_csv_text(IN_PATH, "label", "text", NULL, 8,
                                         DS_CONVERT_NO_ECHO, OUT_PATH, &err),
                     TY_EFORMAT);
    assert_string_equal(err.field, "text_column");
    assert_null(strstr(err.msg, "secret_col"));
    expect_no_output();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_byte_truncation_padding),
        cmocka_unit_test(test_bpe_learned_from_column),
        cmocka_unit_test(test_tokenizer_json),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_no_echo),
    };
    return cmocka_run_group_tests(tests, tu_tmpdir_setup, tu_tmpdir_teardown);
}
