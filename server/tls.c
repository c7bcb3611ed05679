/* tls.c - loading the HTTPS certificate and key (see tls.h). */
#include "server/tls.h"

#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fsutil.h"

#define PEM_MAX (1u << 20)

static ty_status read_pem(const char *flag, const char *path, const char *what,
                          const char *const *kinds, char **out, size_t *len,
                          ty_err *err)
{
    if (fs_read_all(path, PEM_MAX, out, len, err) != TY_OK) {
        char why[sizeof err->msg];
        snprintf(why, sizeof why, "%s", err->msg);
        return ty_fail(err, TY_EINVAL, flag, "%s %s: %s", flag, path, why);
    }
    for (const char *const *k = kinds; *k; k++)
        if (strstr(*out, *k))
            return TY_OK;
    return ty_fail(err, TY_EINVAL, flag,
                   "%s %s: no PEM %s found (a text block starting with %s)",
                   flag, path, what, kinds[0]);
}

ty_status tls_pem_load(const char *cert_file, const char *key_file,
                       tls_pem *out, ty_err *err)
{
    memset(out, 0, sizeof *out);
    if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES)
        return ty_fail(err, TY_EINVAL, "--tls-cert",
                       "this libmicrohttpd was built without TLS support, so "
                       "--tls-cert cannot be served; install a libmicrohttpd "
                       "built with GnuTLS (Debian's is)");
    static const char *const cert_kinds[] = {"-----BEGIN CERTIFICATE-----",
                                             NULL};
    static const char *const key_kinds[] = {
        "-----BEGIN PRIVATE KEY-----", "-----BEGIN RSA PRIVATE KEY-----",
        "-----BEGIN EC PRIVATE KEY-----", NULL};
    size_t cert_len = 0;
    ty_status s = read_pem("--tls-cert", cert_file, "certificate", cert_kinds,
                           &out->cert, &cert_len, err);
    if (s == TY_OK)
        s = read_pem("--tls-key", key_file, "private key", key_kinds, &out->key,
                     &out->key_len, err);
    if (s == TY_OK && strstr(out->key, "-----BEGIN ENCRYPTED PRIVATE KEY"))
        s = ty_fail(err, TY_EINVAL, "--tls-key",
                    "--tls-key %s is encrypted; give the key without a "
                    "passphrase (e.g. openssl pkey -in KEY -out PLAIN)",
                    key_file);
    if (s != TY_OK)
        tls_pem_free(out);
    return s;
}

void tls_pem_free(tls_pem *p)
{
    if (p->key) {
        volatile char *k = p->key;
        for (size_t i = 0; i < p->key_len; i++)
            k[i] = 0;
    }
    free(p->key);
    free(p->cert);
    memset(p, 0, sizeof *p);
}
