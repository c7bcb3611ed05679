/*
 * Unit tests for the tenant-fair work queue (server/fairq.h) that the
 * offload pools share their threads through:
 *
 *   fifo        one tenant's items come out in order
 *   cap         a tenant holds at most cap items; its next waits for one
 *               done, and push says whether a taker could take it now
 *   fewest      the next item is the tenant's holding the fewest: a
 *               tenant with one waiting request goes before a flood
 *   round robin among tenants holding as few, the one served longest ago
 *   ignore cap  when stopping, everything comes out
 *   cleanup     a tenant holding and queueing nothing is forgotten; the
 *               empty tenant ("") is a tenant like any other
 *   noisy       issue 29's attack in the queue alone: 8 takers, B floods
 *               24, A's one request is taken at once every time
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "server/fairq.h"

typedef struct {
    fairq_node node; /* first: a node is its item */
    char tenant[16];
    int seq;
} item;

static item *item_new(const char *tenant, int seq)
{
    item *it = calloc(1, sizeof *it);
    assert_non_null(it);
    strcpy(it->tenant, tenant);
    it->seq = seq;
    return it;
}

/* Pushes an item; returns whether it was takeable at once. */
static int push(fairq *q, const char *tenant, int seq)
{
    int takeable = -1;
    assert_int_equal(
        fairq_push(q, tenant, &item_new(tenant, seq)->node, &takeable), TY_OK);
    assert_true(takeable == 0 || takeable == 1);
    return takeable;
}

/* Takes an item (NULL when none); its tenant into *who. */
static item *take(fairq *q, fairq_tenant **who)
{
    return (item *)fairq_take(q, 0, who);
}

static int count_tenants(const fairq *q)
{
    int n = 0;
    for (const fairq_tenant *t = q->first; t; t = t->next)
        n++;
    return n;
}

static void test_fifo(void **state)
{
    (void)state;
    fairq q;
    fairq_init(&q, 8);
    for (int i = 0; i < 5; i++)
        assert_true(push(&q, "a", i));
    assert_int_equal(q.queued, 5);
    for (int i = 0; i < 5; i++) {
        fairq_tenant *who;
        item *it = take(&q, &who);
        assert_non_null(it);
        assert_int_equal(it->seq, i);
        assert_string_equal(who->id, "a");
        assert_int_equal(who->held, i + 1);
        free(it);
    }
    fairq_tenant *who = NULL;
    assert_null(take(&q, &who));
    assert_int_equal(q.queued, 0);
    fairq_free(&q);
}

static void test_cap(void **state)
{
    (void)state;
    fairq q;
    fairq_init(&q, 2);
    assert_true(push(&q, "b", 0));
    assert_true(push(&q, "b", 1));
    fairq_tenant *w0, *w1, *w2;
    item *i0 = take(&q, &w0), *i1 = take(&q, &w1);
    assert_non_null(i0);
    assert_non_null(i1);
    /* At its cap: its next waits, and push says so. */
    assert_false(push(&q, "b", 2));
    assert_null(take(&q, &w2));
    assert_int_equal(q.queued, 1);
    fairq_done(&q, w0);
    item *i2 = take(&q, &w2);
    assert_non_null(i2);
    assert_int_equal(i2->seq, 2);
    fairq_done(&q, w1);
    fairq_done(&q, w2);
    assert_int_equal(count_tenants(&q), 0);
    free(i0);
    free(i1);
    free(i2);
    fairq_free(&q);

    /* A cap below one is one. */
    fairq_init(&q, 0);
    assert_int_equal(q.cap, 1);
    fairq_free(&q);
}

static void test_fewest_first(void **state)
{
    (void)state;
    fairq q;
    fairq_init(&q, 100);
    item *held[3];
    fairq_tenant *hw[3];
    for (int i = 0; i < 6; i++)
        push(&q, "b", i);
    for (int i = 0; i < 3; i++)
        held[i] = take(&q, &hw[i]);
    /* B holds 3 and queues 3; A's one request goes next. */
    push(&q, "a", 100);
    fairq_tenant *who;
    item *it = take(&q, &who);
    assert_int_equal(it->seq, 100);
    assert_string_equal(who->id, "a");
    free(it);
    fairq_done(&q, who);
    it = take(&q, &who);
    assert_string_equal(it->tenant, "b");
    assert_int_equal(it->seq, 3);
    free(it);
    for (int i = 0; i < 3; i++) {
        fairq_done(&q, hw[i]);
        free(held[i]);
    }
    fairq_done(&q, who);
    while ((it = take(&q, &who))) {
        fairq_done(&q, who);
        free(it);
    }
    assert_int_equal(count_tenants(&q), 0);
    fairq_free(&q);
}

static void test_round_robin(void **state)
{
    (void)state;
    fairq q;
    fairq_init(&q, 100);
    const char *names[] = {"x", "y", "z"};
    for (int i = 0; i < 4; i++)
        for (int t = 0; t < 3; t++)
            push(&q, names[t], i);
    /* Each taken and done at once: every tenant holds none when asked, so
     * they come in turn. */
    for (int i = 0; i < 12; i++) {
        fairq_tenant *who;
        item *it = take(&q, &who);
        assert_non_null(it);
        assert_string_equal(it->tenant, names[i % 3]);
        assert_int_equal(it->seq, i / 3);
        fairq_done(&q, who);
        free(it);
    }
    assert_int_equal(count_tenants(&q), 0);
    fairq_free(&q);
}

static void test_ignore_cap(void **state)
{
    (void)state;
    fairq q;
    fairq_init(&q, 1);
    for (int i = 0; i < 3; i++)
        push(&q, "b", i);
    fairq_tenant *who[3];
    item *its[3];
    its[0] = take(&q, &who[0]);
    assert_null(take(&q, &who[1]));
    for (int i = 1; i < 3; i++) {
        its[i] = (item *)fairq_take(&q, 1, &who[i]);
        assert_non_null(its[i]);
        assert_int_equal(its[i]->seq, i);
    }
    assert_int_equal(who[2]->held, 3);
    for (int i = 0; i < 3; i++) {
        fairq_done(&q, who[i]);
        free(its[i]);
    }
    assert_int_equal(count_tenants(&q), 0);
    fairq_free(&q);
}

static void test_no_tenant_and_free(void **state)
{
    (void)state;
    fairq q;
    fairq_init(&q, 1);
    int takeable = 0;
    item *it = item_new("", 7);
    assert_int_equal(fairq_push(&q, NULL, &it->node, &takeable), TY_OK);
    assert_true(takeable);
    push(&q, "", 8);
    assert_int_equal(count_tenants(&q), 1);
    fairq_tenant *who;
    item *got = take(&q, &who);
    assert_ptr_equal(got, it);
    assert_string_equal(who->id, "");
    /* The one still queued is the caller's: fairq_free frees only the
     * tenants' entries. */
    item *left = (item *)q.first->head;
    assert_int_equal(left->seq, 8);
    fairq_free(&q);
    assert_int_equal(count_tenants(&q), 0);
    free(got);
    free(left);
}

/* Issue 29's noisy neighbour in the queue alone: 8 takers (threads), a
 * share of half; B keeps 24 requests queued, each taking a long time; A
 * sends one request at a time. A's is taken at once, every time. */
static void test_noisy_neighbour(void **state)
{
    (void)state;
    enum { THREADS = 8, FLOOD = 24 };
    fairq q;
    fairq_init(&q, THREADS / 2);
    for (int i = 0; i < FLOOD; i++)
        push(&q, "b", i);
    fairq_tenant *who[THREADS];
    item *running[THREADS] = {0};
    int busy = 0;
    for (int t = 0; t < THREADS; t++) {
        running[t] = take(&q, &who[t]);
        busy += running[t] != NULL;
    }
    assert_int_equal(busy, THREADS / 2); /* B holds its share, no more */
    for (int round = 0; round < 10; round++) {
        assert_true(push(&q, "a", round));
        int idle = 0;
        while (running[idle])
            idle++;
        running[idle] = take(&q, &who[idle]);
        assert_non_null(running[idle]);
        assert_string_equal(running[idle]->tenant, "a");
        fairq_done(&q, who[idle]);
        free(running[idle]);
        running[idle] = NULL;
        /* One of B's finishes; its thread takes B's next. */
        int b = 0;
        while (!running[b])
            b++;
        fairq_done(&q, who[b]);
        free(running[b]);
        running[b] = take(&q, &who[b]);
        assert_non_null(running[b]);
        assert_string_equal(running[b]->tenant, "b");
    }
    for (int t = 0; t < THREADS; t++)
        if (running[t]) {
            fairq_done(&q, who[t]);
            free(running[t]);
        }
    fairq_tenant *w;
    item *it;
    while ((it = (item *)fairq_take(&q, 1, &w))) {
        fairq_done(&q, w);
        free(it);
    }
    assert_int_equal(count_tenants(&q), 0);
    fairq_free(&q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fifo),
        cmocka_unit_test(test_cap),
        cmocka_unit_test(test_fewest_first),
        cmocka_unit_test(test_round_robin),
        cmocka_unit_test(test_ignore_cap),
        cmocka_unit_test(test_no_tenant_and_free),
        cmocka_unit_test(test_noisy_neighbour),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
