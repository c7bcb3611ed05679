/*
 * hf_gpt2_logits.c - the engine's side of tests/parity/hf_gpt2.py: imports
 * a Hugging Face GPT-2 checkpoint as the server does (hf_gpt2_import, the
 * loader's checks included), then runs the converted model's forward pass
 * on token windows and writes its logits.
 *
 *   hf_gpt2_logits MODEL.safetensors CONFIG.json TOKENS.f32 N OUT.f32
 *
 * TOKENS.f32 holds N windows of n_positions token ids (float32, as the
 * engine carries ids); OUT.f32 gets their (N, T, vocab) logits, float32.
 * The forward pass is the engine's own (nn_forward on the CPU backend), on
 * an arch built from the converted file's spec with the file's tensors,
 * as nn_net_load builds it. Exit 0, or 1 with the error on stderr.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ty.h"
#include "models/hf_gpt2.h"
#include "models/nn_internal.h"
#include "models/safetensors.h"

static int die(const char *what, const ty_err *err)
{
    if (err->field[0])
        fprintf(stderr, "hf_gpt2_logits: %s: %s (field %s)\n", what, err->msg,
                err->field);
    else
        fprintf(stderr, "hf_gpt2_logits: %s: %s\n", what, err->msg);
    return 1;
}

/* The converted file's spec built into arch, its tensors into *state. */
static ty_status load_state(const char *path, nn_arch *arch, float **state,
                            ty_err *err)
{
    st_file f = {0};
    ty_status st = st_open(path, &f, err);
    if (st != TY_OK)
        return st;
    json_t *spec = json_loads(st_meta(&f, "trainyard.spec"), 0, NULL);
    json_t *shape = json_loads(st_meta(&f, "trainyard.input_shape"), 0, NULL);
    uint32_t t = (uint32_t)json_integer_value(json_array_get(shape, 0));
    uint32_t v =
        (uint32_t)strtoul(st_meta(&f, "trainyard.num_outputs"), NULL, 10);
    st = nn_arch_build(spec, &t, 1, v, TY_TASK_LANGUAGE_MODELING, arch, NULL,
                       err);
    json_decref(spec);
    json_decref(shape);
    if (st == TY_OK) {
        *state =
            calloc(arch->param_count + arch->buffer_count + 1, sizeof **state);
        for (uint32_t i = 0; *state && i < arch->n_tensors; i++) {
            const st_tensor *x = st_find(&f, arch->tensors[i].name);
            if (!x || x->numel != arch->tensors[i].desc->numel) {
                st = ty_fail(err, TY_EFORMAT, NULL, "tensor %s",
                             arch->tensors[i].name);
                break;
            }
            memcpy(*state + arch->tensors[i].offset, x->data, x->nbytes);
        }
    }
    st_close(&f);
    return st;
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: hf_gpt2_logits MODEL.safetensors CONFIG.json "
                        "TOKENS.f32 N OUT.f32\n");
        return 2;
    }
    ty_err err = {0};
    json_error_t je;
    json_t *config = json_load_file(argv[2], 0, &je);
    if (!config) {
        fprintf(stderr, "hf_gpt2_logits: %s: %s\n", argv[2], je.text);
        return 1;
    }
    char converted[4096];
    snprintf(converted, sizeof converted, "%s.trainyard.safetensors", argv[5]);
    nn_net *net = NULL;
    ty_status st = hf_gpt2_import(argv[1], config, NULL, converted, &net, &err);
    json_decref(config);
    if (st != TY_OK)
        return die("import", &err);
    nn_net_destroy(net);

    nn_arch arch;
    float *state = NULL;
    if (load_state(converted, &arch, &state, &err) != TY_OK)
        return die("load", &err);
    uint32_t n = (uint32_t)strtoul(argv[4], NULL, 10);
    uint32_t t = arch.input.d[0], v = arch.num_outputs;
    nn_workspace *ws = nn_workspace_create_for(&arch, n, 0);
    FILE *in = fopen(argv[3], "rb");
    if (!ws || !in ||
        fread(ws->host_in, sizeof(float), (size_t)n * t, in) != (size_t)n * t) {
        fprintf(stderr,
                "hf_gpt2_logits: cannot read %u windows of %u tokens "
                "from %s\n",
                n, t, argv[3]);
        return 1;
    }
    fclose(in);
    nn_workspace_upload_input(ws, n);
    const float *y = nn_forward(&arch, state, ws, n, 0, NULL);
    FILE *out = fopen(argv[5], "wb");
    if (!out ||
        fwrite(y, sizeof(float), (size_t)n * t * v, out) != (size_t)n * t * v ||
        fclose(out) != 0) {
        fprintf(stderr, "hf_gpt2_logits: cannot write %s\n", argv[5]);
        return 1;
    }
    nn_workspace_destroy(ws);
    free(state);
    nn_arch_free(&arch);
    remove(converted);
    return 0;
}
