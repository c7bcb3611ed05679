/*
 * dp_comm_bench.c - the step collectives of data-parallel training on
 * their own, under mpirun -np N with the MPI engine (bench/dp/run.py
 * --collectives runs it; not a test: it asserts nothing but the sums).
 *
 * For a flat gradient block of P floats (--floats, default the
 * Fashion-MNIST MLP's 235,146) split into ZeRO-1's ranges
 * (dp_zero_range), each round times, one after the other:
 *   zero 0   the all-reduce of the block;
 *   zero 1   the reduce-scatter of the block, then the all-gather of the
 *            ranges (what a ZeRO-1 step sends);
 *   before   the all-reduce of the block, then the all-gather (ZeRO-1
 *            before the reduce-scatter);
 * and the reduce-scatter and the all-gather alone.
 * Rank 0 prints each one's median and fastest round in microseconds and
 * the bytes it sent a round (nn_comm_stats).
 *
 *   mpirun -np 2 dp_comm_bench [--floats P] [--rounds R]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "models/train/comm.h"
#include "models/train/train_internal.h"

static double now_sec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static uint64_t sent(const nn_comm *c)
{
    uint64_t s = 0;
    for (int k = 0; k < NN_COMM_OP_COUNT; k++)
        s += c->stats.bytes[k];
    return s;
}

int main(int argc, char **argv)
{
    size_t p = 235146;
    int rounds = 200;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--floats"))
            p = (size_t)strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--rounds"))
            rounds = atoi(argv[i + 1]);
    }
    if (!nn_comm_mpi_available()) {
        printf("SKIPPED: this build has no MPI engine\n");
        return 77;
    }
    nn_comm *c = NULL;
    ty_err err = {0};
    if (nn_comm_mpi_create(60.0, &c, &err) != TY_OK) {
        fprintf(stderr, "error: %s\n", err.msg);
        return 1;
    }
    const int w = c->world, me = c->rank;
    float *g = malloc(p * sizeof *g);
    size_t *off = malloc(((size_t)w + 1) * sizeof *off);
    double *t[5];
    for (int k = 0; k < 5; k++)
        t[k] = malloc((size_t)rounds * sizeof(double));
    for (int r = 0; r < w; r++) {
        uint64_t lo, hi;
        dp_zero_range(p, r, w, &lo, &hi);
        off[r] = (size_t)lo;
        off[r + 1] = (size_t)hi;
    }
    const char *names[5] = {"zero 0 (all-reduce)",
                            "zero 1 (reduce-scatter + all-gather)",
                            "before (all-reduce + all-gather)",
                            "  reduce-scatter alone", "  all-gather alone"};
    uint64_t bytes[5] = {0, 0, 0, 0, 0};
    ty_status st = TY_OK;
    for (int i = 0; i < rounds && st == TY_OK; i++)
        for (int k = 0; k < 5 && st == TY_OK; k++) {
            for (size_t j = 0; j < p; j++)
                g[j] = (float)(me + 1);
            st = c->ops->barrier(c, &err);
            const uint64_t s0 = sent(c);
            const double t0 = now_sec();
            nn_comm_req q;
            if (st == TY_OK && (k == 1 || k == 3))
                st = c->ops->reduce_scatter_start(c, NULL, g, off, 0, p, 1.0f,
                                                  &q, &err);
            else if (st == TY_OK && k != 4)
                st = c->ops->allreduce_start(c, NULL, g, p, 1.0f, &q, &err);
            if (st == TY_OK && k != 4)
                st = c->ops->allreduce_wait(c, NULL, q, &err);
            if (st == TY_OK && (k == 1 || k == 2 || k == 4))
                st = c->ops->allgather(c, g, off, &err);
            t[k][i] = now_sec() - t0;
            bytes[k] = sent(c) - s0;
            const float want = (float)(w * (w + 1) / 2);
            if (st == TY_OK && k < 4 && g[off[me]] != want) {
                fprintf(stderr, "error: rank %d: sum %g, want %g\n", me,
                        g[off[me]], want);
                st = TY_EINTERNAL;
            }
        }
    if (st != TY_OK)
        fprintf(stderr, "error: %s\n", err.msg);
    else if (me == 0) {
        printf("%d ranks, %zu floats, %d rounds\n", w, p, rounds);
        for (int k = 0; k < 5; k++) {
            qsort(t[k], (size_t)rounds, sizeof(double), cmp_double);
            printf("  %-38s median %8.1f us  fastest %8.1f us  %9llu bytes "
                   "sent\n",
                   names[k], 1e6 * t[k][rounds / 2], 1e6 * t[k][0],
                   (unsigned long long)bytes[k]);
        }
    }
    for (int k = 0; k < 5; k++)
        free(t[k]);
    free(off);
    free(g);
    c->ops->destroy(c);
    return st == TY_OK ? 0 : 1;
}
