/*
 * input.c - bounded-chunk reading of uploaded files (see input.h).
 *
 * A gzip input is inflated with zlib's inflate() straight into the reader's
 * buffer, so no byte is inflated before a reader asks for it: a converter
 * that knows from a header how much data there should be stops a "gzip bomb"
 * (a small file that inflates to gigabytes) after at most that much. (zlib's
 * gz* layer inflates ahead into its own buffer; we used it before.) The
 * compressed data ending inside a member means a truncated file, any other
 * inflate error is corrupt data.
 */
#include "models/data/input.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define GZ_BUF (1u << 16) /* compressed bytes read at a time */

/* zlib's message for a corrupt stream, or a fallback. */
static ty_status gz_corrupt(ds_input *in, ty_err *err)
{
    return ty_fail(err, TY_EFORMAT, in->field,
                   "%s: the gzip data is corrupt (%s)", in->name,
                   in->gz->msg ? in->gz->msg : "unknown error");
}

static ty_status gz_truncated(ds_input *in, ty_err *err)
{
    return ty_fail(err, TY_EFORMAT, in->field,
                   "%s: the gzip data ends early (the file is truncated)",
                   in->name);
}

/* Appends more compressed bytes after those not yet consumed; *eof is set
 * when the file has no more. */
static ty_status gz_fill(ds_input *in, int *eof, ty_err *err)
{
    z_stream *z = in->gz;
    if (z->avail_in && z->next_in != in->zbuf)
        memmove(in->zbuf, z->next_in, z->avail_in);
    z->next_in = in->zbuf;
    ssize_t r;
    do
        r = read(in->fd, in->zbuf + z->avail_in, GZ_BUF - z->avail_in);
    while (r < 0 && errno == EINTR);
    if (r < 0)
        return ty_fail(err, TY_EIO, in->field, "%s: read failed: %s", in->name,
                       strerror(errno));
    z->avail_in += (uInt)r;
    *eof = r == 0;
    return TY_OK;
}

/* After a member's end: another member follows (its magic is next) or the
 * data is over (anything else after the first member is ignored, like
 * zlib's gzread). */
static ty_status gz_next_member(ds_input *in, ty_err *err)
{
    z_stream *z = in->gz;
    int eof = 0;
    while (z->avail_in < 2 && !eof) {
        ty_status st = gz_fill(in, &eof, err);
        if (st != TY_OK)
            return st;
    }
    if (z->avail_in >= 2 && z->next_in[0] == 0x1f && z->next_in[1] == 0x8b) {
        if (inflateReset(z) != Z_OK)
            return gz_corrupt(in, err);
        return TY_OK;
    }
    in->gz_done = 1;
    return TY_OK;
}

/* Inflates up to n bytes straight into buf; *got is 0 only at the end. */
static ty_status gz_read(ds_input *in, void *buf, size_t n, size_t *got,
                         ty_err *err)
{
    z_stream *z = in->gz;
    z->next_out = buf;
    z->avail_out = (uInt)n;
    while (z->avail_out == n && !in->gz_done) {
        if (z->avail_in == 0) {
            int eof;
            ty_status st = gz_fill(in, &eof, err);
            if (st != TY_OK)
                return st;
            if (eof)
                return gz_truncated(in, err);
        }
        uInt before = z->avail_out;
        int rc = inflate(z, Z_NO_FLUSH);
        in->inflated += before - z->avail_out;
        if (rc == Z_STREAM_END) {
            ty_status st = gz_next_member(in, err);
            if (st != TY_OK)
                return st;
        } else if (rc == Z_MEM_ERROR) {
            return ty_fail(err, TY_ENOMEM, in->field,
                           "%s: out of memory while decompressing", in->name);
        } else if (rc == Z_NEED_DICT) {
            return gz_corrupt(in, err);
        } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
            return gz_corrupt(in, err);
        }
    }
    *got = n - z->avail_out;
    return TY_OK;
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
        in->gz = calloc(1, sizeof *in->gz);
        in->zbuf = malloc(GZ_BUF);
        /* 16 + MAX_WBITS: a gzip wrapper, the largest window */
        if (!in->gz || !in->zbuf || inflateInit2(in->gz, 16 + MAX_WBITS)) {
            free(in->gz);
            in->gz = NULL;
            ds_input_close(in);
            return ty_fail(err, TY_ENOMEM, field,
                           "%s: out of memory opening gzip data", name);
        }
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
        ty_status st = gz_read(in, buf, n, got, err);
        if (st != TY_OK)
            return st;
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

ty_status ds_input_count_rest(ds_input *in, uint64_t max, uint64_t *rest,
                              ty_err *err)
{
    *rest = 0;
    if (!in->gz) {
        uint64_t size = (uint64_t)in->file_size;
        *rest = size > in->offset ? size - in->offset : 0;
        return TY_OK;
    }
    unsigned char buf[4096];
    while (*rest <= max) {
        uint64_t left = max + 1 - *rest;
        size_t got;
        ty_status st = ds_input_read(
            in, buf, left < sizeof buf ? (size_t)left : sizeof buf, &got, err);
        if (st != TY_OK)
            return st;
        if (got == 0)
            return TY_OK;
        *rest += got;
    }
    return TY_OK;
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

ty_status ds_input_pread(ds_input *in, void *buf, size_t n, uint64_t off,
                         size_t *got, ty_err *err)
{
    unsigned char *p = buf;
    *got = 0;
    if (in->gz || in->fd < 0)
        return ty_fail(err, TY_EINTERNAL, in->field,
                       "%s: cannot read at an offset in this input", in->name);
    while (*got < n) {
        ssize_t r = pread(in->fd, p + *got, n - *got, (off_t)(off + *got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return ty_fail(err, TY_EIO, in->field, "%s: read failed: %s",
                           in->name, strerror(errno));
        if (r == 0)
            break;
        *got += (size_t)r;
    }
    return TY_OK;
}

void ds_input_close(ds_input *in)
{
    if (in->gz) {
        inflateEnd(in->gz);
        free(in->gz);
    }
    free(in->zbuf);
    if (in->fd >= 0)
        close(in->fd);
    in->gz = NULL;
    in->zbuf = NULL;
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

int ds_label_int(const char *s, size_t len, int64_t *out)
{
    size_t i = len && s[0] == '-' ? 1 : 0;
    if (i == len || len - i > 16 || (s[i] == '0' && (len - i > 1 || i)))
        return 0; /* empty, too long, a leading zero, or "-0" */
    uint64_t v = 0;
    for (; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if (v > (uint64_t)DS_LABEL_INT_MAX)
        return 0;
    *out = s[0] == '-' ? -(int64_t)v : (int64_t)v;
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
