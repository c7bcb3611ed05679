/* ids.c - random identifiers (see ids.h). */
#include "common/ids.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#define ID_CHARS 20
static const char alphabet[] = "abcdefghijklmnopqrstuvwxyz234567";

ty_status ty_random_bytes(void *buf, size_t n, ty_err *err)
{
    unsigned char *p = buf;
    while (n > 0) {
        ssize_t r = getrandom(p, n, 0);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return ty_fail(err, TY_EIO, NULL, "getrandom failed: %s",
                           strerror(errno));
        }
        p += r;
        n -= (size_t)r;
    }
    return TY_OK;
}

ty_status ty_id_new(const char *prefix, char out[TY_ID_MAX], ty_err *err)
{
    unsigned char rnd[ID_CHARS];
    ty_status st = ty_random_bytes(rnd, sizeof rnd, err);
    if (st != TY_OK)
        return st;
    size_t plen = strlen(prefix);
    if (plen + ID_CHARS + 1 > TY_ID_MAX)
        return ty_fail(err, TY_EINTERNAL, NULL, "id prefix too long");
    memcpy(out, prefix, plen);
    for (int i = 0; i < ID_CHARS; i++)
        out[plen + i] = alphabet[rnd[i] & 31];
    out[plen + ID_CHARS] = '\0';
    return TY_OK;
}
