/*
 * cmd_datasets.c - `trainyard datasets upload|list|show|rm`: uploads are
 * multipart forms written curl-style (field=@file, field=value).
 */
#include <stdlib.h>
#include <string.h>

#include "cli/cmd.h"
#include "cli/output.h"

static void usage(FILE *f)
{
    fprintf(
        f,
        "Usage: trainyard datasets upload NAME --format "
        "idx|csv|npy|text|tokens "
        "FIELD=@FILE|FIELD=VALUE...\n"
        "       trainyard datasets list [--limit N]\n"
        "       trainyard datasets show ID|NAME\n"
        "       trainyard datasets rm ID|NAME\n"
        "\n"
        "A NAME means your newest dataset of that name (an id always\n"
        "wins); list shows the ID and CREATED that tell same-named ones\n"
        "apart, newest first.\n"
        "Fields by format: idx images=@FILE labels=@FILE; csv file=@FILE\n"
        "label_column=NAME [task=regression] [max_categories=N], or for\n"
        "text classification file=@FILE label_column=NAME\n"
        "text_column=NAME [max_length=N] [tokenizer=...] (each row's\n"
        "text tokenized, cut or padded to max_length tokens, default\n"
        "128, at most 8192; other columns ignored); npy\n"
        "x=@FILE y=@FILE; text file=@FILE [tokenizer=byte |\n"
        "tokenizer='{\"type\": \"bpe\", \"vocab_size\": N}' |\n"
        "tokenizer=@tokenizer.json]; tokens file=@FILE vocab_size=N (an\n"
        "integer NPY or llm.c .bin of token ids). A bpe tokenizer is\n"
        "learned from the text (N from 257 to 65536); a tokenizer.json\n"
        "(Hugging Face, byte-level BPE) encodes as the tokenizers\n"
        "library does. max_categories (default 50, at most 1000) is\n"
        "the most distinct values a text column may have; one past it\n"
        "is refused naming the column.\n"
        "Example: trainyard datasets upload digits --format idx \\\n"
        "           images=@train-images.gz labels=@train-labels.gz\n"
        "         trainyard datasets upload homes --format csv \\\n"
        "           file=@homes.csv label_column=price task=regression \\\n"
        "           max_categories=200\n"
        "         trainyard datasets upload reviews --format csv \\\n"
        "           file=@reviews.csv label_column=label text_column=text \\\n"
        "           max_length=64\n"
        "         trainyard datasets upload shakespeare --format text \\\n"
        "           file=@input.txt\n"
        "         trainyard datasets upload shakespeare-bpe --format text \\\n"
        "           file=@input.txt \\\n"
        "           tokenizer='{\"type\": \"bpe\", \"vocab_size\": 2048}'\n"
        "show prints a CSV dataset's typed columns: NAME, TYPE (numeric,\n"
        "boolean, categorical), CATEGORIES (the first few, and how many)\n"
        "and MISSING (empty cells); a text or tokens dataset's tokenizer,\n"
        "vocabulary, token count and sample; a text classification\n"
        "dataset's tokenizer, counts and its first row decoded.\n");
}

static void shape_text(const json_t *shape, char *out, size_t size)
{
    size_t o = 0, i;
    json_t *d;
    out[0] = '\0';
    json_array_foreach (shape, i, d) {
        o += (size_t)snprintf(out + o, o < size ? size - o : 0, "%s%lld",
                              i ? "x" : "", (long long)json_integer_value(d));
    }
}

/* 1 for a text classification CSV: examples of token ids. */
static int is_text_csv(const json_t *d)
{
    return json_object_get(d, "text_column") != NULL;
}

/* 1 for a text or tokens dataset: tokens, not examples. */
static int is_tokens(const json_t *d)
{
    return json_object_get(d, "num_tokens") != NULL && !is_text_csv(d);
}

static void print_dataset(const json_t *d)
{
    char size[32], shape[64];
    cli_fmt_bytes(json_integer_value(json_object_get(d, "bytes")), size,
                  sizeof size);
    if (is_tokens(d)) {
        const char *tok = cli_str(d, "tokenizer");
        printf("%s (%s): %lld tokens, vocabulary %lld, %s%s%s, %s\n",
               cli_str(d, "id"), cli_str(d, "name"),
               (long long)json_integer_value(json_object_get(d, "num_tokens")),
               (long long)json_integer_value(json_object_get(d, "vocab_size")),
               tok ? tok : "no", " tokenizer, ", cli_str(d, "task"), size);
        return;
    }
    if (is_text_csv(d)) {
        const char *tok = cli_str(d, "tokenizer");
        printf(
            "%s (%s): %lld examples of %lld tokens (column %s), "
            "vocabulary %lld, %s tokenizer, %s, %s\n",
            cli_str(d, "id"), cli_str(d, "name"),
            (long long)json_integer_value(json_object_get(d, "num_examples")),
            (long long)json_integer_value(json_object_get(d, "max_length")),
            cli_str(d, "text_column"),
            (long long)json_integer_value(json_object_get(d, "vocab_size")),
            tok ? tok : "no", cli_str(d, "task"), size);
        return;
    }
    shape_text(json_object_get(d, "input_shape"), shape, sizeof shape);
    printf("%s (%s): %lld examples of %s, %s, %s\n", cli_str(d, "id"),
           cli_str(d, "name"),
           (long long)json_integer_value(json_object_get(d, "num_examples")),
           shape, cli_str(d, "task"), size);
}

static int upload(cli_ctx *c)
{
    static const char *const allowed[] = {"--format", NULL};
    int rc = cli_only_opts(c, "datasets", allowed);
    if (rc)
        return rc;
    const char *format = cli_opt(c, "--format");
    if (c->npos < 2)
        return cli_usage_error("datasets", "upload takes a NAME and fields "
                                           "(images=@FILE ...)");
    if (!format || (strcmp(format, "idx") && strcmp(format, "csv") &&
                    strcmp(format, "npy") && strcmp(format, "text") &&
                    strcmp(format, "tokens")))
        return cli_usage_error("datasets", "upload needs --format idx, csv, "
                                           "npy, text or tokens");
    size_t n = 0;
    char name[512], fmt[64];
    const char *parts[CLI_MAX_ARGS + 2];
    snprintf(name, sizeof name, "name=%s", c->pos[1]);
    snprintf(fmt, sizeof fmt, "format=%s", format);
    parts[n++] = name;
    parts[n++] = fmt;
    for (int i = 2; i < c->npos; i++) {
        if (!strchr(c->pos[i], '=') || c->pos[i][0] == '=')
            return cli_usage_error("datasets",
                                   "'%s' is not FIELD=@FILE or "
                                   "FIELD=VALUE",
                                   c->pos[i]);
        parts[n++] = c->pos[i];
    }
    cli_resp r;
    int tty = cli_stderr_tty();
    rc = cli_http_upload(&c->http, "/v1/datasets", parts, n,
                         tty ? cli_progress_bytes : NULL, "upload", &r);
    cli_progress_end();
    if (rc)
        return rc;
    if ((rc = cli_http_check(&r)) != 0)
        goto out;
    if (c->json)
        cli_print_raw(r.body, r.len, stdout);
    else
        print_dataset(r.json);
out:
    cli_resp_free(&r);
    return rc;
}

static int list(cli_ctx *c)
{
    static const char *const allowed[] = {"--limit", NULL};
    int rc = cli_only_opts(c, "datasets", allowed);
    if (rc)
        return rc;
    if (c->npos != 1)
        return cli_usage_error("datasets", "list takes no arguments");
    json_t *items;
    if ((rc = cli_list(c, "/v1/datasets", &items)) != 0 || !items)
        return rc;
    static const char *const head[] = {"ID",   "NAME",     "FORMAT",
                                       "TASK", "EXAMPLES", "SHAPE",
                                       "SIZE", "CREATED",  NULL};
    cli_table t;
    cli_table_init(&t, head);
    size_t i;
    json_t *d;
    json_array_foreach (items, i, d) {
        char ex[32], shape[64], size[32], created[64];
        if (is_tokens(d))
            snprintf(ex, sizeof ex, "%lld tokens",
                     (long long)json_integer_value(
                         json_object_get(d, "num_tokens")));
        else
            snprintf(ex, sizeof ex, "%lld",
                     (long long)json_integer_value(
                         json_object_get(d, "num_examples")));
        shape_text(json_object_get(d, "input_shape"), shape, sizeof shape);
        cli_fmt_bytes(json_integer_value(json_object_get(d, "bytes")), size,
                      sizeof size);
        cli_fmt_time(cli_str(d, "created_at"), created, sizeof created);
        const char *row[] = {cli_str(d, "id"),
                             cli_str(d, "name"),
                             cli_str(d, "format"),
                             cli_str(d, "task"),
                             ex,
                             shape,
                             size,
                             created};
        cli_table_add(&t, row);
    }
    cli_table_print(&t, stdout);
    cli_table_free(&t);
    json_decref(items);
    return 0;
}

/* A dataset's fields; a CSV dataset's typed columns as a table after
 * them (name, type, the first categories and how many, empty cells). */
static void show_dataset(const json_t *doc)
{
    const json_t *cols = json_object_get(doc, "columns");
    const json_t *sample = json_object_get(doc, "sample");
    if (is_text_csv(doc) && json_is_object(sample)) {
        json_t *rest = json_copy((json_t *)doc);
        if (rest)
            json_object_del(rest, "sample");
        cli_print_object(rest ? rest : doc, stdout);
        json_decref(rest);
        char *label = json_dumps(json_object_get(sample, "label"),
                                 JSON_COMPACT | JSON_ENCODE_ANY);
        printf("\nsample (the first row, label %s):\n%s\n", label ? label : "?",
               cli_str(sample, "text"));
        free(label);
        return;
    }
    if (is_tokens(doc) && json_is_object(sample)) {
        json_t *rest = json_copy((json_t *)doc);
        if (rest)
            json_object_del(rest, "sample");
        cli_print_object(rest ? rest : doc, stdout);
        json_decref(rest);
        const json_t *text = json_object_get(sample, "text");
        if (json_is_string(text)) {
            printf("\nsample (the first %zu bytes):\n%s\n",
                   json_string_length(text), json_string_value(text));
        } else {
            char *ids = json_dumps(json_object_get(sample, "ids"),
                                   JSON_COMPACT | JSON_ENCODE_ANY);
            printf("\nsample (the first token ids):\n%s\n", ids ? ids : "");
            free(ids);
        }
        return;
    }
    if (!json_array_size(cols)) {
        cli_print_object(doc, stdout);
        return;
    }
    json_t *rest = json_copy((json_t *)doc);
    if (rest)
        json_object_del(rest, "columns");
    cli_print_object(rest ? rest : doc, stdout);
    json_decref(rest);
    printf("\ncolumns (%zu, the label column not among them):\n",
           json_array_size(cols));
    cli_print_columns(cols, 1, stdout);
}

/* show and rm: one id. */
static int one(cli_ctx *c, const char *method)
{
    int rc = cli_only_opts(c, "datasets", NULL);
    if (rc)
        return rc;
    if (c->npos != 2)
        return cli_usage_error("datasets", "%s takes one dataset ID or NAME",
                               c->pos[0]);
    char path[CLI_REF_PATH_MAX];
    if ((rc = cli_ref_path(path, "datasets", "/v1/datasets", c->pos[1], "")))
        return rc;
    cli_resp r;
    if ((rc = cli_call(c, method, path, NULL, NULL, 0, &r)) != 0)
        return rc;
    if (!c->json) {
        if (!strcmp(method, "DELETE"))
            printf("Removed %s\n", c->pos[1]);
        else
            show_dataset(r.json);
    }
    cli_resp_free(&r);
    return 0;
}

int cli_cmd_datasets(cli_ctx *c)
{
    if (c->help) {
        usage(stdout);
        return 0;
    }
    const char *sub = c->npos ? c->pos[0] : "";
    if (!strcmp(sub, "upload"))
        return upload(c);
    if (!strcmp(sub, "list") || !strcmp(sub, "ls"))
        return list(c);
    if (!strcmp(sub, "show"))
        return one(c, "GET");
    if (!strcmp(sub, "rm") || !strcmp(sub, "delete"))
        return one(c, "DELETE");
    return cli_usage_error("datasets",
                           *sub ? "unknown datasets command '%s'"
                                : "datasets needs a command%s",
                           sub);
}
