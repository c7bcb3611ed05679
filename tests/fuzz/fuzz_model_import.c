/*
 * fuzz_model_import - POST /v1/models's import (models/nn.h's
 * nn_model_import): the metadata part and the safetensors weights, then
 * one prediction through the imported net (so a spec and weights that pass
 * the checks but do not fit the forward pass show up here). Input:
 * "<metadata JSON>@@W@@<safetensors>"; empty metadata: the file's own.
 */
#include <stdint.h>

#include "models/nn.h"
#include "tests/fuzz/fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t size)
{
    size_t a_len, b_len;
    const uint8_t *b;
    fz_split(d, size, "@@W@@", &a_len, &b, &b_len);
    json_t *meta = NULL;
    if (a_len) {
        meta = json_loadb((const char *)d, a_len, JSON_REJECT_DUPLICATES, NULL);
        if (!meta)
            return 0;
    }
    char in[256], out[256];
    fz_write("weights.safetensors", b, b_len, in);
    snprintf(out, sizeof out, "%s/model.safetensors", fz_dir());
    nn_net *net = NULL;
    ty_err err = {0};
    if (nn_model_import(in, meta, out, &net, &err) == TY_OK) {
        if (!net)
            abort();
        uint64_t f = nn_net_input_features(net);
        uint32_t k = nn_net_num_outputs(net);
        /* What the import accepts, the loader reads back. */
        nn_net *again = NULL;
        if (nn_net_load(out, &again, &err) != TY_OK)
            abort();
        nn_net_destroy(again);
        if (f <= (1u << 20) && k <= (1u << 16)) {
            nn_workspace *ws = nn_workspace_create(net, 1);
            float *x = calloc(f ? f : 1, sizeof *x);
            float *y = calloc(k ? k : 1, sizeof *y);
            if (ws && x && y)
                nn_net_predict(net, ws, x, 1, y, &err);
            free(x);
            free(y);
            nn_workspace_destroy(ws);
        }
        nn_net_destroy(net);
    } else if (net || !err.msg[0]) {
        abort();
    }
    unlink(out);
    json_decref(meta);
    return 0;
}
