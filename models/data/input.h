/*
 * input.h - an uploaded file read in bounded chunks, plain or gzip.
 *
 * The converters see one stream of bytes whether or not the file was
 * compressed (gzip is recognised by its magic bytes 1f 8b, never by name, and
 * only where the caller allows it). Every failure comes back as a ty_err that
 * names the file the way the user knows it ("images file", "x.npy") and sets
 * err->field to the upload part ("images", "x", "file").
 */
#ifndef TY_DS_INPUT_H
#define TY_DS_INPUT_H

#include <stddef.h>
#include <stdint.h>
#include <zlib.h>

#include "common/ty.h"

#define DS_CHUNK (1u << 16) /* bytes per read; converters' buffers too */

typedef struct {
    int fd;              /* -1 when closed */
    z_stream *gz;        /* non-NULL when the file is gzip-compressed */
    unsigned char *zbuf; /* compressed bytes read ahead (gzip only) */
    int gz_done;         /* gzip: the last member has ended */
    const char *field;   /* err->field for failures (a string literal) */
    const char *name;    /* the file in messages (a string literal) */
    int64_t file_size;   /* on disk, so compressed size for gzip */
    uint64_t offset;     /* (uncompressed) bytes delivered so far */
    uint64_t inflated;   /* gzip: bytes inflated so far; equal to offset,
                             since inflate writes only into the caller's
                             buffer (nothing is inflated ahead) */
} ds_input;

/* Opens path for reading; with allow_gzip, a file that starts with the gzip
 * magic is inflated as it is read, only as far as the reads ask (so a caller
 * that knows how many bytes it wants never inflates more). Concatenated gzip
 * members are read as one stream; bytes after the last member that are not a
 * gzip member are ignored (as zlib's gzread does). On error TY_EIO (or
 * TY_EINVAL for a missing path) and *in is left closed. */
ty_status ds_input_open(ds_input *in, const char *path, int allow_gzip,
                        const char *field, const char *name, ty_err *err);

/* Reads up to n bytes (n <= INT_MAX); *got is 0 only at the end of the data.
 * Corrupt or truncated gzip data is TY_EFORMAT, a failed read TY_EIO. */
ty_status ds_input_read(ds_input *in, void *buf, size_t n, size_t *got,
                        ty_err *err);

/* Like ds_input_read but keeps reading until n bytes or the end of the data;
 * *got < n means the data ended first. */
ty_status ds_input_read_full(ds_input *in, void *buf, size_t n, size_t *got,
                             ty_err *err);

/* Counts the bytes from the current position to the end of the data, for
 * "trailing bytes" messages, but reads (inflates) at most max + 1 of them
 * when the file is compressed: *rest > max then means "more than max". */
ty_status ds_input_count_rest(ds_input *in, uint64_t max, uint64_t *rest,
                              ty_err *err);

/* Moves a plain (uncompressed) input to byte offset off. TY_EINTERNAL for a
 * gzip input, TY_EIO if the seek fails. */
ty_status ds_input_seek(ds_input *in, uint64_t off, ty_err *err);

/* Reads up to n bytes at byte offset off of a plain (uncompressed) input,
 * without moving its position; *got < n means the file ended first.
 * TY_EINTERNAL for a gzip input, TY_EIO if a read fails. */
ty_status ds_input_pread(ds_input *in, void *buf, size_t n, uint64_t off,
                         size_t *got, ty_err *err);

/* Closes; safe to call twice and on an input whose open failed. */
void ds_input_close(ds_input *in);

/* Length (1-4) of the valid UTF-8 sequence at p (avail bytes there), or 0
 * if it is not one. */
size_t ds_utf8_seq(const unsigned char *p, size_t avail);

/* 1 if s (len bytes) is valid UTF-8 (as jansson requires), else 0. */
int ds_utf8_valid(const char *s, size_t len);

/* The largest magnitude of an integer class label, 2^53 - 1: every JSON
 * reader (JavaScript's included) holds integers up to it exactly. */
#define DS_LABEL_INT_MAX 9007199254740991LL

/* 1 if s (len bytes) is an integer class label written canonically - "0" or
 * an optional '-' and digits without a leading zero ("-0", "+3", "03", " 3"
 * are not) - of magnitude at most DS_LABEL_INT_MAX, with its value in *out;
 * else 0. A label written so is the decimal text of exactly one JSON integer
 * and back, so the two stand for the same class (see ty_dataset_class_map). */
int ds_label_int(const char *s, size_t len, int64_t *out);

#define DS_FNV_BASIS 1469598103934665603ull

/* FNV-1a over n bytes, continuing from h (start with DS_FNV_BASIS); for the
 * string and class hash tables. */
static inline uint64_t ds_fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* Writes s (len bytes) into out (size n) for quoting in a message: at most
 * about 40 bytes, control bytes and
 * invalid UTF-8 as '?', "..." when cut. */
void ds_snippet(char *out, size_t n, const char *s, size_t len);

#endif
