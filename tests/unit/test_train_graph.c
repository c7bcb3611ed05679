/* test_train_graph.c - the trainer's CUDA-graph path, proven on the CPU.
 *
 * fake_graph.h is a device with a CUDA stream's and CUDA graphs' semantics
 * (calls queued with by-value arguments and run at sync points; a capture
 * records them and a launch replays the recording, reading memory at
 * replay; uploads from pinned memory read it late). The same runs - an MLP
 * with Adam and a CNN with batchnorm with AdamW, both under a cosine
 * schedule with warm-up so the learning rate and the bias corrections
 * change every step, and a regression MLP with Nesterov SGD under a step
 * schedule; several epochs with a short last batch, validation on - train
 * (a) on fake_device.h op by op with every call done when it returns,
 * (b) on fake_graph with graphs, (c) on fake_graph with cuda_graph false.
 * All give the same bits for every weight and the same epoch losses and
 * accuracies; (b) really replayed (launches counted) and never did in a
 * capture what CUDA forbids there. Dropout runs op by op and says so; a
 * capture that fails at its start or end falls back to op by op, same
 * bits, with the reason in the epoch record. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "models/safetensors.h"
#include "models/train/train.h"
#include "fake_graph.h"
#include "synth_data.h"
#include "testutil.h"

/* The suite's scratch folder (tu_tmpdir_setup makes it, teardown removes it). */
static const char *const dir = tu_tmpdir;

static const char *const mlp =
    "{\"layers\":[{\"type\":\"flatten\"},{\"type\":\"dense\",\"units\":16},"
    "{\"type\":\"relu\"},{\"type\":\"dense\",\"units\":3}]}";
static const char *const mlp2 =
    "{\"layers\":[{\"type\":\"flatten\"},{\"type\":\"dense\",\"units\":16},"
    "{\"type\":\"tanh\"},{\"type\":\"dense\",\"units\":2}]}";
static const char *const mlp_dropout =
    "{\"layers\":[{\"type\":\"flatten\"},{\"type\":\"dense\",\"units\":16},"
    "{\"type\":\"relu\"},{\"type\":\"dropout\",\"rate\":0.2},"
    "{\"type\":\"dense\",\"units\":3}]}";
static const char *const cnn =
    "{\"layers\":[{\"type\":\"conv2d\",\"filters\":4,\"kernel_size\":3,"
    "\"padding\":\"same\"},{\"type\":\"batchnorm\"},{\"type\":\"relu\"},"
    "{\"type\":\"maxpool2d\",\"pool_size\":2},{\"type\":\"flatten\"},"
    "{\"type\":\"dense\",\"units\":3}]}";

/* 3 epochs of 40 examples in batches of 16: steps of 16, 16 and 8. */
static const char *const adam_cosine =
    "{\"epochs\":3,\"batch_size\":16,\"seed\":5,\"optimizer\":\"adam\","
    "\"learning_rate\":0.01,\"lr_schedule\":{\"type\":\"cosine\","
    "\"min_lr\":0.001},\"warmup_steps\":3}";
static const char *const adamw_cosine =
    "{\"epochs\":3,\"batch_size\":16,\"seed\":7,\"optimizer\":\"adamw\","
    "\"learning_rate\":0.01,\"weight_decay\":0.05,\"lr_schedule\":{\"type\":"
    "\"cosine\",\"min_lr\":0.0},\"warmup_steps\":2}";
/* bf16: the dense layers' 16-bit weight copy is refreshed inside the
 * captured optimizer step. */
static const char *const adam_cosine_bf16 =
    "{\"epochs\":3,\"batch_size\":16,\"seed\":9,\"optimizer\":\"adam\","
    "\"learning_rate\":0.01,\"lr_schedule\":{\"type\":\"cosine\","
    "\"min_lr\":0.001},\"warmup_steps\":3,\"precision\":\"bf16\"}";
static const char *const sgd_step =
    "{\"epochs\":3,\"batch_size\":16,\"seed\":3,\"optimizer\":\"sgd\","
    "\"learning_rate\":0.05,\"momentum\":0.9,\"nesterov\":true,"
    "\"lr_schedule\":{\"type\":\"step\",\"step_epochs\":1,\"gamma\":0.5},"
    "\"warmup_steps\":2}";

#define N_EX 40u
#define N_VAL 12u
#define MAX_EPOCHS 8

static float target_scale = 1.0f; /* regression targets' scale */

/* s: N_EX training examples of shape (2, 6, 6), 3 classes (or 2
 * regression targets); v: N_VAL more for validation. */
static void make_data(synth *s, uint32_t n, uint32_t salt, ty_task task)
{
    const uint32_t shape[3] = {2, 6, 6};
    synth_init(s, task, n, shape, 3, TY_DTYPE_F32,
               task == TY_TASK_CLASSIFICATION ? 3 : 2, "standardize");
    for (uint32_t i = 0; i < n; i++) {
        uint32_t k = i + salt;
        if (task == TY_TASK_CLASSIFICATION)
            s->y[i] = (int32_t)(k % 3);
        else {
            s->yv[2 * i] = (float)(k % 5) * 0.25f * target_scale;
            s->yv[2 * i + 1] = ((float)(k % 3) - 1.0f) * target_scale;
        }
        for (uint32_t j = 0; j < s->ds.features; j++)
            ((float *)s->x)[(size_t)i * s->ds.features + j] =
                (float)((k * 7 + j * 3) % 11) / 11.0f + (float)(k % 3);
    }
}

typedef struct {
    train_epoch_metrics m[MAX_EPOCHS];
    char reason[MAX_EPOCHS][200];
    int n;
} run_log;

static void on_epoch(void *ctx, const train_epoch_metrics *m)
{
    run_log *r = ctx;
    assert_true(r->n < MAX_EPOCHS);
    r->m[r->n] = *m;
    snprintf(r->reason[r->n], sizeof r->reason[0], "%s",
             m->cuda_graph_reason ? m->cuda_graph_reason : "");
    r->n++;
}

typedef struct {
    const char *spec, *hp;
    ty_task task;
} run_case;

/* Trains c on be (a fake device) into dir/name; hp_extra is merged into
 * the case's hyperparameters. Returns the train_run status. */
static ty_status train_on(const run_case *c, const nn_backend *be,
                          const char *hp_extra, int prefetch, const char *name,
                          run_log *log, ty_err *err)
{
    synth s, v;
    make_data(&s, N_EX, 0, c->task);
    make_data(&v, N_VAL, 100, c->task);
    json_t *spec = json_loads(c->spec, 0, NULL);
    json_t *hpj = json_loads(c->hp, 0, NULL);
    assert_non_null(spec);
    assert_non_null(hpj);
    if (hp_extra) {
        json_t *x = json_loads(hp_extra, 0, NULL);
        assert_non_null(x);
        json_object_update(hpj, x);
        json_decref(x);
    }
    train_hparams hp;
    assert_int_equal(train_hparams_parse(hpj, &hp, NULL, err), TY_OK);
    assert_int_equal(
        train_hparams_resolve_loss(
            &hp, c->task, c->task == TY_TASK_CLASSIFICATION ? 3 : 2, NULL, err),
        TY_OK);
    char path[128];
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, name);
    unlink(path);
    memset(log, 0, sizeof *log);
    nn_exec ex = {0};
    train_job job = {.spec = spec,
                     .hp = &hp,
                     .train = &s.ds,
                     .val = &v.ds,
                     .model_path = path,
                     .threads = 1,
                     .prefetch = prefetch,
                     .cb = {.ctx = log, .on_epoch = on_epoch},
                     .be = be,
                     .ex = &ex};
    train_epoch_metrics fin;
    ty_status st = train_run(&job, &fin, err);
    json_decref(spec);
    json_decref(hpj);
    synth_free(&s);
    synth_free(&v);
    return st;
}

/* Every tensor of dir/a and dir/b has the same bits. */
static void assert_same_weights(const char *a, const char *b)
{
    char pa[128], pb[128];
    snprintf(pa, sizeof pa, "%s/%s.safetensors", dir, a);
    snprintf(pb, sizeof pb, "%s/%s.safetensors", dir, b);
    st_file fa, fb;
    ty_err err = {0};
    assert_int_equal(st_open(pa, &fa, &err), TY_OK);
    assert_int_equal(st_open(pb, &fb, &err), TY_OK);
    assert_int_equal(fa.count, fb.count);
    assert_true(fa.count > 0);
    for (size_t i = 0; i < fa.count; i++) {
        const st_tensor *x = &fa.tensors[i], *y = st_find(&fb, x->name);
        assert_non_null(y);
        assert_int_equal(x->numel, y->numel);
        if (memcmp(x->data, y->data, x->numel * 4) != 0)
            fail_msg("%s vs %s: tensor %s differs", a, b, x->name);
    }
    st_close(&fa);
    st_close(&fb);
}

static void assert_same_epochs(const run_log *a, const run_log *b)
{
    assert_int_equal(a->n, b->n);
    for (int e = 0; e < a->n; e++) {
        const train_epoch_metrics *x = &a->m[e], *y = &b->m[e];
        if (x->train_loss != y->train_loss)
            fail_msg("epoch %d: train loss %.17g vs %.17g", e + 1,
                     x->train_loss, y->train_loss);
        assert_true(x->train_accuracy == y->train_accuracy);
        assert_true(x->val_loss == y->val_loss);
        assert_true(x->val_accuracy == y->val_accuracy);
        assert_true(x->val_loss >= 0.0);
    }
}

/* (a), (b) and (c) of the file comment for one case. */
static void check_case(const run_case *c, const char *tag)
{
    ty_err err = {0};
    run_log a, b, cl;
    char na[64], nb[64], nc[64];
    snprintf(na, sizeof na, "%s_eager", tag);
    snprintf(nb, sizeof nb, "%s_graph", tag);
    snprintf(nc, sizeof nc, "%s_nograph", tag);

    if (train_on(c, &fake_device, NULL, -1, na, &a, &err) != TY_OK)
        fail_msg("%s", err.msg);
    fake_graph_launches = fake_graph_captures = fake_graph_violations = 0;
    fake_graph_deferred_reads = 0;
    /* The loader's own thread fills the other pinned slot meanwhile. */
    if (train_on(c, &fake_graph, NULL, 1, nb, &b, &err) != TY_OK)
        fail_msg("%s", err.msg);
    /* Epoch 1: step 1 op by op, step 2 captured and launched, the short
     * step 3 op by op; then 2 replays an epoch. */
    assert_int_equal(fake_graph_captures, 1);
    assert_int_equal(fake_graph_launches, 5);
    assert_int_equal(fake_graph_violations, 0);
    assert_true(fake_graph_deferred_reads >= 9); /* pinned, read late */
    for (int e = 0; e < b.n; e++) {
        assert_int_equal(b.m[e].cuda_graph, 1);
        assert_string_equal(b.reason[e], "");
        assert_int_equal(a.m[e].cuda_graph, 0);
        assert_non_null(strstr(a.reason[e], "cannot capture graphs"));
    }
    assert_same_weights(na, nb);
    assert_same_epochs(&a, &b);
    /* The precision asked for is the one that ran (the fakes train every
     * precision). */
    const char *want = strstr(c->hp, "bf16") ? "bf16" : "fp32";
    assert_string_equal(a.m[0].precision, want);
    assert_string_equal(b.m[0].precision, want);

    fake_graph_launches = 0;
    if (train_on(c, &fake_graph, "{\"cuda_graph\":false}", -1, nc, &cl, &err) !=
        TY_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(fake_graph_launches, 0);
    assert_int_equal(cl.m[0].cuda_graph, 0);
    assert_string_equal(cl.reason[0], "hyperparameters.cuda_graph is false");
    assert_same_weights(na, nc);
    assert_same_epochs(&a, &cl);
    assert_int_equal(fake_live, 0);
}

static void test_mlp_adam(void **state)
{
    (void)state;
    run_case c = {mlp, adam_cosine, TY_TASK_CLASSIFICATION};
    check_case(&c, "mlp");
}

static void test_cnn_batchnorm_adamw(void **state)
{
    (void)state;
    run_case c = {cnn, adamw_cosine, TY_TASK_CLASSIFICATION};
    check_case(&c, "cnn");
}

static void test_regression_sgd(void **state)
{
    (void)state;
    run_case c = {mlp2, sgd_step, TY_TASK_REGRESSION};
    check_case(&c, "reg");
}

static void test_mlp_bf16(void **state)
{
    (void)state;
    run_case c = {mlp, adam_cosine_bf16, TY_TASK_CLASSIFICATION};
    check_case(&c, "bf16");
}

/* Dropout's masks come from the host each step: op by op, said once per
 * epoch record, same bits as the synchronous device. */
static void test_dropout_runs_op_by_op(void **state)
{
    (void)state;
    ty_err err = {0};
    run_log a, b;
    run_case c = {mlp_dropout, adam_cosine, TY_TASK_CLASSIFICATION};
    assert_int_equal(
        train_on(&c, &fake_device, NULL, -1, "drop_eager", &a, &err), TY_OK);
    fake_graph_launches = fake_graph_captures = 0;
    assert_int_equal(train_on(&c, &fake_graph, NULL, 1, "drop_graph", &b, &err),
                     TY_OK);
    assert_int_equal(fake_graph_launches, 0);
    assert_int_equal(fake_graph_captures, 0);
    for (int e = 0; e < b.n; e++) {
        assert_int_equal(b.m[e].cuda_graph, 0);
        assert_non_null(strstr(b.reason[e], "dropout"));
    }
    assert_same_weights("drop_eager", "drop_graph");
    assert_same_epochs(&a, &b);
}

/* Accumulation and clipping also run op by op, with their reasons. */
static void test_other_exclusions(void **state)
{
    (void)state;
    ty_err err = {0};
    run_log r;
    run_case c = {mlp, adam_cosine, TY_TASK_CLASSIFICATION};
    fake_graph_launches = 0;
    if (train_on(&c, &fake_graph, "{\"accumulation_steps\":2}", -1, "accum", &r,
                 &err) != TY_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(r.m[0].cuda_graph, 0);
    assert_non_null(strstr(r.reason[0], "accumulation_steps"));
    if (train_on(&c, &fake_graph, "{\"clip_grad_norm\":0.5}", -1, "clip", &r,
                 &err) != TY_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(r.m[0].cuda_graph, 0);
    assert_non_null(strstr(r.reason[0], "clip_grad_norm"));
    if (train_on(&c, &fake_graph, "{\"precision\":\"fp16\"}", -1, "fp16", &r,
                 &err) != TY_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(r.m[0].cuda_graph, 0);
    assert_non_null(strstr(r.reason[0], "fp16"));
    assert_int_equal(fake_graph_launches, 0);
}

/* A capture refused at its start or at its end: the run goes on op by op
 * from that very step, never fails, gives the same bits, and says why. */
static void test_capture_failure_falls_back(void **state)
{
    (void)state;
    ty_err err = {0};
    run_log a, b;
    run_case c = {cnn, adamw_cosine, TY_TASK_CLASSIFICATION};
    assert_int_equal(train_on(&c, &fake_device, NULL, -1, "fb_eager", &a, &err),
                     TY_OK);
    for (int where = 0; where < 2; where++) {
        fake_graph_launches = fake_graph_captures = 0;
        fake_graph_fail_begin = where == 0;
        fake_graph_fail_end = where == 1;
        assert_int_equal(
            train_on(&c, &fake_graph, NULL, 1, "fb_graph", &b, &err), TY_OK);
        assert_int_equal(fake_graph_fail_begin + fake_graph_fail_end, 0);
        assert_int_equal(fake_graph_launches, 0);
        assert_int_equal(fake_graph_captures, 0);
        for (int e = 0; e < b.n; e++) {
            assert_int_equal(b.m[e].cuda_graph, 0);
            assert_non_null(strstr(b.reason[e], where ? "capture failed: fake "
                                                        "graph: instantiation "
                                                        "refused"
                                                      : "could not start"));
        }
        assert_same_weights("fb_eager", "fb_graph");
        assert_same_epochs(&a, &b);
    }
    assert_int_equal(fake_live, 0);
}

/* A loss that stops being finite is found when the device's sums are
 * read (progress, checkpoint, epoch end) and still fails the job, naming
 * the steps since the last read; no model file is written. */
static void test_diverging_loss_fails(void **state)
{
    (void)state;
    ty_err err = {0};
    run_log r;
    run_case c = {mlp2,
                  "{\"epochs\":50,\"batch_size\":16,\"seed\":1,"
                  "\"optimizer\":\"sgd\",\"learning_rate\":10}",
                  TY_TASK_REGRESSION};
    target_scale = 1e4f;
    ty_status st = train_on(&c, &fake_graph, NULL, 1, "nan", &r, &err);
    target_scale = 1.0f;
    assert_int_equal(st, TY_EINVAL);
    assert_string_equal(err.field, "hyperparameters.learning_rate");
    assert_non_null(strstr(err.msg, "between steps"));
    assert_non_null(strstr(err.msg, "lower learning_rate"));
    char path[128];
    snprintf(path, sizeof path, "%s/nan.safetensors", dir);
    assert_false(fs_exists(path));
    assert_int_equal(fake_live, 0);
}

/* A language model (issue 31's layers) on a device: its loss sums into
 * nn_exec.acc like the other losses (xent_ignore), so the trainer no
 * longer refuses it and its steps capture and replay like the MLP's.
 * 40 windows of 8 tokens (vocabulary 13, every 7th target -1, not
 * counted) in batches of 16: the same steps as the cases above. Op by op
 * on fake_device, with graphs and with cuda_graph false on fake_graph,
 * and on the CPU backend itself: the same bits everywhere. */
#define LM_T 8u
#define LM_V 13u

static void make_lm(synth *s, uint32_t n, uint32_t salt)
{
    const uint32_t shape[1] = {LM_T};
    synth_init(s, TY_TASK_LANGUAGE_MODELING, n, shape, 1, TY_DTYPE_F32, LM_T,
               "none");
    s->ds.num_classes = LM_V;
    for (uint32_t i = 0; i < n * LM_T; i++) {
        uint32_t tok = (i * 5 + salt) % LM_V;
        ((float *)s->x)[i] = (float)tok;
        s->yv[i] = i % 7 == 3 ? -1.0f : (float)((tok * 5 + 1) % LM_V);
    }
}

static ty_status train_lm_on(const nn_backend *be, const char *hp_text,
                             const char *name, run_log *log, ty_err *err)
{
    synth s, v;
    make_lm(&s, N_EX, 0);
    make_lm(&v, N_VAL, 3);
    json_t *spec =
        json_loads("{\"layers\":[{\"type\":\"embedding\",\"dim\":16},"
                   "{\"type\":\"positional_embedding\"},"
                   "{\"type\":\"transformer_block\",\"heads\":2},"
                   "{\"type\":\"layernorm\"},{\"type\":\"lm_head\"}]}",
                   0, NULL);
    json_t *hpj = json_loads(hp_text, 0, NULL);
    assert_non_null(spec);
    assert_non_null(hpj);
    train_hparams hp;
    assert_int_equal(train_hparams_parse(hpj, &hp, NULL, err), TY_OK);
    assert_int_equal(train_hparams_resolve_loss(&hp, TY_TASK_LANGUAGE_MODELING,
                                                LM_V, NULL, err),
                     TY_OK);
    char path[128];
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, name);
    unlink(path);
    memset(log, 0, sizeof *log);
    nn_exec ex = {0};
    train_job job = {.spec = spec,
                     .hp = &hp,
                     .train = &s.ds,
                     .val = &v.ds,
                     .model_path = path,
                     .threads = 1,
                     .prefetch = -1,
                     .cb = {.ctx = log, .on_epoch = on_epoch},
                     .be = be,
                     .ex = be == &nn_backend_cpu ? NULL : &ex};
    train_epoch_metrics fin;
    ty_status st = train_run(&job, &fin, err);
    json_decref(spec);
    json_decref(hpj);
    synth_free(&s);
    synth_free(&v);
    return st;
}

static void test_language_model(void **state)
{
    (void)state;
    static const char *const hp =
        "{\"epochs\":3,\"batch_size\":16,\"seed\":4,\"optimizer\":"
        "\"adamw\",\"learning_rate\":0.01,\"weight_decay\":0.01,"
        "\"context_length\":8,\"lr_schedule\":{\"type\":\"cosine\"},"
        "\"warmup_steps\":2}";
    static const char *const hp_nograph =
        "{\"epochs\":3,\"batch_size\":16,\"seed\":4,\"optimizer\":"
        "\"adamw\",\"learning_rate\":0.01,\"weight_decay\":0.01,"
        "\"context_length\":8,\"lr_schedule\":{\"type\":\"cosine\"},"
        "\"warmup_steps\":2,\"cuda_graph\":false}";
    ty_err err = {0};
    run_log a, b, c, d;
    if (train_lm_on(&fake_device, hp, "lm_eager", &a, &err) != TY_OK)
        fail_msg("%s", err.msg);
    fake_graph_launches = fake_graph_captures = fake_graph_violations = 0;
    if (train_lm_on(&fake_graph, hp, "lm_graph", &b, &err) != TY_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(fake_graph_captures, 1);
    assert_int_equal(fake_graph_launches, 5);
    assert_int_equal(fake_graph_violations, 0);
    for (int e = 0; e < b.n; e++) {
        assert_int_equal(b.m[e].cuda_graph, 1);
        assert_string_equal(b.reason[e], "");
    }
    fake_graph_launches = 0;
    if (train_lm_on(&fake_graph, hp_nograph, "lm_nograph", &c, &err) != TY_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(fake_graph_launches, 0);
    if (train_lm_on(&nn_backend_cpu, hp, "lm_cpu", &d, &err) != TY_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(a.n, 3);
    assert_true(a.m[2].train_loss < a.m[0].train_loss);
    assert_same_weights("lm_eager", "lm_graph");
    assert_same_weights("lm_eager", "lm_nograph");
    assert_same_weights("lm_eager", "lm_cpu");
    assert_same_epochs(&a, &b);
    assert_same_epochs(&a, &c);
    assert_same_epochs(&a, &d);
    assert_int_equal(fake_live, 0);
}

int main(void)
{
    fake_graph_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mlp_adam),
        cmocka_unit_test(test_cnn_batchnorm_adamw),
        cmocka_unit_test(test_regression_sgd),
        cmocka_unit_test(test_mlp_bf16),
        cmocka_unit_test(test_dropout_runs_op_by_op),
        cmocka_unit_test(test_other_exclusions),
        cmocka_unit_test(test_capture_failure_falls_back),
        cmocka_unit_test(test_diverging_loss_fails),
        cmocka_unit_test(test_language_model),
    };
    return cmocka_run_group_tests(tests, tu_tmpdir_setup, tu_tmpdir_teardown);
}
