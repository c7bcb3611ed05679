/*
 * fuzz_text_csv - models/data/text_csv.c through ds_convert_csv_text.
 * Input: a byte picking the tokenizer (even: byte; odd: a BPE of at most
 * 300 ids learned from the text column) and max_length (1 to 16, from the
 * byte's upper bits), then the CSV file, whose text column is "text" and
 * label column "y". A success must leave a dataset that opens, whose every
 * value is an id below vocab_size or the padding -1, with no id after the
 * padding starts, and whose counts agree with the rows (num_tokens at least
 * the ids kept, truncated_examples the full rows among them at most).
 */
#include <math.h>
#include <stdint.h>

#include "models/data/dataset.h"
#include "tests/fuzz/fuzz_util.h"

static int64_t meta_int(const ty_dataset *ds, const char *key)
{
    json_t *v = json_object_get(ds->meta, key);
    if (!json_is_integer(v))
        abort(); /* the meta the engine reads */
    return json_integer_value(v);
}

static void check(const ty_dataset *ds, uint32_t max_length)
{
    int64_t vocab = meta_int(ds, "vocab_size");
    int64_t tokens = meta_int(ds, "num_tokens");
    int64_t truncated = meta_int(ds, "truncated_examples");
    if (meta_int(ds, "max_length") != max_length ||
        ds->features != max_length || ds->ndim != 1)
        abort();
    int64_t kept = 0, full = 0;
    const float *x = ds->x;
    for (uint32_t i = 0; i < ds->num_examples; i++) {
        uint32_t n = 0;
        for (uint32_t j = 0; j < max_length; j++) {
            float v = x[(uint64_t)i * max_length + j];
            if (v == -1.0f)
                continue;
            if (v != floorf(v) || v < 0 || v >= (float)vocab || j != n)
                abort(); /* not an id, or an id after the padding */
            n++;
        }
        kept += n;
        full += n == max_length;
    }
    if (tokens < kept || truncated > full ||
        truncated > (int64_t)ds->num_examples)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t size)
{
    if (!size)
        return 0;
    char in[256], out[256];
    fz_write("in.csv", d + 1, size - 1, in);
    snprintf(out, sizeof out, "%s/out.ds", fz_dir());
    uint32_t max_length = 1 + (d[0] >> 1) % 16;
    ty_tokenizer_request req = {.learn_vocab = d[0] & 1 ? 300 : 0};
    ty_err err = {0};
    if (ds_convert_csv_text(in, "y", "text", &req, max_length, 0, out, &err) ==
        TY_OK) {
        ty_dataset ds;
        if (ty_dataset_open(out, &ds, &err) != TY_OK)
            abort(); /* converted, yet unreadable */
        check(&ds, max_length);
        ty_dataset_close(&ds);
    } else if (!err.msg[0]) {
        abort(); /* an error must say what went wrong */
    }
    unlink(out);
    return 0;
}
