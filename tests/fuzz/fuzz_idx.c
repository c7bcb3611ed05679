/*
 * fuzz_idx - models/data/idx.c (and input.c's gzip reading) through
 * ds_convert_idx. Input: "<images>@@LABELS@@<labels>" (either may be
 * gzip). A success must leave a dataset that opens.
 */
#include <stdint.h>

#include "models/data/dataset.h"
#include "tests/fuzz/fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t size)
{
    size_t a_len, b_len;
    const uint8_t *b;
    fz_split(d, size, "@@LABELS@@", &a_len, &b, &b_len);
    char images[256], labels[256], out[256];
    fz_write("images.idx", d, a_len, images);
    fz_write("labels.idx", b, b_len, labels);
    snprintf(out, sizeof out, "%s/out.ds", fz_dir());
    ty_err err = {0};
    if (ds_convert_idx(images, labels, out, &err) == TY_OK) {
        ty_dataset ds;
        if (ty_dataset_open(out, &ds, &err) != TY_OK)
            abort();
        ty_dataset_close(&ds);
    } else if (!err.msg[0]) {
        abort();
    }
    unlink(out);
    return 0;
}
