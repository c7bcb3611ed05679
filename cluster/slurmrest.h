/*
 * slurmrest.h - a client of slurmrestd, Slurm's REST API (libcurl and
 * jansson): submit a batch job, read its state, cancel or signal it, list
 * the nodes and their GRES, and check that the daemon answers.
 *
 * The API version is a setting ("v0.0.38", what Debian 12's Slurm 22.05
 * serves). Every JSON shape that differs between versions is read and
 * written in that version's file alone (slurmrest_v0038.c, a table of
 * functions: slurmrest_api.h), behind these calls, so a new version is a
 * new file and a row in slurmrest.c's list of versions, nothing else.
 *
 * Auth is slurmrestd's JWT: the headers X-SLURM-USER-NAME and
 * X-SLURM-USER-TOKEN. The token comes either from a file (an admin's
 * `scontrol token` written by cron; re-read when it changes and after a
 * 401) or is signed here (HS256) with the cluster's jwt_key file, for the
 * configured user, and renewed before it expires.
 *
 * Errors: TY_EIO when slurmrestd cannot be reached or answers 5xx (an
 * outage: the caller pauses and tries again later), TY_EAUTH-like failures
 * as TY_EIO with a message naming auth, TY_EINVAL when Slurm refuses a
 * request (the message is Slurm's error text), TY_ENOTFOUND when Slurm no
 * longer knows a job id. Messages never contain the token.
 *
 * A client may be used from several threads: each call takes its own
 * curl handle (or a lock); it holds no lock while it waits on the network.
 */
#ifndef TY_SLURMREST_H
#define TY_SLURMREST_H

#include <stddef.h>

#include "cluster/slurm.h"
#include "common/ty.h"

typedef struct slurmrest slurmrest;

typedef struct {
    const char *url;          /* "http://127.0.0.1:6820" (no trailing /) */
    const char *api_version;  /* "v0.0.38"; NULL: that */
    const char *user;         /* X-SLURM-USER-NAME: jobs run as this user */
    const char *token_file;   /* a JWT in a file; NULL/"": none */
    const char *jwt_key_file; /* sign tokens with this key; NULL/"": none */
    int token_lifespan_s;     /* a signed token's life; 0: 1800 */
    int timeout_s;            /* each request's limit; 0: 10 */
} slurmrest_config;

/* Checks the config (url http(s), a version this client knows, a user,
 * exactly one of token_file and jwt_key_file, readable) and makes a
 * client; contacts nothing. TY_EINVAL naming the setting. */
ty_status slurmrest_create(const slurmrest_config *cfg, slurmrest **out,
                           ty_err *err);
void slurmrest_destroy(slurmrest *c);

/* The API version in use ("v0.0.38"). */
const char *slurmrest_version(const slurmrest *c);

/* Submits; *job_id is Slurm's job id. */
ty_status slurmrest_submit(slurmrest *c, const slurm_submit *s, long *job_id,
                           ty_err *err);

/* Reads one job. TY_ENOTFOUND when Slurm no longer knows it (it ended
 * longer ago than MinJobAge). */
ty_status slurmrest_job(slurmrest *c, long job_id, slurm_job_info *out,
                        ty_err *err);

/* Cancels (signal 0: Slurm's cancel) or signals a job (SIGUSR1, ...;
 * v0.0.38 signals every process of the job, the batch script included;
 * TY_EINVAL for a signal the API version cannot name). A job that has
 * already ended is not an error; one Slurm no longer knows is
 * TY_ENOTFOUND. */
ty_status slurmrest_cancel(slurmrest *c, long job_id, int signal, ty_err *err);

/* Lists the nodes (*nodes malloc'd, caller frees). */
ty_status slurmrest_nodes(slurmrest *c, slurm_node **nodes, size_t *n,
                          ty_err *err);

/* Whether slurmrestd answers (GET .../diag, or ping) with valid auth. */
ty_status slurmrest_ping(slurmrest *c, ty_err *err);

#endif
