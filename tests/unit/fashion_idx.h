/* fashion_idx.h - Fashion-MNIST's IDX files (or their .gz) read into a
 * synth dataset (synth_data.h) for the tests that train on the real data
 * without a dataset file: the data-parallel ranks (tests/dp) and the GPU
 * convergence test. Link zlib. */
#ifndef TY_TEST_FASHION_IDX_H
#define TY_TEST_FASHION_IDX_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <zlib.h>

#include "tests/unit/synth_data.h"

/* Opens dir/name, or dir/name.gz. NULL when neither opens. */
static inline gzFile fashion_open_idx(const char *dir, const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (access(path, R_OK) != 0)
        snprintf(path, sizeof path, "%s/%s.gz", dir, name);
    return access(path, R_OK) == 0 ? gzopen(path, "rb") : NULL;
}

static inline int fashion_read_be32(gzFile f, uint32_t *v)
{
    unsigned char b[4];
    if (gzread(f, b, 4) != 4)
        return -1;
    *v = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 |
         b[3];
    return 0;
}

/* The first `limit` (0: all) images (n, 1, 28, 28) u8 and labels into s
 * (a u8 dataset with preprocess scale_255). 0 on success, 1 files absent,
 * -1 malformed. */
static inline int fashion_load_set(const char *dir, const char *images,
                                   const char *labels, uint32_t limit, synth *s)
{
    gzFile fi = fashion_open_idx(dir, images),
           fl = fashion_open_idx(dir, labels);
    int rc = 1;
    uint32_t magic, n, h, w, magic_l, n_l;
    unsigned char *lab = NULL;
    if (!fi || !fl)
        goto done;
    rc = -1;
    if (fashion_read_be32(fi, &magic) || magic != 0x803 ||
        fashion_read_be32(fi, &n) || fashion_read_be32(fi, &h) ||
        fashion_read_be32(fi, &w) || h != 28 || w != 28 ||
        fashion_read_be32(fl, &magic_l) || magic_l != 0x801 ||
        fashion_read_be32(fl, &n_l) || n_l != n || n == 0 || n > 100000)
        goto done;
    if (limit && limit < n)
        n = limit;
    static const uint32_t shape[] = {1, 28, 28};
    synth_init(s, TY_TASK_CLASSIFICATION, n, shape, 3, TY_DTYPE_U8, 10,
               "scale_255");
    lab = malloc(n);
    if (!lab || gzread(fi, s->x, n * 784u) != (int)(n * 784u) ||
        gzread(fl, lab, n) != (int)n)
        goto done;
    for (uint32_t i = 0; i < n; i++)
        s->y[i] = lab[i] < 10 ? lab[i] : 0;
    rc = 0;
done:
    free(lab);
    if (fi)
        gzclose(fi);
    if (fl)
        gzclose(fl);
    return rc;
}

#endif
