/*
 * cmd_models_import.c - `trainyard models import NAME WEIGHTS [--metadata
 * FILE]`: a model made elsewhere (a PyTorch state dict, a file downloaded
 * from another server) uploaded as POST /v1/models' multipart form. The
 * server checks everything (the spec, every tensor's name, shape and
 * dtype); the client checks only that the files can be read, so that a typo
 * is a usage error before anything is sent.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

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

int cli_models_import(cli_ctx *c)
{
    static const char *const allowed[] = {"--metadata", NULL};
    int rc = cli_only_opts(c, "models", allowed);
    if (rc)
        return rc;
    if (c->npos != 3)
        return cli_usage_error("models", "import takes a NAME and a "
                                         "WEIGHTS.safetensors file");
    const char *meta = cli_opt(c, "--metadata");
    if (meta && !*meta)
        return cli_usage_error("models", "--metadata needs a JSON file");
    if (!c->pos[1][0])
        return cli_usage_error("models", "import needs a non-empty NAME");
    if ((rc = check_file("weights", c->pos[2])) != 0 ||
        (meta && (rc = check_file("metadata", meta)) != 0))
        return rc;
    /* A NAME holding '=' or starting with '@' is still text: the parts are
     * "name=VALUE", split at the first '=', and only "=@" means a file. */
    char name[1024], weights[PATH_MAX + 16], metadata[PATH_MAX + 16];
    if (c->pos[1][0] == '@')
        return cli_usage_error("models", "a model NAME cannot start with "
                                         "'@'");
    snprintf(name, sizeof name, "name=%s", c->pos[1]);
    snprintf(weights, sizeof weights, "weights=@%s", c->pos[2]);
    const char *parts[3] = {name, weights, NULL};
    size_t n = 2;
    if (meta) {
        snprintf(metadata, sizeof metadata, "metadata=@%s", meta);
        parts[n++] = metadata;
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
