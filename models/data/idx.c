/*
 * idx.c - IDX (MNIST-style) images + labels -> TYDS dataset (see
 * ds_convert_idx in dataset.h).
 *
 * An IDX file is a big-endian header - magic 0x0000TTDD (element type TT,
 * DD dimensions), then DD u32 sizes - followed by the elements. We take only
 * unsigned bytes (type 0x08). The labels (one byte per image) are read first
 * and kept, since the class list in the meta depends on which labels occur
 * (the classes are those labels in increasing order, as for every format:
 * see dataset.h); then the pixels stream from the images file straight into
 * the output.
 */
#include <stdlib.h>
#include <string.h>

#include "models/data/dataset.h"
#include "models/data/file.h"
#include "models/data/input.h"

#define IDX_UBYTE 0x08u

typedef struct {
    uint32_t count; /* N, the first dimension */
    uint32_t ndim;  /* dimensions after N */
    uint32_t dims[TY_DS_MAX_DIMS - 1];
    uint64_t item_bytes; /* product of dims */
} idx_header;

static const char *idx_type_name(unsigned type)
{
    switch (type) {
        case 0x09: return "signed bytes";
        case 0x0b: return "int16";
        case 0x0c: return "int32";
        case 0x0d: return "float32";
        case 0x0e: return "float64";
        default: return NULL;
    }
}

/* Reads and checks the header of an images (want_labels 0) or labels file. */
static ty_status idx_read_header(ds_input *in, int want_labels, unsigned flags,
                                 idx_header *h, ty_err *err)
{
    const char *kind = want_labels ? "IDX1" : "IDX3";
    const unsigned expect = want_labels ? 0x801u : 0x803u;
    unsigned char buf[4 * (1 + TY_DS_MAX_DIMS)];
    size_t got;
    ty_status st = ds_input_read_full(in, buf, 4, &got, err);
    if (st != TY_OK)
        return st;
    if (got < 4)
        return ty_fail(err, TY_EFORMAT, in->field,
                       "%s is too short to be an IDX file (%zu bytes)",
                       in->name, got);
    uint32_t magic = (uint32_t)buf[0] << 24 | (uint32_t)buf[1] << 16 |
                     (uint32_t)buf[2] << 8 | buf[3];
    unsigned type = (magic >> 8) & 0xff, nd = magic & 0xff;
    int nd_ok = want_labels ? nd == 1 : nd >= 2 && nd <= TY_DS_MAX_DIMS;
    if ((magic >> 16) == 0 && nd_ok && type != IDX_UBYTE &&
        idx_type_name(type) && !(flags & DS_CONVERT_NO_ECHO))
        return ty_fail(err, TY_EFORMAT, in->field,
                       "%s: element type 0x%02x (%s) is not supported; only "
                       "unsigned bytes (0x08) are",
                       in->name, type, idx_type_name(type));
    if ((magic >> 16) != 0 || type != IDX_UBYTE || !nd_ok) {
        const char *hint = "";
        if (magic == 0x801u && !want_labels)
            hint = "; this looks like a labels file";
        else if (magic == 0x803u && want_labels)
            hint = "; this looks like an images file";
        else if (buf[0] == 0x1f && buf[1] == 0x8b)
            hint = "; the file seems to be compressed twice";
        if (flags & DS_CONVERT_NO_ECHO)
            return ty_fail(err, TY_EFORMAT, in->field,
                           "%s: not an %s ubyte file: it does not start with "
                           "the magic number 0x%08x%s",
                           in->name, kind, expect, hint);
        return ty_fail(err, TY_EFORMAT, in->field,
                       "%s: bad magic 0x%08x (expected an %s ubyte file, "
                       "0x%08x%s)",
                       in->name, magic, kind, expect, hint);
    }
    if ((st = ds_input_read_full(in, buf + 4, 4 * nd, &got, err)) != TY_OK)
        return st;
    if (got < 4 * nd)
        return ty_fail(err, TY_EFORMAT, in->field,
                       "%s is truncated: its header ends after %zu bytes",
                       in->name, 4 + got);
    uint32_t dims[TY_DS_MAX_DIMS];
    for (unsigned i = 0; i < nd; i++) {
        const unsigned char *p = buf + 4 + 4 * i;
        dims[i] = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
                  (uint32_t)p[2] << 8 | p[3];
        if (dims[i] == 0)
            return ty_fail(err, TY_EFORMAT, in->field, "%s: dimension %u is 0",
                           in->name, i + 1);
    }
    if (dims[0] > TY_DS_MAX_EXAMPLES)
        return ty_fail(err, TY_ETOOBIG, in->field,
                       "%s holds %u items; the limit is %u", in->name, dims[0],
                       TY_DS_MAX_EXAMPLES);
    h->count = dims[0];
    h->ndim = nd - 1;
    h->item_bytes = 1;
    for (unsigned i = 1; i < nd; i++) {
        h->dims[i - 1] = dims[i];
        h->item_bytes *= dims[i];
        if (h->item_bytes > TY_DS_MAX_FEATURES)
            return ty_fail(err, TY_ETOOBIG, in->field,
                           "%s: each image has more than %u values", in->name,
                           TY_DS_MAX_FEATURES);
    }
    return TY_OK;
}

/* Most trailing bytes counted (inflated) for the "N bytes after the last
 * image" message; past this a compressed file is refused unread. */
#define IDX_TRAILER_MAX DS_CHUNK

/* Fails if the input has data left after what its header declared (declared:
 * the file's size by its header). A compressed input is inflated at most
 * IDX_TRAILER_MAX + 1 bytes further, so a small file whose header is followed
 * by gigabytes of compressed zeros costs no more than a valid one. */
static ty_status idx_check_end(ds_input *in, const char *what,
                               uint64_t declared, ty_err *err)
{
    uint64_t rest;
    ty_status st = ds_input_count_rest(in, IDX_TRAILER_MAX, &rest, err);
    if (st != TY_OK)
        return st;
    if (rest > IDX_TRAILER_MAX)
        return ty_fail(err, TY_EFORMAT, in->field,
                       "%s has more data than its header declares (%llu "
                       "bytes); it was not read further",
                       in->name, (unsigned long long)declared);
    if (rest)
        return ty_fail(err, TY_EFORMAT, in->field,
                       "%s has %llu byte%s after the last %s (its header "
                       "declares fewer than the file holds)",
                       in->name, (unsigned long long)rest, rest == 1 ? "" : "s",
                       what);
    return TY_OK;
}

/* Reads all n labels into *out (grown as data arrives, so a header that lies
 * about the count costs no memory) and sets seen[v] for each label v that
 * occurs. */
static ty_status idx_read_labels(ds_input *in, uint32_t n, uint8_t **out,
                                 unsigned char seen[256], ty_err *err)
{
    uint8_t *labels = NULL;
    size_t have = 0, cap = 0;
    ty_status st = TY_OK;
    memset(seen, 0, 256);
    while (have < n) {
        if (have == cap) {
            cap = cap ? 2 * cap : DS_CHUNK;
            if (cap > n)
                cap = n;
            uint8_t *p = realloc(labels, cap);
            if (!p) {
                st = ty_fail(err, TY_ENOMEM, in->field, "out of memory");
                goto fail;
            }
            labels = p;
        }
        size_t got;
        if ((st = ds_input_read(in, labels + have, cap - have, &got, err)))
            goto fail;
        if (got == 0) {
            st = ty_fail(err, TY_EFORMAT, in->field,
                         "%s is truncated: expected %u labels, found %zu",
                         in->name, n, have);
            goto fail;
        }
        for (size_t i = have; i < have + got; i++)
            seen[labels[i]] = 1;
        have += got;
    }
    if ((st = idx_check_end(in, "label", 8 + (uint64_t)n, err)) != TY_OK)
        goto fail;
    *out = labels;
    return TY_OK;
fail:
    free(labels);
    return st;
}

/* The bytes a file's header declares it holds, header included. */
static uint64_t idx_declared(const idx_header *h)
{
    return 4 + 4 * (uint64_t)(h->ndim + 1) + (uint64_t)h->count * h->item_bytes;
}

/* Refuses a compressed file whose header declares more than the inflation
 * budget has left (*left), before any of its data is inflated. */
static ty_status idx_budget(const ds_input *in, const idx_header *h,
                            uint64_t max, uint64_t *left, ty_err *err)
{
    if (!in->gz)
        return TY_OK;
    uint64_t d = idx_declared(h);
    if (d > *left)
        return ty_fail(err, TY_ETOOBIG, in->field,
                       "%s is compressed and its header declares %llu bytes; "
                       "the compressed files of an upload may hold at most "
                       "%llu bytes in all",
                       in->name, (unsigned long long)d,
                       (unsigned long long)max);
    *left -= d;
    return TY_OK;
}

ty_status ds_convert_idx(const char *images_path, const char *labels_path,
                         const char *out_path, ty_err *err)
{
    return ds_convert_idx_ex(images_path, labels_path, out_path, NULL, err);
}

ty_status ds_convert_idx_flags(const char *images_path, const char *labels_path,
                               unsigned flags, const char *out_path,
                               ty_err *err)
{
    ds_idx_opts opts = {.flags = flags};
    return ds_convert_idx_ex(images_path, labels_path, out_path, &opts, err);
}

ty_status ds_convert_idx_ex(const char *images_path, const char *labels_path,
                            const char *out_path, ds_idx_opts *opts,
                            ty_err *err)
{
    ds_input images, labels_in;
    ds_writer w = DS_WRITER_INIT;
    idx_header ih, lh;
    uint8_t *labels = NULL;
    unsigned char *buf = NULL;
    json_t *meta = NULL, *classes = NULL;
    unsigned char seen[256];
    int32_t class_of[256];
    uint32_t num_classes = 0;
    uint64_t max_inflated = opts && opts->max_inflated
                                ? opts->max_inflated
                                : TY_DS_MAX_INFLATED_DEFAULT;
    uint64_t budget = max_inflated;
    unsigned flags = opts ? opts->flags : 0;
    ty_status st;

    if (opts)
        opts->inflated = 0;
    memset(&images, 0, sizeof images);
    memset(&labels_in, 0, sizeof labels_in);
    images.fd = labels_in.fd = -1;
    if (!out_path || !*out_path)
        return ty_fail(err, TY_EINVAL, NULL, "no output path given");
    if ((st = ds_input_open(&images, images_path, 1, "images", "images file",
                            err)) ||
        (st = idx_read_header(&images, 0, flags, &ih, err)) ||
        (st = idx_budget(&images, &ih, max_inflated, &budget, err)) ||
        (st = ds_input_open(&labels_in, labels_path, 1, "labels", "labels file",
                            err)) ||
        (st = idx_read_header(&labels_in, 1, flags, &lh, err)) ||
        (st = idx_budget(&labels_in, &lh, max_inflated, &budget, err)))
        goto fail;
    if (lh.count != ih.count) {
        st = ty_fail(err, TY_EFORMAT, "labels",
                     "labels file has %u labels but the images file has %u "
                     "images",
                     lh.count, ih.count);
        goto fail;
    }
    if ((st = idx_read_labels(&labels_in, lh.count, &labels, seen, err)))
        goto fail;

    /* idx3 (N, rows, cols) images are one-channel: [1, rows, cols] */
    uint32_t shape[TY_DS_MAX_DIMS], ndim = 0;
    if (ih.ndim == 2)
        shape[ndim++] = 1;
    for (uint32_t i = 0; i < ih.ndim; i++)
        shape[ndim++] = ih.dims[i];
    meta = ds_meta_new("idx", TY_TASK_CLASSIFICATION, ih.count, shape, ndim,
                       TY_DTYPE_U8, 1, "scale_255");
    classes = ds_classes_from_seen(seen, 256, class_of, &num_classes);
    if (!meta || !classes ||
        json_object_set_new(meta, "num_classes", json_integer(num_classes)) ||
        json_object_set(meta, "classes", classes)) {
        st = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
        goto fail;
    }

    uint64_t x_bytes = (uint64_t)ih.count * ih.item_bytes;
    uint64_t y_bytes = (uint64_t)ih.count * 4;
    if ((st = ds_writer_create(&w, out_path, meta, x_bytes, y_bytes, err)))
        goto fail;
    buf = malloc(16 * DS_CHUNK);
    if (!buf) {
        st = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
        goto fail;
    }
    for (uint64_t done = 0; done < x_bytes;) {
        size_t want = x_bytes - done < 16 * DS_CHUNK ? (size_t)(x_bytes - done)
                                                     : 16 * DS_CHUNK;
        size_t got;
        if ((st = ds_input_read_full(&images, buf, want, &got, err)))
            goto fail;
        if ((st = ds_writer_write(&w, buf, got, err)))
            goto fail;
        done += got;
        if (got < want) {
            st = ty_fail(err, TY_EFORMAT, "images",
                         "images file is truncated: expected %llu bytes of "
                         "pixels, found %llu",
                         (unsigned long long)x_bytes, (unsigned long long)done);
            goto fail;
        }
    }
    if ((st = idx_check_end(&images, "image", idx_declared(&ih), err)) ||
        (st = ds_writer_begin_y(&w, err)))
        goto fail;
    int32_t *y = (int32_t *)(void *)buf;
    const size_t per = 16 * DS_CHUNK / sizeof *y;
    for (size_t i = 0; i < ih.count;) {
        size_t n = ih.count - i < per ? ih.count - i : per;
        for (size_t k = 0; k < n; k++)
            y[k] = class_of[labels[i + k]];
        if ((st = ds_writer_write(&w, y, n * sizeof *y, err)))
            goto fail;
        i += n;
    }
    if ((st = ds_writer_finish(&w, err)))
        goto fail;
    goto done;
fail:
    ds_writer_discard(&w, out_path);
done:
    if (opts)
        opts->inflated = images.inflated + labels_in.inflated;
    ds_input_close(&images);
    ds_input_close(&labels_in);
    json_decref(meta);
    json_decref(classes);
    free(labels);
    free(buf);
    return st;
}
