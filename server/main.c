/*
 * main.c - the trainyard binary: `serve` runs the API server, `worker` runs
 * one training job (started by the server), `version` says what is built in.
 * Only this file decides to exit.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/api.h"
#include "cli/cli.h"
#ifdef TY_HAVE_CUDA
#include "gpu/cuda/backend_cuda.h"
#endif
#include "gpu/inventory.h"
#include "gpu/runner.h"
#include "server/app.h"
#include "server/auth.h"
#include "server/config.h"
#include "server/events.h"
#include "server/fetch.h"
#include "server/http.h"
#include "server/log.h"
#include "server/modelcache.h"
#include "server/worker.h"

void openblas_set_num_threads(int n);
char *openblas_get_config(void);

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: trainyard <command> [flags]\n"
            "\n"
            "Commands:\n"
            "  serve     run the REST API server (trainyard serve --help)\n"
            "  version   print the version and the compute backends built in\n"
            "  worker    run one training job (started by the server)\n"
            "  help      show this help\n"
            "\n");
    cli_usage(f);
}

/* Says what is built in and what this process can see; devices it cannot
 * see are a line of output, not an error. */
static int cmd_version(void)
{
    printf("trainyard %s\n", TRAINYARD_VERSION);
#ifdef TY_HAVE_CUDA
    char versions[128];
    nn_cuda_versions(versions, sizeof versions);
    printf("backends: cpu (%s), cuda (%s)\n", openblas_get_config(), versions);
#else
    printf("backends: cpu (%s)\n", openblas_get_config());
#endif
    printf("devices: cpu (%ld cores)\n", sysconf(_SC_NPROCESSORS_ONLN));
#ifdef TY_HAVE_CUDA
    char why[256] = "";
    int count = nn_cuda_device_count(why, sizeof why);
    if (count == 0)
        printf("cuda: no CUDA devices: %s\n", why);
    for (int i = 0; i < count; i++) {
        nn_cuda_device d;
        ty_err err = {0};
        if (nn_cuda_device_get(i, &d, &err) != TY_OK) {
            printf("cuda:%d: %s\n", i, err.msg);
            continue;
        }
        printf("cuda:%d: %s, %.1f GiB (%.1f GiB free), compute capability "
               "%d.%d, %s\n",
               i, d.name, (double)d.total_bytes / (1u << 30),
               (double)d.free_bytes / (1u << 30), d.cc_major, d.cc_minor,
               d.uuid);
    }
#else
    printf("cuda: not built into this binary\n");
#endif
    return 0;
}

static int cmd_serve(int argc, char **argv)
{
    ty_config cfg;
    config_defaults(&cfg);
    ty_err err = {0};
    int help = 0;
    if (config_parse_serve(argc, argv, &cfg, &help, &err) != TY_OK) {
        fprintf(stderr, "trainyard serve: %s\n", err.msg);
        return 64;
    }
    if (help) {
        config_usage(stdout);
        return 0;
    }

    /* Signals are taken by sigwait in this thread only. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    fetch_global_init();
    /* Predictions run on the HTTP threads: one BLAS thread each. Training
     * runs in worker processes, which use the cores themselves. */
    openblas_set_num_threads(1);

    ty_app app;
    int rc = 1;
    if (app_init(&app, &cfg, &err) != TY_OK) {
        fprintf(stderr, "trainyard serve: %s\n", err.msg);
        return 1;
    }
    /* The devices first: a missing GPU or an impossible simulated layout
     * stops the start before the data folder gets an admin key. */
    if (inv_open(cfg.devices, &app.inventory, &err) != TY_OK) {
        fprintf(stderr, "trainyard serve: %s\n", err.msg);
        goto out;
    }
    log_event("info", "devices",
              json_pack("{s:s, s:i, s:i, s:s}", "source",
                        app.inventory->source_label, "gpus",
                        app.inventory->ngpus, "slots", app.inventory->nslots,
                        "reason", app.inventory->reason));
    if (place_device_open("--train-device", cfg.train_device, &app.train_dev,
                          &err) != TY_OK) {
        fprintf(stderr, "trainyard serve: %s\n", err.msg);
        goto out;
    }
    {
        char req[16];
        place_device_label(cfg.train_device, req, sizeof req);
        json_t *f = json_pack("{s:s, s:s, s:s}", "device", app.train_dev.label,
                              "requested", req, "name", app.train_dev.name);
        if (app.train_dev.device >= 0) {
            json_object_set_new(f, "memory_bytes",
                                json_integer((json_int_t)app.train_dev
                                                 .total_bytes));
        } else if (cfg.train_device == PLACE_DEVICE_AUTO) {
            char why[256] = "";
            place_cuda_count(why, sizeof why);
            json_object_set_new(f, "reason", json_string(why));
        }
        log_event("info", "train_device", f);
    }
    app.models = model_cache_create_on(cfg.model_cache_size,
                                       cfg.serve_device, &err);
    if (!app.models) {
        fprintf(stderr, "trainyard serve: %s\n", err.msg);
        goto out;
    }
    char key[AUTH_KEY_LEN + 1];
    int created = 0;
    if (auth_bootstrap(app.store, cfg.data_dir, key, &created, &err) != TY_OK) {
        fprintf(stderr, "trainyard serve: cannot create the admin key: %s\n",
                err.msg);
        goto out;
    }
    if (created)
        printf("Created the admin API key. It is shown only now, and saved in "
               "%s/admin.key (mode 0600):\n\n    %s\n\n",
               cfg.data_dir, key);
    if (!(app.events = ev_hub_create((size_t)cfg.events_ring, &err))) {
        fprintf(stderr, "trainyard serve: %s\n", err.msg);
        goto out;
    }
    if (runner_start(&app, &app.runner, &err) != TY_OK) {
        fprintf(stderr, "trainyard serve: %s\n", err.msg);
        goto out;
    }
    if (http_server_start(&app, api_routes, api_routes_count, &err) != TY_OK) {
        fprintf(stderr, "trainyard serve: %s\n", err.msg);
        goto out;
    }
    printf("trainyard %s listening on http://%s%s%s:%d (data in %s)\n",
           TRAINYARD_VERSION, cfg.ipv6 ? "[" : "", cfg.host,
           cfg.ipv6 ? "]" : "", app.bound_port, cfg.data_dir);
    fflush(stdout);
    log_event("info", "started",
              json_pack("{s:s, s:i, s:s}", "host", cfg.host, "port",
                        app.bound_port, "data", cfg.data_dir));

    int sig = 0;
    sigwait(&sigs, &sig);
    log_event("info", "stopping", json_pack("{s:s}", "signal", strsignal(sig)));
    rc = 0;
out:
    http_server_stop(&app);
    runner_stop(app.runner);
    app.runner = NULL;
    ev_hub_destroy(app.events);
    app.events = NULL;
    model_cache_destroy(app.models);
    inv_destroy(app.inventory);
    app.inventory = NULL;
    app_free(&app);
    if (rc == 0)
        log_event("info", "stopped", NULL);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 64;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "serve"))
        return cmd_serve(argc - 1, argv + 1);
    if (!strcmp(cmd, "worker"))
        return worker_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version"))
        return cmd_version();
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        usage(stdout);
        return 0;
    }
    if (cli_command_index(argc, argv))
        return cli_main(argc, argv);
    fprintf(stderr, "trainyard: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return 64;
}
