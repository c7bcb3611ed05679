/*
 * sha256.h - SHA-256 (FIPS 180-4), streaming.
 *
 * Used to name blobs by content and to hash API keys. No allocation; a context
 * is a plain struct the caller owns.
 */
#ifndef TY_SHA256_H
#define TY_SHA256_H

#include <stddef.h>
#include <stdint.h>

#include "common/ty.h"

typedef struct {
    uint32_t state[8];
    uint64_t bytes; /* total bytes fed so far */
    uint8_t buf[64];
    size_t buf_len;
} sha256_ctx;

void sha256_init(sha256_ctx *c);
void sha256_update(sha256_ctx *c, const void *data, size_t len);
void sha256_final(sha256_ctx *c, uint8_t out[32]);

/* One-shot digest of a buffer. */
void sha256_digest(const void *data, size_t len, uint8_t out[32]);

/* Writes 64 lowercase hex characters and a NUL into hex (65 bytes). */
void sha256_hex(const uint8_t digest[32], char hex[65]);

/* Hashes the whole file at path; on error returns TY_EIO and fills err. */
ty_status sha256_file_hex(const char *path, char hex[65], ty_err *err);

#endif
