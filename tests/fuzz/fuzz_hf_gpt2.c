/*
 * fuzz_hf_gpt2 - POST /v1/models's layout hf-gpt2 (models/hf_gpt2.h): a
 * config.json and a model.safetensors converted and loaded
 * (hf_gpt2_import), then, when accepted, the GPT-2 export of the result
 * converted back, which must be accepted too (what goes out comes back
 * in), and one forward pass through the net. Input: "<config JSON>@@W@@
 * <safetensors>".
 */
#include <stdint.h>

#include "models/hf_gpt2.h"
#include "tests/fuzz/fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t size)
{
    size_t a_len, b_len;
    const uint8_t *b;
    fz_split(d, size, "@@W@@", &a_len, &b, &b_len);
    json_t *config =
        json_loadb((const char *)d, a_len, JSON_REJECT_DUPLICATES, NULL);
    if (!config)
        return 0;
    char in[256], out[256], back[256], again[256];
    fz_write("model.safetensors", b, b_len, in);
    snprintf(out, sizeof out, "%s/converted.safetensors", fz_dir());
    snprintf(back, sizeof back, "%s/back.safetensors", fz_dir());
    snprintf(again, sizeof again, "%s/again.safetensors", fz_dir());
    nn_net *net = NULL;
    ty_err err = {0};
    if (hf_gpt2_import(in, config, NULL, out, &net, &err) == TY_OK) {
        if (!net)
            abort();
        json_t *cfg = NULL;
        if (hf_gpt2_export(out, back, &cfg, NULL, &err) != TY_OK)
            abort();
        nn_net *net2 = NULL;
        if (hf_gpt2_import(back, cfg, NULL, again, &net2, &err) != TY_OK)
            abort();
        nn_net_destroy(net2);
        json_decref(cfg);
        uint64_t f = nn_net_input_features(net);
        uint64_t k = nn_net_num_outputs(net);
        if (f * k <= (1u << 20)) {
            nn_workspace *ws = nn_workspace_create(net, 1);
            float *x = calloc(f, sizeof *x);
            float *y = calloc(f * k, sizeof *y);
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
    unlink(back);
    unlink(again);
    json_decref(config);
    return 0;
}
