/*
 * slurmrest_internal.h - the parts of slurmrest.c that its unit test checks
 * without a daemon: the JWT signing (HMAC-SHA256, base64url) and the
 * reading and writing of v0.0.38's JSON documents. Not for other modules:
 * they use slurmrest.h, which hides the version.
 */
#ifndef TY_SLURMREST_INTERNAL_H
#define TY_SLURMREST_INTERNAL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "cluster/slurmrest.h"
#include "common/ty.h"

/* HMAC-SHA256 (RFC 2104) of msg under key. */
void slurmrest_hmac_sha256(const uint8_t *key, size_t key_len,
                           const void *msg, size_t len, uint8_t out[32]);

/* base64url without padding (RFC 7515); writes a NUL. Returns the length,
 * or 0 when out (cap bytes) is too small. */
size_t slurmrest_base64url(const uint8_t *in, size_t n, char *out, size_t cap);

/* An HS256 JWT for Slurm's auth/jwt: header {"alg":"HS256","typ":"JWT"},
 * claims {"exp":exp,"iat":iat,"sun":user} in that order. user must be a
 * plain name ([A-Za-z0-9._-]). TY_EINVAL when it is not or out is small. */
ty_status slurmrest_jwt_sign(const uint8_t *key, size_t key_len,
                             const char *user, long iat, long exp, char *out,
                             size_t cap, ty_err *err);

/* Slurm's state name to the enum (a leading "PENDING" of
 * "PENDING+..." counts); SLURM_ST_UNKNOWN for others. */
slurm_state slurm_state_parse(const char *name);

/* ---- v0.0.38 ---- */

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
