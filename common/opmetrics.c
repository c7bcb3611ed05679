/* opmetrics.c - trainyard's metric families and update calls (see
 * opmetrics.h). */
#include "common/opmetrics.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static pthread_once_t once = PTHREAD_ONCE_INIT;
static metrics_registry *reg;
static opm_families fam;

/* Request latencies: 1 ms to 1 min. */
static const double http_buckets[] = {0.001, 0.0025, 0.005, 0.01, 0.025,
                                      0.05,  0.1,    0.25,  0.5,  1,
                                      2.5,   5,      10,    30,   60};
/* Queue waits: a tenth of a second to a day. */
static const double wait_buckets[] = {0.1, 0.5, 1,   5,    10,    30,
                                      60,  300, 900, 3600, 14400, 86400};
/* Predictions: a tenth of a millisecond to 10 s. */
static const double predict_buckets[] = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
    0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};

static const double batch_buckets[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 1024};

#define NB(a) (sizeof a / sizeof a[0])
#define LABELS(...) ((const char *const[]){__VA_ARGS__, NULL})

static void init(void)
{
    reg = metrics_registry_create();
    if (!reg)
        return;
    /* Ids of who owns what: summed away in the public scrape. */
    if (metrics_registry_private(reg, LABELS("tenant", "deployment", "job")) !=
        0) {
        metrics_registry_destroy(reg);
        reg = NULL;
        return;
    }
    fam.http_requests = metrics_family_add(
        reg, METRICS_COUNTER, "trainyard_http_requests_total",
        "HTTP requests served, by method, route template and status code.",
        LABELS("method", "route", "status"), NULL, 0);
    fam.http_duration = metrics_family_add(
        reg, METRICS_HISTOGRAM, "trainyard_http_request_duration_seconds",
        "Time from a request's headers to its completion, by method and "
        "route template.",
        LABELS("method", "route"), http_buckets, NB(http_buckets));
    fam.jobs = metrics_family_add(reg, METRICS_GAUGE, "trainyard_jobs",
                                  "Jobs in the store, by tenant id and state.",
                                  LABELS("tenant", "state"), NULL, 0);
    fam.queue_wait = metrics_family_add(
        reg, METRICS_HISTOGRAM, "trainyard_job_queue_wait_seconds",
        "Seconds from a job's submission to the start of its worker, "
        "observed at each start, by tenant id.",
        LABELS("tenant"), wait_buckets, NB(wait_buckets));
    fam.job_samples = metrics_family_add(
        reg, METRICS_GAUGE, "trainyard_job_samples_per_second",
        "Training throughput of each running job, from its last progress "
        "report.",
        LABELS("job", "tenant"), NULL, 0);
    fam.slices = metrics_family_add(
        reg, METRICS_GAUGE, "trainyard_slices",
        "Inventory slots jobs can be placed on, by MIG profile (\"gpu\" for "
        "a whole GPU).",
        LABELS("profile"), NULL, 0);
    fam.slices_in_use = metrics_family_add(
        reg, METRICS_GAUGE, "trainyard_slices_in_use",
        "Inventory slots held by a job, by MIG profile (\"gpu\" for a whole "
        "GPU).",
        LABELS("profile"), NULL, 0);
    fam.predict_duration = metrics_family_add(
        reg, METRICS_HISTOGRAM, "trainyard_predict_duration_seconds",
        "Time to serve a successful prediction, by endpoint (predict, "
        "evaluate, kserve_infer).",
        LABELS("endpoint"), predict_buckets, NB(predict_buckets));
    fam.gpu_info = metrics_family_add(
        reg, METRICS_GAUGE, "trainyard_gpu_info",
        "1 for each GPU in the inventory, with its name, model and uuid.",
        LABELS("gpu", "uuid", "name", "model"), NULL, 0);
    fam.cpu_kernels = metrics_family_add(
        reg, METRICS_GAUGE, "trainyard_cpu_kernels_info",
        "1, with the CPU engine's GEMM provider, the kernel set in use "
        "(core), its instruction set (isa), the best instruction set the "
        "CPU has (cpu_isa) and what the provider chose by itself (detected).",
        LABELS("provider", "core", "isa", "cpu_isa", "detected"), NULL, 0);
    fam.cpu_gemm = metrics_family_add(
        reg, METRICS_GAUGE, "trainyard_cpu_gemm_gflops",
        "Single-thread SGEMM rate (256x256x256) measured at the server's "
        "start, in GFLOP/s.",
        NULL, NULL, 0);
    fam.gpu_mem_total = metrics_family_add(
        reg, METRICS_GAUGE, "trainyard_gpu_memory_total_bytes",
        "A GPU's memory.", LABELS("gpu"), NULL, 0);
    fam.gpu_util = metrics_family_add(
        reg, METRICS_GAUGE, "trainyard_gpu_utilization_ratio",
        "A GPU's compute utilisation (0 to 1), where the driver reports it.",
        LABELS("gpu"), NULL, 0);
    fam.gpu_mem_util = metrics_family_add(
        reg, METRICS_GAUGE, "trainyard_gpu_memory_utilization_ratio",
        "A GPU's memory bandwidth utilisation (0 to 1), where the driver "
        "reports it.",
        LABELS("gpu"), NULL, 0);
    fam.gpu_temp = metrics_family_add(
        reg, METRICS_GAUGE, "trainyard_gpu_temperature_celsius",
        "A GPU's temperature, where the driver reports it.", LABELS("gpu"),
        NULL, 0);
    fam.deploy_requests = metrics_family_add(
        reg, METRICS_COUNTER, "trainyard_deployment_requests_total",
        "Requests to a serving deployment, by outcome (ok, error, rejected: "
        "over its rate or concurrency limit, answered 429).",
        LABELS("deployment", "tenant", "outcome"), NULL, 0);
    fam.deploy_latency = metrics_family_add(
        reg, METRICS_HISTOGRAM, "trainyard_deployment_latency_seconds",
        "A deployment's successful requests: total (admission to reply), "
        "queue (waiting in the replica's batcher) and compute (the batch's "
        "run), by phase.",
        LABELS("deployment", "phase"), predict_buckets, NB(predict_buckets));
    fam.deploy_batch = metrics_family_add(
        reg, METRICS_HISTOGRAM, "trainyard_deployment_batch_size",
        "Rows of the batch each request of a deployment ran in.",
        LABELS("deployment"), batch_buckets, NB(batch_buckets));
    fam.deploy_replicas = metrics_family_add(
        reg, METRICS_GAUGE, "trainyard_deployment_replicas",
        "A deployment's replicas by state (queued, starting, ready, "
        "draining).",
        LABELS("deployment", "tenant", "state"), NULL, 0);
    fam.gen_tokens = metrics_family_add(
        reg, METRICS_COUNTER, "trainyard_generate_tokens_total",
        "Tokens of text generation: the prompts' (prompt) and those written "
        "(generated).",
        LABELS("tenant", "kind"), NULL, 0);
    fam.gen_latency = metrics_family_add(
        reg, METRICS_HISTOGRAM, "trainyard_generate_latency_seconds",
        "Text generation: time to first token (ttft: the request's arrival "
        "to its first token), inter-token latency (itl) and whole requests "
        "(e2e), by phase.",
        LABELS("phase"), predict_buckets, NB(predict_buckets));
    fam.gen_sequences =
        metrics_family_add(reg, METRICS_GAUGE, "trainyard_generate_sequences",
                           "Sequences being generated now.", NULL, NULL, 0);
    fam.gen_waiting = metrics_family_add(
        reg, METRICS_GAUGE, "trainyard_generate_waiting",
        "Generation requests waiting for room in their model's key/value "
        "cache.",
        NULL, NULL, 0);
    fam.gen_kv_blocks = metrics_family_add(
        reg, METRICS_GAUGE, "trainyard_generate_kv_blocks",
        "Key/value cache blocks of the generation engines: held by "
        "sequences (used), in the pools (total), and free but still "
        "indexed for the prefix cache (cached).",
        LABELS("state"), NULL, 0);
    fam.gen_prefix = metrics_family_add(
        reg, METRICS_COUNTER, "trainyard_generate_prefix_cache_tokens_total",
        "Prompt tokens of generation whose keys and values came from the "
        "prefix cache (hit) and those computed (computed).",
        LABELS("kind"), NULL, 0);
    fam.usage_slices = metrics_family_add(
        reg, METRICS_COUNTER, "trainyard_usage_slice_seconds_total",
        "Compute-slice-seconds held by jobs (training) and serving replicas "
        "(serving): a MIG slice counts its compute slices, a whole GPU 7; "
        "GET /v1/usage has the accounting.",
        LABELS("tenant", "kind"), NULL, 0);
    fam.usage_cpu = metrics_family_add(
        reg, METRICS_COUNTER, "trainyard_usage_cpu_seconds_total",
        "CPU-place-seconds held by CPU jobs (a data-parallel gang counts "
        "its ranks) and CPU serving replicas.",
        LABELS("tenant", "kind"), NULL, 0);
    fam.gen_step_seqs = metrics_family_add(
        reg, METRICS_HISTOGRAM, "trainyard_generate_step_sequences",
        "Sequences each generation step ran together (continuous "
        "batching).",
        NULL, batch_buckets, NB(batch_buckets));
    fam.deploy_gen_tokens = metrics_family_add(
        reg, METRICS_COUNTER, "trainyard_deployment_generate_tokens_total",
        "Tokens of generation on a deployment's replicas: the prompts' "
        "(prompt) and those written (generated).",
        LABELS("deployment", "kind"), NULL, 0);
    fam.deploy_gen_latency = metrics_family_add(
        reg, METRICS_HISTOGRAM, "trainyard_deployment_generate_latency_seconds",
        "Generation on a deployment's replicas: time to first token (ttft) "
        "and inter-token latency (itl), as the server sees them.",
        LABELS("deployment", "phase"), predict_buckets, NB(predict_buckets));
    fam.deploy_gen_seqs = metrics_family_add(
        reg, METRICS_GAUGE, "trainyard_deployment_generate_sequences",
        "Sequences in a deployment's replicas' engines (running) and "
        "waiting for room in their caches (waiting), as their last "
        "heartbeats said.",
        LABELS("deployment", "state"), NULL, 0);
    fam.deploy_gen_kv = metrics_family_add(
        reg, METRICS_GAUGE, "trainyard_deployment_generate_kv_blocks",
        "Key/value cache blocks of a deployment's replicas: held by "
        "sequences (used), in the pools (total), and free but still "
        "indexed for the prefix cache (cached), as their last heartbeats "
        "said.",
        LABELS("deployment", "state"), NULL, 0);
    fam.gpu_power =
        metrics_family_add(reg, METRICS_GAUGE, "trainyard_gpu_power_watts",
                           "A GPU's power draw, where the driver reports it.",
                           LABELS("gpu"), NULL, 0);
}

metrics_registry *opm_registry(void)
{
    pthread_once(&once, init);
    return reg;
}

const opm_families *opm(void)
{
    pthread_once(&once, init);
    return &fam;
}

void opm_http_request(const char *method, const char *route, unsigned status,
                      double seconds)
{
    const opm_families *f = opm();
    char code[12];
    snprintf(code, sizeof code, "%u", status);
    metrics_add(f->http_requests, LABELS(method, route, code), 1);
    if (seconds >= 0)
        metrics_observe(f->http_duration, LABELS(method, route), seconds);
}

void opm_cpu_kernels(const char *provider, const char *core, const char *isa,
                     const char *cpu_isa, const char *detected,
                     double gemm_gflops)
{
    const opm_families *f = opm();
    metrics_set(f->cpu_kernels, LABELS(provider, core, isa, cpu_isa, detected),
                1);
    metrics_set(f->cpu_gemm, NULL, gemm_gflops);
}

void opm_job_started(const char *tenant, double queue_wait_s)
{
    metrics_observe(opm()->queue_wait, LABELS(tenant),
                    queue_wait_s > 0 ? queue_wait_s : 0);
}

void opm_job_samples_per_sec(const char *job, const char *tenant, double v)
{
    metrics_set(opm()->job_samples, LABELS(job, tenant), v);
}

void opm_job_ended(const char *job)
{
    metrics_remove(opm()->job_samples, 0, job);
}

void opm_predict(const char *endpoint, double seconds)
{
    metrics_observe(opm()->predict_duration, LABELS(endpoint), seconds);
}

void opm_deploy_request(const char *deployment, const char *tenant,
                        const char *outcome, double total_s, double queue_s,
                        double compute_s, unsigned batch_rows)
{
    const opm_families *f = opm();
    metrics_add(f->deploy_requests, LABELS(deployment, tenant, outcome), 1);
    if (total_s >= 0 && !strcmp(outcome, "ok"))
        metrics_observe(f->deploy_latency, LABELS(deployment, "total"),
                        total_s);
    if (queue_s >= 0)
        metrics_observe(f->deploy_latency, LABELS(deployment, "queue"),
                        queue_s);
    if (compute_s >= 0)
        metrics_observe(f->deploy_latency, LABELS(deployment, "compute"),
                        compute_s);
    if (batch_rows)
        metrics_observe(f->deploy_batch, LABELS(deployment), batch_rows);
}

void opm_deploy_replicas(const char *deployment, const char *tenant,
                         const char *state, int n)
{
    metrics_set(opm()->deploy_replicas, LABELS(deployment, tenant, state), n);
}

void opm_deploy_gen_token(const char *deployment, int first, unsigned prompt,
                          double seconds)
{
    const opm_families *f = opm();
    if (prompt)
        metrics_add(f->deploy_gen_tokens, LABELS(deployment, "prompt"),
                    prompt);
    metrics_add(f->deploy_gen_tokens, LABELS(deployment, "generated"), 1);
    metrics_observe(f->deploy_gen_latency,
                    LABELS(deployment, first ? "ttft" : "itl"), seconds);
}

void opm_deploy_gen_engines(const char *deployment, long running, long waiting,
                            long kv_used, long kv_total, long kv_cached)
{
    const opm_families *f = opm();
    metrics_set(f->deploy_gen_seqs, LABELS(deployment, "running"), running);
    metrics_set(f->deploy_gen_seqs, LABELS(deployment, "waiting"), waiting);
    metrics_set(f->deploy_gen_kv, LABELS(deployment, "used"), kv_used);
    metrics_set(f->deploy_gen_kv, LABELS(deployment, "total"), kv_total);
    metrics_set(f->deploy_gen_kv, LABELS(deployment, "cached"), kv_cached);
}

void opm_deploy_forget(const char *deployment)
{
    const opm_families *f = opm();
    metrics_remove(f->deploy_gen_tokens, 0, deployment);
    metrics_remove(f->deploy_gen_latency, 0, deployment);
    metrics_remove(f->deploy_gen_seqs, 0, deployment);
    metrics_remove(f->deploy_gen_kv, 0, deployment);
    metrics_remove(f->deploy_requests, 0, deployment);
    metrics_remove(f->deploy_latency, 0, deployment);
    metrics_remove(f->deploy_batch, 0, deployment);
    metrics_remove(f->deploy_replicas, 0, deployment);
}

double opm_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void opm_gen_sequence(int delta)
{
    metrics_add(opm()->gen_sequences, NULL, delta);
}

void opm_gen_prompt(const char *tenant, unsigned tokens)
{
    metrics_add(opm()->gen_tokens, LABELS(tenant, "prompt"), tokens);
}

void opm_gen_token(const char *tenant, int first, double seconds)
{
    const opm_families *f = opm();
    metrics_add(f->gen_tokens, LABELS(tenant, "generated"), 1);
    metrics_observe(f->gen_latency, LABELS(first ? "ttft" : "itl"), seconds);
}

void opm_gen_done(double seconds)
{
    metrics_observe(opm()->gen_latency, LABELS("e2e"), seconds);
}

void opm_gen_step(unsigned sequences)
{
    metrics_observe(opm()->gen_step_seqs, NULL, sequences);
}

void opm_gen_waiting(int delta)
{
    metrics_add(opm()->gen_waiting, NULL, delta);
}

void opm_gen_kv_blocks(long used_delta, long total_delta)
{
    const opm_families *f = opm();
    if (used_delta)
        metrics_add(f->gen_kv_blocks, LABELS("used"), (double)used_delta);
    if (total_delta)
        metrics_add(f->gen_kv_blocks, LABELS("total"), (double)total_delta);
}

void opm_gen_kv_cached(long delta)
{
    metrics_add(opm()->gen_kv_blocks, LABELS("cached"), (double)delta);
}

void opm_gen_prefix_cache(unsigned hit, unsigned computed)
{
    const opm_families *f = opm();
    metrics_add(f->gen_prefix, LABELS("hit"), hit);
    metrics_add(f->gen_prefix, LABELS("computed"), computed);
}

void opm_usage_add(const char *tenant, const char *kind, double slice_seconds,
                   double cpu_seconds)
{
    const opm_families *f = opm();
    if (slice_seconds > 0)
        metrics_add(f->usage_slices, LABELS(tenant, kind), slice_seconds);
    if (cpu_seconds > 0)
        metrics_add(f->usage_cpu, LABELS(tenant, kind), cpu_seconds);
}
