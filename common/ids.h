/*
 * ids.h - random identifiers and secrets.
 *
 * Resource ids are opaque strings with a type prefix ("ds_", "job_", "mdl_")
 * followed by 20 lowercase base32 characters (100 random bits). Randomness
 * comes from getrandom(2).
 */
#ifndef TY_IDS_H
#define TY_IDS_H

#include <stddef.h>

#include "common/ty.h"

#define TY_ID_MAX 40 /* bytes, including the NUL, enough for any id */

/* Fills buf with n cryptographically random bytes. */
ty_status ty_random_bytes(void *buf, size_t n, ty_err *err);

/* Writes prefix + 20 random base32 characters into out (TY_ID_MAX bytes). */
ty_status ty_id_new(const char *prefix, char out[TY_ID_MAX], ty_err *err);

#endif
