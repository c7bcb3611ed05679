/*
 * tls.h - the certificate and key `trainyard serve --tls-cert --tls-key`
 * serves HTTPS with (libmicrohttpd over GnuTLS).
 *
 * They are read and checked at startup, before the data folder is touched,
 * so a wrong path or a file that is not PEM stops the start with a message
 * naming the flag. Whether the key matches the certificate is known only
 * when the HTTP daemon starts (http_server_start says so).
 */
#ifndef TY_TLS_H
#define TY_TLS_H

#include <stddef.h>

#include "common/ty.h"

typedef struct {
    char *cert; /* PEM text, NUL-terminated; NULL: plain HTTP */
    char *key;
    size_t key_len; /* wiped on free */
} tls_pem;

/* Reads both files (each at most 1 MiB). Fails, naming the flag, when a
 * file cannot be read or holds no PEM block of the right kind, or when this
 * libmicrohttpd was built without TLS. */
ty_status tls_pem_load(const char *cert_file, const char *key_file,
                       tls_pem *out, ty_err *err);

/* Frees both, overwriting the key first. */
void tls_pem_free(tls_pem *p);

#endif
