/* Unit tests for usage accounting in the store (store/usage.c): intervals
 * clipped at the window's edges, open intervals ending at now, grouping by
 * day across midnight, two keys, one tenant's rows only, and recovery
 * closing what a crash left open at the latest proven time, never past it
 * and never before an interval's start. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "store/store.h"
#include "testutil.h"

typedef tu_store_fixture fixture;

/* 2026-12-05T00:00:00Z */
#define DAY0 1796428800.0
#define H 3600.0

static int setup(void **state)
{
    static const uint8_t hash[32] = {7};
    return tu_store_setup(state, "tn_admin", "key_admin", hash);
}

/* Opens an interval of tenant on a slice of `slices` of 7 (0: CPU places
 * cpu) from start, closed at end (end < 0: left open). */
static int64_t add(store *st, const char *tenant, const char *kind,
                   const char *profile, int slices, int cpu, double start,
                   double end)
{
    store_usage_interval iv = {.tenant_id = tenant,
                               .kind = kind,
                               .owner = "job_x",
                               .device = slices ? 0 : -1,
                               .profile = slices ? profile : NULL,
                               .compute_slices = slices,
                               .gpu_slices = slices ? 7 : 0,
                               .memory_bytes = 1000,
                               .cpu = cpu,
                               .start = start};
    int64_t id = 0;
    ty_err err = {0};
    assert_int_equal(store_usage_open(st, &iv, &id, &err), TY_OK);
    assert_true(id > 0);
    if (end >= 0)
        assert_int_equal(store_usage_close(st, id, end, &err), TY_OK);
    return id;
}

/* The last window()'s count of intervals, each once. */
static int64_t last_intervals;

static json_t *window(store *st, double from, double to, double now,
                      const char *tenant, int nkeys, store_usage_key k0,
                      store_usage_key k1)
{
    store_usage_query q = {.from = from,
                           .to = to,
                           .now = now,
                           .tenant_id = tenant,
                           .nkeys = nkeys,
                           .keys = {k0, k1}};
    json_t *rows = NULL;
    ty_err err = {0};
    last_intervals = -1;
    assert_int_equal(store_usage_window(st, &q, &rows, &last_intervals, &err),
                     TY_OK);
    assert_true(last_intervals >= 0);
    assert_true(json_is_array(rows));
    return rows;
}

static double num(const json_t *row, const char *key)
{
    const json_t *v = json_object_get(row, key);
    assert_true(json_is_number(v));
    return json_number_value(v);
}

static const char *str(const json_t *row, const char *key)
{
    const char *s = json_string_value(json_object_get(row, key));
    assert_non_null(s);
    return s;
}

#define assert_near(a, b) assert_true(fabs((a) - (b)) < 1e-6)

/* An interval across both edges of the window counts only inside it;
 * one entirely outside counts nothing; an open one ends at now. */
static void test_clip_window_edges(void **state)
{
    fixture *f = *state;
    /* 2 h before the window to 1 h into it: 1 h inside, 1g of 7 */
    add(f->st, "tn_a", "training", "1g.10gb", 1, 0, DAY0 - 2 * H, DAY0 + H);
    /* across the end: from 9 h to 12 h, window ends at 10 h: 1 h, 3g */
    add(f->st, "tn_a", "training", "3g.40gb", 3, 0, DAY0 + 9 * H,
        DAY0 + 12 * H);
    /* outside: before the window */
    add(f->st, "tn_a", "training", "1g.10gb", 1, 0, DAY0 - 5 * H, DAY0 - 4 * H);
    /* open since 8 h, now is 9.5 h: 1.5 h of a whole GPU */
    add(f->st, "tn_a", "serving", "", 7, 0, DAY0 + 8 * H, -1);

    json_t *rows =
        window(f->st, DAY0, DAY0 + 10 * H, DAY0 + 9.5 * H, NULL, 0, 0, 0);
    assert_int_equal(json_array_size(rows), 1);
    json_t *t = json_array_get(rows, 0);
    assert_near(num(t, "slice_hours"), 1 * 1 + 3 * 1 + 7 * 1.5);
    assert_near(num(t, "gpu_hours"), 1.0 / 7 + 3.0 / 7 + 1.5);
    assert_near(num(t, "cpu_hours"), 0);
    assert_int_equal((int)num(t, "intervals"), 3);
    json_decref(rows);

    /* A window with nothing in it: zeros, not nulls. */
    rows = window(f->st, DAY0 - 20 * H, DAY0 - 10 * H, DAY0 + 10 * H, NULL, 0,
                  0, 0);
    assert_int_equal(json_array_size(rows), 1);
    assert_near(num(json_array_get(rows, 0), "gpu_hours"), 0);
    assert_int_equal((int)num(json_array_get(rows, 0), "intervals"), 0);
    json_decref(rows);
}

/* An interval from 22:00 to 02:00 counts 2 h in each day. */
static void test_group_by_day_across_midnight(void **state)
{
    fixture *f = *state;
    add(f->st, "tn_a", "training", "1g.10gb", 1, 0, DAY0 + 22 * H,
        DAY0 + 26 * H);
    /* a CPU gang of 4 ranks on day two, 1 h */
    add(f->st, "tn_a", "training", NULL, 0, 4, DAY0 + 30 * H, DAY0 + 31 * H);
    json_t *rows = window(f->st, DAY0, DAY0 + 48 * H, DAY0 + 48 * H, NULL, 1,
                          STORE_USAGE_DAY, 0);
    assert_int_equal(json_array_size(rows), 2);
    json_t *d1 = json_array_get(rows, 0), *d2 = json_array_get(rows, 1);
    assert_string_equal(str(d1, "day"), "2026-12-05");
    assert_string_equal(str(d2, "day"), "2026-12-06");
    assert_near(num(d1, "slice_hours"), 2);
    assert_near(num(d2, "slice_hours"), 2);
    assert_near(num(d1, "cpu_hours"), 0);
    assert_near(num(d2, "cpu_hours"), 4);
    assert_int_equal((int)num(d1, "intervals"), 1);
    assert_int_equal((int)num(d2, "intervals"), 2);
    /* the one across midnight is in both days, and counted once */
    assert_int_equal(last_intervals, 2);
    /* only the group's keys and the figures */
    assert_null(json_object_get(d1, "tenant"));
    assert_null(json_object_get(d1, "kind"));
    json_decref(rows);

    /* A window that starts at 23:00 clips the first day's piece to 1 h. */
    rows = window(f->st, DAY0 + 23 * H, DAY0 + 48 * H, DAY0 + 48 * H, NULL, 1,
                  STORE_USAGE_DAY, 0);
    assert_int_equal(json_array_size(rows), 2);
    assert_near(num(json_array_get(rows, 0), "slice_hours"), 1);
    json_decref(rows);
}

/* day,kind: one row per day and kind, sorted; tenant,profile too; a tenant
 * filter sees only its rows. */
static void test_two_keys_and_tenant_filter(void **state)
{
    fixture *f = *state;
    add(f->st, "tn_a", "training", "1g.10gb", 1, 0, DAY0 + 1 * H, DAY0 + 2 * H);
    add(f->st, "tn_a", "serving", "2g.20gb", 2, 0, DAY0 + 1 * H, DAY0 + 3 * H);
    add(f->st, "tn_b", "training", "1g.10gb", 1, 0, DAY0 + 25 * H,
        DAY0 + 26 * H);
    add(f->st, "tn_b", "training", NULL, 0, 1, DAY0 + 25 * H, DAY0 + 27 * H);

    json_t *rows = window(f->st, DAY0, DAY0 + 48 * H, DAY0 + 48 * H, NULL, 2,
                          STORE_USAGE_DAY, STORE_USAGE_KIND);
    assert_int_equal(json_array_size(rows), 3);
    json_t *r0 = json_array_get(rows, 0), *r1 = json_array_get(rows, 1),
           *r2 = json_array_get(rows, 2);
    assert_string_equal(str(r0, "day"), "2026-12-05");
    assert_string_equal(str(r0, "kind"), "serving");
    assert_near(num(r0, "slice_hours"), 4);
    assert_string_equal(str(r1, "kind"), "training");
    assert_near(num(r1, "gpu_hours"), 1.0 / 7);
    assert_string_equal(str(r2, "day"), "2026-12-06");
    assert_near(num(r2, "slice_hours"), 1);
    assert_near(num(r2, "cpu_hours"), 2);
    assert_int_equal((int)num(r2, "intervals"), 2);
    json_decref(rows);

    rows = window(f->st, DAY0, DAY0 + 48 * H, DAY0 + 48 * H, NULL, 2,
                  STORE_USAGE_TENANT, STORE_USAGE_PROFILE);
    assert_int_equal(json_array_size(rows), 4);
    assert_string_equal(str(json_array_get(rows, 0), "tenant"), "tn_a");
    assert_string_equal(str(json_array_get(rows, 0), "profile"), "1g.10gb");
    assert_string_equal(str(json_array_get(rows, 2), "tenant"), "tn_b");
    assert_string_equal(str(json_array_get(rows, 2), "profile"), "1g.10gb");
    assert_string_equal(str(json_array_get(rows, 3), "profile"), "cpu");
    json_decref(rows);

    rows = window(f->st, DAY0, DAY0 + 48 * H, DAY0 + 48 * H, "tn_b", 1,
                  STORE_USAGE_TENANT, 0);
    assert_int_equal(json_array_size(rows), 1);
    assert_string_equal(str(json_array_get(rows, 0), "tenant"), "tn_b");
    json_decref(rows);
}

static void test_bad_window(void **state)
{
    fixture *f = *state;
    store_usage_query q = {.from = DAY0, .to = DAY0, .now = DAY0};
    json_t *rows = NULL;
    ty_err err = {0};
    assert_int_equal(store_usage_window(f->st, &q, &rows, NULL, &err),
                     TY_EINVAL);
    assert_null(rows);
    store_usage_key k;
    assert_int_equal(store_usage_key_parse("day", &k), 1);
    assert_int_equal(k, STORE_USAGE_DAY);
    assert_int_equal(store_usage_key_parse("owner", &k), 0);
}

static double end_of(store *st, int64_t id)
{
    json_t *row = NULL;
    ty_err err = {0};
    assert_int_equal(store_usage_get(st, id, &row, &err), TY_OK);
    json_t *e = json_object_get(row, "end_s");
    double v = json_is_number(e) ? json_number_value(e) : -1;
    json_decref(row);
    return v;
}

/* A crash left two intervals open: recovery closes both at the latest
 * proven time (here the alive stamp, later than every start), and one
 * opened after the stamp at its own start or later, never before. */
static void test_recover_closes_at_proven_time(void **state)
{
    fixture *f = *state;
    ty_err err = {0};
    int64_t a = add(f->st, "tn_a", "training", "1g.10gb", 1, 0, DAY0, -1);
    int64_t b = add(f->st, "tn_b", "serving", "", 7, 0, DAY0 + 10, -1);
    int64_t c =
        add(f->st, "tn_b", "training", "1g.10gb", 1, 0, DAY0 + 1, DAY0 + 20);
    assert_int_equal(store_usage_alive(f->st, DAY0 + 50, &err), TY_OK);
    /* a stamp that went back never moves it back */
    assert_int_equal(store_usage_alive(f->st, DAY0 + 40, &err), TY_OK);
    /* opened after the last stamp */
    int64_t d = add(f->st, "tn_a", "training", "1g.10gb", 1, 0, DAY0 + 55, -1);

    int64_t closed = 0;
    double proven = 0;
    assert_int_equal(
        store_usage_recover(f->st, DAY0 + 1000, &closed, &proven, &err), TY_OK);
    assert_int_equal(closed, 3);
    /* the latest start written (55) is later than the stamp (50) */
    assert_near(proven, DAY0 + 55);
    assert_near(end_of(f->st, a), DAY0 + 55);
    assert_near(end_of(f->st, b), DAY0 + 55);
    assert_near(end_of(f->st, c), DAY0 + 20); /* closed: untouched */
    assert_near(end_of(f->st, d), DAY0 + 55);

    /* Nothing is open now: a second recovery closes nothing, and the
     * window never runs an interval on to now. */
    assert_int_equal(
        store_usage_recover(f->st, DAY0 + 2000, &closed, &proven, &err), TY_OK);
    assert_int_equal(closed, 0);
    json_t *rows = window(f->st, DAY0, DAY0 + 5000, DAY0 + 5000, NULL, 0, 0, 0);
    assert_near(num(json_array_get(rows, 0), "slice_hours"),
                (55.0 + 7 * 45 + 19 + 0) / 3600);
    json_decref(rows);

    /* A close after recovery changes nothing. */
    assert_int_equal(store_usage_close(f->st, a, DAY0 + 900, &err), TY_OK);
    assert_near(end_of(f->st, a), DAY0 + 55);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_clip_window_edges, setup,
                                        tu_store_teardown),
        cmocka_unit_test_setup_teardown(test_group_by_day_across_midnight,
                                        setup, tu_store_teardown),
        cmocka_unit_test_setup_teardown(test_two_keys_and_tenant_filter, setup,
                                        tu_store_teardown),
        cmocka_unit_test_setup_teardown(test_bad_window, setup,
                                        tu_store_teardown),
        cmocka_unit_test_setup_teardown(test_recover_closes_at_proven_time,
                                        setup, tu_store_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
