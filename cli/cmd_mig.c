/*
 * cmd_mig.c - `trainyard mig advice|status|apply`: the MIG layout advisor
 * (GET /v1/admin/mig-advice) and layout changes (GET and POST
 * /v1/admin/mig-layout), for the admin.
 *
 * A layout is written as the sim files' instances, one "PROFILE@START" a
 * slice, comma-separated ("3g.40gb@4,2g.20gb@0,1g.10gb@2,1g.10gb@3"), or
 * "off" for a whole GPU with MIG off: the advice prints each GPU's in
 * that form, and `apply --layout` takes it (or `--from-advice`, which
 * asks for the advice and applies the GPU's advised layout).
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cmd.h"
#include "cli/output.h"

/* A layout object ({"mig", "instances"}) as "p@s,p@s" or "off". */
static void layout_text(const json_t *layout, char *out, size_t n)
{
    out[0] = '\0';
    const json_t *mig = json_object_get(layout, "mig");
    const json_t *inst = json_object_get(layout, "instances");
    if (json_is_false(mig) || !json_array_size(inst)) {
        snprintf(out, n, "%s", json_is_false(mig) ? "off" : "(none)");
        return;
    }
    size_t i, used = 0;
    json_t *x;
    json_array_foreach (inst, i, x) {
        int w = snprintf(
            out + used, n - used, "%s%s@%lld", i ? "," : "",
            cli_str(x, "profile") ? cli_str(x, "profile") : "?",
            (long long)json_integer_value(json_object_get(x, "start")));
        if (w < 0 || (size_t)w >= n - used) {
            /* the end marked, never a layout cut mid-slice */
            if (n > 4)
                snprintf(out + (n - 4), 4, "...");
            return;
        }
        used += (size_t)w;
    }
}

/* "p@s,p@s" or "off" -> the POST body's mig and instances. 0, or a usage
 * error naming --layout. */
static int layout_parse(const char *text, json_t *body)
{
    if (!strcmp(text, "off")) {
        json_object_set_new(body, "mig", json_false());
        return 0;
    }
    json_t *inst = json_array();
    char *copy = strdup(text);
    if (!copy || !inst) {
        free(copy);
        json_decref(inst);
        return cli_usage_error("mig", "out of memory");
    }
    int rc = 0;
    char *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok && !rc;
         tok = strtok_r(NULL, ",", &save)) {
        char *at = strchr(tok, '@');
        char *end = NULL;
        long start = at ? strtol(at + 1, &end, 10) : -1;
        if (!at || at == tok || !end || *end || end == at + 1 || start < 0 ||
            start > 7) {
            rc = cli_usage_error("mig",
                                 "--layout: '%s' is not PROFILE@START (e.g. "
                                 "3g.40gb@4; START 0..7)",
                                 tok);
            break;
        }
        *at = '\0';
        json_array_append_new(
            inst, json_pack("{s:s, s:i}", "profile", tok, "start", (int)start));
    }
    free(copy);
    if (!rc && !json_array_size(inst))
        rc = cli_usage_error("mig", "--layout is empty: give PROFILE@START,... "
                                    "or off");
    if (rc) {
        json_decref(inst);
        return rc;
    }
    json_object_set_new(body, "mig", json_true());
    json_object_set_new(body, "instances", inst);
    return 0;
}

static void fmt_num(const json_t *v, const char *fmt, char *out, size_t n)
{
    if (json_is_number(v))
        snprintf(out, n, fmt, json_number_value(v));
    else
        snprintf(out, n, "-");
}

/* Unix seconds (a number) or an RFC 3339 string as "2026-12-05 10:00Z". */
static void iso_time(const json_t *v, char *out, size_t n)
{
    if (json_is_string(v)) {
        snprintf(out, n, "%s", json_string_value(v));
        return;
    }
    time_t t = (time_t)json_number_value(v);
    struct tm tm;
    if (!json_is_number(v) || !gmtime_r(&t, &tm) ||
        !strftime(out, n, "%Y-%m-%d %H:%MZ", &tm))
        snprintf(out, n, "?");
}

static int mig_advice(cli_ctx *c)
{
    const char *window = cli_opt(c, "--window");
    char path[256];
    if (window && (strlen(window) > 32 || strpbrk(window, "&?#/ ")))
        return cli_usage_error("mig", "--window: a duration such as 7d, 12h");
    snprintf(path, sizeof path, "/v1/admin/mig-advice%s%s",
             window ? "?window=" : "", window ? window : "");
    cli_resp r;
    int rc = cli_call(c, "GET", path, NULL, NULL, 0, &r);
    if (rc || c->json) {
        if (!rc)
            cli_resp_free(&r);
        return rc;
    }
    char from[32], to[32];
    iso_time(json_object_get(r.json, "from"), from, sizeof from);
    iso_time(json_object_get(r.json, "to"), to, sizeof to);
    printf("%s to %s (%.4g days): %lld demand records replayed\n", from, to,
           json_number_value(json_object_get(r.json, "window_seconds")) /
               86400.0,
           (long long)json_integer_value(json_object_get(r.json, "records")));
    static const char *const head[] = {"GPU",      "MODEL",    "NOW",
                                       "QUEUED-H", "ADVISED",  "QUEUED-H",
                                       "UTIL NOW", "UTIL ADV", NULL};
    cli_table t;
    cli_table_init(&t, head);
    size_t i;
    json_t *g;
    const json_t *gpus = json_object_get(r.json, "gpus");
    json_array_foreach (gpus, i, g) {
        const json_t *cur = json_object_get(g, "current");
        const json_t *adv = json_object_get(g, "advised");
        char gpu[16], now[160], later[160], qn[32], qa[32], un[32], ua[32];
        snprintf(gpu, sizeof gpu, "%lld",
                 (long long)json_integer_value(json_object_get(g, "gpu")));
        layout_text(cur, now, sizeof now);
        if (json_is_true(json_object_get(g, "change")))
            layout_text(adv, later, sizeof later);
        else
            snprintf(later, sizeof later, "(keep)");
        fmt_num(json_object_get(cur, "queued_slice_hours"), "%.1f", qn,
                sizeof qn);
        fmt_num(json_object_get(adv, "queued_slice_hours"), "%.1f", qa,
                sizeof qa);
        fmt_num(json_object_get(cur, "utilization"), "%.2f", un, sizeof un);
        fmt_num(json_object_get(adv, "utilization"), "%.2f", ua, sizeof ua);
        const char *row[] = {gpu, cli_str(g, "model"), now, qn, later, qa, un,
                             ua};
        cli_table_add(&t, row);
    }
    cli_table_print(&t, stdout);
    cli_table_free(&t);
    json_array_foreach (gpus, i, g) {
        const char *note = cli_str(g, "note");
        if (note)
            printf("GPU %lld: %s\n",
                   (long long)json_integer_value(json_object_get(g, "gpu")),
                   note);
    }
    int changes = 0;
    json_array_foreach (gpus, i, g) {
        if (!json_is_true(json_object_get(g, "change")))
            continue;
        char later[160];
        layout_text(json_object_get(g, "advised"), later, sizeof later);
        printf("%sto apply: trainyard mig apply %lld --layout %s\n",
               changes++ ? "" : "\n",
               (long long)json_integer_value(json_object_get(g, "gpu")), later);
    }
    if (!changes)
        printf("\nno GPU would be better cut otherwise for this demand\n");
    cli_resp_free(&r);
    return 0;
}

/* One GPU's entry of GET /v1/admin/mig-layout: its layout and latest
 * change. */
static void print_gpu_layout(const json_t *g)
{
    char now[160];
    layout_text(json_object_get(g, "layout"), now, sizeof now);
    printf("GPU %lld: %s\n",
           (long long)json_integer_value(json_object_get(g, "gpu")), now);
    const json_t *ch = json_object_get(g, "change");
    if (!json_is_object(ch))
        return;
    char before[160], after[160];
    layout_text(json_object_get(ch, "before"), before, sizeof before);
    layout_text(json_object_get(ch, "after"), after, sizeof after);
    printf("  change %s: %s (%s -> %s, drain %s)\n",
           cli_str(ch, "id") ? cli_str(ch, "id") : "?",
           cli_str(ch, "state") ? cli_str(ch, "state") : "?", before, after,
           cli_str(ch, "drain") ? cli_str(ch, "drain") : "?");
    const json_t *waiting = json_object_get(ch, "waiting_on");
    if (json_array_size(waiting)) {
        printf("  waiting on:");
        size_t k;
        json_t *w;
        json_array_foreach (waiting, k, w) {
            char v[96];
            cli_fmt_value(w, v, sizeof v);
            printf(" %s", v);
        }
        printf("\n");
    }
    if (cli_str(ch, "error"))
        printf("  error: %s\n", cli_str(ch, "error"));
}

/* A GPU index argument into *gpu: 0, or a usage error. */
static int gpu_arg(const char *text, long *gpu)
{
    char *end = NULL;
    *gpu = strtol(text, &end, 10);
    if (!*text || *end || *gpu < 0 || *gpu > 4096)
        return cli_usage_error("mig", "'%s' is not a GPU index", text);
    return 0;
}

static int mig_status(cli_ctx *c)
{
    char path[128] = "/v1/admin/mig-layout";
    if (c->npos > 2)
        return cli_usage_error("mig", "mig status takes at most one GPU");
    if (c->npos == 2) {
        long gpu = 0;
        int rc = gpu_arg(c->pos[1], &gpu);
        if (rc)
            return rc;
        snprintf(path, sizeof path, "/v1/admin/mig-layout/%ld", gpu);
    }
    cli_resp r;
    int rc = cli_call(c, "GET", path, NULL, NULL, 0, &r);
    if (rc || c->json) {
        if (!rc)
            cli_resp_free(&r);
        return rc;
    }
    const json_t *gpus = json_object_get(r.json, "gpus");
    if (json_is_array(gpus)) {
        size_t i;
        json_t *g;
        json_array_foreach (gpus, i, g)
            print_gpu_layout(g);
    } else {
        print_gpu_layout(r.json);
    }
    cli_resp_free(&r);
    return 0;
}

/* The advised layout of GPU gpu from GET /v1/admin/mig-advice, into body;
 * 0, or an error (shown) when the advice has nothing to change there. */
static int advised_layout(cli_ctx *c, long gpu, json_t *body)
{
    cli_resp r;
    int rc = cli_call(c, "GET", "/v1/admin/mig-advice", NULL, NULL, 0, &r);
    if (rc)
        return rc;
    size_t i;
    json_t *g;
    const json_t *hit = NULL;
    json_array_foreach (json_object_get(r.json, "gpus"), i, g)
        if (json_integer_value(json_object_get(g, "gpu")) == gpu)
            hit = g;
    if (!hit || !json_is_true(json_object_get(hit, "change"))) {
        fprintf(stderr,
                "trainyard: the advice keeps GPU %ld as it is; nothing to "
                "apply\n",
                gpu);
        cli_resp_free(&r);
        return CLI_EXIT_USAGE;
    }
    const json_t *adv = json_object_get(hit, "advised");
    json_object_set(body, "mig", json_object_get(adv, "mig"));
    json_object_set(body, "instances", json_object_get(adv, "instances"));
    cli_resp_free(&r);
    return 0;
}

static int mig_apply(cli_ctx *c)
{
    if (c->npos != 2)
        return cli_usage_error("mig", "mig apply takes one GPU index");
    long gpu = 0;
    int rc = gpu_arg(c->pos[1], &gpu);
    if (rc)
        return rc;
    char *end = NULL;
    const char *layout = cli_opt(c, "--layout");
    const int from_advice = cli_opt(c, "--from-advice") != NULL;
    if (!!layout == from_advice)
        return cli_usage_error("mig", "give --layout PROFILE@START,... (or "
                                      "off), or --from-advice");
    const char *drain = cli_opt(c, "--drain");
    if (drain && strcmp(drain, "wait") && strcmp(drain, "preempt"))
        return cli_usage_error("mig", "--drain is wait or preempt");
    const char *timeout = cli_opt(c, "--timeout");
    long tmo = 0;
    if (timeout) {
        tmo = strtol(timeout, &end, 10);
        if (!*timeout || *end || tmo <= 0)
            return cli_usage_error("mig", "--timeout: whole seconds, > 0");
    }
    json_t *body = json_pack("{s:I}", "gpu", (json_int_t)gpu);
    rc =
        from_advice ? advised_layout(c, gpu, body) : layout_parse(layout, body);
    if (rc) {
        json_decref(body);
        return rc;
    }
    if (drain)
        json_object_set_new(body, "drain", json_string(drain));
    if (timeout)
        json_object_set_new(body, "timeout_s", json_integer(tmo));
    cli_resp r;
    if ((rc = cli_call_json(c, "POST", "/v1/admin/mig-layout", body, &r)) ||
        c->json) {
        if (!rc)
            cli_resp_free(&r);
        return rc;
    }
    const char *state = cli_str(r.json, "state");
    if (json_is_false(json_object_get(r.json, "applied")) && state &&
        !strcmp(state, "manual")) {
        const char *why = cli_str(r.json, "reason");
        printf("not applied%s%s; run as root once GPU %ld is idle, then "
               "restart the server:\n",
               why ? ": " : "", why ? why : "", gpu);
        size_t i;
        json_t *cmd;
        json_array_foreach (json_object_get(r.json, "commands"), i, cmd)
            printf("  %s\n",
                   json_string_value(cmd) ? json_string_value(cmd) : "?");
        cli_resp_free(&r);
        return 0;
    }
    printf("change %s: %s\n",
           cli_str(r.json, "id") ? cli_str(r.json, "id") : "?",
           state ? state : "?");
    int failed = state && !strcmp(state, "failed");
    const int watch = cli_opt(c, "--watch") != NULL;
    char path[96];
    snprintf(path, sizeof path, "/v1/admin/mig-layout/%ld", gpu);
    char last[32] = "";
    snprintf(last, sizeof last, "%s", state ? state : "");
    while (watch && !strcmp(last, "draining")) {
        sleep(1);
        cli_resp s;
        if ((rc = cli_call(c, "GET", path, NULL, NULL, 0, &s)) != 0)
            break;
        const json_t *ch = json_object_get(s.json, "change");
        const char *now = cli_str(ch, "state");
        if (now && strcmp(now, last)) {
            printf("change %s: %s\n",
                   cli_str(ch, "id") ? cli_str(ch, "id") : "?", now);
            if (cli_str(ch, "error"))
                printf("  error: %s\n", cli_str(ch, "error"));
            failed = !strcmp(now, "failed");
        }
        snprintf(last, sizeof last, "%s", now ? now : "");
        cli_resp_free(&s);
    }
    cli_resp_free(&r);
    return rc ? rc : failed ? CLI_EXIT_JOB_FAILED : 0;
}

int cli_cmd_mig(cli_ctx *c)
{
    if (c->help || c->npos == 0) {
        printf(
            "Usage: trainyard mig advice [--window 7d]\n"
            "       trainyard mig status [GPU]\n"
            "       trainyard mig apply GPU (--layout PROFILE@START,...|off | "
            "--from-advice)\n"
            "                 [--drain wait|preempt] [--timeout SECONDS] "
            "[--watch]\n\n"
            "The admin's MIG layouts. advice replays the demand the server "
            "recorded over the\nwindow on each GPU's layout and on the one "
            "that would have queued the fewest\nslice-hours (GET "
            "/v1/admin/mig-advice). status shows each GPU's layout and its\n"
            "latest change (GET /v1/admin/mig-layout). apply changes a GPU's "
            "layout (POST\n/v1/admin/mig-layout): a simulated GPU is drained "
            "(wait for its jobs, or preempt\nthem to checkpoint) and re-cut; "
            "for a real GPU the server prints the nvidia-smi\ncommands to "
            "run. --watch follows a draining change until it is done or "
            "failed\n(exit 1 when it failed).\n");
        return c->help ? 0 : CLI_EXIT_USAGE;
    }
    const char *sub = c->pos[0];
    if (!strcmp(sub, "advice")) {
        static const char *const ok[] = {"--window", NULL};
        int rc = cli_only_opts(c, "mig", ok);
        if (rc)
            return rc;
        if (c->npos != 1)
            return cli_usage_error("mig", "mig advice takes no arguments");
        return mig_advice(c);
    }
    if (!strcmp(sub, "status")) {
        int rc = cli_only_opts(c, "mig", NULL);
        return rc ? rc : mig_status(c);
    }
    if (!strcmp(sub, "apply")) {
        static const char *const ok[] = {"--layout", "--from-advice",
                                         "--drain",  "--timeout",
                                         "--watch",  NULL};
        int rc = cli_only_opts(c, "mig", ok);
        return rc ? rc : mig_apply(c);
    }
    return cli_usage_error("mig",
                           "unknown mig command '%s' (advice, status, "
                           "apply)",
                           sub);
}
