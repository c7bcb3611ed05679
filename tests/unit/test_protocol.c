/* test_protocol.c - the worker protocol's lines (node/protocol.h): every
 * message the worker encodes decodes to its kind with its fields, the
 * wire names and exit codes are the ones servers and workers of earlier
 * builds use, and lines that are not messages are told apart. The
 * protocol between real processes is tests/integration/
 * test_worker_protocol.c's. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>

#include <stdlib.h>
#include <string.h>

#include "node/protocol.h"

/* Dumps line as the worker prints it, decodes it, checks the kind and
 * returns the decoded object (caller decrefs). */
static json_t *roundtrip(json_t *line, wproto_msg want)
{
    assert_non_null(line);
    char *text = json_dumps(line, JSON_COMPACT);
    json_decref(line);
    assert_non_null(text);
    assert_null(strchr(text, '\n'));
    json_t *msg = NULL;
    assert_int_equal(wproto_decode(text, &msg), want);
    free(text);
    assert_non_null(msg);
    assert_string_equal(json_string_value(json_object_get(msg, WPROTO_F_EVENT)),
                        wproto_msg_name(want));
    return msg;
}

static void test_wire_names_and_exit_codes(void **state)
{
    /* What servers and workers already deployed speak: never renamed. */
    assert_string_equal(wproto_msg_name(WPROTO_MSG_STARTED), "started");
    assert_string_equal(wproto_msg_name(WPROTO_MSG_HEARTBEAT), "heartbeat");
    assert_string_equal(wproto_msg_name(WPROTO_MSG_PROGRESS), "progress");
    assert_string_equal(wproto_msg_name(WPROTO_MSG_EPOCH), "epoch");
    assert_string_equal(wproto_msg_name(WPROTO_MSG_RESUME), "resume");
    assert_string_equal(wproto_msg_name(WPROTO_MSG_DONE), "done");
    assert_string_equal(wproto_msg_name(WPROTO_MSG_ERROR), "error");
    assert_string_equal(wproto_msg_name(WPROTO_MSG_PREEMPTED), "preempted");
    assert_string_equal(wproto_msg_name(WPROTO_MSG_NONE), "");
    assert_string_equal(wproto_msg_name(WPROTO_MSG_COUNT), "");
    assert_int_equal(WPROTO_EXIT_OK, 0);
    assert_int_equal(WPROTO_EXIT_FAILED, 2);
    assert_int_equal(WPROTO_EXIT_CANCELLED, 3);
    assert_int_equal(WPROTO_EXIT_PREEMPTED, 4);
    assert_int_equal(WPROTO_EXIT_USAGE, 64);
}

static void test_started(void **state)
{
    wproto_started st = {.pid = 4242,
                         .cuda_visible_devices = "MIG-1",
                         .trainyard_device = NULL,
                         .provider = "openblas",
                         .core = "Haswell",
                         .isa = "avx2",
                         .cpu_isa = "avx2",
                         .gemm_gflops = 41.6};
    json_t *m = roundtrip(wproto_encode_started(&st), WPROTO_MSG_STARTED);
    assert_int_equal(json_integer_value(json_object_get(m, WPROTO_F_PID)),
                     4242);
    assert_string_equal(
        json_string_value(json_object_get(m, WPROTO_F_CUDA_VISIBLE_DEVICES)),
        "MIG-1");
    assert_true(json_is_null(json_object_get(m, WPROTO_F_TRAINYARD_DEVICE)));
    const json_t *caps = json_object_get(m, WPROTO_F_CAPABILITIES);
    assert_int_equal(json_array_size(caps), 2);
    assert_string_equal(json_string_value(json_array_get(caps, 0)),
                        WPROTO_CAP_HEARTBEAT);
    assert_string_equal(json_string_value(json_array_get(caps, 1)),
                        WPROTO_CAP_PREEMPT);
    const json_t *k = json_object_get(m, WPROTO_F_CPU_KERNELS);
    assert_string_equal(json_string_value(json_object_get(k, "core")),
                        "Haswell");
    assert_int_equal(json_integer_value(json_object_get(k, "gemm_gflops")), 42);
    json_decref(m);
}

static void test_progress_epoch_resume(void **state)
{
    train_progress p = {.epoch = 2,
                        .epochs = 5,
                        .step = 70,
                        .total_steps = 175,
                        .fraction = 0.4,
                        .loss = 0.5,
                        .samples_per_sec = 1000.0,
                        .lr = 0.01};
    json_t *m = roundtrip(wproto_encode_progress(&p), WPROTO_MSG_PROGRESS);
    assert_int_equal(json_integer_value(json_object_get(m, WPROTO_F_EPOCH)), 2);
    assert_int_equal(
        json_integer_value(json_object_get(m, WPROTO_F_TOTAL_STEPS)), 175);
    assert_true(json_real_value(json_object_get(m, WPROTO_F_FRACTION)) == 0.4);
    assert_true(json_real_value(json_object_get(m, WPROTO_F_LR)) == 0.01);
    json_decref(m);

    train_epoch_metrics e = {.epoch = 3,
                             .train_loss = 0.25,
                             .train_accuracy = -1,
                             .val_loss = -1,
                             .val_accuracy = -1,
                             .peak_memory_bytes = 1u << 30,
                             .device = "sim:GPU-0",
                             .cuda_graph = -1};
    m = roundtrip(wproto_encode_epoch(&e, -1), WPROTO_MSG_EPOCH);
    assert_int_equal(
        json_integer_value(json_object_get(m, WPROTO_F_PEAK_MEMORY_BYTES)),
        1 << 30);
    assert_string_equal(json_string_value(json_object_get(m, WPROTO_F_DEVICE)),
                        "sim:GPU-0");
    /* Left out when not known, not sent as null. */
    assert_null(json_object_get(m, WPROTO_F_DEVICE_MEMORY_USED_BYTES));
    assert_null(json_object_get(m, WPROTO_F_CUDA_GRAPH));
    assert_null(json_object_get(m, WPROTO_F_PRECISION));
    json_decref(m);
    m = roundtrip(wproto_encode_epoch(&e, 123456), WPROTO_MSG_EPOCH);
    assert_int_equal(json_integer_value(
                         json_object_get(m, WPROTO_F_DEVICE_MEMORY_USED_BYTES)),
                     123456);
    json_decref(m);

    m = roundtrip(wproto_encode_resume(4, 140), WPROTO_MSG_RESUME);
    assert_int_equal(json_integer_value(json_object_get(m, WPROTO_F_STEP)),
                     140);
    json_decref(m);
}

/* A regression epoch carries its metrics in the target's units, null where
 * there is no validation set; a classification epoch (NAN) none of them. */
static void test_regression_epoch(void **state)
{
    (void)state;
    train_epoch_metrics e = {.epoch = 2,
                             .train_loss = 0.1,
                             .train_accuracy = -1,
                             .val_loss = -1,
                             .val_accuracy = -1,
                             .cuda_graph = -1,
                             .train_rmse = 21000.5,
                             .train_mae = 16000.25,
                             .train_r2 = -0.5,
                             .val_rmse = NAN,
                             .val_mae = NAN,
                             .val_r2 = NAN};
    json_t *m = roundtrip(wproto_encode_epoch(&e, -1), WPROTO_MSG_EPOCH);
    assert_float_equal(
        json_number_value(json_object_get(m, WPROTO_F_TRAIN_RMSE)), 21000.5, 0);
    assert_float_equal(
        json_number_value(json_object_get(m, WPROTO_F_TRAIN_MAE)), 16000.25, 0);
    assert_float_equal(json_number_value(json_object_get(m, WPROTO_F_TRAIN_R2)),
                       -0.5, 0);
    assert_true(json_is_null(json_object_get(m, WPROTO_F_VAL_RMSE)));
    assert_true(json_is_null(json_object_get(m, WPROTO_F_VAL_MAE)));
    assert_true(json_is_null(json_object_get(m, WPROTO_F_VAL_R2)));
    json_decref(m);
    e.train_rmse = e.train_mae = e.train_r2 = NAN;
    m = roundtrip(wproto_encode_epoch(&e, -1), WPROTO_MSG_EPOCH);
    assert_null(json_object_get(m, WPROTO_F_TRAIN_RMSE));
    assert_null(json_object_get(m, WPROTO_F_VAL_R2));
    json_decref(m);
}

static void test_endings(void **state)
{
    json_t *m = roundtrip(wproto_encode_done(), WPROTO_MSG_DONE);
    json_decref(m);
    m = roundtrip(wproto_encode_heartbeat(), WPROTO_MSG_HEARTBEAT);
    json_decref(m);
    m = roundtrip(wproto_encode_error("out of data"), WPROTO_MSG_ERROR);
    assert_string_equal(json_string_value(json_object_get(m, WPROTO_F_MESSAGE)),
                        "out of data");
    json_decref(m);
    m = roundtrip(wproto_encode_preempted(1, 2, 77, 1), WPROTO_MSG_PREEMPTED);
    assert_int_equal(json_integer_value(json_object_get(m, WPROTO_F_STEP)), 77);
    assert_true(json_is_true(json_object_get(m, WPROTO_F_CHECKPOINT)));
    json_decref(m);
    /* Before training: no position. */
    m = roundtrip(wproto_encode_preempted(0, 2, 77, 0), WPROTO_MSG_PREEMPTED);
    assert_true(json_is_null(json_object_get(m, WPROTO_F_EPOCH)));
    assert_true(json_is_null(json_object_get(m, WPROTO_F_STEP)));
    assert_true(json_is_false(json_object_get(m, WPROTO_F_CHECKPOINT)));
    json_decref(m);
}

/* A serving replica's "ready" (node/replica.h). */
static void test_ready(void **state)
{
    assert_string_equal(wproto_msg_name(WPROTO_MSG_READY), "ready");
    wproto_ready r = {.socket = "/data/jobs/rep_1/replica.sock",
                      .features = 784,
                      .outputs = 10,
                      .device = "sim:GPU-0",
                      .load_seconds = 0.25};
    json_t *m = roundtrip(wproto_encode_ready(&r), WPROTO_MSG_READY);
    assert_string_equal(json_string_value(json_object_get(m, "socket")),
                        r.socket);
    assert_int_equal(json_integer_value(json_object_get(m, "features")), 784);
    assert_int_equal(json_integer_value(json_object_get(m, "outputs")), 10);
    assert_string_equal(json_string_value(json_object_get(m, "device")),
                        "sim:GPU-0");
    assert_true(json_real_value(json_object_get(m, "load_seconds")) == 0.25);
    json_decref(m);
}

static void test_not_messages(void **state)
{
    static const char *const none[] = {
        "", "not json", "[1,2]", "{}", "{\"event\": 3}", "{\"kind\":\"done\"}"};
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++) {
        json_t *m = (json_t *)1;
        assert_int_equal(wproto_decode(none[i], &m), WPROTO_MSG_NONE);
        assert_null(m);
    }
    /* A kind from a newer worker: a message (a heartbeat, at least). */
    json_t *m = NULL;
    assert_int_equal(wproto_decode("{\"event\":\"checkpointed\"}", &m),
                     WPROTO_MSG_UNKNOWN);
    assert_non_null(m);
    json_decref(m);
}

static void test_sim_uuid(void **state)
{
    assert_true(wproto_sim_uuid_ok("GPU-0"));
    assert_true(wproto_sim_uuid_ok("MIG-GPU-1/3/0"));
    assert_false(wproto_sim_uuid_ok(""));
    assert_false(wproto_sim_uuid_ok("GPU 0"));
    assert_false(wproto_sim_uuid_ok("GPU;0"));
    char long_uuid[WPROTO_SIM_UUID_MAX + 2];
    memset(long_uuid, 'a', sizeof long_uuid - 1);
    long_uuid[sizeof long_uuid - 1] = '\0';
    assert_false(wproto_sim_uuid_ok(long_uuid));
    long_uuid[WPROTO_SIM_UUID_MAX] = '\0';
    assert_true(wproto_sim_uuid_ok(long_uuid));
}

/* A gang of whole GPUs: each rank's entry of the per-rank lists. */
static void test_rank_env(void **state)
{
    (void)state;
    const char *list = "sim:GPU-a,sim:GPU-b,cuda:0";
    char out[64];
    ty_err err = {0};
    assert_int_equal(wproto_rank_env(list, 0, out, sizeof out, &err), TY_OK);
    assert_string_equal(out, "sim:GPU-a");
    assert_int_equal(wproto_rank_env(list, 1, out, sizeof out, &err), TY_OK);
    assert_string_equal(out, "sim:GPU-b");
    assert_int_equal(wproto_rank_env(list, 2, out, sizeof out, &err), TY_OK);
    assert_string_equal(out, "cuda:0");
    /* no such rank, an empty entry, one too long, no list */
    assert_int_equal(wproto_rank_env(list, 3, out, sizeof out, &err),
                     TY_EINVAL);
    assert_string_equal(out, "");
    assert_int_equal(wproto_rank_env(list, -1, out, sizeof out, &err),
                     TY_EINVAL);
    assert_int_equal(wproto_rank_env("a,,c", 1, out, sizeof out, &err),
                     TY_EINVAL);
    assert_int_equal(wproto_rank_env("a,", 1, out, sizeof out, &err),
                     TY_EINVAL);
    assert_int_equal(wproto_rank_env(list, 0, out, 9, &err), TY_EINVAL);
    assert_int_equal(wproto_rank_env(list, 0, out, 10, &err), TY_OK);
    assert_int_equal(wproto_rank_env(NULL, 0, out, sizeof out, &err),
                     TY_EINVAL);
    assert_int_equal(wproto_rank_env("GPU-x", 0, out, sizeof out, &err), TY_OK);
    assert_string_equal(out, "GPU-x");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wire_names_and_exit_codes),
        cmocka_unit_test(test_started),
        cmocka_unit_test(test_progress_epoch_resume),
        cmocka_unit_test(test_regression_epoch),
        cmocka_unit_test(test_endings),
        cmocka_unit_test(test_ready),
        cmocka_unit_test(test_not_messages),
        cmocka_unit_test(test_sim_uuid),
        cmocka_unit_test(test_rank_env),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
