/*
 * wremote.h - the worker protocol over HTTP: how a worker that shares no
 * filesystem with the server (one Slurm started on another node) gets its
 * job and sends back what the local worker sends on its stdout pipe and
 * writes into its job folder.
 *
 * The lines are the same messages, from the same definition
 * (node/protocol.h: wproto_encode_* on the worker's side, wproto_decode on
 * the server's). Only the transport differs:
 *
 *   local worker                  remote worker (this file)
 *   job.json in the job folder    GET  WREMOTE_PATH_JOB
 *   dataset blob paths            GET  WREMOTE_PATH_BLOB (sha256 checked)
 *   checkpoint file (resume)      GET  WREMOTE_PATH_CHECKPOINT
 *   stdout lines                  POST WREMOTE_PATH_EVENTS (batched)
 *   signals SIGUSR1 / SIGTERM     the events reply's "action"
 *   checkpoint written            POST WREMOTE_PATH_CHECKPOINT
 *   model written                 POST WREMOTE_PATH_MODEL
 *   stderr in worker.log          POST WREMOTE_PATH_LOG (the tail)
 *
 * `trainyard worker --server URL --job ID` (WREMOTE_ARG_*) runs it: a
 * shim that downloads the job into a private folder under its working
 * directory, writes a job.json there with local paths, runs the ordinary
 * `trainyard worker --job-dir <folder>` as its child, and relays. Its own
 * exit status is the child's (a child killed by signal N: 128 + N), so
 * Slurm's exit code is the worker protocol's (WPROTO_EXIT_*).
 *
 * Auth: every request carries WREMOTE_HDR_TOKEN: the attempt's token, a
 * secret the server makes for each start of a job (32 random bytes, hex),
 * given to the shim in its environment (WREMOTE_ENV_TOKEN, never on the
 * command line) and valid only for that job and that attempt. The server
 * keeps only its SHA-256. Answers:
 *   401  unknown token, or a token of another job
 *   409  the token's attempt is over (the job was requeued, cancelled or
 *        finished meanwhile): the shim stops its child (SIGTERM) and exits
 *        WPROTO_EXIT_CANCELLED without sending more
 *   5xx / no answer: the server is restarting or unreachable. The shim
 *        keeps its child running, keeps reading its lines, and retries
 *        (every WREMOTE_RETRY_MS, doubling to 5 s) for up to
 *        WREMOTE_ENV_RETRY_S seconds (default 600), keeping every line
 *        but heartbeats and progress, of which only the newest is kept.
 */
#ifndef TY_WREMOTE_H
#define TY_WREMOTE_H

/* The shim's command line: trainyard worker --server URL --job ID. */
#define WREMOTE_ARG_SERVER "--server"
#define WREMOTE_ARG_JOB "--job"

/* Its environment. */
#define WREMOTE_ENV_TOKEN "TRAINYARD_WORKER_TOKEN"
#define WREMOTE_ENV_RETRY_S "TRAINYARD_SERVER_RETRY_S"
#define WREMOTE_ENV_CA_FILE "TRAINYARD_CA_FILE" /* https: the server's CA */
#define WREMOTE_RETRY_MS 200

#define WREMOTE_HDR_TOKEN "X-Trainyard-Worker-Token"

/* The endpoints; {id} is the job id. */
#define WREMOTE_PATH_PREFIX "/v1/worker/jobs/"
/* GET: the job document: job.json's keys (node/protocol.h WPROTO_JOB_*)
 * but with blobs instead of paths:
 *   "dataset": {"sha256": hex, "bytes": n}          (not dataset_path)
 *   "validation": {"dataset": {"sha256", "bytes"}} or {"split": x}
 *   "checkpoint": {"sha256", "bytes"} or null       (not checkpoint_path)
 *   "init": {"sha256", "bytes"}, only when the job starts from a model's
 *   weights (hyperparameters.init_from; not init_path)
 *   no model_path; spec, hyperparameters, threads, extra_meta, job_id as
 *   job.json has them. */
#define WREMOTE_PATH_JOB "/v1/worker/jobs/{id}"
/* GET: a blob the job document names (its sha256: a dataset, or the init
 * model), the raw bytes. 404 for any other. */
#define WREMOTE_PATH_BLOB "/v1/worker/jobs/{id}/blobs/{sha256}"
/* GET: the last checkpoint uploaded (raw bytes; header X-Sha256), 404 when
 * none. POST: a new one (multipart/form-data: a file part "file" and a
 * field "sha256" of its content): stored whole or not at all (temp file,
 * fsync, rename), the same content again is 200 and changes nothing; a
 * sha256 that does not match the bytes is 400. Reply {"sha256","bytes"}. */
#define WREMOTE_PATH_CHECKPOINT "/v1/worker/jobs/{id}/checkpoint"
/* POST: the model the worker wrote (as the checkpoint: multipart "file"
 * and "sha256", atomic, idempotent). The shim posts it before it relays
 * the "done" line. */
#define WREMOTE_PATH_MODEL "/v1/worker/jobs/{id}/model"
/* POST: the tail of the worker's stderr (multipart "file", at most
 * WREMOTE_LOG_TAIL bytes): replaces the job folder's worker.log tail. The
 * shim posts it when the child exits with anything but WPROTO_EXIT_OK. */
#define WREMOTE_PATH_LOG "/v1/worker/jobs/{id}/log"
#define WREMOTE_LOG_TAIL 65536
/* POST application/json {"lines": [line, ...]}: the worker's lines in
 * order (each the object a node/protocol.h encoder made, as the local
 * worker prints it; at most WREMOTE_MAX_LINES a request). The shim adds
 * "node" (its host name) to the started line. Reply
 *   {"action": "run" | "preempt" | "cancel"}
 * preempt: send SIGUSR1 to the child (once); cancel: SIGTERM. A shim with
 * nothing to send posts an empty batch at least every heartbeat interval,
 * so it learns the action. */
#define WREMOTE_PATH_EVENTS "/v1/worker/jobs/{id}/events"
#define WREMOTE_MAX_LINES 256

#define WREMOTE_F_LINES "lines"
#define WREMOTE_F_ACTION "action"
#define WREMOTE_ACTION_RUN "run"
#define WREMOTE_ACTION_PREEMPT "preempt"
#define WREMOTE_ACTION_CANCEL "cancel"
#define WREMOTE_F_DATASET "dataset"
#define WREMOTE_F_INIT "init" /* hyperparameters.init_from's model file */
#define WREMOTE_F_SHA256 "sha256"
#define WREMOTE_F_BYTES "bytes"
#define WREMOTE_F_NODE "node" /* added to the started line */
#define WREMOTE_PART_FILE "file"

/* `trainyard worker --server URL --job ID` (argv[0] "worker"): the shim.
 * Returns the process's exit status. */
int wremote_main(int argc, char **argv);

#endif
