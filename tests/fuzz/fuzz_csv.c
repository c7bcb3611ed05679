/*
 * fuzz_csv - models/data/csv.c through ds_convert_csv. Input: the CSV file;
 * its first byte also picks the task (classification or regression). The
 * label column is "y". A success must leave a dataset that opens.
 */
#include <stdint.h>

#include "models/data/dataset.h"
#include "tests/fuzz/fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t size)
{
    char in[256], out[256];
    fz_write("in.csv", d, size, in);
    snprintf(out, sizeof out, "%s/out.ds", fz_dir());
    ty_task task =
        size && (d[0] & 1) ? TY_TASK_REGRESSION : TY_TASK_CLASSIFICATION;
    ty_err err = {0};
    if (ds_convert_csv(in, "y", task, out, &err) == TY_OK) {
        ty_dataset ds;
        if (ty_dataset_open(out, &ds, &err) != TY_OK)
            abort(); /* converted, yet unreadable */
        ty_dataset_close(&ds);
    } else if (!err.msg[0]) {
        abort(); /* an error must say what went wrong */
    }
    unlink(out);
    return 0;
}
