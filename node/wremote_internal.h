/*
 * wremote_internal.h - the pure pieces of the remote worker shim
 * (node/wremote.c; they live in node/wremote_rules.c), exposed for
 * tests/unit/test_wremote.c: the queue of
 * lines waiting to be posted and its coalescing rule, the line the shim
 * relays for one of its child's, what must be uploaded before a line is
 * relayed, the local job.json built from the job document, the endpoint
 * URLs, the retry schedule and the exit status. Nothing here touches the
 * network, a process or a file.
 */
#ifndef TY_WREMOTE_INTERNAL_H
#define TY_WREMOTE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "common/ty.h"
#include "node/protocol.h"

/* The job document's key for the checkpoint blob (wremote.h), and the
 * files in the shim's private folder. */
#define DOC_CHECKPOINT "checkpoint"
#define CHECKPOINT_FILE "checkpoint.safetensors"
#define MODEL_FILE "model.safetensors"
#define BLOB_PREFIX "blob-"

/* ---- the lines waiting to be posted ---- */

typedef struct {
    json_t *line; /* owned */
    wproto_msg kind;
} wremote_line;

/* The child's lines in the order it printed them, oldest first. */
typedef struct {
    wremote_line *v;
    size_t n, cap;
} wremote_queue;

void wremote_queue_init(wremote_queue *q);
/* Frees every line still queued. */
void wremote_queue_free(wremote_queue *q);
/* Appends line (taken: freed here on failure). TY_ENOMEM when the queue
 * cannot grow; nothing is queued then. */
ty_status wremote_queue_push(wremote_queue *q, wproto_msg kind, json_t *line);
/* Removes (and frees) the oldest n lines (all of them when n >= q->n). */
void wremote_queue_drop_front(wremote_queue *q, size_t n);
/* While the server does not answer: drops every heartbeat but the newest
 * and every progress line but the newest; every other line is kept, in
 * order. Bounds the queue by the run's epochs, not its duration. */
void wremote_queue_coalesce(wremote_queue *q);

/* The object to relay for one line the child printed (text, without its
 * newline): the decoded line, with WREMOTE_F_NODE = node added to the
 * started line. NULL (and *kind WPROTO_MSG_NONE) for a line that is not a
 * message, or out of memory. */
json_t *wremote_relay_line(const char *text, const char *node,
                           wproto_msg *kind);

/* What the server must have before a line is relayed. */
typedef enum {
    WREMOTE_UPLOAD_NONE = 0,
    WREMOTE_UPLOAD_CHECKPOINT, /* "epoch"; "preempted" with checkpoint true */
    WREMOTE_UPLOAD_MODEL,      /* "done" */
} wremote_upload;

wremote_upload wremote_upload_before(wproto_msg kind, const json_t *line);

/* ---- the job ---- */

/* Whether id can name a job in a URL path and a folder name: 1 to 128 of
 * [A-Za-z0-9._-], not starting with '.'. */
int wremote_job_id_ok(const char *id);

/* Whether hex is 64 lowercase hex digits. */
int wremote_sha256_ok(const char *hex);

/* The blob a job document names at ref ({"sha256", "bytes"}): copies its
 * sha256 into sha. TY_EFORMAT (err says which) when ref is not such an
 * object; what says what it is ("dataset"). */
ty_status wremote_blob_ref(const json_t *ref, const char *what, char sha[65],
                           ty_err *err);

/* The local job.json for the job document doc (borrowed) in folder dir:
 * the document's keys, with "dataset" and a validation "dataset" replaced
 * by dataset_path (dir/blob-<sha256>), "checkpoint" by checkpoint_path
 * (dir/checkpoint.safetensors, whether or not there is one yet) and
 * model_path (dir/model.safetensors) added. *out is new. TY_EFORMAT (err
 * says what) for a document without them; nothing is made then. */
ty_status wremote_job_file(const json_t *doc, const char *dir, json_t **out,
                           ty_err *err);

/* A blob's local name in the shim's folder: dir/blob-<sha>. */
void wremote_blob_path(const char *dir, const char *sha, char *out,
                       size_t n);

/* ---- the server ---- */

/* The URL of endpoint tmpl (a WREMOTE_PATH_*) on server (a trailing '/'
 * is dropped) for job id, {sha256} replaced by sha (may be NULL when tmpl
 * has none). TY_EINVAL when it does not fit in n bytes. */
ty_status wremote_url(char *out, size_t n, const char *server,
                      const char *tmpl, const char *id, const char *sha);

typedef enum {
    WREMOTE_DO_RUN = 0,
    WREMOTE_DO_PREEMPT,
    WREMOTE_DO_CANCEL,
} wremote_action;

/* The action an events reply asks for ({"action": ...}); anything but
 * preempt or cancel (an unknown word, no reply) is run. */
wremote_action wremote_action_of(const json_t *reply);

/* How the shim retries a server that does not answer (5xx, no
 * connection): the first retry WREMOTE_RETRY_MS after the failure, each
 * next one twice as late up to WREMOTE_RETRY_MAX_MS, until budget_s
 * seconds have passed since the first failure of the run of them. */
#define WREMOTE_RETRY_MAX_MS 5000
typedef struct {
    double budget_s;
    double first_failure; /* monotonic seconds; < 0: none failing */
    double next_try;      /* when to try again */
    long delay_ms;        /* the wait after the last failure */
} wremote_retry;

void wremote_retry_init(wremote_retry *r, double budget_s);
/* A request answered: the next failure starts a new run. */
void wremote_retry_ok(wremote_retry *r);
/* A request failed at now: schedules the next try; 0, or -1 when the
 * budget is spent (give up). */
int wremote_retry_failed(wremote_retry *r, double now);
/* Whether a request may go now (no failures pending, or next_try due). */
int wremote_retry_due(const wremote_retry *r, double now);

/* TRAINYARD_SERVER_RETRY_S = value in seconds: 600 for NULL, "" or
 * anything but a whole number from 1 to 86400. */
double wremote_retry_budget(const char *value);

/* How often the shim posts when it has nothing to send: the heartbeat
 * interval TRAINYARD_HEARTBEAT_MS = value asks for, as the worker reads it
 * (node/worker.c; not called from here, which would make a circle of the
 * two modules): WPROTO_HEARTBEAT_DEFAULT_MS for NULL or anything but a
 * whole number from WPROTO_HEARTBEAT_MIN_MS to WPROTO_HEARTBEAT_MAX_MS. */
long wremote_post_interval_ms(const char *value);

/* The shim's exit status for its child's wait status: the child's exit
 * code, or 128 + N for a child killed by signal N. */
int wremote_exit_status(int wstatus);

/* ---- a data-parallel gang's ranks (srun --mpi=pmix) ---- */

/* This shim's rank in its Slurm step: PMIX_RANK's value (what MPI_Init in
 * the child will take), else SLURM_PROCID's, else 0 (an ordinary job).
 * -1 when the one given is not a decimal rank. */
int wremote_rank(const char *pmix_rank, const char *slurm_procid);

/* A rank above 0's exit status for its child's (wremote_exit_status):
 * 0 when the child stopped as the job was told to (done, preempted,
 * cancelled: rank 0 reports that), so srun --kill-on-bad-exit does not
 * kill rank 0 while it uploads; the child's status otherwise (a failure
 * ends the whole step). */
int wremote_rank_exit(int status);

#endif
