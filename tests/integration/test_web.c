/*
 * Integration tests for the dashboard's files: served without a key at /
 * and /web/{file} from the copy embedded in the binary, each with its
 * Content-Type; a file the dashboard does not have is a 404 problem; Chart.js
 * comes from Debian's libjs-chart.js, or is a 404 that names the package.
 * (The dashboard itself is driven in a browser by tests/browser.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "api/web.h"
#include "harness.h"

static srv server;

static int setup(void **state) { return srv_start(&server, NULL, NULL); }

static int teardown(void **state)
{
    srv_stop(&server, SIGTERM);
    srv_cleanup(&server);
    return 0;
}

static void expect(const char *path, long status, const char *type,
                   const char *needle)
{
    resp *r = http_do(&server, "GET", path, NULL, NULL, 0, "");
    if (r->status != status || !strstr(r->content_type, type) ||
        (needle && !strstr(r->body, needle)))
        fail_msg("GET %s: %ld %s, wanted %ld %s with \"%s\"", path, r->status,
                 r->content_type, status, type, needle ? needle : "");
    resp_free(r);
}

static void test_files_are_public_with_their_types(void **state)
{
    expect("/", 200, "text/html",
           "<script type=\"module\" src=\"/web/app.js\">");
    expect("/web/index.html", 200, "text/html", "<title>trainyard</title>");
    expect("/web/app.js", 200, "text/javascript", "import");
    expect("/web/live.js", 200, "text/javascript", "Last-Event-ID");
    expect("/web/style.css", 200, "text/css", "@media");
    /* Every embedded file is served, byte for byte. */
    for (unsigned long i = 0; i < ty_web_files_count; i++) {
        char path[160];
        snprintf(path, sizeof path, "/web/%s", ty_web_files[i].name);
        resp *r = http_do(&server, "GET", path, NULL, NULL, 0, "");
        assert_int_equal(r->status, 200);
        assert_int_equal(r->len, ty_web_files[i].len);
        assert_memory_equal(r->body, ty_web_files[i].data, r->len);
        resp_free(r);
    }
}

static void test_unknown_files_are_404(void **state)
{
    expect("/web/nope.js", 404, "application/problem+json", "no file nope.js");
    expect("/web/..%2fapi.h", 404, "application/problem+json", NULL);
    expect("/web/sub/app.js", 404, "application/problem+json", NULL);
    /* The key-protected API stays protected. */
    expect("/v1/jobs", 401, "application/problem+json", NULL);
}

static void test_chartjs_from_debian(void **state)
{
    if (access(TY_CHARTJS_PATH, R_OK) == 0)
        expect("/web/vendor/chart.min.js", 200, "text/javascript", "Chart.js");
    else
        expect("/web/vendor/chart.min.js", 404, "application/problem+json",
               "libjs-chart.js");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_files_are_public_with_their_types),
        cmocka_unit_test(test_unknown_files_are_404),
        cmocka_unit_test(test_chartjs_from_debian),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
