/*
 * fuzz_util.h - what the libFuzzer targets share: the input written to a
 * private temporary folder (for the parsers that read files) and split in
 * two (for those that read two files or a name and a body).
 */
#ifndef TY_FUZZ_UTIL_H
#define TY_FUZZ_UTIL_H

#include <ftw.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The folder of this process's temporary files, made once: in /dev/shm
 * when it can be (a tmpfs, where the converters' fsync costs nothing: a
 * rate about 8 times that on disk for the CSV target), else in /tmp.
 * Removed at exit. */
static char fz_dir_path[64];
static int fz_rm(const char *path, const struct stat *st, int flag,
                 struct FTW *ftw)
{
    return remove(path);
}
static void fz_dir_remove(void)
{
    nftw(fz_dir_path, fz_rm, 8, FTW_DEPTH | FTW_PHYS);
}
static inline const char *fz_dir(void)
{
    if (!fz_dir_path[0]) {
        snprintf(fz_dir_path, sizeof fz_dir_path, "/dev/shm/ty-fuzz-XXXXXX");
        if (!mkdtemp(fz_dir_path)) {
            snprintf(fz_dir_path, sizeof fz_dir_path, "/tmp/ty-fuzz-XXXXXX");
            if (!mkdtemp(fz_dir_path))
                abort();
        }
        atexit(fz_dir_remove);
    }
    return fz_dir_path;
}

/* Writes n bytes to <fz_dir>/name; the path goes to out (256 bytes). */
static inline void fz_write(const char *name, const void *p, size_t n,
                            char *out)
{
    snprintf(out, 256, "%s/%s", fz_dir(), name);
    FILE *f = fopen(out, "wb");
    if (!f || (n && fwrite(p, 1, n, f) != n) || fclose(f) != 0)
        abort();
}

/* Splits data at the first occurrence of sep (a byte sequence): *a_len the
 * bytes before it, *b and *b_len those after. Without sep, b is empty. */
static inline void fz_split(const uint8_t *data, size_t size, const char *sep,
                            size_t *a_len, const uint8_t **b, size_t *b_len)
{
    size_t k = strlen(sep);
    for (size_t i = 0; i + k <= size; i++)
        if (memcmp(data + i, sep, k) == 0) {
            *a_len = i;
            *b = data + i + k;
            *b_len = size - i - k;
            return;
        }
    *a_len = size;
    *b = data + size;
    *b_len = 0;
}

/* A NUL-terminated copy of n bytes (caller frees). */
static inline char *fz_strndup(const uint8_t *p, size_t n)
{
    char *s = malloc(n + 1);
    if (!s)
        abort();
    memcpy(s, p, n);
    s[n] = 0;
    return s;
}

#endif
