/*
 * worker.h - `trainyard worker`: one training job in its own process.
 *
 * Started by the runner (gpu/runner.h describes the protocol). Exit status:
 * 0 the model is written, 2 training failed (an "error" line says why),
 * 3 stopped by SIGTERM (cancel or shutdown), 64 bad usage.
 */
#ifndef TY_WORKER_H
#define TY_WORKER_H

int worker_main(int argc, char **argv);

#endif
