/*
 * replica.h - `trainyard replica`: one serving replica of a deployment in
 * its own process, holding its model loaded on its device (a GPU, a MIG
 * slice, a simulated one, or the CPU) for as long as it lives.
 *
 * Started by the job supervisor like a training worker (jobs/supervisor.h,
 * the same environment: TRAINYARD_DEVICE, CUDA_VISIBLE_DEVICES,
 * TRAINYARD_HEARTBEAT_MS; stdin /dev/null, stdout a pipe to the server,
 * stderr appended to <dir>/worker.log) as
 *     trainyard replica --job-dir <dir>
 * It reads <dir>/replica.json (RPROTO_FILE):
 *     {"replica_id": "rep_...", "deployment_id": "dep_...",
 *      "model_path": "/abs/model.safetensors",
 *      "socket_path": "<dir>/replica.sock",   (at most 107 bytes)
 *      "threads": 0,                          (engine threads; 0: all)
 *      "kv_cache_bytes": 268435456,           (a language model's key/value
 *                                              cache on the CPU, the server's
 *                                              --kv-cache; on a GPU or MIG
 *                                              slice the cache takes 90% of
 *                                              the memory free once the model
 *                                              is loaded, gen_engine.h)
 *      "batching": {"max_batch_size": 32, "max_queue_delay_us": 500,
 *                   "preferred_batch_sizes": [8, 16]}}
 *
 * On stdout, one JSON object per line, as node/protocol.h's worker:
 *   1. {"event":"started", ...} exactly as a worker's first line;
 *   2. heartbeats from then on, every TRAINYARD_HEARTBEAT_MS; a replica of
 *      a language model adds its engine's figures (RPROTO_F_GENERATION,
 *      node/replica_gen.h):
 *      "generation": {"sequences", "waiting", "kv_blocks_used",
 *      "kv_blocks_total", "kv_blocks_cached", "prompt_tokens",
 *      "generated_tokens", "prefix_cache_hit_tokens"} (the last three
 *      counted since it started);
 *   3. {"event":"ready", "socket": <path>, "features": n, "outputs": n,
 *       "device": "cpu" | "cuda:0" | "sim:<uuid>", "load_seconds": s}
 *      once the model is loaded and the socket listens (WPROTO_MSG_READY);
 *      or {"event":"error", "message"} and exit WPROTO_EXIT_FAILED when the
 *      model cannot be loaded or the socket cannot be made.
 * Then it serves the framing of node/rframe.h on the socket, batching as
 * Triton's dynamic batcher does: requests queue in arrival order; a batch
 * runs when max_batch_size rows wait, or when the oldest request has
 * waited max_queue_delay_us (0: run whatever is there at once), or, with
 * preferred sizes, as soon as the rows waiting reach the largest preferred
 * size they can fill; a batch takes whole requests in order up to
 * max_batch_size rows (a request bigger than max_batch_size runs alone, in
 * chunks of max_batch_size). max_batch_size 1 is batching off. A
 * language model's generations (rframe.h's generation frames,
 * node/replica_gen.h) run in its engine instead. Each reply
 * says the batch's rows (max_batch_size for a request run in chunks), the
 * request's queue time and the batch's compute time. On the CPU a batch
 * runs on "threads" of the engine's threads (models/pool.h; 0: one per
 * core), as a training step does.
 *
 * SIGTERM or SIGINT: drain - stop accepting connections, answer every
 * request already read, then exit WPROTO_EXIT_OK (0). A request read after
 * the drain started is answered RFRAME_EDRAINING. SIGUSR1 is ignored
 * (replicas are never preempted for training). The socket file is removed
 * on exit.
 */
#ifndef TY_REPLICA_H
#define TY_REPLICA_H

#include "node/protocol.h"

#define RPROTO_COMMAND "replica"     /* argv[1] */
#define RPROTO_FILE "replica.json"   /* in the job folder */
#define RPROTO_SOCKET "replica.sock" /* the socket's usual name there */

/* replica.json's keys. */
#define RPROTO_REPLICA_ID "replica_id"
#define RPROTO_DEPLOYMENT_ID "deployment_id"
#define RPROTO_MODEL_PATH "model_path"
#define RPROTO_SOCKET_PATH "socket_path"
#define RPROTO_THREADS "threads"
#define RPROTO_KV_CACHE_BYTES "kv_cache_bytes"
#define RPROTO_BATCHING "batching"
#define RPROTO_MAX_BATCH_SIZE "max_batch_size"
#define RPROTO_MAX_QUEUE_DELAY_US "max_queue_delay_us"
#define RPROTO_PREFERRED_BATCH_SIZES "preferred_batch_sizes"

/* The "ready" line's fields (its kind is WPROTO_MSG_READY; its encoder,
 * wproto_encode_ready, is protocol.h's, hence the names are defined there;
 * "device" is WPROTO_F_DEVICE). */
#define RPROTO_F_SOCKET WPROTO_F_SOCKET
#define RPROTO_F_FEATURES WPROTO_F_FEATURES
#define RPROTO_F_OUTPUTS WPROTO_F_OUTPUTS
#define RPROTO_F_LOAD_SECONDS WPROTO_F_LOAD_SECONDS

/* `trainyard replica --job-dir DIR` (argv[0] is "replica"): the process's
 * exit status, a WPROTO_EXIT_* code. */
int replica_main(int argc, char **argv);

#endif
