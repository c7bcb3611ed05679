/*
 * safetensors.h - reading and writing safetensors files, the format of
 * trainyard's models and checkpoints (and PyTorch's, via the safetensors
 * library).
 *
 * Layout: an 8-byte little-endian header length N, N bytes of JSON header
 * ({"__metadata__": {string: string}, "<name>": {"dtype": "F32", "shape":
 * [..], "data_offsets": [begin, end]}, ...}), then the data buffer. Offsets
 * are relative to the buffer.
 *
 * The reader treats every file as untrusted: header size bounded, JSON
 * well-formed with no duplicate keys, known dtypes, shapes whose byte size
 * matches their offsets, and offsets that tile the buffer exactly (no gaps,
 * no overlaps, nothing past the end). Anything else is TY_EFORMAT with a
 * message naming the problem. The writer pads the header with spaces to a
 * multiple of 8 so the data is aligned, and writes atomically (temporary
 * file, fsync, rename, directory fsync).
 */
#ifndef TY_SAFETENSORS_H
#define TY_SAFETENSORS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/ty.h"

#define ST_MAX_DIMS 8
#define ST_MAX_HEADER (100u * 1000u * 1000u) /* bytes, as the Rust crate */
#define ST_MAX_TENSORS (1u << 20)

typedef enum {
    ST_BOOL = 0,
    ST_U8,
    ST_I8,
    ST_F8_E5M2,
    ST_F8_E4M3,
    ST_I16,
    ST_U16,
    ST_F16,
    ST_BF16,
    ST_I32,
    ST_U32,
    ST_F32,
    ST_F64,
    ST_I64,
    ST_U64,
    ST_DTYPE_COUNT
} st_dtype;

/* "F32" etc.; "?" when out of range. */
const char *st_dtype_name(st_dtype t);
/* Bytes per element. */
size_t st_dtype_size(st_dtype t);
/* The dtype named s, or -1. */
int st_dtype_parse(const char *s);

typedef struct {
    const char *name; /* borrowed from the header */
    st_dtype dtype;
    uint32_t ndim;
    uint64_t shape[ST_MAX_DIMS];
    uint64_t numel;
    uint64_t nbytes;
    const void *data; /* into the buffer; may be unaligned */
} st_tensor;

/* A parsed file. Tensors are in header order. */
typedef struct {
    json_t *header;     /* owned */
    const json_t *meta; /* "__metadata__" (strings), or NULL */
    st_tensor *tensors; /* owned */
    size_t count;
    void *map; /* private: the mapping, when opened by path */
    size_t map_len;
} st_file;

/* Parses and validates buf (len bytes; must outlive f). On error f is zeroed
 * and TY_EFORMAT or TY_ENOMEM returned. */
ty_status st_parse(const void *buf, size_t len, st_file *f, ty_err *err);

/* Memory-maps path and parses it. TY_ENOTFOUND / TY_EIO when it cannot be
 * opened, else as st_parse. */
ty_status st_open(const char *path, st_file *f, ty_err *err);

/* Frees and unmaps; safe on a zeroed struct. */
void st_close(st_file *f);

/* The tensor called name, or NULL. */
const st_tensor *st_find(const st_file *f, const char *name);

/* The metadata string under key, or NULL. */
const char *st_meta(const st_file *f, const char *key);

/* One tensor to write; data holds numel * dtype size bytes. */
typedef struct {
    const char *name;
    st_dtype dtype;
    uint32_t ndim;
    uint64_t shape[ST_MAX_DIMS];
    const void *data;
} st_out_tensor;

/* Writes the n tensors, in order, with meta (an object of strings, or NULL)
 * as __metadata__, to path atomically. On error path is untouched and
 * TY_EINVAL (bad names or metadata), TY_ENOMEM or TY_EIO returned. */
ty_status st_write(const char *path, const json_t *meta, const st_out_tensor *t,
                   size_t n, ty_err *err);

#endif
