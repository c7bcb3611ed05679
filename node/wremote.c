/*
 * wremote.c - the remote worker shim (see wremote.h): `trainyard worker
 * --server URL --job ID`, for a worker that shares no filesystem with the
 * server. It downloads the job into a private folder under its working
 * directory, runs the ordinary `trainyard worker --job-dir <folder>` as
 * its child and relays, over HTTP, what the child prints and writes.
 *
 * What it keeps true:
 *  - the child's lines reach the server in the order it printed them,
 *    every one of them but superseded heartbeats and progress while the
 *    server does not answer (wremote_queue_coalesce);
 *  - a line that says a file exists (an epoch record, a checkpointed
 *    preemption, "done") is posted only after that file was uploaded;
 *  - after a 401 or a 409 nothing more is sent, and the child is stopped;
 *  - the token never reaches the child: it is taken out of the
 *    environment before anything else runs;
 *  - the private folder is removed on every way out (after the log tail
 *    was posted);
 *  - the exit status is the child's (128 + N when signal N killed it),
 *    so Slurm's exit code is the worker protocol's; 1 is the shim's own
 *    failure (the server refused it, or did not answer for the retry
 *    budget), 3 a 409 or a signal before the child ran.
 *
 * A data-parallel gang on Slurm runs one shim a rank (srun --mpi=pmix in
 * the batch script, jobs/exec_slurm.c): every one fetches the job, its
 * blobs and the checkpoint and runs its worker, which inherits the PMIx
 * environment and joins the others in MPI_Init (the shim itself never
 * initialises MPI). Rank 0's shim alone talks to the server afterwards -
 * lines, uploads, the log tail, the server's preempt or cancel for its
 * child, which the trainer's agreed stop (models/train/dp.c) spreads to
 * every rank at the same step. The others relay nothing: they wait for
 * their child and exit 0 when it stopped as told (wremote_rank_exit), so
 * srun's --kill-on-bad-exit ends the step only on a real failure.
 *
 * The transfers are node/wremote_http.c's (each one try); when to try
 * again, and when to give up, is decided here. The child process and the
 * signal handler are node/wremote_child.c's (the only global state); the
 * relay's figures, node/wremote_stats.c's. None of them calls back.
 */
#include "node/wremote.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "common/fsutil.h"
#include "common/sha256.h"
#include "node/protocol.h"
#include "node/wremote_child.h"
#include "node/wremote_http.h"
#include "node/wremote_internal.h"
#include "node/wremote_stats.h"

/* ==== the shim ==== */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

#define SHIM_GO_ON (-1) /* a step's "carry on"; else the exit status */
#define SHIM_AGAIN (-2) /* a request to send again (after the wait) */
#define SHIM_EXIT_FAILED 1
#define SHIM_URL_MAX 2048
#define SHIM_SERVER_MAX 1024
#define SHIM_TOKEN_MAX 128

typedef struct {
    wrhttp_conn http;
    const char *server, *job;
    double retry_budget_s;
    char dir[PATH_MAX]; /* the private folder; "" until made */
    char log_path[PATH_MAX], ckpt_path[PATH_MAX], model_path[PATH_MAX];
    char node[256]; /* the host name, for the started line */
    wrchild child;
    int child_status; /* its exit status once reaped */
    wremote_queue pending;
    wremote_retry retry;
    long interval_ms;   /* post at least this often */
    double last_post;   /* when a post last went through */
    char ckpt_sha[65];  /* the checkpoint the server has; "" none */
    char model_sha[65]; /* the model it has; "" none */
    wrstats stats;
    int rank; /* in a gang's Slurm step; 0: the one that reports */
} shim;

static void shim_url(const shim *s, const char *tmpl, const char *sha,
                     char out[SHIM_URL_MAX])
{
    /* Fits: the server's URL and the job id were bounded at the start. */
    wremote_url(out, SHIM_URL_MAX, s->server, tmpl, s->job, sha);
}

/* Whether a SIGTERM came before the child ran: it ends the transfers and
 * the shim (afterwards it is the child's to act on). */
static int stopped_early(const shim *s)
{
    return s->http.stop && *s->http.stop;
}

/* Stops the child when it runs, says on stderr why the shim gives up on
 * a request (msg: what happened to it) and returns the exit status. */
static int shim_give_up(shim *s, wrhttp_outcome o, const char *msg)
{
    wrchild_stop(&s->child);
    if (o == WRHTTP_GONE) {
        fprintf(stderr,
                "trainyard worker: the server ended this attempt of job %s "
                "(409); stopped\n",
                s->job);
        return WPROTO_EXIT_CANCELLED;
    }
    if (stopped_early(s)) {
        fprintf(stderr, "trainyard worker: stopped by a signal before the "
                        "worker started\n");
        return WPROTO_EXIT_CANCELLED;
    }
    if (o == WRHTTP_UNAUTHORIZED)
        fprintf(stderr,
                "trainyard worker: the server refused the token of job %s "
                "(%s)\n",
                s->job, msg);
    else if (o == WRHTTP_RETRY)
        fprintf(stderr,
                "trainyard worker: the server did not answer for %.0f s "
                "(%s); giving up\n",
                s->retry_budget_s, msg);
    else
        fprintf(stderr, "trainyard worker: %s\n", msg);
    return SHIM_EXIT_FAILED;
}

/* Sleeps until the retry schedule's next try; -1 when a SIGTERM ended it
 * (only while no child runs). */
static int sleep_until_due(const shim *s)
{
    for (;;) {
        if (stopped_early(s))
            return -1;
        double left = s->retry.next_try - now_s();
        if (left <= 0)
            return 0;
        struct timespec ts = {.tv_sec = (time_t)left,
                              .tv_nsec = (long)((left - (time_t)left) * 1e9)};
        nanosleep(&ts, NULL); /* a signal wakes it: look again */
    }
}

/* What to do after a request where no child's lines need reading (the
 * downloads, the log tail): SHIM_GO_ON when it went through, SHIM_AGAIN
 * to send it again (the wait is over), else the exit status. */
static int after_request(shim *s, wrhttp_outcome o, const char *msg)
{
    if (o == WRHTTP_OK) {
        wremote_retry_ok(&s->retry);
        return SHIM_GO_ON;
    }
    if (o == WRHTTP_RETRY && wremote_retry_failed(&s->retry, now_s()) == 0 &&
        sleep_until_due(s) == 0)
        return SHIM_AGAIN;
    return shim_give_up(s, o, msg);
}

/* ---- the job: document, blobs, checkpoint ---- */

/* Fetches the job document and writes the local job.json from it;
 * *doc is the document (new) when SHIM_GO_ON is returned. */
static int fetch_job(shim *s, json_t **doc)
{
    char url[SHIM_URL_MAX], msg[SHIM_URL_MAX + 200], path[PATH_MAX];
    shim_url(s, WREMOTE_PATH_JOB, NULL, url);
    int rc;
    do
        rc = after_request(
            s, wrhttp_get_json(&s->http, url, doc, msg, sizeof msg), msg);
    while (rc == SHIM_AGAIN);
    if (rc != SHIM_GO_ON)
        return rc;
    json_t *job = NULL;
    ty_err err = {0};
    char *text = NULL;
    snprintf(path, sizeof path, "%s/%s", s->dir, WPROTO_JOB_FILE);
    if (wremote_job_file(*doc, s->dir, &job, &err) == TY_OK &&
        !(text = json_dumps(job, JSON_INDENT(2))))
        ty_fail(&err, TY_ENOMEM, NULL, "out of memory");
    if (text)
        fs_write_atomic(path, text, strlen(text), 0600, &err);
    free(text);
    json_decref(job);
    if (err.msg[0]) {
        fprintf(stderr, "trainyard worker: job %s: %s\n", s->job, err.msg);
        json_decref(*doc);
        *doc = NULL;
        return SHIM_EXIT_FAILED;
    }
    return SHIM_GO_ON;
}

/* Downloads url into path until it went through; SHIM_GO_ON with what
 * came hashed into got (and its X-Sha256 header into x), or the exit
 * status. 404: SHIM_GO_ON with got "" when missing_ok, else fatal. */
static int download(shim *s, const char *url, const char *path, int missing_ok,
                    char got[65], char x[65])
{
    char msg[SHIM_URL_MAX + 200];
    int rc;
    do {
        wrhttp_outcome o =
            wrhttp_get_file(&s->http, url, path, got, x, msg, sizeof msg);
        if (o == WRHTTP_NOT_FOUND && missing_ok) {
            unlink(path);
            got[0] = '\0';
            wremote_retry_ok(&s->retry);
            return SHIM_GO_ON;
        }
        rc = after_request(s, o, msg);
    } while (rc == SHIM_AGAIN);
    return rc;
}

/* Downloads the blob sha into the folder and checks its content: a wrong
 * one is fetched once more, then it is the end (exit 1). */
static int fetch_blob(shim *s, const char *sha)
{
    char url[SHIM_URL_MAX], path[PATH_MAX], got[65], x[65];
    wremote_blob_path(s->dir, sha, path, sizeof path);
    if (fs_exists(path)) /* validation and training the same data */
        return SHIM_GO_ON;
    shim_url(s, WREMOTE_PATH_BLOB, sha, url);
    for (int attempt = 1;; attempt++) {
        int rc = download(s, url, path, 0, got, x);
        if (rc != SHIM_GO_ON || !strcmp(got, sha))
            return rc;
        fprintf(stderr,
                "trainyard worker: blob %s of job %s came with content "
                "%s%s\n",
                sha, s->job, got,
                attempt == 1 ? "; fetching it again" : "; giving up");
        if (attempt == 2) {
            unlink(path);
            return SHIM_EXIT_FAILED;
        }
    }
}

/* Downloads the job's last checkpoint, if it has one, and checks it
 * against the reply's X-Sha256 as fetch_blob checks a blob. */
static int fetch_checkpoint(shim *s)
{
    char url[SHIM_URL_MAX], got[65], x[65];
    shim_url(s, WREMOTE_PATH_CHECKPOINT, NULL, url);
    for (int attempt = 1;; attempt++) {
        int rc = download(s, url, s->ckpt_path, 1, got, x);
        if (rc != SHIM_GO_ON || !got[0])
            return rc; /* failed, or no checkpoint (404) */
        if (wremote_sha256_ok(x) && !strcmp(got, x)) {
            memcpy(s->ckpt_sha, got, sizeof s->ckpt_sha);
            return SHIM_GO_ON;
        }
        fprintf(stderr,
                "trainyard worker: the checkpoint of job %s came with "
                "content %s, its X-Sha256 says \"%s\"%s\n",
                s->job, got, x,
                attempt == 1 ? "; fetching it again" : "; giving up");
        if (attempt == 2) {
            unlink(s->ckpt_path);
            return SHIM_EXIT_FAILED;
        }
    }
}

/* Everything the child needs in the folder: job.json, the blobs the job
 * document names (datasets, the model it starts from), the checkpoint to
 * resume from. */
static int shim_prepare(shim *s)
{
    json_t *doc = NULL;
    int rc = fetch_job(s, &doc);
    const json_t *ref[3] = {
        json_object_get(doc, WREMOTE_F_DATASET),
        json_object_get(json_object_get(doc, WPROTO_JOB_VALIDATION),
                        WREMOTE_F_DATASET),
        json_object_get(doc, WREMOTE_F_INIT)};
    for (int i = 0; i < 3 && rc == SHIM_GO_ON; i++) {
        char sha[65];
        /* fetch_job checked the references: the last two may be absent. */
        if (ref[i] && wremote_blob_ref(ref[i], "", sha, NULL) == TY_OK)
            rc = fetch_blob(s, sha);
    }
    if (rc == SHIM_GO_ON)
        rc = fetch_checkpoint(s);
    json_decref(doc);
    return rc;
}

/* ---- the child's lines ---- */

/* Queues one line the child printed (text: without its newline). */
static void take_line(shim *s, const char *text)
{
    wproto_msg kind;
    json_t *line = wremote_relay_line(text, s->node, &kind);
    if (!line) {
        fprintf(stderr, "trainyard worker: the worker printed a line that "
                        "is not a message; dropped\n");
        return;
    }
    if (wremote_queue_push(&s->pending, kind, line) != TY_OK)
        fprintf(stderr, "trainyard worker: out of memory; a %s line is lost\n",
                wproto_msg_name(kind));
    if (s->retry.first_failure >= 0)
        wremote_queue_coalesce(&s->pending);
}

/* Reads what the child printed and queues its whole lines: 1 at the end
 * of its output (it exited), else 0. */
static int child_read(shim *s)
{
    int ended = wrchild_read(&s->child);
    const char *line;
    while ((line = wrchild_line(&s->child)))
        take_line(s, line);
    return ended;
}

/* ---- the relay ---- */

/* The content of fd: its sha256 (hex) and size. -1 when it cannot be
 * read. */
static int hash_fd(int fd, char hex[65], off_t *size)
{
    char buf[65536];
    sha256_ctx c;
    sha256_init(&c);
    off_t pos = 0;
    for (;;) {
        ssize_t r = pread(fd, buf, sizeof buf, pos);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        sha256_update(&c, buf, (size_t)r);
        pos += r;
    }
    uint8_t d[32];
    sha256_final(&c, d);
    sha256_hex(d, hex);
    *size = pos;
    return 0;
}

/* Uploads the file at path to endpoint tmpl unless the server already has
 * its content (*sent: the sha256 it has, updated). A missing file is
 * nothing to send, unless required. The file is opened once: the trainer
 * replaces it by rename, so what this descriptor reads is what was
 * hashed, even when a newer one is written meanwhile. */
static wrhttp_outcome upload_file(shim *s, const char *path, const char *tmpl,
                                  int required, char sent[65], char *msg,
                                  size_t n)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(msg, n, "the worker wrote no %s: %s", path, strerror(errno));
        return required ? WRHTTP_FAILED : WRHTTP_OK;
    }
    char sha[65], url[SHIM_URL_MAX];
    off_t size = 0;
    wrhttp_outcome o = WRHTTP_OK;
    if (hash_fd(fd, sha, &size) != 0) {
        snprintf(msg, n, "cannot read %s: %s", path, strerror(errno));
        o = WRHTTP_FAILED;
    } else if (strcmp(sha, sent) != 0) {
        shim_url(s, tmpl, NULL, url);
        wrhttp_file f = {.fd = fd,
                         .len = size,
                         .part = WREMOTE_PART_FILE,
                         .filename = strrchr(path, '/') + 1,
                         .field = WREMOTE_F_SHA256,
                         .value = sha};
        double t0 = now_s();
        o = wrhttp_post_file(&s->http, url, &f, msg, n);
        if (o == WRHTTP_OK) {
            memcpy(sent, sha, 65);
            wrstats_upload(&s->stats, !strcmp(tmpl, WREMOTE_PATH_MODEL),
                           (now_s() - t0) * 1e3, (double)size);
        }
    }
    close(fd);
    return o;
}

/* Uploads what the server must have before the oldest k queued lines are
 * relayed: once for the batch, however many epoch lines it holds (the
 * newest checkpoint is the one that counts), the checkpoint before the
 * model. */
static wrhttp_outcome upload_for(shim *s, size_t k, char *msg, size_t n)
{
    int checkpoint = 0, model = 0;
    for (size_t i = 0; i < k; i++) {
        const wremote_line *e = &s->pending.v[i];
        wremote_upload u = wremote_upload_before(e->kind, e->line);
        checkpoint |= u == WREMOTE_UPLOAD_CHECKPOINT;
        model |= u == WREMOTE_UPLOAD_MODEL;
    }
    wrhttp_outcome o = WRHTTP_OK;
    if (checkpoint)
        o = upload_file(s, s->ckpt_path, WREMOTE_PATH_CHECKPOINT, 0,
                        s->ckpt_sha, msg, n);
    if (model && o == WRHTTP_OK)
        o = upload_file(s, s->model_path, WREMOTE_PATH_MODEL, 1, s->model_sha,
                        msg, n);
    return o;
}

/* POSTs the oldest k queued lines as one batch; *reply: the reply (new,
 * NULL when it is not JSON). */
static wrhttp_outcome post_lines(shim *s, size_t k, json_t **reply, char *msg,
                                 size_t n)
{
    char url[SHIM_URL_MAX];
    json_t *lines = json_array();
    for (size_t i = 0; lines && i < k; i++)
        if (json_array_append(lines, s->pending.v[i].line) != 0) {
            json_decref(lines);
            lines = NULL;
        }
    json_t *body = lines ? json_pack("{s:o}", WREMOTE_F_LINES, lines) : NULL;
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    *reply = NULL;
    if (!text) {
        snprintf(msg, n, "out of memory for a batch of %zu lines", k);
        return WRHTTP_FAILED;
    }
    shim_url(s, WREMOTE_PATH_EVENTS, NULL, url);
    double t0 = now_s();
    wrhttp_outcome o = wrhttp_post_json(&s->http, url, text, reply, msg, n);
    free(text);
    if (o == WRHTTP_OK)
        wrstats_post(&s->stats, k, (now_s() - t0) * 1e3);
    return o;
}

/* What the server asked for in its reply to the events. */
static void act_on(shim *s, wremote_action a)
{
    if (a == WREMOTE_DO_PREEMPT)
        wrchild_preempt(&s->child);
    else if (a == WREMOTE_DO_CANCEL)
        wrchild_cancel(&s->child);
}

/* After a relay request that failed: when the server did not answer and
 * the budget is not spent, keeps the lines (coalesced) for the next try
 * and returns SHIM_GO_ON; else gives up (the exit status). */
static int relay_failed(shim *s, wrhttp_outcome o, const char *msg)
{
    int first = s->retry.first_failure < 0;
    if (o != WRHTTP_RETRY || wremote_retry_failed(&s->retry, now_s()) != 0)
        return shim_give_up(s, o, msg);
    if (first)
        fprintf(stderr,
                "trainyard worker: the server does not answer (%s); keeping "
                "the lines, retrying for up to %.0f s\n",
                msg, s->retry_budget_s);
    wremote_queue_coalesce(&s->pending);
    return SHIM_GO_ON;
}

/* Posts the queued lines (WREMOTE_MAX_LINES a request), each batch after
 * the uploads its lines need, or one empty batch when heartbeat is set
 * and nothing is queued; acts on the replies. SHIM_GO_ON (also when the
 * server did not answer: the lines stay queued, the next try is
 * scheduled), else the exit status. */
static int relay_flush(shim *s, int heartbeat)
{
    char msg[SHIM_URL_MAX + 200];
    while (s->pending.n > 0 || heartbeat) {
        heartbeat = 0;
        size_t k =
            s->pending.n < WREMOTE_MAX_LINES ? s->pending.n : WREMOTE_MAX_LINES;
        wrhttp_outcome o = upload_for(s, k, msg, sizeof msg);
        json_t *reply = NULL;
        if (o == WRHTTP_OK)
            o = post_lines(s, k, &reply, msg, sizeof msg);
        if (o != WRHTTP_OK)
            return relay_failed(s, o, msg);
        if (s->retry.first_failure >= 0)
            fprintf(stderr, "trainyard worker: the server answers again\n");
        wremote_retry_ok(&s->retry);
        wremote_queue_drop_front(&s->pending, k);
        s->last_post = now_s();
        act_on(s, wremote_action_of(reply));
        json_decref(reply);
    }
    return SHIM_GO_ON;
}

/* How long to wait for the child's next line: until the next post is
 * due - at the heartbeat interval, or at the next retry while the server
 * does not answer and lines wait (with none waiting, a retry waits for
 * the heartbeat too, so a failing server is never polled faster). */
static int poll_timeout_ms(const shim *s)
{
    double heartbeat_due = s->last_post + s->interval_ms / 1000.0;
    double due = heartbeat_due;
    if (s->retry.first_failure >= 0)
        due = s->pending.n > 0 || s->retry.next_try > heartbeat_due
                  ? s->retry.next_try
                  : heartbeat_due;
    double ms = (due - now_s()) * 1000.0;
    if (ms <= 0)
        return 0;
    return ms > (double)s->interval_ms ? (int)s->interval_ms : (int)ms + 1;
}

/* POSTs the last WREMOTE_LOG_TAIL bytes of worker.log. Best effort: the
 * child's status is the shim's either way. */
static void post_log_tail(shim *s)
{
    char url[SHIM_URL_MAX], msg[SHIM_URL_MAX + 200];
    int fd = open(s->log_path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        if (fd >= 0)
            close(fd);
        return;
    }
    off_t base =
        st.st_size > WREMOTE_LOG_TAIL ? st.st_size - WREMOTE_LOG_TAIL : 0;
    wrhttp_file f = {.fd = fd,
                     .base = base,
                     .len = st.st_size - base,
                     .part = WREMOTE_PART_FILE,
                     .filename = WPROTO_LOG_FILE};
    shim_url(s, WREMOTE_PATH_LOG, NULL, url);
    int rc;
    do
        rc = after_request(
            s, wrhttp_post_file(&s->http, url, &f, msg, sizeof msg), msg);
    while (rc == SHIM_AGAIN);
    close(fd);
}

/* The child has exited: posts what it printed last (waiting out a server
 * that does not answer, within the budget) and, when it did not end
 * well, the tail of its worker.log; returns its exit status. */
static int relay_finish(shim *s)
{
    int rc;
    while ((rc = relay_flush(s, 0)) == SHIM_GO_ON && s->pending.n > 0)
        sleep_until_due(s);
    if (rc != SHIM_GO_ON)
        return rc;
    if (s->child_status != WPROTO_EXIT_OK)
        post_log_tail(s);
    return s->child_status;
}

/* Relays until the child exits: reads its lines, posts them as they come
 * (and at least every heartbeat interval), retries a server that does not
 * answer while the child goes on. */
static int relay_run(shim *s)
{
    s->last_post = now_s();
    for (;;) {
        struct pollfd p = {.fd = s->child.out_fd, .events = POLLIN};
        if (poll(&p, 1, poll_timeout_ms(s)) > 0 && child_read(s))
            break;
        double now = now_s();
        int heartbeat = now - s->last_post >= s->interval_ms / 1000.0;
        if (wremote_retry_due(&s->retry, now) &&
            (s->pending.n > 0 || heartbeat)) {
            int rc = relay_flush(s, heartbeat);
            if (rc != SHIM_GO_ON)
                return rc;
        }
    }
    s->child_status = wremote_exit_status(wrchild_reap(&s->child));
    return relay_finish(s);
}

/* ---- the process ---- */

static int usage(const char *why)
{
    fprintf(stderr,
            "trainyard worker: %s\n"
            "usage: %s=TOKEN trainyard worker --server URL --job ID\n"
            "(started by Slurm for `trainyard serve`; not meant to be run "
            "by hand)\n",
            why, WREMOTE_ENV_TOKEN);
    return WPROTO_EXIT_USAGE;
}

/* Checks the command line and the token; NULL when they are good, else
 * why not. */
static const char *check_usage(const char *server, const char *job,
                               const char *token)
{
    if (!server || !job)
        return "--server URL and --job ID are both needed";
    if (strncmp(server, "http://", 7) && strncmp(server, "https://", 8))
        return "--server is not an http:// or https:// URL";
    if (strlen(server) > SHIM_SERVER_MAX)
        return "--server is too long";
    if (!wremote_job_id_ok(job))
        return "--job is not a job id";
    if (!token || !*token || strlen(token) > SHIM_TOKEN_MAX ||
        strpbrk(token, "\r\n"))
        return WREMOTE_ENV_TOKEN " is not set to a token";
    return NULL;
}

/* Makes the private folder (0700) under the working directory, named
 * after the job and the pid. */
static int shim_make_dir(shim *s)
{
    char cwd[PATH_MAX - 200];
    if (!getcwd(cwd, sizeof cwd)) {
        fprintf(stderr, "trainyard worker: no working directory: %s\n",
                strerror(errno));
        return SHIM_EXIT_FAILED;
    }
    snprintf(s->dir, sizeof s->dir, "%s/trainyard-%s-%ld", cwd, s->job,
             (long)getpid());
    if (mkdir(s->dir, 0700) != 0) {
        fprintf(stderr, "trainyard worker: cannot make %s: %s\n", s->dir,
                strerror(errno));
        s->dir[0] = '\0';
        return SHIM_EXIT_FAILED;
    }
    snprintf(s->log_path, sizeof s->log_path, "%s/%s", s->dir, WPROTO_LOG_FILE);
    snprintf(s->ckpt_path, sizeof s->ckpt_path, "%s/%s", s->dir,
             CHECKPOINT_FILE);
    snprintf(s->model_path, sizeof s->model_path, "%s/%s", s->dir, MODEL_FILE);
    return SHIM_GO_ON;
}

/* Starts the worker in the folder (the token already taken out of the
 * environment it inherits); from then on a SIGTERM is the child's to act
 * on, not the transfers'. */
static int start_child(shim *s)
{
    ty_err err = {0};
    if (wrchild_start(&s->child, s->dir, s->log_path, &err) != TY_OK) {
        fprintf(stderr, "trainyard worker: %s\n", err.msg);
        return SHIM_EXIT_FAILED;
    }
    s->http.stop = NULL;
    return SHIM_GO_ON;
}

/* A gang's rank above 0: waits for its child (whose stdout is
 * /dev/null: node/worker.c silences every rank but 0) and posts
 * nothing; when the child failed, the tail of its log goes to stderr,
 * which Slurm writes into the job's output file. */
static int quiet_run(shim *s)
{
    for (;;) {
        struct pollfd p = {.fd = s->child.out_fd, .events = POLLIN};
        if (poll(&p, 1, 1000) < 0 && errno != EINTR)
            break;
        int ended = wrchild_read(&s->child);
        while (wrchild_line(&s->child))
            ; /* nothing to say: rank 0 speaks for the job */
        if (ended)
            break;
    }
    int status = wremote_exit_status(wrchild_reap(&s->child));
    int rc = wremote_rank_exit(status);
    if (rc != 0) {
        char tail[4096];
        int fd = open(s->log_path, O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd >= 0 && fstat(fd, &st) == 0) {
            off_t base = st.st_size > (off_t)sizeof tail - 1
                             ? st.st_size - (off_t)sizeof tail + 1
                             : 0;
            ssize_t r = pread(fd, tail, sizeof tail - 1, base);
            if (r > 0) {
                tail[r] = '\0';
                fprintf(stderr, "trainyard worker: rank %d's worker.log:\n%s",
                        s->rank, tail);
            }
        }
        if (fd >= 0)
            close(fd);
    }
    fprintf(stderr,
            "trainyard worker: rank %d of job %s on %s: its worker exited "
            "%d\n",
            s->rank, s->job, s->node, status);
    return rc;
}

static int shim_run(shim *s)
{
    int rc = shim_make_dir(s);
    if (rc == SHIM_GO_ON)
        rc = shim_prepare(s);
    if (rc == SHIM_GO_ON && stopped_early(s)) /* between transfers */
        rc = WPROTO_EXIT_CANCELLED;
    if (rc == SHIM_GO_ON)
        rc = start_child(s);
    if (rc == SHIM_GO_ON)
        rc = s->rank > 0 ? quiet_run(s) : relay_run(s);
    return rc;
}

int wremote_main(int argc, char **argv)
{
    const char *server = NULL, *job = NULL;
    for (int i = 1; i + 1 < argc; i++) {
        if (!strcmp(argv[i], WREMOTE_ARG_SERVER))
            server = argv[++i];
        else if (!strcmp(argv[i], WREMOTE_ARG_JOB))
            job = argv[++i];
    }
    const char *token = getenv(WREMOTE_ENV_TOKEN);
    const char *bad = check_usage(server, job, token);
    int rank = wremote_rank(getenv("PMIX_RANK"), getenv("SLURM_PROCID"));
    if (!bad && rank < 0)
        bad = "PMIX_RANK or SLURM_PROCID is not a rank";
    if (bad)
        return usage(bad);
    shim *s = calloc(1, sizeof *s);
    if (!s)
        return SHIM_EXIT_FAILED;
    snprintf(s->http.token_header, sizeof s->http.token_header, "%s: %s",
             WREMOTE_HDR_TOKEN, token);
    /* The child inherits the environment: the secret stays with the
     * shim. */
    unsetenv(WREMOTE_ENV_TOKEN);
    wrchild_signals_install();
    s->server = server;
    s->job = job;
    wrchild_init(&s->child);
    s->http.ca_file = getenv(WREMOTE_ENV_CA_FILE);
    if (s->http.ca_file && !*s->http.ca_file)
        s->http.ca_file = NULL;
    s->http.stop = wrchild_term_flag();
    s->retry_budget_s = wremote_retry_budget(getenv(WREMOTE_ENV_RETRY_S));
    wremote_retry_init(&s->retry, s->retry_budget_s);
    s->interval_ms = wremote_post_interval_ms(getenv(WPROTO_ENV_HEARTBEAT_MS));
    wremote_queue_init(&s->pending);
    if (gethostname(s->node, sizeof s->node - 1) != 0)
        snprintf(s->node, sizeof s->node, "unknown");
    s->rank = rank;
    if (getenv("PMIX_RANK"))
        fprintf(stderr, "trainyard worker: rank %d of job %s on %s%s\n", rank,
                job, s->node, rank ? " (quiet: rank 0 reports)" : "");
    int rc = SHIM_EXIT_FAILED;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK &&
        (s->http.curl = curl_easy_init()))
        rc = shim_run(s);
    else
        fprintf(stderr, "trainyard worker: cannot start libcurl\n");
    wrchild_stop(&s->child);
    wrstats_print(&s->stats);
    if (s->dir[0]) {
        ty_err err = {0};
        if (fs_remove_tree(s->dir, &err) != TY_OK)
            fprintf(stderr, "trainyard worker: %s\n", err.msg);
    }
    curl_easy_cleanup(s->http.curl);
    curl_global_cleanup();
    wremote_queue_free(&s->pending);
    free(s);
    return rc;
}
