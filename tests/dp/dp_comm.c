/*
 * dp_comm.c - the collective seam's engines (models/train/comm.h) on their
 * own: the self engine in-process, and the MPI engine when launched under
 * mpirun -np 2 with --mpi (tests/dp/run_dp.py runs both). Prints "PASS"
 * on every rank that passes, "FAIL: ..." otherwise (exit 1); exit 77
 * without the MPI engine.
 *
 * MPI checks: all-reduce with a scale (mean of the ranks' values),
 * buckets started together and waited for out of order, progress (tests
 * that complete requests; their waits then apply the scale), broadcast
 * from rank 1, barrier, all-gather of uneven and empty ranges (ZeRO-1's),
 * the in-flight limit (TY_ELIMIT), reduce-scatter of buckets that lie in
 * one rank's range, across two, or are empty, in flight together with an
 * all-reduce and waited for out of order, and its traffic count, then
 * rank 1 aborts
 * with a reason while rank 0 waits in an all-reduce: rank 0's fails with
 * that reason (not its timeout, which is 120 s), and every later op on a
 * broken comm fails at once.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models/train/comm.h"

static int failures;

#define CHECK(cond, ...)                         \
    do {                                         \
        if (!(cond)) {                           \
            printf("FAIL: line %d: ", __LINE__); \
            printf(__VA_ARGS__);                 \
            printf("\n");                        \
            failures++;                          \
        }                                        \
    } while (0)

static void self_checks(void)
{
    nn_comm *c = nn_comm_or_self(NULL);
    ty_err err = {0};
    float v[3] = {1, 2, 4};
    CHECK(c == nn_comm_self() && c->world == 1 && c->rank == 0 &&
              c->local_world == 1,
          "the self comm is rank 0 of 1, alone on its machine");
    CHECK(c->ops->allreduce(c, NULL, v, 3, 0.5f, &err) == TY_OK &&
              v[0] == 0.5f && v[2] == 2.0f,
          "self all-reduce scales: %g %g", v[0], v[2]);
    nn_comm_req r = -1;
    CHECK(c->ops->allreduce_start(c, NULL, v, 3, 1.0f, &r, &err) == TY_OK &&
              c->ops->allreduce_wait(c, NULL, r, &err) == TY_OK,
          "self start/wait");
    CHECK(c->ops->progress == NULL, "the self engine needs no progress");
    CHECK(c->ops->bcast(c, v, sizeof v, 0, &err) == TY_OK &&
              c->ops->barrier(c, &err) == TY_OK,
          "self broadcast and barrier");
    CHECK(c->ops->bcast(c, v, sizeof v, 1, &err) != TY_OK,
          "self broadcast from rank 1 fails");
    const size_t off[2] = {0, 3};
    CHECK(c->ops->allgather(c, v, off, &err) == TY_OK && v[0] == 0.5f,
          "self all-gather leaves the buffer");
    /* Reduce-scatter at world 1: the bucket is rank 0's part; scaled. */
    float w[3] = {1, 2, 4};
    CHECK(c->ops->reduce_scatter_start &&
              c->ops->reduce_scatter_start(c, NULL, w, off, 1, 3, 0.5f, &r,
                                           &err) == TY_OK &&
              c->ops->allreduce_wait(c, NULL, r, &err) == TY_OK &&
              w[0] == 1.0f && w[1] == 1.0f && w[2] == 2.0f,
          "self reduce-scatter scales the bucket only: %g %g %g", w[0], w[1],
          w[2]);
    c->ops->abort(c, "nothing");
    c->ops->destroy(c);
}

static void mpi_checks(void)
{
    nn_comm *c = NULL;
    ty_err err = {0};
    if (nn_comm_mpi_create(120.0, &c, &err) != TY_OK) {
        CHECK(0, "nn_comm_mpi_create: %s", err.msg);
        return;
    }
    CHECK(c->world == 2, "world %d (run under mpirun -np 2)", c->world);
    /* mpirun put both on this machine: they share its cores. */
    CHECK(c->local_world == 2, "local world %d (both ranks on this machine)",
          c->local_world);
    if (c->world != 2) {
        c->ops->destroy(c);
        return;
    }
    const int me = c->rank;
    /* Mean of (rank + 1) * i: 1.5 i. */
    enum { N = 100000, B = 8 };
    float *buf = malloc(N * sizeof *buf);
    for (int i = 0; i < N; i++)
        buf[i] = (float)((me + 1) * i);
    CHECK(c->ops->allreduce(c, NULL, buf, N, 0.5f, &err) == TY_OK,
          "all-reduce: %s", err.msg);
    int bad = 0;
    for (int i = 0; i < N; i++)
        bad += buf[i] != 1.5f * (float)i;
    CHECK(!bad, "all-reduce mean: %d wrong values", bad);

    /* Buckets started together, waited for last first. */
    for (int i = 0; i < N; i++)
        buf[i] = (float)(me + 1);
    nn_comm_req req[B];
    for (int b = 0; b < B; b++)
        CHECK(c->ops->allreduce_start(c, NULL, buf + b * (N / B), N / B, 1.0f,
                                      &req[b], &err) == TY_OK,
              "start bucket %d: %s", b, err.msg);
    for (int b = B; b-- > 0;)
        CHECK(c->ops->allreduce_wait(c, NULL, req[b], &err) == TY_OK,
              "wait bucket %d: %s", b, err.msg);
    bad = 0;
    for (int i = 0; i < N; i++)
        bad += buf[i] != 3.0f;
    CHECK(!bad, "buckets: %d wrong sums", bad);

    /* progress: requests tested (some may complete inside it) until they
     * are, then waited for with the scale applied once; the sums are the
     * same. The self engine needs none (NULL). */
    for (int i = 0; i < N; i++)
        buf[i] = (float)(me + 1);
    CHECK(c->ops->progress != NULL, "the MPI engine has a progress op");
    for (int b = 0; b < 2; b++)
        CHECK(c->ops->allreduce_start(c, NULL, buf + b * (N / 2), N / 2,
                                      b ? 0.5f : 1.0f, &req[b], &err) == TY_OK,
              "start progressed bucket %d: %s", b, err.msg);
    for (int k = 0; k < 1000 && c->ops->progress; k++)
        c->ops->progress(c);
    for (int b = 0; b < 2; b++)
        CHECK(c->ops->allreduce_wait(c, NULL, req[b], &err) == TY_OK,
              "wait progressed bucket %d: %s", b, err.msg);
    bad = 0;
    for (int i = 0; i < N; i++)
        bad += buf[i] != (i < N / 2 ? 3.0f : 1.5f);
    CHECK(!bad, "progressed buckets: %d wrong sums", bad);

    /* The in-flight limit. */
    nn_comm_req many[NN_COMM_MAX_INFLIGHT];
    float one[NN_COMM_MAX_INFLIGHT + 1];
    for (int k = 0; k < NN_COMM_MAX_INFLIGHT; k++) {
        one[k] = 1.0f;
        CHECK(c->ops->allreduce_start(c, NULL, &one[k], 1, 1.0f, &many[k],
                                      &err) == TY_OK,
              "start %d: %s", k, err.msg);
    }
    nn_comm_req extra;
    CHECK(c->ops->allreduce_start(c, NULL, &one[NN_COMM_MAX_INFLIGHT], 1, 1.0f,
                                  &extra, &err) == TY_ELIMIT,
          "one more than NN_COMM_MAX_INFLIGHT is TY_ELIMIT");
    for (int k = 0; k < NN_COMM_MAX_INFLIGHT; k++)
        CHECK(c->ops->allreduce_wait(c, NULL, many[k], &err) == TY_OK &&
                  one[k] == 2.0f,
              "wait %d: %s", k, err.msg);

    /* Broadcast from rank 1, barrier. */
    char text[32] = "";
    if (me == 1)
        snprintf(text, sizeof text, "from rank one");
    CHECK(c->ops->bcast(c, text, sizeof text, 1, &err) == TY_OK &&
              !strcmp(text, "from rank one"),
          "broadcast: '%s' %s", text, err.msg);
    CHECK(c->ops->barrier(c, &err) == TY_OK, "barrier: %s", err.msg);

    /* All-gather (ZeRO-1's slices): ranges of 4 and 3 values, then an
     * empty one for rank 0; each rank holds its own only beforehand. */
    const size_t offs[2][3] = {{0, 4, 7}, {0, 0, 3}};
    for (int k = 0; k < 2; k++) {
        float g[7];
        const size_t *off = offs[k];
        for (size_t i = 0; i < 7; i++)
            g[i] = i >= off[me] && i < off[me + 1] ? (float)(10 * (me + 1) + i)
                                                   : -1.0f;
        CHECK(c->ops->allgather && c->ops->allgather(c, g, off, &err) == TY_OK,
              "all-gather %d: %s", k, err.msg);
        bad = 0;
        for (size_t i = 0; i < off[2]; i++)
            bad += g[i] != (float)(10 * (i < off[1] ? 1 : 2) + i);
        CHECK(!bad, "all-gather %d: %d wrong values", k, bad);
    }

    /* Reduce-scatter (ZeRO-1's buckets): uneven ranges [0,5) [5,12) of
     * 12 values, buf[i] = (rank + 1)(i + 1) so the sum is 3(i + 1).
     * Buckets [8,12) (rank 1's only), [3,8) (across both), [0,3) (rank
     * 0's only) and an empty one, started together with an all-reduce
     * among them, progressed, waited for out of order; [3,8) with scale
     * 0.5. Each rank's part of each bucket holds the sum. */
    {
        const size_t off[3] = {0, 5, 12};
        const size_t bk[4][2] = {{8, 12}, {3, 8}, {0, 3}, {4, 4}};
        float g[12], s = (float)(me + 1);
        for (int i = 0; i < 12; i++)
            g[i] = (float)((me + 1) * (i + 1));
        nn_comm_req rq[5];
        const nn_comm_stats before = c->stats;
        CHECK(c->ops->reduce_scatter_start != NULL,
              "the MPI engine reduce-scatters");
        for (int k = 0; k < 4 && c->ops->reduce_scatter_start; k++) {
            CHECK(c->ops->reduce_scatter_start(c, NULL, g, off, bk[k][0],
                                               bk[k][1], k == 1 ? 0.5f : 1.0f,
                                               &rq[k], &err) == TY_OK,
                  "start reduce-scatter %d: %s", k, err.msg);
            if (k == 1)
                CHECK(c->ops->allreduce_start(c, NULL, &s, 1, 1.0f, &rq[4],
                                              &err) == TY_OK,
                      "an all-reduce among them: %s", err.msg);
        }
        for (int k = 0; k < 100; k++)
            c->ops->progress(c);
        const int order[5] = {2, 4, 0, 3, 1};
        for (int k = 0; k < 5 && c->ops->reduce_scatter_start; k++)
            CHECK(c->ops->allreduce_wait(c, NULL, rq[order[k]], &err) == TY_OK,
                  "wait %d: %s", order[k], err.msg);
        bad = 0;
        for (size_t i = off[me]; i < off[me + 1]; i++) {
            float want =
                3.0f * (float)(i + 1) * (i >= 3 && i < 8 ? 0.5f : 1.0f);
            bad += g[i] != want;
        }
        CHECK(!bad && s == 3.0f,
              "reduce-scatter: %d wrong sums (all-reduce %g)", bad, s);
        /* Rank 0 sends the bucket less its own part on the ring: counted
         * as (N-1)/N of 16 bytes, 20 bytes, 12 bytes and 0 bytes. */
        CHECK(c->stats.calls[NN_COMM_OP_REDUCE_SCATTER] -
                          before.calls[NN_COMM_OP_REDUCE_SCATTER] ==
                      4 &&
                  c->stats.bytes[NN_COMM_OP_REDUCE_SCATTER] -
                          before.bytes[NN_COMM_OP_REDUCE_SCATTER] ==
                      8 + 10 + 6,
              "reduce-scatter traffic counted: %llu calls",
              (unsigned long long)(c->stats.calls[NN_COMM_OP_REDUCE_SCATTER] -
                                   before.calls[NN_COMM_OP_REDUCE_SCATTER]));
        /* A large bucket in one call: [0, N) over ranges [0, 60001)
         * [60001, N) of buf (every value rank + 1: the sum 3). */
        const size_t big[3] = {0, 60001, N};
        for (int i = 0; i < N; i++)
            buf[i] = (float)(me + 1);
        nn_comm_req one_rq;
        CHECK(c->ops->reduce_scatter_start(c, NULL, buf, big, 0, N, 1.0f,
                                           &one_rq, &err) == TY_OK &&
                  c->ops->allreduce_wait(c, NULL, one_rq, &err) == TY_OK,
              "large reduce-scatter: %s", err.msg);
        bad = 0;
        for (size_t i = big[me]; i < big[me + 1]; i++)
            bad += buf[i] != 3.0f;
        CHECK(!bad, "large reduce-scatter: %d wrong sums", bad);
    }

    /* Rank 1 aborts; rank 0, in an all-reduce, fails with its reason. */
    if (me == 1) {
        usleep(200000); /* rank 0 is waiting by then (or will be) */
        c->ops->abort(c, "the test's reason");
        CHECK(c->ops->barrier(c, &err) == TY_EDEVICE &&
                  strstr(err.msg, "broken"),
              "an op after abort fails at once: %s", err.msg);
    } else {
        float x = 1.0f;
        ty_status st = c->ops->allreduce(c, NULL, &x, 1, 1.0f, &err);
        CHECK(st == TY_EDEVICE && strstr(err.msg, "rank 1 aborted") &&
                  strstr(err.msg, "the test's reason"),
              "the all-reduce fails with rank 1's reason: %s", err.msg);
        CHECK(c->ops->bcast(c, &x, sizeof x, 0, &err) == TY_EDEVICE &&
                  strstr(err.msg, "the test's reason"),
              "a later op fails at once with the first reason: %s", err.msg);
    }
    free(buf);
    c->ops->destroy(c);
}

int main(int argc, char **argv)
{
    int use_mpi = argc > 1 && !strcmp(argv[1], "--mpi");
    if (!use_mpi) {
        self_checks();
    } else {
        if (!nn_comm_mpi_available()) {
            printf("SKIPPED: this build has no MPI engine\n");
            return 77;
        }
        mpi_checks();
    }
    printf(failures ? "FAIL: %d check(s)\n" : "PASS\n", failures);
    return failures ? 1 : 0;
}
