/*
 * cli.c - the client's entry: the command line (global options anywhere),
 * where the server and key come from, help, login and logout. The helpers
 * every command shares are in cmd.c.
 */
#include "cli/cli.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cmd.h"
#include "cli/output.h"

static const char *const commands[] = {
    "login",   "logout",      "datasets", "jobs", "models",
    "devices", "deployments", "tenants",  "mig",  "usage"};

static int is_command(const char *cmd)
{
    for (size_t i = 0; i < TY_ARRAY_LEN(commands); i++)
        if (!strcmp(cmd, commands[i]))
            return 1;
    return 0;
}

int cli_command_index(int argc, char **argv)
{
    static const char *const with_value[] = {"--url", "--key-file", "--cacert"};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-')
            return is_command(a) ? i : 0;
        int known = !strcmp(a, "--json");
        for (size_t k = 0; k < TY_ARRAY_LEN(with_value) && !known; k++) {
            size_t n = strlen(with_value[k]);
            if (!strncmp(a, with_value[k], n) && a[n] == '=')
                known = 1;
            else if (!strcmp(a, with_value[k]))
                known = 1, i++;
        }
        if (!known)
            return 0;
    }
    return 0;
}

void cli_usage(FILE *f)
{
    fprintf(
        f,
        "Client commands (talk to a trainyard server):\n"
        "  login URL      check a key against the server and save both\n"
        "  logout         forget the saved URL and key\n"
        "  datasets       upload | list | show ID | rm ID\n"
        "  jobs           submit FILE | list | show ID | cancel ID | watch ID\n"
        "  models         list | show ID | download ID | predict ID FILE |\n"
        "                 evaluate ID --dataset DATASET_ID |\n"
        "                 import NAME WEIGHTS [--metadata FILE]\n"
        "  deployments    create NAME --model MODEL | list | get ID |\n"
        "                 update ID | delete ID (serve a model from "
        "replicas)\n"
        "  devices        GPUs and MIG slices, and who holds each\n"
        "  tenants        list | create | show | update | keys | key-create |"
        " key-revoke (admin)\n"
        "  mig            advice | status [GPU] | apply GPU (the MIG layout "
        "advisor and\n"
        "                 layout changes; admin)\n"
        "  usage          slice-, GPU- and CPU-hours held in a window\n"
        "\n"
        "Global options, anywhere on the line:\n"
        "  --url URL          the server (else TRAINYARD_URL, else the login)\n"
        "  --key-file FILE    the API key (else TRAINYARD_KEY, else the "
        "login)\n"
        "  --cacert FILE      CA certificates for a private CA (always "
        "verified)\n"
        "  --json             print the server's JSON unchanged (lists: each "
        "page)\n"
        "  -h, --help         help for any command\n"
        "\n"
        "Exit codes:\n"
        "  0  success (watch: the job succeeded)\n"
        "  1  the job failed (jobs watch, jobs submit --watch), the MIG "
        "change failed\n"
        "     (mig apply --watch)\n"
        "  2  the job was cancelled\n"
        "  3  not found (HTTP 404)\n"
        "  4  request rejected (other 4xx: 400, 409, 413, 422, ...)\n"
        "  5  authentication or authorization (HTTP 401, 403)\n"
        "  6  server error (HTTP 5xx)\n"
        "  7  cannot reach the server (DNS, connect, TLS verification)\n"
        "  64 usage error (bad command line)\n");
}

static void login_usage(FILE *f)
{
    fprintf(
        f, "Usage: trainyard login URL [--key-file FILE] [--cacert FILE]\n"
           "       trainyard logout\n"
           "\n"
           "login reads the API key from --key-file, else TRAINYARD_KEY, else\n"
           "standard input (a prompt without echo on a terminal), checks it\n"
           "against the server, and saves URL, key and CA file to\n"
           "$XDG_CONFIG_HOME/trainyard/config.json (mode 0600). logout removes "
           "it.\n");
}

/* ---- the command line ---- */

typedef struct {
    const char *name;
    const char *alias;
    int takes_value;
} opt_spec;

/* Every option any client command takes; each command says which it
 * accepts (cli_only_opts). */
static const opt_spec options[] = {
    {"--url", NULL, 1},
    {"--key-file", NULL, 1},
    {"--cacert", NULL, 1},
    {"--json", NULL, 0},
    {"--help", "-h", 0},
    {"--format", NULL, 1},
    {"--watch", NULL, 0},
    {"--status", NULL, 1},
    {"--limit", NULL, 1},
    {"--output", "-o", 1},
    {"--name", NULL, 1},
    {"--dataset", NULL, 1},
    {"--weight", NULL, 1},
    {"--max-gpu-slices", NULL, 1},
    {"--max-running-jobs", NULL, 1},
    {"--max-storage-bytes", NULL, 1},
    {"--serving-rps", NULL, 1},
    {"--serving-burst", NULL, 1},
    {"--serving-max-concurrency", NULL, 1},
    {"--serving-tokens-per-minute", NULL, 1},
    {"--model", NULL, 1},
    {"--min", NULL, 1},
    {"--max", NULL, 1},
    {"--gpu", NULL, 1},
    {"--max-batch-size", NULL, 1},
    {"--max-queue-delay-us", NULL, 1},
    {"--rps", NULL, 1},
    {"--burst", NULL, 1},
    {"--max-concurrency", NULL, 1},
    {"--tokens-per-minute", NULL, 1},
    {"--priority", NULL, 1},
    {"--metadata", NULL, 1},
    {"--layout", NULL, 1},
    {"--config", NULL, 1},
    {"--tokenizer", NULL, 1},
    {"--window", NULL, 1},
    {"--from-advice", NULL, 0},
    {"--drain", NULL, 1},
    {"--timeout", NULL, 1},
    {"--from", NULL, 1},
    {"--to", NULL, 1},
    {"--group-by", NULL, 1},
    {"--tenant", NULL, 1},
    {"--csv", NULL, 0},
};

/* Parses argv[1..] but the command's name at skip. */
static int parse_args(int argc, char **argv, int skip, cli_ctx *c)
{
    int only_pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i == skip)
            continue;
        if (only_pos || a[0] != '-' || !strcmp(a, "-")) {
            if (c->npos == CLI_MAX_ARGS)
                return cli_usage_error(argv[skip], "too many arguments");
            c->pos[c->npos++] = a;
            continue;
        }
        if (!strcmp(a, "--")) {
            only_pos = 1;
            continue;
        }
        const char *eq = strchr(a, '=');
        size_t nlen = eq ? (size_t)(eq - a) : strlen(a);
        const opt_spec *o = NULL;
        for (size_t k = 0; k < TY_ARRAY_LEN(options) && !o; k++) {
            const opt_spec *s = &options[k];
            if ((strlen(s->name) == nlen && !strncmp(a, s->name, nlen)) ||
                (s->alias && strlen(s->alias) == nlen &&
                 !strncmp(a, s->alias, nlen)))
                o = s;
        }
        if (!o)
            return cli_usage_error(argv[skip], "unknown option '%s'", a);
        const char *v = NULL;
        if (o->takes_value) {
            if (eq)
                v = eq + 1;
            else if (i + 1 < argc)
                v = argv[++i];
            else
                return cli_usage_error(argv[skip], "%s needs a value", o->name);
        } else if (eq) {
            return cli_usage_error(argv[skip], "%s takes no value", o->name);
        }
        if (!strcmp(o->name, "--url"))
            c->url_flag = v;
        else if (!strcmp(o->name, "--key-file"))
            c->key_file = v;
        else if (!strcmp(o->name, "--cacert"))
            c->cacert_flag = v;
        else if (!strcmp(o->name, "--json"))
            c->json = 1;
        else if (!strcmp(o->name, "--help"))
            c->help = 1;
        else {
            if (c->nopt == CLI_MAX_ARGS)
                return cli_usage_error(argv[skip], "too many options");
            c->opt[c->nopt] = o->name;
            c->val[c->nopt++] = v ? v : "";
        }
    }
    return 0;
}

/* Server, key and CA: flags over the environment over the config file. */
static int resolve(cli_ctx *c, int need_url)
{
    ty_err err = {0};
    if (cli_config_load(&c->cfg, &err) != TY_OK) {
        fprintf(stderr, "trainyard: %s\n", err.msg);
        return CLI_EXIT_USAGE;
    }
    const char *env_url = getenv("TRAINYARD_URL");
    const char *env_key = getenv("TRAINYARD_KEY");
    if (env_url && *env_url)
        snprintf(c->cfg.url, sizeof c->cfg.url, "%s", env_url);
    if (env_key && *env_key)
        snprintf(c->cfg.key, sizeof c->cfg.key, "%s", env_key);
    if (c->url_flag)
        snprintf(c->cfg.url, sizeof c->cfg.url, "%s", c->url_flag);
    if (c->cacert_flag)
        snprintf(c->cfg.cacert, sizeof c->cfg.cacert, "%s", c->cacert_flag);
    if (c->key_file && cli_read_key_file(c->key_file, c->cfg.key,
                                         sizeof c->cfg.key, &err) != TY_OK) {
        fprintf(stderr, "trainyard: %s\n", err.msg);
        return CLI_EXIT_USAGE;
    }
    if (need_url && !*c->cfg.url) {
        fprintf(stderr, "trainyard: no server: run `trainyard login URL`, "
                        "set TRAINYARD_URL or pass --url\n");
        return CLI_EXIT_USAGE;
    }
    c->http.url = c->cfg.url;
    c->http.key = c->cfg.key;
    c->http.cacert = c->cfg.cacert;
    return 0;
}

/* ---- login and logout ---- */

static int cmd_login(cli_ctx *c)
{
    if (c->help) {
        login_usage(stdout);
        return 0;
    }
    int rc = cli_only_opts(c, "login", NULL);
    if (rc)
        return rc;
    if (c->npos != 1)
        return cli_usage_error("login", "login takes the server's URL");
    cli_config cfg = {0};
    ty_err err = {0};
    snprintf(cfg.url, sizeof cfg.url, "%s", c->pos[0]);
    if (strncmp(cfg.url, "http://", 7) && strncmp(cfg.url, "https://", 8))
        return cli_usage_error("login",
                               "the URL must start with http:// or "
                               "https://, not '%s'",
                               cfg.url);
    /* Saved absolute, so later commands find it from any folder. */
    if (c->cacert_flag && !realpath(c->cacert_flag, cfg.cacert))
        return cli_usage_error("login", "cannot read the CA file %s: %s",
                               c->cacert_flag, strerror(errno));
    const char *env_key = getenv("TRAINYARD_KEY");
    ty_status st;
    if (c->key_file)
        st = cli_read_key_file(c->key_file, cfg.key, sizeof cfg.key, &err);
    else if (env_key && *env_key)
        st = strlen(env_key) < sizeof cfg.key
                 ? (snprintf(cfg.key, sizeof cfg.key, "%s", env_key), TY_OK)
                 : ty_fail(&err, TY_EINVAL, NULL, "TRAINYARD_KEY is too long");
    else
        st = cli_read_key_stdin(cfg.key, sizeof cfg.key, &err);
    if (st != TY_OK) {
        fprintf(stderr, "trainyard: %s\n", err.msg);
        return CLI_EXIT_USAGE;
    }
    cli_http h = {cfg.url, cfg.key, cfg.cacert};
    cli_resp r;
    rc = cli_http_request(&h, "GET", "/v1/datasets?limit=1", NULL, NULL, 0, &r);
    if (rc)
        return rc;
    if (r.status == 401 || r.status == 403) {
        fprintf(stderr,
                "trainyard: the server at %s refused the key (HTTP "
                "%ld): check it and log in again\n",
                cfg.url, r.status);
        cli_resp_free(&r);
        return CLI_EXIT_AUTH;
    }
    if (r.status == 404 || !r.json) {
        fprintf(stderr,
                "trainyard: %s does not answer like a trainyard "
                "server (HTTP %ld on /v1/datasets)\n",
                cfg.url, r.status);
        cli_resp_free(&r);
        return r.status >= 500 ? CLI_EXIT_SERVER : CLI_EXIT_NOT_FOUND;
    }
    rc = cli_http_check(&r);
    cli_resp_free(&r);
    if (rc)
        return rc;
    char path[PATH_MAX];
    if (cli_config_save(&cfg, path, &err) != TY_OK) {
        fprintf(stderr, "trainyard: cannot save the login: %s\n", err.msg);
        return CLI_EXIT_USAGE;
    }
    printf("Logged in to %s; saved in %s\n", cfg.url, path);
    return 0;
}

static int cmd_logout(cli_ctx *c)
{
    if (c->help) {
        login_usage(stdout);
        return 0;
    }
    int rc = cli_only_opts(c, "logout", NULL);
    if (rc)
        return rc;
    if (c->npos)
        return cli_usage_error("logout", "logout takes no arguments");
    int removed = 0;
    char path[PATH_MAX];
    ty_err err = {0};
    if (cli_config_remove(&removed, path, &err) != TY_OK) {
        fprintf(stderr, "trainyard: %s\n", err.msg);
        return CLI_EXIT_USAGE;
    }
    printf(removed ? "Logged out; removed %s\n" : "Not logged in (no %s)\n",
           path);
    return 0;
}

int cli_main(int argc, char **argv)
{
    cli_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        fprintf(stderr, "trainyard: out of memory\n");
        return CLI_EXIT_USAGE;
    }
    int at = cli_command_index(argc, argv);
    if (at == 0) {
        free(c);
        fprintf(stderr, "trainyard: no command (see trainyard help)\n");
        return CLI_EXIT_USAGE;
    }
    const char *cmd = argv[at];
    int rc = parse_args(argc, argv, at, c);
    if (rc)
        goto out;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "trainyard: cannot start libcurl\n");
        rc = CLI_EXIT_UNREACHABLE;
        goto out;
    }
    if (!strcmp(cmd, "login"))
        rc = cmd_login(c);
    else if (!strcmp(cmd, "logout"))
        rc = cmd_logout(c);
    else if (!c->help && (rc = resolve(c, 1)) != 0)
        ;
    else if (!strcmp(cmd, "datasets"))
        rc = cli_cmd_datasets(c);
    else if (!strcmp(cmd, "jobs"))
        rc = cli_cmd_jobs(c);
    else if (!strcmp(cmd, "models"))
        rc = cli_cmd_models(c);
    else if (!strcmp(cmd, "devices"))
        rc = cli_cmd_devices(c);
    else if (!strcmp(cmd, "deployments"))
        rc = cli_cmd_deployments(c);
    else if (!strcmp(cmd, "tenants"))
        rc = cli_cmd_tenants(c);
    else if (!strcmp(cmd, "mig"))
        rc = cli_cmd_mig(c);
    else if (!strcmp(cmd, "usage"))
        rc = cli_cmd_usage(c);
    else
        rc = cli_usage_error("help", "unknown command '%s'", cmd);
    curl_global_cleanup();
out:
    fflush(stdout);
    free(c);
    return rc;
}
