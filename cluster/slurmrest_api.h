/*
 * slurmrest_api.h - what one slurmrestd API version is to the client
 * (slurmrest.c): its paths and the JSON it writes and reads, as a table of
 * functions. Each version is a file of its own that fills one table
 * (slurmrest_v0038.c); the client picks the table by the configured
 * version and never reads a document's members itself, so a new version
 * is a new file and a row in the client's list.
 *
 * None of the functions does I/O or keeps state (a document in, a status
 * and values out), and each returns the statuses slurmrest.h promises:
 * TY_EIO for an answer that means an outage, TY_EINVAL for what Slurm
 * refused, TY_ENOTFOUND for a job it no longer knows.
 */
#ifndef TY_SLURMREST_API_H
#define TY_SLURMREST_API_H

#include <jansson.h>
#include <stddef.h>

#include "cluster/slurm.h"
#include "common/ty.h"

typedef struct {
    const char *version;
    /* GET paths, under /slurm/<version>. */
    const char *ping_path, *nodes_path, *submit_path;
    void (*job_path)(long job_id, char *buf, size_t n);
    ty_status (*cancel_path)(long job_id, int sig, char *buf, size_t n,
                             ty_err *err);
    json_t *(*submit_body)(const slurm_submit *s, ty_status *st, ty_err *err);
    ty_status (*submit_reply)(const json_t *doc, long *job_id, ty_err *err);
    ty_status (*job_reply)(const json_t *doc, long job_id, slurm_job_info *out,
                           ty_err *err);
    ty_status (*nodes_reply)(const json_t *doc, slurm_node **nodes, size_t *n,
                             ty_err *err);
    ty_status (*errors)(const json_t *doc, ty_err *err);
    ty_status (*cancel_reply)(const json_t *doc, ty_err *err);
    ty_status (*ping_reply)(const json_t *doc, ty_err *err);
    int (*token_refused)(long http, const json_t *doc);
} slurmrest_api;

#endif
