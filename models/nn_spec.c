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
    if (t == TY_TASK_LANGUAGE_MODELING)
        return "language_modeling";
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
    if (!strcmp(s, "language_modeling"))
        return TY_TASK_LANGUAGE_MODELING;
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
    if (task != TY_TASK_CLASSIFICATION && task != TY_TASK_REGRESSION &&
        task != TY_TASK_LANGUAGE_MODELING)
        return ty_fail(err, TY_EINVAL, NULL, "unknown task %d", (int)task);
    if (task == TY_TASK_LANGUAGE_MODELING && ndim != 1)
        return ty_fail(err, TY_EINVAL, NULL,
                       "a language model's input is one window of tokens, "
                       "not %u dimensions",
                       ndim);
    return TY_OK;
}

/* A language model ends in (T, vocabulary) logits: an lm_head. */
static ty_status check_lm_output(const nn_arch *arch, ty_err *err)
{
    const nn_shape *o = &arch->output;
    if (o->seq && o->ndim == 2 && o->d[0] == arch->input.d[0] &&
        o->d[1] == arch->num_outputs)
        return TY_OK;
    char shape[96];
    nn_shape_format(o, shape, sizeof shape);
    return ty_fail(err, TY_EINVAL, "model.layers",
                   "the last layer outputs %s but a language model of this "
                   "dataset must give [%u, %u] (a score for each of the %u "
                   "tokens of the vocabulary at each of the %u positions): "
                   "end the model with {\"type\": \"lm_head\"}",
                   shape, arch->input.d[0], arch->num_outputs,
                   arch->num_outputs, arch->input.d[0]);
}

static ty_status check_final_size(const nn_arch *arch, uint64_t out,
                                  ty_err *err)
{
    if (arch->task == TY_TASK_LANGUAGE_MODELING)
        return check_lm_output(arch, err);
    if (arch->loss.kind == NN_LOSS_BINARY_CROSS_ENTROPY) {
        /* One logit, whatever the class count says. */
        if (out == 1)
            return TY_OK;
        int last = -1;
        for (uint32_t i = 0; i < arch->n_layers; i++)
            if (arch->layers[i].type == NN_LAYER_DENSE)
                last = (int)i;
        char field[64] = "model.layers";
        if (last >= 0)
            snprintf(field, sizeof field, "model.layers[%d].units", last);
        return ty_fail(err, TY_EINVAL, field,
                       "the last layer outputs %llu values but the "
                       "binary_cross_entropy loss needs 1 (the logit of "
                       "class 1); %s",
                       (unsigned long long)out,
                       last >= 0 ? "make the last dense layer's units 1"
                                 : "end the model with a dense layer of 1 "
                                   "unit");
    }
    if (out == arch->num_outputs)
        return TY_OK;
    int last_dense = -1;
    for (uint32_t i = 0; i < arch->n_layers; i++)
        if (arch->layers[i].type == NN_LAYER_DENSE)
            last_dense = (int)i;
    const char *what =
        arch->task == TY_TASK_CLASSIFICATION
            ? (arch->num_outputs == 1 ? "class" : "classes")
            : (arch->num_outputs == 1 ? "target value" : "target values");
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

/* Parses and plans the layer list `layers` (at JSON path `path`) for inputs
 * of shape in into arch (layers, counts, sizes); appends each normalized
 * layer to norm_layers. */
static ty_status build_layers(const json_t *layers, const char *path,
                              const nn_shape *in, uint32_t depth,
                              const nn_backend *be, nn_arch *arch,
                              json_t *norm_layers, ty_err *err)
{
    char kinds_list[512];
    ty_status st;
    if (!json_is_array(layers))
        return ty_fail(err, TY_EINVAL, path,
                       "%s must be an array of layer objects", path);
    size_t n = json_array_size(layers);
    if (n == 0)
        return ty_fail(err, TY_EINVAL, path, "%s must have at least one layer",
                       path);
    if (n > NN_MAX_LAYERS)
        return ty_fail(err, TY_EINVAL, path,
                       "%s has %zu layers; the limit is %d", path, n,
                       NN_MAX_LAYERS);
    if (depth > NN_MAX_DEPTH)
        return ty_fail(err, TY_EINVAL, path,
                       "residual blocks nest more than %d deep", NN_MAX_DEPTH);
    arch->layers = calloc(n, sizeof *arch->layers);
    if (!arch->layers)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory parsing the model");
    arch->n_layers = (uint32_t)n;
    arch->depth = depth;
    arch->be = be;
    arch->input = *in;
    arch->first_param_layer = arch->n_layers;
    arch->max_numel = nn_shape_numel(in);
    nn_layer_kind_list(kinds_list, sizeof kinds_list);

    nn_shape cur = *in;
    for (size_t i = 0; i < n; i++) {
        const json_t *obj = json_array_get(layers, i);
        nn_layer *l = &arch->layers[i];
        char lpath[128];
        tyjson_path_index(lpath, sizeof lpath, path, i);
        if (!json_is_object(obj))
            return ty_fail(err, TY_EINVAL, lpath,
                           "layer %zu must be an object such as {\"type\": "
                           "\"relu\"}",
                           i);
        const json_t *type = json_object_get(obj, "type");
        if (!json_is_string(type)) {
            st = ty_fail(err, TY_EINVAL, "type",
                         "type is required and must be a string, one of: %s",
                         kinds_list);
            return layer_fail(err, st, lpath, i, NULL);
        }
        const char *tname = json_string_value(type);
        l->kind = nn_layer_kind_find(tname, &l->type);
        if (!l->kind) {
            st = ty_fail(err, TY_EINVAL, "type",
                         "unknown type '%.64s'; known types: %s", tname,
                         kinds_list);
            return layer_fail(err, st, lpath, i, NULL);
        }
        l->index = (uint32_t)i;
        l->be = be;
        l->vocab = arch->vocab;
        l->in = cur;
        if ((st = tyjson_check_keys(obj, l->kind->keys, "", err)) != TY_OK)
            return layer_fail(err, st, lpath, i, tname);
        json_t *norm = json_object();
        if (!norm || json_array_append_new(norm_layers, norm) != 0)
            return ty_fail(err, TY_ENOMEM, NULL,
                           "out of memory parsing the model");
        json_object_set_new(norm, "type", json_string(l->kind->name));
        snprintf(l->path, sizeof l->path, "%s", lpath);
        l->build_seq = nn_arch_build_seq;
        if (l->kind->parse &&
            (st = l->kind->parse(l, obj, norm, err)) != TY_OK) {
            /* A residual block's inner layers report their full path. */
            if (err && !strncmp(err->field, lpath, strlen(lpath)) &&
                err->field[strlen(lpath)] == '.')
                return st;
            return layer_fail(err, st, lpath, i, tname);
        }
        if ((st = l->kind->plan(l, err)) != TY_OK)
            return layer_fail(err, st, lpath, i, tname);
        if (l->n_tensors) {
            l->param_count = l->buffer_count = 0;
            for (uint32_t t = 0; t < l->n_tensors; t++) {
                if (l->tensors[t].buffer)
                    l->buffer_count += l->tensors[t].numel;
                else
                    l->param_count += l->tensors[t].numel;
            }
        }
        l->param_offset = arch->param_count;
        l->buffer_offset = arch->buffer_count;
        arch->param_count += l->param_count;
        arch->buffer_count += l->buffer_count;
        arch->scratch_per_example += l->scratch_per_example;
        arch->scratch_fixed += l->scratch_fixed;
        if (l->work_per_thread > arch->max_work)
            arch->max_work = l->work_per_thread;
        if (l->param_count && arch->first_param_layer == arch->n_layers)
            arch->first_param_layer = (uint32_t)i;
        cur = l->out;
        if (nn_shape_numel(&cur) > arch->max_numel)
            arch->max_numel = nn_shape_numel(&cur);
    }
    arch->output = cur;
    return TY_OK;
}

ty_status nn_arch_build_seq(const json_t *layers, const char *path,
                            const nn_shape *in, uint32_t depth,
                            const nn_backend *be, nn_arch *sub, json_t **norm,
                            ty_err *err)
{
    memset(sub, 0, sizeof *sub);
    *norm = json_array();
    if (!*norm)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory parsing the model");
    ty_status st = build_layers(layers, path, in, depth, be, sub, *norm, err);
    if (st != TY_OK) {
        json_decref(*norm);
        *norm = NULL;
        nn_arch_free(sub);
    }
    return st;
}

/* Appends the tensors of sequence a, named prefix + "i." + suffix, whose
 * parameters start at state offset pbase and buffers at bbase. */
static void collect_tensors(nn_arch *top, const nn_arch *a, const char *prefix,
                            uint64_t pbase, uint64_t bbase, int count_only)
{
    for (uint32_t i = 0; i < a->n_layers; i++) {
        const nn_layer *l = &a->layers[i];
        for (uint32_t t = 0; t < l->n_tensors; t++) {
            const nn_tensor_desc *d = &l->tensors[t];
            if (!count_only) {
                nn_named_tensor *nt = &top->tensors[top->n_tensors];
                snprintf(nt->name, sizeof nt->name, "%s%u.%s", prefix, i,
                         d->suffix);
                nt->desc = d;
                nt->offset = d->buffer ? bbase + l->buffer_offset + d->offset
                                       : pbase + l->param_offset + d->offset;
            }
            top->n_tensors++;
        }
        char sub[NN_TENSOR_NAME_LEN];
        if (l->body) {
            snprintf(sub, sizeof sub, "%s%u.body.", prefix, i);
            collect_tensors(top, l->body, sub, pbase + l->param_offset,
                            bbase + l->buffer_offset, count_only);
        }
        if (l->proj) {
            snprintf(sub, sizeof sub, "%s%u.projection.", prefix, i);
            collect_tensors(top, l->proj, sub,
                            pbase + l->param_offset +
                                (l->body ? l->body->param_count : 0),
                            bbase + l->buffer_offset +
                                (l->body ? l->body->buffer_count : 0),
                            count_only);
        }
    }
}

ty_status nn_arch_build(const json_t *model, const uint32_t *input_shape,
                        uint32_t ndim, uint32_t num_outputs, ty_task task,
                        nn_arch *arch, json_t **normalized, ty_err *err)
{
    return nn_arch_build_for_loss(model, input_shape, ndim, num_outputs, task,
                                  NULL, arch, normalized, err);
}

ty_status nn_arch_build_for_loss(const json_t *model,
                                 const uint32_t *input_shape, uint32_t ndim,
                                 uint32_t num_outputs, ty_task task,
                                 const nn_loss_spec *loss, nn_arch *arch,
                                 json_t **normalized, ty_err *err)
{
    return nn_arch_build_on(model, input_shape, ndim, num_outputs, task, loss,
                            NULL, arch, normalized, err);
}

ty_status nn_arch_build_on(const json_t *model, const uint32_t *input_shape,
                           uint32_t ndim, uint32_t num_outputs, ty_task task,
                           const nn_loss_spec *loss, const nn_backend *be,
                           nn_arch *arch, json_t **normalized, ty_err *err)
{
    static const char *const model_keys[] = {"layers", NULL};
    json_t *norm_layers = NULL;
    ty_status st;
    nn_loss_spec resolved = loss ? *loss : (nn_loss_spec){.kind = NN_LOSS_AUTO};

    memset(arch, 0, sizeof *arch);
    if (normalized)
        *normalized = NULL;
    if ((st = check_io(input_shape, ndim, num_outputs, task, err)) != TY_OK ||
        (st = nn_loss_resolve(&resolved, task, num_outputs, err)) != TY_OK)
        return st;
    if ((st = tyjson_check_keys(model, model_keys, "model", err)) != TY_OK)
        return st;
    const json_t *layers = json_object_get(model, "layers");
    if (!layers)
        return ty_fail(err, TY_EINVAL, "model.layers",
                       "model.layers is required: a list such as "
                       "[{\"type\": \"flatten\"}, {\"type\": \"dense\", "
                       "\"units\": 10}]");
    norm_layers = json_array();
    if (!norm_layers)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory parsing the model");
    nn_shape in = {.ndim = ndim};
    memcpy(in.d, input_shape, ndim * sizeof *input_shape);
    arch->vocab = task == TY_TASK_LANGUAGE_MODELING ? num_outputs : 0;
    if ((st = build_layers(layers, "model.layers", &in, 0,
                           be ? be : &nn_backend_cpu, arch, norm_layers,
                           err)) != TY_OK)
        goto fail;
    arch->num_outputs = num_outputs;
    arch->task = task;
    arch->loss = resolved;
    if ((st = nn_seq_tie(arch, err)) != TY_OK)
        goto fail;
    if ((st = check_final_size(arch, nn_shape_numel(&arch->output), err)) !=
        TY_OK)
        goto fail;
    if (arch->param_count + arch->buffer_count > NN_MAX_PARAMS) {
        st = ty_fail(err, TY_EINVAL, "model.layers",
                     "the model has %llu parameters; the limit is %llu",
                     (unsigned long long)arch->param_count,
                     (unsigned long long)NN_MAX_PARAMS);
        goto fail;
    }
    collect_tensors(arch, arch, "", 0, arch->param_count, 1);
    arch->tensors =
        calloc(arch->n_tensors ? arch->n_tensors : 1, sizeof *arch->tensors);
    if (!arch->tensors) {
        st = ty_fail(err, TY_ENOMEM, NULL, "out of memory parsing the model");
        goto fail;
    }
    arch->n_tensors = 0;
    collect_tensors(arch, arch, "", 0, arch->param_count, 0);
    if (normalized) {
        *normalized = json_object();
        if (!*normalized ||
            json_object_set_new(*normalized, "layers", norm_layers) != 0) {
            norm_layers = NULL; /* set_new steals even on failure */
            st = ty_fail(err, TY_ENOMEM, NULL,
                         "out of memory parsing the model");
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
    return nn_spec_validate_for_loss(model, input_shape, ndim, num_outputs,
                                     task, NULL, normalized, param_count, err);
}

ty_status nn_spec_validate_for_loss(const json_t *model,
                                    const uint32_t *input_shape, uint32_t ndim,
                                    uint32_t num_outputs, ty_task task,
                                    const nn_loss_spec *loss,
                                    json_t **normalized, uint64_t *param_count,
                                    ty_err *err)
{
    nn_arch arch;
    ty_status st = nn_arch_build_for_loss(model, input_shape, ndim, num_outputs,
                                          task, loss, &arch, normalized, err);
    if (st != TY_OK)
        return st;
    if (param_count)
        *param_count = arch.param_count;
    nn_arch_free(&arch);
    return TY_OK;
}

void nn_arch_init_params(const nn_arch *arch, float *state, ty_rng *rng)
{
    nn_seq_init(arch, state, state + arch->param_count, rng);
}
