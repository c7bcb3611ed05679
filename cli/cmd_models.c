/*
 * cmd_models.c - `trainyard models list|show|download|predict|evaluate`. A
 * download goes to a temporary file beside the target, fsynced and renamed,
 * so the target is either absent, the old file, or the whole new one.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cmd.h"
#include "cli/output.h"
#include "common/fsutil.h"

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: trainyard models list [--limit N]\n"
            "       trainyard models show ID|NAME\n"
            "       trainyard models download ID|NAME [-o FILE] (safetensors; "
            "default ID|NAME.safetensors)\n"
            "       trainyard models predict ID|NAME INPUT.json|-\n"
            "       trainyard models evaluate ID|NAME --dataset DATASET\n"
            "       trainyard models import NAME WEIGHTS.safetensors "
            "[--metadata FILE]\n"
            "\n"
            "A NAME means your newest model of that name (an id always wins),\n"
            "DATASET a dataset's id or name alike; list shows the ID and\n"
            "CREATED that tell same-named models apart, newest first.\n"
            "INPUT is the predict request body: {\"inputs\": [[...], ...]}.\n"
            "predict prints one row per input: its index, the prediction, and\n"
            "for classification the predicted class's probability. evaluate\n"
            "prints the model's loss and accuracy on the dataset (accuracy -\n"
            "for regression, which also gets mse, rmse, mae and r2 in the\n"
            "target's units; loss is the training objective).\n"
            "show lists a tabular model's raw input columns (name, type,\n"
            "categories): predict takes rows of those raw cells.\n"
            "list shows VAL LOSS and VAL METRICS, the validation values:\n"
            "acc for classification, rmse and r2 (the target's units) for\n"
            "regression; - where the model has none.\n"
            "import uploads a model made elsewhere: FILE is the metadata JSON "
            "(spec, task, input_shape, classes or\n"
            "num_outputs, preprocess), not needed when the weights file\n"
            "carries trainyard's metadata (tools/trainyard_torch.py convert\n"
            "writes such a file from a PyTorch module; docs/models.md).\n");
}

static int list(cli_ctx *c)
{
    static const char *const allowed[] = {"--limit", NULL};
    int rc = cli_only_opts(c, "models", allowed);
    if (rc)
        return rc;
    if (c->npos != 1)
        return cli_usage_error("models", "list takes no arguments");
    json_t *items;
    if ((rc = cli_list(c, "/v1/models", &items)) != 0 || !items)
        return rc;
    /* Validation values only, as their headings say: a model trained
     * without a validation set shows "-" (`models show` has its training
     * values). VAL METRICS is what tells a model of its task good from
     * bad: the accuracy of a classifier, the RMSE and R^2 of a regression
     * (in the target's units), so a list mixing both reads in one column. */
    static const char *const head[] = {
        "ID",          "NAME", "TASK", "PARAMS",  "VAL LOSS",
        "VAL METRICS", "SIZE", "JOB",  "CREATED", NULL};
    cli_table t;
    cli_table_init(&t, head);
    size_t i;
    json_t *m;
    json_array_foreach (items, i, m) {
        const json_t *met = json_object_get(m, "metrics");
        const json_t *loss = json_object_get(met, "val_loss");
        char params[32], a[96], l[32], size[32], created[64];
        cli_fmt_value(json_object_get(m, "param_count"), params, sizeof params);
        cli_fmt_metrics(met, "val_", a, sizeof a);
        cli_fmt_value(loss, l, sizeof l);
        cli_fmt_bytes(json_integer_value(json_object_get(m, "bytes")), size,
                      sizeof size);
        cli_fmt_time(cli_str(m, "created_at"), created, sizeof created);
        const char *row[] = {cli_str(m, "id"),
                             cli_str(m, "name"),
                             cli_str(m, "task"),
                             params,
                             l,
                             a,
                             size,
                             cli_str(m, "job"),
                             created};
        cli_table_add(&t, row);
    }
    cli_table_print(&t, stdout);
    cli_table_free(&t);
    json_decref(items);
    return 0;
}

/* A model's fields; a tabular model's raw columns as a table after them,
 * since its predictions take rows of those cells (not the encoded
 * features of input_shape). */
static void print_model(const json_t *doc)
{
    const json_t *cols = json_object_get(doc, "columns");
    if (!json_array_size(cols)) {
        cli_print_object(doc, stdout);
        return;
    }
    json_t *rest = json_copy((json_t *)doc);
    if (rest)
        json_object_del(rest, "columns");
    cli_print_object(rest ? rest : doc, stdout);
    json_decref(rest);
    printf("\ncolumns: predict takes raw rows of these %zu cells, in this "
           "order\n(or objects keyed by name; an empty cell is missing):\n",
           json_array_size(cols));
    cli_print_columns(cols, 0, stdout);
}

static int show(cli_ctx *c)
{
    int rc = cli_only_opts(c, "models", NULL);
    if (rc)
        return rc;
    if (c->npos != 2)
        return cli_usage_error("models", "show takes one model ID or NAME");
    char path[CLI_REF_PATH_MAX];
    if ((rc = cli_ref_path(path, "models", "/v1/models", c->pos[1], "")))
        return rc;
    cli_resp r;
    if ((rc = cli_call(c, "GET", path, NULL, NULL, 0, &r)) != 0)
        return rc;
    if (!c->json)
        print_model(r.json);
    cli_resp_free(&r);
    return 0;
}

static int download(cli_ctx *c)
{
    static const char *const allowed[] = {"--output", NULL};
    int rc = cli_only_opts(c, "models", allowed);
    if (rc)
        return rc;
    if (c->npos != 2)
        return cli_usage_error("models", "download takes one model ID or NAME");
    char target[PATH_MAX], tmp[PATH_MAX + 16], path[CLI_REF_PATH_MAX];
    if ((rc =
             cli_ref_path(path, "models", "/v1/models", c->pos[1], "/weights")))
        return rc;
    const char *o = cli_opt(c, "--output");
    if (o && *o)
        snprintf(target, sizeof target, "%s", o);
    else
        snprintf(target, sizeof target, "%s.safetensors", c->pos[1]);
    snprintf(tmp, sizeof tmp, "%s.XXXXXX", target);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        fprintf(stderr, "trainyard: cannot create a file beside %s: %s\n",
                target, strerror(errno));
        return CLI_EXIT_USAGE;
    }
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        close(fd);
        unlink(tmp);
        return CLI_EXIT_USAGE;
    }
    cli_resp r;
    rc = cli_http_download(&c->http, path, f,
                           cli_stderr_tty() ? cli_progress_bytes : NULL,
                           "download", &r);
    cli_progress_end();
    if (rc == 0)
        rc = cli_http_check(&r);
    ty_err err = {0};
    if (rc == 0 &&
        (fflush(f) != 0 || fs_fsync_fd(fileno(f), tmp, &err) != TY_OK)) {
        fprintf(stderr, "trainyard: cannot write %s: %s\n", tmp,
                *err.msg ? err.msg : strerror(errno));
        rc = CLI_EXIT_USAGE;
    }
    long size = ftell(f);
    fclose(f);
    /* mkstemp makes 0600; a model file is not a secret. */
    if (rc == 0 && chmod(tmp, 0644) != 0)
        rc = CLI_EXIT_USAGE;
    if (rc == 0 && fs_rename_durable(tmp, target, &err) != TY_OK) {
        fprintf(stderr, "trainyard: %s\n", err.msg);
        rc = CLI_EXIT_USAGE;
    }
    if (rc != 0)
        unlink(tmp);
    else if (!c->json) {
        char sz[32];
        cli_fmt_bytes(size, sz, sizeof sz);
        printf("Saved %s to %s (%s)\n", c->pos[1], target, sz);
    } else {
        json_t *o2 = json_pack("{s:s, s:s, s:I}", "model", c->pos[1], "file",
                               target, "bytes", (json_int_t)size);
        char *t = o2 ? json_dumps(o2, JSON_COMPACT) : NULL;
        if (t)
            printf("%s\n", t);
        free(t);
        json_decref(o2);
    }
    cli_resp_free(&r);
    return rc;
}

/* The predict reply as a table: the input's index, the prediction, and the
 * predicted class's probability when the outputs are class probabilities
 * (more than one output per input and a label, not an array of regression
 * targets, as the prediction). Returns 0, or CLI_EXIT_USAGE with a message
 * when out of memory (nothing printed then). */
/* A language model's reply: a row per prompt and next token, best first,
 * the token's text quoted as JSON (so spaces and newlines show). */
static int print_next_tokens(const json_t *preds)
{
    static const char *const head[] = {"INPUT", "RANK",        "TOKEN",
                                       "ID",    "PROBABILITY", NULL};
    cli_table t;
    cli_table_init(&t, head);
    size_t i, k;
    json_t *p, *n;
    json_array_foreach (preds, i, p) {
        json_array_foreach (json_object_get(p, "next_tokens"), k, n) {
            char idx[32], rank[32], id[32], pr[32], text[64] = "-";
            snprintf(idx, sizeof idx, "%zu", i);
            snprintf(rank, sizeof rank, "%zu", k + 1);
            snprintf(id, sizeof id, "%lld",
                     (long long)json_integer_value(json_object_get(n, "id")));
            snprintf(pr, sizeof pr, "%.4f",
                     json_number_value(json_object_get(n, "probability")));
            const json_t *tx = json_object_get(n, "text");
            char *q = json_is_string(tx)
                          ? json_dumps(tx, JSON_ENCODE_ANY | JSON_COMPACT)
                          : NULL;
            if (q)
                snprintf(text, sizeof text, "%s", q);
            free(q);
            const char *row[] = {idx, rank, text, id, pr};
            if (cli_table_add(&t, row) != 0) {
                cli_table_free(&t);
                fprintf(stderr, "trainyard: out of memory for the "
                                "predictions' table (--json prints them as "
                                "they come)\n");
                return CLI_EXIT_USAGE;
            }
        }
    }
    cli_table_print(&t, stdout);
    cli_table_free(&t);
    return 0;
}

static int print_predictions(const json_t *reply)
{
    const json_t *preds0 = json_object_get(reply, "predictions");
    if (json_object_get(json_array_get(preds0, 0), "next_tokens"))
        return print_next_tokens(preds0);
    const json_t *outs = json_object_get(reply, "outputs");
    const json_t *preds = json_object_get(reply, "predictions");
    int probs = json_array_size(json_array_get(outs, 0)) > 1 &&
                !json_is_array(json_array_get(preds, 0));
    static const char *const head_cls[] = {"INPUT", "PREDICTION", "PROBABILITY",
                                           NULL};
    static const char *const head_reg[] = {"INPUT", "PREDICTION", NULL};
    cli_table t;
    cli_table_init(&t, probs ? head_cls : head_reg);
    size_t i;
    json_t *p;
    json_array_foreach (preds, i, p) {
        char idx[32], v[256], best_s[32];
        snprintf(idx, sizeof idx, "%zu", i);
        cli_fmt_value(p, v, sizeof v);
        double best = -1;
        size_t k;
        json_t *o;
        json_array_foreach (json_array_get(outs, i), k, o) {
            if (json_number_value(o) > best)
                best = json_number_value(o);
        }
        snprintf(best_s, sizeof best_s, "%.4f", best);
        const char *row[] = {idx, v, best_s};
        if (cli_table_add(&t, row) != 0) {
            cli_table_free(&t);
            fprintf(stderr, "trainyard: out of memory for the predictions' "
                            "table (--json prints them as they come)\n");
            return CLI_EXIT_USAGE;
        }
    }
    cli_table_print(&t, stdout);
    cli_table_free(&t);
    return 0;
}

static int predict(cli_ctx *c)
{
    int rc = cli_only_opts(c, "models", NULL);
    if (rc)
        return rc;
    if (c->npos != 3)
        return cli_usage_error("models",
                               "predict takes a model ID or NAME and an "
                               "INPUT file (or -)");
    char *body, path[CLI_REF_PATH_MAX];
    size_t len;
    if ((rc = cli_ref_path(path, "models", "/v1/models", c->pos[1],
                           "/predict")) ||
        (rc = cli_read_input(c->pos[2], &body, &len)) != 0)
        return rc;
    cli_resp r;
    rc = cli_call(c, "POST", path, "application/json", body, len, &r);
    free(body);
    if (rc)
        return rc;
    if (!c->json)
        rc = print_predictions(r.json);
    cli_resp_free(&r);
    return rc;
}

static int evaluate(cli_ctx *c)
{
    static const char *const allowed[] = {"--dataset", NULL};
    int rc = cli_only_opts(c, "models", allowed);
    if (rc)
        return rc;
    if (c->npos != 2)
        return cli_usage_error("models", "evaluate takes one model ID or NAME");
    const char *ds = cli_opt(c, "--dataset");
    if (!ds || !*ds)
        return cli_usage_error("models", "evaluate needs --dataset "
                                         "DATASET_ID|NAME");
    char path[CLI_REF_PATH_MAX];
    if ((rc = cli_ref_path(path, "models", "/v1/models", c->pos[1],
                           "/evaluate")))
        return rc;
    json_t *req = json_pack("{s:s}", "dataset", ds);
    char *body = req ? json_dumps(req, JSON_COMPACT) : NULL;
    json_decref(req);
    if (!body) {
        fprintf(stderr, "trainyard: out of memory\n");
        return CLI_EXIT_USAGE;
    }
    cli_resp r;
    rc = cli_call(c, "POST", path, "application/json", body, strlen(body), &r);
    free(body);
    if (rc)
        return rc;
    if (!c->json)
        cli_print_object(r.json, stdout);
    cli_resp_free(&r);
    return 0;
}

int cli_cmd_models(cli_ctx *c)
{
    if (c->help) {
        usage(stdout);
        return 0;
    }
    const char *sub = c->npos ? c->pos[0] : "";
    if (!strcmp(sub, "list") || !strcmp(sub, "ls"))
        return list(c);
    if (!strcmp(sub, "show"))
        return show(c);
    if (!strcmp(sub, "download"))
        return download(c);
    if (!strcmp(sub, "predict"))
        return predict(c);
    if (!strcmp(sub, "evaluate"))
        return evaluate(c);
    if (!strcmp(sub, "import"))
        return cli_models_import(c);
    return cli_usage_error(
        "models",
        *sub ? "unknown models command '%s'" : "models needs a command%s", sub);
}
