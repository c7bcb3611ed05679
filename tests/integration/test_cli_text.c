/*
 * Integration tests for the client's views of text and tokens datasets
 * (issue 31's text data): the built client run as a subprocess against a
 * real server.
 *
 *   upload          --format text and --format tokens pass their fields
 *                   (tokenizer=, vocab_size=); the reply line counts tokens
 *   datasets show   the tokenizer, vocabulary and token count, then the
 *                   sample (text, or the first ids)
 *   datasets list   the token count where examples are counted
 *   text classification  --format csv with text_column= and max_length=:
 *                   the reply line, show's first row decoded, list's
 *                   examples, and a missing text column refused by field
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "harness.h"

static srv server;
static char home[PATH_MAX];
static char env_url[128], env_key[160];

typedef cli_result run_result;

/* `trainyard args...` against the test server, HOME in the test folder. */
#define RUN(r, ...)                      \
    cli_run((r), home, env_url, env_key, \
            (const char *const[]){__VA_ARGS__, NULL})
#define run_free cli_result_free
#define expect_code cli_expect_code

static void expect_in(const char *what, const char *text, const char *needle)
{
    if (!strstr(text, needle))
        fail_msg("%s: '%s' not in:\n%s", what, needle, text);
}

static int group_setup(void **state)
{
    (void)state;
    temp_dir(home);
    if (srv_start(&server, NULL, NULL) != 0)
        return -1;
    snprintf(env_url, sizeof env_url, "%s", server.base);
    snprintf(env_key, sizeof env_key, "%s", server.key);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    srv_stop(&server, SIGTERM);
    srv_cleanup(&server);
    if (!getenv("TY_KEEP_TEST_DATA"))
        fs_remove_tree(home, NULL);
    return 0;
}

static void test_text_upload_show_list(void **state)
{
    (void)state;
    char path[PATH_MAX + 16], part[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/poem.txt", home);
    const char *poem = "Shall I compare thee to a summer\xe2\x80\x99s day?\n";
    write_file(path, poem, strlen(poem));
    snprintf(part, sizeof part, "file=@%s", path);
    run_result r;
    RUN(&r, "datasets", "upload", "poem", "--format", "text", part,
        "tokenizer=byte");
    expect_code(&r, 0);
    char want[128];
    snprintf(want, sizeof want, "%zu tokens, vocabulary 256, byte tokenizer",
             strlen(poem));
    expect_in("upload", r.out, want);
    run_free(&r);

    RUN(&r, "datasets", "show", "poem");
    expect_code(&r, 0);
    expect_in("show", r.out, "tokenizer");
    expect_in("show", r.out, "vocab_size");
    expect_in("show", r.out, "num_tokens");
    expect_in("show", r.out, "language_modeling");
    expect_in("show", r.out, "sample (the first");
    expect_in("show", r.out, poem);
    run_free(&r);

    RUN(&r, "datasets", "list");
    expect_code(&r, 0);
    snprintf(want, sizeof want, "%zu tokens", strlen(poem));
    expect_in("list", r.out, want);
    run_free(&r);

    /* BPE is refused naming the field (exit code 4: a 422) */
    RUN(&r, "datasets", "upload", "poem2", "--format", "text", part,
        "tokenizer=bpe");
    expect_code(&r, 4);
    expect_in("bpe", r.err, "field: tokenizer");
    run_free(&r);
}

static void test_tokens_upload_show(void **state)
{
    (void)state;
    char path[PATH_MAX + 16], part[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/ids.npy", home);
    const int64_t ids[] = {7, 0, 1234};
    write_npy_i64(path, ids, 3);
    snprintf(part, sizeof part, "file=@%s", path);
    run_result r;
    RUN(&r, "datasets", "upload", "ids", "--format", "tokens", part,
        "vocab_size=2000");
    expect_code(&r, 0);
    expect_in("upload", r.out, "3 tokens, vocabulary 2000, no tokenizer");
    run_free(&r);

    RUN(&r, "datasets", "show", "ids");
    expect_code(&r, 0);
    expect_in("show", r.out, "sample (the first token ids):\n[7,0,1234]");
    run_free(&r);

    RUN(&r, "datasets", "upload", "ids2", "--format", "tokens", part);
    expect_code(&r, 4);
    expect_in("no vocab_size", r.err, "field: vocab_size");
    run_free(&r);
}

static void test_text_classification_csv(void **state)
{
    (void)state;
    char path[PATH_MAX + 16], part[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/reviews.csv", home);
    const char *csv = "text,label,stars\n"
                      "\"loved it, would watch again\",pos,5\n"
                      "meh,neg,2\n";
    write_file(path, csv, strlen(csv));
    snprintf(part, sizeof part, "file=@%s", path);
    run_result r;
    RUN(&r, "datasets", "upload", "reviews", "--format", "csv", part,
        "label_column=label", "text_column=text", "max_length=16");
    expect_code(&r, 0);
    expect_in("upload", r.out,
              "2 examples of 16 tokens (column text), vocabulary 256, byte "
              "tokenizer, classification");
    run_free(&r);

    RUN(&r, "datasets", "show", "reviews");
    expect_code(&r, 0);
    expect_in("show", r.out, "truncated_examples");
    expect_in("show", r.out, "num_tokens");
    /* the first row's 16 bytes, decoded */
    expect_in("show", r.out,
              "sample (the first row, label \"pos\"):\nloved it, would ");
    run_free(&r);

    RUN(&r, "datasets", "list");
    expect_code(&r, 0);
    expect_in("list", r.out, "reviews");
    expect_in("list", r.out, "classification");
    run_free(&r);

    RUN(&r, "datasets", "upload", "reviews2", "--format", "csv", part,
        "label_column=label", "text_column=body");
    expect_code(&r, 4);
    expect_in("no such column", r.err, "field: text_column");
    run_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text_upload_show_list),
        cmocka_unit_test(test_tokens_upload_show),
        cmocka_unit_test(test_text_classification_csv),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
