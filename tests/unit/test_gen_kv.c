/*
 * test_gen_kv.c - the size of a generation engine's key/value cache
 * (gen_kv_blocks, node/gen_engine.h): a fixed share on the CPU (the
 * server's --kv-cache), most of a GPU or MIG slice's free memory in a
 * replica that holds it alone, at least a whole context, and the fixed
 * share again when the device cannot be asked.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "node/gen_engine.h"

#define MiB ((uint64_t)1 << 20)
#define GiB ((uint64_t)1 << 30)

/* On the CPU: the bytes given, in whole blocks. */
static void test_cpu_share(void **state)
{
    (void)state;
    const gen_kv_budget b = {.bytes = 24576};
    /* 6 blocks of 4 KiB; the free memory is not read */
    assert_int_equal(gen_kv_blocks(&b, 0, 4096, 1 << 20, 2), 6);
    assert_int_equal(gen_kv_blocks(&b, UINT64_MAX, 4096, 0, 2), 6);
    assert_int_equal(gen_kv_blocks(&b, 0, 5000, 0, 2), 4);
    /* less than a context: a context */
    assert_int_equal(gen_kv_blocks(&b, 0, 4096, 0, 8), 8);
    const gen_kv_budget dflt = {.bytes = GEN_KV_DEFAULT_BYTES};
    assert_int_equal(gen_kv_blocks(&dflt, 0, MiB, 0, 1), 256);
}

/* A replica on a 1g.10gb MIG slice whose model left 9.5 GiB free: 90% of
 * that, less the step's buffers, in blocks of 1 MiB. */
static void test_device_share(void **state)
{
    (void)state;
    const gen_kv_budget b = {
        .bytes = 24576, .device_share = GEN_KV_DEVICE_SHARE, .device = 0};
    const uint64_t free_b = 10 * GiB - 512 * MiB;
    /* 0.9 x 9728 MiB = 8755.2 MiB; less 100 MiB: 8655 whole blocks */
    assert_int_equal(gen_kv_blocks(&b, free_b, MiB, 100 * MiB, 4), 8655);
    /* a whole H100 with 70 GiB free: 64,512 MiB less 0.3 MiB */
    assert_int_equal(gen_kv_blocks(&b, 70 * GiB, MiB, 300 * 1024, 4), 64511);
    /* a device that could not be asked: the bytes given */
    assert_int_equal(gen_kv_blocks(&b, UINT64_MAX, 4096, 0, 2), 6);
    /* buffers bigger than the share: a context still */
    assert_int_equal(gen_kv_blocks(&b, 100 * MiB, MiB, 200 * MiB, 4), 4);
}

/* Tiny blocks on a big device stop at GEN_KV_MAX_BLOCKS. */
static void test_cap(void **state)
{
    (void)state;
    const gen_kv_budget b = {.device_share = 0.5, .device = 0};
    assert_int_equal(gen_kv_blocks(&b, 80 * GiB, 64, 0, 1), GEN_KV_MAX_BLOCKS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_share),
        cmocka_unit_test(test_device_share),
        cmocka_unit_test(test_cap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
