/*
 * fsutil.h - durable file operations.
 *
 * The store's promise is that a 2xx means the data is on disk; these are the
 * primitives that keep it: write to a temporary file, fsync it, rename it over
 * the final name, fsync the directory. A crash at any point leaves either the
 * old file or the new one, never a torn one.
 */
#ifndef TY_FSUTIL_H
#define TY_FSUTIL_H

#include <stddef.h>
#include <stdint.h>

#include "common/ty.h"

/* Creates path and its missing parents with the given mode (like mkdir -p). */
ty_status fs_mkdirs(const char *path, unsigned mode, ty_err *err);

/* fsyncs the directory at path, so renames and creations in it are durable. */
ty_status fs_fsync_dir(const char *path, ty_err *err);

/* fsyncs an open file descriptor. */
ty_status fs_fsync_fd(int fd, const char *what, ty_err *err);

/* Renames tmp over final and fsyncs final's directory. tmp must already be
 * fsynced. On error tmp is left in place. */
ty_status fs_rename_durable(const char *tmp, const char *final, ty_err *err);

/* Writes len bytes to path atomically and durably (temp file in the same
 * directory, fsync, rename, fsync dir), with the given mode. */
ty_status fs_write_atomic(const char *path, const void *data, size_t len,
                          unsigned mode, ty_err *err);

/* Reads a whole (small) file into a NUL-terminated malloc'd buffer; *len gets
 * its size. limit bounds the size (TY_ETOOBIG past it). */
ty_status fs_read_all(const char *path, size_t limit, char **out, size_t *len,
                      ty_err *err);

/* Writes all len bytes to fd, retrying on short writes and EINTR. */
ty_status fs_write_full(int fd, const void *data, size_t len, ty_err *err);

/* Removes a directory tree (files and subdirectories). Missing is fine. */
ty_status fs_remove_tree(const char *path, ty_err *err);

/* 1 if path exists, else 0. */
int fs_exists(const char *path);

/* Size of the file at path, or -1. */
int64_t fs_file_size(const char *path);

#endif
