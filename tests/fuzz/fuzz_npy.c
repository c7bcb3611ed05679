/*
 * fuzz_npy - models/data/npy.c through ds_convert_npy. Input:
 * "<x.npy>@@Y@@<y.npy>"; the last byte picks the task (auto,
 * classification, regression). A success must leave a dataset that opens.
 */
#include <stdint.h>

#include "models/data/dataset.h"
#include "tests/fuzz/fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t size)
{
    size_t a_len, b_len;
    const uint8_t *b;
    fz_split(d, size, "@@Y@@", &a_len, &b, &b_len);
    char x[256], y[256], out[256];
    fz_write("x.npy", d, a_len, x);
    fz_write("y.npy", b, b_len, y);
    snprintf(out, sizeof out, "%s/out.ds", fz_dir());
    int pick = size ? d[size - 1] % 3 : 0;
    int task = pick == 0   ? -1
               : pick == 1 ? (int)TY_TASK_CLASSIFICATION
                           : (int)TY_TASK_REGRESSION;
    ty_err err = {0};
    if (ds_convert_npy(x, y, task, out, &err) == TY_OK) {
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
