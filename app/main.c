/*
 * main.c - the trainyard binary: `serve` runs the API server, `worker` runs
 * one training job and `replica` one serving replica (both started by the
 * server), `version` says what is built in.
 * Only this file decides to exit.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "api/api.h"
#include "cli/cli.h"
#if TRAINYARD_HAVE_CUDA
#include "gpu/cuda/backend.h"
#endif
#include "cluster/slurm_inventory.h"
#include "cluster/slurmrest.h"
#include "gpu/inventory.h"
#include "deploy/deploy.h"
#include "jobs/service.h"
#include "models/cpu/kernels.h"
#include "app/app.h"
#include "server/auth.h"
#include "app/config.h"
#include "events/hub.h"
#include "common/fetch.h"
#include "server/http.h"
#include "common/log.h"
#include "serve/modelcache.h"
#include "common/opmetrics.h"
#include "node/gen_engine.h"
#include "node/replica.h"
#include "node/worker.h"

void openblas_set_num_threads(int n);
char *openblas_get_config(void);

/* The first executable `name` on PATH into out ("" when there is none). */
static void find_program(const char *name, char *out, size_t n)
{
    out[0] = 0;
    const char *path = getenv("PATH");
    if (!path)
        path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        size_t len = strcspn(path, ":");
        char cand[PATH_MAX];
        if (len > 0 && len < sizeof cand - strlen(name) - 2) {
            snprintf(cand, sizeof cand, "%.*s/%s", (int)len, path, name);
            if (access(cand, X_OK) == 0) {
                snprintf(out, n, "%s", cand);
                return;
            }
        }
        path += len;
        if (*path == ':')
            path++;
    }
}

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: trainyard <command> [flags]\n"
            "\n"
            "Commands:\n"
            "  serve     run the REST API server (trainyard serve --help)\n"
            "  version   print the version and the compute backends built in\n"
            "  keygen    print a new random API key (for --admin-key-file)\n"
            "  worker    run one training job (started by the server)\n"
            "  replica   serve one deployment's replica (started by the "
            "server)\n"
            "  help      show this help\n"
            "\n");
    cli_usage(f);
}

/* Says what is built in and what this process can see; devices it cannot
 * see are a line of output, not an error. */
static int cmd_version(void)
{
    printf("trainyard %s\n", TRAINYARD_VERSION);
#if TRAINYARD_HAVE_CUDA
    char versions[128];
    nn_cuda_versions(versions, sizeof versions);
    printf("backends: cpu (%s), cuda (%s)\n", openblas_get_config(), versions);
#else
    printf("backends: cpu (%s)\n", openblas_get_config());
#endif
    const cpu_kernels_info *k = cpu_kernels_get();
    double gflops = cpu_kernels_measure(0.2);
    printf("cpu kernels: %s %s (%s; the CPU has %s), SGEMM 256^3 on one "
           "thread %.1f GFLOP/s\n",
           k->provider, k->core, k->isa, k->cpu_isa, gflops);
    printf("cpu kernels chosen: %s\n", k->reason);
    printf("devices: cpu (%ld cores)\n", sysconf(_SC_NPROCESSORS_ONLN));
#if TRAINYARD_HAVE_CUDA
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

/* The CPU engine's kernels, measured, in the log (a warning when they are
 * weaker than the CPU allows) and in /metrics. */
static void log_cpu_kernels(void)
{
    const cpu_kernels_info *k = cpu_kernels_get();
    double gflops = cpu_kernels_measure(0.05);
    log_event(k->generic_fallback ? "warn" : "info", "cpu_kernels",
              json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:I}", "provider",
                        k->provider, "core", k->core, "isa", k->isa, "cpu_isa",
                        k->cpu_isa, "detected", k->detected, "reason",
                        k->reason, "gemm_gflops", (json_int_t)lround(gflops)));
    opm_cpu_kernels(k->provider, k->core, k->isa, k->cpu_isa, k->detected,
                    gflops);
}

/* `trainyard keygen`: a fresh API key for --admin-key-file or
 * TRAINYARD_ADMIN_KEY. */
static int cmd_keygen(int argc, char **argv)
{
    if (argc > 1) {
        fprintf(stderr, "usage: trainyard keygen\n"
                        "Prints a new random API key, e.g. for "
                        "--admin-key-file or TRAINYARD_ADMIN_KEY.\n");
        return strcmp(argv[1], "-h") && strcmp(argv[1], "--help") ? 64 : 0;
    }
    char key[AUTH_KEY_LEN + 1], key_id[TY_ID_MAX];
    ty_err err = {0};
    if (auth_key_generate(key, key_id, &err) != TY_OK) {
        fprintf(stderr, "trainyard keygen: %s\n", err.msg);
        return 1;
    }
    printf("%s\n", key);
    return 0;
}

/* A given admin key (--admin-key-file or TRAINYARD_ADMIN_KEY) made an admin
 * key of this store, with a line saying what happened. */
static ty_status admin_key_given(ty_app *app, char *key, ty_err *err)
{
    const char *from =
        *app->cfg.admin_key_file ? "--admin-key-file" : "TRAINYARD_ADMIN_KEY";
    char key_id[TY_ID_MAX] = "";
    auth_key_id(key, key_id);
    store_admin_key_result r;
    ty_status s = auth_bootstrap_given(app->store, key, &r, err);
    memset(key, 0, AUTH_KEY_LEN + 1);
    if (s != TY_OK) {
        fprintf(stderr, "trainyard serve: the admin key from %s: %s\n", from,
                err->msg);
        return s;
    }
    static const char *const said[] = {
        [STORE_ADMIN_KEY_CREATED] = "is the admin key of this new data folder",
        [STORE_ADMIN_KEY_ADDED] = "was added to the admin tenant",
        [STORE_ADMIN_KEY_PRESENT] = "is an admin key",
        [STORE_ADMIN_KEY_REVOKED] =
            "was revoked through the API and stays revoked: give another key",
    };
    printf("The admin API key from %s (%s) %s.\n", from, key_id, said[r]);
    log_event(r == STORE_ADMIN_KEY_REVOKED ? "warn" : "info", "admin_key",
              json_pack("{s:s, s:s, s:s}", "source", from, "key_id", key_id,
                        "state", said[r]));
    return TY_OK;
}

/* --executor slurm: the slurmrestd client, the cluster's GRES as the
 * inventory the scheduler places training jobs on (instead of this host's
 * devices), and the executor's settings. */
static ty_status open_slurm(ty_app *app, ty_err *err)
{
    const ty_config *cfg = &app->cfg;
    if (!cfg->slurm_user[0])
        return ty_fail(err, TY_EINVAL, "--slurm-user",
                       "--executor slurm needs --slurm-user: the Slurm user "
                       "its jobs run as");
    slurmrest_config rc = {.url = cfg->slurm_url,
                           .api_version = cfg->slurm_api_version,
                           .user = cfg->slurm_user,
                           .token_file = cfg->slurm_token_file,
                           .jwt_key_file = cfg->slurm_jwt_key};
    ty_status s = slurmrest_create(&rc, &app->slurm, err);
    if (s != TY_OK)
        return s;
    slurm_node *nodes = NULL;
    size_t n = 0;
    if ((s = slurmrest_nodes(app->slurm, &nodes, &n, err)) != TY_OK) {
        ty_err_prefix(err, "cannot read the cluster's nodes from slurmrestd");
        return s;
    }
    /* "slurm", not its URL: GET /v1/devices shows the label to tenants,
     * and slurmrestd's address is the operator's business. */
    inventory *inv = NULL;
    s = slurm_inventory_build(nodes, n, "slurm", &inv, err);
    free(nodes);
    if (s != TY_OK)
        return s;
    inv_destroy(app->inventory);
    app->inventory = inv;
    if (cfg->slurm_server_url[0]) {
        snprintf(app->slurm_server_url, sizeof app->slurm_server_url, "%s",
                 cfg->slurm_server_url);
    } else {
        if (cfg->port == 0 || !strcmp(cfg->host, "0.0.0.0") ||
            !strcmp(cfg->host, "::"))
            return ty_fail(err, TY_EINVAL, "--slurm-server-url",
                           "--executor slurm needs --slurm-server-url when "
                           "--listen does not name one address and port "
                           "the nodes can reach");
        snprintf(app->slurm_server_url, sizeof app->slurm_server_url,
                 "%s://%s%s%s:%d", cfg->tls_cert[0] ? "https" : "http",
                 cfg->ipv6 ? "[" : "", cfg->host, cfg->ipv6 ? "]" : "",
                 cfg->port);
    }
    app->slurm_exec = (exec_slurm_config){
        .rest = app->slurm,
        .worker_command = cfg->slurm_worker_command[0]
                              ? cfg->slurm_worker_command
                              : app->self_exe,
        .server_url = app->slurm_server_url,
        .workdir = cfg->slurm_workdir,
        .partition = cfg->slurm_partition,
        .account = cfg->slurm_account,
        .qos = cfg->slurm_qos,
        .gpu_sim = cfg->slurm_gpu_sim,
        .ca_file = cfg->slurm_ca_file,
        .heartbeat_ms = WPROTO_HEARTBEAT_DEFAULT_MS,
        .heartbeat_timeout_s = cfg->heartbeat_timeout_s,
        .start_grace_s =
            cfg->heartbeat_timeout_s > 120 ? cfg->heartbeat_timeout_s : 120,
        .poll_s = cfg->slurm_poll_s,
        .preempt_grace_s = 120,
        .time_limit_min = cfg->slurm_time_limit_min};
    log_event("info", "slurm",
              json_pack("{s:s, s:s, s:s, s:i, s:i}", "slurmrestd",
                        cfg->slurm_url, "api_version",
                        slurmrest_version(app->slurm), "workers_reach",
                        app->slurm_server_url, "gpus", inv->ngpus, "slots",
                        inv->nslots));
    return TY_OK;
}

static int stop_pipe[2] = {-1, -1};

static void on_stop_signal(int sig)
{
    int saved = errno;
    unsigned char b = (unsigned char)sig;
    ssize_t n = write(stop_pipe[1], &b, 1);
    (void)n;
    errno = saved;
}

/* What the job service works with, from the server's state and settings
 * (jobs/ knows nothing of ty_app). */
static void jobs_env_fill(const ty_app *app, jobs_env *env)
{
    memset(env, 0, sizeof *env);
    env->store = app->store;
    env->events = app->events;
    env->inventory = app->inventory;
    env->train_dev = app->train_dev;
    snprintf(env->data_dir, sizeof env->data_dir, "%s", app->cfg.data_dir);
    snprintf(env->jobs_dir, sizeof env->jobs_dir, "%s", app->jobs_dir);
    snprintf(env->self_exe, sizeof env->self_exe, "%s", app->self_exe);
    env->max_jobs = app->cfg.max_jobs;
    env->worker_threads = app->cfg.worker_threads;
    env->kv_cache_bytes = app->cfg.kv_cache_bytes;
    find_program("mpirun", env->mpirun, sizeof env->mpirun);
    env->max_job_memory = app->cfg.max_job_memory;
    env->heartbeat_timeout_s = app->cfg.heartbeat_timeout_s;
    env->retry_backoff_s = app->cfg.retry_backoff_s;
    env->max_attempts = app->cfg.max_attempts;
    env->preempt = app->cfg.preempt;
    env->preempt_wait_s = app->cfg.preempt_wait_s;
    env->backfill_wait_s = app->cfg.backfill_wait_s;
    env->fair_window_s = app->cfg.fair_window_s;
    env->serving_preempt = app->cfg.serving_preempt;
    env->max_replicas = app->cfg.max_replicas;
    /* A tenant's default share: half the places, so that one tenant's
     * deployment cannot take every replica place while another waits. */
    env->tenant_replicas = app->cfg.tenant_replicas >= 0
                               ? app->cfg.tenant_replicas
                               : (app->cfg.max_replicas + 1) / 2;
    env->slurm = app->slurm ? &app->slurm_exec : NULL;
    env->replica_wait_s = app->cfg.replica_wait_s;
}

/* The open-file limit, raised to its hard limit: every connection holds a
 * socket, and a low soft limit (often 1024) would cap the server at about
 * a thousand clients. Returns the limit now in force. */
static rlim_t raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 1024;
    rlim_t want = rl.rlim_max;
    if (want == RLIM_INFINITY || want > (rlim_t)1 << 20)
        want = (rlim_t)1 << 20;
    if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= want)
        return rl.rlim_cur == RLIM_INFINITY ? want : rl.rlim_cur;
    rlim_t was = rl.rlim_cur;
    rl.rlim_cur = want;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
        return was;
    return want;
}

static rlim_t nofile_limit = 1024;

/* libmicrohttpd's connection limit: the one given, else what the file
 * limit leaves after the store, the blobs, temp files and the workers'
 * pipes (512 descriptors, or half of a small limit). */
/* --work-threads 0: one per online core, at least two. */
static int work_threads_default(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 2 ? 2 : n > 64 ? 64 : (int)n;
}

static unsigned connection_limit(int given)
{
    unsigned n;
    if (given > 0)
        n = (unsigned)given;
    else if (nofile_limit > 2048)
        n = (unsigned)(nofile_limit - 512 > 1000000 ? 1000000
                                                    : nofile_limit - 512);
    else
        n = (unsigned)(nofile_limit / 2);
    log_event("info", "http_limits",
              json_pack("{s:I, s:i}", "open_files", (json_int_t)nofile_limit,
                        "max_connections", (int)n));
    return n;
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

    /* SIGINT and SIGTERM stop the server through a pipe that this thread
     * reads at the end. Blocking them here is not enough: OpenBLAS starts
     * its threads before main, with the signals unblocked, and a signal
     * delivered to one of them would kill the process with no shutdown.
     * A handler runs in whichever thread gets it; the threads started from
     * here on have both blocked. */
    if (pipe2(stop_pipe, O_CLOEXEC) != 0) {
        perror("trainyard serve: pipe");
        return 1;
    }
    struct sigaction sa = {.sa_handler = on_stop_signal,
                           .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    nofile_limit = raise_nofile();
    fetch_global_init();
    /* Predictions run on the HTTP threads: one BLAS thread each. Training
     * runs in worker processes, which use the cores themselves. */
    openblas_set_num_threads(1);

    /* The given admin key and the TLS files are checked before the data
     * folder is touched. The key leaves the environment so that workers
     * do not inherit it. */
    char given_key[AUTH_KEY_LEN + 1];
    ty_status given = auth_key_given(
        cfg.admin_key_file, getenv("TRAINYARD_ADMIN_KEY"), given_key, &err);
    unsetenv("TRAINYARD_ADMIN_KEY");
    if (given != TY_OK && given != TY_ENOTFOUND) {
        fprintf(stderr, "trainyard serve: %s\n", err.msg);
        return 64;
    }
    tls_pem tls = {0};
    if (*cfg.tls_cert &&
        tls_pem_load(cfg.tls_cert, cfg.tls_key, &tls, &err) != TY_OK) {
        fprintf(stderr, "trainyard serve: %s\n", err.msg);
        return 64;
    }

    /* The port next: a server that cannot listen (the port in use) stops
     * before it makes or changes anything in the data folder. */
    http_server_opts where = {.listen = cfg.listen,
                              .host = cfg.host,
                              .port = cfg.port,
                              .ipv6 = cfg.ipv6};
    int bound_port = 0;
    int listen_fd = http_listen_open(&where, &bound_port, &err);
    if (listen_fd < 0) {
        fprintf(stderr, "trainyard serve: %s\n", err.msg);
        tls_pem_free(&tls);
        return 1;
    }

    ty_app app;
    int rc = 1, listening = 0;
    if (app_init(&app, &cfg, &err) != TY_OK) {
        fprintf(stderr, "trainyard serve: %s\n", err.msg);
        app_free(&app, 1);
        tls_pem_free(&tls);
        close(listen_fd);
        return 1;
    }
    app.tls = tls;
    app.bound_port = bound_port;
    /* The devices first: a missing GPU or an impossible simulated layout
     * stops the start before the data folder gets an admin key. */
    if (inv_open(cfg.devices, &app.inventory, &err) != TY_OK) {
        fprintf(stderr, "trainyard serve: %s\n", err.msg);
        goto out;
    }
    if (cfg.executor_slurm && open_slurm(&app, &err) != TY_OK) {
        fprintf(stderr, "trainyard serve: %s\n", err.msg);
        goto out;
    }
    log_cpu_kernels();
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
            json_object_set_new(
                f, "memory_bytes",
                json_integer((json_int_t)app.train_dev.total_bytes));
        } else if (cfg.train_device == PLACE_DEVICE_AUTO) {
            char why[256] = "";
            place_cuda_count(why, sizeof why);
            json_object_set_new(f, "reason", json_string(why));
        }
        log_event("info", "train_device", f);
    }
    /* This server's own engines share the machine (and a GPU) with
     * training: a fixed cache each. */
    gen_engine_set_kv_budget(&(gen_kv_budget){.bytes = cfg.kv_cache_bytes});
    app.models =
        model_cache_create_on(cfg.model_cache_size, cfg.serve_device, &err);
    if (!app.models) {
        fprintf(stderr, "trainyard serve: %s\n", err.msg);
        goto out;
    }
    if (given == TY_OK) {
        if (admin_key_given(&app, given_key, &err) != TY_OK)
            goto out;
    } else {
        char key[AUTH_KEY_LEN + 1];
        int created = 0;
        if (auth_bootstrap(app.store, cfg.data_dir, key, &created, &err) !=
            TY_OK) {
            fprintf(stderr,
                    "trainyard serve: cannot create the admin key: %s\n",
                    err.msg);
            goto out;
        }
        if (created)
            printf("Created the admin API key. It is shown only now, and saved "
                   "in %s/admin.key (mode 0600):\n\n    %s\n\n",
                   cfg.data_dir, key);
    }
    if (!(app.events = ev_hub_create((size_t)cfg.events_ring, &err))) {
        fprintf(stderr, "trainyard serve: %s\n", err.msg);
        goto out;
    }
    jobs_env env;
    jobs_env_fill(&app, &env);
    /* The job service, then the kinds of job beside training (serving
     * deployments), then it runs. */
    if (jobs_create(&env, &app.jobs, &err) != TY_OK ||
        deploy_ctl_create(app.jobs, &app.deploy, &err) != TY_OK ||
        jobs_run(app.jobs, &err) != TY_OK) {
        fprintf(stderr, "trainyard serve: %s\n", err.msg);
        goto out;
    }
    http_server_opts http = {
        .listen = cfg.listen,
        .host = cfg.host,
        .port = cfg.port,
        .ipv6 = cfg.ipv6,
        .threads = cfg.http_threads,
        .connection_timeout_s = cfg.connection_timeout_s,
        .max_json_bytes = cfg.max_json_bytes,
        .max_large_requests = cfg.max_large_requests,
        .max_upload_bytes = cfg.max_upload_bytes,
        .tmp_dir = app.tmp_dir,
        .tls_cert = app.tls.cert,
        .tls_key = app.tls.key,
        .store = app.store,
        .ctx = app_api_ctx(&app),
        .token_check = api_worker_auth,
        .max_connections = connection_limit(cfg.max_connections),
        .per_ip_connections = (unsigned)cfg.per_ip_connections,
        .header_timeout_s = cfg.header_timeout_s,
        .body_timeout_s = cfg.body_timeout_s,
        .body_min_rate = (unsigned)cfg.body_min_rate,
        .request_timeout_s = cfg.request_timeout_s,
        .auth_fail_rate = cfg.auth_fail_rate,
        .auth_fail_burst = cfg.auth_fail_burst,
        .work_threads =
            cfg.work_threads > 0 ? cfg.work_threads : work_threads_default(),
        .wait_threads = cfg.serving_threads,
        .tenant_thread_share = cfg.tenant_thread_share,
        .access_log_sample = (unsigned)cfg.access_log_sample,
        .access_log_path = cfg.access_log[0] ? cfg.access_log : NULL,
        .access_log_max_bytes = cfg.access_log_max_bytes,
    };
    ty_status started =
        http_server_start(&http, api_routes, api_routes_count, listen_fd, &err);
    listen_fd = -1; /* the daemon's, or closed */
    if (started != TY_OK) {
        fprintf(stderr, "trainyard serve: %s\n", err.msg);
        goto out;
    }
    listening = 1;
    printf("trainyard %s listening on %s://%s%s%s:%d (data in %s)\n",
           TRAINYARD_VERSION, app.tls.cert ? "https" : "http",
           cfg.ipv6 ? "[" : "", cfg.host, cfg.ipv6 ? "]" : "", app.bound_port,
           cfg.data_dir);
    fflush(stdout);
    log_event("info", "started",
              json_pack("{s:s, s:i, s:s}", "host", cfg.host, "port",
                        app.bound_port, "data", cfg.data_dir));

    pthread_sigmask(SIG_UNBLOCK, &sigs, NULL);
    unsigned char sigbyte = 0;
    while (read(stop_pipe[0], &sigbyte, 1) < 0 && errno == EINTR)
        ;
    int sig = sigbyte;
    log_event("info", "stopping", json_pack("{s:s}", "signal", strsignal(sig)));
    rc = 0;
out:
    if (listen_fd >= 0)
        close(listen_fd);
    http_server_stop();
    jobs_stop(app.jobs);
    app.jobs = NULL;
    deploy_ctl_destroy(app.deploy);
    app.deploy = NULL;
    ev_hub_destroy(app.events);
    app.events = NULL;
    model_cache_destroy(app.models);
    inv_destroy(app.inventory);
    app.inventory = NULL;
    if (app.slurm)
        slurmrest_destroy(app.slurm);
    app.slurm = NULL;
    tls_pem_free(&app.tls);
    app_free(&app, !listening);
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
    /* First, before any thread: may execute the program again with the
     * GEMM kernels the CPU's features allow (models/cpu/kernels.h). */
    cpu_kernels_select(argv);
    const char *cmd = argv[1];
    if (!strcmp(cmd, "serve"))
        return cmd_serve(argc - 1, argv + 1);
    if (!strcmp(cmd, "worker"))
        return worker_main(argc - 1, argv + 1);
    if (!strcmp(cmd, RPROTO_COMMAND))
        return replica_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version"))
        return cmd_version();
    if (!strcmp(cmd, "keygen"))
        return cmd_keygen(argc - 1, argv + 1);
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
