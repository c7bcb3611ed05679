/*
 * Integration tests for the client's views of typed CSV columns and
 * regression metrics (issue 30's follow-up): the built client run as a
 * subprocess against a real server.
 *
 *   upload          `datasets upload ... max_categories=N` passes the field
 *                   (a column past it is refused naming the column)
 *   datasets show   a CSV dataset's columns as a table: name, type, the
 *                   first categories and how many, missing cells
 *   jobs list       TRAIN METRICS: "acc ..." for a classifier, "rmse ...
 *                   r2 ..." for a regression job, in one list
 *   models list     VAL METRICS likewise, the validation values, in the
 *                   target's units (the API's val_rmse)
 *   models show     a tabular model's raw columns, and that predict takes
 *                   raw rows
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <fcntl.h>
#include <math.h>
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
static char homes_ds[64], blobs_ds[64];
static char reg_job[64], cls_job[64], reg_model[64], cls_model[64];

typedef cli_result run_result;

/* `trainyard args...` against the test server, HOME in the test folder. */
#define RUN(r, ...)                      \
    cli_run((r), home, env_url, env_key, \
            (const char *const[]){__VA_ARGS__, NULL})
#define run_free cli_result_free
#define expect_code cli_expect_code

/* The line of out that holds needle (a table's row), in buf; fails the
 * test when none does. */
static const char *line_with(const char *out, const char *needle, char *buf,
                             size_t size)
{
    const char *at = strstr(out, needle);
    if (!at)
        fail_msg("no line with '%s' in:\n%s", needle, out);
    const char *start = at;
    while (start > out && start[-1] != '\n')
        start--;
    snprintf(buf, size, "%.*s", (int)strcspn(start, "\n"), start);
    return buf;
}

static void expect_in(const char *what, const char *line, const char *needle)
{
    if (!strstr(line, needle))
        fail_msg("%s: '%s' not in: %s", what, needle, line);
}

/* homes.csv: size (numeric, 3 cells empty), city (5 categories), garden
 * (yes/no), price (the regression target, in the hundreds of thousands). */
static void write_homes(const char *path)
{
    static const char *const cities[] = {"rome", "paris", "oslo", "lima",
                                         "tokyo"};
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "size,city,garden,price\n");
    for (int i = 0; i < 80; i++) {
        int size = 40 + (i * 37) % 120;
        double price = 100000.0 + 2500.0 * size + 30000.0 * (i % 5) +
                       (i % 2 ? 20000.0 : 0.0);
        if (i % 25 == 3)
            fprintf(f, ",%s,%s,%.0f\n", cities[i % 5], i % 2 ? "yes" : "no",
                    price);
        else
            fprintf(f, "%d,%s,%s,%.0f\n", size, cities[i % 5],
                    i % 2 ? "yes" : "no", price);
    }
    fclose(f);
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

/* max_categories goes through as an upload field: 3 refuses the
 * 5-city column, naming it; 10 takes it. */
static void test_upload_max_categories(void **state)
{
    (void)state;
    char csv[PATH_MAX + 16], part[PATH_MAX + 32];
    snprintf(csv, sizeof csv, "%s/homes.csv", home);
    write_homes(csv);
    snprintf(part, sizeof part, "file=@%s", csv);
    run_result r;
    RUN(&r, "datasets", "upload", "homes", "--format", "csv", part,
        "label_column=price", "task=regression", "max_categories=3");
    expect_code(&r, 4);
    expect_in("a column past max_categories", r.err, "city");
    expect_in("a column past max_categories", r.err, "max_categories");
    run_free(&r);

    RUN(&r, "--json", "datasets", "upload", "homes", "--format", "csv", part,
        "label_column=price", "task=regression", "max_categories=10");
    expect_code(&r, 0);
    json_t *doc = json_loads(r.out, 0, NULL);
    assert_non_null(doc);
    snprintf(homes_ds, sizeof homes_ds, "%s", str(doc, "id"));
    json_decref(doc);
    run_free(&r);

    snprintf(csv, sizeof csv, "%s/blobs.csv", home);
    make_blobs_csv(csv, 120, 5);
    snprintf(part, sizeof part, "file=@%s", csv);
    RUN(&r, "--json", "datasets", "upload", "blobs", "--format", "csv", part,
        "label_column=species");
    expect_code(&r, 0);
    doc = json_loads(r.out, 0, NULL);
    assert_non_null(doc);
    snprintf(blobs_ds, sizeof blobs_ds, "%s", str(doc, "id"));
    json_decref(doc);
    run_free(&r);
}

/* datasets show: one row per column, the label not among them. */
static void test_datasets_show_columns(void **state)
{
    (void)state;
    assert_true(homes_ds[0]);
    run_result r;
    char line[512];
    RUN(&r, "datasets", "show", "homes");
    expect_code(&r, 0);
    line_with(r.out, "NAME", line, sizeof line);
    expect_in("the columns' heading", line, "TYPE");
    expect_in("the columns' heading", line, "CATEGORIES");
    expect_in("the columns' heading", line, "MISSING");
    /* Categories sorted by byte value: the first four, then how many. */
    line_with(r.out, "lima, oslo", line, sizeof line);
    expect_in("city's row", line, "city");
    expect_in("city's row", line, "categorical");
    expect_in("city's row", line, "lima, oslo, paris, rome, ... (5 in all)");
    line_with(r.out, "numeric", line, sizeof line);
    expect_in("size's row", line, "size ");
    /* Rows 3, 28, 53 and 78 have no size. */
    if (strcmp(line + strlen(line) - 2, " 4") != 0)
        fail_msg("size's row does not end with its 4 missing cells: %s", line);
    line_with(r.out, "boolean", line, sizeof line);
    expect_in("garden's row", line, "garden");
    if (strstr(r.out, "price "))
        fail_msg("the label column is listed among the features:\n%s", r.out);
    run_free(&r);
}

static void submit(const char *ds, int outputs, char *job, size_t n)
{
    char body[512];
    snprintf(body, sizeof body,
             "{\"dataset\": \"%s\", \"resources\": {\"gpu\": \"none\"}, "
             "\"model\": {\"layers\": [{\"type\": \"dense\", \"units\": 8}, "
             "{\"type\": \"relu\"}, {\"type\": \"dense\", \"units\": %d}]}, "
             "\"hyperparameters\": {\"epochs\": 3, \"batch_size\": 16}}",
             ds, outputs);
    resp *h = http_json(&server, "POST", "/v1/jobs", body);
    expect_status(h, 202);
    snprintf(job, n, "%s", str(h->json, "id"));
    resp_free(h);
}

static void train_both(void)
{
    if (reg_model[0])
        return;
    submit(homes_ds, 1, reg_job, sizeof reg_job);
    submit(blobs_ds, 3, cls_job, sizeof cls_job);
    json_t *j = wait_job(&server, reg_job, 300);
    assert_string_equal(str(j, "status"), "succeeded");
    snprintf(reg_model, sizeof reg_model, "%s", str(j, "model"));
    json_decref(j);
    j = wait_job(&server, cls_job, 300);
    assert_string_equal(str(j, "status"), "succeeded");
    snprintf(cls_model, sizeof cls_model, "%s", str(j, "model"));
    json_decref(j);
}

/* "label <v>" as the client prints metrics.key (4 decimals, 1 from 1000). */
static void metric_text(const char *path, const char *key, const char *label,
                        char *out, size_t n)
{
    resp *h = http_get(&server, path);
    expect_status(h, 200);
    const json_t *v = json_object_get(json_object_get(h->json, "metrics"), key);
    if (!json_is_number(v))
        fail_msg("%s has no metrics.%s", path, key);
    double x = json_number_value(v);
    snprintf(out, n, fabs(x) >= 1000 ? "%s %.1f" : "%s %.4f", label, x);
    resp_free(h);
}

/* jobs list: one column for both tasks' headline metrics. */
static void test_jobs_list_metrics(void **state)
{
    (void)state;
    assert_true(homes_ds[0] && blobs_ds[0]);
    train_both();
    char path[160], rmse[64], r2[64], acc[64], line[512];
    snprintf(path, sizeof path, "/v1/jobs/%s", reg_job);
    metric_text(path, "train_rmse", "rmse", rmse, sizeof rmse);
    metric_text(path, "train_r2", "r2", r2, sizeof r2);
    snprintf(path, sizeof path, "/v1/jobs/%s", cls_job);
    metric_text(path, "train_accuracy", "acc", acc, sizeof acc);
    run_result r;
    RUN(&r, "jobs", "list");
    expect_code(&r, 0);
    line_with(r.out, "STATUS", line, sizeof line);
    expect_in("jobs list's heading", line, "TRAIN LOSS");
    expect_in("jobs list's heading", line, "TRAIN METRICS");
    line_with(r.out, reg_job, line, sizeof line);
    expect_in("the regression job's row", line, rmse);
    expect_in("the regression job's row", line, r2);
    line_with(r.out, cls_job, line, sizeof line);
    expect_in("the classification job's row", line, acc);
    run_free(&r);
}

/* models list: the validation values, RMSE in the target's units. */
static void test_models_list_metrics(void **state)
{
    (void)state;
    train_both();
    char path[160], rmse[64], r2[64], acc[64], line[512];
    snprintf(path, sizeof path, "/v1/models/%s", reg_model);
    metric_text(path, "val_rmse", "rmse", rmse, sizeof rmse);
    metric_text(path, "val_r2", "r2", r2, sizeof r2);
    snprintf(path, sizeof path, "/v1/models/%s", cls_model);
    metric_text(path, "val_accuracy", "acc", acc, sizeof acc);
    run_result r;
    RUN(&r, "models", "list");
    expect_code(&r, 0);
    line_with(r.out, "PARAMS", line, sizeof line);
    expect_in("models list's heading", line, "VAL LOSS");
    expect_in("models list's heading", line, "VAL METRICS");
    line_with(r.out, reg_model, line, sizeof line);
    expect_in("the regression model's row", line, rmse);
    expect_in("the regression model's row", line, r2);
    /* The target is in the hundreds of thousands: an RMSE in its units is
     * well above 1 (a standardized one would be near it). */
    const char *v = strstr(line, "rmse ") + 5;
    if (strtod(v, NULL) < 100)
        fail_msg("the RMSE is not in the target's units: %s", line);
    line_with(r.out, cls_model, line, sizeof line);
    expect_in("the classification model's row", line, acc);
    run_free(&r);
}

/* models show: a tabular model's raw columns; predict takes raw rows. */
static void test_models_show_columns(void **state)
{
    (void)state;
    train_both();
    run_result r;
    char line[512];
    RUN(&r, "models", "show", reg_model);
    expect_code(&r, 0);
    expect_in("models show", r.out, "predict takes raw rows");
    line_with(r.out, "lima, oslo", line, sizeof line);
    expect_in("city's row", line, "city");
    expect_in("city's row", line, "categorical");
    line_with(r.out, "boolean", line, sizeof line);
    expect_in("garden's row", line, "garden");
    run_free(&r);
    /* A model of plain numeric features has no columns to show. */
    RUN(&r, "models", "show", cls_model);
    expect_code(&r, 0);
    if (strstr(r.out, "predict takes raw rows"))
        fail_msg("a non-tabular model lists raw columns:\n%s", r.out);
    run_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_upload_max_categories),
        cmocka_unit_test(test_datasets_show_columns),
        cmocka_unit_test(test_jobs_list_metrics),
        cmocka_unit_test(test_models_list_metrics),
        cmocka_unit_test(test_models_show_columns),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
