/*
 * test_parity.c - the engine against PyTorch: for each reference file that
 * tests/parity/make_reference.py wrote (same spec, weights and batch in
 * torch), the engine's training-mode outputs, loss, every parameter
 * gradient, batchnorm's running statistics after the forward, and the
 * parameters after one and two optimizer steps must match torch's.
 *
 *   test_parity [--threads N] REF_DIR CASE...  (ctest runs one case per
 *                                               test)
 *
 * --threads N runs the engine's kernels on a pool of N threads (the
 * language models run again so, the parallel kernels against torch too).
 *
 * The measure, per tensor: rel = max|a - b| / max(max|b|, floor), a ours and
 * b torch's. floor keeps tensors that are zero up to rounding noise (the
 * gradient of a bias that a batchnorm cancels) from dividing by nothing: it
 * is 1e-3 times the largest max|b| among the case's tensors of the same kind
 * (all gradients, or all step updates), and 1e-6 for the outputs and the
 * loss. Steps are compared as updates (after - before), which a small
 * learning rate would hide in the weights; an update is known only to the
 * float32 spacing of its weights (one ulp of a weight near 1 is 1.2e-7,
 * 1.2e-4 of a 1e-3 update), so a step's floor is also at least the one
 * that lets a tensor's updates differ by one ulp of its largest weight
 * (2 max|before| FLT_EPSILON / 1e-4). Every tensor must have rel <= 1e-4;
 * the worst per tensor is printed.
 *
 * Each optimizer step starts from torch's parameters and gradients (step 1:
 * the reference weights and "grad.*"; step 2: torch's "step1.*" weights and
 * "grad2.*", with the optimizer state our step 1 left), so it compares the
 * optimizers alone. Fed our own gradients instead, Adam's first step,
 * lr * g / (|g| + eps), would turn the 1e-7 relative rounding of a gradient
 * near eps into a percent of its update: torch itself differs that much
 * between float32 and float64 there.
 *
 * Language-model cases (task "language_modeling", issue 31; llm.c's
 * test_gpt2.c checks the same things): the input is (N, T) token ids as
 * float32, "targets" (N, T) the next-token ids as float32 (-1: ignored),
 * given to nn_loss as values, as regression targets are. On top of the
 * relative measure: the logits within 1e-5 absolute, the loss (nn_loss
 * returns the mean over the counted positions times n) within 1e-6
 * absolute; ten AdamW steps that each side runs on its own from the same
 * weights on ten stored batches, each step's loss within 1e-5 absolute
 * (the weights after them are printed as information); and the
 * weight exchange: torch's state dict saved as a trainyard model file
 * (<case>.model.safetensors) imports (nn_model_import), its tensors have
 * exactly the engine's names and shapes, and the engine's state block
 * written as a model file (<case>.engine.safetensors) holds torch's
 * initial weights bit for bit (check_exchange.py then loads it into torch).
 *
 * Text-classifier cases (task "classification" whose input is token ids,
 * issue 31's second half) get the same checks as language models (the
 * reference names "traj_steps" for both), on ids padded with -1 after the
 * text, with a sequence of length 0 and one of full length in every batch:
 * labels instead of targets ("traj.labels" for the ten steps). With
 * "eval_dropout_spec" (the same network, dropout p > 0), the engine's
 * eval-mode logits must be torch's ("eval.output", 1e-5 absolute) and the
 * dropout-p network's must equal the dropout-0 network's bit for bit. In
 * training, dropout draws its masks from the engine's generator, which
 * torch does not share, so a dropout-p training step is not compared;
 * that the masks do something is checked (the training logits differ).
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "models/nn_internal.h"
#include "models/pool.h"
#include "models/train/optim.h"
#include "models/safetensors.h"
#include "models/train/train.h"

#define TOL 1e-4
#define FLOOR_KIND 1e-3
#define FLOOR_ABS 1e-6
#define LM_LOGITS_ABS 1e-5 /* language models, absolute */
#define LM_LOSS_ABS 1e-6
#define LM_TRAJ_ABS 1e-5 /* each of the ten AdamW steps' losses */

typedef struct {
    const char *name;
    st_file ref;
    nn_arch arch;
    nn_workspace *ws;
    float *state, *grads, *before, *upd;
    nn_pool *pool; /* --threads N > 1: the workspace's kernels run on it */
    int failed;
} pcase;

static void fail(pcase *c, const char *fmt, const char *a, const char *b)
{
    printf("  FAIL %s: ", c->name);
    printf(fmt, a, b);
    printf("\n");
    c->failed = 1;
}

static const st_tensor *ref_f32(pcase *c, const char *name, uint64_t numel)
{
    const st_tensor *t = st_find(&c->ref, name);
    if (!t) {
        fail(c, "the reference has no tensor '%s'%s", name, "");
        return NULL;
    }
    if (t->dtype != ST_F32 || t->numel != numel) {
        char want[32];
        snprintf(want, sizeof want, "%llu", (unsigned long long)numel);
        fail(c, "reference tensor '%s' is not F32 with %s values", name, want);
        return NULL;
    }
    return t;
}

static float ref_at(const st_tensor *t, uint64_t i)
{
    float v;
    memcpy(&v, (const char *)t->data + i * 4, 4);
    return v;
}

static double max_abs_ref(const st_tensor *t)
{
    double m = 0;
    for (uint64_t i = 0; i < t->numel; i++)
        m = fmax(m, fabs(ref_at(t, i)));
    return m;
}

/* Compares ours (numel) with ref tensor t (minus base when not NULL: an
 * update); prints the result; returns the relative error. */
static double compare(pcase *c, const char *what, const float *ours,
                      const st_tensor *t, const st_tensor *base, double floor)
{
    double diff = 0, scale = 0;
    for (uint64_t i = 0; i < t->numel; i++) {
        double b = ref_at(t, i) - (base ? (double)ref_at(base, i) : 0.0);
        diff = fmax(diff, fabs(ours[i] - b));
        scale = fmax(scale, fabs(b));
        if (!isfinite(ours[i]))
            diff = INFINITY;
    }
    double rel = diff / fmax(scale, floor);
    int ok = rel <= TOL;
    printf("  %-4s %-34s rel %.3e  (max|diff| %.3e, max|torch| %.3e)\n",
           ok ? "ok" : "FAIL", what, rel, diff, scale);
    if (!ok)
        c->failed = 1;
    return rel;
}

/* max|ours - t| over t's values must be <= tol; prints the result. */
static void compare_abs(pcase *c, const char *what, const float *ours,
                        const st_tensor *t, double tol)
{
    double diff = 0;
    for (uint64_t i = 0; i < t->numel; i++) {
        diff = fmax(diff, fabs((double)ours[i] - ref_at(t, i)));
        if (!isfinite(ours[i]))
            diff = INFINITY;
    }
    int ok = diff <= tol;
    printf("  %-4s %-34s abs %.3e  (limit %.0e)\n", ok ? "ok" : "FAIL", what,
           diff, tol);
    if (!ok)
        c->failed = 1;
}

static const char *meta(pcase *c, const char *key)
{
    const char *v = st_meta(&c->ref, key);
    if (!v)
        fail(c, "the reference has no '%s' metadata%s", key, "");
    return v;
}

/* Copies torch's prefix.<name> of every trainable tensor into block (laid
 * out like the state block); 0 when one is missing. */
static int load_trainable(pcase *c, const char *prefix, float *block)
{
    for (uint32_t i = 0; i < c->arch.n_tensors; i++) {
        const nn_named_tensor *nt = &c->arch.tensors[i];
        if (nt->desc->buffer)
            continue;
        char key[160];
        snprintf(key, sizeof key, "%s.%s", prefix, nt->name);
        const st_tensor *t = ref_f32(c, key, nt->desc->numel);
        if (!t)
            return 0;
        memcpy(block + nt->offset, t->data, nt->desc->numel * sizeof(float));
    }
    return 1;
}

/* The largest max|torch| over the case's tensors prefix.<name> (trainable
 * ones), minus base.<name> when base is not NULL. */
static double kind_scale(pcase *c, const char *prefix, const char *base)
{
    double s = 0;
    for (uint32_t i = 0; i < c->arch.n_tensors; i++) {
        const nn_named_tensor *nt = &c->arch.tensors[i];
        if (nt->desc->buffer)
            continue;
        char key[160], bkey[160];
        snprintf(key, sizeof key, "%s.%s", prefix, nt->name);
        const st_tensor *t = st_find(&c->ref, key);
        if (!t || t->numel != nt->desc->numel)
            continue;
        if (!base) {
            s = fmax(s, max_abs_ref(t));
            continue;
        }
        snprintf(bkey, sizeof bkey, "%s.%s", base, nt->name);
        const st_tensor *b = st_find(&c->ref, bkey);
        for (uint64_t k = 0; b && k < t->numel; k++)
            s = fmax(s, fabs((double)ref_at(t, k) - ref_at(b, k)));
    }
    return s;
}

/* The weight exchange of a language-model case, on the initial state
 * (param.*, already in c->state): torch's model file imports, has the
 * engine's names and shapes and no other tensor, and the engine's state
 * block written under its names equals it bit for bit. */
static void lm_exchange(pcase *c, const char *dir, const json_t *spec,
                        ty_task task, uint32_t outs)
{
    char torch_path[4096], imp_path[4096], eng_path[4096];
    ty_err err = {0};
    nn_net *net = NULL;
    st_file tf = {0};
    const nn_arch *a = &c->arch;
    snprintf(torch_path, sizeof torch_path, "%s/%s.model.safetensors", dir,
             c->name);
    snprintf(imp_path, sizeof imp_path, "%s/%s.imported.safetensors", dir,
             c->name);
    snprintf(eng_path, sizeof eng_path, "%s/%s.engine.safetensors", dir,
             c->name);
    if (nn_model_import(torch_path, NULL, imp_path, &net, &err) != TY_OK) {
        fail(c, "torch's state dict does not import as a model file: %s (%s)",
             err.msg, err.field);
        return;
    }
    nn_net_destroy(net);
    if (st_open(torch_path, &tf, &err) != TY_OK) {
        fail(c, "%s (%s)", err.msg, torch_path);
        return;
    }
    st_out_tensor *out = calloc(a->n_tensors + 1, sizeof *out);
    nn_preproc pp = {.kind = NN_PRE_NONE};
    json_t *meta = nn_model_metadata(spec, task, &a->input, outs, NULL, &pp);
    if (!out || !meta) {
        fail(c, "out of memory%s%s", "", "");
        goto done;
    }
    int same = tf.count == a->n_tensors;
    for (uint32_t i = 0; i < a->n_tensors; i++) {
        const nn_named_tensor *nt = &a->tensors[i];
        const float *ours = c->state + nt->offset;
        out[i] = (st_out_tensor){.name = nt->name,
                                 .dtype = ST_F32,
                                 .ndim = nt->desc->ndim,
                                 .data = ours};
        for (uint32_t d = 0; d < nt->desc->ndim; d++)
            out[i].shape[d] = nt->desc->shape[d];
        const st_tensor *t = st_find(&tf, nt->name);
        int ok = t && t->dtype == ST_F32 && t->ndim == nt->desc->ndim &&
                 t->numel == nt->desc->numel;
        for (uint32_t d = 0; ok && d < t->ndim; d++)
            ok = t->shape[d] == nt->desc->shape[d];
        ok = ok && memcmp(t->data, ours, t->numel * sizeof(float)) == 0;
        if (!ok) {
            fail(c,
                 "exchange: torch's model file has no F32 tensor '%s' of the "
                 "engine's shape and bits%s",
                 nt->name, "");
            same = 0;
        }
    }
    if (tf.count != a->n_tensors)
        fail(c,
             "exchange: torch's model file has %s tensors, not the %s "
             "the engine names",
             tf.count > a->n_tensors ? "more" : "fewer", "same");
    if (st_write(eng_path, meta, out, a->n_tensors, &err) != TY_OK) {
        fail(c, "%s (%s)", err.msg, eng_path);
        same = 0;
    }
    printf("  %-4s %-34s %u tensors, names, shapes and bits\n",
           same ? "ok" : "FAIL", "exchange torch -> engine", a->n_tensors);
done:
    json_decref(meta);
    free(out);
    st_close(&tf);
}

/* n labels (I64 in the reference) from tensor name at row `row` (of n)
 * into out; 0 when missing or malformed. */
static int ref_labels(pcase *c, const char *name, uint64_t rows, uint64_t row,
                      uint32_t n, int32_t *out)
{
    const st_tensor *y = st_find(&c->ref, name);
    if (!y || y->dtype != ST_I64 || y->numel != rows * n) {
        fail(c, "bad reference labels '%s'%s", name, "");
        return 0;
    }
    for (uint32_t i = 0; i < n; i++) {
        int64_t v;
        memcpy(&v, (const char *)y->data + 8 * (row * n + i), 8);
        out[i] = (int32_t)v;
    }
    return 1;
}

/* A text classifier with eval_dropout_spec: its eval-mode logits (the
 * state in c->state, the input in "input") against torch's, and those of
 * the same network with dropout p > 0 bit for bit the same; in training
 * mode the dropout-p network's differ (its masks apply). */
static void eval_dropout(pcase *c, const json_t *spec_drop,
                         const uint32_t *shape, uint32_t ndim, uint32_t outs,
                         const nn_loss_spec *loss, uint32_t n)
{
    nn_arch drop = {0};
    nn_workspace *dws = NULL;
    ty_err err = {0};
    ty_rng rng;
    const uint64_t width = nn_shape_numel(&c->arch.output);
    const st_tensor *x = st_find(&c->ref, "input");
    const st_tensor *want = ref_f32(c, "eval.output", (uint64_t)n * width);
    float *plain = calloc((size_t)n * width + 1, sizeof(float));
    if (!want || !plain)
        goto done;
    if (nn_arch_build_for_loss(spec_drop, shape, ndim, outs,
                               TY_TASK_CLASSIFICATION, loss, &drop, NULL,
                               &err) != TY_OK) {
        fail(c, "the engine cannot build the dropout spec: %s (%s)", err.msg,
             err.field);
        goto done;
    }
    if (drop.param_count != c->arch.param_count ||
        drop.buffer_count != c->arch.buffer_count) {
        fail(c, "dropout changes the state block's size%s%s", "", "");
        goto done;
    }
    dws = nn_workspace_create_for(&drop, n, 1);
    if (!dws) {
        fail(c, "out of memory%s%s", "", "");
        goto done;
    }
    ty_rng_seed(&rng, 3, 0);
    memcpy(c->ws->act[0], x->data, x->numel * 4);
    memcpy(plain, nn_forward(&c->arch, c->state, c->ws, n, 0, &rng),
           (size_t)n * width * sizeof(float));
    compare_abs(c, "eval output (dropout 0)", plain, want, LM_LOGITS_ABS);
    memcpy(dws->act[0], x->data, x->numel * 4);
    const float *ev = nn_forward(&drop, c->state, dws, n, 0, &rng);
    int same = memcmp(ev, plain, (size_t)n * width * sizeof(float)) == 0;
    printf("  %-4s %-34s bit for bit the dropout-0 network's\n",
           same ? "ok" : "FAIL", "eval output (dropout > 0)");
    c->failed |= !same;
    memcpy(dws->act[0], x->data, x->numel * 4);
    const float *tr = nn_forward(&drop, c->state, dws, n, 1, &rng);
    double moved = 0;
    for (uint64_t i = 0; i < (uint64_t)n * width; i++)
        moved = fmax(moved, fabs((double)tr[i] - plain[i]));
    printf("  %-4s %-34s max|train - eval| %.3e (dropout applies)\n",
           moved > 0 ? "ok" : "FAIL", "training output (dropout > 0)", moved);
    c->failed |= !(moved > 0);
done:
    nn_workspace_destroy(dws);
    nn_arch_free(&drop);
    free(plain);
}

/* Ten AdamW steps, the engine on its own from param.* on the stored
 * batches (traj.input, and traj.targets or, a classifier, traj.labels):
 * each step's loss against torch's. */
static void lm_trajectory(pcase *c, const train_hparams *hp, uint32_t n, int lm)
{
    nn_arch *a = &c->arch;
    ty_err err = {0};
    nn_optim opt = {0};
    const uint64_t pc = a->param_count, feat = nn_shape_numel(&a->input);
    const char *steps_s = meta(c, "traj_steps");
    if (!steps_s)
        return;
    uint32_t steps = (uint32_t)atoi(steps_s);
    const st_tensor *tx = ref_f32(c, "traj.input", (uint64_t)steps * n * feat);
    const st_tensor *ty =
        lm ? ref_f32(c, "traj.targets", (uint64_t)steps * n * feat) : NULL;
    const st_tensor *tl = ref_f32(c, "traj.loss", steps);
    if (!tx || (lm && !ty) || !tl || !load_trainable(c, "param", c->state))
        return;
    if (nn_optim_init(&opt, train_hparams_optim(hp), pc, &err) != TY_OK) {
        fail(c, "%s%s", err.msg, "");
        return;
    }
    memset(c->grads, 0, pc * sizeof(float));
    float *losses = calloc(steps + 1, sizeof(float));
    int32_t *labels = calloc(n, sizeof *labels);
    ty_rng rng;
    ty_rng_seed(&rng, 2, 0);
    for (uint32_t s = 0; losses && labels && s < steps; s++) {
        const float *x = (const float *)tx->data + (uint64_t)s * n * feat;
        const float *y =
            lm ? (const float *)ty->data + (uint64_t)s * n * feat : NULL;
        if (!lm && !ref_labels(c, "traj.labels", steps, s, n, labels))
            break;
        memcpy(c->ws->act[0], x, n * feat * sizeof(float));
        nn_forward(a, c->state, c->ws, n, 1, &rng);
        double sum = nn_loss(a, c->ws, n, lm ? NULL : labels, y, NULL, 1);
        losses[s] = (float)(sum / n);
        nn_backward(a, c->state, c->grads, c->ws, n);
        nn_optim_step(&opt, a->be, c->ws->ex, c->state, c->grads);
        printf("       step %2u loss %.7f  torch %.7f  diff %+.2e\n", s + 1,
               losses[s], ref_at(tl, s), losses[s] - ref_at(tl, s));
    }
    if (losses && labels && !c->failed) {
        char what[64];
        snprintf(what, sizeof what, "%u AdamW steps' losses", steps);
        compare_abs(c, what, losses, tl, LM_TRAJ_ABS);
    }
    /* The weights after the steps: how far ten steps of rounding carried
     * them (printed, not a limit of the issue). */
    double worst = 0;
    for (uint32_t i = 0; i < a->n_tensors; i++) {
        const nn_named_tensor *nt = &a->tensors[i];
        char key[160];
        snprintf(key, sizeof key, "traj.final.%s", nt->name);
        const st_tensor *t = st_find(&c->ref, key);
        if (!t || t->numel != nt->desc->numel)
            continue;
        double d = 0, m = 0;
        for (uint64_t k = 0; k < t->numel; k++) {
            d = fmax(d, fabs(c->state[nt->offset + k] - ref_at(t, k)));
            m = fmax(m, fabs(ref_at(t, k)));
        }
        worst = fmax(worst, d / fmax(m, 1e-12));
    }
    printf("  info weights after the steps: worst rel %.3e\n", worst);
    free(losses);
    free(labels);
    nn_optim_free(&opt);
}

static void run_case(pcase *c, const char *dir)
{
    char path[4096], key[160];
    ty_err err = {0};
    json_t *spec = NULL, *shape_j = NULL, *hp_j = NULL;
    int32_t *labels = NULL;
    nn_optim opt = {0};
    train_hparams hp;
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, c->name);
    if (st_open(path, &c->ref, &err) != TY_OK) {
        fail(c,
             "%s (%s); the reference files come from "
             "tests/parity/make_reference.py, which needs /usr/bin/python3 "
             "with PyTorch: install python3-torch (scripts/setup.sh test)",
             err.msg, path);
        return;
    }
    const char *spec_s = meta(c, "spec"), *task_s = meta(c, "task"),
               *shape_s = meta(c, "input_shape"),
               *outs_s = meta(c, "num_outputs"),
               *hp_s = meta(c, "hyperparameters");
    if (c->failed)
        return;
    spec = json_loads(spec_s, 0, NULL);
    shape_j = json_loads(shape_s, 0, NULL);
    hp_j = json_loads(hp_s, 0, NULL);
    uint32_t shape[NN_MAX_DIMS], ndim = (uint32_t)json_array_size(shape_j);
    for (uint32_t i = 0; i < ndim && i < NN_MAX_DIMS; i++)
        shape[i] = (uint32_t)json_integer_value(json_array_get(shape_j, i));
    int task = nn_task_from_str(task_s);
    const int lm = strcmp(task_s, "language_modeling") == 0;
    /* A language model or a text classifier: the sequence checks. */
    const int seq = st_meta(&c->ref, "traj_steps") != NULL;
    uint32_t outs = (uint32_t)atoi(outs_s);
    if (task < 0) {
        fail(c, "the engine does not know task '%s'%s", task_s, "");
        goto done;
    }
    if (!spec || !hp_j || ndim == 0 || ndim > NN_MAX_DIMS) {
        fail(c, "malformed reference metadata%s%s", "", "");
        goto done;
    }
    /* The loss is a hyperparameter: settle it for the task first. */
    if (train_hparams_parse(hp_j, &hp, NULL, &err) != TY_OK ||
        train_hparams_resolve_loss(&hp, (ty_task)task, outs, NULL, &err) !=
            TY_OK) {
        fail(c, "the engine does not take these hyperparameters: %s (%s)",
             err.msg, hp_s);
        goto done;
    }
    if (nn_arch_build_for_loss(spec, shape, ndim, outs, (ty_task)task, &hp.loss,
                               &c->arch, NULL, &err) != TY_OK) {
        fail(c, "the engine cannot build this spec: %s (%s)", err.msg,
             err.field);
        goto done;
    }
    nn_arch *a = &c->arch;
    const st_tensor *x = st_find(&c->ref, "input");
    const uint64_t feat = nn_shape_numel(&a->input);
    if (!x || x->dtype != ST_F32 || x->numel % feat) {
        fail(c, "bad reference input%s%s", "", "");
        goto done;
    }
    const uint32_t n = (uint32_t)(x->numel / feat);
    const uint64_t pc = a->param_count, total = pc + a->buffer_count;
    c->state = calloc(total + 1, sizeof(float));
    c->grads = calloc(pc + 1, sizeof(float));
    c->before = calloc(total + 1, sizeof(float));
    c->upd = calloc(pc + 1, sizeof(float));
    c->ws = nn_workspace_create_for(a, n, 1);
    if (c->ws && c->pool && nn_workspace_set_pool(c->ws, c->pool) != TY_OK)
        c->failed = 1;
    if (!c->state || !c->grads || !c->before || !c->upd || !c->ws ||
        c->failed) {
        fail(c, "out of memory%s%s", "", "");
        goto done;
    }
    /* The initial state, by state-dict name. */
    for (uint32_t i = 0; i < a->n_tensors; i++) {
        const nn_named_tensor *nt = &a->tensors[i];
        snprintf(key, sizeof key, "param.%s", nt->name);
        const st_tensor *t = ref_f32(c, key, nt->desc->numel);
        if (t)
            memcpy(c->state + nt->offset, t->data, nt->desc->numel * 4);
    }
    if (c->failed)
        goto done;
    if (seq && !c->pool) { /* the files do not depend on the threads */
        lm_exchange(c, dir, spec, (ty_task)task, outs);
        if (c->failed)
            goto done;
    }
    memcpy(c->ws->act[0], x->data, x->numel * 4);
    const float *targets = NULL;
    if (lm) {
        /* Next-token ids, (n, T) float32, as regression targets go. */
        const st_tensor *y = ref_f32(c, "targets", (uint64_t)n * feat);
        if (!y)
            goto done;
        targets = y->data;
    } else if (task == TY_TASK_CLASSIFICATION) {
        labels = calloc(n, sizeof *labels);
        if (!labels || !ref_labels(c, "labels", 1, 0, n, labels))
            goto done;
    } else {
        const st_tensor *y = ref_f32(c, "targets", (uint64_t)n * outs);
        if (!y)
            goto done;
        targets = y->data;
    }

    /* Forward, loss, backward. */
    ty_rng rng;
    ty_rng_seed(&rng, 1, 0);
    memcpy(c->ws->act[0], x->data, x->numel * 4);
    const float *out = nn_forward(a, c->state, c->ws, n, 1, &rng);
    /* Binary cross-entropy models output one logit for two classes. */
    const uint64_t width = nn_shape_numel(&a->output);
    const st_tensor *t = ref_f32(c, "output", (uint64_t)n * width);
    if (t)
        compare(c, "output", out, t, NULL, FLOOR_ABS);
    if (t && seq)
        compare_abs(c, "output (logits)", out, t, LM_LOGITS_ABS);
    double sum = nn_loss(a, c->ws, n, labels, targets, NULL, 1);
    /* The mean: per example (cross-entropy; a language model's sum is its
     * mean over the counted positions times n), per element (mse, huber). */
    float loss = (float)(lm || task == TY_TASK_CLASSIFICATION
                             ? sum / n
                             : sum / ((double)n * outs));
    if ((t = ref_f32(c, "loss", 1))) {
        compare(c, "loss", &loss, t, NULL, FLOOR_ABS);
        if (seq)
            compare_abs(c, "loss", &loss, t, LM_LOSS_ABS);
    }
    nn_backward(a, c->state, c->grads, c->ws, n);
    double gscale = kind_scale(c, "grad", NULL) * FLOOR_KIND;
    for (uint32_t i = 0; i < a->n_tensors; i++) {
        const nn_named_tensor *nt = &a->tensors[i];
        char what[160];
        snprintf(key, sizeof key, "%s.%s",
                 nt->desc->buffer ? "forward" : "grad", nt->name);
        snprintf(what, sizeof what, "%s", key);
        if ((t = ref_f32(c, key, nt->desc->numel)))
            compare(c, what,
                    (nt->desc->buffer ? c->state : c->grads) + nt->offset, t,
                    NULL, nt->desc->buffer ? FLOOR_ABS : fmax(gscale, 1e-12));
    }

    /* Two optimizer steps on the same batch. */
    if (nn_optim_init(&opt, train_hparams_optim(&hp), pc, &err) != TY_OK) {
        fail(c, "%s%s", err.msg, "");
        goto done;
    }
    for (int step = 1; step <= 2; step++) {
        char prefix[16], base[16];
        snprintf(prefix, sizeof prefix, "step%d", step);
        snprintf(base, sizeof base, step == 1 ? "param" : "step1");
        if (!load_trainable(c, base, c->state) ||
            !load_trainable(c, step == 1 ? "grad" : "grad2", c->grads))
            goto done;
        memcpy(c->before, c->state, pc * sizeof(float));
        nn_optim_step(&opt, a->be, c->ws->ex, c->state, c->grads);
        for (uint64_t k = 0; k < pc; k++)
            c->upd[k] = c->state[k] - c->before[k];
        double uscale = kind_scale(c, prefix, base) * FLOOR_KIND;
        for (uint32_t i = 0; i < a->n_tensors; i++) {
            const nn_named_tensor *nt = &a->tensors[i];
            if (nt->desc->buffer)
                continue;
            char bkey[160], what[160];
            snprintf(key, sizeof key, "%s.%s", prefix, nt->name);
            snprintf(bkey, sizeof bkey, "%s.%s", base, nt->name);
            snprintf(what, sizeof what, "%s update", key);
            const st_tensor *after = ref_f32(c, key, nt->desc->numel);
            const st_tensor *b4 = ref_f32(c, bkey, nt->desc->numel);
            if (after && b4)
                compare(c, what, c->upd + nt->offset, after, b4,
                        fmax(fmax(uscale, 1e-12),
                             2 * max_abs_ref(b4) * FLT_EPSILON / TOL));
        }
    }
    if (seq)
        lm_trajectory(c, &hp, n, lm);
    const char *drop_s = st_meta(&c->ref, "eval_dropout_spec");
    if (drop_s && task == TY_TASK_CLASSIFICATION) {
        json_t *spec_drop = json_loads(drop_s, 0, NULL);
        if (!spec_drop || !load_trainable(c, "param", c->state))
            fail(c, "bad eval_dropout_spec%s%s", "", "");
        else
            eval_dropout(c, spec_drop, shape, ndim, outs, &hp.loss, n);
        json_decref(spec_drop);
    }
done:
    nn_optim_free(&opt);
    free(labels);
    json_decref(spec);
    json_decref(shape_j);
    json_decref(hp_j);
}

static void free_case(pcase *c)
{
    nn_workspace_destroy(c->ws);
    nn_arch_free(&c->arch);
    free(c->state);
    free(c->grads);
    free(c->before);
    free(c->upd);
    st_close(&c->ref);
}

int main(int argc, char **argv)
{
    int first = 1, threads = 1;
    if (argc > 2 && !strcmp(argv[1], "--threads")) {
        threads = atoi(argv[2]);
        first = 3;
    }
    if (argc < first + 2 || threads < 1) {
        fprintf(stderr, "usage: %s [--threads N] REF_DIR CASE...\n", argv[0]);
        return 64;
    }
    nn_pool *pool = threads > 1 ? nn_pool_create(threads) : NULL;
    if (threads > 1 && !pool) {
        fprintf(stderr, "cannot start %d threads\n", threads);
        return 1;
    }
    int passed = 0, failed = 0;
    for (int i = first + 1; i < argc; i++) {
        pcase c = {.name = argv[i], .pool = pool};
        printf("[ RUN      ] parity %s\n", c.name);
        run_case(&c, argv[first]);
        printf("[ %s ] parity %s\n", c.failed ? " FAILED " : "      OK",
               c.name);
        c.failed ? failed++ : passed++;
        free_case(&c);
    }
    printf("%d passed, %d failed\n", passed, failed);
    nn_pool_destroy(pool);
    return failed ? 1 : 0;
}
