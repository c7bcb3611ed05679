/*
 * cmd.h - what the client's command files share: the parsed command line
 * (global options anywhere on it, command options checked per command), the
 * resolved server connection, and the list and request helpers that every
 * command uses the same way (paging, --json passthrough, error mapping).
 */
#ifndef TY_CLI_CMD_H
#define TY_CLI_CMD_H

#include <jansson.h>

#include "cli/exit.h"
#include "cli/config.h"
#include "cli/http.h"

#define CLI_MAX_ARGS 128

typedef struct {
    const char *pos[CLI_MAX_ARGS]; /* positionals, command name excluded */
    int npos;
    const char *opt[CLI_MAX_ARGS]; /* command options given (names) */
    const char *val[CLI_MAX_ARGS]; /* their values (NULL for flags) */
    int nopt;
    int json, help;
    const char *url_flag, *key_file, *cacert_flag;
    cli_config cfg; /* resolved: flags > env > file */
    cli_http http;
} cli_ctx;

/* The value of a command option ("--status"), or NULL when not given; a
 * flag (--watch) gives "". */
const char *cli_opt(const cli_ctx *c, const char *name);

/* CLI_EXIT_USAGE with a message when an option not in allowed (NULL-
 * terminated) was given, else 0. */
int cli_only_opts(const cli_ctx *c, const char *cmd,
                  const char *const *allowed);

/* A usage error: prints "trainyard: msg" and a pointer to --help; returns
 * CLI_EXIT_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* A request whose 2xx reply is printed raw with --json, else left in out
 * for the caller. Returns 0 or the exit code (error already shown; out is
 * freed then). */
int cli_call(cli_ctx *c, const char *method, const char *path,
             const char *content_type, const char *body, size_t len,
             cli_resp *out);

/* Every item of a paged list (GET path, which may hold a query), following
 * next_cursor up to --limit items (all without it). With --json each page
 * document is printed unchanged and *items is NULL. */
int cli_list(cli_ctx *c, const char *path, json_t **items);

/* cli_call with a JSON body (taken: freed whatever happens) as
 * application/json. */
int cli_call_json(cli_ctx *c, const char *method, const char *path,
                  json_t *body, cli_resp *out);

/* Reads a whole file, or stdin for "-", into a malloc'd NUL-terminated
 * buffer. CLI_EXIT_USAGE with a message when it cannot. */
int cli_read_input(const char *path, char **out, size_t *len);

/* The most bytes of a path naming one resource (cli_ref_path): a
 * 200-byte name escaped to three bytes a byte, and the route around it. */
#define CLI_REF_PATH_MAX 1024

/* Writes "<collection>/<ref><tail>" into out (CLI_REF_PATH_MAX bytes) with
 * ref, an id or a name (the server takes either: an id wins, else the
 * newest of that name), escaped for a path segment; tail may be "". 0, or
 * CLI_EXIT_USAGE with a message when ref is empty, holds a '/' (no path
 * segment can) or does not fit (cmd names the command's help): never a
 * truncated reference, which could name another resource. */
int cli_ref_path(char out[CLI_REF_PATH_MAX], const char *cmd,
                 const char *collection, const char *ref, const char *tail);

/* A string field of obj, or NULL. */
const char *cli_str(const json_t *obj, const char *key);

int cli_cmd_datasets(cli_ctx *c);
int cli_cmd_jobs(cli_ctx *c);
int cli_cmd_models(cli_ctx *c);
/* `models import` (cmd_models_import.c). */
int cli_models_import(cli_ctx *c);
int cli_cmd_devices(cli_ctx *c);
int cli_cmd_usage(cli_ctx *c); /* cmd_usage.c */
int cli_cmd_deployments(cli_ctx *c);
int cli_cmd_tenants(cli_ctx *c);
int cli_cmd_mig(cli_ctx *c);

/* Follows a job's events until it finishes; returns its outcome's exit code
 * (0 succeeded, 1 failed, 2 cancelled) or a request's. */
int cli_watch_job(cli_ctx *c, const char *job_id);

#endif
