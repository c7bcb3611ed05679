/*
 * test_gpu_dp.c - data-parallel training on CUDA devices with the NCCL
 * engine (models/train/dp.c's device path; ctest label "gpu").
 *
 * An MLP (256 examples of 16 features, 4 classes, global batch 32, Adam,
 * 2 epochs: 16 steps) trains from the same seed:
 *   ref     on device 0, no comm (the single-GPU run: acc and graphs);
 *   world1  on device 0 with a world-1 NCCL comm (a one-GPU gang): the
 *           same path, so the same final loss bit for bit and the same
 *           model file;
 *   world2  where two GPUs are present: two threads, rank r on device r,
 *           one NCCL comm of 2, each rank a train_run over its share of
 *           every global batch, with the parameter checksum compared
 *           every step (TRAINYARD_DP_CHECK_EVERY=1: a difference fails
 *           the run). Rank 0 reports every step's loss; the final
 *           training loss is ref's within 1e-4 relative and rank 0's
 *           model ref's within 1e-3 |w| + 1e-4 a weight (the ranks' sum
 *           order differs from one device's; test_gpu_train.c's
 *           tolerance); then zero 1 on 2 devices is refused on both ranks
 *           naming hyperparameters.zero.
 * The device path on a CPU (a simulated device) is tests/dp/run_devsim.py.
 *
 * Exit status: 0 passed, 1 a check failed, 77 skipped with "SKIPPED: ..."
 * (a build without CUDA or NCCL, or no CUDA device).
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/ty.h"
#include "models/train/comm.h"
#include "models/train/train.h"
#include "tests/unit/synth_data.h"

#if TRAINYARD_HAVE_CUDA
#include "gpu/cuda/backend.h"
#include "gpu/cuda/comm_nccl.h"

#include "tests/gpu/gpu_testutil.h"

#define SPEC                                          \
    "{\"layers\":[{\"type\":\"dense\",\"units\":32}," \
    "{\"type\":\"relu\"},{\"type\":\"dense\",\"units\":4}]}"
#define HPARAMS                                               \
    "{\"epochs\":2,\"batch_size\":32,\"optimizer\":\"adam\"," \
    "\"learning_rate\":0.01,\"seed\":5%s}"

static synth data;

typedef struct {
    int rank, device, zero;
    const unsigned char *id;
    char path[256];
    uint64_t steps; /* on_step calls (rank 0) */
    train_epoch_metrics fin;
    ty_status st;
    ty_err err;
} rank_arg;

static void on_step(void *ctx, uint64_t step, double loss)
{
    rank_arg *a = ctx;
    a->steps = step;
    (void)loss;
}

/* One train_run on device a->device with comm (NULL: none). */
static ty_status train_on(rank_arg *a, nn_comm *comm)
{
    char hp_text[256];
    snprintf(hp_text, sizeof hp_text, HPARAMS, a->zero ? ",\"zero\":1" : "");
    json_t *spec = json_loads(SPEC, 0, NULL);
    json_t *hj = json_loads(hp_text, 0, NULL);
    train_hparams hp;
    nn_exec ex;
    memset(&ex, 0, sizeof ex);
    ty_status st = train_hparams_parse(hj, &hp, NULL, &a->err);
    if (st == TY_OK)
        st = train_hparams_resolve_loss(&hp, data.ds.task, data.ds.num_classes,
                                        NULL, &a->err);
    if (st == TY_OK)
        st = nn_cuda_exec_init(&ex, a->device, &a->err);
    if (st == TY_OK) {
        train_job job = {.spec = spec,
                         .hp = &hp,
                         .train = &data.ds,
                         .model_path = a->path,
                         .threads = 1,
                         .prefetch = -1,
                         .cb = {.ctx = a, .on_step = on_step},
                         .be = &nn_backend_cuda,
                         .ex = &ex,
                         .comm = comm};
        st = train_run(&job, &a->fin, &a->err);
        nn_cuda_exec_free(&ex);
    }
    json_decref(spec);
    json_decref(hj);
    return st;
}

static void *rank_main(void *p)
{
    rank_arg *a = p;
    nn_comm *c = NULL;
    a->st =
        nn_comm_nccl_create(a->rank, 2, a->id, a->device, 60.0, &c, &a->err);
    if (a->st == TY_OK)
        a->st = train_on(a, c);
    if (c) {
        if (a->st != TY_OK)
            c->ops->abort(c, a->err.msg);
        c->ops->destroy(c);
    }
    return NULL;
}

static int world2(const rank_arg *ref, int zero)
{
    unsigned char id[NN_COMM_NCCL_ID_BYTES];
    ty_err err = {0};
    if (nn_comm_nccl_unique_id(id, &err) != TY_OK) {
        printf("FAIL: unique id: %s\n", err.msg);
        return 1;
    }
    rank_arg a[2];
    memset(a, 0, sizeof a);
    pthread_t th[2];
    for (int r = 0; r < 2; r++) {
        a[r] = (rank_arg){.rank = r, .device = r, .zero = zero, .id = id};
        snprintf(a[r].path, sizeof a[r].path, "/tmp/ty_gpu_dp_%d_r%d.st",
                 (int)getpid(), r);
        pthread_create(&th[r], NULL, rank_main, &a[r]);
    }
    for (int r = 0; r < 2; r++)
        pthread_join(th[r], NULL);
    int rc = 0;
    if (zero) {
        for (int r = 0; r < 2; r++)
            if (a[r].st != TY_EINVAL ||
                strcmp(a[r].err.field, "hyperparameters.zero") != 0) {
                printf("FAIL: zero 1 on 2 GPUs, rank %d: %s (%s)\n", r,
                       ty_status_name(a[r].st), a[r].err.msg);
                rc = 1;
            }
        if (!rc)
            printf("world 2, zero 1: refused: %s\n", a[0].err.msg);
        return rc;
    }
    for (int r = 0; r < 2; r++)
        if (a[r].st != TY_OK) {
            printf("FAIL: world 2, rank %d: %s\n", r, a[r].err.msg);
            rc = 1;
        }
    if (!rc && a[0].steps != 16) {
        printf("FAIL: world 2: rank 0 reported %llu steps (want 16)\n",
               (unsigned long long)a[0].steps);
        rc = 1;
    }
    const double l1 = ref->fin.train_loss, l2 = a[0].fin.train_loss;
    if (!rc && !(fabs(l1 - l2) <= 1e-4 * fabs(l1))) {
        printf("FAIL: world 2: final loss %.9g, one GPU %.9g\n", l2, l1);
        rc = 1;
    }
    if (!rc)
        rc = gpu_compare_models("world2", ref->path, "1 GPU", a[0].path,
                                "2 GPUs", 1e-3, 1e-4);
    if (!rc)
        printf("world 2: 16 steps, final loss %.9g (one GPU %.9g), "
               "replicas identical every step\n",
               l2, l1);
    unlink(a[0].path);
    unlink(a[1].path);
    return rc;
}

int main(void)
{
    if (!nn_comm_nccl_available()) {
        printf("SKIPPED: this build has no NCCL engine\n");
        return 77;
    }
    char why[256] = "";
    int ndev = nn_cuda_device_count(why, sizeof why);
    if (ndev == 0) {
        printf("SKIPPED: no CUDA device (%s)\n", why);
        return 77;
    }
    static const uint32_t shape[] = {16};
    synth_init(&data, TY_TASK_CLASSIFICATION, 256, shape, 1, TY_DTYPE_F32, 4,
               "none");
    ty_rng r;
    ty_rng_seed(&r, 9, 1);
    for (size_t i = 0; i < 256u * 16; i++)
        ((float *)data.x)[i] = ty_rng_normal(&r);
    for (uint32_t i = 0; i < 256; i++)
        data.y[i] = (int32_t)(ty_rng_u64(&r) % 4);
    setenv("TRAINYARD_DP_CHECK_EVERY", "1", 1);

    int rc = 0;
    rank_arg ref = {.device = 0}, one = {.device = 0};
    snprintf(ref.path, sizeof ref.path, "/tmp/ty_gpu_dp_%d_ref.st",
             (int)getpid());
    snprintf(one.path, sizeof one.path, "/tmp/ty_gpu_dp_%d_w1.st",
             (int)getpid());
    if (train_on(&ref, NULL) != TY_OK) {
        printf("FAIL: one GPU: %s\n", ref.err.msg);
        rc = 1;
    }
    /* A one-GPU gang: a world-1 NCCL comm. */
    unsigned char id[NN_COMM_NCCL_ID_BYTES];
    nn_comm *c = NULL;
    if (!rc && (nn_comm_nccl_unique_id(id, &one.err) != TY_OK ||
                nn_comm_nccl_create(0, 1, id, 0, 30.0, &c, &one.err) != TY_OK ||
                train_on(&one, c) != TY_OK)) {
        printf("FAIL: world 1 NCCL: %s\n", one.err.msg);
        rc = 1;
    }
    if (c)
        c->ops->destroy(c);
    if (!rc && one.fin.train_loss != ref.fin.train_loss) {
        printf("FAIL: world 1 NCCL: final loss %.9g, no comm %.9g\n",
               one.fin.train_loss, ref.fin.train_loss);
        rc = 1;
    }
    if (!rc)
        rc = gpu_compare_models("world1", ref.path, "no comm", one.path,
                                "world-1 NCCL", 0.0, 0.0);
    if (!rc)
        printf("world 1 NCCL: the single-GPU run's loss %.9g and model\n",
               one.fin.train_loss);
    if (!rc && ndev >= 2)
        rc = world2(&ref, 0) || world2(&ref, 1);
    else if (!rc)
        printf("world 2 skipped: %d CUDA device (it needs 2)\n", ndev);
    unlink(ref.path);
    unlink(one.path);
    synth_free(&data);
    return rc ? 1 : 0;
}

#else

int main(void)
{
    printf("SKIPPED: built without the CUDA backend\n");
    return 77;
}

#endif
