/* Unit tests for gpu/cuda/comm_nccl.c that need no GPU, in every build:
 * nn_comm_nccl_available says whether the build has the NCCL engine
 * (CMake's TRAINYARD_HAVE_NCCL); a build without it answers every call
 * with TY_EDEVICE "... has no NCCL ..." and no comm; a build with it
 * refuses a bad rank, world or id (TY_EINVAL) before it touches a device
 * and a device that is not there (TY_EINVAL, or TY_EDEVICE where CUDA has
 * no device at all), and create_over refuses a device-memory comm to carry the id. What needs
 * a device is tests/gpu/test_gpu_nccl.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <string.h>

#include "gpu/cuda/comm_nccl.h"
#include "models/train/comm.h"

static void test_available_matches_build(void **state)
{
    (void)state;
    assert_int_equal(nn_comm_nccl_available(), TRAINYARD_HAVE_NCCL);
}

static void test_without_nccl_every_call_says_so(void **state)
{
    (void)state;
    if (nn_comm_nccl_available())
        skip();
    unsigned char id[NN_COMM_NCCL_ID_BYTES] = {0};
    nn_comm *c = (nn_comm *)&id; /* must come back NULL */
    ty_err err = {0};
    assert_int_equal(nn_comm_nccl_unique_id(id, &err), TY_EDEVICE);
    assert_non_null(strstr(err.msg, "has no NCCL"));
    memset(&err, 0, sizeof err);
    assert_int_equal(nn_comm_nccl_create(0, 1, id, 0, 0, &c, &err), TY_EDEVICE);
    assert_null(c);
    assert_non_null(strstr(err.msg, "has no NCCL"));
    c = (nn_comm *)&id;
    memset(&err, 0, sizeof err);
    assert_int_equal(nn_comm_nccl_create_over(nn_comm_self(), 0, 0, &c, &err),
                     TY_EDEVICE);
    assert_null(c);
    assert_non_null(strstr(err.msg, "has no NCCL"));
}

static void test_bad_rank_world_or_id(void **state)
{
    (void)state;
    if (!nn_comm_nccl_available())
        skip();
    unsigned char id[NN_COMM_NCCL_ID_BYTES] = {0};
    nn_comm *c = NULL;
    ty_err err = {0};
    assert_int_equal(nn_comm_nccl_create(2, 2, id, 0, 0, &c, &err), TY_EINVAL);
    assert_null(c);
    assert_non_null(strstr(err.msg, "rank 2, world 2"));
    assert_int_equal(nn_comm_nccl_create(0, 0, id, 0, 0, &c, &err), TY_EINVAL);
    assert_int_equal(nn_comm_nccl_create(-1, 4, id, 0, 0, &c, &err), TY_EINVAL);
    assert_int_equal(nn_comm_nccl_create(0, 1, NULL, 0, 0, &c, &err),
                     TY_EINVAL);
    assert_null(c);
}

/* A device that is not there: TY_EINVAL naming it where CUDA has devices,
 * TY_EDEVICE saying why where it has none (this VM: no driver); never a
 * comm. */
static void test_missing_device(void **state)
{
    (void)state;
    if (!nn_comm_nccl_available())
        skip();
    unsigned char id[NN_COMM_NCCL_ID_BYTES] = {0};
    nn_comm *c = NULL;
    ty_err err = {0};
    ty_status st = nn_comm_nccl_create(0, 1, id, 4096, 0, &c, &err);
    assert_null(c);
    if (st == TY_EINVAL)
        assert_non_null(strstr(err.msg, "CUDA device 4096 does not exist"));
    else {
        assert_int_equal(st, TY_EDEVICE);
        assert_non_null(strstr(err.msg, "no CUDA device for NCCL"));
    }
}

static void test_create_over_needs_a_host_comm(void **state)
{
    (void)state;
    nn_comm dev = *nn_comm_self();
    dev.device_memory = 1;
    nn_comm *c = NULL;
    ty_err err = {0};
    assert_int_equal(nn_comm_nccl_create_over(&dev, 0, 0, &c, &err), TY_EINVAL);
    assert_null(c);
    assert_int_equal(nn_comm_nccl_create_over(NULL, 0, 0, &c, &err), TY_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_available_matches_build),
        cmocka_unit_test(test_without_nccl_every_call_says_so),
        cmocka_unit_test(test_bad_rank_world_or_id),
        cmocka_unit_test(test_missing_device),
        cmocka_unit_test(test_create_over_needs_a_host_comm),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
