/*
 * cmd_deployments.c - `trainyard deployments create|list|get|update|delete`:
 * serving deployments (/v1/deployments). create and update build the
 * request body from flags, one flag per member of the spec, so a typo is
 * a usage error here and a bad value is the server's 422 naming the field.
 */
#include <stdlib.h>
#include <string.h>

#include "cli/cmd.h"
#include "cli/output.h"

static void usage(FILE *f)
{
    fprintf(
        f,
        "Usage: trainyard deployments create NAME --model MODEL [FLAGS]\n"
        "       trainyard deployments list\n"
        "       trainyard deployments get ID|NAME\n"
        "       trainyard deployments update ID|NAME [FLAGS but --gpu]\n"
        "       trainyard deployments delete ID|NAME\n"
        "\n"
        "A deployment serves MODEL (an id or a name) from replicas that hold\n"
        "GPU slices like jobs; predictions for the model then go to them.\n"
        "Flags (unset: the server's default, or unchanged on update):\n"
        "  --model MODEL              the model to serve (update: roll to it)\n"
        "  --min N, --max N           replicas (0 <= min <= max <= 64)\n"
        "  --gpu none|any|whole|PROFILE  each replica's slice (create only)\n"
        "  --max-batch-size N         examples batched together (1..4096)\n"
        "  --max-queue-delay-us N     how long a request waits for a batch\n"
        "  --rps R|none               requests per second (a token bucket)\n"
        "  --burst N                  the bucket's size (with --rps)\n"
        "  --max-concurrency N|none   requests in flight at once\n"
        "  --tokens-per-minute N|none generation tokens a minute (prompt\n"
        "                             and max_tokens reserved, unused back)\n"
        "  --priority N               as a job's: higher is placed first\n"
        "Requests over --rps, --max-concurrency or --tokens-per-minute are\n"
        "answered 429.\n"
        "delete drains the replicas and frees their slices.\n");
}

/* Sets key in obj from flag as a whole number; "none" as null when
 * nullable. Returns 0 or the usage error's exit code. */
static int int_flag(cli_ctx *c, const char *flag, json_t *obj, const char *key,
                    int nullable)
{
    const char *v = cli_opt(c, flag);
    if (!v)
        return 0;
    if (nullable && !strcmp(v, "none"))
        return json_object_set_new(obj, key, json_null()) ? CLI_EXIT_USAGE : 0;
    char *end;
    long long n = strtoll(v, &end, 10);
    if (!*v || *end)
        return cli_usage_error("deployments",
                               "%s takes a whole number%s, not "
                               "'%s'",
                               flag, nullable ? " or 'none'" : "", v);
    return json_object_set_new(obj, key, json_integer(n)) ? CLI_EXIT_USAGE : 0;
}

/* The same for a number (--rps). */
static int num_flag(cli_ctx *c, const char *flag, json_t *obj, const char *key)
{
    const char *v = cli_opt(c, flag);
    if (!v)
        return 0;
    if (!strcmp(v, "none"))
        return json_object_set_new(obj, key, json_null()) ? CLI_EXIT_USAGE : 0;
    char *end;
    double d = strtod(v, &end);
    if (!*v || *end)
        return cli_usage_error(
            "deployments", "%s takes a number or 'none', not '%s'", flag, v);
    return json_object_set_new(obj, key, json_real(d)) ? CLI_EXIT_USAGE : 0;
}

/* Adds sub to body as key when it has members; takes sub. */
static int put_section(json_t *body, const char *key, json_t *sub)
{
    if (!sub)
        return -1;
    int rc = json_object_size(sub) ? json_object_set(body, key, sub) : 0;
    json_decref(sub);
    return rc;
}

/* The DeploymentCreate (name given) or DeploymentPatch body from the
 * flags; NULL with *rc set on a usage error (or out of memory). */
static json_t *body_from_flags(cli_ctx *c, const char *name, int *rc)
{
    json_t *b = json_object();
    json_t *rep = json_object(), *bat = json_object(), *lim = json_object();
    const char *model = cli_opt(c, "--model");
    const char *gpu = cli_opt(c, "--gpu");
    *rc = 0;
    if (!b || !rep || !bat || !lim ||
        (name && json_object_set_new(b, "name", json_string(name))) ||
        (model && json_object_set_new(b, "model", json_string(model))) ||
        (gpu &&
         json_object_set_new(b, "resources", json_pack("{s:s}", "gpu", gpu)))) {
        fprintf(stderr, "trainyard: out of memory\n");
        *rc = CLI_EXIT_USAGE;
        goto fail;
    }
    if ((*rc = int_flag(c, "--min", rep, "min", 0)) ||
        (*rc = int_flag(c, "--max", rep, "max", 0)) ||
        (*rc = int_flag(c, "--max-batch-size", bat, "max_batch_size", 0)) ||
        (*rc = int_flag(c, "--max-queue-delay-us", bat, "max_queue_delay_us",
                        0)) ||
        (*rc = num_flag(c, "--rps", lim, "requests_per_second")) ||
        (*rc = int_flag(c, "--burst", lim, "burst", 0)) ||
        (*rc = int_flag(c, "--max-concurrency", lim, "max_concurrency", 1)) ||
        (*rc =
             int_flag(c, "--tokens-per-minute", lim, "tokens_per_minute", 1)) ||
        (*rc = int_flag(c, "--priority", b, "priority", 0)))
        goto fail;
    int bad = put_section(b, "replicas", rep) |
              put_section(b, "batching", bat) | put_section(b, "limits", lim);
    rep = bat = lim = NULL;
    if (bad) {
        fprintf(stderr, "trainyard: out of memory\n");
        *rc = CLI_EXIT_USAGE;
        goto fail;
    }
    return b;
fail:
    json_decref(rep);
    json_decref(bat);
    json_decref(lim);
    json_decref(b);
    return NULL;
}

/* "/v1/deployments/<escaped ref>" into path. */
static void ref_path(const char *ref, char *path, size_t n)
{
    char esc[256];
    cli_http_escape(ref, esc, sizeof esc);
    snprintf(path, n, "/v1/deployments/%s", esc);
}

/* A deployment for a person: its members as key/value lines (the nested
 * ones compact), then a table of its replicas. */
static void print_deployment(const json_t *d)
{
    json_t *copy = json_deep_copy(d);
    json_object_del(copy, "instances");
    cli_print_object(copy, stdout);
    json_decref(copy);
    const char *why = json_string_value(
        json_object_get(json_object_get(d, "replicas"), "waiting_reason"));
    if (why)
        printf("\nA replica waits: %s\n", why);
    const json_t *inst = json_object_get(d, "instances");
    if (json_array_size(inst) == 0)
        return;
    static const char *const head[] = {
        "REPLICA", "STATE", "GEN",       "DEVICE",  "GPU",
        "PROFILE", "SLOT",  "IN FLIGHT", "STARTED", NULL};
    cli_table t;
    cli_table_init(&t, head);
    size_t i;
    json_t *x;
    json_array_foreach (inst, i, x) {
        char gen[32], gpu[32], slot[32], fl[32], started[64];
        cli_fmt_value(json_object_get(x, "generation"), gen, sizeof gen);
        cli_fmt_value(json_object_get(x, "gpu"), gpu, sizeof gpu);
        cli_fmt_value(json_object_get(x, "slot"), slot, sizeof slot);
        cli_fmt_value(json_object_get(x, "in_flight"), fl, sizeof fl);
        cli_fmt_time(cli_str(x, "started_at"), started, sizeof started);
        const char *row[] = {cli_str(x, "id"),
                             cli_str(x, "state"),
                             gen,
                             cli_str(x, "device"),
                             gpu,
                             cli_str(x, "profile"),
                             slot,
                             fl,
                             started};
        cli_table_add(&t, row);
    }
    printf("\n");
    cli_table_print(&t, stdout);
    cli_table_free(&t);
}

static const char *const spec_flags[] = {"--model",
                                         "--min",
                                         "--max",
                                         "--gpu",
                                         "--max-batch-size",
                                         "--max-queue-delay-us",
                                         "--rps",
                                         "--burst",
                                         "--max-concurrency",
                                         "--tokens-per-minute",
                                         "--priority",
                                         NULL};

static int create(cli_ctx *c)
{
    int rc = cli_only_opts(c, "deployments", spec_flags);
    if (rc)
        return rc;
    if (c->npos != 2)
        return cli_usage_error("deployments", "create takes one NAME");
    const char *model = cli_opt(c, "--model");
    if (!model || !*model)
        return cli_usage_error("deployments",
                               "create needs --model MODEL (an id or name)");
    json_t *body = body_from_flags(c, c->pos[1], &rc);
    if (!body)
        return rc;
    cli_resp r;
    if ((rc = cli_call_json(c, "POST", "/v1/deployments", body, &r)) != 0)
        return rc;
    if (!c->json)
        printf("Created deployment %s (%s) of model %s: %s\n",
               cli_str(r.json, "name"), cli_str(r.json, "id"),
               cli_str(r.json, "model"), cli_str(r.json, "status"));
    cli_resp_free(&r);
    return 0;
}

static int update(cli_ctx *c)
{
    static const char *const allowed[] = {"--model",
                                          "--min",
                                          "--max",
                                          "--max-batch-size",
                                          "--max-queue-delay-us",
                                          "--rps",
                                          "--burst",
                                          "--max-concurrency",
                                          "--tokens-per-minute",
                                          "--priority",
                                          NULL};
    int rc = cli_only_opts(c, "deployments", allowed);
    if (rc)
        return rc;
    if (c->npos != 2)
        return cli_usage_error("deployments",
                               "update takes one deployment ID or NAME");
    json_t *body = body_from_flags(c, NULL, &rc);
    if (!body)
        return rc;
    if (json_object_size(body) == 0) {
        json_decref(body);
        return cli_usage_error("deployments", "update needs a flag saying "
                                              "what to change");
    }
    char path[320];
    ref_path(c->pos[1], path, sizeof path);
    cli_resp r;
    if ((rc = cli_call_json(c, "PATCH", path, body, &r)) != 0)
        return rc;
    if (!c->json)
        print_deployment(r.json);
    cli_resp_free(&r);
    return 0;
}

static int list(cli_ctx *c)
{
    int rc = cli_only_opts(c, "deployments", NULL);
    if (rc)
        return rc;
    if (c->npos != 1)
        return cli_usage_error("deployments", "list takes no arguments");
    cli_resp r;
    if ((rc = cli_call(c, "GET", "/v1/deployments", NULL, NULL, 0, &r)) != 0)
        return rc;
    if (c->json) {
        cli_resp_free(&r);
        return 0;
    }
    static const char *const head[] = {
        "ID",  "NAME",     "MODEL",  "STATUS",  "READY", "REPLICAS",
        "GPU", "REQUESTS", "P99 MS", "CREATED", NULL};
    cli_table t;
    cli_table_init(&t, head);
    size_t i;
    json_t *d;
    json_array_foreach (json_object_get(r.json, "items"), i, d) {
        const json_t *rep = json_object_get(d, "replicas");
        const json_t *tr = json_object_get(d, "traffic");
        char ready[48], range[48], gpu[64], reqs[32], p99[32], created[64];
        snprintf(
            ready, sizeof ready, "%lld/%lld",
            (long long)json_integer_value(json_object_get(rep, "ready")),
            (long long)json_integer_value(json_object_get(rep, "desired")));
        snprintf(range, sizeof range, "%lld-%lld",
                 (long long)json_integer_value(json_object_get(rep, "min")),
                 (long long)json_integer_value(json_object_get(rep, "max")));
        cli_fmt_value(json_object_get(json_object_get(d, "resources"), "gpu"),
                      gpu, sizeof gpu);
        cli_fmt_value(json_object_get(tr, "requests"), reqs, sizeof reqs);
        cli_fmt_value(json_object_get(json_object_get(tr, "latency_ms"), "p99"),
                      p99, sizeof p99);
        cli_fmt_time(cli_str(d, "created_at"), created, sizeof created);
        const char *row[] = {cli_str(d, "id"),
                             cli_str(d, "name"),
                             cli_str(d, "model"),
                             cli_str(d, "status"),
                             ready,
                             range,
                             gpu,
                             reqs,
                             p99,
                             created};
        cli_table_add(&t, row);
    }
    cli_table_print(&t, stdout);
    cli_table_free(&t);
    /* Why a deployment's replicas have not all started, as a queued job's
     * wait is told. */
    json_array_foreach (json_object_get(r.json, "items"), i, d) {
        const char *why = json_string_value(
            json_object_get(json_object_get(d, "replicas"), "waiting_reason"));
        if (why)
            printf("%s: a replica waits: %s\n", cli_str(d, "name"), why);
    }
    cli_resp_free(&r);
    return 0;
}

/* `deployments <verb> ID|NAME`: method on the deployment into *r. */
static int call_one(cli_ctx *c, const char *verb, const char *method,
                    cli_resp *r)
{
    int rc = cli_only_opts(c, "deployments", NULL);
    if (rc)
        return rc;
    if (c->npos != 2)
        return cli_usage_error("deployments",
                               "%s takes one deployment ID or NAME", verb);
    char path[320];
    ref_path(c->pos[1], path, sizeof path);
    return cli_call(c, method, path, NULL, NULL, 0, r);
}

static int get(cli_ctx *c)
{
    cli_resp r;
    int rc = call_one(c, "get", "GET", &r);
    if (rc)
        return rc;
    if (!c->json)
        print_deployment(r.json);
    cli_resp_free(&r);
    return 0;
}

static int delete (cli_ctx *c)
{
    cli_resp r;
    int rc = call_one(c, "delete", "DELETE", &r);
    if (rc)
        return rc;
    if (!c->json)
        printf("Deleting deployment %s (%s): its replicas drain and free "
               "their slices\n",
               cli_str(r.json, "name"), cli_str(r.json, "id"));
    cli_resp_free(&r);
    return 0;
}

int cli_cmd_deployments(cli_ctx *c)
{
    if (c->help) {
        usage(stdout);
        return 0;
    }
    const char *sub = c->npos ? c->pos[0] : "";
    if (!strcmp(sub, "create"))
        return create(c);
    if (!strcmp(sub, "list") || !strcmp(sub, "ls"))
        return list(c);
    if (!strcmp(sub, "get") || !strcmp(sub, "show"))
        return get(c);
    if (!strcmp(sub, "update"))
        return update(c);
    if (!strcmp(sub, "delete") || !strcmp(sub, "rm"))
        return delete (c);
    return cli_usage_error("deployments",
                           *sub ? "unknown deployments command '%s'"
                                : "deployments needs a command%s",
                           sub);
}
