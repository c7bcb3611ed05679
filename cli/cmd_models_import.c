/*
 * cmd_models_import.c - `trainyard models import NAME WEIGHTS [--metadata
 * FILE]`: a model made elsewhere (a PyTorch state dict, a file downloaded
 * from another server) uploaded as POST /v1/models' multipart form. The
 * server checks everything (the spec, every tensor's name, shape and
 * dtype); the client checks only that the files can be read, so that a typo
 * is a usage error before anything is sent.
 *
 * `--layout hf-gpt2` uploads a Hugging Face GPT-2 checkpoint: WEIGHTS is
 * its folder (what save_pretrained writes: model.safetensors, config.json,
 * tokenizer.json when there) or its model.safetensors, whose config.json
 * and tokenizer.json are looked for beside it unless --config and
 * --tokenizer name them.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cmd.h"
#include "cli/output.h"

/* 0 when path names a readable regular file, else CLI_EXIT_USAGE with a
 * message saying which of the command's files it is. */
static int check_file(const char *what, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "trainyard: cannot read the %s file %s: %s\n", what,
                path, strerror(errno));
        return CLI_EXIT_USAGE;
    }
    fclose(f);
    return 0;
}

/* "Imported model mdl_... (name): classification of 10 classes, input
 * 1x28x28, 101770 parameters, 397.6 KiB" from the created model's document. */
static void print_imported(const json_t *m)
{
    char shape[64] = "", size[32], params[32];
    size_t o = 0, i;
    json_t *d;
    json_array_foreach (json_object_get(m, "input_shape"), i, d) {
        int w =
            snprintf(shape + o, o < sizeof shape ? sizeof shape - o : 0,
                     "%s%lld", i ? "x" : "", (long long)json_integer_value(d));
        o += w > 0 ? (size_t)w : 0;
    }
    cli_fmt_bytes(json_integer_value(json_object_get(m, "bytes")), size,
                  sizeof size);
    cli_fmt_value(json_object_get(m, "param_count"), params, sizeof params);
    const char *task = cli_str(m, "task");
    long long outs = json_integer_value(json_object_get(m, "num_outputs"));
    printf("Imported model %s (%s): %s of %lld %s, input %s, %s parameters, "
           "%s\n",
           cli_str(m, "id"), cli_str(m, "name"), task ? task : "?", outs,
           task && !strcmp(task, "classification") ? "classes" : "outputs",
           shape, params, size);
}

/* The hf-gpt2 files: dir/model.safetensors when WEIGHTS is a folder, and
 * config.json and tokenizer.json (this one only when present) beside the
 * weights unless given. 0 or CLI_EXIT_USAGE with a message. */
static int hf_files(const char *arg, char *weights, char *config, char *tok,
                    size_t n, cli_ctx *c)
{
    struct stat st;
    char dir[PATH_MAX];
    if (stat(arg, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(dir, sizeof dir, "%s", arg);
        snprintf(weights, n, "%s/model.safetensors", arg);
    } else {
        const char *slash = strrchr(arg, '/');
        snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - arg) : 1,
                 slash ? arg : ".");
        snprintf(weights, n, "%s", arg);
    }
    const char *o = cli_opt(c, "--config");
    if (o && *o)
        snprintf(config, n, "%s", o);
    else
        snprintf(config, n, "%s/config.json", dir);
    o = cli_opt(c, "--tokenizer");
    tok[0] = '\0';
    if (o && *o)
        snprintf(tok, n, "%s", o);
    else if (snprintf(tok, n, "%s/tokenizer.json", dir) > 0 &&
             access(tok, F_OK) != 0)
        tok[0] = '\0';
    int rc = check_file("weights", weights);
    if (!rc)
        rc = check_file("config", config);
    if (!rc && tok[0])
        rc = check_file("tokenizer", tok);
    return rc;
}

int cli_models_import(cli_ctx *c)
{
    static const char *const allowed[] = {"--metadata", "--layout", "--config",
                                          "--tokenizer", NULL};
    int rc = cli_only_opts(c, "models", allowed);
    if (rc)
        return rc;
    if (c->npos != 3)
        return cli_usage_error("models", "import takes a NAME and a "
                                         "WEIGHTS.safetensors file (or, with "
                                         "--layout hf-gpt2, a folder)");
    const char *meta = cli_opt(c, "--metadata");
    const char *layout = cli_opt(c, "--layout");
    int hf = layout && !strcmp(layout, "hf-gpt2");
    if (meta && !*meta)
        return cli_usage_error("models", "--metadata needs a JSON file");
    if (layout && !hf && strcmp(layout, "trainyard"))
        return cli_usage_error("models", "--layout is trainyard (the "
                                         "default) or hf-gpt2");
    if (!hf && (cli_opt(c, "--config") || cli_opt(c, "--tokenizer")))
        return cli_usage_error("models", "--config and --tokenizer go with "
                                         "--layout hf-gpt2");
    if (hf && meta)
        return cli_usage_error("models", "--layout hf-gpt2 takes no "
                                         "--metadata: config.json gives the "
                                         "spec");
    if (!c->pos[1][0])
        return cli_usage_error("models", "import needs a non-empty NAME");
    char wpath[PATH_MAX], cpath[PATH_MAX], tpath[PATH_MAX];
    snprintf(wpath, sizeof wpath, "%s", c->pos[2]);
    if (hf)
        rc = hf_files(c->pos[2], wpath, cpath, tpath, PATH_MAX, c);
    else if ((rc = check_file("weights", wpath)) == 0 && meta)
        rc = check_file("metadata", meta);
    if (rc)
        return rc;
    /* A NAME holding '=' or starting with '@' is still text: the parts are
     * "name=VALUE", split at the first '=', and only "=@" means a file. */
    char name[1024], weights[PATH_MAX + 16], metadata[PATH_MAX + 16],
        config[PATH_MAX + 16], tok[PATH_MAX + 16];
    if (c->pos[1][0] == '@')
        return cli_usage_error("models", "a model NAME cannot start with "
                                         "'@'");
    snprintf(name, sizeof name, "name=%s", c->pos[1]);
    snprintf(weights, sizeof weights, "weights=@%s", wpath);
    const char *parts[5] = {name, weights, NULL};
    size_t n = 2;
    if (meta) {
        snprintf(metadata, sizeof metadata, "metadata=@%s", meta);
        parts[n++] = metadata;
    }
    if (hf) {
        snprintf(config, sizeof config, "config=@%s", cpath);
        parts[n++] = "layout=hf-gpt2";
        parts[n++] = config;
        if (tpath[0]) {
            snprintf(tok, sizeof tok, "tokenizer=@%s", tpath);
            parts[n++] = tok;
        }
    }
    cli_resp r;
    rc = cli_http_upload(&c->http, "/v1/models", parts, n,
                         cli_stderr_tty() ? cli_progress_bytes : NULL, "import",
                         &r);
    cli_progress_end();
    if (rc)
        return rc;
    if ((rc = cli_http_check(&r)) == 0) {
        if (c->json)
            cli_print_raw(r.body, r.len, stdout);
        else
            print_imported(r.json);
    }
    cli_resp_free(&r);
    return rc;
}
