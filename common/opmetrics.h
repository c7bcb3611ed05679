/*
 * opmetrics.h - the server's operator metrics: one process-wide registry
 * (common/metrics.h) with trainyard's families, and the small calls the
 * request path, the job runner and the predict handlers make to update
 * them. GET /metrics (api/metrics.c) refreshes the families read from the
 * store and the inventory at scrape time and renders the registry.
 *
 * Label values are bounded: routes are the routing table's templates
 * ("/v1/jobs/{id}"), never raw paths; a job's series leave when it ends.
 * The labels tenant, deployment and job are the registry's private labels
 * (metrics_registry_private): the public rendering (metrics_render_public)
 * sums every family over them, so it names no tenant, deployment or job.
 * Every call is safe from any thread; the registry is made on first use and
 * lives until the process exits. Out of memory, an update is dropped.
 */
#ifndef TY_OPMETRICS_H
#define TY_OPMETRICS_H

#include "common/metrics.h"

typedef struct {
    metrics_family *http_requests;    /* counter {method, route, status} */
    metrics_family *http_duration;    /* histogram {method, route} */
    metrics_family *jobs;             /* gauge {tenant, state} */
    metrics_family *queue_wait;       /* histogram {tenant} */
    metrics_family *job_samples;      /* gauge {job, tenant} */
    metrics_family *slices;           /* gauge {profile} */
    metrics_family *slices_in_use;    /* gauge {profile} */
    metrics_family *predict_duration; /* histogram {endpoint} */
    metrics_family *gpu_info;         /* gauge {gpu, uuid, name, model} */
    metrics_family *cpu_kernels;      /* gauge {provider, core, isa, ...} */
    metrics_family *cpu_gemm;         /* gauge: measured SGEMM GFLOP/s */
    metrics_family *gpu_mem_total;    /* gauge {gpu} */
    metrics_family *gpu_util;         /* gauge {gpu} */
    metrics_family *gpu_mem_util;     /* gauge {gpu} */
    metrics_family *gpu_temp;         /* gauge {gpu} */
    metrics_family *gpu_power;        /* gauge {gpu} */
    metrics_family *deploy_requests;  /* counter {deployment, tenant,
                                         outcome} */
    metrics_family *deploy_latency;   /* histogram {deployment, phase} */
    metrics_family *deploy_batch;     /* histogram {deployment} */
    metrics_family *deploy_replicas;  /* gauge {deployment, tenant, state} */
    metrics_family *gen_tokens;       /* counter {tenant, kind} */
    metrics_family *gen_latency;      /* histogram {phase} */
    metrics_family *gen_sequences;    /* gauge: generating now */
    metrics_family *gen_step_seqs;    /* histogram: sequences per step */
    metrics_family *deploy_gen_tokens;  /* counter {deployment, kind} */
    metrics_family *deploy_gen_latency; /* histogram {deployment, phase} */
    metrics_family *deploy_gen_seqs;    /* gauge {deployment, state} */
    metrics_family *deploy_gen_kv;      /* gauge {deployment, state} */
    metrics_family *gen_waiting;      /* gauge: requests waiting for cache */
    metrics_family *gen_kv_blocks;    /* gauge: cache blocks by state */
    metrics_family *gen_prefix;       /* counter {kind}: prompt tokens */
    metrics_family *usage_slices;     /* counter {tenant, kind} */
    metrics_family *usage_cpu;        /* counter {tenant, kind} */
} opm_families;

/* The registry and its families; NULL members only when out of memory at
 * the first call (updates to them are then no-ops). */
metrics_registry *opm_registry(void);
const opm_families *opm(void);

/* A finished HTTP request: route is the matched template ("unmatched" for
 * a 404/405 from the router), status the code sent, seconds its duration
 * (negative: counted but not timed, as for an event stream). */
void opm_http_request(const char *method, const char *route, unsigned status,
                      double seconds);

/* A job started on a worker after waiting queue_wait_s since submission. */
void opm_job_started(const char *tenant, double queue_wait_s);

/* A running job's latest training throughput. */
void opm_job_samples_per_sec(const char *job, const char *tenant, double v);

/* A job's worker exited: its per-job series leave. */
void opm_job_ended(const char *job);

/* The CPU engine's kernels (cpu_kernels_get()) and their measured SGEMM
 * rate, set once at the server's start. */
void opm_cpu_kernels(const char *provider, const char *core, const char *isa,
                     const char *cpu_isa, const char *detected,
                     double gemm_gflops);

/* Monotonic seconds, to time what opm_predict reports. */
double opm_now(void);

/* A prediction served: endpoint "predict", "evaluate" or "kserve_infer". */
void opm_predict(const char *endpoint, double seconds);

/* A request to a serving deployment ended: outcome "ok", "error" or
 * "rejected"; seconds (negative: not known) of the whole request, its
 * queue and compute in the replica; batch_rows (0: not known) of its
 * batch. */
void opm_deploy_request(const char *deployment, const char *tenant,
                        const char *outcome, double total_s, double queue_s,
                        double compute_s, unsigned batch_rows);

/* A deployment's replicas in state. */
void opm_deploy_replicas(const char *deployment, const char *tenant,
                         const char *state, int n);

/* A deleted deployment's series leave. */
void opm_deploy_forget(const char *deployment);

/* Generation on a deployment's replicas: a token the server took (the
 * first, with the prompt's tokens: time to first token; then inter-token
 * latency), and what its replicas' engines hold now (their heartbeats). */
void opm_deploy_gen_token(const char *deployment, int first, unsigned prompt,
                          double seconds);
void opm_deploy_gen_engines(const char *deployment, long running,
                            long waiting, long kv_used, long kv_total,
                            long kv_cached);

/* Text generation (serve/generate.c): a sequence started (+1) or ended
 * (-1); its prompt's tokens once it ran; each token written with the
 * seconds since the request came (the first: time to first token) or
 * since the previous token (inter-token latency); and the whole request's
 * seconds when it ended. */
void opm_gen_sequence(int delta);
void opm_gen_prompt(const char *tenant, unsigned tokens);
void opm_gen_token(const char *tenant, int first, double seconds);
void opm_gen_done(double seconds);
/* An engine step ran rows of this many sequences (continuous batching). */
void opm_gen_step(unsigned sequences);
/* Requests waiting for an engine's cache: +1 when one queues, -1 when it
 * leaves the queue. */
void opm_gen_waiting(int delta);
/* The engines' key/value cache blocks: the change in those held by
 * sequences (used) and in the pools' blocks (total). */
void opm_gen_kv_blocks(long used_delta, long total_delta);
/* The change in the blocks no sequence holds whose tokens stay indexed
 * for the prefix cache (cached: free for admission, evicted the one
 * unused longest first when the pool needs room). */
void opm_gen_kv_cached(long delta);
/* A sequence joined an engine: its prompt's tokens found in the prefix
 * cache (hit) and those it computes (computed). */
void opm_gen_prefix_cache(unsigned hit, unsigned computed);

/* Usage accounting (jobs/usage.c): compute-slice-seconds and CPU-place-
 * seconds a tenant's runs of kind ("training", "serving") held since the
 * last call. The public scrape sums them over tenants. */
void opm_usage_add(const char *tenant, const char *kind, double slice_seconds,
                   double cpu_seconds);

#endif
