/*
 * fuzz_safetensors - models/safetensors.c's st_parse on the whole input,
 * then every tensor it accepted is read to its end (its bytes must lie in
 * the buffer) and looked up by name.
 */
#include <stdint.h>

#include "models/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t size)
{
    /* A copy of exactly size bytes, so ASan sees a read past its end. */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, d, size);
    st_file f;
    ty_err err = {0};
    if (st_parse(buf, size, &f, &err) == TY_OK) {
        volatile uint8_t sink = 0;
        for (size_t i = 0; i < f.count; i++) {
            const st_tensor *t = &f.tensors[i];
            const uint8_t *p = t->data;
            for (size_t k = 0; k < t->nbytes; k++)
                sink ^= p[k];
            if (st_find(&f, t->name) == NULL)
                abort();
        }
        (void)sink;
        st_meta(&f, "format");
        st_close(&f);
    } else if (!err.msg[0]) {
        abort();
    }
    free(buf);
    return 0;
}
