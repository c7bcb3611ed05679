/*
 * file.c - the TYDS meta builder and streaming writer (see file.h).
 *
 * The meta names the offsets of x and y, and the offsets depend on the meta's
 * length, so ds_writer_create settles them by iteration: render the meta,
 * place x at the next multiple of DS_ALIGN after it, write that offset into
 * the meta and render again until the offset no longer moves. Offsets only
 * grow (more digits never make the text shorter), so this ends in a few
 * rounds.
 */
#include "models/data/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "models/data/input.h"

json_t *ds_meta_new(const char *format, ty_task task, uint32_t num_examples,
                    const uint32_t *shape, uint32_t ndim, ty_dtype x_dtype,
                    uint32_t y_dim, const char *preprocess)
{
    json_t *meta = json_object();
    json_t *jshape = json_array();
    uint64_t features = 1;
    int bad = !meta || !jshape;
    for (uint32_t i = 0; i < ndim && !bad; i++) {
        features *= shape[i];
        bad |= json_array_append_new(jshape, json_integer(shape[i]));
    }
    if (!bad) {
        bad |= json_object_set_new(meta, "version", json_integer(DS_VERSION));
        bad |= json_object_set_new(meta, "format", json_string(format));
        bad |=
            json_object_set_new(meta, "task", json_string(ty_task_name(task)));
        bad |= json_object_set_new(meta, "num_examples",
                                   json_integer(num_examples));
        bad |= json_object_set(meta, "input_shape", jshape);
        bad |= json_object_set_new(meta, "features",
                                   json_integer((json_int_t)features));
        bad |= json_object_set_new(
            meta, "x_dtype",
            json_string(x_dtype == TY_DTYPE_U8 ? "uint8" : "float32"));
        bad |= json_object_set_new(meta, "y_dim", json_integer(y_dim));
        bad |= json_object_set_new(meta, "preprocess", json_string(preprocess));
    }
    json_decref(jshape);
    if (bad) {
        json_decref(meta);
        return NULL;
    }
    return meta;
}

json_t *ds_classes_from_seen(const unsigned char *seen, uint32_t n,
                             int32_t *index, uint32_t *count)
{
    json_t *classes = json_array();
    *count = 0;
    for (uint32_t v = 0; classes && v < n; v++) {
        index[v] = seen[v] ? (int32_t)*count : -1;
        if (!seen[v])
            continue;
        if (json_array_append_new(classes, json_integer(v))) {
            json_decref(classes);
            return NULL;
        }
        (*count)++;
    }
    return classes;
}

static ty_status writer_flush(ds_writer *w, ty_err *err)
{
    if (w->used == 0)
        return TY_OK;
    ty_status st = fs_write_full(w->fd, w->buf, w->used, err);
    if (st != TY_OK)
        ty_err_prefix(err, "writing the dataset");
    w->used = 0;
    return st;
}

ty_status ds_writer_write(ds_writer *w, const void *data, size_t len,
                          ty_err *err)
{
    ty_status st;
    if (w->used + len > DS_CHUNK && (st = writer_flush(w, err)) != TY_OK)
        return st;
    if (len >= DS_CHUNK) {
        st = fs_write_full(w->fd, data, len, err);
        if (st != TY_OK) {
            ty_err_prefix(err, "writing the dataset");
            return st;
        }
    } else {
        memcpy(w->buf + w->used, data, len);
        w->used += len;
    }
    w->pos += len;
    return TY_OK;
}

static ty_status writer_pad_to(ds_writer *w, uint64_t target, ty_err *err)
{
    static const unsigned char zeros[DS_ALIGN];
    while (w->pos < target) {
        uint64_t n = target - w->pos;
        if (n > sizeof zeros)
            n = sizeof zeros;
        ty_status st = ds_writer_write(w, zeros, (size_t)n, err);
        if (st != TY_OK)
            return st;
    }
    return TY_OK;
}

ty_status ds_writer_create(ds_writer *w, const char *path, json_t *meta,
                           uint64_t x_bytes, uint64_t y_bytes, ty_err *err)
{
    char *text = NULL;
    size_t len = 0;
    uint64_t x_off = 0, y_off = 0;
    ty_status st = TY_OK;

    w->fd = -1;
    w->used = 0;
    w->pos = 0;
    for (int round = 0;; round++) {
        if (json_object_set_new(meta, "x_offset",
                                json_integer((json_int_t)x_off)) ||
            json_object_set_new(meta, "y_offset",
                                json_integer((json_int_t)y_off)))
            return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
        free(text);
        text = json_dumps(meta, JSON_COMPACT);
        if (!text)
            return ty_fail(err, TY_ENOMEM, NULL,
                           "out of memory rendering the dataset meta");
        len = strlen(text);
        uint64_t need = ds_align_up(DS_HEADER_LEN + len);
        if (need <= x_off)
            break;
        if (round == 8) {
            free(text);
            return ty_fail(err, TY_EINTERNAL, NULL,
                           "dataset offsets did not settle");
        }
        x_off = need;
        y_off = ds_align_up(x_off + x_bytes);
    }
    w->x_offset = x_off;
    w->x_bytes = x_bytes;
    w->y_offset = y_off;
    w->y_bytes = y_bytes;

    w->buf = malloc(DS_CHUNK);
    if (!w->buf) {
        st = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
        goto fail;
    }
    w->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        st = ty_fail(err, ty_errno_status(errno), NULL, "cannot create %s: %s",
                     path, strerror(errno));
        goto fail;
    }
    /* Reserve the space now, so a full disk fails before we convert. File
     * systems without fallocate just skip this. */
    uint64_t total = y_off + y_bytes;
    if (fallocate(w->fd, 0, 0, (off_t)total) != 0 &&
        (errno == ENOSPC || errno == EFBIG)) {
        st = ty_fail(err, ty_errno_status(errno), NULL,
                     "no room for the %llu-byte dataset file: %s",
                     (unsigned long long)total, strerror(errno));
        goto fail;
    }

    unsigned char head[DS_HEADER_LEN];
    uint64_t meta_len = len;
    memcpy(head, DS_MAGIC, 4);
    for (int i = 0; i < 4; i++)
        head[4 + i] = (unsigned char)(DS_VERSION >> (8 * i));
    for (int i = 0; i < 8; i++)
        head[8 + i] = (unsigned char)(meta_len >> (8 * i));
    if ((st = ds_writer_write(w, head, sizeof head, err)) != TY_OK ||
        (st = ds_writer_write(w, text, len, err)) != TY_OK ||
        (st = writer_pad_to(w, x_off, err)) != TY_OK)
        goto fail;
    free(text);
    return TY_OK;
fail:
    free(text);
    return st;
}

ty_status ds_writer_begin_y(ds_writer *w, ty_err *err)
{
    if (w->pos != w->x_offset + w->x_bytes)
        return ty_fail(err, TY_EINTERNAL, NULL,
                       "dataset writer: x has %llu bytes, expected %llu",
                       (unsigned long long)(w->pos - w->x_offset),
                       (unsigned long long)w->x_bytes);
    return writer_pad_to(w, w->y_offset, err);
}

ty_status ds_writer_finish(ds_writer *w, ty_err *err)
{
    ty_status st;
    if (w->pos != w->y_offset + w->y_bytes)
        return ty_fail(err, TY_EINTERNAL, NULL,
                       "dataset writer: y has %llu bytes, expected %llu",
                       (unsigned long long)(w->pos - w->y_offset),
                       (unsigned long long)w->y_bytes);
    if ((st = writer_flush(w, err)) != TY_OK ||
        (st = fs_fsync_fd(w->fd, "the dataset file", err)) != TY_OK)
        return st;
    int rc = close(w->fd);
    w->fd = -1;
    free(w->buf);
    w->buf = NULL;
    if (rc != 0)
        return ty_fail(err, ty_errno_status(errno), NULL,
                       "closing the dataset file: %s", strerror(errno));
    return TY_OK;
}

void ds_writer_discard(ds_writer *w, const char *path)
{
    if (w->fd >= 0)
        close(w->fd);
    w->fd = -1;
    free(w->buf);
    w->buf = NULL;
    if (path)
        unlink(path);
}
