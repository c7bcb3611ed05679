/*
 * config.h - `trainyard serve` settings: defaults, command-line parsing and
 * the --help text. Every flag has a default, so `trainyard serve` alone runs.
 */
#ifndef TY_CONFIG_H
#define TY_CONFIG_H

#include <limits.h>
#include <stdint.h>
#include <stdio.h>

#include "common/ty.h"
#include "node/placement.h"

typedef struct {
    char listen[128]; /* as given: "127.0.0.1:8080", "[::1]:0" */
    char host[64];    /* the address part */
    int port;         /* 0 = any free port */
    int ipv6;
    char data_dir[PATH_MAX];
    int http_threads;          /* libmicrohttpd thread-pool size */
    int max_jobs;              /* training workers running at once */
    int worker_threads;        /* BLAS threads per worker; 0 = all cores */
    uint64_t max_upload_bytes; /* per dataset upload */
    uint64_t max_json_bytes;   /* per JSON request body */
    int max_large_requests;    /* JSON bodies over 4 MB at once; 0 = any */
    uint64_t max_fetch_bytes;  /* per file fetched from a URL */
    uint64_t min_free_bytes;   /* /readyz is not ready while the data folder's
                                  disk has less free; 0 = no check */
    int fetch_timeout_s;
    char fetch_hosts[1024]; /* hosts dataset URLs may name; "*" = any */
    /* non-public addresses URL fetches may reach (common/fetch.h); "" = none */
    char fetch_allow_networks[1024];
    int model_cache_size;       /* trained models kept loaded for predict */
    uint64_t kv_cache_bytes;    /* a generation engine's key/value cache: in
                                    this server and on CPU replicas */
    int connection_timeout_s;   /* idle HTTP connections are closed after */
    uint64_t max_job_memory;    /* bytes a job's training may take from its
                                    backend (train_memory); 0 = no limit */
    int serve_device;           /* where predictions run: PLACE_DEVICE_AUTO
                                    (the model's training device when this
                                    server has it, else the CPU), -1 the
                                    CPU, else CUDA device N */
    int train_device;           /* where jobs train, as given: AUTO, -1 the
                                    CPU, or CUDA device N; resolved at
                                    startup (place_device_open) */
    char devices[PATH_MAX + 8]; /* the device inventory (--devices): "auto"
                                    (NVML), "none", or "sim:<file.json>";
                                    opened at startup (inv_open) */
    /* The scheduler and the job lifecycle (jobs/service.h, sched/sched.h). */
    int heartbeat_timeout_s; /* a worker silent this long is killed and
                                    retried */
    double retry_backoff_s;  /* first retry's delay; doubles per attempt */
    int max_attempts;        /* runs a job gets when it keeps crashing,
                                    unless hyperparameters.max_attempts */
    double backfill_wait_s;  /* sched_config.backfill_wait */
    double preempt_wait_s;   /* sched_config.preempt_wait */
    int preempt;             /* sched_config.preempt */
    int serving_preempt;     /* sched_config.serving_preempt */
    int max_replicas;        /* serving replicas at once */
    int tenant_replicas;     /* one tenant's at once; -1: half of
                                max_replicas, at least 1 */
    double replica_wait_s;   /* a request's wait for a ready replica */
    double fair_window_s;    /* sched_config.fair_window */
    int events_ring;         /* live events kept for Last-Event-ID
                                    resumes (events/hub.h) */
    char tls_cert[PATH_MAX]; /* PEM certificate (chain) for HTTPS; empty
                                    = plain HTTP. Set with tls_key. */
    char tls_key[PATH_MAX];  /* PEM private key for HTTPS */
    /* Slow and hostile clients (server/guard.h). */
    int max_connections;       /* open HTTP connections; 0 = derived from
                                    the file limit at start */
    int per_ip_connections;    /* from one client address; 0 = no limit */
    int header_timeout_s;      /* a request's headers within; 0 = none */
    int body_timeout_s;        /* its body within this, plus 1 s per */
    int body_min_rate;         /* this many bytes received; 0 = none */
    int request_timeout_s;     /* the body within this at most; 0 = none */
    double auth_fail_rate;     /* failed authentications refilled per second,
                                    per client address; 0 = no throttle */
    int auth_fail_burst;       /* failed authentications allowed at once */
    int work_threads;          /* big predicts, evaluations; 0 = one per core */
    int serving_threads;       /* requests waiting on replicas at once */
    int tenant_thread_share;   /* percent of the work and serving threads
                                  one tenant may hold at once, 1..100 */
    int access_log_sample;     /* one line per N successful requests;
                                        0 = errors only */
    char access_log[PATH_MAX]; /* the request log's file; "" = stderr */
    uint64_t access_log_max_bytes; /* rotate it past this; 0 = never */
    char admin_key_file[PATH_MAX]; /* a given admin key (auth_key_given);
                                    empty = TRAINYARD_ADMIN_KEY or a
                                    generated one */
    /* Where training workers run (jobs/executor.h): 0 local child
     * processes, 1 Slurm through slurmrestd (--executor slurm). */
    int executor_slurm;
    char slurm_url[512];             /* slurmrestd's base URL */
    char slurm_api_version[16];      /* "v0.0.38" */
    char slurm_user[64];             /* the Slurm user jobs run as */
    char slurm_token_file[PATH_MAX]; /* a JWT (scontrol token), re-read */
    char slurm_jwt_key[PATH_MAX];    /* or: sign JWTs with the cluster key */
    char slurm_partition[64], slurm_account[64], slurm_qos[64];
    char slurm_worker_command[PATH_MAX]; /* trainyard on the nodes;
                                            "" = this binary's path */
    char slurm_server_url[512];          /* this server as the nodes reach it;
                                     "" = from --listen */
    char slurm_workdir[PATH_MAX];        /* the jobs' working folder on nodes */
    char slurm_ca_file[PATH_MAX];        /* the server's CA, for https */
    int slurm_gpu_sim;        /* GPU jobs compute on the CPU (stand-in
                                     GRES: tests) */
    double slurm_poll_s;      /* job state polling interval */
    int slurm_time_limit_min; /* a job's time limit; 0 partition's */
} ty_config;

/* Fills cfg with the defaults. */
void config_defaults(ty_config *cfg);

/* Parses `serve` flags (argv[0] is "serve"). Returns TY_OK, or TY_EINVAL
 * with a message naming the flag. *want_help is set for --help. */
ty_status config_parse_serve(int argc, char **argv, ty_config *cfg,
                             int *want_help, ty_err *err);

/* Splits "host:port" or "[v6]:port" into cfg->host/port/ipv6. */
ty_status config_parse_listen(const char *s, ty_config *cfg, ty_err *err);

/* Parses sizes like "1048576", "64K", "512M", "2G" (powers of 1024). */
ty_status config_parse_size(const char *s, uint64_t *out);

/* Prints the `serve` usage with every flag and its default. */
void config_usage(FILE *f);

#endif
