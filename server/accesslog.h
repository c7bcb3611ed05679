/*
 * accesslog.h - the request log and the request metrics, off the request's
 * path.
 *
 * A finished request hands a fixed-size record to a bounded lock-free queue
 * (one atomic compare-and-swap; no lock, no allocation, no I/O) and goes
 * on. One writer thread takes the records in batches, updates the request
 * metrics (common/opmetrics.h) and writes the log lines, JSON as before,
 * with one write per batch, to stderr or to a file rotated by size.
 *
 * Sampling (--access-log-sample N) keeps one line in N of the requests that
 * succeeded (status below 400); every error is logged; metrics count every
 * request whatever the sampling. When the queue is full (the writer cannot
 * keep up) a record is dropped and counted, and a line reports the count.
 */
#ifndef TY_ACCESSLOG_H
#define TY_ACCESSLOG_H

#include <stdint.h>

#include "common/ids.h"
#include "common/ty.h"

typedef struct access_log_opts {
    unsigned sample;    /* log 1 in N successful requests; 0 = none */
    const char *path;   /* NULL or "": stderr; "-" too */
    uint64_t max_bytes; /* rotate the file past this (to path.1); 0 never */
} access_log_opts;

/* One finished request. Strings are copied (truncated to fit). */
typedef struct access_rec {
    char request_id[TY_ID_MAX];
    char method[12];          /* as sent, for the log */
    const char *method_label; /* the metrics' (static: "GET", "OTHER") */
    char path[192];
    const char *route;          /* the route's name (static), or NULL */
    const char *route_template; /* its pattern (static), or NULL */
    unsigned status;
    uint64_t bytes_in, bytes_out;
    double ms; /* negative: a stream, counted but not timed */
    char tenant[TY_ID_MAX];
    int aborted;
    const char *timed; /* a predict's endpoint (static), or NULL */
    double timed_s;    /* its work's seconds (opm_predict) */
} access_rec;

/* Starts the writer. TY_EIO naming the file when it cannot be opened. */
ty_status access_log_start(const access_log_opts *opts, ty_err *err);

/* Queues a record (or counts it dropped). Safe from any thread; without a
 * started writer, the record is written at once (tests, tools). */
void access_log_put(const access_rec *rec);

/* Returns once every record queued before the call is written and counted
 * in the metrics (GET /metrics scrapes after it). */
void access_log_flush(void);

/* Writes what is queued and stops the writer. */
void access_log_stop(void);

#endif
