/*
 * memory.c - what a training run takes: its compute threads and the bytes
 * it holds from its backend (train_memory, exact: the trainer in run.c
 * allocates exactly these), and how byte counts are written.
 */
#include <stdio.h>
#include <unistd.h>

#include "models/train/train_internal.h"

#define MAX_THREADS 64

int train_threads(int requested, const nn_backend *be)
{
    /* A device backend runs its kernels on its own stream: no pool. */
    if (be && !nn_backend_host_visible(be))
        return 1;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = requested > 0 ? requested : (int)(cores > 0 ? cores : 1);
    /* Workers wait by spinning: more of them than cores only slows down. */
    if (cores > 0 && threads > cores)
        threads = (int)cores;
    if (threads > MAX_THREADS)
        threads = MAX_THREADS;
    return threads;
}

uint64_t train_memory_estimate(const nn_arch *arch, const train_hparams *hp,
                               uint32_t n_train, int threads, uint32_t world,
                               train_memory *out)
{
    train_memory m = {0};
    const uint64_t p = arch->param_count ? arch->param_count : 1;
    /* A rank's minibatches are its share of the global batch (dp.c). */
    const uint32_t rows = hp->batch_size / (world > 1 ? world : 1);
    m.param_count = arch->param_count;
    m.batch_rows = rows < n_train ? rows : n_train;
    if (m.batch_rows == 0)
        m.batch_rows = 1;
    m.state = (arch->param_count + arch->buffer_count + 1) * sizeof(float);
    m.grads = train_grads_bytes(arch->be, p); /* + acc, dyn on a device */
    /* ZeRO-1: rank 0's shard, the largest (dp_zero_range). */
    uint64_t shard_lo = 0, shard_hi = arch->param_count;
    if (hp->zero == 1 && world > 1)
        dp_zero_range(arch->param_count, 0, (int)world, &shard_lo, &shard_hi);
    m.optimizer =
        nn_optim_state_bytes(train_hparams_optim(hp), shard_hi - shard_lo);
    m.activations = nn_workspace_bytes(arch, m.batch_rows, 1, threads, &m.work);
    m.low_precision =
        arch->precision != NN_DT_F32 ? p * nn_dtype_size(arch->precision) : 0;
    m.total = m.state + m.grads + m.optimizer + m.activations + m.work +
              m.low_precision;
    if (out)
        *out = m;
    return m.total;
}

ty_status train_memory_estimate_spec(const json_t *spec,
                                     const uint32_t *input_shape, uint32_t ndim,
                                     uint32_t num_outputs, ty_task task,
                                     const train_hparams *hp, uint32_t n_train,
                                     int threads, const nn_backend *be,
                                     train_memory *out, ty_err *err)
{
    return train_memory_estimate_rank(spec, input_shape, ndim, num_outputs,
                                      task, hp, n_train, threads, be, 1, out,
                                      err);
}

ty_status train_memory_estimate_rank(const json_t *spec,
                                     const uint32_t *input_shape, uint32_t ndim,
                                     uint32_t num_outputs, ty_task task,
                                     const train_hparams *hp, uint32_t n_train,
                                     int threads, const nn_backend *be,
                                     uint32_t world, train_memory *out,
                                     ty_err *err)
{
    nn_arch arch;
    ty_status st =
        nn_arch_build_on(spec, input_shape, ndim, num_outputs, task, &hp->loss,
                         be ? be : &nn_backend_cpu, &arch, NULL, err);
    if (st != TY_OK)
        return st;
    /* The precision the run would train in here (a device that cannot
     * train an explicit bf16/fp16 fails the run; estimated as fp32). */
    nn_dtype dt;
    if (train_precision_resolve(hp, arch.be, NULL, &dt, NULL) == TY_OK)
        nn_arch_set_precision(&arch, dt);
    train_memory_estimate(&arch, hp, n_train, threads, world, out);
    nn_arch_free(&arch);
    return TY_OK;
}

void train_format_bytes(uint64_t n, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)n;
    size_t u = 0;
    while (v >= 1024.0 && u + 1 < sizeof units / sizeof *units) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%llu B", (unsigned long long)n);
    else
        snprintf(buf, len, v < 10.0 ? "%.1f %s" : "%.0f %s", v, units[u]);
}
