/* advice.c - GET /v1/admin/mig-advice[?window=7d] (admin key only): the
 * MIG layout advisor (jobs_mig_advice, jobs/demand.c over
 * jobs/advisor.h): the demand recorded over the window replayed on
 * today's layout and on the advised one, per GPU and in total.
 *
 * The window is a whole number and a unit: s, m, h or d ("90m", "24h",
 * "7d"; default 7d), from 1 minute to 90 days (what the store keeps). The
 * search replays the window many times, so it runs on a work thread. */
#include "api/api.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "jobs/service.h"

#define ADVICE_WINDOW_MIN_S 60.0
#define ADVICE_WINDOW_MAX_S (90.0 * 86400.0)

/* Parses "<n><unit>" into seconds; 0 when it is not one. */
static int parse_window(const char *text, double *seconds)
{
    if (!text || !*text || strlen(text) > 16)
        return 0;
    char *end = NULL;
    errno = 0;
    long long n = strtoll(text, &end, 10);
    if (errno || end == text || n <= 0 || text[0] == '+' || text[0] == ' ')
        return 0;
    double unit = 0;
    if (!strcmp(end, "s"))
        unit = 1;
    else if (!strcmp(end, "m"))
        unit = 60;
    else if (!strcmp(end, "h"))
        unit = 3600;
    else if (!strcmp(end, "d"))
        unit = 86400;
    if (!unit || (double)n > ADVICE_WINDOW_MAX_S / unit)
        return 0;
    *seconds = (double)n * unit;
    return *seconds >= ADVICE_WINDOW_MIN_S;
}

static void advice_run(api_ctx *app, http_req *r)
{
    const char *w = http_req_query(r, "window");
    double window_s = 7 * 86400.0;
    if (w && !parse_window(w, &window_s)) {
        http_reply_problem(r, 400, "window",
                           "window must be a whole number and a unit (s, m, "
                           "h or d), from 1 minute to 90 days: 90m, 24h, 7d");
        return;
    }
    json_t *doc = NULL;
    ty_err err = {0};
    ty_status s = jobs_mig_advice(app->jobs, window_s, &doc, &err);
    if (s != TY_OK) {
        http_reply_error(r, s, &err);
        return;
    }
    json_object_set_new(doc, "window", json_string(w ? w : "7d"));
    http_reply_json(r, 200, doc);
}

void api_admin_mig_advice(api_ctx *app, http_req *r)
{
    if (!http_req_offload(r, advice_run))
        advice_run(app, r);
}
