/*
 * dp_buckets.c - the data-parallel gradient buckets (dp_plan_buckets,
 * dp_buckets_ready in models/train/dp.c): reverse layer order, the size
 * limits, a large layer in pieces, and a bucket ready only once every
 * one of its parameters' gradients is final; the collective seam's pure
 * helpers ZeRO-1 uses: a bucket's per-rank parts for the reduce-scatter
 * (nn_comm_part) and the traffic measure (nn_comm_count). Prints PASS or
 * FAIL lines.
 */
#include <stdio.h>

#include "models/train/train_internal.h"

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

/* The buckets tile [0, p) from the top down, without gaps or overlaps,
 * none over cap. */
static int tiles(const dp_bucket *b, uint32_t n, uint64_t p, uint64_t cap)
{
    uint64_t hi = p;
    for (uint32_t k = 0; k < n; k++) {
        if (b[k].hi != hi || b[k].lo >= b[k].hi || b[k].hi - b[k].lo > cap)
            return 0;
        hi = b[k].lo;
    }
    return hi == 0;
}

int main(void)
{
    dp_bucket b[16];
    /* Fashion-MNIST's MLP 784-256-128-10: layers at 0, 200960, 233856
     * (p 235146). First bucket from 32768 floats: the last two layers
     * (34186) make it; the first layer is the second. */
    const uint64_t mlp[] = {0, 200960, 233856};
    uint32_t n = dp_plan_buckets(mlp, 3, 235146, 32768, 1 << 20, b, 16);
    CHECK(n == 2 && b[0].lo == 200960 && b[0].hi == 235146 && b[1].lo == 0 &&
              b[1].hi == 200960,
          "MLP: %u buckets, first [%llu, %llu)", n, (unsigned long long)b[0].lo,
          (unsigned long long)b[0].hi);
    /* Ready only when all of a bucket is final: the last layer alone is
     * not enough for the first bucket. */
    CHECK(dp_buckets_ready(b, n, 235146) == 0, "nothing final: none ready");
    CHECK(dp_buckets_ready(b, n, 233856) == 0,
          "the last layer final: the first bucket still waits for layer 1");
    CHECK(dp_buckets_ready(b, n, 200960) == 1,
          "layers 2 and 3 final: the first bucket ready");
    CHECK(dp_buckets_ready(b, n, 100) == 1, "a partly final bucket waits");
    CHECK(dp_buckets_ready(b, n, 0) == 2, "all final: all ready");

    /* Small layers gather until the cap; a large layer goes in pieces of
     * cap from its top; the count without out is the same. */
    const uint64_t lay[] = {0, 10, 20, 30, 100, 110};
    n = dp_plan_buckets(lay, 6, 120, 15, 25, b, 16);
    CHECK(n == dp_plan_buckets(lay, 6, 120, 15, 25, NULL, 0),
          "counting agrees: %u", n);
    CHECK(tiles(b, n, 120, 25), "the buckets tile the block, each <= cap");
    /* [110,120) 10 < 15; + [100,110) -> [100,120) 20 >= 15: bucket 0.
     * [30,100) 70 >= 25: pieces [75,100) [50,75) [30,50). [20,30) 10,
     * + [10,20) 20, + [0,10) 30 >= 25: [5,30) and [0,5). */
    const uint64_t want[][2] = {{100, 120}, {75, 100}, {50, 75},
                                {30, 50},   {5, 30},   {0, 5}};
    int same = n == 6;
    for (uint32_t k = 0; same && k < n; k++)
        same = b[k].lo == want[k][0] && b[k].hi == want[k][1];
    CHECK(same, "reverse order and limits: %u buckets", n);
    CHECK(dp_buckets_ready(b, n, 100) == 1 && dp_buckets_ready(b, n, 30) == 4,
          "the large layer's pieces start together once it is final");
    CHECK(dp_buckets_ready(b, n, 10) == 4,
          "[5,30) waits for the first layer: %u", dp_buckets_ready(b, n, 10));

    /* One layer, a model under every cap: one bucket; a repeated offset
     * (a layer without parameters) changes nothing. */
    const uint64_t one[] = {0, 0};
    n = dp_plan_buckets(one, 2, 1000, 32768, 1 << 20, b, 16);
    CHECK(n == 1 && b[0].lo == 0 && b[0].hi == 1000, "one bucket: %u", n);
    /* A model of no parameters has no buckets. */
    CHECK(dp_plan_buckets(one, 1, 0, 32768, 1 << 20, b, 16) == 0,
          "no parameters, no buckets");
    /* More buckets than out holds: the count is still the whole plan. */
    CHECK(dp_plan_buckets(lay, 6, 120, 1, 1, b, 4) == 120,
          "cap 1: 120 buckets counted");

    /* ZeRO-1's reduce-scatter parts (nn_comm_part): the ranks' ranges
     * [0,4) [4,7) [7,7) [7,10) (dp_zero_range's kind, one empty) cut a
     * bucket; the parts tile it in rank order, a rank whose range misses
     * the bucket gets an empty part. */
    const size_t off[] = {0, 4, 7, 7, 10};
    const struct {
        size_t lo, hi, a[4], b[4];
    } cut[] = {
        {0, 10, {0, 4, 7, 7}, {4, 7, 7, 10}}, /* the whole block */
        {3, 8, {3, 4, 7, 7}, {4, 7, 7, 8}},   /* across three ranges */
        {5, 6, {5, 5, 7, 7}, {5, 6, 7, 7}},   /* inside rank 1's */
        {8, 10, {8, 8, 8, 8}, {8, 8, 8, 10}}, /* rank 3's tail only */
        {4, 4, {4, 4, 7, 7}, {4, 4, 7, 7}},   /* an empty bucket */
    };
    for (size_t k = 0; k < sizeof cut / sizeof cut[0]; k++) {
        size_t total = 0;
        for (int r = 0; r < 4; r++) {
            size_t a, z;
            nn_comm_part(off, r, cut[k].lo, cut[k].hi, &a, &z);
            CHECK(a == cut[k].a[r] && z == cut[k].b[r],
                  "bucket [%zu,%zu) rank %d: [%zu,%zu), want [%zu,%zu)",
                  cut[k].lo, cut[k].hi, r, a, z, cut[k].a[r], cut[k].b[r]);
            total += z - a;
        }
        CHECK(total == cut[k].hi - cut[k].lo,
              "bucket [%zu,%zu): the parts cover %zu", cut[k].lo, cut[k].hi,
              total);
    }

    /* The traffic measure (nn_comm_count): at 2 ranks an all-reduce of n
     * bytes sends n, a reduce-scatter and an all-gather n/2 each (the
     * two together one all-reduce); at 4 ranks 1.5 n, 3/4 n, 3/4 n; a
     * broadcast its bytes; at world 1 nothing. */
    nn_comm c2 = {.world = 2}, c4 = {.world = 4}, c1 = {.world = 1};
    nn_comm_count(&c2, NN_COMM_OP_ALLREDUCE, 1000);
    nn_comm_count(&c2, NN_COMM_OP_REDUCE_SCATTER, 1000);
    nn_comm_count(&c2, NN_COMM_OP_ALLGATHER, 1000);
    nn_comm_count(&c2, NN_COMM_OP_BCAST, 1000);
    CHECK(c2.stats.bytes[NN_COMM_OP_ALLREDUCE] == 1000 &&
              c2.stats.bytes[NN_COMM_OP_REDUCE_SCATTER] == 500 &&
              c2.stats.bytes[NN_COMM_OP_ALLGATHER] == 500 &&
              c2.stats.bytes[NN_COMM_OP_BCAST] == 1000 &&
              c2.stats.calls[NN_COMM_OP_ALLREDUCE] == 1,
          "2 ranks: %llu %llu %llu",
          (unsigned long long)c2.stats.bytes[NN_COMM_OP_ALLREDUCE],
          (unsigned long long)c2.stats.bytes[NN_COMM_OP_REDUCE_SCATTER],
          (unsigned long long)c2.stats.bytes[NN_COMM_OP_ALLGATHER]);
    nn_comm_count(&c4, NN_COMM_OP_ALLREDUCE, 1000);
    nn_comm_count(&c4, NN_COMM_OP_REDUCE_SCATTER, 1000);
    CHECK(c4.stats.bytes[NN_COMM_OP_ALLREDUCE] == 1500 &&
              c4.stats.bytes[NN_COMM_OP_REDUCE_SCATTER] == 750,
          "4 ranks: %llu %llu",
          (unsigned long long)c4.stats.bytes[NN_COMM_OP_ALLREDUCE],
          (unsigned long long)c4.stats.bytes[NN_COMM_OP_REDUCE_SCATTER]);
    nn_comm_count(&c1, NN_COMM_OP_ALLREDUCE, 1000);
    nn_comm_count(&c1, NN_COMM_OP_BCAST, 1000);
    CHECK(c1.stats.bytes[NN_COMM_OP_ALLREDUCE] == 0 &&
              c1.stats.bytes[NN_COMM_OP_BCAST] == 0 &&
              c1.stats.calls[NN_COMM_OP_BCAST] == 1,
          "world 1 sends nothing");

    if (failures)
        return 1;
    printf("PASS\n");
    return 0;
}
