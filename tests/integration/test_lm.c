/*
 * Integration tests for language models (issue 31) through a live server:
 * a small GPT trained on a text dataset (windows of context_length tokens,
 * a held-out validation stretch, max_steps and eval_every_steps), its epoch
 * record (tokens per second, perplexities), the model's document
 * (tokenizer, context length, vocabulary), next-token predict on text and
 * ids, tokenize and detokenize, evaluate on a text dataset, and every bad
 * request refused with a 422 naming its field.
 *
 * The text is a small grammar's sentences ("the old king sees a red
 * apple."), so a model that learned anything beats the character
 * frequencies by far: the test asks for a validation loss under 1.6 nats
 * (the text's unigram entropy is about 2.8) after 120 steps.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static srv server;
static char files[PATH_MAX];
static char text_ds[64], csv_ds[64], model_id[64], csv_model[64];

#define GPT_LAYERS                                      \
    "[{\"type\": \"embedding\", \"dim\": 32},"          \
    " {\"type\": \"positional_embedding\"},"            \
    " {\"type\": \"transformer_block\", \"heads\": 4}," \
    " {\"type\": \"transformer_block\", \"heads\": 4}," \
    " {\"type\": \"layernorm\"}, {\"type\": \"lm_head\"}]"

static char *file_path(const char *name)
{
    static char p[2][PATH_MAX];
    static int k;
    k = (k + 1) % 2;
    snprintf(p[k], PATH_MAX, "%s/%s", files, name);
    return p[k];
}

/* The grammar's text: n sentences from a fixed generator. */
static void write_story(const char *path, int n)
{
    static const char *subj[] = {"the cat",   "a dog",     "the old king",
                                 "my friend", "the queen", "a bird"};
    static const char *verb[] = {"sees",    "loves", "finds",
                                 "follows", "hears", "calls"};
    static const char *obj[] = {"the moon",    "a red apple", "the river",
                                "her brother", "the castle",  "a small boat"};
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    uint64_t s = 12345;
    for (int i = 0; i < n; i++) {
        int k[3];
        for (int j = 0; j < 3; j++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            k[j] = (int)((s >> 33) % 6);
        }
        fprintf(f, "%s %s %s.\n", subj[k[0]], verb[k[1]], obj[k[2]]);
    }
    fclose(f);
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

static void expect_422(resp *r, const char *field, const char *needle)
{
    /* field NULL: the request as a whole (no field named) */
    const char *got = r->json ? str(r->json, "field") : NULL;
    if (r->status != 422 || (field && (!got || strcmp(got, field))) ||
        (!field && got) || (needle && !strstr(str(r->json, "detail"), needle)))
        fprintf(stderr, "%ld %.*s\n", r->status, (int)r->len, r->body);
    assert_int_equal(r->status, 422);
    if (field) {
        assert_non_null(got);
        assert_string_equal(got, field);
    } else {
        assert_null(got);
    }
    if (needle)
        assert_non_null(strstr(str(r->json, "detail"), needle));
    assert_null(strstr(r->body, server.data)); /* no server paths */
    resp_free(r);
}

static resp *post(const char *path, const char *body)
{
    return http_json(&server, "POST", path, body);
}

static double num(const json_t *o, const char *k)
{
    const json_t *v = json_object_get(o, k);
    if (!json_is_number(v))
        fail_msg("%s is not a number", k);
    return json_number_value(v);
}

static void test_train_gpt_on_text(void **state)
{
    (void)state;
    write_story(file_path("story.txt"), 2000);
    char part[PATH_MAX + 16];
    snprintf(part, sizeof part, "file=@%s", file_path("story.txt"));
    const char *parts[] = {"name=story", "format=text", part, NULL};
    resp *r = http_upload(&server, "/v1/datasets", parts);
    expect_status(r, 201);
    snprintf(text_ds, sizeof text_ds, "%s", str(r->json, "id"));
    resp_free(r);

    char body[2048];
    snprintf(body, sizeof body,
             "{\"dataset\": \"story\", \"name\": \"story-gpt\", \"model\": "
             "{\"layers\": %s}, \"hyperparameters\": {\"context_length\": "
             "32, \"batch_size\": 16, \"optimizer\": \"adamw\", "
             "\"learning_rate\": 0.005, \"epochs\": 5, \"max_steps\": 120, "
             "\"eval_every_steps\": 40, \"seed\": 1}}",
             GPT_LAYERS);
    r = post("/v1/jobs", body);
    expect_status(r, 202);
    /* context_length is spelled out; the loss is the next token's */
    const json_t *hp = json_object_get(r->json, "hyperparameters");
    assert_int_equal(json_integer_value(json_object_get(hp, "context_length")),
                     32);
    assert_string_equal(str(hp, "loss"), "cross_entropy");
    char job[64];
    snprintf(job, sizeof job, "%s", str(r->json, "id"));
    resp_free(r);
    json_t *j = wait_job(&server, job, 600);
    if (strcmp(str(j, "status"), "succeeded"))
        fprintf(stderr, "job: %s\n", json_dumps(j, 0));
    assert_string_equal(str(j, "status"), "succeeded");
    /* max_steps bounds the run: 2000 sentences are ~2,000 windows of 32,
     * 113 steps an epoch at 90% for training */
    const json_t *prog = json_object_get(j, "progress");
    assert_int_equal(json_integer_value(json_object_get(prog, "step")), 120);
    assert_int_equal(json_integer_value(json_object_get(prog, "total_steps")),
                     120);
    /* ... so the run took 2 of its 5 epochs, and says so */
    assert_int_equal(json_integer_value(json_object_get(prog, "epochs")), 2);
    assert_int_equal(json_integer_value(json_object_get(prog, "epoch")), 2);
    snprintf(model_id, sizeof model_id, "%s", str(j, "model"));
    json_decref(j);

    char path[160];
    snprintf(path, sizeof path, "/v1/jobs/%s/metrics", job);
    r = http_get(&server, path);
    expect_status(r, 200);
    const json_t *eps = json_object_get(r->json, "epochs");
    assert_int_equal(json_array_size(eps), 2);
    const json_t *last = json_array_get(eps, 1);
    double train = num(last, "train_loss"), val = num(last, "val_loss");
    fprintf(stderr, "train_loss %.4f val_loss %.4f tokens/s %.0f\n", train, val,
            num(last, "tokens_per_second"));
    assert_true(num(last, "tokens_per_second") > 0);
    assert_float_equal(num(last, "train_perplexity"), exp(train),
                       1e-6 * exp(train));
    assert_float_equal(num(last, "val_perplexity"), exp(val), 1e-6 * exp(val));
    assert_true(val < 1.6);
    assert_true(json_is_null(json_object_get(last, "train_accuracy")));
    resp_free(r);
}

static void test_model_document(void **state)
{
    (void)state;
    char path[160];
    snprintf(path, sizeof path, "/v1/models/%s", model_id);
    resp *r = http_get(&server, path);
    expect_status(r, 200);
    assert_string_equal(str(r->json, "task"), "language_modeling");
    assert_string_equal(str(r->json, "tokenizer"), "byte");
    assert_int_equal(
        json_integer_value(json_object_get(r->json, "context_length")), 32);
    assert_int_equal(json_integer_value(json_object_get(r->json, "vocab_size")),
                     256);
    resp_free(r);
}

static void test_next_token_predict(void **state)
{
    (void)state;
    char path[160];
    snprintf(path, sizeof path, "/v1/models/%s/predict", model_id);
    /* all 256 next tokens: a distribution; the first prompt is text, the
     * second its ids, so both give the same answer */
    resp *r = post(path, "{\"inputs\": [\"the old k\", [116, 104, 101, 32, "
                         "111, 108, 100, 32, 107]], \"top_k\": 256}");
    expect_status(r, 200);
    const json_t *preds = json_object_get(r->json, "predictions");
    assert_int_equal(json_array_size(preds), 2);
    for (size_t i = 0; i < 2; i++) {
        const json_t *p = json_array_get(preds, i);
        assert_int_equal(json_array_size(json_object_get(p, "tokens")), 9);
        const json_t *next = json_object_get(p, "next_tokens");
        assert_int_equal(json_array_size(next), 256);
        double sum = 0, prev = 2;
        for (size_t k = 0; k < 256; k++) {
            double pr = num(json_array_get(next, k), "probability");
            assert_true(pr <= prev);
            prev = pr;
            sum += pr;
        }
        assert_float_equal(sum, 1.0, 1e-4);
        /* "the old k" is always "the old king" in the text */
        const json_t *best = json_array_get(next, 0);
        assert_string_equal(str(best, "text"), "i");
        assert_true(num(best, "probability") > 0.5);
    }
    assert_float_equal(
        num(json_array_get(
                json_object_get(json_array_get(preds, 0), "next_tokens"), 3),
            "probability"),
        num(json_array_get(
                json_object_get(json_array_get(preds, 1), "next_tokens"), 3),
            "probability"),
        0.0);
    resp_free(r);
    /* a prompt longer than the context keeps its last 32 tokens */
    char body[256] = "{\"inputs\": [\"";
    for (int i = 0; i < 40; i++)
        strcat(body, "ab");
    strcat(body, "\"]}");
    r = post(path, body);
    expect_status(r, 200);
    const json_t *p0 =
        json_array_get(json_object_get(r->json, "predictions"), 0);
    assert_int_equal(json_array_size(json_object_get(p0, "tokens")), 32);
    assert_true(json_is_true(json_object_get(p0, "truncated")));
    assert_int_equal(json_array_size(json_object_get(p0, "next_tokens")), 5);
    resp_free(r);
    /* bad prompts */
    expect_422(post(path, "{\"inputs\": [\"\"]}"), "inputs[0]", "empty");
    expect_422(post(path, "{\"inputs\": [\"ok\", [1, 256]]}"), "inputs[1]",
               "token id from 0 to 255");
    expect_422(post(path, "{\"inputs\": [3.5]}"), "inputs[0]", "string");
    expect_422(post(path, "{\"inputs\": [\"x\"], \"top_k\": 0}"), "top_k",
               NULL);
    expect_422(post(path, "{\"inputs\": [\"x\"], \"top_k\": \"a\"}"), "top_k",
               NULL);
}

static void test_tokenize_detokenize(void **state)
{
    (void)state;
    char path[160];
    snprintf(path, sizeof path, "/v1/models/%s/tokenize", model_id);
    resp *r = post(path, "{\"content\": \"h\\u00e9!\"}");
    expect_status(r, 200);
    const json_t *t = json_object_get(r->json, "tokens");
    assert_int_equal(json_array_size(t), 4);
    assert_int_equal(json_integer_value(json_array_get(t, 1)), 0xc3);
    resp_free(r);
    expect_422(post(path, "{}"), "content", NULL);
    expect_422(post(path, "{\"content\": \"x\", \"extra\": 1}"), "extra", NULL);
    snprintf(path, sizeof path, "/v1/models/%s/detokenize", model_id);
    r = post(path, "{\"tokens\": [104, 195, 169, 33]}");
    expect_status(r, 200);
    assert_string_equal(str(r->json, "content"), "h\xc3\xa9!");
    assert_true(json_is_true(json_object_get(r->json, "complete")));
    resp_free(r);
    /* a cut character is replaced, and said so */
    r = post(path, "{\"tokens\": [104, 195]}");
    expect_status(r, 200);
    assert_string_equal(str(r->json, "content"), "h\xef\xbf\xbd");
    assert_true(json_is_false(json_object_get(r->json, "complete")));
    resp_free(r);
    expect_422(post(path, "{\"tokens\": [1, 256]}"), "tokens", "tokens[1]");
    expect_422(post(path, "{\"tokens\": \"ab\"}"), "tokens", NULL);
}

static void test_evaluate_on_text(void **state)
{
    (void)state;
    char path[160], body[128];
    snprintf(path, sizeof path, "/v1/models/%s/evaluate", model_id);
    snprintf(body, sizeof body, "{\"dataset\": \"%s\"}", text_ds);
    resp *r = post(path, body);
    expect_status(r, 200);
    double loss = num(r->json, "loss");
    assert_true(loss > 0 && loss < 1.6);
    assert_float_equal(num(r->json, "perplexity"), exp(loss), 1e-6 * exp(loss));
    /* the whole text in windows of 32: 56,0xx bytes */
    assert_true(num(r->json, "num_tokens") ==
                32 * num(r->json, "num_examples"));
    assert_true(json_is_null(json_object_get(r->json, "accuracy")));
    resp_free(r);
}

/* The CLI: predict's table for a language model (rank, the token quoted,
 * its id and probability), jobs show's perplexity and tokens/s. */
static void test_cli(void **state)
{
    (void)state;
    char home[PATH_MAX], input[PATH_MAX + 16];
    temp_dir(home);
    snprintf(input, sizeof input, "%s/p.json", home);
    const char *body = "{\"inputs\": [\"the old k\"], \"top_k\": 2}";
    write_file(input, body, strlen(body));
    cli_result r;
    cli_run(
        &r, home, server.base, server.key,
        (const char *const[]){"models", "predict", "story-gpt", input, NULL});
    cli_expect_code(&r, 0);
    if (!strstr(r.out, "RANK") || !strstr(r.out, "\"i\"  ") ||
        !strstr(r.out, "105"))
        fail_msg("predict table:\n%s", r.out);
    cli_result_free(&r);
    cli_run(&r, home, server.base, server.key,
            (const char *const[]){"jobs", "list", NULL});
    cli_expect_code(&r, 0);
    cli_result_free(&r);
}

/* init_from: a job that starts from the trained model's weights begins
 * where that one ended (a drawn start is near ln 256 = 5.5 nats), and one
 * whose spec differs is refused naming the layer. */
static void test_fine_tune(void **state)
{
    (void)state;
    char body[2048];
    snprintf(body, sizeof body,
             "{\"dataset\": \"story\", \"name\": \"story-ft\", \"model\": "
             "{\"layers\": %s}, \"hyperparameters\": {\"context_length\": "
             "32, \"batch_size\": 16, \"optimizer\": \"adamw\", "
             "\"learning_rate\": 1e-5, \"max_steps\": 3, \"seed\": 2, "
             "\"init_from\": \"story-gpt\"}}",
             GPT_LAYERS);
    resp *r = post("/v1/jobs", body);
    expect_status(r, 202);
    /* the normalized hyperparameters name the model by id */
    assert_string_equal(
        str(json_object_get(r->json, "hyperparameters"), "init_from"),
        model_id);
    json_t *j = wait_job(&server, str(r->json, "id"), 300);
    resp_free(r);
    assert_string_equal(str(j, "status"), "succeeded");
    const json_t *m = json_object_get(j, "metrics");
    fprintf(stderr, "fine-tune: train_loss %.4f\n", num(m, "train_loss"));
    assert_true(num(m, "train_loss") < 2.0);
    json_decref(j);
    /* a different block: refused, naming the layer */
    expect_422(post("/v1/jobs",
                    "{\"dataset\": \"story\", \"model\": {\"layers\": "
                    "[{\"type\": \"embedding\", \"dim\": 32}, {\"type\": "
                    "\"positional_embedding\"}, {\"type\": "
                    "\"transformer_block\", \"heads\": 2}, {\"type\": "
                    "\"transformer_block\", \"heads\": 4}, {\"type\": "
                    "\"layernorm\"}, {\"type\": \"lm_head\"}]}, "
                    "\"hyperparameters\": {\"context_length\": 32, "
                    "\"init_from\": \"story-gpt\"}}"),
               "hyperparameters.init_from", "layer 2 differs");
    expect_422(post("/v1/jobs", "{\"dataset\": \"story\", \"model\": "
                                "{\"layers\": " GPT_LAYERS "}, "
                                "\"hyperparameters\": {\"init_from\": "
                                "\"no-such-model\"}}"),
               "hyperparameters.init_from", "no model");
    /* another context length is another input shape */
    snprintf(body, sizeof body,
             "{\"dataset\": \"story\", \"model\": {\"layers\": %s}, "
             "\"hyperparameters\": {\"context_length\": 16, "
             "\"init_from\": \"story-gpt\"}}",
             GPT_LAYERS);
    expect_422(post("/v1/jobs", body), "hyperparameters.init_from",
               "input shape");
}

/* A CSV dataset and a classifier on it, for the cross-task refusals. */
static void make_csv_model(void)
{
    make_blobs_csv(file_path("b.csv"), 60, 3);
    char part[PATH_MAX + 16];
    snprintf(part, sizeof part, "file=@%s", file_path("b.csv"));
    const char *parts[] = {"name=blobs", "format=csv", "label_column=species",
                           part, NULL};
    resp *r = http_upload(&server, "/v1/datasets", parts);
    expect_status(r, 201);
    snprintf(csv_ds, sizeof csv_ds, "%s", str(r->json, "id"));
    resp_free(r);
    char body[512];
    snprintf(body, sizeof body,
             "{\"dataset\": \"%s\", \"model\": {\"layers\": [{\"type\": "
             "\"dense\", \"units\": 3}]}, \"hyperparameters\": {\"epochs\": "
             "1, \"seed\": 1}}",
             csv_ds);
    r = post("/v1/jobs", body);
    expect_status(r, 202);
    json_t *j = wait_job(&server, str(r->json, "id"), 120);
    resp_free(r);
    assert_string_equal(str(j, "status"), "succeeded");
    snprintf(csv_model, sizeof csv_model, "%s", str(j, "model"));
    json_decref(j);
}

static void test_refusals(void **state)
{
    (void)state;
    make_csv_model();
    char body[2048], path[160];
    /* no lm_head: the logits' shape is named */
    expect_422(post("/v1/jobs", "{\"dataset\": \"story\", \"model\": "
                                "{\"layers\": [{\"type\": \"embedding\", "
                                "\"dim\": 8}, {\"type\": \"dense\", "
                                "\"units\": 4}]}}"),
               "model.layers", "lm_head");
    /* heads must divide the channels */
    expect_422(post("/v1/jobs", "{\"dataset\": \"story\", \"model\": "
                                "{\"layers\": [{\"type\": \"embedding\", "
                                "\"dim\": 8}, {\"type\": "
                                "\"transformer_block\", \"heads\": 3}, "
                                "{\"type\": \"lm_head\"}]}}"),
               "model.layers[1].heads", "divide");
    /* a context longer than the text */
    snprintf(body, sizeof body,
             "{\"dataset\": \"story\", \"model\": {\"layers\": %s}, "
             "\"hyperparameters\": {\"context_length\": 65536}}",
             GPT_LAYERS);
    expect_422(post("/v1/jobs", body), "hyperparameters.context_length",
               "no window");
    /* the next token's loss only */
    snprintf(body, sizeof body,
             "{\"dataset\": \"story\", \"model\": {\"layers\": %s}, "
             "\"hyperparameters\": {\"loss\": \"mse\"}}",
             GPT_LAYERS);
    expect_422(post("/v1/jobs", body), "hyperparameters.loss", "next token");
    /* token layers and context_length need a text dataset */
    snprintf(body, sizeof body,
             "{\"dataset\": \"%s\", \"model\": {\"layers\": [{\"type\": "
             "\"dense\", \"units\": 3}]}, \"hyperparameters\": "
             "{\"context_length\": 8}}",
             csv_ds);
    expect_422(post("/v1/jobs", body), "hyperparameters.context_length",
               "text and tokens");
    snprintf(body, sizeof body,
             "{\"dataset\": \"%s\", \"model\": {\"layers\": %s}}", csv_ds,
             GPT_LAYERS);
    expect_422(post("/v1/jobs", body), "model.layers[0].vocab_size",
               "needs token ids: train it on a text dataset");
    /* a validation dataset of another kind */
    snprintf(body, sizeof body,
             "{\"dataset\": \"story\", \"validation\": {\"dataset\": \"%s\"}, "
             "\"model\": {\"layers\": %s}}",
             csv_ds, GPT_LAYERS);
    expect_422(post("/v1/jobs", body), "validation.dataset",
               "not a text or tokens");
    /* a classifier on numbers has no tokenizer and no top_k; a text dataset does not
     * fit it */
    snprintf(path, sizeof path, "/v1/models/%s/tokenize", csv_model);
    expect_422(post(path, "{\"content\": \"x\"}"), NULL,
               "models trained on text");
    snprintf(path, sizeof path, "/v1/models/%s/predict", csv_model);
    expect_422(post(path, "{\"inputs\": [[1, 2]], \"top_k\": 3}"), "top_k",
               "language models");
    snprintf(path, sizeof path, "/v1/models/%s/evaluate", csv_model);
    snprintf(body, sizeof body, "{\"dataset\": \"%s\"}", text_ds);
    expect_422(post(path, body), "dataset", "language_modeling");
    snprintf(path, sizeof path, "/v1/models/%s/evaluate", model_id);
    snprintf(body, sizeof body, "{\"dataset\": \"%s\"}", csv_ds);
    expect_422(post(path, body), "dataset", "classification");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_train_gpt_on_text),
        cmocka_unit_test(test_model_document),
        cmocka_unit_test(test_next_token_predict),
        cmocka_unit_test(test_tokenize_detokenize),
        cmocka_unit_test(test_evaluate_on_text),
        cmocka_unit_test(test_cli),
        cmocka_unit_test(test_fine_tune),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
