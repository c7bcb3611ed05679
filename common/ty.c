/* ty.c - status names and error-record helpers (see ty.h). */
#include "common/ty.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static const char *const status_names[] = {
    [TY_OK] = "TY_OK",
    [TY_EINVAL] = "TY_EINVAL",
    [TY_EFORMAT] = "TY_EFORMAT",
    [TY_ENOTFOUND] = "TY_ENOTFOUND",
    [TY_ECONFLICT] = "TY_ECONFLICT",
    [TY_ETOOBIG] = "TY_ETOOBIG",
    [TY_ENOMEM] = "TY_ENOMEM",
    [TY_EIO] = "TY_EIO",
    [TY_EFETCH] = "TY_EFETCH",
    [TY_EDEVICE] = "TY_EDEVICE",
    [TY_ECANCELLED] = "TY_ECANCELLED",
    [TY_EINTERNAL] = "TY_EINTERNAL",
    [TY_EPREEMPTED] = "TY_EPREEMPTED",
    [TY_ENOSPC] = "TY_ENOSPC",
    [TY_ELIMIT] = "TY_ELIMIT",
    [TY_EUNAVAILABLE] = "TY_EUNAVAILABLE",
};
static_assert(TY_ARRAY_LEN(status_names) == TY_STATUS_COUNT,
              "every ty_status needs a name");

const char *ty_status_name(ty_status s)
{
    if ((unsigned)s >= TY_STATUS_COUNT)
        return "TY_UNKNOWN";
    return status_names[s];
}

ty_status ty_errno_status(int errnum)
{
    return errnum == ENOSPC || errnum == EDQUOT ? TY_ENOSPC : TY_EIO;
}

void ty_err_clear(ty_err *e)
{
    if (e) {
        e->msg[0] = '\0';
        e->field[0] = '\0';
        e->retry_after_s = 0;
    }
}

ty_status ty_fail(ty_err *e, ty_status status, const char *field,
                  const char *fmt, ...)
{
    if (!e)
        return status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    snprintf(e->field, sizeof e->field, "%s", field ? field : "");
    e->retry_after_s = 0;
    return status;
}

void ty_err_prefix(ty_err *e, const char *fmt, ...)
{
    if (!e)
        return;
    char prefix[256], old[sizeof e->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, e->msg, sizeof old);
    size_t plen = strlen(prefix);
    if (plen > sizeof e->msg - 3)
        plen = sizeof e->msg - 3;
    memcpy(e->msg, prefix, plen);
    memcpy(e->msg + plen, ": ", 2);
    size_t room = sizeof e->msg - plen - 3;
    size_t olen = strnlen(old, room);
    memcpy(e->msg + plen + 2, old, olen);
    e->msg[plen + 2 + olen] = '\0';
}

void ty_now_iso(char out[32])
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char base[24];
    strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, 32, "%s.%03dZ", base, (int)(ts.tv_nsec / 1000000) % 1000);
}

uint32_t ty_hash(const void *data, size_t n, uint32_t h)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 16777619u;
    return h;
}
