/* web.c - serves the dashboard (see web.h); these routes need no key. */
#include "api/web.h"

#include <string.h>
#include <unistd.h>

#include "api/api.h"

const ty_web_file *web_file_find(const char *name)
{
    for (unsigned long i = 0; i < ty_web_files_count; i++)
        if (!strcmp(ty_web_files[i].name, name))
            return &ty_web_files[i];
    return NULL;
}

const char *web_content_type(const char *name)
{
    static const struct {
        const char *ext, *type;
    } types[] = {
        {".html", "text/html; charset=utf-8"},
        {".css", "text/css; charset=utf-8"},
        {".js", "text/javascript; charset=utf-8"},
        {".mjs", "text/javascript; charset=utf-8"},
        {".json", "application/json"},
        {".svg", "image/svg+xml"},
        {".png", "image/png"},
        {".ico", "image/x-icon"},
        {".txt", "text/plain; charset=utf-8"},
    };
    const char *dot = strrchr(name, '.');
    if (dot)
        for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
            if (!strcmp(dot, types[i].ext))
                return types[i].type;
    return "application/octet-stream";
}

/* Headers every dashboard file gets: no sniffing, no framing, and a policy
 * that lets the page load and talk to this origin only (the API key lives
 * in its sessionStorage). */
static void web_headers(http_req *r)
{
    http_reply_header(r, "X-Content-Type-Options", "nosniff");
    http_reply_header(r, "Content-Security-Policy",
                      "default-src 'self'; img-src 'self' data: blob:; "
                      "style-src 'self' 'unsafe-inline'; object-src 'none'; "
                      "base-uri 'none'; frame-ancestors 'none'");
    http_reply_header(r, "Referrer-Policy", "no-referrer");
}

static void web_serve(http_req *r, const char *name)
{
    const ty_web_file *f = web_file_find(name);
    if (!f) {
        http_reply_problem(
            r, 404, NULL, "the dashboard has no file %s; it starts at /", name);
        return;
    }
    web_headers(r);
    http_reply_static(r, 200, web_content_type(name), f->data, f->len);
}

void api_web_index(api_ctx *app, http_req *r) { web_serve(r, "index.html"); }

void api_web_file(api_ctx *app, http_req *r)
{
    web_serve(r, http_req_param(r, 0));
}

void api_web_chartjs(api_ctx *app, http_req *r)
{
    if (access(TY_CHARTJS_PATH, R_OK) != 0) {
        http_reply_problem(r, 404, NULL,
                           "Chart.js is not installed on this server, so the "
                           "dashboard draws no charts: install Debian's "
                           "libjs-chart.js (apt-get install libjs-chart.js), "
                           "which provides " TY_CHARTJS_PATH);
        return;
    }
    web_headers(r);
    http_reply_file(r, 200, "text/javascript; charset=utf-8", TY_CHARTJS_PATH,
                    NULL);
}
