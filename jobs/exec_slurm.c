/*
 * exec_slurm.c - the Slurm executor (see executor.h): each training worker
 * is a Slurm batch job submitted through slurmrestd, running the remote
 * worker shim (node/wremote.h), which talks to this server over HTTP with
 * a token scoped to the job's attempt.
 *
 * One thread does every call to slurmrestd, never holding the service's
 * mutex while it waits on the network: submissions (retried while
 * slurmrestd is down: submissions pause, running jobs go on), cancels,
 * and the polling of each job's state, which it maps to the service's
 * outcomes (executor.h, exec_end). The worker's own lines arrive on HTTP
 * threads (exec_slurm_deliver).
 *
 * Locks: msg_mu serialises the delivery of a place's lines and its end
 * (as the supervisor's single thread does for local workers): the thread
 * takes msg_mu, then the service's mu; a delivery takes msg_mu, then mu
 * briefly. The service calls start, preempt and cancel with mu held and
 * never takes msg_mu.
 */
#include "jobs/executor.h"
#include "jobs/exec_slurm_internal.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "cluster/slurm_inventory.h"
#include "common/ids.h"
#include "common/log.h"
#include "common/sha256.h"
#include "node/wremote.h"

#define TOKEN_BYTES 32
#define ENDED_MAX 64 /* attempts remembered as over (409, not 401) */
#define PING_EVERY_S 10.0
#define NODES_EVERY_S 60.0 /* how often the node list (gang checks) is read */
/* ... and at most this old when an elastic gang asks how many are up
 * (exec_slurm_nodes_up) */
#define NODES_WANTED_S 2.0
#define NODES_MAX 4096

typedef enum {
    XP_FREE = 0,
    XP_SUBMIT, /* to submit (again, after an outage) */
    XP_WATCH,  /* submitted: polled until it ends */
} xp_phase;

typedef struct {
    xp_phase phase;
    unsigned gen; /* bumped by each start: stale results are dropped */
    char job_id[TY_ID_MAX];
    char token_sha[65];
    char token[2 * TOKEN_BYTES + 1]; /* until submitted, then wiped */
    long slurm_id;
    char device[INV_NAME_MAX + 8];
    char gres[96];
    int cpus;
    int ranks; /* a data-parallel gang: this many nodes, one rank each */
    int ranks_per_node; /* a gang of GPUs over nodes: ranks a node; 0 */
    char rank_devices[EXEC_SLURM_RANK_DEVICES_MAX]; /* its per-rank devices */
    uint64_t memory_mb;
    int want_cancel, cancel_sent;
    int want_preempt;
    double preempt_at;
    int lost;             /* silent: cancelled as lost */
    int told_waiting;     /* the job was told its submission waits */
    double last_line;     /* monotonic time of its last delivery; 0 none */
    double running_since; /* monotonic; 0 until Slurm said RUNNING */
    slurm_state state;
    char reason[128];
    char node[128];
} xplace;

typedef struct {
    char job_id[TY_ID_MAX];
    char token_sha[65];
} ended_rec;

typedef struct {
    exec_slurm_config cfg;
    char worker_command[PATH_MAX], server_url[512], workdir[PATH_MAX];
    char partition[64], account[64], qos[64], ca_file[PATH_MAX];
    pthread_mutex_t *mu; /* the service's */
    pthread_mutex_t msg_mu;
    exec_hooks hooks;
    int cap;
    xplace *p;
    ended_rec ended[ENDED_MAX];
    int nended;
    pthread_t thread;
    int thread_started;
    pthread_mutex_t wake_mu;
    pthread_cond_t wake_cv;
    int wake;
    int stopping;
    /* slurmrestd's health, for /readyz (under wake_mu) */
    int outage;
    double outage_since; /* wall clock */
    char outage_msg[300];
    double last_ok; /* monotonic */
    /* The cluster's nodes' CPUs, for exec_slurm_gang_check (under
     * wake_mu); read by the thread every NODES_EVERY_S. */
    int *node_cpus;
    unsigned char *node_up; /* slurm_node_up of each */
    int nnodes;
    int nodes_known;
    double nodes_at;  /* monotonic; 0 never */
    int nodes_wanted; /* read again within NODES_WANTED_S */
} slurm_exec;

static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void wake_thread(slurm_exec *x)
{
    pthread_mutex_lock(&x->wake_mu);
    x->wake = 1;
    pthread_cond_signal(&x->wake_cv);
    pthread_mutex_unlock(&x->wake_mu);
}

static void token_hash(const char *token, char hex[65])
{
    uint8_t d[32];
    sha256_digest(token, strlen(token), d);
    sha256_hex(d, hex);
}

/* Compares two hex digests in constant time. */
static int digest_eq(const char *a, const char *b)
{
    unsigned char diff = 0;
    for (int i = 0; i < 64; i++)
        diff |= (unsigned char)(a[i] ^ b[i]);
    return diff == 0 && a[64] == '\0' && b[64] == '\0';
}

/* slurmrestd answered (ok) or could not be reached (msg). */
static void note_health(slurm_exec *x, int ok, const char *msg)
{
    pthread_mutex_lock(&x->wake_mu);
    if (ok) {
        if (x->outage)
            log_msg("info", "slurm: slurmrestd answers again; submissions "
                            "resume");
        x->outage = 0;
        x->last_ok = mono_now();
    } else {
        if (!x->outage) {
            x->outage_since = wall_now();
            log_msg("error",
                    "slurm: slurmrestd unreachable (%s); new "
                    "submissions wait, running jobs go on",
                    msg);
        }
        x->outage = 1;
        snprintf(x->outage_msg, sizeof x->outage_msg, "%s", msg);
    }
    pthread_mutex_unlock(&x->wake_mu);
}

/* ---- start, preempt, cancel (mu held) ---- */

static ty_status slurm_start(void *impl, int place, const exec_start *st,
                             json_t **placement, ty_err *err)
{
    slurm_exec *x = impl;
    xplace *p = &x->p[place];
    uint8_t raw[TOKEN_BYTES];
    ty_status s = ty_random_bytes(raw, sizeof raw, err);
    if (s != TY_OK)
        return s;
    unsigned gen = p->gen + 1;
    memset(p, 0, sizeof *p);
    p->gen = gen;
    for (int i = 0; i < TOKEN_BYTES; i++)
        snprintf(p->token + 2 * i, 3, "%02x", raw[i]);
    token_hash(p->token, p->token_sha);
    snprintf(p->job_id, sizeof p->job_id, "%s", st->job_id);
    if (st->slot)
        slurm_gres_for_slot(st->slot, p->gres, sizeof p->gres);
    snprintf(p->device, sizeof p->device, "%s", st->device);
    p->cpus = st->threads > 0 ? st->threads : 1;
    p->ranks = st->ranks > 1 ? st->ranks : 1;
    if (p->ranks > 1 && st->ranks_per_node > 0 && st->members) {
        /* A gang of whole GPUs over nodes: gpu:N a node, and each rank's
         * device by its local rank (stand-in GRES: the members' sim
         * devices; real ones: cuda:<local rank> among the node's GPUs
         * Slurm makes visible). */
        p->ranks_per_node = st->ranks_per_node;
        const int n = st->ranks_per_node;
        const char **sim = NULL;
        if (x->cfg.gpu_sim) {
            sim = calloc((size_t)n, sizeof *sim);
            if (!sim)
                return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
            for (int i = 0; i < n; i++)
                sim[i] = st->members[i < st->ranks ? i : 0].device;
        }
        int fits = exec_slurm_rank_devices(n, sim, p->rank_devices,
                                           sizeof p->rank_devices);
        free(sim);
        if (!fits) {
            p->phase = XP_FREE;
            return ty_fail(err, TY_EINVAL, NULL,
                           "the devices of %d ranks a node do not fit the "
                           "job's environment",
                           n);
        }
    }
    p->memory_mb = st->memory_bytes ? (st->memory_bytes >> 20) + 1 : 0;
    p->state = SLURM_ST_UNKNOWN;
    p->phase = XP_SUBMIT;
    /* The attempt's token hash goes into the job's placement (the token
     * itself only into the Slurm job's environment), so a restarted server
     * can re-attach it (reattach_running, jobs/service.c). */
    *placement =
        json_pack("{s:s, s:{s:n, s:s, s:s, s:s?}}", "executor", "slurm",
                  "slurm", "job_id", "state", "SUBMITTING", "token_sha256",
                  p->token_sha, "gres", p->gres[0] ? p->gres : NULL);
    if (*placement && p->ranks > 1)
        json_object_set_new(
            json_object_get(*placement, "slurm"), "ranks_per_node",
            json_integer(p->ranks_per_node > 0 ? p->ranks_per_node : 1));
    wake_thread(x);
    return TY_OK;
}

static void slurm_preempt(void *impl, int place)
{
    slurm_exec *x = impl;
    xplace *p = &x->p[place];
    if (p->phase == XP_FREE || p->want_preempt)
        return;
    p->want_preempt = 1;
    p->preempt_at = mono_now();
    if (p->phase == XP_SUBMIT || p->running_since == 0)
        p->want_cancel = 1; /* not running yet: nothing to checkpoint */
    wake_thread(x);
}

static void slurm_cancel(void *impl, int place)
{
    slurm_exec *x = impl;
    xplace *p = &x->p[place];
    if (p->phase == XP_FREE)
        return;
    p->want_cancel = 1;
    wake_thread(x);
}

ty_status exec_slurm_adopt(executor *ex, int place, const char *job_id,
                           long slurm_id, const char *token_sha256, ty_err *err)
{
    slurm_exec *x = ex->impl;
    if (place < 0 || place >= x->cap || x->p[place].phase != XP_FREE ||
        !token_sha256 || strlen(token_sha256) != 64 || slurm_id <= 0)
        return ty_fail(err, TY_EINVAL, NULL,
                       "cannot re-attach job %s (Slurm job %ld)", job_id,
                       slurm_id);
    xplace *p = &x->p[place];
    unsigned gen = p->gen + 1;
    memset(p, 0, sizeof *p);
    p->gen = gen;
    snprintf(p->job_id, sizeof p->job_id, "%s", job_id);
    snprintf(p->token_sha, sizeof p->token_sha, "%s", token_sha256);
    p->slurm_id = slurm_id;
    p->phase = XP_WATCH;
    /* Give the worker a whole heartbeat timeout to reach this server. */
    p->last_line = mono_now();
    wake_thread(x);
    return TY_OK;
}

/* ---- the worker's requests ---- */

static int find_place(slurm_exec *x, const char *job_id, const char *sha)
{
    for (int i = 0; i < x->cap; i++) {
        xplace *p = &x->p[i];
        if (p->phase != XP_FREE && !strcmp(p->job_id, job_id) &&
            digest_eq(p->token_sha, sha))
            return i;
    }
    return -1;
}

ty_status exec_slurm_auth(executor *ex, const char *job_id, const char *token,
                          int *place, ty_err *err)
{
    slurm_exec *x = ex->impl;
    if (!token || strlen(token) != 2 * TOKEN_BYTES)
        return ty_fail(err, TY_EINVAL, NULL, "unknown worker token");
    char sha[65];
    token_hash(token, sha);
    int i = find_place(x, job_id, sha);
    if (i >= 0) {
        *place = i;
        return TY_OK;
    }
    for (int k = 0; k < x->nended; k++)
        if (!strcmp(x->ended[k].job_id, job_id) &&
            digest_eq(x->ended[k].token_sha, sha))
            return ty_fail(err, TY_ECONFLICT, NULL,
                           "this attempt of job %s is over", job_id);
    return ty_fail(err, TY_EINVAL, NULL, "unknown worker token");
}

ty_status exec_slurm_deliver(executor *ex, pthread_mutex_t *mu,
                             const char *job_id, const char *token,
                             const json_t *lines, const char **action,
                             ty_err *err)
{
    slurm_exec *x = ex->impl;
    pthread_mutex_lock(&x->msg_mu);
    pthread_mutex_lock(mu);
    int place = -1;
    ty_status s = exec_slurm_auth(ex, job_id, token, &place, err);
    unsigned gen = place >= 0 ? x->p[place].gen : 0;
    if (s == TY_OK) {
        x->p[place].last_line = mono_now();
        if (x->p[place].running_since == 0)
            x->p[place].running_since = x->p[place].last_line;
    }
    pthread_mutex_unlock(mu);
    if (s != TY_OK) {
        pthread_mutex_unlock(&x->msg_mu);
        return s;
    }
    size_t i;
    const json_t *line;
    json_array_foreach (lines, i, line) {
        /* Classified as the local worker's lines are (one definition of
         * the protocol), without printing and parsing them again. */
        wproto_msg kind = wproto_kind(line);
        if (kind != WPROTO_MSG_NONE)
            x->hooks.on_message(x->hooks.ctx, place, kind, line);
    }
    pthread_mutex_lock(mu);
    xplace *p = &x->p[place];
    *action = WREMOTE_ACTION_RUN;
    if (p->gen == gen) {
        if (p->want_cancel)
            *action = WREMOTE_ACTION_CANCEL;
        else if (p->want_preempt)
            *action = WREMOTE_ACTION_PREEMPT;
    }
    pthread_mutex_unlock(mu);
    pthread_mutex_unlock(&x->msg_mu);
    return TY_OK;
}

/* ---- the thread ---- */

/* What one round asks of slurmrestd for one place, and what it said. */
typedef struct {
    int place;
    unsigned gen;
    int submit, cancel, poll;
    long slurm_id;
    /* submit's inputs */
    char job_id[TY_ID_MAX];
    char token[2 * TOKEN_BYTES + 1];
    char device[INV_NAME_MAX + 8];
    char gres[96];
    int cpus;
    int ranks;
    int ranks_per_node;
    char rank_devices[EXEC_SLURM_RANK_DEVICES_MAX];
    uint64_t memory_mb;
    /* results */
    ty_status submit_s, poll_s;
    ty_err submit_err, poll_err;
    slurm_job_info info;
} xwork;

static void do_submit(slurm_exec *x, xwork *w)
{
    char script[PATH_MAX * 2 + 1024], name[TY_ID_MAX + 16];
    char out[PATH_MAX + 64];
    char e_token[128], e_dev[160], e_hb[64], e_ca[PATH_MAX + 32];
    char e_ranks[EXEC_SLURM_RANK_DEVICES_MAX + 32], gres[96];
    snprintf(script, sizeof script, "%s", "");
    exec_slurm_script(x->worker_command, x->server_url, w->job_id, w->ranks,
                      w->ranks_per_node, script, sizeof script);
    snprintf(name, sizeof name, "trainyard-%s", w->job_id);
    snprintf(out, sizeof out, "%s/trainyard-%%j.out", x->workdir);
    snprintf(e_token, sizeof e_token, WREMOTE_ENV_TOKEN "=%s", w->token);
    snprintf(e_dev, sizeof e_dev, WPROTO_ENV_DEVICE "=%s", w->device);
    snprintf(e_hb, sizeof e_hb, WPROTO_ENV_HEARTBEAT_MS "=%d",
             x->cfg.heartbeat_ms);
    snprintf(e_ca, sizeof e_ca, WREMOTE_ENV_CA_FILE "=%s", x->ca_file);
    const char *env[10];
    int k = 0;
    env[k++] = "PATH=/usr/local/bin:/usr/bin:/bin";
    env[k++] = e_token;
    env[k++] = e_dev;
    env[k++] = e_hb;
    env[k++] = WPROTO_ENV_BLAS_THREADS "=1";
    if (!w->gres[0])
        env[k++] = WPROTO_ENV_CUDA_VISIBLE "=";
    if (x->ca_file[0])
        env[k++] = e_ca;
    if (w->rank_devices[0]) {
        snprintf(e_ranks, sizeof e_ranks, WPROTO_ENV_RANK_DEVICES "=%s",
                 w->rank_devices);
        env[k++] = e_ranks;
    }
    env[k] = NULL;
    slurm_submit sub = {
        .name = name,
        .script = script,
        .cwd = x->workdir,
        .stdout_path = out,
        .partition = x->partition,
        .account = x->account,
        .qos = x->qos,
        .cpus = w->cpus,
        /* per node: each of its ranks' */
        .memory_mb = w->memory_mb *
                     (w->ranks_per_node > 0 ? (uint64_t)w->ranks_per_node : 1),
        .time_limit_min = x->cfg.time_limit_min,
        .env = env};
    exec_slurm_shape(w->ranks, w->ranks_per_node, w->gres, &sub, gres,
                     sizeof gres);
    sub.gres = gres[0] ? gres : NULL;
    w->submit_s =
        slurmrest_submit(x->cfg.rest, &sub, &w->slurm_id, &w->submit_err);
}

/* Collects this round's work under mu. Returns how many entries. */
static int collect(slurm_exec *x, xwork *work)
{
    int n = 0;
    double t = mono_now();
    for (int i = 0; i < x->cap; i++) {
        xplace *p = &x->p[i];
        if (p->phase == XP_FREE)
            continue;
        xwork *w = &work[n];
        memset(w, 0, sizeof *w);
        w->place = i;
        w->gen = p->gen;
        w->slurm_id = p->slurm_id;
        w->ranks = p->ranks;
        if (p->phase == XP_SUBMIT) {
            if (p->want_cancel) {
                w->poll = 0; /* never submitted: ends below */
            } else {
                w->submit = 1;
                snprintf(w->job_id, sizeof w->job_id, "%s", p->job_id);
                snprintf(w->token, sizeof w->token, "%s", p->token);
                snprintf(w->device, sizeof w->device, "%s", p->device);
                snprintf(w->gres, sizeof w->gres, "%s", p->gres);
                w->cpus = p->cpus;
                w->ranks = p->ranks;
                w->ranks_per_node = p->ranks_per_node;
                snprintf(w->rank_devices, sizeof w->rank_devices, "%s",
                         p->rank_devices);
                w->memory_mb = p->memory_mb;
            }
            n++;
            continue;
        }
        /* Watching: silence, a preemption that is taking too long. */
        if (p->running_since > 0 && !p->want_cancel) {
            double since = p->last_line > 0 ? p->last_line : p->running_since;
            double limit = p->last_line > 0 ? x->cfg.heartbeat_timeout_s
                                            : x->cfg.start_grace_s;
            if (limit > 0 && t - since > limit) {
                p->lost = 1;
                p->want_cancel = 1;
                log_msg("error",
                        "slurm: job %s (Slurm job %ld) sent nothing for %.0f "
                        "s: cancelling it as lost",
                        p->job_id, p->slurm_id, t - since);
            }
        }
        if (p->want_preempt && !p->want_cancel &&
            t - p->preempt_at > x->cfg.preempt_grace_s)
            p->want_cancel = 1;
        if (p->want_cancel && !p->cancel_sent) {
            w->cancel = 1;
            p->cancel_sent = 1;
        }
        w->poll = 1;
        n++;
    }
    return n;
}

typedef struct {
    int place;
    unsigned gen;
    json_t *status; /* on_status's, or NULL */
    int end;
    int ws;
    exec_end how;
    char why[300];
} xresult;

/* The wait status of a job we stopped before Slurm said how it ended:
 * as a preempted worker's or a cancelled one's. */
static int asked_stop_ws(const xplace *p)
{
    return (p->want_preempt ? WPROTO_EXIT_PREEMPTED : WPROTO_EXIT_CANCELLED)
           << 8;
}

/* Applies the round's answers under mu: new states, ends. */
static void apply(slurm_exec *x, xwork *work, int n, xresult *res)
{
    for (int k = 0; k < n; k++) {
        xwork *w = &work[k];
        xresult *r = &res[k];
        memset(r, 0, sizeof *r);
        r->place = w->place;
        r->gen = w->gen;
        xplace *p = &x->p[w->place];
        if (p->gen != w->gen || p->phase == XP_FREE)
            continue;
        if (p->phase == XP_SUBMIT && p->want_cancel && !w->submit) {
            r->end = 1;
            r->ws = asked_stop_ws(p);
            r->how = EXEC_END_EXITED;
            continue;
        }
        if (w->submit) {
            if (w->submit_s == TY_OK) {
                p->slurm_id = w->slurm_id;
                p->phase = XP_WATCH;
                memset(p->token, 0, sizeof p->token);
                p->state = SLURM_ST_PENDING;
                r->status = json_pack("{s:I, s:s, s:s}", "job_id",
                                      (json_int_t)p->slurm_id, "state",
                                      "PENDING", "reason", "submitted");
                log_event("info", "slurm_submit",
                          json_pack("{s:s, s:I, s:s}", "job", p->job_id,
                                    "slurm_job", (json_int_t)p->slurm_id,
                                    "gres", p->gres[0] ? p->gres : "none"));
            } else if (w->submit_s == TY_EINVAL) {
                r->end = 1;
                r->how = EXEC_END_FAILED;
                snprintf(r->why, sizeof r->why, "%s (the job asked for %s)",
                         w->submit_err.msg, p->gres[0] ? p->gres : "no GPU");
            }
            /* TY_EIO: slurmrestd is down; the next round tries again. The
             * job says why it has not reached Slurm yet. */
            if (w->submit_s == TY_EIO && !p->told_waiting) {
                p->told_waiting = 1;
                r->status = json_pack(
                    "{s:n, s:s, s:s}", "job_id", "state", "SUBMITTING",
                    "reason",
                    "slurmrestd does not answer; the job is submitted when "
                    "it does");
            }
            continue;
        }
        if (!w->poll)
            continue;
        if (w->poll_s == TY_ENOTFOUND) {
            r->end = 1;
            if (p->want_cancel && !p->lost) {
                r->ws = asked_stop_ws(p);
                r->how = EXEC_END_EXITED;
            } else {
                /* Ended longer ago than Slurm keeps jobs (a long server
                 * outage): finish it from what it uploaded. */
                r->ws = 0;
                r->how = EXEC_END_LOST;
                snprintf(r->why, sizeof r->why,
                         "Slurm no longer knows job %ld (it ended while the "
                         "server was away)",
                         p->slurm_id);
            }
            continue;
        }
        if (w->poll_s != TY_OK)
            continue;
        const slurm_job_info *info = &w->info;
        if (info->state == SLURM_ST_RUNNING && p->running_since == 0)
            p->running_since = mono_now();
        if (info->state != p->state || strcmp(info->reason, p->reason) ||
            strcmp(info->node, p->node)) {
            p->state = info->state;
            snprintf(p->reason, sizeof p->reason, "%s", info->reason);
            snprintf(p->node, sizeof p->node, "%s", info->node);
            r->status =
                json_pack("{s:I, s:s, s:s, s:s}", "job_id",
                          (json_int_t)p->slurm_id, "state", info->state_name,
                          "reason", info->reason, "node", info->node);
        }
        if (slurm_state_terminal(info->state)) {
            r->end = 1;
            exec_slurm_asked asked = {.slurm_id = p->slurm_id,
                                      .lost = p->lost,
                                      .want_preempt = p->want_preempt,
                                      .want_cancel = p->want_cancel};
            r->how =
                exec_slurm_end_of(&asked, info, &r->ws, r->why, sizeof r->why);
        }
    }
}

static void remember_ended(slurm_exec *x, const xplace *p)
{
    if (x->nended == ENDED_MAX) {
        memmove(&x->ended[0], &x->ended[1],
                (ENDED_MAX - 1) * sizeof x->ended[0]);
        x->nended--;
    }
    ended_rec *e = &x->ended[x->nended++];
    snprintf(e->job_id, sizeof e->job_id, "%s", p->job_id);
    snprintf(e->token_sha, sizeof e->token_sha, "%s", p->token_sha);
}

/* Reads the cluster's nodes for the gang check, at most every
 * NODES_EVERY_S; a failure keeps what was known. */
static void refresh_nodes(slurm_exec *x)
{
    double t = mono_now();
    pthread_mutex_lock(&x->wake_mu);
    const double every = x->nodes_wanted ? NODES_WANTED_S : NODES_EVERY_S;
    const int due = x->nodes_at <= 0 || t - x->nodes_at >= every;
    if (due) {
        x->nodes_wanted = 0;
        x->nodes_at = t;
    }
    pthread_mutex_unlock(&x->wake_mu);
    if (!due)
        return;
    slurm_node *nodes = NULL;
    size_t n = 0;
    ty_err err = {0};
    if (slurmrest_nodes(x->cfg.rest, &nodes, &n, &err) != TY_OK) {
        free(nodes);
        return;
    }
    if (n > NODES_MAX)
        n = NODES_MAX;
    int *cpus = malloc((n ? n : 1) * sizeof *cpus);
    unsigned char *up = malloc(n ? n : 1);
    if (cpus && up) {
        for (size_t i = 0; i < n; i++) {
            cpus[i] = nodes[i].cpus;
            up[i] =
                (unsigned char)slurm_node_up(nodes[i].state, nodes[i].flags);
        }
        pthread_mutex_lock(&x->wake_mu);
        free(x->node_cpus);
        free(x->node_up);
        x->node_cpus = cpus;
        x->node_up = up;
        cpus = NULL;
        up = NULL;
        x->nnodes = (int)n;
        x->nodes_known = 1;
        pthread_mutex_unlock(&x->wake_mu);
    }
    free(cpus);
    free(up);
    free(nodes);
}

ty_status exec_slurm_gang_check(executor *ex, int ranks, int threads,
                                ty_err *err)
{
    slurm_exec *x = ex->impl;
    int need = threads > 0 ? threads : 1;
    pthread_mutex_lock(&x->wake_mu);
    int known = x->nodes_known, fit = 0, total = x->nnodes;
    for (int i = 0; i < x->nnodes; i++)
        fit += x->node_cpus[i] >= need;
    pthread_mutex_unlock(&x->wake_mu);
    /* Not read yet (slurmrestd down since the start): Slurm decides at
     * submission, and refuses a job that can never run. */
    if (!known || ranks <= fit)
        return TY_OK;
    if (fit < total)
        return ty_fail(err, TY_EINVAL, "resources.workers",
                       "%d workers need %d Slurm nodes with %d CPUs each "
                       "(one rank a node); the cluster has %d such node%s",
                       ranks, ranks, need, fit, fit == 1 ? "" : "s");
    return ty_fail(err, TY_EINVAL, "resources.workers",
                   "%d workers need %d Slurm nodes (one rank a node); the "
                   "cluster has %d",
                   ranks, ranks, total);
}

int exec_slurm_nodes_up(executor *ex, int threads, int *total)
{
    slurm_exec *x = ex->impl;
    int need = threads > 0 ? threads : 1;
    pthread_mutex_lock(&x->wake_mu);
    int known = x->nodes_known, up = 0, fit = 0;
    for (int i = 0; i < x->nnodes; i++) {
        fit += x->node_cpus[i] >= need;
        up += x->node_cpus[i] >= need && x->node_up[i];
    }
    /* Whoever asks will ask again: the next round reads the list if it is
     * older than NODES_WANTED_S. */
    int stale = x->nodes_at <= 0 || mono_now() - x->nodes_at >= NODES_WANTED_S;
    if (stale && !x->nodes_wanted) {
        x->nodes_wanted = 1;
        x->wake = 1;
        pthread_cond_signal(&x->wake_cv);
    }
    pthread_mutex_unlock(&x->wake_mu);
    if (total)
        *total = known ? fit : 0;
    return known ? up : -1;
}

static void round_once(slurm_exec *x, xwork *work, xresult *res)
{
    refresh_nodes(x);
    pthread_mutex_lock(x->mu);
    int n = collect(x, work);
    pthread_mutex_unlock(x->mu);

    int contacted = 0, ok = 1;
    char msg[300] = "";
    for (int k = 0; k < n; k++) {
        xwork *w = &work[k];
        if (w->submit) {
            do_submit(x, w);
            contacted = 1;
            if (w->submit_s == TY_EIO) {
                ok = 0;
                snprintf(msg, sizeof msg, "%s", w->submit_err.msg);
            }
        }
        if (w->cancel) {
            ty_err err = {0};
            contacted = 1;
            ty_status cs = slurmrest_cancel(x->cfg.rest, w->slurm_id, 0, &err);
            /* TY_ENOTFOUND: Slurm has forgotten it; the poll settles it. */
            if (cs != TY_OK && cs != TY_ENOTFOUND) {
                log_msg_limited(NULL, "error",
                                "slurm: cancel of Slurm job %ld: %s",
                                w->slurm_id, err.msg);
                if (cs == TY_EIO) {
                    ok = 0;
                    snprintf(msg, sizeof msg, "%s", err.msg);
                }
                /* Try again next round. */
                pthread_mutex_lock(x->mu);
                if (x->p[w->place].gen == w->gen)
                    x->p[w->place].cancel_sent = 0;
                pthread_mutex_unlock(x->mu);
            }
        }
        if (w->poll) {
            contacted = 1;
            w->poll_s =
                slurmrest_job(x->cfg.rest, w->slurm_id, &w->info, &w->poll_err);
            if (w->poll_s == TY_EIO) {
                ok = 0;
                snprintf(msg, sizeof msg, "%s", w->poll_err.msg);
            }
        }
    }
    /* A gang that ended may have lost a node: the node list is read now,
     * before the end is told, so that an elastic gang's next start counts
     * only the nodes still up (svc_gang_world). */
    int gang_ended = 0;
    for (int k = 0; k < n; k++)
        gang_ended |= work[k].poll && work[k].poll_s == TY_OK &&
                      work[k].ranks > 1 &&
                      slurm_state_terminal(work[k].info.state);
    if (gang_ended) {
        pthread_mutex_lock(&x->wake_mu);
        x->nodes_at = 0;
        pthread_mutex_unlock(&x->wake_mu);
        refresh_nodes(x);
    }
    if (!contacted && mono_now() - x->last_ok > PING_EVERY_S) {
        ty_err err = {0};
        ok = slurmrest_ping(x->cfg.rest, &err) == TY_OK;
        snprintf(msg, sizeof msg, "%s", err.msg);
        contacted = 1;
    }
    if (contacted)
        note_health(x, ok, msg);

    pthread_mutex_lock(&x->msg_mu);
    pthread_mutex_lock(x->mu);
    apply(x, work, n, res);
    pthread_mutex_unlock(x->mu);
    for (int k = 0; k < n; k++)
        if (res[k].status) {
            if (x->p[res[k].place].gen == res[k].gen)
                x->hooks.on_status(x->hooks.ctx, res[k].place, res[k].status);
            json_decref(res[k].status);
            res[k].status = NULL;
        }
    pthread_mutex_lock(x->mu);
    for (int k = 0; k < n; k++) {
        xresult *r = &res[k];
        xplace *p = &x->p[r->place];
        if (!r->end || p->gen != r->gen || p->phase == XP_FREE)
            continue;
        remember_ended(x, p);
        p->phase = XP_FREE;
        memset(p->token, 0, sizeof p->token);
        x->hooks.on_end(x->hooks.ctx, r->place, r->ws, r->how,
                        r->why[0] ? r->why : NULL);
    }
    pthread_mutex_unlock(x->mu);
    pthread_mutex_unlock(&x->msg_mu);
}

static void *slurm_main(void *arg)
{
    slurm_exec *x = arg;
    xwork *work = calloc((size_t)x->cap + 1, sizeof *work);
    xresult *res = calloc((size_t)x->cap + 1, sizeof *res);
    if (!work || !res) {
        log_msg("error", "slurm: out of memory; the executor stops");
        free(work);
        free(res);
        return NULL;
    }
    for (;;) {
        pthread_mutex_lock(&x->wake_mu);
        int stop = x->stopping;
        pthread_mutex_unlock(&x->wake_mu);
        if (stop)
            break;
        round_once(x, work, res);
        pthread_mutex_lock(&x->wake_mu);
        if (!x->wake && !x->stopping) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            double wait = x->cfg.poll_s > 0 ? x->cfg.poll_s : 1.0;
            ts.tv_sec += (time_t)wait;
            ts.tv_nsec += (long)((wait - (double)(time_t)wait) * 1e9);
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&x->wake_cv, &x->wake_mu, &ts);
        }
        x->wake = 0;
        pthread_mutex_unlock(&x->wake_mu);
    }
    free(work);
    free(res);
    return NULL;
}

static json_t *slurm_status(void *impl)
{
    slurm_exec *x = impl;
    pthread_mutex_lock(&x->wake_mu);
    json_t *o =
        json_pack("{s:s, s:b, s:s}", "executor", "slurm", "ok", !x->outage,
                  "api_version", slurmrest_version(x->cfg.rest));
    if (x->outage) {
        char since[64];
        time_t t = (time_t)x->outage_since;
        struct tm tm;
        gmtime_r(&t, &tm);
        strftime(since, sizeof since, "%Y-%m-%dT%H:%M:%SZ", &tm);
        char detail[512];
        snprintf(detail, sizeof detail,
                 "slurmrestd is unreachable since %s; new training jobs wait "
                 "to be submitted, running ones go on",
                 since);
        json_object_set_new(o, "detail", json_string(detail));
        json_object_set_new(o, "submissions", json_string("paused"));
    } else {
        json_object_set_new(o, "submissions", json_string("open"));
    }
    pthread_mutex_unlock(&x->wake_mu);
    return o;
}

static void slurm_destroy(void *impl)
{
    slurm_exec *x = impl;
    if (x->thread_started) {
        pthread_mutex_lock(&x->wake_mu);
        x->stopping = 1;
        pthread_cond_signal(&x->wake_cv);
        pthread_mutex_unlock(&x->wake_mu);
        pthread_join(x->thread, NULL);
    }
    pthread_mutex_destroy(&x->msg_mu);
    pthread_mutex_destroy(&x->wake_mu);
    pthread_cond_destroy(&x->wake_cv);
    free(x->node_cpus);
    free(x->node_up);
    free(x->p);
    free(x);
}

int exec_is_slurm(const executor *x) { return x && !strcmp(x->name, "slurm"); }

/* A setting that goes into the batch script between single quotes. */
static ty_status script_safe(const char *v, const char *flag, ty_err *err)
{
    if (!v || !v[0] || strpbrk(v, "'\n\r"))
        return ty_fail(err, TY_EINVAL, flag,
                       "%s must be set and hold no quote or newline", flag);
    return TY_OK;
}

executor *exec_slurm_create(const exec_slurm_config *cfg, pthread_mutex_t *mu,
                            const exec_hooks *hooks, ty_err *err)
{
    if (script_safe(cfg->worker_command, "--slurm-worker-command", err) !=
            TY_OK ||
        script_safe(cfg->server_url, "--slurm-server-url", err) != TY_OK ||
        script_safe(cfg->workdir, "--slurm-workdir", err) != TY_OK)
        return NULL;
    executor *ex = calloc(1, sizeof *ex);
    slurm_exec *x = calloc(1, sizeof *x);
    if (!ex || !x || !(x->p = calloc((size_t)cfg->places + 1, sizeof *x->p))) {
        if (x)
            free(x->p);
        free(x);
        free(ex);
        ty_fail(err, TY_ENOMEM, NULL, "out of memory");
        return NULL;
    }
    x->cfg = *cfg;
    x->cap = cfg->places;
    snprintf(x->worker_command, sizeof x->worker_command, "%s",
             cfg->worker_command);
    snprintf(x->server_url, sizeof x->server_url, "%s", cfg->server_url);
    snprintf(x->workdir, sizeof x->workdir, "%s", cfg->workdir);
    snprintf(x->partition, sizeof x->partition, "%s",
             cfg->partition ? cfg->partition : "");
    snprintf(x->account, sizeof x->account, "%s",
             cfg->account ? cfg->account : "");
    snprintf(x->qos, sizeof x->qos, "%s", cfg->qos ? cfg->qos : "");
    snprintf(x->ca_file, sizeof x->ca_file, "%s",
             cfg->ca_file ? cfg->ca_file : "");
    x->mu = mu;
    x->hooks = *hooks;
    pthread_mutex_init(&x->msg_mu, NULL);
    pthread_mutex_init(&x->wake_mu, NULL);
    pthread_cond_init(&x->wake_cv, NULL);
    *ex = (executor){.name = "slurm",
                     .impl = x,
                     .start = slurm_start,
                     .preempt = slurm_preempt,
                     .cancel = slurm_cancel,
                     .status = slurm_status,
                     .destroy = slurm_destroy};
    if (pthread_create(&x->thread, NULL, slurm_main, x) != 0) {
        slurm_destroy(x);
        free(ex);
        ty_fail(err, TY_EIO, NULL, "cannot start the Slurm executor's thread");
        return NULL;
    }
    x->thread_started = 1;
    return ex;
}
