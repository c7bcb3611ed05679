/*
 * slurmrest_jwt.h - the tokens slurmrest.c signs for slurmrestd's auth/jwt
 * when it holds the cluster's jwt_key: HS256 (HMAC-SHA256, RFC 2104) over
 * base64url (RFC 7515) of a fixed header and the claims Slurm reads.
 *
 * Pure functions over caller buffers: nothing is allocated, nothing read
 * from disk, no clock (the caller passes iat and exp), so the unit test
 * checks them against RFC 4231's vectors and a known token.
 */
#ifndef TY_SLURMREST_JWT_H
#define TY_SLURMREST_JWT_H

#include <stddef.h>
#include <stdint.h>

#include "common/ty.h"

/* HMAC-SHA256 (RFC 2104) of msg under key. */
void slurmrest_hmac_sha256(const uint8_t *key, size_t key_len, const void *msg,
                           size_t len, uint8_t out[32]);

/* base64url without padding (RFC 7515); writes a NUL. Returns the length,
 * or 0 when out (cap bytes) is too small. */
size_t slurmrest_base64url(const uint8_t *in, size_t n, char *out, size_t cap);

/* Whether user is a name a token may carry (and a header may send as
 * X-SLURM-USER-NAME): 1-64 of [A-Za-z0-9._-]. */
int slurmrest_jwt_user_ok(const char *user);

/* An HS256 JWT for Slurm's auth/jwt: header {"alg":"HS256","typ":"JWT"},
 * claims {"exp":exp,"iat":iat,"sun":user} in that order, into out (cap
 * bytes). TY_EINVAL when user fails slurmrest_jwt_user_ok or out is small. */
ty_status slurmrest_jwt_sign(const uint8_t *key, size_t key_len,
                             const char *user, long iat, long exp, char *out,
                             size_t cap, ty_err *err);

#endif
