/*
 * test_tokenizer.c - the tokenizers (models/data/tokenizer.h): the byte
 * tokenizer; a BPE learned from a text (decode(encode(x)) == x on random
 * UTF-8, the merges the same every time, ties to the smaller pair, learning
 * stopping when no pair repeats, the description loading back); a small
 * tokenizer.json (merges, an added token, add_prefix_space, ids past 65536
 * in a vocab with gaps); the same ids whole and cut by ty_tokenizer_cut;
 * the refusals naming their fields; and ds_convert_text_tok writing a token
 * dataset (uint16, and uint32 past 65536 ids) that decodes back to the file.
 * The tokenizers library's own encodings are checked in
 * tests/parity/tokenizer_hf.py.
 */
#include "ds_testutil.h"

#include "models/data/input.h"
#include "models/data/tokenizer.h"

#define IN_PATH dt_path(0, "in.txt")
#define OUT_PATH dt_path(1, "out.tyds")

static json_t *parse(const char *text)
{
    json_t *j = json_loads(text, JSON_DECODE_ANY, NULL);
    assert_non_null(j);
    return j;
}

static ty_tokenizer *load(const char *text)
{
    json_t *j = parse(text);
    ty_tokenizer *t = NULL;
    ty_err err = {0};
    ty_status st = ty_tokenizer_load(j, &t, &err);
    if (st != TY_OK)
        fprintf(stderr, "%s: %s\n", err.field, err.msg);
    assert_int_equal(st, TY_OK);
    json_decref(j);
    return t;
}

static void expect_load_error(const char *text, const char *field,
                              const char *needle)
{
    json_t *j = parse(text);
    ty_tokenizer_request req;
    ty_err err = {0};
    assert_int_equal(ty_tokenizer_request_parse(j, "tokenizer", &req, &err),
                     TY_EINVAL);
    assert_string_equal(err.field, field);
    dt_assert_contains(err.msg, needle);
    assert_null(req.tok);
    json_decref(j);
}

/* ids of text, asserting success. */
static size_t encode(ty_tokenizer *t, const char *text, size_t len,
                     uint32_t **ids)
{
    size_t n = 0;
    ty_err err = {0};
    *ids = NULL;
    assert_int_equal(ty_tokenizer_encode(t, text, len, ids, &n, &err), TY_OK);
    return n;
}

static void assert_round_trip(ty_tokenizer *t, const char *text, size_t len)
{
    uint32_t *ids;
    size_t n = encode(t, text, len, &ids);
    char *back = NULL;
    size_t blen = 0;
    ty_err err = {0};
    for (size_t i = 0; i < n; i++)
        assert_true(ids[i] < ty_tokenizer_vocab_size(t));
    assert_int_equal(ty_tokenizer_decode(t, ids, n, &back, &blen, &err), TY_OK);
    assert_int_equal(blen, len);
    assert_memory_equal(back, text, len);
    free(back);
    free(ids);
}

/* The ids of text encoded in the pieces ty_tokenizer_cut makes equal the
 * ids of the whole. */
static void assert_cut_equal(ty_tokenizer *t, const char *text, size_t len)
{
    uint32_t *whole, *parts = NULL;
    size_t n = encode(t, text, len, &whole), np = 0, done = 0, pieces = 0;
    ty_err err = {0};
    while (done < len) {
        /* cut often: at most 200 bytes a piece */
        size_t lim = len - done < 200 ? len - done : 200;
        size_t c = lim < len - done ? ty_tokenizer_cut(t, text + done, lim) : 0;
        size_t take = c ? c : (lim < len - done ? lim : len - done);
        if (!c && lim < len - done) { /* no cut in 200 bytes: read on */
            take = ty_tokenizer_cut(t, text + done, len - done);
            if (!take)
                take = len - done;
        }
        ty_status st =
            done ? ty_tokenizer_encode_more(t, text + done, take, &parts, &np,
                                            &err)
                 : ty_tokenizer_encode(t, text, take, &parts, &np, &err);
        assert_int_equal(st, TY_OK);
        done += take;
        pieces++;
    }
    assert_true(pieces > 1);
    assert_int_equal(np, n);
    assert_memory_equal(parts, whole, n * sizeof *whole);
    free(whole);
    free(parts);
}

/* Random UTF-8: words, white space, digits, punctuation and characters of
 * 2, 3 and 4 bytes. */
static size_t random_text(char *out, size_t cap, uint64_t seed)
{
    static const char *const words[] = {"the",
                                        "quick",
                                        "fox",
                                        "it's",
                                        "we'll",
                                        "ROMEO",
                                        "h\xc3\xa9llo",
                                        "\xe4\xbd\xa0\xe5\xa5\xbd",
                                        "\xf0\x9f\x98\x80",
                                        "123",
                                        "4.5",
                                        "--",
                                        "  ",
                                        "\n",
                                        "\t",
                                        "\xe3\x80\x80",
                                        " ",
                                        " ",
                                        " "};
    uint64_t x = seed * 2654435761u + 1;
    size_t n = 0;
    while (n + 8 < cap) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        unsigned r = (unsigned)(x >> 33);
        if (r % 7 == 0) { /* any code point */
            uint32_t cp = r % 5 ? 0x20 + r % 0x7FF : 0x10000 + r % 0xFFFF;
            if (cp < 0x80) {
                out[n++] = (char)cp;
            } else if (cp < 0x800) {
                out[n++] = (char)(0xC0 | cp >> 6);
                out[n++] = (char)(0x80 | (cp & 0x3F));
            } else if (cp < 0x10000) {
                out[n++] = (char)(0xE0 | cp >> 12);
                out[n++] = (char)(0x80 | (cp >> 6 & 0x3F));
                out[n++] = (char)(0x80 | (cp & 0x3F));
            } else {
                out[n++] = (char)(0xF0 | cp >> 18);
                out[n++] = (char)(0x80 | (cp >> 12 & 0x3F));
                out[n++] = (char)(0x80 | (cp >> 6 & 0x3F));
                out[n++] = (char)(0x80 | (cp & 0x3F));
            }
            continue;
        }
        const char *w = words[r % TY_ARRAY_LEN(words)];
        size_t len = strlen(w);
        if (n + len >= cap)
            break;
        memcpy(out + n, w, len);
        n += len;
    }
    return n;
}

/* ---- byte ----------------------------------------------------------------- */

static void test_byte(void **state)
{
    (void)state;
    ty_tokenizer *a = load("\"byte\""), *b = load("{\"type\": \"byte\"}");
    uint32_t *ids;
    assert_int_equal(ty_tokenizer_vocab_size(a), 256);
    assert_int_equal(encode(b, "h\xc3\xa9", 3, &ids), 3);
    assert_int_equal(ids[0], 'h');
    assert_int_equal(ids[1], 0xC3);
    assert_int_equal(ids[2], 0xA9);
    free(ids);
    assert_round_trip(a, "any text\n\xf0\x9f\x98\x80", 13);
    /* the stored form stays the legacy string */
    assert_string_equal(json_string_value(ty_tokenizer_description(a)), "byte");
    uint32_t bad[] = {1, 256};
    char *out = NULL;
    size_t len;
    ty_err err = {0};
    assert_int_equal(ty_tokenizer_decode(a, bad, 2, &out, &len, &err),
                     TY_EINVAL);
    assert_string_equal(err.field, "ids[1]");
    dt_assert_contains(err.msg, "id 256 (at position 1)");
    assert_null(out);
    /* not UTF-8: refused naming the offset */
    size_t n = 0;
    ids = NULL;
    assert_int_equal(ty_tokenizer_encode(a, "ab\xff", 3, &ids, &n, &err),
                     TY_EINVAL);
    assert_string_equal(err.field, "text");
    dt_assert_contains(err.msg, "byte offset 2");
    free(ids);
    ty_tokenizer_free(a);
    ty_tokenizer_free(b);
}

/* ---- learned BPE -------------------------------------------------------------- */

static void test_learn_round_trips(void **state)
{
    (void)state;
    static char text[1 << 16];
    for (uint64_t seed = 1; seed <= 6; seed++) {
        size_t n = random_text(text, sizeof text, seed);
        ty_tokenizer *t = NULL;
        ty_err err = {0};
        assert_int_equal(ty_tokenizer_learn(600, text, n, &t, &err), TY_OK);
        assert_true(ty_tokenizer_vocab_size(t) > 256);
        assert_true(ty_tokenizer_vocab_size(t) <= 600);
        assert_round_trip(t, text, n);
        /* another text, made of the same pieces, round-trips too */
        size_t m = random_text(text, 5000, seed + 100);
        assert_round_trip(t, text, m);
        assert_cut_equal(t, text, m);
        /* the description loads back to the same encoding */
        ty_tokenizer *again = NULL;
        assert_int_equal(
            ty_tokenizer_load(ty_tokenizer_description(t), &again, &err),
            TY_OK);
        uint32_t *x, *y;
        size_t nx = encode(t, text, m, &x), ny = encode(again, text, m, &y);
        assert_int_equal(nx, ny);
        assert_memory_equal(x, y, nx * sizeof *x);
        assert_true(nx < m); /* it merged */
        free(x);
        free(y);
        ty_tokenizer_free(again);
        ty_tokenizer_free(t);
    }
}

static void test_learn_deterministic(void **state)
{
    (void)state;
    static char text[1 << 15];
    size_t n = random_text(text, sizeof text, 42);
    ty_tokenizer *a, *b;
    ty_err err = {0};
    assert_int_equal(ty_tokenizer_learn(1000, text, n, &a, &err), TY_OK);
    assert_int_equal(ty_tokenizer_learn(1000, text, n, &b, &err), TY_OK);
    assert_true(
        json_equal(ty_tokenizer_description(a), ty_tokenizer_description(b)));
    ty_tokenizer_free(a);
    ty_tokenizer_free(b);

    /* ties go to the smaller pair; learning stops when nothing repeats:
     * the words "ab", "ab", "cd", "cd" count (a,b) and (c,d) twice each */
    ty_tokenizer *t;
    assert_int_equal(ty_tokenizer_learn(300, "cd\nab\ncd\nab", 11, &t, &err),
                     TY_OK);
    json_t *want = parse("{\"type\": \"bpe\", \"vocab_size\": 258, "
                         "\"merges\": [[97, 98], [99, 100]]}");
    assert_true(json_equal(ty_tokenizer_description(t), want));
    json_t *sum = ty_tokenizer_describe(t);
    assert_int_equal(json_integer_value(json_object_get(sum, "merges")), 2);
    assert_string_equal(json_string_value(json_object_get(sum, "type")), "bpe");
    json_decref(sum);
    json_decref(want);
    uint32_t *ids;
    assert_int_equal(encode(t, "ab cd", 5, &ids), 3); /* ab; ' ', cd */
    assert_int_equal(ids[0], 256);
    assert_int_equal(ids[1], ' ');
    assert_int_equal(ids[2], 257);
    free(ids);
    ty_tokenizer_free(t);
    /* " cd" twice makes (' ', c) a third pair of count 2, the smallest */
    assert_int_equal(ty_tokenizer_learn(300, "ab ab cd cd", 11, &t, &err),
                     TY_OK);
    want = parse("{\"type\": \"bpe\", \"vocab_size\": 259, "
                 "\"merges\": [[32, 99], [97, 98], [256, 100]]}");
    assert_true(json_equal(ty_tokenizer_description(t), want));
    json_decref(want);
    assert_int_equal(encode(t, "ab cd", 5, &ids), 2); /* ab; " cd" */
    assert_int_equal(ids[0], 257);
    assert_int_equal(ids[1], 258);
    free(ids);
    ty_tokenizer_free(t);
}

/* ---- tokenizer.json -------------------------------------------------------- */

/* GPT-2's bytes_to_unicode as UTF-8. */
static void byte_char(unsigned b, char out[4])
{
#define PRINTABLE(x)                                               \
    (((x) >= '!' && (x) <= '~') || ((x) >= 0xA1 && (x) <= 0xAC) || \
     ((x) >= 0xAE && (x) <= 0xFF))
    unsigned cp = b;
    if (!PRINTABLE(b)) {
        cp = 256;
        for (unsigned x = 0; x < b; x++)
            cp += !PRINTABLE(x);
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = '\0';
    } else {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        out[2] = '\0';
    }
}

/* The 256 byte symbols (id = byte), "he" at he_id, merge "h e", and an
 * added <|endoftext|>. */
static json_t *hf_json(int add_prefix_space, unsigned he_id)
{
    json_t *vocab = json_object();
    for (unsigned b = 0; b < 256; b++) {
        char k[4];
        byte_char(b, k);
        json_object_set_new(vocab, k, json_integer(b));
    }
    json_object_set_new(vocab, "he", json_integer(he_id));
    json_t *tj = json_pack(
        "{s:{s:s, s:b}, s:[{s:i, s:s, s:b}], s:{s:s, s:o, s:[s]}}",
        "pre_tokenizer", "type", "ByteLevel", "add_prefix_space",
        add_prefix_space, "added_tokens", "id", 257, "content", "<|endoftext|>",
        "special", 1, "model", "type", "BPE", "vocab", vocab, "merges", "h e");
    assert_non_null(tj);
    return tj;
}

static void test_tokenizer_json(void **state)
{
    (void)state;
    json_t *tj = hf_json(1, 256);
    ty_tokenizer *t = NULL;
    ty_err err = {0};
    assert_int_equal(ty_tokenizer_load(tj, &t, &err), TY_OK);
    assert_int_equal(ty_tokenizer_vocab_size(t), 258);
    uint32_t *ids;
    /* add_prefix_space: " he" -> Ġ, he; each piece after an added token
     * gets its space too */
    size_t n = encode(t, "he<|endoftext|>he", 17, &ids);
    uint32_t want[] = {' ', 256, 257, ' ', 256};
    assert_int_equal(n, 5);
    assert_memory_equal(ids, want, sizeof want);
    free(ids);
    json_t *sum = ty_tokenizer_describe(t);
    assert_string_equal(json_string_value(json_object_get(sum, "type")),
                        "huggingface");
    assert_true(json_is_true(json_object_get(sum, "add_prefix_space")));
    json_decref(sum);
    /* the stored description loads back */
    ty_tokenizer *again = NULL;
    assert_int_equal(
        ty_tokenizer_load(ty_tokenizer_description(t), &again, &err), TY_OK);
    assert_int_equal(ty_tokenizer_vocab_size(again), 258);
    ty_tokenizer_free(again);
    ty_tokenizer_free(t);
    json_decref(tj);

    /* ids past 65536, a vocab with gaps: the gap ids decode to nothing */
    tj = hf_json(0, 70000);
    json_object_set_new(json_array_get(json_object_get(tj, "added_tokens"), 0),
                        "id", json_integer(257));
    assert_int_equal(ty_tokenizer_load(tj, &t, &err), TY_OK);
    assert_int_equal(ty_tokenizer_vocab_size(t), 70001);
    n = encode(t, "hehe", 4, &ids);
    assert_int_equal(n, 2); /* one word: h e h e -> he he */
    assert_int_equal(ids[0], 70000);
    free(ids);
    n = encode(t, "he he", 5, &ids);
    assert_int_equal(n, 3); /* "he", " he": he, then Ġ h e -> Ġ, he */
    free(ids);
    uint32_t gap[] = {300};
    char *out = NULL;
    size_t len;
    assert_int_equal(ty_tokenizer_decode(t, gap, 1, &out, &len, &err),
                     TY_EINVAL);
    dt_assert_contains(err.msg, "no token");
    ty_tokenizer_free(t);
    json_decref(tj);
}

static void test_cut_matches_whole(void **state)
{
    (void)state;
    static char text[1 << 14];
    json_t *tj = hf_json(1, 256);
    ty_tokenizer *hf = NULL;
    ty_err err = {0};
    assert_int_equal(ty_tokenizer_load(tj, &hf, &err), TY_OK);
    json_decref(tj);
    for (uint64_t seed = 1; seed <= 4; seed++) {
        size_t n = random_text(text, sizeof text, seed);
        /* an added token now and then, cuts never near it */
        for (size_t i = 997; i + 13 < n; i += 1499)
            memcpy(text + i, "<|endoftext|>", 13);
        while (n && (text[n - 1] & 0xC0) == 0x80)
            n--; /* a copy may have split a character: keep it UTF-8 */
        if (!ds_utf8_valid(text, n))
            continue;
        assert_cut_equal(hf, text, n);
        ty_tokenizer *byte = load("\"byte\"");
        assert_cut_equal(byte, text, n);
        ty_tokenizer_free(byte);
    }
    ty_tokenizer_free(hf);
}

static void test_refusals(void **state)
{
    (void)state;
    expect_load_error("{\"type\": \"bpe\", \"vocab_size\": 256}",
                      "tokenizer.vocab_size", "from 257 to 65536");
    expect_load_error("{\"type\": \"bpe\", \"vocab_size\": 65537}",
                      "tokenizer.vocab_size", "from 257 to 65536");
    expect_load_error("{\"type\": \"bpe\"}", "tokenizer.vocab_size",
                      "required");
    expect_load_error("{\"type\": \"bpe\", \"vocab_size\": 300, \"x\": 1}",
                      "tokenizer.x", "unknown key");
    expect_load_error("{\"type\": \"bpe\", \"vocab_size\": 257, "
                      "\"merges\": [[97, 256]]}",
                      "tokenizer.merges[0]", "ids made before it");
    expect_load_error("{\"type\": \"bpe\", \"vocab_size\": 300, "
                      "\"merges\": [[97, 98]]}",
                      "tokenizer.vocab_size", "256 + the number of merges");
    expect_load_error("{\"type\": \"wordpiece\"}", "tokenizer.type", "must be");
    expect_load_error("\"bytes\"", "tokenizer", "must be \"byte\"");
    expect_load_error("{\"model\": {\"type\": \"Unigram\", \"vocab\": []}, "
                      "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}}",
                      "tokenizer.model.type", "Unigram is not supported");
    expect_load_error("{\"type\": \"huggingface\"}", "tokenizer.tokenizer_json",
                      "tokenizer_json");

    json_t *tj = hf_json(0, 256);
    json_array_append_new(
        json_object_get(json_object_get(tj, "model"), "merges"),
        json_string("h"));
    ty_tokenizer *t = NULL;
    ty_err err = {0};
    assert_int_equal(ty_tokenizer_load(tj, &t, &err), TY_EINVAL);
    assert_string_equal(err.field, "tokenizer.model.merges[1]");
    json_decref(tj);

    ty_tokenizer_request req;
    assert_int_equal(
        ty_tokenizer_request_parse_text("{oops", 5, "tokenizer", &req, &err),
        TY_EINVAL);
    assert_string_equal(err.field, "tokenizer");
    dt_assert_contains(err.msg, "line 1");
    assert_int_equal(
        ty_tokenizer_request_parse_text(" byte\n", 6, "tokenizer", &req, &err),
        TY_OK);
    assert_int_equal(ty_tokenizer_type_of(req.tok), TY_TOKENIZER_BYTE);
    ty_tokenizer_request_free(&req);
}

/* ---- the converter -------------------------------------------------------- */

static void test_convert_text_tok(void **state)
{
    (void)state;
    static char text[1 << 17];
    size_t n = random_text(text, sizeof text, 7);
    dt_write(IN_PATH, text, n);
    ty_tokenizer_request req = {.learn_vocab = 500};
    ty_err err = {0};
    assert_int_equal(ds_convert_text_tok(IN_PATH, &req, 0, OUT_PATH, &err),
                     TY_OK);
    ty_tokens tk;
    assert_int_equal(ty_tokens_open(OUT_PATH, &tk, &err), TY_OK);
    assert_int_equal(tk.token_size, 2);
    assert_true(tk.vocab_size > 256 && tk.vocab_size <= 500);
    assert_false(tk.byte_tokenizer);
    ty_tokenizer *t = NULL;
    assert_int_equal(
        ty_tokenizer_load(json_object_get(tk.meta, "tokenizer"), &t, &err),
        TY_OK);
    uint32_t *ids = malloc(tk.num_tokens * sizeof *ids);
    for (uint64_t i = 0; i < tk.num_tokens; i++)
        ids[i] = ty_tokens_at(&tk, i);
    char *back = NULL;
    size_t blen;
    assert_int_equal(
        ty_tokenizer_decode(t, ids, tk.num_tokens, &back, &blen, &err), TY_OK);
    assert_int_equal(blen, n);
    assert_memory_equal(back, text, n);
    free(back);
    free(ids);
    ty_tokenizer_free(t);
    ty_tokens_close(&tk);

    /* ids past 65536 are stored as uint32 */
    json_t *tj = hf_json(0, 70000);
    memset(&req, 0, sizeof req);
    assert_int_equal(ty_tokenizer_load(tj, &req.tok, &err), TY_OK);
    json_decref(tj);
    dt_write_str(IN_PATH, "hehe he");
    assert_int_equal(ds_convert_text_tok(IN_PATH, &req, 0, OUT_PATH, &err),
                     TY_OK);
    assert_int_equal(ty_tokens_open(OUT_PATH, &tk, &err), TY_OK);
    assert_int_equal(tk.token_size, 4);
    assert_int_equal(tk.vocab_size, 70001);
    assert_int_equal(ty_tokens_at(&tk, 0), 70000);
    ty_tokens_close(&tk);

    /* not UTF-8: the file's offset, nothing left behind */
    dt_write(IN_PATH, "he\xff", 3);
    assert_int_equal(ds_convert_text_tok(IN_PATH, &req, 0, OUT_PATH, &err),
                     TY_EFORMAT);
    assert_string_equal(err.field, "file");
    dt_assert_contains(err.msg, "byte offset 2");
    assert_int_equal(access(OUT_PATH, F_OK), -1);
    ty_tokenizer_request_free(&req);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_byte),
        cmocka_unit_test(test_learn_round_trips),
        cmocka_unit_test(test_learn_deterministic),
        cmocka_unit_test(test_tokenizer_json),
        cmocka_unit_test(test_cut_matches_whole),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test_setup_teardown(test_convert_text_tok, tu_tmpdir_setup,
                                        tu_tmpdir_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
