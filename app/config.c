/* config.c - `trainyard serve` flags (see config.h). */
#include "app/config.h"

#include "common/fetch.h"
#include "events/hub.h"
#include "server/http.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void config_defaults(ty_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    snprintf(cfg->listen, sizeof cfg->listen, "127.0.0.1:8080");
    snprintf(cfg->host, sizeof cfg->host, "127.0.0.1");
    cfg->port = 8080;
    snprintf(cfg->data_dir, sizeof cfg->data_dir, "./var");
    cfg->http_threads = 4;
    cfg->max_jobs = 1;
    cfg->worker_threads = 0;
    cfg->max_upload_bytes = 2ULL << 30;
    cfg->max_json_bytes = 64ULL << 20;
    cfg->max_large_requests = 2;
    cfg->max_fetch_bytes = 2ULL << 30;
    /* Room for the SQLite WAL and a checkpoint or two: on a disk with less
     * left, the next upload or checkpoint is likely to fail, and a load
     * balancer should send new work elsewhere. */
    cfg->min_free_bytes = 256ULL << 20;
    cfg->fetch_timeout_s = 600;
    snprintf(cfg->fetch_hosts, sizeof cfg->fetch_hosts, "*");
    cfg->model_cache_size = 16;
    cfg->kv_cache_bytes = 256ULL << 20;
    cfg->connection_timeout_s = 120;
    cfg->serve_device = PLACE_DEVICE_AUTO;
    cfg->train_device = PLACE_DEVICE_AUTO;
    snprintf(cfg->devices, sizeof cfg->devices, "auto");
    cfg->heartbeat_timeout_s = 60;
    cfg->retry_backoff_s = 5.0;
    cfg->max_attempts = 3;
    cfg->backfill_wait_s = 300.0;
    cfg->preempt_wait_s = 60.0;
    cfg->preempt = 1;
    cfg->serving_preempt = 1;
    cfg->max_replicas = 16;
    cfg->tenant_replicas = -1;
    /* As many as the connections one address may open, so that a tenant
     * alone still has 128 requests in flight to its replicas with its
     * half (--tenant-thread-share) and every other tenant the other 128. */
    cfg->serving_threads = 256;
    cfg->tenant_thread_share = HTTP_TENANT_THREAD_SHARE;
    cfg->replica_wait_s = 120;
    cfg->fair_window_s = 600.0;
    cfg->events_ring = EV_RING_DEFAULT;
    cfg->max_connections = 0;
    cfg->per_ip_connections = 256;
    cfg->header_timeout_s = 10;
    cfg->body_timeout_s = 20;
    cfg->body_min_rate = 1024;
    cfg->request_timeout_s = 3600;
    cfg->auth_fail_rate = 1.0;
    cfg->auth_fail_burst = 30;
    cfg->access_log_sample = 1;
    cfg->access_log_max_bytes = 256ull << 20;
    snprintf(cfg->slurm_url, sizeof cfg->slurm_url, "http://127.0.0.1:6820");
    snprintf(cfg->slurm_api_version, sizeof cfg->slurm_api_version, "v0.0.38");
    snprintf(cfg->slurm_workdir, sizeof cfg->slurm_workdir, "/tmp");
    cfg->slurm_poll_s = 2.0;
}

/* A bounded string setting. */
static ty_status parse_text(const char *flag, const char *v, char *out,
                            size_t size, ty_err *err)
{
    if (!*v || strlen(v) >= size || strpbrk(v, "'\n\r"))
        return ty_fail(err, TY_EINVAL, flag,
                       "%s needs a value of 1 to %zu characters without "
                       "quotes or newlines",
                       flag, size - 1);
    snprintf(out, size, "%s", v);
    return TY_OK;
}

ty_status config_parse_size(const char *s, uint64_t *out)
{
    if (!s || !*s)
        return TY_EINVAL;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || s[0] == '-')
        return TY_EINVAL;
    unsigned shift = 0;
    switch (*end) {
        case '\0': break;
        case 'k':
        case 'K':
            shift = 10;
            end++;
            break;
        case 'm':
        case 'M':
            shift = 20;
            end++;
            break;
        case 'g':
        case 'G':
            shift = 30;
            end++;
            break;
        case 't':
        case 'T':
            shift = 40;
            end++;
            break;
        default: return TY_EINVAL;
    }
    if (*end == 'i' || *end == 'B')
        end++;
    if (*end == 'B')
        end++;
    if (*end)
        return TY_EINVAL;
    if (shift && v > (UINT64_MAX >> shift))
        return TY_EINVAL;
    *out = (uint64_t)v << shift;
    return TY_OK;
}

ty_status config_parse_listen(const char *s, ty_config *cfg, ty_err *err)
{
    const char *colon;
    const char *host = s;
    size_t hlen;
    int v6 = 0;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close || close[1] != ':')
            return ty_fail(err, TY_EINVAL, "--listen",
                           "--listen %s: use [address]:port for IPv6", s);
        host = s + 1;
        hlen = (size_t)(close - host);
        colon = close + 1;
        v6 = 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon)
            return ty_fail(err, TY_EINVAL, "--listen",
                           "--listen %s: expected address:port, e.g. "
                           "127.0.0.1:8080",
                           s);
        hlen = (size_t)(colon - s);
    }
    if (hlen == 0 || hlen >= sizeof cfg->host)
        return ty_fail(err, TY_EINVAL, "--listen",
                       "--listen %s: the address part is empty or too long", s);
    char *end;
    errno = 0;
    long port = strtol(colon + 1, &end, 10);
    if (errno || end == colon + 1 || *end || port < 0 || port > 65535)
        return ty_fail(err, TY_EINVAL, "--listen",
                       "--listen %s: the port must be 0 to 65535", s);
    memcpy(cfg->host, host, hlen);
    cfg->host[hlen] = '\0';
    cfg->port = (int)port;
    cfg->ipv6 = v6;
    snprintf(cfg->listen, sizeof cfg->listen, "%s", s);
    return TY_OK;
}

static ty_status parse_int(const char *flag, const char *v, int min, int max,
                           int *out, ty_err *err)
{
    char *end;
    errno = 0;
    long n = v ? strtol(v, &end, 10) : 0;
    if (!v || errno || end == v || *end || n < min || n > max)
        return ty_fail(err, TY_EINVAL, flag,
                       "%s needs a whole number from %d "
                       "to %d",
                       flag, min, max);
    *out = (int)n;
    return TY_OK;
}

/* Seconds, fractions allowed: 0.25, 5, 300. */
static ty_status parse_seconds(const char *flag, const char *v, double max,
                               double *out, ty_err *err)
{
    char *end;
    errno = 0;
    double d = v ? strtod(v, &end) : 0;
    if (!v || errno || end == v || *end || !(d >= 0) || d > max)
        return ty_fail(err, TY_EINVAL, flag,
                       "%s needs a number of seconds from 0 to %g", flag, max);
    *out = d;
    return TY_OK;
}

static ty_status parse_bytes(const char *flag, const char *v, uint64_t *out,
                             ty_err *err)
{
    if (config_parse_size(v, out) != TY_OK || *out == 0)
        return ty_fail(err, TY_EINVAL, flag,
                       "%s needs a size such as 1048576, 64M or 2G", flag);
    return TY_OK;
}

static ty_status parse_path(const char *flag, const char *v, char *out,
                            size_t size, ty_err *err)
{
    if (!*v || strlen(v) >= size)
        return ty_fail(err, TY_EINVAL, flag, "%s needs a file path", flag);
    snprintf(out, size, "%s", v);
    return TY_OK;
}

ty_status config_parse_serve(int argc, char **argv, ty_config *cfg,
                             int *want_help, ty_err *err)
{
    *want_help = 0;
    for (int i = 1; i < argc; i++) {
        const char *flag = argv[i];
        const char *val = NULL;
        char name[64];
        const char *eq = strchr(flag, '=');
        if (eq && (size_t)(eq - flag) < sizeof name) {
            memcpy(name, flag, (size_t)(eq - flag));
            name[eq - flag] = '\0';
            val = eq + 1;
            flag = name;
        }
        if (!strcmp(flag, "-h") || !strcmp(flag, "--help")) {
            *want_help = 1;
            return TY_OK;
        }
        if (strncmp(flag, "--", 2) != 0)
            return ty_fail(err, TY_EINVAL, NULL,
                           "unexpected argument '%s' (see trainyard serve "
                           "--help)",
                           argv[i]);
        if (!val) {
            if (i + 1 >= argc)
                return ty_fail(err, TY_EINVAL, flag, "%s needs a value", flag);
            val = argv[++i];
        }
        ty_status s = TY_OK;
        if (!strcmp(flag, "--listen")) {
            s = config_parse_listen(val, cfg, err);
        } else if (!strcmp(flag, "--data")) {
            if (!*val || strlen(val) >= sizeof cfg->data_dir - 64)
                return ty_fail(err, TY_EINVAL, flag,
                               "--data needs a folder path");
            snprintf(cfg->data_dir, sizeof cfg->data_dir, "%s", val);
        } else if (!strcmp(flag, "--threads")) {
            s = parse_int(flag, val, 1, 1024, &cfg->http_threads, err);
        } else if (!strcmp(flag, "--max-jobs")) {
            s = parse_int(flag, val, 1, 1024, &cfg->max_jobs, err);
        } else if (!strcmp(flag, "--worker-threads")) {
            s = parse_int(flag, val, 0, 1024, &cfg->worker_threads, err);
        } else if (!strcmp(flag, "--max-upload-bytes")) {
            s = parse_bytes(flag, val, &cfg->max_upload_bytes, err);
        } else if (!strcmp(flag, "--max-json-bytes")) {
            s = parse_bytes(flag, val, &cfg->max_json_bytes, err);
        } else if (!strcmp(flag, "--max-large-requests")) {
            s = parse_int(flag, val, 0, 1024, &cfg->max_large_requests, err);
        } else if (!strcmp(flag, "--max-fetch-bytes")) {
            s = parse_bytes(flag, val, &cfg->max_fetch_bytes, err);
        } else if (!strcmp(flag, "--min-free-bytes")) {
            /* 0 is allowed: no check */
            if (config_parse_size(val, &cfg->min_free_bytes) != TY_OK)
                s = ty_fail(err, TY_EINVAL, flag,
                            "%s needs a size such as 0, 64M or 1G", flag);
        } else if (!strcmp(flag, "--fetch-timeout")) {
            s = parse_int(flag, val, 1, 86400, &cfg->fetch_timeout_s, err);
        } else if (!strcmp(flag, "--fetch-hosts")) {
            if (!*val || strlen(val) >= sizeof cfg->fetch_hosts)
                return ty_fail(err, TY_EINVAL, flag,
                               "--fetch-hosts needs a comma-separated list of "
                               "host names, or *");
            snprintf(cfg->fetch_hosts, sizeof cfg->fetch_hosts, "%s", val);
        } else if (!strcmp(flag, "--fetch-allow-networks")) {
            if (strlen(val) >= sizeof cfg->fetch_allow_networks)
                return ty_fail(err, TY_EINVAL, flag,
                               "--fetch-allow-networks: the list is too long");
            if ((s = fetch_networks_check(val, flag, err)) == TY_OK)
                snprintf(cfg->fetch_allow_networks,
                         sizeof cfg->fetch_allow_networks, "%s", val);
        } else if (!strcmp(flag, "--model-cache")) {
            s = parse_int(flag, val, 1, 100000, &cfg->model_cache_size, err);
        } else if (!strcmp(flag, "--kv-cache")) {
            s = parse_bytes(flag, val, &cfg->kv_cache_bytes, err);
        } else if (!strcmp(flag, "--connection-timeout")) {
            s = parse_int(flag, val, 1, 86400, &cfg->connection_timeout_s, err);
        } else if (!strcmp(flag, "--max-job-memory")) {
            /* 0: no limit. */
            if (config_parse_size(val, &cfg->max_job_memory) != TY_OK)
                return ty_fail(err, TY_EINVAL, flag,
                               "--max-job-memory needs a size such as 512M or "
                               "2G, or 0 for no limit");
        } else if (!strcmp(flag, "--serve-device")) {
            /* Whether the binary has CUDA and the device exists is
             * checked at startup (model_cache_create_on,
             * place_device_open). */
            s = place_parse_device(flag, val, 1, &cfg->serve_device, err);
        } else if (!strcmp(flag, "--train-device")) {
            s = place_parse_device(flag, val, 1, &cfg->train_device, err);
        } else if (!strcmp(flag, "--devices")) {
            /* The file itself is read and checked at startup (inv_open). */
            if (strcmp(val, "auto") && strcmp(val, "none") &&
                (strncmp(val, "sim:", 4) || !val[4] ||
                 strlen(val) >= sizeof cfg->devices))
                return ty_fail(err, TY_EINVAL, flag,
                               "--devices %s: expected auto, none or "
                               "sim:<file.json>",
                               val);
            snprintf(cfg->devices, sizeof cfg->devices, "%s", val);
        } else if (!strcmp(flag, "--heartbeat-timeout")) {
            s = parse_int(flag, val, 1, 86400, &cfg->heartbeat_timeout_s, err);
        } else if (!strcmp(flag, "--retry-backoff")) {
            s = parse_seconds(flag, val, 3600, &cfg->retry_backoff_s, err);
        } else if (!strcmp(flag, "--max-attempts")) {
            s = parse_int(flag, val, 1, 100, &cfg->max_attempts, err);
        } else if (!strcmp(flag, "--backfill-wait")) {
            s = parse_seconds(flag, val, 86400 * 7, &cfg->backfill_wait_s, err);
        } else if (!strcmp(flag, "--preempt-wait")) {
            s = parse_seconds(flag, val, 86400 * 7, &cfg->preempt_wait_s, err);
        } else if (!strcmp(flag, "--fair-window")) {
            s = parse_seconds(flag, val, 86400 * 7, &cfg->fair_window_s, err);
        } else if (!strcmp(flag, "--preempt")) {
            if (strcmp(val, "on") && strcmp(val, "off"))
                return ty_fail(err, TY_EINVAL, flag,
                               "--preempt needs on or off");
            cfg->preempt = !strcmp(val, "on");
        } else if (!strcmp(flag, "--serving-preempt")) {
            if (strcmp(val, "on") && strcmp(val, "off"))
                return ty_fail(err, TY_EINVAL, flag,
                               "--serving-preempt needs on or off");
            cfg->serving_preempt = !strcmp(val, "on");
        } else if (!strcmp(flag, "--replica-wait")) {
            s = parse_seconds(flag, val, 3600, &cfg->replica_wait_s, err);
        } else if (!strcmp(flag, "--max-replicas")) {
            s = parse_int(flag, val, 0, 4096, &cfg->max_replicas, err);
        } else if (!strcmp(flag, "--tenant-replicas")) {
            s = parse_int(flag, val, 0, 4096, &cfg->tenant_replicas, err);
        } else if (!strcmp(flag, "--executor")) {
            if (strcmp(val, "local") && strcmp(val, "slurm"))
                return ty_fail(err, TY_EINVAL, flag,
                               "--executor needs local or slurm");
            cfg->executor_slurm = !strcmp(val, "slurm");
        } else if (!strcmp(flag, "--slurm-url")) {
            s = parse_text(flag, val, cfg->slurm_url, sizeof cfg->slurm_url,
                           err);
        } else if (!strcmp(flag, "--slurm-api-version")) {
            s = parse_text(flag, val, cfg->slurm_api_version,
                           sizeof cfg->slurm_api_version, err);
        } else if (!strcmp(flag, "--slurm-user")) {
            s = parse_text(flag, val, cfg->slurm_user, sizeof cfg->slurm_user,
                           err);
        } else if (!strcmp(flag, "--slurm-token-file")) {
            s = parse_path(flag, val, cfg->slurm_token_file,
                           sizeof cfg->slurm_token_file, err);
        } else if (!strcmp(flag, "--slurm-jwt-key")) {
            s = parse_path(flag, val, cfg->slurm_jwt_key,
                           sizeof cfg->slurm_jwt_key, err);
        } else if (!strcmp(flag, "--slurm-partition")) {
            s = parse_text(flag, val, cfg->slurm_partition,
                           sizeof cfg->slurm_partition, err);
        } else if (!strcmp(flag, "--slurm-account")) {
            s = parse_text(flag, val, cfg->slurm_account,
                           sizeof cfg->slurm_account, err);
        } else if (!strcmp(flag, "--slurm-qos")) {
            s = parse_text(flag, val, cfg->slurm_qos, sizeof cfg->slurm_qos,
                           err);
        } else if (!strcmp(flag, "--slurm-worker-command")) {
            s = parse_text(flag, val, cfg->slurm_worker_command,
                           sizeof cfg->slurm_worker_command, err);
        } else if (!strcmp(flag, "--slurm-server-url")) {
            s = parse_text(flag, val, cfg->slurm_server_url,
                           sizeof cfg->slurm_server_url, err);
        } else if (!strcmp(flag, "--slurm-workdir")) {
            s = parse_text(flag, val, cfg->slurm_workdir,
                           sizeof cfg->slurm_workdir, err);
        } else if (!strcmp(flag, "--slurm-ca-file")) {
            s = parse_path(flag, val, cfg->slurm_ca_file,
                           sizeof cfg->slurm_ca_file, err);
        } else if (!strcmp(flag, "--slurm-gpus")) {
            if (strcmp(val, "cuda") && strcmp(val, "sim"))
                return ty_fail(err, TY_EINVAL, flag,
                               "--slurm-gpus needs cuda or sim");
            cfg->slurm_gpu_sim = !strcmp(val, "sim");
        } else if (!strcmp(flag, "--slurm-poll")) {
            s = parse_seconds(flag, val, 600, &cfg->slurm_poll_s, err);
        } else if (!strcmp(flag, "--slurm-time-limit")) {
            s = parse_int(flag, val, 0, 525600, &cfg->slurm_time_limit_min,
                          err);
        } else if (!strcmp(flag, "--events-ring")) {
            s = parse_int(flag, val, 1, EV_RING_MAX, &cfg->events_ring, err);
        } else if (!strcmp(flag, "--tls-cert")) {
            s = parse_path(flag, val, cfg->tls_cert, sizeof cfg->tls_cert, err);
        } else if (!strcmp(flag, "--tls-key")) {
            s = parse_path(flag, val, cfg->tls_key, sizeof cfg->tls_key, err);
        } else if (!strcmp(flag, "--max-connections")) {
            s = parse_int(flag, val, 0, 1 << 24, &cfg->max_connections, err);
        } else if (!strcmp(flag, "--per-ip-connections")) {
            s = parse_int(flag, val, 0, 1 << 24, &cfg->per_ip_connections, err);
        } else if (!strcmp(flag, "--header-timeout")) {
            s = parse_int(flag, val, 0, 86400, &cfg->header_timeout_s, err);
        } else if (!strcmp(flag, "--body-timeout")) {
            s = parse_int(flag, val, 0, 86400, &cfg->body_timeout_s, err);
        } else if (!strcmp(flag, "--body-min-rate")) {
            s = parse_int(flag, val, 0, 1 << 30, &cfg->body_min_rate, err);
        } else if (!strcmp(flag, "--request-timeout")) {
            s = parse_int(flag, val, 0, 86400 * 7, &cfg->request_timeout_s,
                          err);
        } else if (!strcmp(flag, "--auth-fail-rate")) {
            char *end;
            errno = 0;
            double d = strtod(val, &end);
            if (errno || end == val || *end || !(d >= 0) || d > 1e6)
                return ty_fail(err, TY_EINVAL, flag,
                               "--auth-fail-rate needs a number of failures "
                               "per second from 0 (no throttle) to 1000000");
            cfg->auth_fail_rate = d;
        } else if (!strcmp(flag, "--auth-fail-burst")) {
            s = parse_int(flag, val, 1, 1 << 24, &cfg->auth_fail_burst, err);
        } else if (!strcmp(flag, "--work-threads")) {
            s = parse_int(flag, val, 0, 1024, &cfg->work_threads, err);
        } else if (!strcmp(flag, "--serving-threads")) {
            s = parse_int(flag, val, 1, 4096, &cfg->serving_threads, err);
        } else if (!strcmp(flag, "--tenant-thread-share")) {
            s = parse_int(flag, val, 1, 100, &cfg->tenant_thread_share, err);
        } else if (!strcmp(flag, "--access-log-sample")) {
            s = parse_int(flag, val, 0, 1 << 24, &cfg->access_log_sample, err);
        } else if (!strcmp(flag, "--access-log")) {
            s = parse_path(flag, val, cfg->access_log, sizeof cfg->access_log,
                           err);
        } else if (!strcmp(flag, "--access-log-max-bytes")) {
            if (config_parse_size(val, &cfg->access_log_max_bytes) != TY_OK)
                s = ty_fail(err, TY_EINVAL, flag,
                            "%s needs a size such as 0, 64M or 1G", flag);
        } else if (!strcmp(flag, "--admin-key-file")) {
            s = parse_path(flag, val, cfg->admin_key_file,
                           sizeof cfg->admin_key_file, err);
        } else {
            return ty_fail(err, TY_EINVAL, flag,
                           "unknown flag %s (see trainyard serve --help)",
                           flag);
        }
        if (s != TY_OK)
            return s;
    }
    if (!*cfg->tls_cert != !*cfg->tls_key)
        return ty_fail(err, TY_EINVAL,
                       *cfg->tls_cert ? "--tls-key" : "--tls-cert",
                       "HTTPS needs both --tls-cert and --tls-key (%s is "
                       "missing)",
                       *cfg->tls_cert ? "--tls-key" : "--tls-cert");
    return TY_OK;
}

void config_usage(FILE *f)
{
    ty_config d;
    config_defaults(&d);
    fprintf(
        f,
        "Usage: trainyard serve [flags]\n"
        "\n"
        "Runs the trainyard REST API server. Its state lives in one data "
        "folder.\n"
        "On first start with an empty data folder it creates an admin API "
        "key,\n"
        "prints it once and writes it to <data>/admin.key (mode 0600), unless\n"
        "one is given (--admin-key-file, TRAINYARD_ADMIN_KEY).\n"
        "\n"
        "Flags (--flag value or --flag=value):\n"
        "  --listen ADDR:PORT        address to serve on; [v6addr]:port for "
        "IPv6,\n"
        "                            port 0 picks a free port (default %s)\n"
        "  --data DIR                data folder: database, blobs, job files\n"
        "                            (default %s)\n"
        "  --threads N               HTTP worker threads (default %d)\n"
        "  --max-jobs N              CPU training jobs (resources.gpu "
        "\"none\")\n"
        "                            run at once; GPU jobs run one per free "
        "GPU\n"
        "                            or MIG slice (default %d)\n"
        "  --worker-threads N        CPU threads per training job, 0 = all "
        "cores\n"
        "                            (default %d)\n"
        "  --max-upload-bytes SIZE   largest dataset upload (default %lluM)\n"
        "  --max-json-bytes SIZE     largest JSON request body (default "
        "%lluM)\n"
        "  --max-large-requests N    JSON bodies over 4M handled at once; "
        "more\n"
        "                            get 503 with Retry-After, 0 = no limit\n"
        "                            (default %d)\n"
        "  --max-fetch-bytes SIZE    largest file fetched from a URL (default "
        "%lluM)\n"
        "  --min-free-bytes SIZE     /readyz answers 503 while the data "
        "folder's\n"
        "                            disk has less free; 0 = no check "
        "(default %lluM)\n"
        "  --fetch-timeout SECONDS   time limit for fetching a URL (default "
        "%d)\n"
        "  --fetch-hosts LIST        hosts that dataset URLs may name, comma-\n"
        "                            separated; * allows any (default %s). "
        "With a\n"
        "                            list, redirects are not followed\n"
        "  --fetch-allow-networks LIST\n"
        "                            addresses or networks (10.0.0.0/8,\n"
        "                            127.0.0.1, fd00::/8, comma-separated) "
        "that\n"
        "                            URL fetches may reach although they are "
        "not\n"
        "                            public: loopback, private, link-local, "
        "CGNAT,\n"
        "                            multicast and reserved addresses are "
        "refused\n"
        "                            otherwise, on every redirect too "
        "(default:\n"
        "                            none)\n"
        "  --model-cache N           trained models kept loaded for "
        "predictions\n"
        "                            (default %d)\n"
        "  --kv-cache SIZE           the key/value cache of each language "
        "model\n"
        "                            generating here or on a CPU replica; "
        "a\n"
        "                            replica on a GPU or MIG slice takes "
        "90%%\n"
        "                            of the memory its model leaves free\n"
        "                            (default %lluM)\n"
        "  --connection-timeout SECONDS\n"
        "                            idle HTTP connections are closed after "
        "this\n"
        "                            (default %d)\n"
        "  --max-job-memory SIZE     refuse jobs whose training would take "
        "more\n"
        "                            memory than this (parameters, gradients,\n"
        "                            optimizer state, activations at the "
        "batch\n"
        "                            size, working memory); 0 = no limit\n"
        "                            (default %llu)\n"
        "  --train-device DEV        where training jobs run: auto, cpu, cuda\n"
        "                            (device 0) or cuda:N. auto is the first "
        "CUDA\n"
        "                            device when this binary has CUDA and one "
        "is\n"
        "                            present, else the CPU. A job that cannot\n"
        "                            fit the device's memory is refused at\n"
        "                            submit (default auto)\n"
        "  --serve-device DEV        where predictions, evaluations and "
        "KServe\n"
        "                            inference run: auto, cpu, cuda (device "
        "0)\n"
        "                            or cuda:N. auto runs each model on the\n"
        "                            device it was trained on when this "
        "server\n"
        "                            has it, else on the CPU (default auto)\n"
        "  --devices SRC             the GPU inventory jobs are scheduled on:\n"
        "                            auto (the driver, through NVML; none "
        "found\n"
        "                            is an empty inventory), none (a CPU-only\n"
        "                            host) or sim:FILE.json (simulated GPUs "
        "and\n"
        "                            MIG layouts, e.g. gpu/sim/h200-7x1g.json; "
        "an\n"
        "                            impossible layout stops the start)\n"
        "                            (default auto)\n"
        "  --heartbeat-timeout SECONDS\n"
        "                            a worker that prints nothing for this "
        "long\n"
        "                            is killed and its job retried (default "
        "%d)\n"
        "  --retry-backoff SECONDS   delay before retrying a crashed job; "
        "doubles\n"
        "                            with each attempt, at most 300 s\n"
        "                            (default %g)\n"
        "  --max-attempts N          runs a crashing job gets, unless its\n"
        "                            hyperparameters.max_attempts says "
        "(default %d)\n"
        "  --backfill-wait SECONDS   how long a tenant's first job may be "
        "passed\n"
        "                            by smaller jobs before the slices it "
        "needs\n"
        "                            are reserved for it (default %g)\n"
        "  --preempt on|off          whether a tenant below its fair share "
        "may\n"
        "                            preempt another's job (default on)\n"
        "  --preempt-wait SECONDS    how long a job waits before it may "
        "preempt\n"
        "                            (default %g)\n"
        "  --serving-preempt on|off  whether a serving replica that finds no "
        "free\n"
        "                            slice preempts a training job at once "
        "(it\n"
        "                            checkpoints and resumes later; default "
        "on)\n"
        "  --max-replicas N          serving replicas running at once on "
        "this\n"
        "                            server, GPU and CPU (default 16)\n"
        "  --tenant-replicas N       of those, the most one tenant may run "
        "at once\n"
        "                            (default half of --max-replicas, at "
        "least 1)\n"
        "  --replica-wait SECONDS    how long a request waits for a ready "
        "replica\n"
        "                            (a cold start, a replacement) before a "
        "503\n"
        "                            (default 120)\n"
        "  --executor local|slurm    where training workers run: child "
        "processes\n"
        "                            of this server (default local), or Slurm "
        "batch\n"
        "                            jobs submitted through slurmrestd (the "
        "GPU\n"
        "                            inventory is then the cluster's GRES; "
        "see\n"
        "                            docs/slurm.md)\n"
        "  --slurm-url URL           slurmrestd (default "
        "http://127.0.0.1:6820)\n"
        "  --slurm-api-version V     its API version (default v0.0.38)\n"
        "  --slurm-user NAME         the Slurm user jobs run as (required "
        "with\n"
        "                            --executor slurm)\n"
        "  --slurm-token-file FILE   a JWT for that user (scontrol token), "
        "re-read\n"
        "                            when it changes; or\n"
        "  --slurm-jwt-key FILE      the cluster's jwt_key: tokens are signed "
        "and\n"
        "                            renewed here\n"
        "  --slurm-partition P, --slurm-account A, --slurm-qos Q\n"
        "                            where jobs are submitted (default: "
        "Slurm's)\n"
        "  --slurm-worker-command PATH  trainyard's path on the nodes "
        "(default:\n"
        "                            this binary's path)\n"
        "  --slurm-server-url URL    this server as the nodes reach it "
        "(default:\n"
        "                            http://<--listen>)\n"
        "  --slurm-workdir DIR       the jobs' working folder on the nodes "
        "(default\n"
        "                            /tmp); each job makes a private folder "
        "in it\n"
        "  --slurm-ca-file FILE      the CA the workers check an https server "
        "with\n"
        "  --slurm-gpus cuda|sim     GPU jobs run on CUDA (default) or, for "
        "stand-in\n"
        "                            GRES (tests), compute on the CPU\n"
        "  --slurm-poll SECONDS      how often each job's state is read "
        "from\n"
        "                            slurmrestd (default 2; one request per "
        "job)\n"
        "  --slurm-time-limit MIN    each job's time limit (default: the "
        "partition's)\n"
        "  --fair-window SECONDS     how much history fair share remembers\n"
        "                            (default %g)\n"
        "  --events-ring N           live events kept in memory for SSE "
        "clients\n"
        "                            that resume with Last-Event-ID; an older "
        "id\n"
        "                            gets `event: reset` (default %d)\n"
        "  --tls-cert FILE           serve HTTPS with this PEM certificate "
        "(the\n"
        "                            server's first, then any intermediates);\n"
        "                            needs --tls-key. Plain HTTP is then not\n"
        "                            served on the port (default: plain HTTP)\n"
        "  --tls-key FILE            the PEM private key of --tls-cert\n"
        "  --max-connections N       open HTTP connections at most; 0 "
        "derives\n"
        "                            it from the open-file limit, which is "
        "raised\n"
        "                            to its hard limit at start (default 0)\n"
        "  --per-ip-connections N    open HTTP connections from one client\n"
        "                            address at most; 0 = no limit; behind "
        "a\n"
        "                            reverse proxy raise it or use 0 "
        "(default %d)\n"
        "  --header-timeout SECONDS  a client that has not sent a request's\n"
        "                            complete headers within this is "
        "dropped,\n"
        "                            however it trickles; 0 = no limit "
        "(default %d)\n"
        "  --body-timeout SECONDS    a request body must arrive within this "
        "after\n"
        "                            the headers, plus 1 s for every\n"
        "                            --body-min-rate bytes received; 0 = no "
        "limit\n"
        "                            (default %d)\n"
        "  --body-min-rate BYTES     see --body-timeout (default %d)\n"
        "  --request-timeout SECONDS a request body must arrive within this "
        "after\n"
        "                            the headers, whatever its rate; 0 = no "
        "limit\n"
        "                            (default %d)\n"
        "  --auth-fail-rate N        failed authentications per second "
        "allowed\n"
        "                            from one client address, after a burst "
        "of\n"
        "                            --auth-fail-burst; past that, 429 with\n"
        "                            Retry-After; 0 = no throttle (default "
        "%g)\n"
        "  --auth-fail-burst N       see --auth-fail-rate (default %d)\n"
        "  --work-threads N          threads for big predicts and "
        "evaluations,\n"
        "                            off the HTTP threads; 0 = one per core\n"
        "                            (default %d)\n"
        "  --serving-threads N       requests in flight to deployments' "
        "replicas,\n"
        "                            and text generations, at once (each "
        "waits on\n"
        "                            a thread of its own;\n"
        "                            default %d)\n"
        "  --tenant-thread-share PERCENT\n"
        "                            the most of the --serving-threads, and "
        "of the\n"
        "                            --work-threads, that one tenant's "
        "requests\n"
        "                            hold at once (at least one thread); the "
        "rest\n"
        "                            wait in that tenant's own queue, and a "
        "free\n"
        "                            thread serves the tenant holding the "
        "fewest.\n"
        "                            100 = no cap, for a server with one "
        "tenant\n"
        "                            (default %d)\n"
        "  --access-log-sample N     log one in N successful requests; every\n"
        "                            error is logged; 0 = errors only; "
        "metrics\n"
        "                            count every request (default %d)\n"
        "  --access-log FILE         the request log's file instead of "
        "stderr\n"
        "  --access-log-max-bytes SIZE  rotate --access-log to FILE.1 past "
        "this;\n"
        "                            0 = never (default %lluM)\n"
        "  --admin-key-file FILE     use the admin API key in FILE (e.g. a "
        "Docker\n"
        "                            secret) instead of generating one; the\n"
        "                            environment variable TRAINYARD_ADMIN_KEY\n"
        "                            does the same. `trainyard keygen` makes "
        "a\n"
        "                            key. A key not yet known joins the admin\n"
        "                            tenant; one revoked through the API "
        "stays\n"
        "                            revoked. Nothing is written to admin.key\n"
        "  -h, --help                show this help\n"
        "\n"
        "SIZE takes a number of bytes or a K, M, G suffix (powers of 1024).\n"
        "A cuda device named in --train-device or --serve-device that this\n"
        "binary or machine lacks is a startup error.\n"
        "SIGINT or SIGTERM shuts down gracefully: running jobs are stopped "
        "and\n"
        "queued again, to resume from their last checkpoint on the next "
        "start.\n",
        d.listen, d.data_dir, d.http_threads, d.max_jobs, d.worker_threads,
        (unsigned long long)(d.max_upload_bytes >> 20),
        (unsigned long long)(d.max_json_bytes >> 20), d.max_large_requests,
        (unsigned long long)(d.max_fetch_bytes >> 20),
        (unsigned long long)(d.min_free_bytes >> 20), d.fetch_timeout_s,
        d.fetch_hosts, d.model_cache_size,
        (unsigned long long)(d.kv_cache_bytes >> 20), d.connection_timeout_s,
        (unsigned long long)d.max_job_memory, d.heartbeat_timeout_s,
        d.retry_backoff_s, d.max_attempts, d.backfill_wait_s, d.preempt_wait_s,
        d.fair_window_s, d.events_ring, d.per_ip_connections,
        d.header_timeout_s, d.body_timeout_s, d.body_min_rate,
        d.request_timeout_s, d.auth_fail_rate, d.auth_fail_burst,
        d.work_threads, d.serving_threads, d.tenant_thread_share,
        d.access_log_sample,
        (unsigned long long)(d.access_log_max_bytes >> 20));
}
