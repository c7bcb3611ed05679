/*
 * Integration test for a full disk (issue 16, finding 5): a server whose data
 * folder is a small tmpfs is filled up. Then an upload answers 507 with a
 * problem document that names the cause (and no server path), /readyz
 * answers 503, the server keeps answering, nothing half-written is listed,
 * and once space is freed uploads work again and the dataset acknowledged
 * before is unchanged (same row, same blob bytes, same examples).
 *
 * Mounting a tmpfs needs root (CI runs the tests as root); elsewhere the
 * test is skipped with a message.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/sha256.h"
#include "harness.h"

static char base[PATH_MAX], data[PATH_MAX], files[PATH_MAX];
static srv server;
static int mounted;

/* Fills the file system under dir with one file until a write fails with
 * ENOSPC; returns the bytes written. */
static long long fill_disk(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    static char block[64 * 1024];
    memset(block, 'f', sizeof block);
    long long total = 0;
    size_t n = sizeof block;
    for (;;) {
        ssize_t w = write(fd, block, n);
        if (w > 0) {
            total += w;
            continue;
        }
        assert_int_equal(errno, ENOSPC);
        if (n == 1)
            break;
        n /= 2; /* fill the last partial block too */
    }
    close(fd);
    return total;
}

static void upload(const srv *s, const char *name, resp **out)
{
    char part_name[160], part_file[PATH_MAX + 8];
    snprintf(part_name, sizeof part_name, "name=%s", name);
    snprintf(part_file, sizeof part_file, "file=@%s/blobs.csv", files);
    const char *parts[] = {part_name, "format=csv", "label_column=species",
                           part_file, NULL};
    *out = http_upload(s, "/v1/datasets", parts);
}

static void blob_sha(const srv *s, const json_t *doc, char hex[65])
{
    const char *sha = json_string_value(json_object_get(doc, "sha256"));
    assert_non_null(sha);
    char path[PATH_MAX * 2];
    snprintf(path, sizeof path, "%s/blobs/%.2s/%s", s->data, sha, sha);
    ty_err err = {0};
    assert_int_equal(sha256_file_hex(path, hex, &err), TY_OK);
    assert_string_equal(hex, sha);
}

static void test_disk_full(void **state)
{
    (void)state;
    if (geteuid() != 0) {
        fprintf(stderr, "SKIPPED: mounting a tmpfs for the disk-full test "
                        "needs root (CI runs the tests as root)\n");
        skip();
    }
    temp_dir(base);
    snprintf(data, sizeof data, "%s/data", base);
    snprintf(files, sizeof files, "%s/files", base);
    assert_int_equal(mkdir(data, 0700), 0);
    assert_int_equal(mkdir(files, 0700), 0);
    if (mount("tmpfs", data, "tmpfs", 0, "size=8m,mode=0700") != 0) {
        fprintf(stderr, "SKIPPED: cannot mount a tmpfs (%s)\n",
                strerror(errno));
        skip();
    }
    mounted = 1;
    char path[PATH_MAX * 2];
    snprintf(path, sizeof path, "%s/blobs.csv", files);
    make_blobs_csv(path, 300, 7);

    const char *extra[] = {"--min-free-bytes", "1M", NULL};
    assert_int_equal(srv_start(&server, data, extra), 0);

    resp *r = http_get(&server, "/readyz");
    expect_status(r, 200);
    resp_free(r);

    /* One dataset acknowledged before the disk fills. */
    upload(&server, "before", &r);
    expect_status(r, 201);
    char id[64], ds_path[128], ex_path[160], sha_before[65];
    snprintf(id, sizeof id, "%s", str(r->json, "id"));
    resp_free(r);
    snprintf(ds_path, sizeof ds_path, "/v1/datasets/%s", id);
    snprintf(ex_path, sizeof ex_path, "/v1/datasets/%s/examples?limit=20", id);
    resp *doc_before = http_get(&server, ds_path);
    expect_status(doc_before, 200);
    blob_sha(&server, doc_before->json, sha_before);
    resp *ex_before = http_get(&server, ex_path);
    expect_status(ex_before, 200);

    char filler[PATH_MAX * 2];
    snprintf(filler, sizeof filler, "%s/filler", data);
    long long filled = fill_disk(filler);
    fprintf(stderr, "filled the 8 MiB tmpfs with %lld bytes\n", filled);

    r = http_get(&server, "/readyz");
    fprintf(stderr, "readyz on a full disk: %ld %s\n", r->status, r->body);
    expect_status(r, 503);
    assert_non_null(strstr(str(r->json, "detail"), "disk"));
    assert_null(strstr(r->body, data));
    resp_free(r);

    for (int i = 0; i < 3; i++) {
        upload(&server, "during", &r);
        fprintf(stderr, "upload on a full disk: %ld %s\n", r->status, r->body);
        expect_status(r, 507);
        assert_string_equal(r->content_type, "application/problem+json");
        assert_int_equal(json_integer_value(json_object_get(r->json, "status")),
                         507);
        assert_non_null(strstr(str(r->json, "detail"), "disk is full"));
        assert_null(strstr(r->body, data));
        assert_null(strstr(r->body, "/tmp"));
        resp_free(r);
    }

    /* Still answering, and nothing of the refused uploads is listed. */
    r = http_get(&server, "/healthz");
    expect_status(r, 200);
    resp_free(r);
    r = http_get(&server, "/v1/datasets");
    expect_status(r, 200);
    json_t *items = json_object_get(r->json, "items");
    assert_int_equal(json_array_size(items), 1);
    assert_string_equal(str(json_array_get(items, 0), "id"), id);
    resp_free(r);

    /* Space freed: ready again, uploads work, the old dataset is intact. */
    assert_int_equal(unlink(filler), 0);
    r = http_get(&server, "/readyz");
    expect_status(r, 200);
    resp_free(r);
    upload(&server, "after", &r);
    expect_status(r, 201);
    resp_free(r);
    r = http_get(&server, ds_path);
    expect_status(r, 200);
    assert_true(json_equal(r->json, doc_before->json));
    char sha_after[65];
    blob_sha(&server, r->json, sha_after);
    assert_string_equal(sha_after, sha_before);
    resp_free(r);
    r = http_get(&server, ex_path);
    expect_status(r, 200);
    assert_int_equal(r->len, ex_before->len);
    assert_memory_equal(r->body, ex_before->body, r->len);
    resp_free(r);
    resp_free(ex_before);
    resp_free(doc_before);

    assert_int_equal(WEXITSTATUS(srv_stop(&server, SIGTERM)), 0);
}

/* Also after a failure: no server left running, no tmpfs left mounted. */
static int teardown(void **state)
{
    (void)state;
    if (server.pid > 0)
        srv_stop(&server, SIGKILL);
    if (mounted && umount2(data, MNT_DETACH) != 0)
        fprintf(stderr, "cannot unmount %s: %s\n", data, strerror(errno));
    mounted = 0;
    if (base[0]) {
        char cmd[PATH_MAX * 2 + 16];
        snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s.server.log'", base, data);
        if (system(cmd) != 0)
            fprintf(stderr, "cannot remove %s\n", base);
    }
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_disk_full, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
