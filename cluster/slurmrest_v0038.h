/*
 * slurmrest_v0038.h - slurmrestd's API v0.0.38 for the client: the table
 * slurmrest.c picks by version, and the readers and writers of its JSON
 * documents that the unit test checks without a daemon (on the documents
 * a live daemon gave, tests/slurm/data/v0.0.38). Not for other modules:
 * they use slurmrest.h, which hides the version.
 */
#ifndef TY_SLURMREST_V0038_H
#define TY_SLURMREST_V0038_H

#include <jansson.h>
#include <stddef.h>

#include "cluster/slurm.h"
#include "cluster/slurmrest_api.h"
#include "common/ty.h"

/* Every path and shape of v0.0.38 ("v0.0.38"). */
extern const slurmrest_api slurmrest_v0038_api;

/* The status an answer stands for: TY_OK when its "errors" is empty, else
 * TY_ENOTFOUND (invalid job id), TY_EIO (Slurm's communication errors and
 * its "Unspecified error", what a refused token gets), TY_EINVAL (Slurm
 * refused the request); the message is Slurm's error text. */
ty_status slurmrest_v0038_errors(const json_t *doc, ty_err *err);

/* The body of POST .../job/submit (new reference), or NULL with
 * TY_EINVAL/TY_ENOMEM in *st. */
json_t *slurmrest_v0038_submit_body(const slurm_submit *s, ty_status *st,
                                    ty_err *err);
ty_status slurmrest_v0038_submit_reply(const json_t *doc, long *job_id,
                                       ty_err *err);
/* GET .../job/{id}: jobs[0]. TY_ENOTFOUND for an empty list. */
ty_status slurmrest_v0038_job_reply(const json_t *doc, long job_id,
                                    slurm_job_info *out, ty_err *err);
/* GET .../nodes (*nodes malloc'd). */
ty_status slurmrest_v0038_nodes_reply(const json_t *doc, slurm_node **nodes,
                                      size_t *n, ty_err *err);

#endif
