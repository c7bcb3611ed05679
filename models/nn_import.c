/*
 * nn_import.c - turning a safetensors file made elsewhere (a PyTorch state
 * dict, or a trainyard model file) into a trainyard model file.
 *
 * The stored file is always rewritten, never the upload itself: its
 * metadata comes from the import request (or, when there is none, from the
 * upload's own trainyard.* keys), its tensors are the upload's in file order
 * minus batchnorm's num_batches_tracked counters (PyTorch saves them,
 * trainyard neither keeps nor needs them). Every other check — a missing,
 * extra or misshapen tensor, a dtype other than F32, NaN — is nn_net_load's,
 * run on the rewritten file, so an imported model passes exactly the checks
 * a trained one does.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/jsonutil.h"
#include "models/nn_internal.h"
#include "models/safetensors.h"

#define FIELD "metadata"

static int is_counter(const char *name)
{
    static const char suffix[] = "num_batches_tracked";
    size_t len = strlen(name), n = sizeof suffix - 1;
    return len >= n && !strcmp(name + len - n, suffix) &&
           (len == n || name[len - n - 1] == '.');
}

static ty_status parse_shape(const json_t *a, nn_shape *s, ty_err *err)
{
    uint64_t numel = 1;
    if (!json_is_array(a) || json_array_size(a) < 1 ||
        json_array_size(a) > NN_MAX_DIMS)
        return ty_fail(err, TY_EINVAL, FIELD ".input_shape",
                       "input_shape must be an array of 1 to %d sizes, such "
                       "as [4] for a table or [1, 28, 28] for images",
                       NN_MAX_DIMS);
    s->ndim = (uint32_t)json_array_size(a);
    for (uint32_t i = 0; i < s->ndim; i++) {
        const json_t *v = json_array_get(a, i);
        if (!json_is_integer(v) || json_integer_value(v) < 1 ||
            json_integer_value(v) > TY_DS_MAX_FEATURES)
            return ty_fail(err, TY_EINVAL, FIELD ".input_shape",
                           "input_shape[%u] must be an integer from 1 to %u", i,
                           TY_DS_MAX_FEATURES);
        s->d[i] = (uint32_t)json_integer_value(v);
        numel *= s->d[i];
        if (numel > TY_DS_MAX_FEATURES)
            return ty_fail(err, TY_EINVAL, FIELD ".input_shape",
                           "input_shape holds more than %u values per example",
                           TY_DS_MAX_FEATURES);
    }
    return TY_OK;
}

static ty_status parse_classes(const json_t *c, ty_err *err)
{
    if (!json_is_array(c) || json_array_size(c) < 1 ||
        json_array_size(c) > TY_DS_MAX_CLASSES)
        return ty_fail(err, TY_EINVAL, FIELD ".classes",
                       "classes must be an array of 1 to %u class labels "
                       "(strings or integers), in output order",
                       TY_DS_MAX_CLASSES);
    for (size_t i = 0; i < json_array_size(c); i++) {
        const json_t *v = json_array_get(c, i);
        if (!json_is_string(v) && !json_is_integer(v))
            return ty_fail(err, TY_EINVAL, FIELD ".classes",
                           "classes[%zu] must be a string or an integer", i);
        for (size_t j = 0; j < i; j++)
            if (json_equal(v, json_array_get(c, j)))
                return ty_fail(err, TY_EINVAL, FIELD ".classes",
                               "classes[%zu] repeats classes[%zu]", i, j);
    }
    return TY_OK;
}

/* The model file's __metadata__ from the import request's metadata object:
 * a new object of strings into *out. TY_EINVAL naming the field. */
static ty_status request_metadata(const json_t *m, json_t **out, ty_err *err)
{
    static const char *const keys[] = {"spec",        "task",    "input_shape",
                                       "num_outputs", "classes", "preprocess",
                                       NULL};
    json_t *normalized = NULL;
    nn_preproc pp = {0};
    const char *task_s = NULL;
    int64_t num_outputs = 0;
    nn_shape shape = {0};
    uint64_t params = 0;
    ty_status st = tyjson_check_keys(m, keys, FIELD, err);
    if (st != TY_OK)
        return st;
    if ((st = tyjson_get_string(m, "task", FIELD, 1, 32, NULL, &task_s, err)) !=
        TY_OK)
        return st;
    int task = nn_task_from_str(task_s);
    if (task < 0)
        return ty_fail(err, TY_EINVAL, FIELD ".task",
                       "task must be classification or regression, not '%s'",
                       task_s);
    if ((st = parse_shape(json_object_get(m, "input_shape"), &shape, err)) !=
        TY_OK)
        return st;
    const json_t *classes = json_object_get(m, "classes");
    if (json_is_null(classes))
        classes = NULL;
    if (classes && task != TY_TASK_CLASSIFICATION)
        return ty_fail(err, TY_EINVAL, FIELD ".classes",
                       "classes apply to classification models only");
    if (classes && (st = parse_classes(classes, err)) != TY_OK)
        return st;
    if (!classes && !json_object_get(m, "num_outputs"))
        return ty_fail(err, TY_EINVAL, FIELD ".num_outputs",
                       "num_outputs is required (or, for classification, "
                       "classes, which also names the outputs)");
    if ((st = tyjson_get_int(m, "num_outputs", FIELD, 0, 1, TY_DS_MAX_CLASSES,
                             0, &num_outputs, err)) != TY_OK)
        return st;
    if (classes && num_outputs &&
        (size_t)num_outputs != json_array_size(classes))
        return ty_fail(err, TY_EINVAL, FIELD ".num_outputs",
                       "num_outputs is %lld but classes names %zu classes",
                       (long long)num_outputs, json_array_size(classes));
    if (classes)
        num_outputs = (int64_t)json_array_size(classes);
    const json_t *spec = json_object_get(m, "spec");
    if (!spec)
        return ty_fail(err, TY_EINVAL, FIELD ".spec",
                       "spec is required: the model's {\"layers\": [...]}, as "
                       "a training job's \"model\"");
    st = nn_spec_validate(spec, shape.d, shape.ndim, (uint32_t)num_outputs,
                          (ty_task)task, &normalized, &params, err);
    if (st != TY_OK) {
        /* "model.layers[2].units" -> "metadata.spec.layers[2].units" */
        char field[sizeof err->field];
        if (!strncmp(err->field, "model", 5))
            snprintf(field, sizeof field, FIELD ".spec%.100s", err->field + 5);
        else
            snprintf(field, sizeof field, FIELD ".spec");
        memcpy(err->field, field, sizeof field);
        return st;
    }
    const json_t *pre = json_object_get(m, "preprocess");
    json_t *none = json_pack("{s:s}", "kind", "none");
    st = nn_preproc_from_json(&pp, pre ? pre : none, nn_shape_numel(&shape),
                              err);
    json_decref(none);
    if (st != TY_OK) {
        char why[sizeof err->msg];
        memcpy(why, err->msg, sizeof why);
        json_decref(normalized);
        return ty_fail(err, st == TY_ENOMEM ? st : TY_EINVAL,
                       FIELD ".preprocess",
                       "preprocess must be {\"kind\": \"none\"}, {\"kind\": "
                       "\"scale\", \"factor\": f} or {\"kind\": "
                       "\"standardize\", \"mean\": [...], \"std\": [...]} with "
                       "one value per input feature: %.300s",
                       why);
    }
    *out = nn_model_metadata(normalized, (ty_task)task, &shape,
                             (uint32_t)num_outputs, classes, &pp);
    json_decref(normalized);
    nn_preproc_free(&pp);
    if (!*out)
        return ty_fail(err, TY_ENOMEM, NULL,
                       "out of memory importing the model");
    return TY_OK;
}

/* Whether name is one of t's n tensors. */
static int file_has(const st_out_tensor *t, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(t[i].name, name))
            return 1;
    return 0;
}

/* Whether the architecture has a tensor called name. */
static int arch_has(const nn_arch *a, const char *name)
{
    for (uint32_t i = 0; i < a->n_tensors; i++)
        if (!strcmp(a->tensors[i].name, name))
            return 1;
    return 0;
}

/* How many names of each list a message shows, and how much of each: the
 * whole message fits ty_err's 512 characters with the hint at its end. */
#define NAMES_SHOWN 3
#define NAME_CHARS 28

/* A list of names, "a, b, c, ..." past NAMES_SHOWN. */
typedef struct {
    char text[NAMES_SHOWN * (NAME_CHARS + 2) + 8];
    size_t len, count;
} name_list;

static void name_list_add(name_list *l, const char *name)
{
    if (l->count++ >= NAMES_SHOWN) {
        if (l->count == NAMES_SHOWN + 1)
            name = "...";
        else
            return;
    }
    size_t size = sizeof l->text;
    int w = snprintf(l->text + l->len, l->len < size ? size - l->len : 0,
                     "%s%.*s", l->len ? ", " : "", NAME_CHARS, name);
    l->len += w > 0 ? (size_t)w : 0;
}

/* The architecture the rewritten file's metadata (strings, as stored)
 * describes. TY_OK with *arch built; anything else leaves nothing to free
 * (the caller then keeps nn_net_load's own message). */
static ty_status meta_arch(const json_t *fm, nn_arch *arch)
{
    ty_err ignored = {0};
    const char *task_s =
        json_string_value(json_object_get(fm, "trainyard.task"));
    const char *outs_s =
        json_string_value(json_object_get(fm, "trainyard.num_outputs"));
    const char *spec_s =
        json_string_value(json_object_get(fm, "trainyard.spec"));
    const char *shape_s =
        json_string_value(json_object_get(fm, "trainyard.input_shape"));
    const char *loss_s =
        json_string_value(json_object_get(fm, "trainyard.loss"));
    int task = task_s ? nn_task_from_str(task_s) : -1;
    long outs = outs_s ? strtol(outs_s, NULL, 10) : 0;
    if (task < 0 || outs < 1 || outs > TY_DS_MAX_CLASSES || !spec_s || !shape_s)
        return TY_EFORMAT;
    json_t *spec = json_loads(spec_s, 0, NULL);
    json_t *shape = json_loads(shape_s, 0, NULL);
    json_t *loss_j = loss_s ? json_loads(loss_s, 0, NULL) : NULL;
    nn_shape in = {0};
    nn_loss_spec loss;
    ty_status st = TY_EFORMAT;
    if (spec && (!loss_s || loss_j) &&
        parse_shape(shape, &in, &ignored) == TY_OK &&
        nn_loss_from_json(&loss, loss_j, (ty_task)task, (uint32_t)outs,
                          &ignored) == TY_OK)
        st = nn_arch_build_for_loss(spec, in.d, in.ndim, (uint32_t)outs,
                                    (ty_task)task, &loss, arch, NULL, &ignored);
    json_decref(spec);
    json_decref(shape);
    json_decref(loss_j);
    return st;
}

/* After nn_net_load refused the rewritten file: when its tensor names are
 * not the ones the spec gives (a PyTorch module's own, "fc1.weight", where
 * the spec's nn.Sequential has "0.weight"), replaces the message with what
 * was expected and what came (the first few of each, counted) and where the
 * converter is. A file whose names fit keeps nn_net_load's message (a
 * shape, a dtype, a NaN). */
static void explain_names(const json_t *file_meta, const st_out_tensor *t,
                          size_t n, ty_err *err)
{
    nn_arch arch;
    if (meta_arch(file_meta, &arch) != TY_OK)
        return;
    name_list want = {0}, missing = {0}, unexpected = {0};
    for (uint32_t i = 0; i < arch.n_tensors; i++) {
        name_list_add(&want, arch.tensors[i].name);
        if (!file_has(t, n, arch.tensors[i].name))
            name_list_add(&missing, arch.tensors[i].name);
    }
    for (size_t i = 0; i < n; i++)
        if (!arch_has(&arch, t[i].name))
            name_list_add(&unexpected, t[i].name);
    nn_arch_free(&arch);
    if (!missing.count && !unexpected.count)
        return;
    /* The hint is never clipped: the lists give way to it when names are
     * long. */
    static const char hint[] =
        ". Names are those of the spec's nn.Sequential (\"0.weight\" is "
        "layer 0's): tools/trainyard_torch.py convert renames a PyTorch "
        "module's (docs/models.md)";
    char got[sizeof unexpected.text + 48], lists[sizeof err->msg - sizeof hint];
    if (unexpected.count)
        snprintf(got, sizeof got, "%zu the spec does not name (%s)",
                 unexpected.count, unexpected.text);
    else
        snprintf(got, sizeof got, "no others");
    if (missing.count == want.count)
        snprintf(lists, sizeof lists,
                 "the weights' tensor names are not the spec's: the spec "
                 "expects %zu tensors (%s), the file has none of them and %s",
                 want.count, want.text, got);
    else
        snprintf(lists, sizeof lists,
                 "the weights' tensor names are not the spec's: the spec "
                 "expects %zu tensors (%s), %zu of them missing (%s); the "
                 "file has %s",
                 want.count, want.text, missing.count, missing.text, got);
    ty_fail(err, TY_EFORMAT, NULL, "%s%s", lists, hint);
}

ty_status nn_model_import(const char *in_path, const json_t *meta,
                          const char *out_path, nn_net **net, ty_err *err)
{
    st_file f = {0};
    json_t *file_meta = NULL;
    st_out_tensor *t = NULL;
    *net = NULL;
    ty_status st;
    if (meta && !json_is_object(meta))
        return ty_fail(err, TY_EINVAL, FIELD,
                       "metadata must be a JSON object with spec, task, "
                       "input_shape and classes or num_outputs");
    if (meta && (st = request_metadata(meta, &file_meta, err)) != TY_OK)
        return st;
    if ((st = st_open(in_path, &f, err)) != TY_OK) {
        ty_err_prefix(err, "the weights are not a valid safetensors file");
        goto done;
    }
    if (!meta) {
        if (!f.meta || !st_meta(&f, "trainyard.format")) {
            st = ty_fail(err, TY_EINVAL, FIELD,
                         "the weights file has no trainyard metadata: send a "
                         "metadata part with spec, task, input_shape and "
                         "classes or num_outputs");
            goto done;
        }
        file_meta = json_deep_copy(f.meta);
        if (!file_meta) {
            st = ty_fail(err, TY_ENOMEM, NULL,
                         "out of memory importing the model");
            goto done;
        }
    }
    t = calloc(f.count ? f.count : 1, sizeof *t);
    if (!t) {
        st = ty_fail(err, TY_ENOMEM, NULL, "out of memory importing the model");
        goto done;
    }
    size_t n = 0;
    for (size_t i = 0; i < f.count; i++) {
        const st_tensor *s = &f.tensors[i];
        if (is_counter(s->name))
            continue;
        t[n] = (st_out_tensor){.name = s->name,
                               .dtype = s->dtype,
                               .ndim = s->ndim,
                               .data = s->data};
        memcpy(t[n].shape, s->shape, sizeof t[n].shape);
        n++;
    }
    if ((st = st_write(out_path, file_meta, t, n, err)) != TY_OK)
        goto done;
    st = nn_net_load(out_path, net, err);
    if (st == TY_EFORMAT || st == TY_ENOTFOUND) {
        st = TY_EFORMAT;
        explain_names(file_meta, t, n, err);
    }
done:
    free(t);
    st_close(&f);
    json_decref(file_meta);
    return st;
}
