/*
 * slurmrest_jwt.c - HS256 tokens for slurmrestd (see slurmrest_jwt.h). The
 * claims are printed, not built with jansson, so that their order and
 * spelling are exactly what the unit test's known token holds; the user
 * name is checked first, so it needs no JSON escaping.
 */
#include "cluster/slurmrest_jwt.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "common/sha256.h"

void slurmrest_hmac_sha256(const uint8_t *key, size_t key_len, const void *msg,
                           size_t len, uint8_t out[32])
{
    uint8_t k[64] = {0}, pad[64], inner[32];
    if (key_len > 64)
        sha256_digest(key, key_len, k);
    else
        memcpy(k, key, key_len);
    sha256_ctx c;
    for (int i = 0; i < 64; i++)
        pad[i] = k[i] ^ 0x36;
    sha256_init(&c);
    sha256_update(&c, pad, 64);
    sha256_update(&c, msg, len);
    sha256_final(&c, inner);
    for (int i = 0; i < 64; i++)
        pad[i] = k[i] ^ 0x5c;
    sha256_init(&c);
    sha256_update(&c, pad, 64);
    sha256_update(&c, inner, 32);
    sha256_final(&c, out);
}

size_t slurmrest_base64url(const uint8_t *in, size_t n, char *out, size_t cap)
{
    static const char tab[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    size_t need = n / 3 * 4 + (n % 3 ? n % 3 + 1 : 0);
    if (need + 1 > cap)
        return 0;
    size_t o = 0, i = 0;
    for (; i + 2 < n; i += 3) {
        uint32_t v =
            (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        out[o++] = tab[v >> 18 & 63];
        out[o++] = tab[v >> 12 & 63];
        out[o++] = tab[v >> 6 & 63];
        out[o++] = tab[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)in[i] << 16;
        out[o++] = tab[v >> 18 & 63];
        out[o++] = tab[v >> 12 & 63];
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8;
        out[o++] = tab[v >> 18 & 63];
        out[o++] = tab[v >> 12 & 63];
        out[o++] = tab[v >> 6 & 63];
    }
    out[o] = '\0';
    return o;
}

static int plain_name(const char *s)
{
    if (!s || !*s)
        return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '.' && *s != '_' && *s != '-')
            return 0;
    return 1;
}

int slurmrest_jwt_user_ok(const char *user)
{
    return plain_name(user) && strlen(user) <= 64;
}

ty_status slurmrest_jwt_sign(const uint8_t *key, size_t key_len,
                             const char *user, long iat, long exp, char *out,
                             size_t cap, ty_err *err)
{
    if (!slurmrest_jwt_user_ok(user))
        return ty_fail(err, TY_EINVAL, "user",
                       "the Slurm user name must be 1-64 of A-Z a-z 0-9 . _ -");
    static const char header[] = "{\"alg\":\"HS256\",\"typ\":\"JWT\"}";
    char claims[160];
    snprintf(claims, sizeof claims, "{\"exp\":%ld,\"iat\":%ld,\"sun\":\"%s\"}",
             exp, iat, user);
    char signing[512];
    size_t h = slurmrest_base64url((const uint8_t *)header, strlen(header),
                                   signing, sizeof signing);
    if (!h)
        return ty_fail(err, TY_EINVAL, NULL, "JWT buffer too small");
    signing[h] = '.';
    size_t p = slurmrest_base64url((const uint8_t *)claims, strlen(claims),
                                   signing + h + 1, sizeof signing - h - 1);
    if (!p)
        return ty_fail(err, TY_EINVAL, NULL, "JWT buffer too small");
    size_t len = h + 1 + p;
    uint8_t mac[32];
    slurmrest_hmac_sha256(key, key_len, signing, len, mac);
    char sig[48];
    slurmrest_base64url(mac, sizeof mac, sig, sizeof sig);
    int w = snprintf(out, cap, "%s.%s", signing, sig);
    if (w < 0 || (size_t)w >= cap)
        return ty_fail(err, TY_EINVAL, NULL, "JWT buffer too small");
    return TY_OK;
}
