/*
 * input.c - bounded-chunk reading of uploaded files (see input.h).
 *
 * A gzip input is handed to zlib's gz* layer, which inflates as it goes; we
 * only decide whether the file is gzip (by its first two bytes) and turn
 * zlib's error states into messages: Z_BUF_ERROR at the end of the data means
 * the compressed stream stopped early, anything else is corrupt data.
 */
#include "models/data/input.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static ty_status gz_failure(ds_input *in, ty_err *err)
{
    int code = Z_OK;
    const char *msg = gzerror(in->gz, &code);
    if (code == Z_ERRNO)
        return ty_fail(err, TY_EIO, in->field, "%s: read failed: %s", in->name,
                       strerror(errno));
    if (code == Z_MEM_ERROR)
        return ty_fail(err, TY_ENOMEM, in->field,
                       "%s: out of memory while decompressing", in->name);
    if (code == Z_BUF_ERROR)
        return ty_fail(err, TY_EFORMAT, in->field,
                       "%s: the gzip data ends early (the file is truncated)",
                       in->name);
    /* zlib prefixes its message with the path it was given; ours is fd:N. */
    const char *colon = strstr(msg ? msg : "", ": ");
    return ty_fail(err, TY_EFORMAT, in->field,
                   "%s: the gzip data is corrupt (%s)", in->name,
                   colon ? colon + 2 : (msg ? msg : "unknown error"));
}

ty_status ds_input_open(ds_input *in, const char *path, int allow_gzip,
                        const char *field, const char *name, ty_err *err)
{
    memset(in, 0, sizeof *in);
    in->fd = -1;
    in->field = field;
    in->name = name;
    if (!path || !*path)
        return ty_fail(err, TY_EINVAL, field, "%s: no file given", name);
    in->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (in->fd < 0)
        return ty_fail(err, TY_EIO, field, "%s: cannot open: %s", name,
                       strerror(errno));
    struct stat sb;
    if (fstat(in->fd, &sb) != 0) {
        int e = errno;
        ds_input_close(in);
        return ty_fail(err, TY_EIO, field, "%s: cannot stat: %s", name,
                       strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        ds_input_close(in);
        return ty_fail(err, TY_EIO, field, "%s is not a regular file", name);
    }
    in->file_size = (int64_t)sb.st_size;
    if (!allow_gzip)
        return TY_OK;

    unsigned char magic[2];
    ssize_t r;
    do
        r = pread(in->fd, magic, sizeof magic, 0);
    while (r < 0 && errno == EINTR);
    if (r < 0) {
        int e = errno;
        ds_input_close(in);
        return ty_fail(err, TY_EIO, field, "%s: read failed: %s", name,
                       strerror(e));
    }
    if (r == 2 && magic[0] == 0x1f && magic[1] == 0x8b) {
        in->gz = gzdopen(in->fd, "rb");
        if (!in->gz) {
            ds_input_close(in);
            return ty_fail(err, TY_ENOMEM, field,
                           "%s: out of memory opening gzip data", name);
        }
        in->fd = -1; /* gzclose closes it */
        gzbuffer(in->gz, 1u << 17);
    }
    return TY_OK;
}

ty_status ds_input_read(ds_input *in, void *buf, size_t n, size_t *got,
                        ty_err *err)
{
    *got = 0;
    if (n == 0)
        return TY_OK;
    if (n > INT_MAX)
        n = INT_MAX;
    if (in->gz) {
        int r = gzread(in->gz, buf, (unsigned)n);
        if (r < 0)
            return gz_failure(in, err);
        if (r == 0) {
            int code = Z_OK;
            gzerror(in->gz, &code);
            if (code != Z_OK)
                return gz_failure(in, err);
        }
        *got = (size_t)r;
    } else {
        ssize_t r;
        do
            r = read(in->fd, buf, n);
        while (r < 0 && errno == EINTR);
        if (r < 0)
            return ty_fail(err, TY_EIO, in->field, "%s: read failed: %s",
                           in->name, strerror(errno));
        *got = (size_t)r;
    }
    in->offset += *got;
    return TY_OK;
}

ty_status ds_input_read_full(ds_input *in, void *buf, size_t n, size_t *got,
                             ty_err *err)
{
    unsigned char *p = buf;
    *got = 0;
    while (*got < n) {
        size_t r;
        ty_status st = ds_input_read(in, p + *got, n - *got, &r, err);
        if (st != TY_OK)
            return st;
        if (r == 0)
            break;
        *got += r;
    }
    return TY_OK;
}

ty_status ds_input_count_rest(ds_input *in, uint64_t *rest, ty_err *err)
{
    *rest = 0;
    if (!in->gz) {
        uint64_t size = (uint64_t)in->file_size;
        *rest = size > in->offset ? size - in->offset : 0;
        return TY_OK;
    }
    unsigned char buf[4096];
    for (;;) {
        size_t got;
        ty_status st = ds_input_read(in, buf, sizeof buf, &got, err);
        if (st != TY_OK)
            return st;
        if (got == 0)
            return TY_OK;
        *rest += got;
    }
}

ty_status ds_input_seek(ds_input *in, uint64_t off, ty_err *err)
{
    if (in->gz || in->fd < 0)
        return ty_fail(err, TY_EINTERNAL, in->field,
                       "%s: cannot seek in this input", in->name);
    if (lseek(in->fd, (off_t)off, SEEK_SET) < 0)
        return ty_fail(err, TY_EIO, in->field, "%s: seek failed: %s", in->name,
                       strerror(errno));
    in->offset = off;
    return TY_OK;
}

void ds_input_close(ds_input *in)
{
    if (in->gz)
        gzclose(in->gz);
    else if (in->fd >= 0)
        close(in->fd);
    in->gz = NULL;
    in->fd = -1;
}

size_t ds_utf8_seq(const unsigned char *p, size_t avail)
{
    unsigned char c = p[0];
    size_t len;
    uint32_t cp;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
        cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if (avail < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (p[i] & 0x3f);
    }
    /* overlong forms, surrogates, past U+10FFFF */
    if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
        return 0;
    return len;
}

int ds_utf8_valid(const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        size_t k = ds_utf8_seq(p + i, len - i);
        if (k == 0)
            return 0;
        i += k;
    }
    return 1;
}

void ds_snippet(char *out, size_t n, const char *s, size_t len)
{
    const size_t keep = 40;
    const unsigned char *p = (const unsigned char *)s;
    size_t w = 0, i = 0;
    if (n == 0)
        return;
    while (i < len && i < keep) {
        size_t k = ds_utf8_seq(p + i, len - i);
        if (k > 1) {
            if (i + k > keep || w + k >= n)
                break;
            memcpy(out + w, p + i, k);
            w += k;
            i += k;
            continue;
        }
        if (w + 1 >= n)
            break;
        out[w++] = (k == 1 && p[i] >= 0x20 && p[i] != 0x7f) ? (char)p[i] : '?';
        i++;
    }
    out[w] = '\0';
    if (i < len && w + 4 <= n)
        memcpy(out + w, "...", 4);
}
