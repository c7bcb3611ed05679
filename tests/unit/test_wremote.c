/* test_wremote.c - the remote worker shim's pure parts
 * (node/wremote_internal.h): the queue of lines and its coalescing rule
 * while the server does not answer, the relayed line ("node" on started),
 * what is uploaded before which line, the local job.json built from the
 * job document, the endpoint URLs, the retry schedule and budget, the
 * post interval and the exit status. No network, no process: the shim
 * itself is driven against a server by the integration suite. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <signal.h>
#include <string.h>
#include <sys/wait.h>

#include "node/wremote.h"
#include "node/wremote_internal.h"

#define SHA_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define SHA_B "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

/* Queues a line of kind k, tagged with n so the test can tell them apart. */
static void push(wremote_queue *q, wproto_msg k, int n)
{
    json_t *line = json_pack("{s:s, s:i}", WPROTO_F_EVENT, wproto_msg_name(k),
                             "n", n);
    assert_int_equal(wremote_queue_push(q, k, line), TY_OK);
}

static int tag(const wremote_queue *q, size_t i)
{
    return (int)json_integer_value(json_object_get(q->v[i].line, "n"));
}

static void test_coalesce_keeps_newest_heartbeat_and_progress(void **state)
{
    wremote_queue q;
    wremote_queue_init(&q);
    push(&q, WPROTO_MSG_STARTED, 0);
    push(&q, WPROTO_MSG_HEARTBEAT, 1);
    push(&q, WPROTO_MSG_PROGRESS, 2);
    push(&q, WPROTO_MSG_EPOCH, 3);
    push(&q, WPROTO_MSG_HEARTBEAT, 4);
    push(&q, WPROTO_MSG_PROGRESS, 5);
    push(&q, WPROTO_MSG_EPOCH, 6);
    push(&q, WPROTO_MSG_HEARTBEAT, 7);
    push(&q, WPROTO_MSG_DONE, 8);
    wremote_queue_coalesce(&q);
    static const int want[] = {0, 3, 5, 6, 7, 8};
    assert_int_equal(q.n, TY_ARRAY_LEN(want));
    for (size_t i = 0; i < q.n; i++)
        assert_int_equal(tag(&q, i), want[i]);
    /* Again: nothing more to drop. */
    wremote_queue_coalesce(&q);
    assert_int_equal(q.n, TY_ARRAY_LEN(want));
    wremote_queue_free(&q);
}

static void test_queue_drop_front_and_growth(void **state)
{
    wremote_queue q;
    wremote_queue_init(&q);
    for (int i = 0; i < 1000; i++)
        push(&q, WPROTO_MSG_HEARTBEAT, i);
    wremote_queue_drop_front(&q, WREMOTE_MAX_LINES);
    assert_int_equal(q.n, 1000 - WREMOTE_MAX_LINES);
    assert_int_equal(tag(&q, 0), WREMOTE_MAX_LINES);
    wremote_queue_coalesce(&q);
    assert_int_equal(q.n, 1);
    assert_int_equal(tag(&q, 0), 999);
    wremote_queue_drop_front(&q, 5); /* more than there is */
    assert_int_equal(q.n, 0);
    wremote_queue_free(&q);
}

static void test_relay_line(void **state)
{
    wproto_msg k;
    json_t *l = wremote_relay_line(
        "{\"event\":\"started\",\"pid\":12,\"trainyard_device\":\"cpu\"}",
        "node7", &k);
    assert_int_equal(k, WPROTO_MSG_STARTED);
    assert_string_equal(json_string_value(json_object_get(l, WREMOTE_F_NODE)),
                        "node7");
    assert_int_equal(json_integer_value(json_object_get(l, WPROTO_F_PID)), 12);
    json_decref(l);

    l = wremote_relay_line("{\"event\":\"epoch\",\"epoch\":1}", "node7", &k);
    assert_int_equal(k, WPROTO_MSG_EPOCH);
    assert_null(json_object_get(l, WREMOTE_F_NODE));
    json_decref(l);

    /* An event this side does not know is relayed as it is. */
    l = wremote_relay_line("{\"event\":\"future\"}", "n", &k);
    assert_int_equal(k, WPROTO_MSG_UNKNOWN);
    json_decref(l);

    static const char *const not_lines[] = {"", "garbage", "{\"pid\":1}",
                                            "[1,2]", "{\"event\":3}"};
    for (size_t i = 0; i < TY_ARRAY_LEN(not_lines); i++) {
        assert_null(wremote_relay_line(not_lines[i], "n", &k));
        assert_int_equal(k, WPROTO_MSG_NONE);
    }
}

static void test_upload_before(void **state)
{
    json_t *ck = json_pack("{s:b}", WPROTO_F_CHECKPOINT, 1);
    json_t *no_ck = json_pack("{s:b}", WPROTO_F_CHECKPOINT, 0);
    assert_int_equal(wremote_upload_before(WPROTO_MSG_EPOCH, NULL),
                     WREMOTE_UPLOAD_CHECKPOINT);
    assert_int_equal(wremote_upload_before(WPROTO_MSG_PREEMPTED, ck),
                     WREMOTE_UPLOAD_CHECKPOINT);
    assert_int_equal(wremote_upload_before(WPROTO_MSG_PREEMPTED, no_ck),
                     WREMOTE_UPLOAD_NONE);
    assert_int_equal(wremote_upload_before(WPROTO_MSG_DONE, NULL),
                     WREMOTE_UPLOAD_MODEL);
    static const wproto_msg none[] = {
        WPROTO_MSG_STARTED, WPROTO_MSG_HEARTBEAT, WPROTO_MSG_PROGRESS,
        WPROTO_MSG_RESUME,  WPROTO_MSG_ERROR,     WPROTO_MSG_UNKNOWN};
    for (size_t i = 0; i < TY_ARRAY_LEN(none); i++)
        assert_int_equal(wremote_upload_before(none[i], ck),
                         WREMOTE_UPLOAD_NONE);
    json_decref(ck);
    json_decref(no_ck);
}

/* A job document as wremote.h describes it. */
static json_t *job_doc(json_t *validation)
{
    return json_pack(
        "{s:s, s:{s:s, s:i}, s:o, s:n, s:{s:[]}, s:{s:i}, s:i, s:{s:s}}",
        WPROTO_JOB_ID, "job_1", WREMOTE_F_DATASET, WREMOTE_F_SHA256, SHA_A,
        WREMOTE_F_BYTES, 100, WPROTO_JOB_VALIDATION, validation, "checkpoint",
        WPROTO_JOB_SPEC, "layers", WPROTO_JOB_HYPERPARAMETERS, "epochs", 2,
        WPROTO_JOB_THREADS, 3, WPROTO_JOB_EXTRA_META, "trainyard.job", "job_1");
}

static const char *str_at(const json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

static void test_job_file_with_validation_dataset(void **state)
{
    json_t *doc = job_doc(json_pack("{s:{s:s, s:i}}", WREMOTE_F_DATASET,
                                    WREMOTE_F_SHA256, SHA_B, WREMOTE_F_BYTES,
                                    7));
    json_t *job = NULL;
    ty_err err = {0};
    assert_int_equal(wremote_job_file(doc, "/w/d", &job, &err), TY_OK);
    assert_string_equal(str_at(job, WPROTO_JOB_DATASET_PATH),
                        "/w/d/blob-" SHA_A);
    assert_string_equal(
        str_at(json_object_get(job, WPROTO_JOB_VALIDATION),
               WPROTO_JOB_DATASET_PATH),
        "/w/d/blob-" SHA_B);
    assert_int_equal(json_object_size(json_object_get(job,
                                                      WPROTO_JOB_VALIDATION)),
                     1);
    assert_string_equal(str_at(job, WPROTO_JOB_CHECKPOINT_PATH),
                        "/w/d/checkpoint.safetensors");
    assert_string_equal(str_at(job, WPROTO_JOB_MODEL_PATH),
                        "/w/d/model.safetensors");
    /* What the worker reads, as the document has it; no blob keys. */
    assert_string_equal(str_at(job, WPROTO_JOB_ID), "job_1");
    assert_int_equal(
        json_integer_value(json_object_get(job, WPROTO_JOB_THREADS)), 3);
    assert_true(json_equal(json_object_get(job, WPROTO_JOB_SPEC),
                           json_object_get(doc, WPROTO_JOB_SPEC)));
    assert_true(json_equal(json_object_get(job, WPROTO_JOB_HYPERPARAMETERS),
                           json_object_get(doc, WPROTO_JOB_HYPERPARAMETERS)));
    assert_true(json_equal(json_object_get(job, WPROTO_JOB_EXTRA_META),
                           json_object_get(doc, WPROTO_JOB_EXTRA_META)));
    assert_null(json_object_get(job, WREMOTE_F_DATASET));
    assert_null(json_object_get(job, "checkpoint"));
    /* The document is untouched. */
    assert_non_null(json_object_get(doc, WREMOTE_F_DATASET));
    json_decref(job);
    json_decref(doc);
}

static void test_job_file_with_split(void **state)
{
    json_t *doc = job_doc(json_pack("{s:f}", WPROTO_JOB_SPLIT, 0.2));
    json_t *job = NULL;
    ty_err err = {0};
    assert_int_equal(wremote_job_file(doc, "/w", &job, &err), TY_OK);
    json_t *val = json_object_get(job, WPROTO_JOB_VALIDATION);
    assert_true(json_real_value(json_object_get(val, WPROTO_JOB_SPLIT)) == 0.2);
    assert_null(json_object_get(val, WPROTO_JOB_DATASET_PATH));
    json_decref(job);
    json_decref(doc);
}

/* hyperparameters.init_from's model arrives as a blob: the worker's
 * job.json names it by its local path; without one there is no
 * init_path. */
static void test_job_file_with_init_model(void **state)
{
    json_t *doc = job_doc(json_pack("{s:f}", WPROTO_JOB_SPLIT, 0.1));
    json_object_set_new(doc, WREMOTE_F_INIT,
                        json_pack("{s:s, s:i}", WREMOTE_F_SHA256, SHA_B,
                                  WREMOTE_F_BYTES, 9));
    json_t *job = NULL;
    ty_err err = {0};
    assert_int_equal(wremote_job_file(doc, "/w/d", &job, &err), TY_OK);
    assert_string_equal(str_at(job, WPROTO_JOB_INIT_PATH),
                        "/w/d/blob-" SHA_B);
    assert_null(json_object_get(job, WREMOTE_F_INIT));
    json_decref(job);
    json_object_del(doc, WREMOTE_F_INIT);
    assert_int_equal(wremote_job_file(doc, "/w/d", &job, &err), TY_OK);
    assert_null(json_object_get(job, WPROTO_JOB_INIT_PATH));
    json_decref(job);
    /* a reference that is not a blob's is refused like a dataset's */
    json_object_set_new(doc, WREMOTE_F_INIT,
                        json_pack("{s:s}", WREMOTE_F_SHA256, "../x"));
    job = (json_t *)1;
    assert_int_equal(wremote_job_file(doc, "/w/d", &job, &err), TY_EFORMAT);
    assert_null(job);
    assert_non_null(strstr(err.msg, "init model"));
    json_decref(doc);
}

static void test_job_file_rejects_bad_documents(void **state)
{
    json_t *bad[] = {
        json_string("no"),
        json_pack("{s:s}", WPROTO_JOB_ID, "j"), /* no dataset */
        json_pack("{s:{s:s}}", WREMOTE_F_DATASET, WREMOTE_F_SHA256, "abc"),
        json_pack("{s:{s:s}}", WREMOTE_F_DATASET, WREMOTE_F_SHA256,
                  "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
                  "AAAAA"), /* upper case */
        json_pack("{s:s}", WREMOTE_F_DATASET, SHA_A), /* not an object */
        job_doc(json_pack("{s:{s:s}}", WREMOTE_F_DATASET, WREMOTE_F_SHA256,
                          "../../etc/passwd")),
    };
    for (size_t i = 0; i < TY_ARRAY_LEN(bad); i++) {
        json_t *job = (json_t *)1;
        ty_err err = {0};
        assert_int_equal(wremote_job_file(bad[i], "/w", &job, &err),
                         TY_EFORMAT);
        assert_null(job);
        assert_true(err.msg[0] != '\0');
        json_decref(bad[i]);
    }
}

static void test_ids_and_hashes(void **state)
{
    assert_true(wremote_job_id_ok("job_01HX-3.a"));
    static const char *const bad_ids[] = {"", ".hidden", "a/b", "a b",
                                          "..", "a?x", "%2e"};
    for (size_t i = 0; i < TY_ARRAY_LEN(bad_ids); i++)
        assert_false(wremote_job_id_ok(bad_ids[i]));
    assert_false(wremote_job_id_ok(NULL));
    char long_id[130];
    memset(long_id, 'a', 129);
    long_id[129] = '\0';
    assert_false(wremote_job_id_ok(long_id));
    long_id[128] = '\0';
    assert_true(wremote_job_id_ok(long_id));

    assert_true(wremote_sha256_ok(SHA_A));
    assert_true(wremote_sha256_ok(SHA_B));
    assert_false(wremote_sha256_ok(SHA_A "a"));
    assert_false(wremote_sha256_ok("abc"));
    assert_false(wremote_sha256_ok(NULL));
}

static void test_urls(void **state)
{
    char url[256];
    assert_int_equal(wremote_url(url, sizeof url, "http://h:8080/",
                                 WREMOTE_PATH_JOB, "job_1", NULL),
                     TY_OK);
    assert_string_equal(url, "http://h:8080/v1/worker/jobs/job_1");
    assert_int_equal(wremote_url(url, sizeof url, "https://h//",
                                 WREMOTE_PATH_BLOB, "j", SHA_B),
                     TY_OK);
    assert_string_equal(url, "https://h/v1/worker/jobs/j/blobs/" SHA_B);
    assert_int_equal(wremote_url(url, sizeof url, "http://h",
                                 WREMOTE_PATH_EVENTS, "j", NULL),
                     TY_OK);
    assert_string_equal(url, "http://h/v1/worker/jobs/j/events");
    /* Too long: an error, never a cut URL. */
    char small[30];
    assert_int_equal(wremote_url(small, sizeof small, "http://h",
                                 WREMOTE_PATH_CHECKPOINT, "j", NULL),
                     TY_EINVAL);
    assert_int_equal(wremote_url(small, 0, "http://h", WREMOTE_PATH_JOB, "j",
                                 NULL),
                     TY_EINVAL);
}

static void test_actions(void **state)
{
    json_t *r = json_pack("{s:s}", WREMOTE_F_ACTION, WREMOTE_ACTION_PREEMPT);
    assert_int_equal(wremote_action_of(r), WREMOTE_DO_PREEMPT);
    json_decref(r);
    r = json_pack("{s:s}", WREMOTE_F_ACTION, WREMOTE_ACTION_CANCEL);
    assert_int_equal(wremote_action_of(r), WREMOTE_DO_CANCEL);
    json_decref(r);
    r = json_pack("{s:s}", WREMOTE_F_ACTION, "explode");
    assert_int_equal(wremote_action_of(r), WREMOTE_DO_RUN);
    json_decref(r);
    assert_int_equal(wremote_action_of(NULL), WREMOTE_DO_RUN);
}

static void test_retry_schedule(void **state)
{
    wremote_retry r;
    wremote_retry_init(&r, 20.0);
    assert_true(wremote_retry_due(&r, 0.0));
    /* 0.2, 0.4, 0.8, 1.6, 3.2, then 5 s from each failure. */
    static const long want_ms[] = {200, 400, 800, 1600, 3200, 5000, 5000};
    double now = 100.0;
    for (size_t i = 0; i < TY_ARRAY_LEN(want_ms); i++) {
        assert_int_equal(wremote_retry_failed(&r, now), 0);
        assert_int_equal(r.delay_ms, want_ms[i]);
        assert_false(wremote_retry_due(&r, now));
        now = r.next_try;
        assert_true(wremote_retry_due(&r, now));
    }
    /* now is 100 + 16.2: one more 5 s wait fits, the next is past 20 s. */
    assert_int_equal(wremote_retry_failed(&r, now), 0);
    now = r.next_try;
    assert_int_equal(wremote_retry_failed(&r, now), -1);
    /* An answer starts the schedule over. */
    wremote_retry_ok(&r);
    assert_true(wremote_retry_due(&r, now));
    assert_int_equal(wremote_retry_failed(&r, now), 0);
    assert_int_equal(r.delay_ms, WREMOTE_RETRY_MS);
}

static void test_budget_and_interval(void **state)
{
    assert_true(wremote_retry_budget(NULL) == 600.0);
    assert_true(wremote_retry_budget("") == 600.0);
    assert_true(wremote_retry_budget("30") == 30.0);
    assert_true(wremote_retry_budget("0") == 600.0);
    assert_true(wremote_retry_budget("-5") == 600.0);
    assert_true(wremote_retry_budget("10s") == 600.0);
    assert_true(wremote_retry_budget("86401") == 600.0);
    assert_int_equal(wremote_post_interval_ms(NULL),
                     WPROTO_HEARTBEAT_DEFAULT_MS);
    assert_int_equal(wremote_post_interval_ms("300"), 300);
    assert_int_equal(wremote_post_interval_ms("9"),
                     WPROTO_HEARTBEAT_DEFAULT_MS);
    assert_int_equal(wremote_post_interval_ms(" 300"),
                     WPROTO_HEARTBEAT_DEFAULT_MS);
}

static void test_exit_status(void **state)
{
    assert_int_equal(wremote_exit_status(0), 0);
    assert_int_equal(wremote_exit_status(WPROTO_EXIT_PREEMPTED << 8),
                     WPROTO_EXIT_PREEMPTED);
    assert_int_equal(wremote_exit_status(WPROTO_EXIT_FAILED << 8),
                     WPROTO_EXIT_FAILED);
    assert_int_equal(wremote_exit_status(SIGKILL), 128 + SIGKILL);
    assert_int_equal(wremote_exit_status(SIGSEGV | 0x80), 128 + SIGSEGV);
}

static void test_rank(void **state)
{
    (void)state;
    assert_int_equal(wremote_rank(NULL, NULL), 0);
    assert_int_equal(wremote_rank("", NULL), 0);
    assert_int_equal(wremote_rank("1", "0"), 1); /* PMIx's wins */
    assert_int_equal(wremote_rank(NULL, "3"), 3);
    assert_int_equal(wremote_rank("0", "2"), 0);
    assert_int_equal(wremote_rank("x", NULL), -1);
    assert_int_equal(wremote_rank("-1", NULL), -1);
    assert_int_equal(wremote_rank("99999999999", NULL), -1);
    assert_int_equal(wremote_rank_exit(WPROTO_EXIT_OK), 0);
    assert_int_equal(wremote_rank_exit(WPROTO_EXIT_PREEMPTED), 0);
    assert_int_equal(wremote_rank_exit(WPROTO_EXIT_CANCELLED), 0);
    assert_int_equal(wremote_rank_exit(WPROTO_EXIT_FAILED), WPROTO_EXIT_FAILED);
    assert_int_equal(wremote_rank_exit(128 + SIGKILL), 128 + SIGKILL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_coalesce_keeps_newest_heartbeat_and_progress),
        cmocka_unit_test(test_queue_drop_front_and_growth),
        cmocka_unit_test(test_relay_line),
        cmocka_unit_test(test_upload_before),
        cmocka_unit_test(test_job_file_with_validation_dataset),
        cmocka_unit_test(test_job_file_with_split),
        cmocka_unit_test(test_job_file_rejects_bad_documents),
        cmocka_unit_test(test_job_file_with_init_model),
        cmocka_unit_test(test_ids_and_hashes),
        cmocka_unit_test(test_urls),
        cmocka_unit_test(test_actions),
        cmocka_unit_test(test_retry_schedule),
        cmocka_unit_test(test_budget_and_interval),
        cmocka_unit_test(test_exit_status),
        cmocka_unit_test(test_rank),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
