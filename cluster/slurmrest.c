/*
 * slurmrest.c - a client of slurmrestd (see slurmrest.h).
 *
 * Three parts: the token (a file re-read when it changes, or HS256 signed
 * here), the HTTP call (one curl easy handle per call, no lock held while
 * it waits), and the JSON of each API version behind a table of functions
 * (slurmrest_api), so that a new version is a new table and nothing else.
 *
 * What v0.0.38 (Slurm 22.05.8, as Debian 12 ships it) does, read from its
 * served OpenAPI document (GET /openapi/v3) and measured on a live daemon
 * (tests/slurm/cluster.sh; the documents are in tests/slurm/data/v0.0.38):
 *
 *   - Cancel and signal are one call: DELETE /slurm/v0.0.38/job/{id} with an
 *     optional query `signal`, a POSIX signal NAME without "SIG" (the schema
 *     v0.0.38_signal: HUP INT QUIT ABRT KILL ALRM TERM USR1 USR2 URG CONT
 *     STOP TSTP TTIN TTOU), not a number. Without it Slurm cancels (its
 *     messages say "signal 9"); the job ends CANCELLED, after SIGTERM,
 *     KillWait, then SIGKILL.
 *   - ?signal=USR1 on a running batch job DOES reach the batch script: a
 *     bash script that traps USR1 ran its trap (and its running child,
 *     `sleep`, got USR1 too: every process of the job is signalled). Its
 *     job then ended as the script chose (exit 42: FAILED, exit_code 10752).
 *   - DELETE of a job that has ended (still known) answers 200, no errors.
 *   - exit_code (GET job) is an integer and the raw wait status: `exit 3`
 *     is 768 (3 << 8), FAILED with state_reason "NonZeroExitCode"; a
 *     cancelled job is 15 (SIGTERM in the low 7 bits), CANCELLED with
 *     state_reason "None"; a script killed by SIGKILL is 9, FAILED with
 *     state_reason "JobLaunchFailure". While pending or running it is 0:
 *     meaningless until the job ends. derived_exit_code is the same form.
 *   - state_reason is a string: "None" while running or after a normal end,
 *     "Resources"/"Priority" while pending, "NonZeroExitCode" after a
 *     failure.
 *   - nodes is a string: "" while pending, then the hostlist ("vm").
 *   - A job's GRES request is in tres_per_node as "gres:gpu:1g.18gb:1"
 *     (the "gres:" prefix per entry), in every state; gres_detail, an array
 *     of strings, holds the allocation only while the job runs
 *     (["gpu:1g.18gb:2(IDX:0-1)"]) and is [] pending and after the end;
 *     tres_alloc_str ("cpu=1,node=1,billing=1") does not name GRES without
 *     accounting. slurm_job_info.gres is therefore the request.
 *   - GET nodes: nodes[].gres "gpu:1g.18gb:7", gres_used
 *     "gpu:1g.18gb:0(IDX:N/A)" idle, "gpu:1g.18gb:2(IDX:0-1)" with a job
 *     holding two, state lower case ("idle", "mixed"), cpus,
 *     real_memory (MB), partitions an array of names, tres
 *     "cpu=8,mem=19284M,billing=8" (no gres/gpu without accounting).
 *   - Errors: HTTP 500 with an "errors" array for what Slurm refuses, e.g.
 *     {"error_code": 2014, "error": "Requested node configuration is not
 *     available"} for gpu:1g.18gb:8 of 7 at submit; an unknown job id is
 *     {"error_number": 2017, "error": "Invalid job id specified",
 *     "description": "Unable to find JobId=999999"}. The key is
 *     error_number in some answers and error_code in others. A job without
 *     "environment" is HTTP 400, "environment must be set" (2127).
 *   - Auth: a missing token is HTTP 401, body "Authentication failure" (not
 *     JSON); a wrong token is HTTP 500 with error_number -1, "Unspecified
 *     error" ("slurmctld config is unable to load" or "Unable to find
 *     JobId=1"): slurmctld refused the credential. Both make the client
 *     take a fresh token and try once more. A stopped slurmctld gives
 *     the very same answer (error_number -1, HTTP 500), so -1 is TY_EIO
 *     whose message names both causes.
 *   - A job waiting for slices: PENDING, state_reason "Resources".
 */
#include "cluster/slurmrest.h"

#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cluster/slurmrest_internal.h"
#include "common/sha256.h"

#define SR_DEFAULT_VERSION "v0.0.38"
#define SR_DEFAULT_LIFESPAN_S 1800
#define SR_DEFAULT_TIMEOUT_S 10
#define SR_TOKEN_MAX 4096
#define SR_KEY_MAX (64 * 1024)
#define SR_BODY_MAX (64u << 20) /* a /nodes answer of a big cluster */

/* ---------------------------------------------------------------- JWT -- */

void slurmrest_hmac_sha256(const uint8_t *key, size_t key_len,
                           const void *msg, size_t len, uint8_t out[32])
{
    uint8_t k[64] = {0}, pad[64], inner[32];
    if (key_len > 64)
        sha256_digest(key, key_len, k);
    else
        memcpy(k, key, key_len);
    sha256_ctx c;
    for (int i = 0; i < 64; i++)
        pad[i] = k[i] ^ 0x36;
    sha256_init(&c);
    sha256_update(&c, pad, 64);
    sha256_update(&c, msg, len);
    sha256_final(&c, inner);
    for (int i = 0; i < 64; i++)
        pad[i] = k[i] ^ 0x5c;
    sha256_init(&c);
    sha256_update(&c, pad, 64);
    sha256_update(&c, inner, 32);
    sha256_final(&c, out);
}

size_t slurmrest_base64url(const uint8_t *in, size_t n, char *out, size_t cap)
{
    static const char tab[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    size_t need = n / 3 * 4 + (n % 3 ? n % 3 + 1 : 0);
    if (need + 1 > cap)
        return 0;
    size_t o = 0, i = 0;
    for (; i + 2 < n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 |
                     in[i + 2];
        out[o++] = tab[v >> 18 & 63];
        out[o++] = tab[v >> 12 & 63];
        out[o++] = tab[v >> 6 & 63];
        out[o++] = tab[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)in[i] << 16;
        out[o++] = tab[v >> 18 & 63];
        out[o++] = tab[v >> 12 & 63];
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8;
        out[o++] = tab[v >> 18 & 63];
        out[o++] = tab[v >> 12 & 63];
        out[o++] = tab[v >> 6 & 63];
    }
    out[o] = '\0';
    return o;
}

static int plain_name(const char *s)
{
    if (!s || !*s)
        return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '.' && *s != '_' &&
            *s != '-')
            return 0;
    return 1;
}

ty_status slurmrest_jwt_sign(const uint8_t *key, size_t key_len,
                             const char *user, long iat, long exp, char *out,
                             size_t cap, ty_err *err)
{
    if (!plain_name(user) || strlen(user) > 64)
        return ty_fail(err, TY_EINVAL, "user",
                       "the Slurm user name must be 1-64 of A-Z a-z 0-9 . _ -");
    static const char header[] = "{\"alg\":\"HS256\",\"typ\":\"JWT\"}";
    char claims[160];
    snprintf(claims, sizeof claims, "{\"exp\":%ld,\"iat\":%ld,\"sun\":\"%s\"}",
             exp, iat, user);
    char signing[512];
    size_t h = slurmrest_base64url((const uint8_t *)header, strlen(header),
                                   signing, sizeof signing);
    if (!h)
        return ty_fail(err, TY_EINVAL, NULL, "JWT buffer too small");
    signing[h] = '.';
    size_t p = slurmrest_base64url((const uint8_t *)claims, strlen(claims),
                                   signing + h + 1, sizeof signing - h - 1);
    if (!p)
        return ty_fail(err, TY_EINVAL, NULL, "JWT buffer too small");
    size_t len = h + 1 + p;
    uint8_t mac[32];
    slurmrest_hmac_sha256(key, key_len, signing, len, mac);
    char sig[48];
    slurmrest_base64url(mac, sizeof mac, sig, sizeof sig);
    int w = snprintf(out, cap, "%s.%s", signing, sig);
    if (w < 0 || (size_t)w >= cap)
        return ty_fail(err, TY_EINVAL, NULL, "JWT buffer too small");
    return TY_OK;
}

/* --------------------------------------------------------- the states -- */

static const char *const state_names[] = {
    [SLURM_ST_UNKNOWN] = "UNKNOWN",
    [SLURM_ST_PENDING] = "PENDING",
    [SLURM_ST_RUNNING] = "RUNNING",
    [SLURM_ST_SUSPENDED] = "SUSPENDED",
    [SLURM_ST_COMPLETING] = "COMPLETING",
    [SLURM_ST_COMPLETED] = "COMPLETED",
    [SLURM_ST_CANCELLED] = "CANCELLED",
    [SLURM_ST_FAILED] = "FAILED",
    [SLURM_ST_TIMEOUT] = "TIMEOUT",
    [SLURM_ST_NODE_FAIL] = "NODE_FAIL",
    [SLURM_ST_PREEMPTED] = "PREEMPTED",
    [SLURM_ST_BOOT_FAIL] = "BOOT_FAIL",
    [SLURM_ST_DEADLINE] = "DEADLINE",
    [SLURM_ST_OUT_OF_MEMORY] = "OUT_OF_MEMORY",
};
_Static_assert(TY_ARRAY_LEN(state_names) == SLURM_ST_OUT_OF_MEMORY + 1,
               "a name for every slurm_state");

const char *slurm_state_name(slurm_state st)
{
    if ((int)st < 0 || (size_t)st >= TY_ARRAY_LEN(state_names))
        return "UNKNOWN";
    return state_names[st];
}

int slurm_state_terminal(slurm_state st)
{
    return st >= SLURM_ST_COMPLETED;
}

slurm_state slurm_state_parse(const char *name)
{
    if (!name)
        return SLURM_ST_UNKNOWN;
    size_t n = strcspn(name, "+ ");
    for (size_t i = 1; i < TY_ARRAY_LEN(state_names); i++)
        if (strlen(state_names[i]) == n && !strncmp(name, state_names[i], n))
            return (slurm_state)i;
    return SLURM_ST_UNKNOWN;
}

/* -------------------------------------------------------- v0.0.38 JSON -- */

static void copy_str(char *dst, size_t n, const json_t *v)
{
    const char *s = json_is_string(v) ? json_string_value(v) : "";
    snprintf(dst, n, "%s", s);
}

ty_status slurmrest_v0038_errors(const json_t *doc, ty_err *err)
{
    const json_t *errs = json_object_get(doc, "errors");
    if (!json_is_array(errs) || json_array_size(errs) == 0)
        return TY_OK;
    const json_t *e = json_array_get(errs, 0);
    const json_t *num = json_object_get(e, "error_number");
    if (!json_is_integer(num))
        num = json_object_get(e, "error_code");
    long code = json_is_integer(num) ? (long)json_integer_value(num) : -1;
    const char *text = json_string_value(json_object_get(e, "error"));
    const char *desc = json_string_value(json_object_get(e, "description"));
    char msg[400];
    snprintf(msg, sizeof msg, "%s%s%s (Slurm error %ld)",
             text ? text : "an error without text",
             desc && *desc ? ": " : "", desc ? desc : "", code);
    /* slurm_errno.h: 2017 ESLURM_INVALID_JOB_ID; 1000-1999 communication
     * with slurmctld; -1 (SLURM_ERROR) is what slurmrestd says when
     * slurmctld refuses the token. */
    if (code == 2017)
        return ty_fail(err, TY_ENOTFOUND, NULL, "%s", msg);
    if (code == -1 || (code >= 1000 && code < 2000))
        return ty_fail(err, TY_EIO, NULL,
                       "slurmrestd: %s (slurmctld unreachable, or it refused "
                       "the auth token)",
                       msg);
    return ty_fail(err, TY_EINVAL, NULL, "Slurm refused: %s", msg);
}

/* DELETE .../job/{id}: ESLURM_ALREADY_DONE (2021) means the job has
 * ended, which is what a cancel wants. */
static ty_status v0038_cancel_reply(const json_t *doc, ty_err *err)
{
    const json_t *e = json_array_get(json_object_get(doc, "errors"), 0);
    const json_t *num = json_object_get(e, "error_number");
    if (!json_is_integer(num))
        num = json_object_get(e, "error_code");
    if (json_is_integer(num) && json_integer_value(num) == 2021)
        return TY_OK;
    return slurmrest_v0038_errors(doc, err);
}

/* GET .../ping: pings[].ping is "UP" for a slurmctld that answers. */
static ty_status v0038_ping_reply(const json_t *doc, ty_err *err)
{
    ty_status s = slurmrest_v0038_errors(doc, err);
    if (s != TY_OK)
        return s;
    const json_t *p = json_array_get(json_object_get(doc, "pings"), 0);
    const char *up = json_string_value(json_object_get(p, "ping"));
    if (!up || strcmp(up, "UP"))
        return ty_fail(err, TY_EIO, NULL, "slurmctld is %s (ping)",
                       up ? up : "not answering");
    return TY_OK;
}

/* SIGUSR1 -> "USR1": the names v0.0.38_signal allows. */
static const char *v0038_signal_name(int sig)
{
    static const struct {
        int sig;
        const char *name;
    } tab[] = {
        {SIGHUP, "HUP"},   {SIGINT, "INT"},   {SIGQUIT, "QUIT"},
        {SIGABRT, "ABRT"}, {SIGKILL, "KILL"}, {SIGALRM, "ALRM"},
        {SIGTERM, "TERM"}, {SIGUSR1, "USR1"}, {SIGUSR2, "USR2"},
        {SIGURG, "URG"},   {SIGCONT, "CONT"}, {SIGSTOP, "STOP"},
        {SIGTSTP, "TSTP"}, {SIGTTIN, "TTIN"}, {SIGTTOU, "TTOU"},
    };
    for (size_t i = 0; i < TY_ARRAY_LEN(tab); i++)
        if (tab[i].sig == sig)
            return tab[i].name;
    return NULL;
}

/* The paths, under /slurm/v0.0.38. Cancel and signal are one DELETE with
 * the signal's name in the query. 0, or TY_EINVAL for a signal v0.0.38
 * cannot name. */
static void v0038_job_path(long job_id, char *buf, size_t n)
{
    snprintf(buf, n, "/job/%ld", job_id);
}

static ty_status v0038_cancel_path(long job_id, int sig, char *buf, size_t n,
                                   ty_err *err)
{
    if (sig == 0) {
        snprintf(buf, n, "/job/%ld", job_id);
        return TY_OK;
    }
    const char *name = v0038_signal_name(sig);
    if (!name)
        return ty_fail(err, TY_EINVAL, "signal",
                       "slurmrestd v0.0.38 cannot send signal %d", sig);
    snprintf(buf, n, "/job/%ld?signal=%s", job_id, name);
    return TY_OK;
}

/* Whether an answer (HTTP >= 500) is slurmctld refusing the token: its
 * first error is error_number -1. A stopped slurmctld answers the same;
 * one more try with a fresh token costs little then. */
static int v0038_token_refused(long http, const json_t *doc)
{
    if (http < 500)
        return 0;
    const json_t *e = json_array_get(json_object_get(doc, "errors"), 0);
    const json_t *num = json_object_get(e, "error_number");
    return json_is_integer(num) && json_integer_value(num) == -1;
}


static int set_str(json_t *o, const char *key, const char *v)
{
    if (!v || !*v)
        return 0;
    return json_object_set_new(o, key, json_string(v));
}

json_t *slurmrest_v0038_submit_body(const slurm_submit *s, ty_status *st,
                                    ty_err *err)
{
    *st = TY_OK;
    if (!s->script || !*s->script) {
        *st = ty_fail(err, TY_EINVAL, "script", "a job needs a script");
        return NULL;
    }
    if (!s->env || !s->env[0]) {
        *st = ty_fail(err, TY_EINVAL, "env",
                      "a job needs at least one environment entry (v0.0.38 "
                      "refuses a job without)");
        return NULL;
    }
    json_t *body = json_object(), *job = json_object(), *env = json_object();
    int bad = !body || !job || !env;
    for (size_t i = 0; !bad && s->env[i]; i++) {
        const char *eq = strchr(s->env[i], '=');
        if (!eq || eq == s->env[i]) {
            json_decref(body);
            json_decref(job);
            json_decref(env);
            *st = ty_fail(err, TY_EINVAL, "env", "environment entry '%s' is "
                          "not NAME=value", s->env[i]);
            return NULL;
        }
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(eq - s->env[i]), s->env[i]);
        bad |= json_object_set_new(env, name, json_string(eq + 1));
    }
    if (bad)
        goto oom;
    bad |= set_str(body, "script", s->script);
    bad |= set_str(job, "name", s->name);
    bad |= set_str(job, "current_working_directory", s->cwd);
    bad |= set_str(job, "standard_output", s->stdout_path);
    bad |= set_str(job, "standard_error", s->stdout_path);
    bad |= set_str(job, "partition", s->partition);
    bad |= set_str(job, "account", s->account);
    bad |= set_str(job, "qos", s->qos);
    bad |= set_str(job, "gres", s->gres);
    if (s->cpus > 0)
        bad |= json_object_set_new(job, "cpus_per_task",
                                   json_integer(s->cpus));
    if (s->memory_mb > 0)
        bad |= json_object_set_new(job, "memory_per_node",
                                   json_integer((json_int_t)s->memory_mb));
    if (s->time_limit_min > 0)
        bad |= json_object_set_new(job, "time_limit",
                                   json_integer(s->time_limit_min));
    bad |= json_object_set_new(job, "environment", env);
    env = NULL;
    bad |= json_object_set_new(body, "job", job);
    job = NULL;
    if (bad)
        goto oom;
    return body;
oom:
    json_decref(body);
    json_decref(job);
    json_decref(env);
    *st = ty_fail(err, TY_ENOMEM, NULL, "out of memory for a job submission");
    return NULL;
}

ty_status slurmrest_v0038_submit_reply(const json_t *doc, long *job_id,
                                       ty_err *err)
{
    ty_status s = slurmrest_v0038_errors(doc, err);
    if (s != TY_OK)
        return s;
    const json_t *id = json_object_get(doc, "job_id");
    if (!json_is_integer(id) || json_integer_value(id) <= 0)
        return ty_fail(err, TY_EIO, NULL,
                       "slurmrestd's submit answer has no job_id");
    *job_id = (long)json_integer_value(id);
    return TY_OK;
}

/* tres_per_node "gres:gpu:1g.18gb:1,gres:..." -> "gpu:1g.18gb:1,...". */
static void v0038_gres_of(const char *tres, char *out, size_t n)
{
    size_t o = 0;
    out[0] = '\0';
    while (tres && *tres) {
        size_t len = strcspn(tres, ",;");
        const char *e = tres;
        if (len >= 5 && !strncmp(e, "gres:", 5)) {
            e += 5;
            len -= 5;
        }
        int w = snprintf(out + o, n - o, "%s%.*s", o ? "," : "", (int)len, e);
        if (w < 0 || (size_t)w >= n - o)
            break;
        o += (size_t)w;
        tres = e + len;
        tres += *tres ? 1 : 0;
    }
}

ty_status slurmrest_v0038_job_reply(const json_t *doc, long job_id,
                                    slurm_job_info *out, ty_err *err)
{
    memset(out, 0, sizeof *out);
    out->exit_code = -1;
    ty_status s = slurmrest_v0038_errors(doc, err);
    if (s != TY_OK)
        return s;
    const json_t *jobs = json_object_get(doc, "jobs");
    if (!json_is_array(jobs) || json_array_size(jobs) == 0)
        return ty_fail(err, TY_ENOTFOUND, NULL, "Slurm does not know job %ld",
                       job_id);
    const json_t *j = json_array_get(jobs, 0);
    const json_t *id = json_object_get(j, "job_id");
    if (json_is_integer(id) && json_integer_value(id) != job_id)
        return ty_fail(err, TY_EIO, NULL,
                       "slurmrestd answered job %lld for job %ld",
                       (long long)json_integer_value(id), job_id);
    copy_str(out->state_name, sizeof out->state_name,
             json_object_get(j, "job_state"));
    out->state = slurm_state_parse(out->state_name);
    copy_str(out->reason, sizeof out->reason,
             json_object_get(j, "state_reason"));
    copy_str(out->node, sizeof out->node, json_object_get(j, "nodes"));
    copy_str(out->user, sizeof out->user, json_object_get(j, "user_name"));
    copy_str(out->cwd, sizeof out->cwd,
             json_object_get(j, "current_working_directory"));
    const json_t *tres = json_object_get(j, "tres_per_node");
    v0038_gres_of(json_string_value(tres), out->gres, sizeof out->gres);
    /* exit_code is a raw wait status, meaningful once the job has ended:
     * low 7 bits the signal, bits 8-15 the exit status. */
    const json_t *ec = json_object_get(j, "exit_code");
    if (slurm_state_terminal(out->state) && json_is_integer(ec)) {
        long w = (long)json_integer_value(ec);
        if (w & 0x7f) {
            out->exit_signal = (int)(w & 0x7f);
            out->exit_code = -1;
        } else {
            out->exit_code = (int)((w >> 8) & 0xff);
        }
    }
    return TY_OK;
}

ty_status slurmrest_v0038_nodes_reply(const json_t *doc, slurm_node **nodes,
                                      size_t *n, ty_err *err)
{
    *nodes = NULL;
    *n = 0;
    ty_status s = slurmrest_v0038_errors(doc, err);
    if (s != TY_OK)
        return s;
    const json_t *arr = json_object_get(doc, "nodes");
    if (!json_is_array(arr))
        return ty_fail(err, TY_EIO, NULL,
                       "slurmrestd's nodes answer has no nodes array");
    size_t cnt = json_array_size(arr);
    slurm_node *out = cnt ? calloc(cnt, sizeof *out) : NULL;
    if (cnt && !out)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory for %zu nodes",
                       cnt);
    for (size_t i = 0; i < cnt; i++) {
        const json_t *o = json_array_get(arr, i);
        slurm_node *d = &out[i];
        copy_str(d->name, sizeof d->name, json_object_get(o, "name"));
        copy_str(d->state, sizeof d->state, json_object_get(o, "state"));
        copy_str(d->gres, sizeof d->gres, json_object_get(o, "gres"));
        const json_t *v = json_object_get(o, "cpus");
        d->cpus = json_is_integer(v) ? (int)json_integer_value(v) : 0;
        v = json_object_get(o, "real_memory");
        d->memory_mb = json_is_integer(v) && json_integer_value(v) > 0
                           ? (uint64_t)json_integer_value(v)
                           : 0;
        const json_t *parts = json_object_get(o, "partitions");
        size_t k, po = 0;
        const json_t *p;
        json_array_foreach(parts, k, p)
        {
            if (!json_is_string(p))
                continue;
            int w = snprintf(d->partitions + po, sizeof d->partitions - po,
                             "%s%s", po ? "," : "", json_string_value(p));
            if (w < 0 || (size_t)w >= sizeof d->partitions - po)
                break;
            po += (size_t)w;
        }
    }
    *nodes = out;
    *n = cnt;
    return TY_OK;
}

/* The version table: every version-specific path and shape. */
typedef struct {
    const char *version;
    /* GET paths, under /slurm/<version>. */
    const char *ping_path, *nodes_path, *submit_path;
    void (*job_path)(long job_id, char *buf, size_t n);
    ty_status (*cancel_path)(long job_id, int sig, char *buf, size_t n,
                             ty_err *err);
    json_t *(*submit_body)(const slurm_submit *s, ty_status *st, ty_err *err);
    ty_status (*submit_reply)(const json_t *doc, long *job_id, ty_err *err);
    ty_status (*job_reply)(const json_t *doc, long job_id,
                           slurm_job_info *out, ty_err *err);
    ty_status (*nodes_reply)(const json_t *doc, slurm_node **nodes,
                             size_t *n, ty_err *err);
    ty_status (*errors)(const json_t *doc, ty_err *err);
    ty_status (*cancel_reply)(const json_t *doc, ty_err *err);
    ty_status (*ping_reply)(const json_t *doc, ty_err *err);
    int (*token_refused)(long http, const json_t *doc);
} slurmrest_api;

static const slurmrest_api apis[] = {
    {
        .version = "v0.0.38",
        .ping_path = "/ping",
        .nodes_path = "/nodes",
        .submit_path = "/job/submit",
        .job_path = v0038_job_path,
        .cancel_path = v0038_cancel_path,
        .submit_body = slurmrest_v0038_submit_body,
        .submit_reply = slurmrest_v0038_submit_reply,
        .job_reply = slurmrest_v0038_job_reply,
        .nodes_reply = slurmrest_v0038_nodes_reply,
        .errors = slurmrest_v0038_errors,
        .cancel_reply = v0038_cancel_reply,
        .ping_reply = v0038_ping_reply,
        .token_refused = v0038_token_refused,
    },
};

/* ---------------------------------------------------------- the client -- */

struct slurmrest {
    char url[512];
    char user[65];
    char token_file[4096];
    const slurmrest_api *api;
    int lifespan_s;
    int timeout_s;
    uint8_t *key; /* the jwt_key's bytes; NULL in token-file mode */
    size_t key_len;
    pthread_mutex_t mu; /* guards what follows */
    char token[SR_TOKEN_MAX];
    struct timespec token_mtime; /* token file: the mtime read */
    time_t token_iat;            /* signed: when; 0: none yet */
    int token_stale;             /* a 401 or refused token: renew */
};

static ty_status read_small_file(const char *path, const char *what,
                                 char **out, size_t *len, ty_err *err)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return ty_fail(err, TY_EINVAL, what, "cannot read %s %s: %s", what,
                       path, strerror(errno));
    char *buf = malloc(SR_KEY_MAX + 1);
    if (!buf) {
        fclose(f);
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    }
    size_t n = fread(buf, 1, SR_KEY_MAX + 1, f);
    int bad = ferror(f);
    fclose(f);
    if (bad || n > SR_KEY_MAX || n == 0) {
        free(buf);
        return ty_fail(err, TY_EINVAL, what, "%s %s is %s", what, path,
                       bad ? "unreadable" : n ? "over 64 KiB" : "empty");
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return TY_OK;
}

ty_status slurmrest_create(const slurmrest_config *cfg, slurmrest **out,
                           ty_err *err)
{
    *out = NULL;
    if (!cfg->url || (strncmp(cfg->url, "http://", 7) &&
                      strncmp(cfg->url, "https://", 8)))
        return ty_fail(err, TY_EINVAL, "url",
                       "the slurmrestd URL must start with http:// or "
                       "https://");
    if (strlen(cfg->url) >= 500)
        return ty_fail(err, TY_EINVAL, "url", "the slurmrestd URL is too long");
    const char *ver = cfg->api_version && *cfg->api_version
                          ? cfg->api_version
                          : SR_DEFAULT_VERSION;
    const slurmrest_api *api = NULL;
    for (size_t i = 0; i < TY_ARRAY_LEN(apis); i++)
        if (!strcmp(apis[i].version, ver))
            api = &apis[i];
    if (!api)
        return ty_fail(err, TY_EINVAL, "api_version",
                       "slurmrestd API version '%s' is not one this client "
                       "knows (v0.0.38)",
                       ver);
    if (!plain_name(cfg->user) || strlen(cfg->user) > 64)
        return ty_fail(err, TY_EINVAL, "user",
                       "the Slurm user must be a plain user name "
                       "(1-64 of A-Z a-z 0-9 . _ -)");
    int has_file = cfg->token_file && *cfg->token_file;
    int has_key = cfg->jwt_key_file && *cfg->jwt_key_file;
    if (has_file == has_key)
        return ty_fail(err, TY_EINVAL, has_file ? "jwt_key_file" : "token_file",
                       "give exactly one of a token file and a jwt_key file");
    if (cfg->token_lifespan_s < 0 || cfg->timeout_s < 0)
        return ty_fail(err, TY_EINVAL,
                       cfg->timeout_s < 0 ? "timeout_s" : "token_lifespan_s",
                       "must not be negative");
    if (has_file && strlen(cfg->token_file) >= 4096)
        return ty_fail(err, TY_EINVAL, "token_file", "path too long");

    slurmrest *c = calloc(1, sizeof *c);
    if (!c)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    snprintf(c->url, sizeof c->url, "%s", cfg->url);
    size_t ul = strlen(c->url);
    while (ul > 0 && c->url[ul - 1] == '/')
        c->url[--ul] = '\0';
    snprintf(c->user, sizeof c->user, "%s", cfg->user);
    c->api = api;
    c->lifespan_s = cfg->token_lifespan_s ? cfg->token_lifespan_s
                                          : SR_DEFAULT_LIFESPAN_S;
    c->timeout_s = cfg->timeout_s ? cfg->timeout_s : SR_DEFAULT_TIMEOUT_S;
    ty_status s = TY_OK;
    if (has_key) {
        char *buf = NULL;
        s = read_small_file(cfg->jwt_key_file, "jwt_key_file", &buf,
                            &c->key_len, err);
        if (s != TY_OK) {
            free(c);
            return s;
        }
        c->key = (uint8_t *)buf;
    } else {
        snprintf(c->token_file, sizeof c->token_file, "%s", cfg->token_file);
        char *buf = NULL;
        size_t len;
        s = read_small_file(c->token_file, "token_file", &buf, &len, err);
        free(buf);
        if (s != TY_OK) {
            free(c);
            return s;
        }
    }
    pthread_mutex_init(&c->mu, NULL);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    *out = c;
    return TY_OK;
}

void slurmrest_destroy(slurmrest *c)
{
    if (!c)
        return;
    if (c->key) {
        memset(c->key, 0, c->key_len);
        free(c->key);
    }
    memset(c->token, 0, sizeof c->token);
    pthread_mutex_destroy(&c->mu);
    free(c);
    curl_global_cleanup();
}

const char *slurmrest_version(const slurmrest *c)
{
    return c->api->version;
}

/* Reads the token file into c->token when its mtime changed or the token
 * went stale. Under c->mu. */
static ty_status token_from_file(slurmrest *c, ty_err *err)
{
    struct stat st;
    if (stat(c->token_file, &st) != 0)
        return ty_fail(err, TY_EIO, "token_file",
                       "slurmrestd auth: cannot stat the token file %s: %s",
                       c->token_file, strerror(errno));
    if (c->token[0] && !c->token_stale &&
        st.st_mtim.tv_sec == c->token_mtime.tv_sec &&
        st.st_mtim.tv_nsec == c->token_mtime.tv_nsec)
        return TY_OK;
    char *buf = NULL;
    size_t len = 0;
    ty_status s = read_small_file(c->token_file, "token_file", &buf, &len,
                                  err);
    if (s != TY_OK) {
        ty_err_prefix(err, "slurmrestd auth");
        return TY_EIO;
    }
    /* `scontrol token` prints SLURM_JWT=<token>: take either form. */
    char *t = buf;
    while (*t && isspace((unsigned char)*t))
        t++;
    if (!strncmp(t, "SLURM_JWT=", 10))
        t += 10;
    size_t tl = strcspn(t, " \t\r\n");
    if (tl == 0 || tl >= sizeof c->token) {
        free(buf);
        return ty_fail(err, TY_EIO, "token_file",
                       "slurmrestd auth: the token file %s holds no token "
                       "(or one over %d bytes)",
                       c->token_file, SR_TOKEN_MAX - 1);
    }
    memcpy(c->token, t, tl);
    c->token[tl] = '\0';
    memset(buf, 0, len);
    free(buf);
    c->token_mtime = st.st_mtim;
    c->token_stale = 0;
    return TY_OK;
}

/* Signs a new token when there is none, it went stale, or under a third
 * of its life is left. Under c->mu. */
static ty_status token_signed(slurmrest *c, ty_err *err)
{
    time_t now = time(NULL);
    if (c->token[0] && !c->token_stale &&
        now < c->token_iat + (time_t)c->lifespan_s * 2 / 3)
        return TY_OK;
    ty_status s = slurmrest_jwt_sign(c->key, c->key_len, c->user, (long)now,
                                     (long)now + c->lifespan_s, c->token,
                                     sizeof c->token, err);
    if (s != TY_OK)
        return s;
    c->token_iat = now;
    c->token_stale = 0;
    return TY_OK;
}

/* Copies the current token into out (renewing as needed). */
static ty_status token_get(slurmrest *c, char *out, size_t n, ty_err *err)
{
    pthread_mutex_lock(&c->mu);
    ty_status s = c->key ? token_signed(c, err) : token_from_file(c, err);
    if (s == TY_OK)
        snprintf(out, n, "%s", c->token);
    pthread_mutex_unlock(&c->mu);
    return s;
}

/* Marks the token `used` stale, unless another thread renewed it since. */
static void token_refused(slurmrest *c, const char *used)
{
    pthread_mutex_lock(&c->mu);
    if (!strcmp(c->token, used))
        c->token_stale = 1;
    pthread_mutex_unlock(&c->mu);
}

typedef struct {
    char *data;
    size_t len, cap;
    int over;
} sr_buf;

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *ud)
{
    sr_buf *b = ud;
    size_t n = size * nmemb;
    if (b->len + n + 1 > SR_BODY_MAX) {
        b->over = 1;
        return 0;
    }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 16384;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d)
            return 0;
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, ptr, n);
    b->len += n;
    b->data[b->len] = '\0';
    return n;
}

/* One HTTP exchange with token `token`: *http and the body's JSON (*doc,
 * NULL when not JSON). TY_EIO for transport failures. */
static ty_status http_once(slurmrest *c, const char *method, const char *path,
                           const char *body, const char *token, long *http,
                           json_t **doc, ty_err *err)
{
    *doc = NULL;
    *http = 0;
    char url[1024];
    snprintf(url, sizeof url, "%s/slurm/%s%s", c->url, c->api->version, path);
    CURL *h = curl_easy_init();
    if (!h)
        return ty_fail(err, TY_ENOMEM, NULL, "curl_easy_init failed");
    struct curl_slist *hdr = NULL;
    char line[SR_TOKEN_MAX + 64];
    snprintf(line, sizeof line, "X-SLURM-USER-NAME: %s", c->user);
    struct curl_slist *t = curl_slist_append(hdr, line);
    hdr = t ? t : hdr;
    snprintf(line, sizeof line, "X-SLURM-USER-TOKEN: %s", token);
    t = curl_slist_append(hdr, line);
    hdr = t ? t : hdr;
    memset(line, 0, sizeof line);
    t = curl_slist_append(hdr, "Accept: application/json");
    hdr = t ? t : hdr;
    if (body) {
        t = curl_slist_append(hdr, "Content-Type: application/json");
        hdr = t ? t : hdr;
    }
    sr_buf b = {0};
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, (long)c->timeout_s);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, (long)c->timeout_s);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    if (body)
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    CURLcode rc = curl_easy_perform(h);
    ty_status s = TY_OK;
    if (rc != CURLE_OK) {
        s = ty_fail(err, TY_EIO, NULL,
                    "slurmrestd at %s: %s %s: %s", c->url, method, path,
                    b.over ? "answer over 64 MiB" : curl_easy_strerror(rc));
    } else {
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, http);
        if (b.len)
            *doc = json_loadb(b.data, b.len, 0, NULL);
    }
    curl_slist_free_all(hdr);
    curl_easy_cleanup(h);
    free(b.data);
    return s;
}

/* Whether an answer says the token was refused: HTTP 401, or what the
 * version says a refused token looks like. */
static int token_was_refused(const slurmrest *c, long http, const json_t *doc)
{
    return http == 401 || (doc && c->api->token_refused(http, doc));
}

/* A call: takes a token, sends, and on a refused token renews it and tries
 * once more. On TY_OK *doc is the answer's JSON (the caller's) with
 * Slurm's errors still in it for the version's reader; transport failures,
 * 401 and non-JSON answers are TY_EIO. */
static ty_status rest_call(slurmrest *c, const char *method, const char *path,
                           const char *body, json_t **doc, ty_err *err)
{
    *doc = NULL;
    char token[SR_TOKEN_MAX];
    long http = 0;
    ty_status s = TY_OK;
    for (int attempt = 0; attempt < 2; attempt++) {
        json_decref(*doc);
        *doc = NULL;
        s = token_get(c, token, sizeof token, err);
        if (s == TY_OK)
            s = http_once(c, method, path, body, token, &http, doc, err);
        if (s != TY_OK || !token_was_refused(c, http, *doc))
            break;
        token_refused(c, token);
    }
    memset(token, 0, sizeof token);
    if (s != TY_OK)
        return s;
    if (http == 401) {
        json_decref(*doc);
        *doc = NULL;
        return ty_fail(err, TY_EIO, NULL,
                       "slurmrestd at %s refused the auth token for user %s "
                       "(HTTP 401)",
                       c->url, c->user);
    }
    if (!json_is_object(*doc)) {
        json_decref(*doc);
        *doc = NULL;
        return ty_fail(err, TY_EIO, NULL,
                       "slurmrestd at %s: %s %s answered HTTP %ld without a "
                       "JSON object",
                       c->url, method, path, http);
    }
    if (http >= 400) {
        /* Slurm's refusals come as 500 (or 400) with an errors array; the
         * version's reader turns it into a status. Without one it is an
         * outage. */
        s = c->api->errors(*doc, err);
        if (s == TY_OK) {
            json_decref(*doc);
            *doc = NULL;
            return ty_fail(err, http >= 500 ? TY_EIO : TY_EINVAL, NULL,
                           "slurmrestd at %s: %s %s answered HTTP %ld", c->url,
                           method, path, http);
        }
    }
    return TY_OK;
}

ty_status slurmrest_submit(slurmrest *c, const slurm_submit *s, long *job_id,
                           ty_err *err)
{
    ty_status st;
    json_t *body = c->api->submit_body(s, &st, err);
    if (!body)
        return st;
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    if (!text)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    json_t *doc = NULL;
    st = rest_call(c, "POST", c->api->submit_path, text, &doc, err);
    free(text);
    if (st == TY_OK)
        st = c->api->submit_reply(doc, job_id, err);
    json_decref(doc);
    return st;
}

ty_status slurmrest_job(slurmrest *c, long job_id, slurm_job_info *out,
                        ty_err *err)
{
    char path[64];
    c->api->job_path(job_id, path, sizeof path);
    json_t *doc = NULL;
    ty_status s = rest_call(c, "GET", path, NULL, &doc, err);
    if (s == TY_OK)
        s = c->api->job_reply(doc, job_id, out, err);
    json_decref(doc);
    return s;
}

ty_status slurmrest_cancel(slurmrest *c, long job_id, int sig, ty_err *err)
{
    char path[96];
    ty_status s = c->api->cancel_path(job_id, sig, path, sizeof path, err);
    if (s != TY_OK)
        return s;
    json_t *doc = NULL;
    s = rest_call(c, "DELETE", path, NULL, &doc, err);
    if (s == TY_OK)
        s = c->api->cancel_reply(doc, err);
    json_decref(doc);
    return s;
}

ty_status slurmrest_nodes(slurmrest *c, slurm_node **nodes, size_t *n,
                          ty_err *err)
{
    *nodes = NULL;
    *n = 0;
    json_t *doc = NULL;
    ty_status s = rest_call(c, "GET", c->api->nodes_path, NULL, &doc, err);
    if (s == TY_OK)
        s = c->api->nodes_reply(doc, nodes, n, err);
    json_decref(doc);
    return s;
}

ty_status slurmrest_ping(slurmrest *c, ty_err *err)
{
    json_t *doc = NULL;
    ty_status s = rest_call(c, "GET", c->api->ping_path, NULL, &doc, err);
    if (s == TY_OK)
        s = c->api->ping_reply(doc, err);
    json_decref(doc);
    return s;
}
