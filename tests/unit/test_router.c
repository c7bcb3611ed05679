/* Unit tests for the routing table matcher. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <string.h>

#include "server/router.h"

static const route table[] = {
    {HTTP_GET, "/healthz", "health", ROUTE_PUBLIC, ROUTE_BODY_NONE, NULL},
    {HTTP_GET, "/v1/jobs", "jobs.list", ROUTE_KEY, ROUTE_BODY_NONE, NULL},
    {HTTP_POST, "/v1/jobs", "jobs.create", ROUTE_KEY, ROUTE_BODY_JSON, NULL},
    {HTTP_GET, "/v1/jobs/{id}", "jobs.get", ROUTE_KEY, ROUTE_BODY_NONE, NULL},
    {HTTP_POST, "/v1/jobs/{id}/cancel", "jobs.cancel", ROUTE_KEY,
     ROUTE_BODY_NONE, NULL},
    {HTTP_GET, "/v2/models/{name}/versions/{v}", "kserve.version", ROUTE_KEY,
     ROUTE_BODY_NONE, NULL},
};
#define N (sizeof table / sizeof table[0])

static void test_literal_and_params(void **state)
{
    route_match m;
    assert_int_equal(router_match(table, N, HTTP_GET, "/healthz", &m, NULL, 0),
                     ROUTE_FOUND);
    assert_string_equal(m.route->name, "health");
    assert_int_equal(m.nparams, 0);

    assert_int_equal(
        router_match(table, N, HTTP_GET, "/v1/jobs/job_abc", &m, NULL, 0),
        ROUTE_FOUND);
    assert_string_equal(m.route->name, "jobs.get");
    assert_int_equal(m.nparams, 1);
    assert_string_equal(m.params[0], "job_abc");

    assert_int_equal(
        router_match(table, N, HTTP_POST, "/v1/jobs/j1/cancel", &m, NULL, 0),
        ROUTE_FOUND);
    assert_string_equal(m.route->name, "jobs.cancel");
    assert_string_equal(m.params[0], "j1");

    assert_int_equal(router_match(table, N, HTTP_GET, "/v2/models/m/versions/3",
                                  &m, NULL, 0),
                     ROUTE_FOUND);
    assert_int_equal(m.nparams, 2);
    assert_string_equal(m.params[0], "m");
    assert_string_equal(m.params[1], "3");
}

static void test_method_selects_route(void **state)
{
    route_match m;
    assert_int_equal(router_match(table, N, HTTP_POST, "/v1/jobs", &m, NULL, 0),
                     ROUTE_FOUND);
    assert_string_equal(m.route->name, "jobs.create");
    assert_int_equal(router_match(table, N, HTTP_HEAD, "/v1/jobs", &m, NULL, 0),
                     ROUTE_FOUND);
    assert_string_equal(m.route->name, "jobs.list");
}

static void test_trailing_slash_ignored(void **state)
{
    route_match m;
    assert_int_equal(router_match(table, N, HTTP_GET, "/v1/jobs/", &m, NULL, 0),
                     ROUTE_FOUND);
    assert_string_equal(m.route->name, "jobs.list");
}

static void test_not_found(void **state)
{
    route_match m;
    assert_int_equal(router_match(table, N, HTTP_GET, "/v1/job", &m, NULL, 0),
                     ROUTE_NOT_FOUND);
    assert_int_equal(
        router_match(table, N, HTTP_GET, "/v1/jobs/a/b", &m, NULL, 0),
        ROUTE_NOT_FOUND);
    assert_int_equal(
        router_match(table, N, HTTP_GET, "/v1/jobs//cancel", &m, NULL, 0),
        ROUTE_NOT_FOUND);
    assert_int_equal(router_match(table, N, HTTP_GET, "", &m, NULL, 0),
                     ROUTE_NOT_FOUND);
    char longid[300];
    memset(longid, 'a', sizeof longid);
    memcpy(longid, "/v1/jobs/", 9);
    longid[sizeof longid - 1] = '\0';
    assert_int_equal(router_match(table, N, HTTP_GET, longid, &m, NULL, 0),
                     ROUTE_NOT_FOUND);
}

static void test_method_not_allowed_lists_allow(void **state)
{
    route_match m;
    char allow[64];
    assert_int_equal(router_match(table, N, HTTP_DELETE, "/v1/jobs", &m, allow,
                                  sizeof allow),
                     ROUTE_METHOD_NOT_ALLOWED);
    assert_string_equal(allow, "GET, HEAD, POST");
    assert_int_equal(router_match(table, N, HTTP_GET, "/v1/jobs/x/cancel", &m,
                                  allow, sizeof allow),
                     ROUTE_METHOD_NOT_ALLOWED);
    assert_string_equal(allow, "POST");
}

static void test_method_names_round_trip(void **state)
{
    for (int m = 0; m < HTTP_OTHER; m++)
        assert_int_equal(http_method_parse(http_method_name((http_method)m)),
                         m);
    assert_int_equal(http_method_parse("BREW"), HTTP_OTHER);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_literal_and_params),
        cmocka_unit_test(test_method_selects_route),
        cmocka_unit_test(test_trailing_slash_ignored),
        cmocka_unit_test(test_not_found),
        cmocka_unit_test(test_method_not_allowed_lists_allow),
        cmocka_unit_test(test_method_names_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
