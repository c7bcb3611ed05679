/*
 * cmd_admin.c - `trainyard devices` (GPUs, MIG slices and who holds each)
 * and `trainyard tenants ...` (the admin's tenant and key management).
 */
#include <stdlib.h>
#include <string.h>

#include "cli/cmd.h"
#include "cli/output.h"

/* ---- devices ---- */

int cli_cmd_devices(cli_ctx *c)
{
    if (c->help) {
        printf("Usage: trainyard devices\n\n"
               "The GPUs the server schedules on, their MIG slices, and the "
               "job and tenant\nholding each (GET /v1/devices).\n");
        return 0;
    }
    int rc = cli_only_opts(c, "devices", NULL);
    if (rc)
        return rc;
    if (c->npos)
        return cli_usage_error("devices", "devices takes no arguments");
    cli_resp r;
    if ((rc = cli_call(c, "GET", "/v1/devices", NULL, NULL, 0, &r)) != 0 ||
        c->json) {
        if (!rc)
            cli_resp_free(&r);
        return rc;
    }
    const char *reason = cli_str(r.json, "reason");
    printf("source: %s%s%s\n", cli_str(r.json, "source"), reason ? ": " : "",
           reason ? reason : "");
    const json_t *gpus = json_object_get(r.json, "gpus");
    if (json_array_size(gpus) == 0)
        printf("no GPUs: jobs train on the CPU\n");
    size_t i;
    json_t *g;
    static const char *const head[] = {"GPU",    "SLOT",   "KIND",  "PROFILE",
                                       "SLICES", "MEMORY", "STATE", "JOB",
                                       "TENANT", NULL};
    cli_table t;
    cli_table_init(&t, head);
    json_array_foreach (gpus, i, g) {
        char mem[32];
        cli_fmt_bytes(json_integer_value(json_object_get(g, "memory_bytes")),
                      mem, sizeof mem);
        const char *model = cli_str(g, "model");
        printf("GPU %lld: %s%s%s%s, %s, MIG %s, %s\n",
               (long long)json_integer_value(json_object_get(g, "index")),
               cli_str(g, "name"), model ? " (" : "", model ? model : "",
               model ? ")" : "", mem,
               json_is_true(json_object_get(g, "mig")) ? "on" : "off",
               cli_str(g, "uuid"));
        size_t k;
        json_t *s;
        json_array_foreach (json_object_get(g, "slices"), k, s) {
            char gpu[16], slot[16], cs[16], smem[32];
            snprintf(gpu, sizeof gpu, "%zu", i);
            cli_fmt_value(json_object_get(s, "slot"), slot, sizeof slot);
            cli_fmt_value(json_object_get(s, "compute_slices"), cs, sizeof cs);
            cli_fmt_bytes(
                json_integer_value(json_object_get(s, "memory_bytes")), smem,
                sizeof smem);
            const char *row[] = {gpu,
                                 slot,
                                 cli_str(s, "kind"),
                                 cli_str(s, "profile"),
                                 cs,
                                 smem,
                                 cli_str(s, "state"),
                                 cli_str(s, "job"),
                                 cli_str(s, "tenant")};
            cli_table_add(&t, row);
        }
    }
    if (t.nrows) {
        printf("\n");
        cli_table_print(&t, stdout);
    }
    cli_table_free(&t);
    cli_resp_free(&r);
    return 0;
}

/* ---- tenants ---- */

static void tenants_usage(FILE *f)
{
    fprintf(
        f,
        "Usage: trainyard tenants list [--limit N]\n"
        "       trainyard tenants create NAME [QUOTA FLAGS]\n"
        "       trainyard tenants show ID\n"
        "       trainyard tenants update ID [--name NAME] [QUOTA FLAGS]\n"
        "       trainyard tenants keys ID\n"
        "       trainyard tenants key-create ID\n"
        "       trainyard tenants key-revoke ID KEY_ID\n"
        "\n"
        "Quota flags: --weight W, --max-gpu-slices N, --max-running-jobs N,\n"
        "--max-storage-bytes N, and the serving limits over all the tenant's\n"
        "deployments: --serving-rps R (requests a second), --serving-burst N,\n"
        "--serving-max-concurrency N, --serving-tokens-per-minute N\n"
        "(generation tokens a minute: prompt and max_tokens reserved);\n"
        "N and R may be 'none' (unlimited).\n"
        "All but show are for the admin; a new key is printed once, on\n"
        "standard output.\n");
}

/* The quota flags and the TenantQuota member each sets; real: a number,
 * else a whole number. */
static const struct {
    const char *flag, *key;
    int real;
} quota_flags[] = {
    {"--max-gpu-slices", "max_gpu_slices", 0},
    {"--max-running-jobs", "max_running_jobs", 0},
    {"--max-storage-bytes", "max_storage_bytes", 0},
    {"--serving-rps", "serving_requests_per_second", 1},
    {"--serving-burst", "serving_burst", 0},
    {"--serving-max-concurrency", "serving_max_concurrency", 0},
    {"--serving-tokens-per-minute", "serving_tokens_per_minute", 0},
};

/* The TenantCreate/TenantUpdate body from the flags; NULL after a usage
 * error (*rc set). */
static json_t *tenant_body(cli_ctx *c, const char *name, int *rc)
{
    json_t *b = json_object();
    json_t *quota = json_object();
    if (name)
        json_object_set_new(b, "name", json_string(name));
    const char *w = cli_opt(c, "--weight");
    if (w) {
        char *end;
        double v = strtod(w, &end);
        if (*end || end == w) {
            *rc = cli_usage_error("tenants",
                                  "--weight takes a number, not "
                                  "'%s'",
                                  w);
            goto fail;
        }
        json_object_set_new(b, "weight", json_real(v));
    }
    for (size_t i = 0; i < TY_ARRAY_LEN(quota_flags); i++) {
        const char *v = cli_opt(c, quota_flags[i].flag);
        if (!v)
            continue;
        const char *key = quota_flags[i].key;
        if (!strcmp(v, "none")) {
            json_object_set_new(quota, key, json_null());
            continue;
        }
        char *end;
        double d = quota_flags[i].real ? strtod(v, &end) : 0;
        long long n = quota_flags[i].real ? 0 : strtoll(v, &end, 10);
        if (*end || end == v) {
            *rc = cli_usage_error(
                "tenants", "%s takes a %s or 'none', not '%s'",
                quota_flags[i].flag,
                quota_flags[i].real ? "number" : "whole number", v);
            goto fail;
        }
        json_object_set_new(
            quota, key, quota_flags[i].real ? json_real(d) : json_integer(n));
    }
    if (json_object_size(quota))
        json_object_set(b, "quota", quota);
    json_decref(quota);
    return b;
fail:
    json_decref(quota);
    json_decref(b);
    return NULL;
}

static void print_tenant(const json_t *t)
{
    json_t *copy = json_deep_copy(t);
    json_object_del(copy, "key");
    cli_print_object(copy, stdout);
    json_decref(copy);
}

static int tenants_list(cli_ctx *c)
{
    json_t *items;
    int rc;
    if ((rc = cli_list(c, "/v1/tenants", &items)) != 0 || !items)
        return rc;
    static const char *const head[] = {
        "ID",     "NAME",    "WEIGHT",  "ADMIN",   "DATASETS",
        "MODELS", "RUNNING", "STORAGE", "CREATED", NULL};
    cli_table t;
    cli_table_init(&t, head);
    size_t i;
    json_t *x;
    json_array_foreach (items, i, x) {
        const json_t *u = json_object_get(x, "usage");
        char w[32], admin[8], ds[16], md[16], run[16], st[32], created[64];
        cli_fmt_value(json_object_get(x, "weight"), w, sizeof w);
        cli_fmt_value(json_object_get(x, "admin"), admin, sizeof admin);
        cli_fmt_value(json_object_get(u, "datasets"), ds, sizeof ds);
        cli_fmt_value(json_object_get(u, "models"), md, sizeof md);
        cli_fmt_value(json_object_get(u, "running_jobs"), run, sizeof run);
        cli_fmt_bytes(json_integer_value(json_object_get(u, "storage_bytes")),
                      st, sizeof st);
        cli_fmt_time(cli_str(x, "created_at"), created, sizeof created);
        const char *row[] = {
            cli_str(x, "id"), cli_str(x, "name"), w, admin, ds, md, run, st,
            created};
        cli_table_add(&t, row);
    }
    cli_table_print(&t, stdout);
    cli_table_free(&t);
    json_decref(items);
    return 0;
}

static int keys_list(cli_ctx *c, const char *path)
{
    json_t *items;
    int rc;
    if ((rc = cli_list(c, path, &items)) != 0 || !items)
        return rc;
    static const char *const head[] = {"KEY_ID", "ADMIN", "CREATED", "REVOKED",
                                       NULL};
    cli_table t;
    cli_table_init(&t, head);
    size_t i;
    json_t *k;
    json_array_foreach (items, i, k) {
        char admin[8], created[64], revoked[64];
        cli_fmt_value(json_object_get(k, "admin"), admin, sizeof admin);
        cli_fmt_time(cli_str(k, "created_at"), created, sizeof created);
        cli_fmt_time(cli_str(k, "revoked_at"), revoked, sizeof revoked);
        const char *row[] = {cli_str(k, "id"), admin, created, revoked};
        cli_table_add(&t, row);
    }
    cli_table_print(&t, stdout);
    cli_table_free(&t);
    json_decref(items);
    return 0;
}

int cli_cmd_tenants(cli_ctx *c)
{
    if (c->help) {
        tenants_usage(stdout);
        return 0;
    }
    const char *sub = c->npos ? c->pos[0] : "";
    static const char *const none[] = {NULL};
    static const char *const list_opts[] = {"--limit", NULL};
    static const char *const create_opts[] = {"--weight",
                                              "--max-gpu-slices",
                                              "--max-running-jobs",
                                              "--max-storage-bytes",
                                              "--serving-rps",
                                              "--serving-burst",
                                              "--serving-max-concurrency",
                                              "--serving-tokens-per-minute",
                                              NULL};
    static const char *const update_opts[] = {"--name",
                                              "--weight",
                                              "--max-gpu-slices",
                                              "--max-running-jobs",
                                              "--max-storage-bytes",
                                              "--serving-rps",
                                              "--serving-burst",
                                              "--serving-max-concurrency",
                                              "--serving-tokens-per-minute",
                                              NULL};
    struct {
        const char *name;
        int npos;
        const char *const *opts;
        const char *args;
    } const subs[] = {
        {"list", 1, list_opts, "no arguments"},
        {"create", 2, create_opts, "a NAME"},
        {"show", 2, none, "a tenant ID"},
        {"update", 2, update_opts, "a tenant ID"},
        {"keys", 2, none, "a tenant ID"},
        {"key-create", 2, none, "a tenant ID"},
        {"key-revoke", 3, none, "a tenant ID and a KEY_ID"},
    };
    size_t s = 0;
    while (s < TY_ARRAY_LEN(subs) && strcmp(sub, subs[s].name))
        s++;
    if (s == TY_ARRAY_LEN(subs))
        return cli_usage_error("tenants",
                               *sub ? "unknown tenants command '%s'"
                                    : "tenants needs a command%s",
                               sub);
    int rc = cli_only_opts(c, "tenants", subs[s].opts);
    if (rc)
        return rc;
    if (c->npos != subs[s].npos)
        return cli_usage_error("tenants", "tenants %s takes %s", sub,
                               subs[s].args);
    if (s == 0)
        return tenants_list(c);
    char id[256], path[512];
    cli_http_escape(c->pos[1], id, sizeof id);
    cli_resp r;
    if (!strcmp(sub, "create")) {
        json_t *b = tenant_body(c, c->pos[1], &rc);
        if (!b)
            return rc;
        if ((rc = cli_call_json(c, "POST", "/v1/tenants", b, &r)) != 0)
            return rc;
        if (!c->json) {
            const json_t *k = json_object_get(r.json, "key");
            print_tenant(r.json);
            printf("\nIts API key (%s), shown only now:\n\n    %s\n",
                   cli_str(k, "id"), cli_str(k, "api_key"));
        }
    } else if (!strcmp(sub, "update")) {
        json_t *b = tenant_body(c, cli_opt(c, "--name"), &rc);
        if (!b)
            return rc;
        snprintf(path, sizeof path, "/v1/tenants/%s", id);
        if ((rc = cli_call_json(c, "PATCH", path, b, &r)) != 0)
            return rc;
        if (!c->json)
            print_tenant(r.json);
    } else if (!strcmp(sub, "show")) {
        snprintf(path, sizeof path, "/v1/tenants/%s", id);
        if ((rc = cli_call(c, "GET", path, NULL, NULL, 0, &r)) != 0)
            return rc;
        if (!c->json)
            print_tenant(r.json);
    } else if (!strcmp(sub, "keys")) {
        snprintf(path, sizeof path, "/v1/tenants/%s/keys", id);
        return keys_list(c, path);
    } else if (!strcmp(sub, "key-create")) {
        snprintf(path, sizeof path, "/v1/tenants/%s/keys", id);
        if ((rc = cli_call(c, "POST", path, NULL, NULL, 0, &r)) != 0)
            return rc;
        if (!c->json)
            printf("New API key %s for %s, shown only now:\n\n    %s\n",
                   cli_str(r.json, "id"), c->pos[1],
                   cli_str(r.json, "api_key"));
    } else {
        char kid[256];
        cli_http_escape(c->pos[2], kid, sizeof kid);
        snprintf(path, sizeof path, "/v1/tenants/%s/keys/%s", id, kid);
        if ((rc = cli_call(c, "DELETE", path, NULL, NULL, 0, &r)) != 0)
            return rc;
        if (!c->json)
            printf("Revoked %s\n", c->pos[2]);
    }
    cli_resp_free(&r);
    return 0;
}
