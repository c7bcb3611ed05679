/*
 * gpu_testutil.h - what the trainer-level gpu tests share: one training
 * run from JSON texts, and a tensor-by-tensor comparison of two model
 * files. Each test prints "FAIL: ..." lines and returns non-zero; these
 * helpers do the same.
 *
 * Header-only (static inline functions); include once per test program, after
 * tests/unit/synth_data.h, inside the test's TRAINYARD_HAVE_CUDA part.
 */
#ifndef TY_GPU_TESTUTIL_H
#define TY_GPU_TESTUTIL_H

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/ty.h"
#include "gpu/cuda/backend.h"
#include "models/safetensors.h"
#include "models/train/train.h"

/* Opens an execution context on CUDA device 0. Returns 0 when it is
 * ready, else the test's exit status: 77 with "SKIPPED: ..." when this
 * machine has no CUDA device, 1 with "FAIL: ..." when the context cannot
 * be made. */
static inline int gpu_open(nn_exec *ex)
{
    char why[256] = "";
    if (nn_cuda_device_count(why, sizeof why) == 0) {
        printf("SKIPPED: no CUDA device (%s)\n", why);
        return 77;
    }
    ty_err err;
    memset(ex, 0, sizeof *ex);
    if (nn_cuda_exec_init(ex, 0, &err) != TY_OK) {
        printf("FAIL: nn_cuda_exec_init: %s\n", err.msg);
        return 1;
    }
    return 0;
}

/* Trains spec_text with the hyperparameters hp_text on train (val: NULL
 * for no validation) into path, on be (NULL: the CPU) / ex, with the
 * loader's prefetch setting and callbacks cb; *fin (may be NULL) gets the
 * final epoch's metrics. what names the run in a FAIL line. 0 on success. */
static inline int gpu_train_run(const char *what, const synth *train,
                                const synth *val, const char *spec_text,
                                const char *hp_text, const char *path,
                                const nn_backend *be, const nn_exec *ex,
                                int prefetch, train_callbacks cb,
                                train_epoch_metrics *fin)
{
    json_t *spec = json_loads(spec_text, 0, NULL);
    json_t *hj = json_loads(hp_text, 0, NULL);
    train_hparams hp;
    ty_err err = {0};
    int rc = 1;
    if (!spec || !hj || train_hparams_parse(hj, &hp, NULL, &err) != TY_OK ||
        train_hparams_resolve_loss(&hp, train->ds.task, train->ds.num_classes,
                                   NULL, &err) != TY_OK) {
        printf("FAIL: %s: setup: %s\n", what,
               spec && hj ? err.msg : "bad JSON");
        goto done;
    }
    unlink(path);
    train_job job = {.spec = spec,
                     .hp = &hp,
                     .train = &train->ds,
                     .val = val ? &val->ds : NULL,
                     .model_path = path,
                     .threads = 1,
                     .prefetch = prefetch,
                     .cb = cb,
                     .be = be,
                     .ex = ex};
    train_epoch_metrics last;
    if (train_run(&job, &last, &err) != TY_OK) {
        printf("FAIL: %s: training on %s: %s\n", what, be ? be->name : "cpu",
               err.msg);
        goto done;
    }
    if (fin)
        *fin = last;
    rc = 0;
done:
    json_decref(spec);
    json_decref(hj);
    return rc;
}

/* Compares every tensor of the model files a_path and b_path (labelled
 * a_label and b_label in messages). rtol and atol both 0: every value
 * must have the same bits; else |a - b| <= rtol |a| + atol. Prints one
 * "ok:" line or the FAIL lines; returns 0 when they agree. */
static inline int gpu_compare_models(const char *name, const char *a_path,
                                     const char *a_label, const char *b_path,
                                     const char *b_label, double rtol,
                                     double atol)
{
    const int exact = rtol == 0.0 && atol == 0.0;
    st_file a, b;
    ty_err err;
    if (st_open(a_path, &a, &err) != TY_OK) {
        printf("FAIL: %s: %s\n", name, err.msg);
        return 1;
    }
    if (st_open(b_path, &b, &err) != TY_OK) {
        printf("FAIL: %s: %s\n", name, err.msg);
        st_close(&a);
        return 1;
    }
    int bad = a.count != b.count || a.count == 0;
    if (bad)
        printf("FAIL: %s: %zu tensors in the %s model, %zu in the %s one\n",
               name, a.count, a_label, b.count, b_label);
    double worst = 0.0; /* exact: relative difference; else share of the
                           tolerance */
    for (size_t i = 0; i < a.count && !bad; i++) {
        const st_tensor *x = &a.tensors[i], *y = st_find(&b, x->name);
        if (!y || y->numel != x->numel) {
            printf("FAIL: %s: tensor %s missing or reshaped\n", name, x->name);
            bad = 1;
            break;
        }
        uint64_t differ = 0;
        for (uint64_t k = 0; k < x->numel; k++) {
            float u, v;
            memcpy(&u, (const char *)x->data + k * 4, 4);
            memcpy(&v, (const char *)y->data + k * 4, 4);
            double d = fabs((double)u - (double)v);
            if (exact) {
                if (memcmp(&u, &v, 4) != 0) {
                    differ++;
                    worst = fmax(worst, d / (fabs((double)u) + 1e-12));
                }
                continue;
            }
            double lim = rtol * fabs((double)u) + atol;
            worst = fmax(worst, d / lim);
            if (!(d <= lim)) {
                printf("FAIL: %s: %s[%llu] %s %.8g %s %.8g\n", name, x->name,
                       (unsigned long long)k, a_label, u, b_label, v);
                bad = 1;
                break;
            }
        }
        if (differ) {
            printf("FAIL: %s: %s: %llu of %llu values differ between %s and "
                   "%s (worst relative %.3g)\n",
                   name, x->name, (unsigned long long)differ,
                   (unsigned long long)x->numel, a_label, b_label, worst);
            bad = 1;
        }
    }
    if (!bad) {
        if (exact)
            printf("ok: %s: %zu tensors bit-identical (%s, %s)\n", name,
                   a.count, a_label, b_label);
        else
            printf("ok: %s: %zu tensors within tolerance (worst %.3f of it)\n",
                   name, a.count, worst);
    }
    st_close(&a);
    st_close(&b);
    return bad;
}

#endif
