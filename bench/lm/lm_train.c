/*
 * lm_train.c - the engine's trainer (train_run, as a training job's worker
 * calls it) on a language model over a text file, for bench/lm/run.py (not
 * a test).
 *
 *   build/bench_lm train --text FILE --spec SPEC.json [--context 128]
 *       [--batch 16] [--steps 300] [--epochs 1] [--lr 0.001] [--seed 1]
 *       [--threads 2] [--train-windows W] [--val-tokens N]
 *       [--eval-every K] [--dump DIR]
 *
 * The text is tokenized one token per byte (vocabulary 256, the "byte"
 * tokenizer). Training windows come from the start of the text (the first
 * W windows with --train-windows W, else all the text before the held-out
 * stretch), validation windows from its last N tokens (--val-tokens, 0:
 * none), as a job's held-out split makes them (models/data/windows.h).
 * AdamW with the engine's defaults (betas 0.9/0.999, eps 1e-8, weight
 * decay 0.01, as torch.optim.AdamW), a constant learning rate.
 *
 * Prints one JSON line per progress report ({"progress": step, "loss",
 * "val_loss" (null unless measured)}) and per epoch (the epoch record:
 * tokens_per_sec, seconds, train_loss, val_loss, and cpu_seconds: the
 * process's CPU time so far, all threads). The first progress line
 * is step 1's: the loss of the first batch at the initial weights.
 *
 * --dump DIR also writes, for a framework to train the same run:
 *   DIR/init.safetensors  the initial weights train_run draws (the same
 *                         spec and seed stream, nn_arch_init_params),
 *                         under the engine's state-dict names;
 *   DIR/order.u32         each epoch's order of the training windows, as
 *                         train_run shuffles them by (seed, epoch),
 *                         epochs after one another (uint32, little-endian);
 *   DIR/run.json          the windows, steps per epoch, epochs dumped.
 *
 *   build/bench_lm gemm [seconds]
 *
 * times OpenBLAS's SGEMM (best of repeats) at the model's shapes on one
 * thread, and at a 2048 square on one thread and on every core: the
 * machine's SGEMM ceiling. One JSON line.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cblas.h>
#include <jansson.h>

#include "common/rng.h"
#include "models/data/windows.h"
#include "models/nn_internal.h"
#include "models/safetensors.h"
#include "models/train/train_internal.h"

void openblas_set_num_threads(int num_threads);

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what, const ty_err *err)
{
    fprintf(stderr, "bench_lm: %s: %s%s%s\n", what, err ? err->msg : "",
            err && err->field[0] ? " at " : "", err ? err->field : "");
    exit(1);
}

/* ---- gemm ---- */

static double gemm_time(int ta, int tb, int m, int n, int k, const float *a,
                        const float *b, float *c, double seconds)
{
    const int lda = ta ? m : k, ldb = tb ? k : n;
    double best = 1e30, t_end = now_s() + seconds;
    int reps = 0;
    do {
        double t0 = now_s();
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
                    tb ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a, lda, b,
                    ldb, 0.0f, c, n);
        double dt = now_s() - t0;
        if (dt < best)
            best = dt;
        reps++;
    } while (reps < 3 || now_s() < t_end);
    return best;
}

/* The GPT's GEMMs at batch 16 x context 128 = 2048 rows, C 128, as the
 * dense layers and the tied head run them (C = A B^T forward, dX = dY W,
 * dW = dY^T X), and one head's attention scores (T x T x C/heads). */
static const struct {
    const char *what;
    int ta, tb, m, n, k;
} lm_shapes[] = {
    {"qkv fwd 2048x384x128", 0, 1, 2048, 384, 128},
    {"qkv dX 2048x128x384", 0, 0, 2048, 128, 384},
    {"qkv dW 384x128x2048", 1, 0, 384, 128, 2048},
    {"mlp.0 fwd 2048x512x128", 0, 1, 2048, 512, 128},
    {"mlp.2 fwd 2048x128x512", 0, 1, 2048, 128, 512},
    {"mlp.2 dW 128x512x2048", 1, 0, 128, 512, 2048},
    {"lm_head fwd 2048x256x128", 0, 1, 2048, 256, 128},
    {"attn scores 128x128x32", 0, 1, 128, 128, 32},
    {"attn P.V 128x32x128", 0, 0, 128, 32, 128},
};

static int gemm_main(double per_shape)
{
    const int big = 2048;
    float *a = malloc(sizeof(float) * big * big);
    float *b = malloc(sizeof(float) * big * big);
    float *c = malloc(sizeof(float) * big * big);
    if (!a || !b || !c)
        die("out of memory", NULL);
    for (int i = 0; i < big * big; i++) {
        a[i] = (float)(i % 17) / 17.0f - 0.5f;
        b[i] = (float)(i % 13) / 13.0f - 0.5f;
    }
    json_t *out = json_object(), *list = json_array();
    openblas_set_num_threads(1);
    double fl = 0, tm = 0;
    for (size_t s = 0; s < sizeof lm_shapes / sizeof lm_shapes[0]; s++) {
        const int m = lm_shapes[s].m, n = lm_shapes[s].n, k = lm_shapes[s].k;
        double t = gemm_time(lm_shapes[s].ta, lm_shapes[s].tb, m, n, k, a, b, c,
                             per_shape);
        double f = 2.0 * m * n * k;
        if (s < 7) { /* the dense layers' shapes, weighted by their flops */
            fl += f;
            tm += t;
        }
        json_array_append_new(list, json_pack("{s:s, s:f}", "shape",
                                              lm_shapes[s].what, "gflops",
                                              f / t / 1e9));
    }
    double f_big = 2.0 * big * big * big;
    double t1 = gemm_time(0, 0, big, big, big, a, b, c, 3 * per_shape);
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    openblas_set_num_threads((int)cores);
    double tn = gemm_time(0, 0, big, big, big, a, b, c, 3 * per_shape);
    openblas_set_num_threads(1);
    json_object_set_new(out, "shapes", list);
    json_object_set_new(out, "dense_shapes_1thread_gflops",
                        json_real(fl / tm / 1e9));
    json_object_set_new(out, "square2048_1thread_gflops",
                        json_real(f_big / t1 / 1e9));
    json_object_set_new(out, "cores", json_integer(cores));
    json_object_set_new(out, "square2048_all_cores_gflops",
                        json_real(f_big / tn / 1e9));
    char *text = json_dumps(out, JSON_COMPACT);
    printf("%s\n", text);
    free(text);
    json_decref(out);
    free(a);
    free(b);
    free(c);
    return 0;
}

/* ---- train ---- */

typedef struct {
    const char *text, *spec, *dump;
    uint32_t context, batch, epochs, threads, train_windows;
    uint64_t steps, val_tokens, eval_every, seed;
    double lr;
} opts;

static double t_start;

/* CPU seconds of the whole process so far (every thread). */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void print_num(const char *key, double v, int last)
{
    if (isfinite(v))
        printf("\"%s\": %.9g%s", key, v, last ? "" : ", ");
    else
        printf("\"%s\": null%s", key, last ? "" : ", ");
}

static void on_progress(void *ctx, const train_progress *p)
{
    (void)ctx;
    printf("{\"progress\": %llu, ", (unsigned long long)p->step);
    print_num("loss", p->loss, 0);
    print_num("val_loss", p->val_loss, 0);
    print_num("seconds", now_s() - t_start, 1);
    printf("}\n");
    fflush(stdout);
}

static void on_epoch(void *ctx, const train_epoch_metrics *m)
{
    (void)ctx;
    printf("{\"epoch\": %u, ", m->epoch);
    print_num("tokens_per_sec", m->tokens_per_sec, 0);
    print_num("seconds", m->seconds, 0);
    print_num("cpu_seconds", cpu_s(), 0);
    print_num("train_loss", m->train_loss, 0);
    print_num("val_loss", m->val_loss < 0 ? NAN : m->val_loss, 1);
    printf("}\n");
    fflush(stdout);
}

static uint16_t *read_text(const char *path, uint64_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        die("cannot open the text", NULL);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *bytes = malloc(len > 0 ? (size_t)len : 1);
    uint16_t *tok = malloc((len > 0 ? (size_t)len : 1) * sizeof *tok);
    if (!bytes || !tok || fread(bytes, 1, (size_t)len, f) != (size_t)len)
        die("cannot read the text", NULL);
    fclose(f);
    for (long i = 0; i < len; i++)
        tok[i] = bytes[i];
    free(bytes);
    *n = (uint64_t)len;
    return tok;
}

/* The engine's initial weights and each epoch's window order, as train_run
 * makes them (see the header). */
static void dump_run(const opts *o, const json_t *spec, const train_hparams *hp,
                     uint32_t n_train)
{
    char path[4096];
    ty_err err = {0};
    nn_arch arch;
    uint32_t shape[1] = {o->context};
    if (nn_arch_build_for_loss(spec, shape, 1, TY_DS_BYTE_VOCAB,
                               TY_TASK_LANGUAGE_MODELING, &hp->loss, &arch,
                               NULL, &err) != TY_OK)
        die("the spec", &err);
    float *state =
        calloc(arch.param_count + arch.buffer_count + 1, sizeof *state);
    st_out_tensor *t = calloc(arch.n_tensors + 1, sizeof *t);
    if (!state || !t)
        die("out of memory", NULL);
    ty_rng init;
    ty_rng_seed(&init, hp->seed, TRAIN_STREAM_INIT);
    nn_arch_init_params(&arch, state, &init);
    for (uint32_t i = 0; i < arch.n_tensors; i++) {
        const nn_named_tensor *nt = &arch.tensors[i];
        t[i] = (st_out_tensor){.name = nt->name,
                               .dtype = ST_F32,
                               .ndim = nt->desc->ndim,
                               .data = state + nt->offset};
        for (uint32_t d = 0; d < nt->desc->ndim; d++)
            t[i].shape[d] = nt->desc->shape[d];
    }
    snprintf(path, sizeof path, "%s/init.safetensors", o->dump);
    if (st_write(path, NULL, t, arch.n_tensors, &err) != TY_OK)
        die("writing init.safetensors", &err);

    const uint64_t spe = (n_train + (uint64_t)o->batch - 1) / o->batch;
    uint64_t epochs = (o->steps + spe - 1) / spe;
    if (epochs > o->epochs)
        epochs = o->epochs;
    uint32_t *perm = malloc((size_t)n_train * sizeof *perm);
    snprintf(path, sizeof path, "%s/order.u32", o->dump);
    FILE *f = fopen(path, "wb");
    if (!perm || !f)
        die("writing order.u32", NULL);
    for (uint64_t e = 0; e < epochs; e++) {
        for (uint32_t i = 0; i < n_train; i++)
            perm[i] = i;
        ty_rng shuffle;
        ty_rng_seed(&shuffle, hp->seed, TRAIN_STREAM_SHUFFLE(e));
        ty_rng_shuffle_u32(&shuffle, perm, n_train);
        if (fwrite(perm, sizeof *perm, n_train, f) != n_train)
            die("writing order.u32", NULL);
    }
    fclose(f);
    snprintf(path, sizeof path, "%s/run.json", o->dump);
    f = fopen(path, "w");
    if (!f)
        die("writing run.json", NULL);
    fprintf(f,
            "{\"train_windows\": %u, \"steps_per_epoch\": %llu, "
            "\"epochs\": %llu, \"param_count\": %llu}\n",
            n_train, (unsigned long long)spe, (unsigned long long)epochs,
            (unsigned long long)arch.param_count);
    fclose(f);
    free(perm);
    free(t);
    free(state);
    nn_arch_free(&arch);
}

static int train_main(const opts *o)
{
    ty_err err = {0};
    uint64_t n = 0;
    uint16_t *buf = read_text(o->text, &n);
    ty_tokens tok = {.num_tokens = n,
                     .vocab_size = TY_DS_BYTE_VOCAB,
                     .token_size = 2,
                     .byte_tokenizer = 1,
                     .tokens = buf};
    if (o->val_tokens >= n)
        die("--val-tokens is not below the text's length", NULL);
    uint64_t train_tokens = n - o->val_tokens;
    if (o->train_windows) {
        uint64_t want = (uint64_t)o->train_windows * o->context + 1;
        if (want > train_tokens)
            die("the text is too short for --train-windows", NULL);
        train_tokens = want;
    }
    ty_dataset train, val;
    memset(&val, 0, sizeof val);
    if (ds_windows_make(&tok, 0, train_tokens, o->context, &train, &err) !=
        TY_OK)
        die("the training windows", &err);
    if (o->val_tokens && ds_windows_make(&tok, n - o->val_tokens, o->val_tokens,
                                         o->context, &val, &err) != TY_OK)
        die("the validation windows", &err);

    json_t *hp_j = json_pack(
        "{s:I, s:I, s:s, s:f, s:I, s:I, s:I}", "epochs", (json_int_t)o->epochs,
        "batch_size", (json_int_t)o->batch, "optimizer", "adamw",
        "learning_rate", o->lr, "seed", (json_int_t)o->seed, "context_length",
        (json_int_t)o->context, "max_steps", (json_int_t)o->steps);
    if (o->eval_every)
        json_object_set_new(hp_j, "eval_every_steps",
                            json_integer((json_int_t)o->eval_every));
    train_hparams hp;
    if (train_hparams_parse(hp_j, &hp, NULL, &err) != TY_OK ||
        train_hparams_resolve_loss(&hp, TY_TASK_LANGUAGE_MODELING,
                                   TY_DS_BYTE_VOCAB, NULL, &err) != TY_OK)
        die("the hyperparameters", &err);
    json_error_t jerr;
    json_t *model = json_load_file(o->spec, 0, &jerr);
    if (!model)
        die("cannot read the spec", NULL);
    json_t *spec = NULL;
    uint64_t pc = 0;
    uint32_t shape[1] = {o->context};
    if (nn_spec_validate_for_loss(model, shape, 1, TY_DS_BYTE_VOCAB,
                                  TY_TASK_LANGUAGE_MODELING, &hp.loss, &spec,
                                  &pc, &err) != TY_OK)
        die("the spec", &err);
    if (o->dump)
        dump_run(o, spec, &hp, train.num_examples);

    char model_path[4096];
    snprintf(model_path, sizeof model_path, "%s/model.safetensors",
             o->dump ? o->dump : "/tmp");
    train_job job = {
        .spec = spec,
        .hp = &hp,
        .train = &train,
        .n_train = train.num_examples,
        .val = o->val_tokens ? &val : NULL,
        .n_val = val.num_examples,
        .model_path = model_path,
        .threads = (int)o->threads,
        .cb = {.on_progress = on_progress, .on_epoch = on_epoch},
    };
    printf("{\"params\": %llu, \"train_windows\": %u, \"val_windows\": %u, "
           "\"threads\": %d}\n",
           (unsigned long long)pc, train.num_examples, val.num_examples,
           train_threads(job.threads, NULL));
    fflush(stdout);
    t_start = now_s();
    train_epoch_metrics fin;
    if (train_run(&job, &fin, &err) != TY_OK)
        die("train_run", &err);
    if (!o->dump)
        unlink(model_path);
    json_decref(spec);
    json_decref(model);
    json_decref(hp_j);
    ds_windows_free(&train);
    ds_windows_free(&val);
    free(buf);
    return 0;
}

static const char *arg_val(int argc, char **argv, int *i)
{
    if (*i + 1 >= argc) {
        fprintf(stderr, "bench_lm: %s needs a value\n", argv[*i]);
        exit(64);
    }
    return argv[++*i];
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "gemm"))
        return gemm_main(argc > 2 && atof(argv[2]) > 0 ? atof(argv[2]) : 0.5);
    if (argc < 2 || strcmp(argv[1], "train")) {
        fprintf(stderr, "usage: bench_lm train --text FILE --spec SPEC.json "
                        "[options] | bench_lm gemm [seconds] (see "
                        "bench/lm/lm_train.c)\n");
        return 64;
    }
    opts o = {.context = 128,
              .batch = 16,
              .epochs = 1,
              .threads = 0,
              .steps = 300,
              .seed = 1,
              .lr = 1e-3};
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--text"))
            o.text = arg_val(argc, argv, &i);
        else if (!strcmp(a, "--spec"))
            o.spec = arg_val(argc, argv, &i);
        else if (!strcmp(a, "--dump"))
            o.dump = arg_val(argc, argv, &i);
        else if (!strcmp(a, "--context"))
            o.context = (uint32_t)atoi(arg_val(argc, argv, &i));
        else if (!strcmp(a, "--batch"))
            o.batch = (uint32_t)atoi(arg_val(argc, argv, &i));
        else if (!strcmp(a, "--epochs"))
            o.epochs = (uint32_t)atoi(arg_val(argc, argv, &i));
        else if (!strcmp(a, "--threads"))
            o.threads = (uint32_t)atoi(arg_val(argc, argv, &i));
        else if (!strcmp(a, "--train-windows"))
            o.train_windows = (uint32_t)atoi(arg_val(argc, argv, &i));
        else if (!strcmp(a, "--steps"))
            o.steps = strtoull(arg_val(argc, argv, &i), NULL, 10);
        else if (!strcmp(a, "--val-tokens"))
            o.val_tokens = strtoull(arg_val(argc, argv, &i), NULL, 10);
        else if (!strcmp(a, "--eval-every"))
            o.eval_every = strtoull(arg_val(argc, argv, &i), NULL, 10);
        else if (!strcmp(a, "--seed"))
            o.seed = strtoull(arg_val(argc, argv, &i), NULL, 10);
        else if (!strcmp(a, "--lr"))
            o.lr = atof(arg_val(argc, argv, &i));
        else {
            fprintf(stderr, "bench_lm: unknown option %s\n", a);
            return 64;
        }
    }
    if (!o.text || !o.spec || !o.context || !o.batch || !o.epochs || !o.steps) {
        fprintf(stderr, "bench_lm train needs --text and --spec (and "
                        "non-zero sizes)\n");
        return 64;
    }
    return train_main(&o);
}
