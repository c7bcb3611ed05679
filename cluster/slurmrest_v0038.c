/*
 * slurmrest_v0038.c - slurmrestd's API v0.0.38: its paths and the JSON it
 * takes and gives, filling the table the client reads (slurmrest_api.h).
 * Nothing here talks to the network or keeps state: documents in, values
 * and statuses out.
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
 *   - A job over several nodes (a data-parallel gang): "nodes" is the node
 *     count. An integer (2) or a string ("2", "2-2": min-max) is taken; an
 *     array ([2, 2]) is ignored without an error - the job runs on ONE
 *     node - so it is sent as an integer, with "tasks_per_node" (1: one
 *     rank a node) and "tasks" (their product). "tasks" alone (2) packs
 *     the tasks onto one node when its CPUs allow. The script's `srun
 *     --mpi=pmix` then starts one task a node (the job's "mpi" field is
 *     not used: the script says it). Measured on the two-node cluster of
 *     tests/slurm/cluster.sh start-multi.
 */
#include "cluster/slurmrest_v0038.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
             text ? text : "an error without text", desc && *desc ? ": " : "",
             desc ? desc : "", code);
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
            *st =
                ty_fail(err, TY_EINVAL, "env",
                        "environment entry '%s' is not NAME=value", s->env[i]);
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
        bad |= json_object_set_new(job, "cpus_per_task", json_integer(s->cpus));
    if (s->nodes > 0) {
        int tpn = s->tasks_per_node > 0 ? s->tasks_per_node : 1;
        bad |= json_object_set_new(job, "nodes", json_integer(s->nodes));
        bad |= json_object_set_new(job, "tasks_per_node", json_integer(tpn));
        bad |= json_object_set_new(job, "tasks",
                                   json_integer((json_int_t)s->nodes * tpn));
    }
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
        size_t fo = 0;
        const json_t *flag;
        size_t fk;
        json_array_foreach (json_object_get(o, "state_flags"), fk, flag) {
            if (!json_is_string(flag))
                continue;
            int w = snprintf(d->flags + fo, sizeof d->flags - fo, "%s%s",
                             fo ? "," : "", json_string_value(flag));
            if (w < 0 || (size_t)w >= sizeof d->flags - fo)
                break;
            fo += (size_t)w;
        }
        const json_t *v = json_object_get(o, "cpus");
        d->cpus = json_is_integer(v) ? (int)json_integer_value(v) : 0;
        v = json_object_get(o, "real_memory");
        d->memory_mb = json_is_integer(v) && json_integer_value(v) > 0
                           ? (uint64_t)json_integer_value(v)
                           : 0;
        const json_t *parts = json_object_get(o, "partitions");
        size_t k, po = 0;
        const json_t *p;
        json_array_foreach (parts, k, p) {
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

const slurmrest_api slurmrest_v0038_api = {
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
};
