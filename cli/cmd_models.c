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
            "       trainyard models download ID|NAME --layout hf-gpt2 "
            "[-o DIR] (default ID|NAME-hf-gpt2/)\n"
            "       trainyard models predict ID|NAME INPUT.json|-\n"
            "       trainyard models evaluate ID|NAME --dataset DATASET\n"
            "       trainyard models import NAME WEIGHTS.safetensors "
            "[--metadata FILE]\n"
            "       trainyard models import NAME DIR|model.safetensors "
            "--layout hf-gpt2\n"
            "                [--config config.json] [--tokenizer "
            "tokenizer.json]\n"
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
            "writes such a file from a PyTorch module; docs/models.md).\n"
            "--layout hf-gpt2 imports a Hugging Face GPT-2 checkpoint (the\n"
            "folder save_pretrained writes: model.safetensors, config.json,\n"
            "tokenizer.json when there) as a language model; download\n"
            "--layout hf-gpt2 writes a GPT model back as such a folder.\n");
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

/* Downloads the server's path to target through a temporary file beside
 * it (fsynced, renamed). 0 with *size set; when missing is not NULL a 404
 * sets *missing and returns 0 with nothing written; else an exit code with
 * the message printed. */
static int save_to(cli_ctx *c, const char *path, const char *target, long *size,
                   int *missing)
{
    char tmp[PATH_MAX + 16];
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
    int rc = cli_http_download(&c->http, path, f,
                               cli_stderr_tty() ? cli_progress_bytes : NULL,
                               "download", &r);
    cli_progress_end();
    if (rc == 0 && missing && r.status == 404) {
        *missing = 1;
        fclose(f);
        unlink(tmp);
        cli_resp_free(&r);
        return 0;
    }
    if (rc == 0)
        rc = cli_http_check(&r);
    cli_resp_free(&r);
    ty_err err = {0};
    if (rc == 0 &&
        (fflush(f) != 0 || fs_fsync_fd(fileno(f), tmp, &err) != TY_OK)) {
        fprintf(stderr, "trainyard: cannot write %s: %s\n", tmp,
                *err.msg ? err.msg : strerror(errno));
        rc = CLI_EXIT_USAGE;
    }
    *size = ftell(f);
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
    return rc;
}

/* `download --layout hf-gpt2`: the folder save_pretrained would write
 * (model.safetensors, config.json, and tokenizer.json when the model has
 * one), which transformers' from_pretrained loads. */
static int download_hf(cli_ctx *c, const char *dir)
{
    static const char *const files[] = {"model.safetensors", "config.json",
                                        "tokenizer.json"};
    char base[CLI_REF_PATH_MAX], path[CLI_REF_PATH_MAX + 64],
        target[PATH_MAX + 32];
    long size = 0, total = 0;
    int rc = cli_ref_path(base, "models", "/v1/models", c->pos[1], "/weights");
    if (rc)
        return rc;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "trainyard: cannot create the folder %s: %s\n", dir,
                strerror(errno));
        return CLI_EXIT_USAGE;
    }
    json_t *saved = json_array();
    for (size_t i = 0; i < TY_ARRAY_LEN(files) && !rc; i++) {
        int missing = 0;
        snprintf(path, sizeof path, "%s?layout=hf-gpt2&file=%s", base,
                 files[i]);
        snprintf(target, sizeof target, "%s/%s", dir, files[i]);
        rc = save_to(c, path, target, &size, i == 2 ? &missing : NULL);
        if (!rc && !missing) {
            total += size;
            json_array_append_new(saved, json_string(files[i]));
        }
    }
    if (rc == 0 && !c->json) {
        char sz[32];
        cli_fmt_bytes(total, sz, sizeof sz);
        printf("Saved %s in the hf-gpt2 layout to %s/ (%s: %s%s)\n", c->pos[1],
               dir, sz, "model.safetensors, config.json",
               json_array_size(saved) > 2 ? ", tokenizer.json" : "");
    } else if (rc == 0) {
        json_t *o =
            json_pack("{s:s, s:s, s:O, s:I}", "model", c->pos[1], "folder", dir,
                      "files", saved, "bytes", (json_int_t)total);
        char *t = o ? json_dumps(o, JSON_COMPACT) : NULL;
        if (t)
            printf("%s\n", t);
        free(t);
        json_decref(o);
    }
    json_decref(saved);
    return rc;
}

static int download(cli_ctx *c)
{
    static const char *const allowed[] = {"--output", "--layout", NULL};
    int rc = cli_only_opts(c, "models", allowed);
    if (rc)
        return rc;
    if (c->npos != 2)
        return cli_usage_error("models", "download takes one model ID or NAME");
    char target[PATH_MAX], path[CLI_REF_PATH_MAX];
    const char *o = cli_opt(c, "--output");
    const char *layout = cli_opt(c, "--layout");
    if (layout && !strcmp(layout, "hf-gpt2")) {
        if (o && *o)
            snprintf(target, sizeof target, "%s", o);
        else
            snprintf(target, sizeof target, "%s-hf-gpt2", c->pos[1]);
        return download_hf(c, target);
    }
    if (layout && strcmp(layout, "trainyard"))
        return cli_usage_error("models", "--layout is trainyard (the "
                                         "default) or hf-gpt2");
    if ((rc =
             cli_ref_path(path, "models", "/v1/models", c->pos[1], "/weights")))
        return rc;
    if (o && *o)
        snprintf(target, sizeof target, "%s", o);
    else
        snprintf(target, sizeof target, "%s.safetensors", c->pos[1]);
    long size = 0;
    if ((rc = save_to(c, path, target, &size, NULL)) != 0)
        return rc;
    if (!c->json) {
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
    return 0;
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
