/*
 * cmd_usage.c - `trainyard usage`: slice-hours, GPU-hours and CPU-hours of
 * jobs and serving replicas in a window (GET /v1/usage), as a table, the
 * server's JSON (--json) or its CSV (--csv).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cmd.h"
#include "cli/output.h"

/* Appends "&name=<value escaped>" to the query in q (n bytes); 0, or -1
 * when it does not fit. */
static int add_param(char *q, size_t n, const char *name, const char *value)
{
    char esc[512];
    if (strlen(value) > 160)
        return -1;
    cli_http_escape(value, esc, sizeof esc);
    size_t len = strlen(q);
    int w = snprintf(q + len, n - len, "%s%s=%s", len ? "&" : "", name, esc);
    return w < 0 || (size_t)w >= n - len ? -1 : 0;
}

int cli_cmd_usage(cli_ctx *c)
{
    if (c->help) {
        printf("Usage: trainyard usage [--from TIME] [--to TIME] "
               "[--group-by KEYS] [--tenant ID] [--csv]\n\n"
               "Slice-hours, GPU-equivalent hours and CPU-hours that jobs "
               "and serving\nreplicas held in a window (GET /v1/usage). "
               "TIME is RFC 3339\n(2026-12-01T00:00:00Z, or a date) or unix "
               "seconds; the default window is\nthe last 7 days. KEYS is one "
               "or two of tenant, kind, profile and day,\ncomma separated "
               "(default tenant). A tenant's key sees its own usage; the\n"
               "admin sees every tenant's (--tenant: one) and the idle "
               "GPU-hours.\n--csv prints the server's CSV.\n");
        return 0;
    }
    static const char *const allowed[] = {"--from",   "--to",  "--group-by",
                                          "--tenant", "--csv", NULL};
    int rc = cli_only_opts(c, "usage", allowed);
    if (rc)
        return rc;
    if (c->npos)
        return cli_usage_error("usage", "usage takes no arguments");
    char q[2048] = "";
    static const char *const params[][2] = {{"--from", "from"},
                                            {"--to", "to"},
                                            {"--group-by", "group_by"},
                                            {"--tenant", "tenant"}};
    for (size_t i = 0; i < TY_ARRAY_LEN(params); i++) {
        const char *v = cli_opt(c, params[i][0]);
        if (v && add_param(q, sizeof q, params[i][1], v) != 0)
            return cli_usage_error("usage", "%s is too long", params[i][0]);
    }
    int csv = cli_opt(c, "--csv") != NULL;
    if (csv && add_param(q, sizeof q, "format", "csv") != 0)
        return cli_usage_error("usage", "the options are too long");
    char path[2100];
    snprintf(path, sizeof path, "/v1/usage%s%s", q[0] ? "?" : "", q);
    cli_resp r;
    if (csv) {
        /* the CSV as the server wrote it (not JSON: cli_call's --json
         * passthrough does not apply) */
        int saved = c->json;
        c->json = 0;
        rc = cli_call(c, "GET", path, NULL, NULL, 0, &r);
        c->json = saved;
        if (rc)
            return rc;
        fwrite(r.body, 1, r.len, stdout);
        cli_resp_free(&r);
        return 0;
    }
    if ((rc = cli_call(c, "GET", path, NULL, NULL, 0, &r)) != 0 || c->json) {
        if (!rc)
            cli_resp_free(&r);
        return rc;
    }
    const json_t *keys = json_object_get(r.json, "group_by");
    const char *head[8];
    char upper[2][16];
    size_t nk = json_array_size(keys) > 2 ? 2 : json_array_size(keys), h = 0;
    for (size_t i = 0; i < nk; i++) {
        const char *k = json_string_value(json_array_get(keys, i));
        snprintf(upper[i], sizeof upper[i], "%s", k ? k : "");
        for (char *p = upper[i]; *p; p++)
            if (*p >= 'a' && *p <= 'z')
                *p = (char)(*p - 'a' + 'A');
        head[h++] = upper[i];
    }
    head[h++] = "SLICE-H";
    head[h++] = "GPU-H";
    head[h++] = "CPU-H";
    head[h++] = "INTERVALS";
    head[h] = NULL;
    cli_table t;
    cli_table_init(&t, head);
    static const char *const figs[] = {"slice_hours", "gpu_hours", "cpu_hours"};
    size_t i;
    json_t *row;
    json_array_foreach (json_object_get(r.json, "rows"), i, row) {
        char cells[7][64];
        const char *cell[8];
        size_t n = 0;
        for (size_t k = 0; k < nk; k++) {
            const char *name = json_string_value(json_array_get(keys, k));
            const char *v = name ? cli_str(row, name) : NULL;
            snprintf(cells[n], sizeof cells[n], "%s", v ? v : "-");
            cell[n] = cells[n];
            n++;
        }
        for (size_t f = 0; f < TY_ARRAY_LEN(figs); f++, n++) {
            snprintf(cells[n], sizeof cells[n], "%.3f",
                     json_number_value(json_object_get(row, figs[f])));
            cell[n] = cells[n];
        }
        snprintf(
            cells[n], sizeof cells[n], "%lld",
            (long long)json_integer_value(json_object_get(row, "intervals")));
        cell[n] = cells[n];
        cli_table_add(&t, cell);
    }
    printf("usage from %s to %s\n", cli_str(r.json, "from"),
           cli_str(r.json, "to"));
    if (t.nrows)
        cli_table_print(&t, stdout);
    else
        printf("nothing held a slice or a CPU place in this window\n");
    cli_table_free(&t);
    const json_t *tot = json_object_get(r.json, "total");
    printf("total: %.3f slice-hours, %.3f GPU-hours, %.3f CPU-hours, %lld "
           "interval(s)\n",
           json_number_value(json_object_get(tot, "slice_hours")),
           json_number_value(json_object_get(tot, "gpu_hours")),
           json_number_value(json_object_get(tot, "cpu_hours")),
           (long long)json_integer_value(json_object_get(tot, "intervals")));
    const json_t *inv = json_object_get(r.json, "inventory");
    if (inv)
        printf("inventory: %lld GPU(s), %.3f GPU-hours, %.3f idle\n",
               (long long)json_integer_value(json_object_get(inv, "gpus")),
               json_number_value(json_object_get(inv, "gpu_hours")),
               json_number_value(json_object_get(inv, "idle_gpu_hours")));
    cli_resp_free(&r);
    return 0;
}
