/*
 * nn_spec.c - model specs: parse and validate the JSON layer list against
 * the data's input shape and output size, plan every layer's shape and
 * parameters, and produce the normalized spec (every default spelled out).
 *
 * Every error names the layer by index and type and sets err->field to the
 * offending JSON path ("model.layers[2].units"), so the API can answer 422
 * with something a person can fix.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/jsonutil.h"
#include "models/nn_internal.h"

const char *nn_task_str(ty_task t)
{
    return t == TY_TASK_REGRESSION ? "regression" : "classification";
}

int nn_task_from_str(const char *s)
{
    if (!s)
        return -1;
    if (!strcmp(s, "classification"))
        return TY_TASK_CLASSIFICATION;
    if (!strcmp(s, "regression"))
        return TY_TASK_REGRESSION;
    return -1;
}

/* Rewrites an error whose field is relative to layer i into one that names
 * the layer: field "units" -> "model.layers[i].units", message prefixed with
 * "layer i (type)". */
static ty_status layer_fail(ty_err *err, ty_status st, const char *path,
                            size_t i, const char *type)
{
    if (!err)
        return st;
    char field[sizeof err->field + 64];
    if (err->field[0])
        snprintf(field, sizeof field, "%s.%s", path, err->field);
    else
        snprintf(field, sizeof field, "%s", path);
    snprintf(err->field, sizeof err->field, "%.127s", field);
    if (type)
        ty_err_prefix(err, "layer %zu (%s)", i, type);
    else
        ty_err_prefix(err, "layer %zu", i);
    return st;
}

void nn_arch_free(nn_arch *arch)
{
    if (!arch)
        return;
    free(arch->layers);
    memset(arch, 0, sizeof *arch);
}

static ty_status check_io(const uint32_t *input_shape, uint32_t ndim,
                          uint32_t num_outputs, ty_task task, ty_err *err)
{
    if (ndim < 1 || ndim > NN_MAX_DIMS || !input_shape)
        return ty_fail(err, TY_EINVAL, NULL,
                       "the input must have 1 to %d dimensions, not %u",
                       NN_MAX_DIMS, ndim);
    uint64_t n = 1;
    for (uint32_t i = 0; i < ndim; i++) {
        if (input_shape[i] == 0 || input_shape[i] > TY_DS_MAX_FEATURES)
            return ty_fail(err, TY_EINVAL, NULL,
                           "input dimension %u is %u; it must be 1 to %u", i,
                           input_shape[i], TY_DS_MAX_FEATURES);
        n *= input_shape[i];
        if (n > TY_DS_MAX_FEATURES)
            return ty_fail(err, TY_EINVAL, NULL,
                           "the input has more than %u values per example",
                           TY_DS_MAX_FEATURES);
    }
    if (num_outputs == 0 || num_outputs > TY_DS_MAX_CLASSES)
        return ty_fail(err, TY_EINVAL, NULL,
                       "the number of outputs must be 1 to %u, not %u",
                       TY_DS_MAX_CLASSES, num_outputs);
    if (task != TY_TASK_CLASSIFICATION && task != TY_TASK_REGRESSION)
        return ty_fail(err, TY_EINVAL, NULL, "unknown task %d", (int)task);
    return TY_OK;
}

static ty_status check_final_size(const nn_arch *arch, uint64_t out,
                                  ty_err *err)
{
    if (out == arch->num_outputs)
        return TY_OK;
    int last_dense = -1;
    for (uint32_t i = 0; i < arch->n_layers; i++)
        if (arch->layers[i].type == NN_LAYER_DENSE)
            last_dense = (int)i;
    const char *what = arch->task == TY_TASK_CLASSIFICATION
                           ? (arch->num_outputs == 1 ? "class" : "classes")
                           : (arch->num_outputs == 1 ? "target value"
                                                     : "target values");
    if (last_dense < 0)
        return ty_fail(err, TY_EINVAL, "model.layers",
                       "the last layer outputs %llu values but the dataset has "
                       "%u %s; end the model with a dense layer of %u units",
                       (unsigned long long)out, arch->num_outputs, what,
                       arch->num_outputs);
    char field[64];
    snprintf(field, sizeof field, "model.layers[%d].units", last_dense);
    return ty_fail(err, TY_EINVAL, field,
                   "the last layer outputs %llu values but the dataset has %u "
                   "%s; make the last dense layer's units %u",
                   (unsigned long long)out, arch->num_outputs, what,
                   arch->num_outputs);
}

ty_status nn_arch_build(const json_t *model, const uint32_t *input_shape,
                        uint32_t ndim, uint32_t num_outputs, ty_task task,
                        nn_arch *arch, json_t **normalized, ty_err *err)
{
    static const char *const model_keys[] = {"layers", NULL};
    char kinds_list[160];
    json_t *norm_layers = NULL;
    ty_status st;

    memset(arch, 0, sizeof *arch);
    if (normalized)
        *normalized = NULL;
    if ((st = check_io(input_shape, ndim, num_outputs, task, err)) != TY_OK)
        return st;
    if ((st = tyjson_check_keys(model, model_keys, "model", err)) != TY_OK)
        return st;
    const json_t *layers = json_object_get(model, "layers");
    if (!layers)
        return ty_fail(err, TY_EINVAL, "model.layers",
                       "model.layers is required: a list such as "
                       "[{\"type\": \"flatten\"}, {\"type\": \"dense\", "
                       "\"units\": 10}]");
    if (!json_is_array(layers))
        return ty_fail(err, TY_EINVAL, "model.layers",
                       "model.layers must be an array of layer objects");
    size_t n = json_array_size(layers);
    if (n == 0)
        return ty_fail(err, TY_EINVAL, "model.layers",
                       "model.layers must have at least one layer");
    if (n > NN_MAX_LAYERS)
        return ty_fail(err, TY_EINVAL, "model.layers",
                       "model.layers has %zu layers; the limit is %d", n,
                       NN_MAX_LAYERS);

    arch->layers = calloc(n, sizeof *arch->layers);
    norm_layers = json_array();
    if (!arch->layers || !norm_layers) {
        st = ty_fail(err, TY_ENOMEM, NULL, "out of memory parsing the model");
        goto fail;
    }
    arch->n_layers = (uint32_t)n;
    arch->num_outputs = num_outputs;
    arch->task = task;
    arch->be = &nn_backend_cpu;
    arch->input.ndim = ndim;
    memcpy(arch->input.d, input_shape, ndim * sizeof *input_shape);
    arch->first_param_layer = arch->n_layers;
    arch->max_numel = nn_shape_numel(&arch->input);
    nn_layer_kind_list(kinds_list, sizeof kinds_list);

    nn_shape cur = arch->input;
    for (size_t i = 0; i < n; i++) {
        const json_t *obj = json_array_get(layers, i);
        nn_layer *l = &arch->layers[i];
        char path[64];
        tyjson_path_index(path, sizeof path, "model.layers", i);
        if (!json_is_object(obj)) {
            st = ty_fail(err, TY_EINVAL, path,
                         "layer %zu must be an object such as {\"type\": "
                         "\"relu\"}",
                         i);
            goto fail;
        }
        const json_t *type = json_object_get(obj, "type");
        if (!json_is_string(type)) {
            st = ty_fail(err, TY_EINVAL, "type",
                         "type is required and must be a string, one of: %s",
                         kinds_list);
            st = layer_fail(err, st, path, i, NULL);
            goto fail;
        }
        const char *tname = json_string_value(type);
        l->kind = nn_layer_kind_find(tname, &l->type);
        if (!l->kind) {
            st = ty_fail(err, TY_EINVAL, "type",
                         "unknown type '%.64s'; known types: %s", tname,
                         kinds_list);
            st = layer_fail(err, st, path, i, NULL);
            goto fail;
        }
        l->index = (uint32_t)i;
        if ((st = tyjson_check_keys(obj, l->kind->keys, "", err)) != TY_OK) {
            st = layer_fail(err, st, path, i, tname);
            goto fail;
        }
        json_t *norm = json_object();
        if (!norm || json_array_append_new(norm_layers, norm) != 0) {
            st = ty_fail(err, TY_ENOMEM, NULL, "out of memory parsing the model");
            goto fail;
        }
        json_object_set_new(norm, "type", json_string(l->kind->name));
        if (l->kind->parse &&
            (st = l->kind->parse(l, obj, norm, err)) != TY_OK) {
            st = layer_fail(err, st, path, i, tname);
            goto fail;
        }
        l->in = cur;
        if ((st = l->kind->plan(l, err)) != TY_OK) {
            st = layer_fail(err, st, path, i, tname);
            goto fail;
        }
        l->param_offset = arch->param_count;
        for (uint32_t t = 0; t < l->n_tensors; t++)
            l->param_count += l->tensors[t].numel;
        arch->param_count += l->param_count;
        if (l->param_count && arch->first_param_layer == arch->n_layers)
            arch->first_param_layer = (uint32_t)i;
        cur = l->out;
        if (nn_shape_numel(&cur) > arch->max_numel)
            arch->max_numel = nn_shape_numel(&cur);
    }

    if ((st = check_final_size(arch, nn_shape_numel(&cur), err)) != TY_OK)
        goto fail;
    if (arch->param_count > NN_MAX_PARAMS) {
        st = ty_fail(err, TY_EINVAL, "model.layers",
                     "the model has %llu parameters; the limit is %llu",
                     (unsigned long long)arch->param_count,
                     (unsigned long long)NN_MAX_PARAMS);
        goto fail;
    }
    if (normalized) {
        *normalized = json_object();
        if (!*normalized ||
            json_object_set_new(*normalized, "layers", norm_layers) != 0) {
            norm_layers = NULL; /* set_new steals even on failure */
            st = ty_fail(err, TY_ENOMEM, NULL, "out of memory parsing the model");
            goto fail;
        }
    } else {
        json_decref(norm_layers);
    }
    return TY_OK;

fail:
    json_decref(norm_layers);
    if (normalized) {
        json_decref(*normalized);
        *normalized = NULL;
    }
    nn_arch_free(arch);
    return st;
}

ty_status nn_spec_validate(const json_t *model, const uint32_t *input_shape,
                           uint32_t ndim, uint32_t num_outputs, ty_task task,
                           json_t **normalized, uint64_t *param_count,
                           ty_err *err)
{
    nn_arch arch;
    ty_status st = nn_arch_build(model, input_shape, ndim, num_outputs, task,
                                 &arch, normalized, err);
    if (st != TY_OK)
        return st;
    if (param_count)
        *param_count = arch.param_count;
    nn_arch_free(&arch);
    return TY_OK;
}

void nn_arch_init_params(const nn_arch *arch, float *params, ty_rng *rng)
{
    for (uint32_t i = 0; i < arch->n_layers; i++) {
        const nn_layer *l = &arch->layers[i];
        if (l->kind->init)
            l->kind->init(l, params + l->param_offset, rng);
    }
}
