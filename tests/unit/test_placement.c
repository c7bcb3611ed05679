/* Unit tests for gpu/placement: device labels and flags, resolving
 * --train-device (auto, cpu, a missing device), where a model serves, and
 * the device-memory fit a GPU server applies at submit (a 5 GiB MIG
 * slice) and a worker applies before training (free memory). The pure
 * functions take the device count and sizes, so every case runs here
 * without a GPU; place_device_open is checked against whatever this
 * machine has. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "node/placement.h"

#define GIB (1ull << 30)
#define MIB (1ull << 20)

static void test_labels(void **state)
{
    char b[16];
    place_device_label(PLACE_DEVICE_CPU, b, sizeof b);
    assert_string_equal(b, "cpu");
    place_device_label(0, b, sizeof b);
    assert_string_equal(b, "cuda:0");
    place_device_label(7, b, sizeof b);
    assert_string_equal(b, "cuda:7");
    place_device_label(PLACE_DEVICE_AUTO, b, sizeof b);
    assert_string_equal(b, "auto");

    assert_int_equal(place_label_device("cuda:0"), 0);
    assert_int_equal(place_label_device("cuda:12"), 12);
    assert_int_equal(place_label_device("cuda"), 0);
    assert_int_equal(place_label_device("cpu"), PLACE_DEVICE_CPU);
    assert_int_equal(place_label_device(NULL), PLACE_DEVICE_CPU);
    assert_int_equal(place_label_device("cuda:"), PLACE_DEVICE_CPU);
    assert_int_equal(place_label_device("cuda:-1"), PLACE_DEVICE_CPU);
    assert_int_equal(place_label_device("cuda:2x"), PLACE_DEVICE_CPU);
    assert_int_equal(place_label_device("rocm:0"), PLACE_DEVICE_CPU);
}

static void test_parse(void **state)
{
    int d = 99;
    ty_err err = {0};
    assert_int_equal(place_parse_device("--x", "auto", 1, &d, &err), TY_OK);
    assert_int_equal(d, PLACE_DEVICE_AUTO);
    assert_int_equal(place_parse_device("--x", "cpu", 0, &d, &err), TY_OK);
    assert_int_equal(d, PLACE_DEVICE_CPU);
    assert_int_equal(place_parse_device("--x", "cuda:3", 0, &d, &err), TY_OK);
    assert_int_equal(d, 3);
    /* auto only where the flag takes it. */
    assert_int_equal(place_parse_device("--x", "auto", 0, &d, &err), TY_EINVAL);
    assert_non_null(strstr(err.msg, "--x needs cpu, cuda or cuda:N"));
    assert_string_equal(err.field, "--x");
    assert_int_equal(place_parse_device("--x", NULL, 1, &d, &err), TY_EINVAL);
}

/* auto is device 0 when there is one, else the CPU; an explicit device
 * must exist, and the error names the flag and why. */
static void test_resolve(void **state)
{
    int d = 99;
    ty_err err = {0};
    assert_int_equal(place_resolve("--train-device", PLACE_DEVICE_AUTO, 0,
                                   "no CUDA driver", &d, &err),
                     TY_OK);
    assert_int_equal(d, PLACE_DEVICE_CPU);
    assert_int_equal(
        place_resolve("--train-device", PLACE_DEVICE_AUTO, 2, NULL, &d, &err),
        TY_OK);
    assert_int_equal(d, 0);
    assert_int_equal(
        place_resolve("--train-device", PLACE_DEVICE_CPU, 2, NULL, &d, &err),
        TY_OK);
    assert_int_equal(d, PLACE_DEVICE_CPU);
    assert_int_equal(place_resolve("--train-device", 1, 2, NULL, &d, &err),
                     TY_OK);
    assert_int_equal(d, 1);

    d = 99;
    assert_int_equal(place_resolve("--train-device", 2, 2, NULL, &d, &err),
                     TY_EDEVICE);
    assert_int_equal(d, 99);
    assert_non_null(strstr(err.msg, "--train-device cuda:2"));
    assert_non_null(strstr(err.msg, "only 2 CUDA devices"));
    assert_string_equal(err.field, "--train-device");
    assert_int_equal(
        place_resolve("--train-device", 0, 0, "no CUDA driver", &d, &err),
        TY_EDEVICE);
    assert_non_null(strstr(err.msg, "--train-device cuda:0: no CUDA device: "
                                    "no CUDA driver"));
}

/* An operator's --serve-device wins; else the training device when this
 * server has it; else the CPU (a GPU-trained model on a CPU server). */
static void test_serve_device(void **state)
{
    assert_int_equal(place_serve_device(PLACE_DEVICE_AUTO, "cuda:0", 1), 0);
    assert_int_equal(place_serve_device(PLACE_DEVICE_AUTO, "cuda:1", 2), 1);
    assert_int_equal(place_serve_device(PLACE_DEVICE_AUTO, "cuda:0", 0),
                     PLACE_DEVICE_CPU);
    assert_int_equal(place_serve_device(PLACE_DEVICE_AUTO, "cuda:3", 2),
                     PLACE_DEVICE_CPU);
    assert_int_equal(place_serve_device(PLACE_DEVICE_AUTO, "cpu", 4),
                     PLACE_DEVICE_CPU);
    assert_int_equal(place_serve_device(PLACE_DEVICE_AUTO, NULL, 4),
                     PLACE_DEVICE_CPU);
    assert_int_equal(place_serve_device(PLACE_DEVICE_CPU, "cuda:0", 4),
                     PLACE_DEVICE_CPU);
    assert_int_equal(place_serve_device(1, "cuda:0", 4), 1);
    assert_int_equal(place_serve_device(0, NULL, 1), 0);
}

/* A run's parts adding up to `total` (the rest in activations). */
static train_memory run_of(uint64_t total, uint32_t batch)
{
    train_memory m = {.state = 400 * MIB,
                      .grads = 400 * MIB,
                      .optimizer = 800 * MIB,
                      .work = 64 * MIB,
                      .batch_rows = batch};
    m.activations = total - m.state - m.grads - m.optimizer - m.work;
    m.total = total;
    return m;
}

/* The submit check on a 5 GiB MIG slice (cudaMemGetInfo's total inside
 * the slice): the trainer's bytes plus the fixed allowance must fit. */
static void test_device_memory_mig_slice(void **state)
{
    const uint64_t slice = 5 * GIB;
    ty_err err = {0};
    train_memory fits = run_of(slice - PLACE_CUDA_OVERHEAD_BYTES, 512);
    assert_int_equal(place_check_device_memory(&fits, PLACE_CUDA_OVERHEAD_BYTES,
                                               slice, "cuda:0", 0, &err),
                     TY_OK);
    /* One byte more does not. */
    train_memory over = run_of(slice - PLACE_CUDA_OVERHEAD_BYTES + 1, 512);
    assert_int_equal(place_check_device_memory(&over, PLACE_CUDA_OVERHEAD_BYTES,
                                               slice, "cuda:0", 0, &err),
                     TY_EINVAL);
    /* A job that needs 4.6 GiB itself: 5.4 GiB with the allowance. */
    train_memory big = run_of(4 * GIB + 640 * MIB, 4096);
    err.msg[0] = '\0';
    assert_int_equal(place_check_device_memory(&big, PLACE_CUDA_OVERHEAD_BYTES,
                                               slice, "cuda:0", 0, &err),
                     TY_EINVAL);
    assert_string_equal(err.field, "hyperparameters.batch_size");
    print_message("%s\n", err.msg);
    assert_non_null(
        strstr(err.msg, "about 5.4 GiB of device memory on cuda:0"));
    assert_non_null(strstr(err.msg, "parameters 400 MiB, gradients 400 MiB, "
                                    "optimizer state 800 MiB"));
    assert_non_null(strstr(err.msg, "at batch 4096"));
    assert_non_null(strstr(err.msg, "plus 768 MiB for the CUDA context"));
    assert_non_null(strstr(err.msg, "cuda:0 has 5.0 GiB of memory in all"));
    assert_non_null(strstr(err.msg, "lower batch_size"));
    /* The same job fits a whole 141 GiB H200. */
    assert_int_equal(place_check_device_memory(&big, PLACE_CUDA_OVERHEAD_BYTES,
                                               141 * GIB, "cuda:0", 0, &err),
                     TY_OK);
}

/* The worker's check against free memory says so; a total so large that
 * adding the allowance wraps around is refused, not waved through. */
static void test_device_memory_free_and_overflow(void **state)
{
    ty_err err = {0};
    train_memory m = run_of(3 * GIB, 256);
    assert_int_equal(place_check_device_memory(&m, PLACE_CUDA_LATE_BYTES,
                                               2 * GIB, "cuda:1", 1, &err),
                     TY_EINVAL);
    assert_non_null(strstr(err.msg, "cuda:1 has only 2.0 GiB free now "
                                    "(other processes hold the rest)"));
    assert_int_equal(place_check_device_memory(&m, PLACE_CUDA_LATE_BYTES,
                                               4 * GIB, "cuda:1", 1, &err),
                     TY_OK);
    train_memory huge = {.total = UINT64_MAX - 10, .batch_rows = 1};
    assert_int_equal(place_check_device_memory(&huge, PLACE_CUDA_OVERHEAD_BYTES,
                                               UINT64_MAX, "cuda:0", 0, &err),
                     TY_EINVAL);
    /* The late part is a part of the whole allowance. */
    assert_true(PLACE_CUDA_LATE_BYTES < PLACE_CUDA_OVERHEAD_BYTES);
}

/* Against this machine: auto is cuda:0 with its memory where a device is
 * present, else the CPU; cpu asks nothing of CUDA; a device past the
 * last is a startup error naming the flag. */
static void test_device_open_here(void **state)
{
    place_device d;
    ty_err err = {0};
    char why[256] = "";
    int count = place_cuda_count(why, sizeof why);
    assert_int_equal(
        place_device_open("--train-device", PLACE_DEVICE_AUTO, &d, &err),
        TY_OK);
    if (count == 0) {
        assert_int_equal(d.device, PLACE_DEVICE_CPU);
        assert_string_equal(d.label, "cpu");
        assert_int_equal(d.total_bytes, 0);
        assert_true(why[0] != '\0');
        print_message("auto -> cpu (%s)\n", why);
    } else {
        assert_int_equal(d.device, 0);
        assert_string_equal(d.label, "cuda:0");
        assert_true(d.total_bytes > 0);
        print_message("auto -> cuda:0 (%s)\n", d.name);
    }
    assert_int_equal(
        place_device_open("--train-device", PLACE_DEVICE_CPU, &d, &err), TY_OK);
    assert_string_equal(d.label, "cpu");
    assert_int_equal(place_device_open("--train-device", count, &d, &err),
                     TY_EDEVICE);
    assert_non_null(strstr(err.msg, "--train-device"));
    print_message("cuda:%d refused: %s\n", count, err.msg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_labels),
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_resolve),
        cmocka_unit_test(test_serve_device),
        cmocka_unit_test(test_device_memory_mig_slice),
        cmocka_unit_test(test_device_memory_free_and_overflow),
        cmocka_unit_test(test_device_open_here),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
