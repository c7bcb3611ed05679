/*
 * Integration tests for text classification (issue 31) through a live
 * server: a CSV with a text column uploaded as a text classification
 * dataset, a bidirectional transformer (causal false, dropout, padding
 * mask, sequence_pool) trained on it, and the model it makes: its document
 * (tokenizer, max_length, vocabulary), predict on texts and on token ids,
 * tokenize, evaluate, and the refusals.
 *
 * The texts are a small grammar's sentences of varying length ("the old
 * king sees a red apple", "a bird hears the river near the castle"); the
 * label is whether a person or an animal does the seeing, which sits at
 * the start of the text while the lengths vary, so the model must pool the
 * right tokens and skip the padding. A classifier that learned nothing is
 * right half the time; the test asks for 90% on the held-out split.
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
static char ds_id[64], model_id[64];

static const char *subj[] = {"the cat",   "a dog",     "a bird",
                             "the queen", "my friend", "the old king"};

static void write_reviews(const char *path, int n)
{
    static const char *verb[] = {"sees", "loves", "finds", "follows"};
    static const char *obj[] = {"the moon", "a red apple", "the river",
                                "her brother"};
    static const char *tail[] = {"", " near the castle", " every day",
                                 " in the small boat at night"};
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "id,text,label\n");
    uint64_t s = 777;
    for (int i = 0; i < n; i++) {
        int k[4];
        for (int j = 0; j < 4; j++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            k[j] = (int)((s >> 33) % (j == 0 ? 6 : 4));
        }
        fprintf(f, "%d,\"%s %s %s%s\",%s\n", i, subj[k[0]], verb[k[1]],
                obj[k[2]], tail[k[3]], k[0] < 3 ? "animal" : "person");
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

static resp *post(const char *path, const char *body)
{
    return http_json(&server, "POST", path, body);
}

/* A 422 naming field (NULL: not checked) whose detail holds needle. */
static void expect_422(resp *r, const char *field, const char *needle)
{
    expect_refusal(&server, r, 422, field, needle);
}

#define ENCODER(units)                                                    \
    "{\"layers\": [{\"type\": \"embedding\", \"dim\": 32},"               \
    " {\"type\": \"positional_embedding\"},"                              \
    " {\"type\": \"transformer_block\", \"heads\": 4, \"causal\": false," \
    " \"dropout\": 0.1},"                                                 \
    " {\"type\": \"layernorm\"}, {\"type\": \"sequence_pool\"},"          \
    " {\"type\": \"dense\", \"units\": " units "}]}"

static void test_train_text_classifier(void **state)
{
    (void)state;
    char csv[PATH_MAX], part[PATH_MAX + 16];
    snprintf(csv, sizeof csv, "%s/reviews.csv", files);
    write_reviews(csv, 600);
    snprintf(part, sizeof part, "file=@%s", csv);
    const char *parts[] = {"name=reviews",
                           "format=csv",
                           "label_column=label",
                           "text_column=text",
                           "max_length=24",
                           part,
                           NULL};
    resp *r = http_upload(&server, "/v1/datasets", parts);
    if (r->status != 201)
        fprintf(stderr, "%.*s\n", (int)r->len, r->body);
    expect_status(r, 201);
    snprintf(ds_id, sizeof ds_id, "%s", str(r->json, "id"));
    assert_int_equal(json_integer_value(json_object_get(r->json, "vocab_size")),
                     256);
    resp_free(r);

    /* the embedding's vocab_size comes from the dataset */
    r = post("/v1/jobs",
             "{\"dataset\": \"reviews\", \"name\": \"reviews-enc\", "
             "\"model\": " ENCODER(
                 "2") ", \"hyperparameters\": {\"epochs\": 12, "
                      "\"batch_size\": 32, \"optimizer\": \"adamw\", "
                      "\"learning_rate\": 0.003, \"seed\": 3}}");
    expect_status(r, 202);
    const json_t *layers =
        json_object_get(json_object_get(r->json, "spec"), "layers");
    assert_int_equal(json_integer_value(json_object_get(
                         json_array_get(layers, 0), "vocab_size")),
                     256);
    char job[64];
    snprintf(job, sizeof job, "%s", str(r->json, "id"));
    resp_free(r);
    json_t *j = wait_job(&server, job, 600);
    if (strcmp(str(j, "status"), "succeeded"))
        fprintf(stderr, "job: %s\n", json_dumps(j, 0));
    assert_string_equal(str(j, "status"), "succeeded");
    snprintf(model_id, sizeof model_id, "%s", str(j, "model"));
    json_decref(j);

    char path[160];
    snprintf(path, sizeof path, "/v1/jobs/%s/metrics", job);
    r = http_get(&server, path);
    expect_status(r, 200);
    const json_t *eps = json_object_get(r->json, "epochs");
    const json_t *last = json_array_get(eps, json_array_size(eps) - 1);
    double acc = json_number_value(json_object_get(last, "val_accuracy"));
    fprintf(stderr, "val_accuracy %.3f val_loss %.4f\n", acc,
            json_number_value(json_object_get(last, "val_loss")));
    assert_true(acc >= 0.9);
    resp_free(r);
}

static void test_model_and_predict(void **state)
{
    (void)state;
    char path[160];
    snprintf(path, sizeof path, "/v1/models/%s", model_id);
    resp *r = http_get(&server, path);
    expect_status(r, 200);
    assert_string_equal(str(r->json, "task"), "classification");
    assert_string_equal(str(r->json, "tokenizer"), "byte");
    assert_int_equal(json_integer_value(json_object_get(r->json, "max_length")),
                     24);
    assert_int_equal(json_integer_value(json_object_get(r->json, "vocab_size")),
                     256);
    resp_free(r);

    /* texts in, classes out; the second is the first as token ids, the
     * third is longer than max_length (cut as the training rows were) and
     * the fourth empty (all padding: a class all the same) */
    snprintf(path, sizeof path, "/v1/models/%s/predict", model_id);
    r = post(path, "{\"inputs\": [\"the queen finds the river\", [97, 32, "
                   "100, 111, 103, 32, 115, 101, 101, 115], \"a dog sees the "
                   "moon near the castle every day in the small boat\", "
                   "\"\"]}");
    if (r->status != 200)
        fprintf(stderr, "%.*s\n", (int)r->len, r->body);
    expect_status(r, 200);
    const json_t *preds = json_object_get(r->json, "predictions");
    assert_int_equal(json_array_size(preds), 4);
    assert_string_equal(json_string_value(json_array_get(preds, 0)), "person");
    assert_string_equal(json_string_value(json_array_get(preds, 1)), "animal");
    assert_string_equal(json_string_value(json_array_get(preds, 2)), "animal");
    resp_free(r);
    /* the same text as text and as ids gives the same outputs */
    r = post(path, "{\"inputs\": [\"a dog sees\", [97, 32, 100, 111, 103, 32, "
                   "115, 101, 101, 115]]}");
    expect_status(r, 200);
    const json_t *outs = json_object_get(r->json, "outputs");
    for (size_t k = 0; k < 2; k++)
        assert_float_equal(
            json_number_value(json_array_get(json_array_get(outs, 0), k)),
            json_number_value(json_array_get(json_array_get(outs, 1), k)), 0.0);
    resp_free(r);
    expect_422(post(path, "{\"inputs\": [\"ok\", [1, 256]]}"), "inputs[1]",
               "token id from 0 to 255");
    expect_422(post(path, "{\"inputs\": [3.5]}"), "inputs[0]", "string");

    /* its tokenizer, as a language model's */
    snprintf(path, sizeof path, "/v1/models/%s/tokenize", model_id);
    r = post(path, "{\"content\": \"hi\"}");
    expect_status(r, 200);
    const json_t *tok = json_object_get(r->json, "tokens");
    assert_int_equal(json_array_size(tok), 2);
    assert_int_equal(json_integer_value(json_array_get(tok, 0)), 'h');
    resp_free(r);

    /* evaluate on its own dataset: a classifier's figures */
    snprintf(path, sizeof path, "/v1/models/%s/evaluate", model_id);
    char body[128];
    snprintf(body, sizeof body, "{\"dataset\": \"%s\"}", ds_id);
    r = post(path, body);
    if (r->status != 200)
        fprintf(stderr, "%.*s\n", (int)r->len, r->body);
    expect_status(r, 200);
    assert_true(json_number_value(json_object_get(r->json, "accuracy")) >= 0.9);
    resp_free(r);
}

static void test_refusals(void **state)
{
    (void)state;
    /* a model on a text dataset must start from token ids */
    expect_422(post("/v1/jobs",
                    "{\"dataset\": \"reviews\", \"model\": {\"layers\": "
                    "[{\"type\": \"dense\", \"units\": 2}]}}"),
               "model.layers[0]", "start the model with");
    /* an lm_head is a language model's */
    expect_422(post("/v1/jobs",
                    "{\"dataset\": \"reviews\", \"model\": {\"layers\": "
                    "[{\"type\": \"embedding\", \"dim\": 8}, {\"type\": "
                    "\"lm_head\"}]}}"),
               "model.layers[1].type", "text or tokens dataset");
    /* sequence_pool's mode */
    expect_422(post("/v1/jobs",
                    "{\"dataset\": \"reviews\", \"model\": {\"layers\": "
                    "[{\"type\": \"embedding\", \"dim\": 8}, {\"type\": "
                    "\"sequence_pool\", \"mode\": \"max\"}, {\"type\": "
                    "\"dense\", \"units\": 2}]}}"),
               "model.layers[1].mode", "mean");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_train_text_classifier),
        cmocka_unit_test(test_model_and_predict),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
