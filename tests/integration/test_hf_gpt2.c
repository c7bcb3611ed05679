/*
 * Integration tests for GPT-2 checkpoints in Hugging Face's layout through
 * the API and the client (issue 31): a real server, a synthetic checkpoint
 * written here under transformers' names.
 *
 *   POST /v1/models with layout=hf-gpt2, weights, config (+ tokenizer):
 *     a language model (task, input_shape [n_positions], num_outputs
 *     vocab_size, the transformer spec); GET .../weights?layout=hf-gpt2
 *     gives the upload's tensors back bit for bit, file=config.json its
 *     config with the upload's other keys, file=tokenizer.json its
 *     tokenizer. `trainyard models import NAME DIR --layout hf-gpt2` and
 *     `models download --layout hf-gpt2` do the same from a folder.
 *   Refusals, each a 422 naming the part or key, nothing stored: an
 *     unknown layout, config without the layout, the layout without
 *     config, metadata with it, config that is not JSON or not GPT-2's
 *     (activation_function), a missing tensor, a tokenizer whose ids pass
 *     the vocabulary; ?layout=hf-gpt2 of a model that is not a GPT, an
 *     unknown file or layout, file without the layout.
 *
 *   Generation ends at the end-of-text token (config.json's
 *     eos_token_id), finish_reason "stop", its text never shown; a
 *     deployment of the model (a CPU replica) writes the same.
 *
 * That the imported model computes what GPT2LMHeadModel does is
 * tests/parity/hf_gpt2.py's (it needs transformers).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "harness.h"
#include "models/safetensors.h"

#define C 8
#define H 2
#define L 1
#define T 4
#define V 10

static srv server;
static char home[PATH_MAX];

static const char config_text[] =
    "{\"model_type\": \"gpt2\", \"architectures\": [\"GPT2LMHeadModel\"],"
    " \"n_embd\": 8, \"n_head\": 2, \"n_layer\": 1, \"n_positions\": 4,"
    " \"vocab_size\": 10, \"n_inner\": null, \"activation_function\":"
    " \"gelu_new\", \"layer_norm_epsilon\": 1e-05, \"bos_token_id\": 9,"
    " \"eos_token_id\": 9, \"resid_pdrop\": 0.1}";

static const char tokenizer_text[] =
    "{\"version\": \"1.0\", \"added_tokens\": [{\"id\": 9, \"content\":"
    " \"<|endoftext|>\", \"special\": true}], \"model\": {\"type\": \"BPE\","
    " \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2, \"<|endoftext|>\": 9},"
    " \"merges\": [\"a b\"]},"
    " \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\":"
    " false, \"trim_offsets\": true, \"use_regex\": true},"
    " \"decoder\": {\"type\": \"ByteLevel\"}}";

static int group_setup(void **state)
{
    (void)state;
    temp_dir(home);
    return srv_start(&server, NULL, NULL) != 0 ? -1 : 0;
}

static int group_teardown(void **state)
{
    (void)state;
    srv_stop(&server, SIGTERM);
    srv_cleanup(&server);
    if (!getenv("TY_KEEP_TEST_DATA"))
        fs_remove_tree(home, NULL);
    return 0;
}

static const char *file_path(const char *name)
{
    static char p[4][PATH_MAX + 64];
    static int i;
    i = (i + 1) % 4;
    snprintf(p[i], sizeof p[i], "%s/%s", home, name);
    return p[i];
}

/* HF's tensors of the test model: name, shape. */
static const struct {
    const char *name;
    uint32_t ndim;
    uint64_t a, b;
} hf_tensors[] = {
    {"transformer.wte.weight", 2, V, C},
    {"transformer.wpe.weight", 2, T, C},
    {"transformer.h.0.ln_1.weight", 1, C, 0},
    {"transformer.h.0.ln_1.bias", 1, C, 0},
    {"transformer.h.0.attn.c_attn.weight", 2, C, 3 * C},
    {"transformer.h.0.attn.c_attn.bias", 1, 3 * C, 0},
    {"transformer.h.0.attn.c_proj.weight", 2, C, C},
    {"transformer.h.0.attn.c_proj.bias", 1, C, 0},
    {"transformer.h.0.ln_2.weight", 1, C, 0},
    {"transformer.h.0.ln_2.bias", 1, C, 0},
    {"transformer.h.0.mlp.c_fc.weight", 2, C, 4 * C},
    {"transformer.h.0.mlp.c_fc.bias", 1, 4 * C, 0},
    {"transformer.h.0.mlp.c_proj.weight", 2, 4 * C, C},
    {"transformer.h.0.mlp.c_proj.bias", 1, C, 0},
    {"transformer.ln_f.weight", 1, C, 0},
    {"transformer.ln_f.bias", 1, C, 0},
};
#define NT (sizeof hf_tensors / sizeof *hf_tensors)

static float values[NT][4 * C * C];

/* The checkpoint (the first `count` tensors) as transformers writes it,
 * random values, into path. */
static void write_ckpt(const char *path, size_t count)
{
    st_out_tensor t[NT];
    uint64_t x = 31;
    for (size_t k = 0; k < count; k++) {
        uint64_t n = hf_tensors[k].a * (hf_tensors[k].b ? hf_tensors[k].b : 1);
        for (uint64_t i = 0; i < n; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            values[k][i] = (float)((double)(x >> 40) / (1 << 24) - 0.5) * 0.4f;
        }
        t[k] = (st_out_tensor){hf_tensors[k].name,
                               ST_F32,
                               hf_tensors[k].ndim,
                               {hf_tensors[k].a, hf_tensors[k].b},
                               values[k]};
    }
    json_t *meta = json_pack("{s:s}", "format", "pt");
    ty_err err = {0};
    assert_int_equal(st_write(path, meta, t, count, &err), TY_OK);
    json_decref(meta);
}

static size_t model_count(void)
{
    resp *r = http_get(&server, "/v1/models?limit=1000");
    assert_int_equal(r->status, 200);
    size_t n = json_array_size(json_object_get(r->json, "items"));
    resp_free(r);
    return n;
}

static void expect_422(resp *r, const char *field, const char *needle)
{
    const char *detail = json_string_value(json_object_get(r->json, "detail"));
    const char *f = json_string_value(json_object_get(r->json, "field"));
    if (r->status != 422 || !detail || !strstr(detail, needle) || !f ||
        strcmp(f, field))
        fail_msg("expected 422 on %s with '%s', got %ld %s", field, needle,
                 r->status, r->body);
    assert_null(strstr(r->body, home));
    assert_null(strstr(r->body, server.data));
    resp_free(r);
}

static void expect_import_422(const char *const *parts, const char *field,
                              const char *needle)
{
    expect_422(http_upload(&server, "/v1/models", parts), field, needle);
}

/* The checkpoint's upload: a language model with the config's spec, whose
 * export is the upload, tensor for tensor, bit for bit. */
static void test_import_export(void **state)
{
    (void)state;
    write_ckpt(file_path("model.safetensors"), NT);
    write_file(file_path("config.json"), config_text, strlen(config_text));
    write_file(file_path("tokenizer.json"), tokenizer_text,
               strlen(tokenizer_text));
    char w[PATH_MAX + 80], c[PATH_MAX + 80], t[PATH_MAX + 80];
    snprintf(w, sizeof w, "weights=@%s", file_path("model.safetensors"));
    snprintf(c, sizeof c, "config=@%s", file_path("config.json"));
    snprintf(t, sizeof t, "tokenizer=@%s", file_path("tokenizer.json"));
    const char *parts[] = {"name=tiny-gpt2", "layout=hf-gpt2", w, c, t, NULL};
    resp *r = http_upload(&server, "/v1/models", parts);
    if (r->status != 201)
        fail_msg("import: %ld %s", r->status, r->body);
    const json_t *m = r->json;
    char id[64];
    snprintf(id, sizeof id, "%s", str(m, "id"));
    assert_string_equal(str(m, "task"), "language_modeling");
    assert_int_equal(json_integer_value(json_object_get(m, "num_outputs")), V);
    assert_int_equal(json_integer_value(
                         json_array_get(json_object_get(m, "input_shape"), 0)),
                     T);
    /* wte, wpe, 12 C + 4 C^2 ... of the block, ln_f: HF's count. */
    uint64_t params = 0;
    for (size_t k = 0; k < NT; k++)
        params += hf_tensors[k].a * (hf_tensors[k].b ? hf_tensors[k].b : 1);
    assert_int_equal(json_integer_value(json_object_get(m, "param_count")),
                     params);
    const json_t *layers =
        json_object_get(json_object_get(m, "spec"), "layers");
    assert_int_equal(json_array_size(layers), 5);
    assert_string_equal(str(json_array_get(layers, 2), "type"),
                        "transformer_block");
    /* The document names the tokenizer; it does not carry the file. */
    assert_string_equal(str(m, "tokenizer"), "huggingface");
    const json_t *tz = json_object_get(m, "tokenizer_info");
    assert_string_equal(str(tz, "type"), "huggingface");
    assert_int_equal(json_integer_value(json_object_get(tz, "vocab_size")), 10);
    assert_null(json_object_get(tz, "tokenizer_json"));
    resp_free(r);
    char path[256];
    snprintf(path, sizeof path, "/v1/models/%s", id);
    r = http_get(&server, path);
    assert_null(json_object_get(json_object_get(r->json, "tokenizer_info"),
                                "tokenizer_json"));
    assert_null(strstr(r->body, "tokenizer_json"));
    resp_free(r);

    snprintf(path, sizeof path, "/v1/models/%s/weights?layout=hf-gpt2", id);
    r = http_get(&server, path);
    assert_int_equal(r->status, 200);
    st_file f = {0};
    ty_err err = {0};
    assert_int_equal(st_parse(r->body, r->len, &f, &err), TY_OK);
    assert_int_equal(f.count, NT);
    assert_string_equal(st_meta(&f, "format"), "pt");
    for (size_t k = 0; k < NT; k++) {
        const st_tensor *x = st_find(&f, hf_tensors[k].name);
        if (!x)
            fail_msg("%s is not in the export", hf_tensors[k].name);
        assert_int_equal(x->shape[0], hf_tensors[k].a);
        assert_int_equal(x->nbytes,
                         4 * hf_tensors[k].a *
                             (hf_tensors[k].b ? hf_tensors[k].b : 1));
        assert_memory_equal(x->data, values[k], x->nbytes);
    }
    st_close(&f);
    resp_free(r);

    snprintf(path, sizeof path,
             "/v1/models/%s/weights?layout=hf-gpt2&file=config.json", id);
    r = http_get(&server, path);
    assert_int_equal(r->status, 200);
    /* A download, as the weights are, under the folder's file name. */
    assert_non_null(strstr(r->content_type, "application/octet-stream"));
    json_t *j = json_loadb(r->body, r->len, 0, NULL);
    assert_int_equal(json_integer_value(json_object_get(j, "n_embd")), C);
    assert_int_equal(json_integer_value(json_object_get(j, "bos_token_id")), 9);
    assert_string_equal(str(j, "model_type"), "gpt2");
    json_decref(j);
    resp_free(r);
    snprintf(path, sizeof path,
             "/v1/models/%s/weights?layout=hf-gpt2&file=tokenizer.json", id);
    r = http_get(&server, path);
    assert_int_equal(r->status, 200);
    json_t *want = json_loads(tokenizer_text, 0, NULL);
    j = json_loadb(r->body, r->len, 0, NULL);
    assert_true(json_equal(want, j));
    json_decref(j);
    json_decref(want);
    resp_free(r);
}

/* The client: a save_pretrained-like folder in, the same folder out. */
static void test_cli_folder(void **state)
{
    (void)state;
    char dir[PATH_MAX + 16], out[PATH_MAX + 16];
    snprintf(dir, sizeof dir, "%s/ckpt", home);
    snprintf(out, sizeof out, "%s/back", home);
    mkdir(dir, 0755);
    write_ckpt(file_path("ckpt/model.safetensors"), NT);
    write_file(file_path("ckpt/config.json"), config_text, strlen(config_text));
    cli_result r;
    cli_run(&r, home, server.base, server.key,
            (const char *const[]){"models", "import", "cli-gpt2", dir,
                                  "--layout", "hf-gpt2", NULL});
    cli_expect_code(&r, 0);
    if (!strstr(r.out, "language_modeling"))
        fail_msg("import printed: %s", r.out);
    cli_result_free(&r);
    cli_run(&r, home, server.base, server.key,
            (const char *const[]){"models", "download", "cli-gpt2", "--layout",
                                  "hf-gpt2", "-o", out, NULL});
    cli_expect_code(&r, 0);
    cli_result_free(&r);
    char *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    assert_int_equal(fs_read_all(file_path("back/model.safetensors"), 1 << 20,
                                 &b, &nb, NULL),
                     TY_OK);
    st_file f = {0};
    ty_err err = {0};
    assert_int_equal(st_parse(b, nb, &f, &err), TY_OK);
    for (size_t k = 0; k < NT; k++)
        assert_memory_equal(st_find(&f, hf_tensors[k].name)->data, values[k],
                            st_find(&f, hf_tensors[k].name)->nbytes);
    st_close(&f);
    free(b);
    assert_int_equal(
        fs_read_all(file_path("back/config.json"), 1 << 20, &a, &na, NULL),
        TY_OK);
    assert_non_null(strstr(a, "\"n_layer\""));
    free(a);
    /* No tokenizer was imported: none is written. */
    assert_int_not_equal(access(file_path("back/tokenizer.json"), F_OK), 0);

    /* Usage errors before anything is sent. */
    cli_run(&r, home, server.base, server.key,
            (const char *const[]){"models", "import", "x", dir, "--config",
                                  file_path("ckpt/config.json"), NULL});
    cli_expect_code(&r, 64);
    cli_result_free(&r);
    char empty[PATH_MAX + 16];
    snprintf(empty, sizeof empty, "%s/empty", home);
    mkdir(empty, 0755);
    cli_run(&r, home, server.base, server.key,
            (const char *const[]){"models", "import", "x", empty, "--layout",
                                  "hf-gpt2", NULL});
    cli_expect_code(&r, 64);
    if (!strstr(r.err, "model.safetensors"))
        fail_msg("stderr: %s", r.err);
    cli_result_free(&r);
}

static void test_import_refusals(void **state)
{
    (void)state;
    char blobs[PATH_MAX + 8];
    snprintf(blobs, sizeof blobs, "%s/blobs", server.data);
    size_t before = model_count();
    write_ckpt(file_path("model.safetensors"), NT);
    write_ckpt(file_path("partial.safetensors"), 1);
    write_file(file_path("config.json"), config_text, strlen(config_text));
    char w[PATH_MAX + 80], wp[PATH_MAX + 80], c[PATH_MAX + 80];
    snprintf(w, sizeof w, "weights=@%s", file_path("model.safetensors"));
    snprintf(wp, sizeof wp, "weights=@%s", file_path("partial.safetensors"));
    snprintf(c, sizeof c, "config=@%s", file_path("config.json"));

    expect_import_422((const char *const[]){"layout=hf-gpt3", w, c, NULL},
                      "layout", "trainyard (the default) or hf-gpt2");
    expect_import_422((const char *const[]){w, c, NULL}, "config",
                      "layout=hf-gpt2");
    expect_import_422((const char *const[]){"layout=hf-gpt2", w, NULL},
                      "config", "config.json");
    expect_import_422(
        (const char *const[]){"layout=hf-gpt2", w, c, "metadata={}", NULL},
        "metadata", "no metadata part");
    expect_import_422(
        (const char *const[]){"layout=hf-gpt2", w, "config={\"n_embd\"", NULL},
        "config", "JSON");
    expect_import_422(
        (const char *const[]){"layout=hf-gpt2", w,
                              "config={\"n_embd\": 8, \"n_head\": 2, "
                              "\"n_layer\": 1, \"n_positions\": 4, "
                              "\"vocab_size\": 10, \"activation_function\": "
                              "\"relu\"}",
                              NULL},
        "config.activation_function", "relu");
    expect_import_422(
        (const char *const[]){"layout=hf-gpt2", w,
                              "config={\"n_embd\": 8, \"n_head\": 2, "
                              "\"n_layer\": 1, \"n_positions\": 4, "
                              "\"vocab_size\": 10, "
                              "\"scale_attn_by_inverse_layer_idx\": true}",
                              NULL},
        "config.scale_attn_by_inverse_layer_idx", "layer's index");
    expect_import_422((const char *const[]){"layout=hf-gpt2", wp, c, NULL},
                      "weights", "transformer.wpe.weight (4, 8) is missing");
    expect_import_422(
        (const char *const[]){"layout=hf-gpt2", w, c,
                              "tokenizer={\"model\": {\"vocab\": {\"a\": 10}}}",
                              NULL},
        "tokenizer", "vocab_size 10");
    expect_import_422(
        (const char *const[]){"layout=hf-gpt2", w, c, "tokenizer=[1", NULL},
        "tokenizer", "JSON");
    assert_int_equal(model_count(), before);
}

/* An MLP has no GPT-2 layout; bad queries name themselves. */
static void test_export_refusals(void **state)
{
    (void)state;
    float w[12] = {0}, b[3] = {0};
    st_out_tensor t[2] = {{"0.weight", ST_F32, 2, {3, 4}, w},
                          {"0.bias", ST_F32, 1, {3}, b}};
    ty_err err = {0};
    assert_int_equal(st_write(file_path("mlp.safetensors"), NULL, t, 2, &err),
                     TY_OK);
    char p[PATH_MAX + 80];
    snprintf(p, sizeof p, "weights=@%s", file_path("mlp.safetensors"));
    const char *parts[] = {
        p,
        "metadata={\"spec\": {\"layers\": [{\"type\": \"dense\", \"units\": "
        "3}]}, \"task\": \"regression\", \"input_shape\": [4], "
        "\"num_outputs\": 3}",
        NULL};
    resp *r = http_upload(&server, "/v1/models", parts);
    assert_int_equal(r->status, 201);
    char id[64], path[256];
    snprintf(id, sizeof id, "%s", str(r->json, "id"));
    resp_free(r);
    snprintf(path, sizeof path, "/v1/models/%s/weights?layout=hf-gpt2", id);
    expect_422(http_get(&server, path), "layout", "not a language model");
    snprintf(path, sizeof path,
             "/v1/models/%s/weights?layout=hf-gpt2&file=config.json", id);
    expect_422(http_get(&server, path), "layout", "not a language model");
    snprintf(path, sizeof path,
             "/v1/models/%s/weights?layout=hf-gpt2&file=vocab.json", id);
    expect_422(http_get(&server, path), "file", "config.json");
    snprintf(path, sizeof path, "/v1/models/%s/weights?layout=onnx", id);
    expect_422(http_get(&server, path), "layout", "hf-gpt2");
    snprintf(path, sizeof path, "/v1/models/%s/weights?file=config.json", id);
    expect_422(http_get(&server, path), "file", "hf-gpt2 only");
    /* The plain download is unchanged. */
    snprintf(path, sizeof path, "/v1/models/%s/weights?layout=trainyard", id);
    r = http_get(&server, path);
    assert_int_equal(r->status, 200);
    resp_free(r);
    r = http_get(&server, "/v1/models/mdl_nope/weights?layout=hf-gpt2");
    assert_int_equal(r->status, 404);
    resp_free(r);
}

/* A tokenizer with a token for every id, <|endoftext|> the last. */
static const char tokenizer_full[] =
    "{\"version\": \"1.0\", \"added_tokens\": [{\"id\": 9, \"content\":"
    " \"<|endoftext|>\", \"special\": true}], \"model\": {\"type\": \"BPE\","
    " \"vocab\": {\"a\": 0, \"b\": 1, \"c\": 2, \"d\": 3, \"e\": 4, \"f\": 5,"
    " \"g\": 6, \"h\": 7, \"ab\": 8, \"<|endoftext|>\": 9},"
    " \"merges\": [\"a b\"]},"
    " \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\":"
    " false, \"trim_offsets\": true, \"use_regex\": true},"
    " \"decoder\": {\"type\": \"ByteLevel\"}}";

#define SEEDS 24

typedef struct {
    char text[64], finish[16];
    long long tokens;
} gen_out;

/* POST /v2/models/{model}/generate with seed: its text, reason, count. */
static void gen_seed(const char *model, int seed, gen_out *o)
{
    char path[160], body[160];
    snprintf(path, sizeof path, "/v2/models/%s/generate", model);
    snprintf(body, sizeof body,
             "{\"text_input\": \"a\", \"parameters\": {\"temperature\": 1,"
             " \"max_tokens\": 3, \"seed\": %d}}",
             seed);
    resp *r = http_json(&server, "POST", path, body);
    if (r->status != 200)
        fail_msg("generate: %ld %s", r->status, r->body);
    snprintf(o->text, sizeof o->text, "%s", str(r->json, "text_output"));
    snprintf(o->finish, sizeof o->finish, "%s", str(r->json, "finish_reason"));
    o->tokens = json_integer_value(json_object_get(r->json, "completion_tokens"));
    resp_free(r);
}

/* Sampling from the random model ends at <|endoftext|> (id 9, the
 * config's eos_token_id) for some seeds: those stop there, before
 * max_tokens, and none shows the token's text. A deployment of the model
 * writes the same, seed for seed. */
static void test_generate_stops_at_eos(void **state)
{
    (void)state;
    write_ckpt(file_path("eos.safetensors"), NT);
    write_file(file_path("config.json"), config_text, strlen(config_text));
    write_file(file_path("tok-full.json"), tokenizer_full,
               strlen(tokenizer_full));
    char w[PATH_MAX + 80], c[PATH_MAX + 80], t[PATH_MAX + 80];
    snprintf(w, sizeof w, "weights=@%s", file_path("eos.safetensors"));
    snprintf(c, sizeof c, "config=@%s", file_path("config.json"));
    snprintf(t, sizeof t, "tokenizer=@%s", file_path("tok-full.json"));
    const char *parts[] = {"name=eos-gpt2", "layout=hf-gpt2", w, c, t, NULL};
    resp *r = http_upload(&server, "/v1/models", parts);
    if (r->status != 201)
        fail_msg("import: %ld %s", r->status, r->body);
    char id[64];
    snprintf(id, sizeof id, "%s", str(r->json, "id"));
    resp_free(r);

    gen_out here[SEEDS];
    int ended = 0;
    for (int i = 0; i < SEEDS; i++) {
        gen_seed(id, i, &here[i]);
        if (strstr(here[i].text, "<|endoftext|>"))
            fail_msg("seed %d wrote past the end of text: \"%s\"", i,
                     here[i].text);
        if (here[i].tokens < 3)
            assert_string_equal(here[i].finish, "stop");
        ended += here[i].tokens < 3;
    }
    print_message("%d of %d seeds ended at <|endoftext|>\n", ended, SEEDS);
    assert_true(ended > 0);

    char dpath[128];
    deploy_cpu_ready(&server, "eos-dep", id, dpath);
    for (int i = 0; i < SEEDS; i++) {
        gen_out there;
        gen_seed("eos-dep", i, &there);
        assert_string_equal(there.text, here[i].text);
        assert_string_equal(there.finish, here[i].finish);
        assert_int_equal(there.tokens, here[i].tokens);
    }
    r = http_do(&server, "DELETE", dpath, NULL, NULL, 0, NULL);
    resp_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_import_refusals),
        cmocka_unit_test(test_export_refusals),
        cmocka_unit_test(test_import_export),
        cmocka_unit_test(test_cli_folder),
        cmocka_unit_test(test_generate_stops_at_eos),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
