/*
 * blob.h - the content-addressed blob folder: <data>/blobs/<aa>/<sha256>.
 *
 * A blob enters by import: its temp file (already fsynced) is hashed and
 * renamed into place, then the folder is fsynced, so a row that names a blob
 * never names a missing or torn file. Identical content is stored once.
 */
#ifndef TY_BLOB_H
#define TY_BLOB_H

#include <stddef.h>
#include <stdint.h>

#include "common/ty.h"

/* Writes the path of blob sha256 into out. */
void blob_path(const char *data_dir, const char *sha256, char *out, size_t n);

/* Moves the fsynced file tmp_path into the blob folder under its SHA-256
 * (written to sha256_out) and reports its size. If the blob exists already,
 * tmp_path is removed. On failure tmp_path is left for the caller. */
ty_status blob_import(const char *data_dir, const char *tmp_path,
                      char sha256_out[65], int64_t *bytes, ty_err *err);

/* Removes blob sha256 (missing is fine). */
ty_status blob_remove(const char *data_dir, const char *sha256, ty_err *err);

#endif
