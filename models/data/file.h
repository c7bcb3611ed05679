/*
 * file.h - the TYDS meta builder and streaming writer (the layout's
 * constants are in layout.h, the format in dataset.h).
 *
 * A converter first learns everything the meta needs (counts, shape,
 * classes), then creates the writer, which lays out the file from the meta and
 * the sizes of x and y, and then writes x and y in order, in pieces as small
 * as it likes. So no converter ever holds x in memory, and the offsets in the
 * meta are right by construction. The writer checks that exactly the promised
 * number of bytes arrive.
 */
#ifndef TY_DS_FILE_H
#define TY_DS_FILE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/ty.h"
#include "models/data/dataset.h"
#include "models/data/layout.h"

/* A new meta object with the keys every dataset has, in the documented order
 * (features is the product of shape). NULL if an allocation fails. */
json_t *ds_meta_new(const char *format, ty_task task, uint32_t num_examples,
                    const uint32_t *shape, uint32_t ndim, ty_dtype x_dtype,
                    uint32_t y_dim, const char *preprocess);

/* The class rule for labels that are the numbers 0..n-1 (IDX bytes, NPY
 * class numbers): the classes are the labels that occur, in increasing
 * order. seen[v] is non-zero where label v occurs; index[v] (n entries)
 * gets v's class index, or -1 where v does not occur. Returns the classes
 * (JSON integers; the caller owns them) and their count in *count, or NULL
 * when out of memory. */
json_t *ds_classes_from_seen(const unsigned char *seen, uint32_t n,
                             int32_t *index, uint32_t *count);

typedef struct {
    int fd;             /* -1 when not open */
    unsigned char *buf; /* DS_CHUNK bytes of pending output */
    size_t used;
    uint64_t pos; /* bytes accepted so far (written or pending) */
    uint64_t x_offset, x_bytes, y_offset, y_bytes;
} ds_writer;

#define DS_WRITER_INIT \
    {                  \
        .fd = -1       \
    }

/* Sets meta's x_offset and y_offset for x_bytes of x and y_bytes of y,
 * creates (or truncates) path and writes the header and meta. On error
 * returns TY_ENOMEM/TY_EIO; call ds_writer_discard either way on failure. */
ty_status ds_writer_create(ds_writer *w, const char *path, json_t *meta,
                           uint64_t x_bytes, uint64_t y_bytes, ty_err *err);

/* Appends len bytes of x or y. TY_EIO if a write fails. */
ty_status ds_writer_write(ds_writer *w, const void *data, size_t len,
                          ty_err *err);

/* Ends x (TY_EINTERNAL unless exactly x_bytes came) and pads up to y. */
ty_status ds_writer_begin_y(ds_writer *w, ty_err *err);

/* Ends y (TY_EINTERNAL unless exactly y_bytes came), flushes, fsyncs and
 * closes the file. */
ty_status ds_writer_finish(ds_writer *w, ty_err *err);

/* After a failure: closes the writer if open and removes path (which need
 * not exist). */
void ds_writer_discard(ds_writer *w, const char *path);

#endif
