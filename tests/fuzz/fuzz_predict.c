/*
 * fuzz_predict - the predict inputs as the server decodes them today: the
 * body through json_loadb (as server/http.c parses it), then every example
 * of "inputs" (REST predict) or "inputs"[0]."data" (KServe v2 infer)
 * through serve/predict.c's flatten, which is static: this file includes
 * predict.c itself. The model's feature count is the first byte's (1 to
 * 256). No model is opened: run_open needs a store.
 */
#include "serve/predict.c"

#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t size)
{
    if (size < 1)
        return 0;
    uint64_t f = (uint64_t)d[0] + 1;
    json_t *body =
        json_loadb((const char *)d + 1, size - 1, JSON_REJECT_DUPLICATES, NULL);
    if (!body)
        return 0;
    /* Exactly f floats, so ASan sees a write past them. */
    float *x = malloc(f * sizeof *x);
    if (!x)
        abort();
    const json_t *inputs = json_object_get(body, "inputs");
    size_t i;
    json_t *ex;
    json_array_foreach (inputs, i, ex) {
        ty_err err = {0};
        uint64_t count = 0;
        const json_t *v = json_is_object(ex) ? json_object_get(ex, "data") : ex;
        ty_status s = flatten(v, x, f, &count, "inputs[0]", 0, &err);
        if (s != TY_OK && !err.msg[0])
            abort();
        if (s == TY_OK && count > f && count > f + 1)
            abort(); /* flatten stops one past the cap */
        if (i >= 64)
            break;
    }
    free(x);
    json_decref(body);
    return 0;
}
