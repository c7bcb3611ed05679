/*
 * cmd.c - the helpers every client command shares (cmd.h): usage errors,
 * options, requests, paging, input files.
 */
#include "cli/cmd.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/output.h"

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "trainyard: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n(see trainyard %s --help)\n", cmd);
    va_end(ap);
    return CLI_EXIT_USAGE;
}

const char *cli_opt(const cli_ctx *c, const char *name)
{
    const char *v = NULL;
    for (int i = 0; i < c->nopt; i++)
        if (!strcmp(c->opt[i], name))
            v = c->val[i]; /* the last one given wins */
    return v;
}

int cli_only_opts(const cli_ctx *c, const char *cmd, const char *const *allowed)
{
    for (int i = 0; i < c->nopt; i++) {
        int ok = 0;
        for (int k = 0; allowed && allowed[k] && !ok; k++)
            ok = !strcmp(c->opt[i], allowed[k]);
        if (!ok)
            return cli_usage_error(cmd, "%s does not take %s", cmd, c->opt[i]);
    }
    return 0;
}

int cli_call(cli_ctx *c, const char *method, const char *path,
             const char *content_type, const char *body, size_t len,
             cli_resp *out)
{
    int rc =
        cli_http_request(&c->http, method, path, content_type, body, len, out);
    if (rc)
        return rc;
    if ((rc = cli_http_check(out)) != 0) {
        cli_resp_free(out);
        return rc;
    }
    if (c->json)
        cli_print_raw(out->body, out->len, stdout);
    return 0;
}

int cli_call_json(cli_ctx *c, const char *method, const char *path,
                  json_t *body, cli_resp *out)
{
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    if (!text) {
        fprintf(stderr, "trainyard: out of memory\n");
        return CLI_EXIT_USAGE;
    }
    int rc =
        cli_call(c, method, path, "application/json", text, strlen(text), out);
    free(text);
    return rc;
}

int cli_list(cli_ctx *c, const char *path, json_t **items)
{
    *items = NULL;
    long long want = 0;
    const char *lim = cli_opt(c, "--limit");
    if (lim) {
        char *end;
        want = strtoll(lim, &end, 10);
        if (*end || want < 1)
            return cli_usage_error("help",
                                   "--limit takes a positive number, "
                                   "not '%s'",
                                   lim);
    }
    json_t *all = c->json ? NULL : json_array();
    char cursor[64] = "";
    long long got = 0;
    for (;;) {
        long long page = want ? want - got : 1000;
        if (page > 1000)
            page = 1000;
        char url[1024];
        snprintf(url, sizeof url, "%s%slimit=%lld%s%s", path,
                 strchr(path, '?') ? "&" : "?", page, *cursor ? "&cursor=" : "",
                 cursor);
        cli_resp r;
        int rc = cli_call(c, "GET", url, NULL, NULL, 0, &r);
        if (rc) {
            json_decref(all);
            return rc;
        }
        json_t *page_items = json_object_get(r.json, "items");
        got += (long long)json_array_size(page_items);
        if (all)
            json_array_extend(all, page_items);
        const char *next = cli_str(r.json, "next_cursor");
        int more = next && *next && (!want || got < want);
        if (more) {
            char esc[64];
            cli_http_escape(next, esc, sizeof esc);
            snprintf(cursor, sizeof cursor, "%s", esc);
        }
        cli_resp_free(&r);
        if (!more)
            break;
    }
    *items = all;
    return 0;
}

int cli_read_input(const char *path, char **out, size_t *len)
{
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) {
        fprintf(stderr, "trainyard: cannot open %s: %s\n", path,
                strerror(errno));
        return CLI_EXIT_USAGE;
    }
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (n + 1 == cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    int bad = !buf || ferror(f);
    if (f != stdin)
        fclose(f);
    if (bad) {
        free(buf);
        fprintf(stderr, "trainyard: cannot read %s\n", path);
        return CLI_EXIT_USAGE;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return 0;
}

int cli_ref_path(char out[CLI_REF_PATH_MAX], const char *cmd,
                 const char *collection, const char *ref, const char *tail)
{
    char esc[CLI_REF_PATH_MAX];
    size_t len = strlen(ref);
    if (len == 0 || strchr(ref, '/'))
        return cli_usage_error(cmd,
                               "'%s' is not an id or a name that a path can "
                               "hold (a name with '/': use the id)",
                               ref);
    if (len * 3 + 1 > sizeof esc)
        return cli_usage_error(cmd,
                               "'%.40s...' is longer than any id or "
                               "name",
                               ref);
    cli_http_escape(ref, esc, sizeof esc);
    int n = snprintf(out, CLI_REF_PATH_MAX, "%s/%s%s", collection, esc, tail);
    if (n < 0 || n >= CLI_REF_PATH_MAX)
        return cli_usage_error(cmd,
                               "'%.40s...' is longer than any id or "
                               "name",
                               ref);
    return 0;
}

const char *cli_str(const json_t *obj, const char *key)
{
    return json_string_value(json_object_get(obj, key));
}
