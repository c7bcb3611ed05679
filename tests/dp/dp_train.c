/*
 * dp_train.c - one rank of a data-parallel training run on Fashion-MNIST's
 * MLP, for the data-parallel tests (tests/dp/run_dp.py) and the overhead
 * bench (bench/dp/run.sh). Launched alone it trains as one process (the
 * self comm, or an MPI world of 1 with --mpi); under mpirun -np N with
 * --mpi each process is one rank of N.
 *
 *   dp_train --out FILE [--mpi] [--train N] [--steps S] [--batch B]
 *            [--threads T] [--timeout SEC] [--prefetch P] [--accum K]
 *            [--ckpt PATH] [--clip NORM] [--lr-rank1 LR]
 *            [--zero Z] [--sgd-momentum M]
 *
 * Rank 0 writes FILE: "step <n> <loss>" per optimizer step, then
 * "accuracy <test accuracy>", "peak <bytes> estimate <bytes>",
 * "allreduce <seconds> share <fraction>", "optimizer_state <bytes>
 * estimate <bytes>" (rank 0's, and train_memory_estimate_rank's),
 * "samples_per_sec <rate>", "seconds <wall time of train_run>" and, with
 * --mpi, "comm_bytes allreduce A reduce_scatter R allgather G bcast B"
 * (rank 0's comm->stats: the bytes a ring sends, by op), after
 * "epoch_comm_bytes N" (the last epoch's train_epoch_metrics.comm_bytes).
 * --zero gives hyperparameters.zero; --sgd-momentum trains with SGD and
 * that momentum instead of Adam. Every rank prints "rank R of N pid P"
 * on stdout first, and on a failure "rank R: error: <message>" on stderr
 * and exits 1. Exit 77: no data (or --mpi without the MPI engine).
 * SIGUSR1 sets the rank's job.stop (a cancel).
 * Data: $TY_FASHION_DIR, else /usr/share/datasets/fashion-mnist; the
 * first N training examples, all 10,000 test examples as validation.
 * --lr-rank1 gives rank 1 another learning rate (a misconfigured rank, for
 * the parameter check: TRAINYARD_DP_CHECK_EVERY).
 * --devsim (with --mpi) trains on a simulated device (devsim.h): the CPU's
 * kernels behind a backend that is not host visible, the MPI engine
 * behind a device engine, the path a CUDA gang with NCCL takes;
 * --devsim-backend the simulated backend with the plain MPI engine (a
 * pairing the trainer refuses).
 */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "common/ty.h"
#include "models/train/comm.h"
#include "models/train/train.h"
#include "tests/unit/fashion_idx.h"
#include "tests/unit/synth_data.h"
#include "tests/dp/devsim.h"

static const char *const mlp_spec =
    "{\"layers\":[{\"type\":\"flatten\"},"
    "{\"type\":\"dense\",\"units\":256},{\"type\":\"relu\"},"
    "{\"type\":\"dense\",\"units\":128},{\"type\":\"relu\"},"
    "{\"type\":\"dense\",\"units\":10}]}";

/* SIGUSR1 to one rank: its job.stop (the ranks agree on it at the next
 * step, so all of them stop there). */
static volatile sig_atomic_t stop_flag;

static void on_usr1(int sig)
{
    (void)sig;
    stop_flag = 1;
}

typedef struct {
    FILE *out;
    train_epoch_metrics last;
} run_ctx;

static void on_step(void *ctx, uint64_t step, double loss)
{
    run_ctx *r = ctx;
    fprintf(r->out, "step %llu %.9g\n", (unsigned long long)step, loss);
    fflush(r->out);
}

static void on_epoch(void *ctx, const train_epoch_metrics *m)
{
    ((run_ctx *)ctx)->last = *m;
}

static double now_sec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    const char *out_path = NULL, *ckpt = NULL;
    int use_mpi = 0, threads = 1, prefetch = -1, devsim = 0;
    uint32_t n_train = 12800, batch = 128, accum = 1;
    uint64_t steps = 200;
    double timeout = 0, lr = 0.001, lr_rank1 = 0, clip = 0, sgd_mom = -1;
    int zero = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--mpi")) {
            use_mpi = 1;
            continue;
        }
        if (!strcmp(a, "--devsim") || !strcmp(a, "--devsim-backend")) {
            devsim = a[8] ? 2 : 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "dp_train: %s needs a value\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--out"))
            out_path = v;
        else if (!strcmp(a, "--ckpt"))
            ckpt = v;
        else if (!strcmp(a, "--train"))
            n_train = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--steps"))
            steps = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--batch"))
            batch = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--accum"))
            accum = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--threads"))
            threads = atoi(v);
        else if (!strcmp(a, "--prefetch"))
            prefetch = atoi(v);
        else if (!strcmp(a, "--clip"))
            clip = atof(v);
        else if (!strcmp(a, "--zero"))
            zero = atoi(v);
        else if (!strcmp(a, "--sgd-momentum"))
            sgd_mom = atof(v);
        else if (!strcmp(a, "--lr-rank1")) /* a misconfigured rank 1 */
            lr_rank1 = atof(v);
        else if (!strcmp(a, "--timeout"))
            timeout = atof(v);
        else {
            fprintf(stderr, "dp_train: unknown argument %s\n", a);
            return 2;
        }
    }
    if (!out_path) {
        fprintf(stderr, "dp_train: --out FILE is required\n");
        return 2;
    }
    nn_comm *comm = NULL;
    ty_err err = {0};
    if (use_mpi) {
        if (!nn_comm_mpi_available()) {
            printf("SKIPPED: this build has no MPI engine\n");
            return 77;
        }
        if (nn_comm_mpi_create(timeout, &comm, &err) != TY_OK) {
            fprintf(stderr, "rank ?: error: %s\n", err.msg);
            return 1;
        }
        nn_comm *dev = devsim == 1 ? devsim_comm(comm) : comm;
        if (!dev) {
            fprintf(stderr, "rank ?: error: out of memory\n");
            return 1;
        }
        comm = dev;
    }
    static nn_exec dev_ex;
    const int rank = comm ? comm->rank : 0, world = comm ? comm->world : 1;
    printf("rank %d of %d pid %d\n", rank, world, (int)getpid());
    fflush(stdout);

    const char *dir = getenv("TY_FASHION_DIR");
    if (!dir || !*dir)
        dir = "/usr/share/datasets/fashion-mnist";
    synth train, test;
    memset(&test, 0, sizeof test);
    int r = fashion_load_set(dir, "train-images-idx3-ubyte",
                             "train-labels-idx1-ubyte", n_train, &train);
    if (r == 0)
        r = fashion_load_set(dir, "t10k-images-idx3-ubyte",
                             "t10k-labels-idx1-ubyte", 0, &test);
    if (r != 0) {
        printf("%s Fashion-MNIST files in %s\n",
               r > 0 ? "SKIPPED: no" : "FAIL: malformed", dir);
        return r > 0 ? 77 : 1;
    }

    if (rank == 1 && lr_rank1 > 0)
        lr = lr_rank1;
    char clip_text[64] = "";
    if (clip > 0)
        snprintf(clip_text, sizeof clip_text, "\"clip_grad_norm\":%g,", clip);
    char opt_text[128] = "\"optimizer\":\"adam\"";
    if (sgd_mom >= 0)
        snprintf(opt_text, sizeof opt_text,
                 "\"optimizer\":\"sgd\",\"momentum\":%g", sgd_mom);
    char zero_text[32] = "";
    if (zero)
        snprintf(zero_text, sizeof zero_text, "\"zero\":%d,", zero);
    char hp_text[640];
    snprintf(hp_text, sizeof hp_text,
             "{\"epochs\":1000,\"max_steps\":%llu,\"batch_size\":%u,"
             "\"accumulation_steps\":%u,%s%s%s,"
             "\"learning_rate\":%g,\"seed\":7}",
             (unsigned long long)steps, batch, accum, clip_text, zero_text,
             opt_text, lr);
    json_t *spec = json_loads(mlp_spec, 0, NULL);
    json_t *hj = json_loads(hp_text, 0, NULL);
    train_hparams hp;
    int rc = 1;
    FILE *out = rank == 0 ? fopen(out_path, "w") : NULL;
    if (rank == 0 && !out) {
        fprintf(stderr, "rank 0: error: cannot write %s\n", out_path);
        goto done;
    }
    if (train_hparams_parse(hj, &hp, NULL, &err) != TY_OK ||
        train_hparams_resolve_loss(&hp, TY_TASK_CLASSIFICATION, 10, NULL,
                                   &err) != TY_OK) {
        fprintf(stderr, "rank %d: error: %s\n", rank, err.msg);
        goto done;
    }
    char model[256];
    snprintf(model, sizeof model, "%s.model", out_path);
    run_ctx ctx = {.out = out};
    train_job job = {
        .spec = spec,
        .hp = &hp,
        .train = &train.ds,
        .val = &test.ds,
        .model_path = model,
        .checkpoint_path = ckpt,
        .threads = threads,
        .prefetch = prefetch,
        .cb = {.ctx = &ctx, .on_step = on_step, .on_epoch = on_epoch},
        .comm = comm,
        .stop = &stop_flag,
        .be = devsim ? devsim_backend() : NULL,
        .ex = devsim ? &dev_ex : NULL,
    };
    signal(SIGUSR1, on_usr1);
    train_epoch_metrics fin;
    const double t0 = now_sec();
    if (train_run(&job, &fin, &err) != TY_OK) {
        fprintf(stderr, "rank %d: error: %s [field: %s]\n", rank, err.msg,
                err.field[0] ? err.field : "none");
        goto done;
    }
    const double secs = now_sec() - t0;
    if (rank == 0) {
        train_memory mem;
        const uint32_t shape[] = {1, 28, 28};
        if (train_memory_estimate_rank(
                spec, shape, 3, 10, TY_TASK_CLASSIFICATION, &hp, n_train,
                threads, NULL, (uint32_t)world, &mem, &err) != TY_OK) {
            fprintf(stderr, "rank 0: error: estimate: %s\n", err.msg);
            goto done;
        }
        fprintf(out, "accuracy %.6f\n", fin.val_accuracy);
        fprintf(out, "peak %llu estimate %llu\n",
                (unsigned long long)fin.peak_memory_bytes,
                (unsigned long long)mem.total);
        fprintf(out, "world %u allreduce %.6f share %.6f\n", fin.world_size,
                fin.allreduce_seconds, fin.allreduce_share);
        fprintf(out, "optimizer_state %llu estimate %llu\n",
                (unsigned long long)fin.optimizer_state_bytes,
                (unsigned long long)mem.optimizer);
        fprintf(out, "samples_per_sec %.1f\nseconds %.3f\n",
                fin.samples_per_sec, secs);
        /* Rank 0's traffic by op (nn_comm_stats: ring bytes sent). */
        fprintf(out, "epoch_comm_bytes %llu\n",
                (unsigned long long)fin.comm_bytes);
        if (comm)
            fprintf(out,
                    "comm_bytes allreduce %llu reduce_scatter %llu "
                    "allgather %llu bcast %llu\n",
                    (unsigned long long)comm->stats.bytes[NN_COMM_OP_ALLREDUCE],
                    (unsigned long long)
                        comm->stats.bytes[NN_COMM_OP_REDUCE_SCATTER],
                    (unsigned long long)comm->stats.bytes[NN_COMM_OP_ALLGATHER],
                    (unsigned long long)comm->stats.bytes[NN_COMM_OP_BCAST]);
        unlink(model);
    }
    rc = 0;
done:
    if (out)
        fclose(out);
    json_decref(spec);
    json_decref(hj);
    synth_free(&train);
    synth_free(&test);
    if (comm) {
        if (rc != 0)
            comm->ops->abort(comm, err.msg);
        comm->ops->destroy(comm);
    }
    return rc;
}
