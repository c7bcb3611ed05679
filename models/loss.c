/*
 * loss.c - the training losses (see nn.h for their PyTorch definitions):
 * choosing one for a task, computing it and its gradient through the
 * backend's kernels, turning the network's output into predictions, and
 * the "trainyard.loss" form a model file stores.
 *
 * Invariants: an architecture's loss is resolved (never NN_LOSS_AUTO) and
 * fields that do not apply to its kind are 0, so two specs of the same loss
 * compare equal (checkpoint identities rely on it). The default losses
 * (cross_entropy without smoothing, mse) run the kernels they always ran,
 * bit for bit.
 */
#include <string.h>

#include "models/nn_internal.h"

static const char *const loss_names[] = {
    [NN_LOSS_AUTO] = "auto",
    [NN_LOSS_CROSS_ENTROPY] = "cross_entropy",
    [NN_LOSS_BINARY_CROSS_ENTROPY] = "binary_cross_entropy",
    [NN_LOSS_MSE] = "mse",
    [NN_LOSS_HUBER] = "huber",
};

const char *nn_loss_name(nn_loss_kind kind)
{
    return (unsigned)kind < TY_ARRAY_LEN(loss_names) ? loss_names[kind] : "?";
}

int nn_loss_from_name(const char *s)
{
    for (size_t i = 0; s && i < TY_ARRAY_LEN(loss_names); i++)
        if (!strcmp(s, loss_names[i]))
            return (int)i;
    return -1;
}

static int is_classification_loss(nn_loss_kind k)
{
    return k == NN_LOSS_CROSS_ENTROPY || k == NN_LOSS_BINARY_CROSS_ENTROPY;
}

ty_status nn_loss_resolve(nn_loss_spec *loss, ty_task task,
                          uint32_t num_outputs, ty_err *err)
{
    nn_loss_spec l = *loss;
    const int cls = task == TY_TASK_CLASSIFICATION;
    if ((unsigned)l.kind >= TY_ARRAY_LEN(loss_names))
        return ty_fail(err, TY_EINVAL, "hyperparameters.loss",
                       "hyperparameters.loss is not a known loss");
    if (task == TY_TASK_LANGUAGE_MODELING) {
        /* The next token's cross-entropy at every position, nothing else. */
        if (l.kind != NN_LOSS_AUTO && l.kind != NN_LOSS_CROSS_ENTROPY)
            return ty_fail(err, TY_EINVAL, "hyperparameters.loss",
                           "hyperparameters.loss \"%s\" does not apply to a "
                           "language model, which learns the next token with "
                           "\"cross_entropy\"",
                           nn_loss_name(l.kind));
        if (l.label_smoothing != 0.0)
            return ty_fail(err, TY_EINVAL, "hyperparameters.label_smoothing",
                           "hyperparameters.label_smoothing is not supported "
                           "for language models; leave it out");
        *loss = (nn_loss_spec){.kind = NN_LOSS_CROSS_ENTROPY};
        return TY_OK;
    }
    if (l.kind == NN_LOSS_AUTO) {
        if (!cls && l.label_smoothing != 0.0)
            return ty_fail(err, TY_EINVAL, "hyperparameters.label_smoothing",
                           "hyperparameters.label_smoothing applies to the "
                           "cross_entropy loss; this dataset is for "
                           "regression");
        l.kind = cls ? NN_LOSS_CROSS_ENTROPY : NN_LOSS_MSE;
    }
    if (cls && !is_classification_loss(l.kind))
        return ty_fail(err, TY_EINVAL, "hyperparameters.loss",
                       "hyperparameters.loss \"%s\" is for regression; this "
                       "dataset is for classification: use \"cross_entropy\" "
                       "or, with 2 classes, \"binary_cross_entropy\"",
                       nn_loss_name(l.kind));
    if (!cls && is_classification_loss(l.kind))
        return ty_fail(err, TY_EINVAL, "hyperparameters.loss",
                       "hyperparameters.loss \"%s\" is for classification; "
                       "this dataset is for regression: use \"mse\" or "
                       "\"huber\"",
                       nn_loss_name(l.kind));
    if (l.kind == NN_LOSS_BINARY_CROSS_ENTROPY && num_outputs != 2)
        return ty_fail(err, TY_EINVAL, "hyperparameters.loss",
                       "hyperparameters.loss \"binary_cross_entropy\" needs a "
                       "dataset with exactly 2 classes; this one has %u",
                       num_outputs);
    if (l.kind == NN_LOSS_CROSS_ENTROPY &&
        !(l.label_smoothing >= 0.0 && l.label_smoothing < 1.0))
        return ty_fail(err, TY_EINVAL, "hyperparameters.label_smoothing",
                       "hyperparameters.label_smoothing must be at least 0 "
                       "and below 1, got %g",
                       l.label_smoothing);
    if (l.kind == NN_LOSS_HUBER &&
        !(l.huber_delta > 0.0 && l.huber_delta <= 1e9))
        return ty_fail(err, TY_EINVAL, "hyperparameters.huber_delta",
                       "hyperparameters.huber_delta must be above 0, got %g",
                       l.huber_delta);
    if (l.kind != NN_LOSS_CROSS_ENTROPY && l.label_smoothing != 0.0)
        return ty_fail(err, TY_EINVAL, "hyperparameters.label_smoothing",
                       "hyperparameters.label_smoothing applies only to the "
                       "cross_entropy loss, not \"%s\"",
                       nn_loss_name(l.kind));
    if (l.kind != NN_LOSS_HUBER)
        l.huber_delta = 0.0;
    *loss = l;
    return TY_OK;
}

double nn_loss_compute(const nn_loss_spec *loss, const nn_backend *be,
                       const nn_exec *ex, float *dout, const float *out,
                       const int32_t *labels, const float *targets, uint32_t n,
                       uint32_t width, uint32_t *correct, float grad_scale)
{
    switch (loss->kind) {
        case NN_LOSS_CROSS_ENTROPY:
            if (loss->label_smoothing > 0.0)
                return be->softmax_xent_smooth(
                    ex, dout, correct, out, labels, n, width,
                    (float)loss->label_smoothing, grad_scale);
            return be->softmax_xent(ex, dout, NULL, correct, out, labels, n,
                                    width, grad_scale);
        case NN_LOSS_BINARY_CROSS_ENTROPY:
            return be->bce_logits(ex, dout, NULL, correct, out, labels, n,
                                  grad_scale);
        case NN_LOSS_HUBER:
            if (correct)
                *correct = 0;
            return be->huber(ex, dout, out, targets, (size_t)n * width,
                             (float)loss->huber_delta, grad_scale);
        default: /* NN_LOSS_MSE (and AUTO, never stored in an arch) */
            if (correct)
                *correct = 0;
            return be->mse(ex, dout, out, targets, (size_t)n * width,
                           grad_scale);
    }
}

/* A language model's loss: the mean cross-entropy over every position of
 * the n windows (targets (n, T) ids as floats; -1 or any id outside the
 * vocabulary is not counted), times n, as the other losses give a sum of
 * per-example losses: returned, or added to ws->ex's acc when it has one
 * (a device's training step, which then never waits). The gradient is the
 * mean's over grad_rows windows (accumulation: n of them in this
 * minibatch). */
static double lm_loss(const nn_arch *arch, nn_workspace *ws, uint32_t n,
                      const float *values, uint32_t *correct,
                      uint32_t grad_rows)
{
    const uint32_t t = nn_arch_target_width(arch), v = arch->num_outputs;
    const size_t rows = (size_t)n * t;
    float *dout = grad_rows ? ws->grad[0] : NULL;
    float scale =
        grad_rows ? (float)n / (float)grad_rows * ws->loss_scale : 0.0f;
    arch->be->to_ids(ws->ex, ws->ids, values, rows, v, -1);
    if (correct)
        *correct = 0;
    return arch->be->xent_ignore(ws->ex, dout, NULL, ws->act[arch->n_layers],
                                 ws->ids, (uint32_t)rows, v, -1, scale,
                                 (double)n);
}

double nn_loss_scaled(const nn_arch *arch, nn_workspace *ws, uint32_t n,
                      const int32_t *labels, const float *values,
                      uint32_t *correct, uint32_t grad_rows)
{
    if (arch->task == TY_TASK_LANGUAGE_MODELING)
        return lm_loss(arch, ws, n, values, correct, grad_rows);
    const uint32_t width = (uint32_t)nn_shape_numel(&arch->output);
    float *dout = grad_rows ? ws->grad[0] : NULL;
    float scale = 0.0f;
    if (grad_rows)
        scale = is_classification_loss(arch->loss.kind)
                    ? 1.0f / (float)grad_rows
                    : 1.0f / (float)((size_t)grad_rows * width);
    /* fp16's dynamic loss scale (1 otherwise: the product is exact). */
    scale *= ws->loss_scale;
    return nn_loss_compute(&arch->loss, arch->be, ws->ex, dout,
                           ws->act[arch->n_layers], labels, values, n, width,
                           correct, scale);
}

double nn_loss(const nn_arch *arch, nn_workspace *ws, uint32_t n,
               const int32_t *labels, const float *values, uint32_t *correct,
               int want_grad)
{
    return nn_loss_scaled(arch, ws, n, labels, values, correct,
                          want_grad ? n : 0);
}

void nn_loss_output(const nn_loss_spec *loss, const nn_backend *be,
                    const nn_exec *ex, float *dst, const float *out, uint32_t n,
                    uint32_t width)
{
    switch (loss->kind) {
        case NN_LOSS_CROSS_ENTROPY:
            be->softmax_xent(ex, NULL, dst, NULL, out, NULL, n, width, 0.0f);
            break;
        case NN_LOSS_BINARY_CROSS_ENTROPY:
            be->bce_logits(ex, NULL, dst, NULL, out, NULL, n, 0.0f);
            break;
        default:
            if (dst != out)
                nn_copy_floats(be, ex, dst, out, (size_t)n * width);
    }
}

json_t *nn_loss_to_json(const nn_loss_spec *loss)
{
    json_t *j = json_pack("{s:s}", "kind", nn_loss_name(loss->kind));
    int bad = !j;
    if (!bad && loss->kind == NN_LOSS_CROSS_ENTROPY)
        bad = json_object_set_new(j, "label_smoothing",
                                  json_real(loss->label_smoothing));
    if (!bad && loss->kind == NN_LOSS_HUBER)
        bad =
            json_object_set_new(j, "huber_delta", json_real(loss->huber_delta));
    if (bad) {
        json_decref(j);
        return NULL;
    }
    return j;
}

ty_status nn_loss_from_json(nn_loss_spec *loss, const json_t *j, ty_task task,
                            uint32_t num_outputs, ty_err *err)
{
    nn_loss_spec l = {.kind = NN_LOSS_AUTO};
    if (j) {
        const char *key;
        json_t *v;
        int ok = json_is_object(j);
        int kind =
            nn_loss_from_name(json_string_value(json_object_get(j, "kind")));
        ok = ok && kind > NN_LOSS_AUTO;
        if (ok)
            json_object_foreach ((json_t *)j, key, v) {
                if (!strcmp(key, "kind"))
                    continue;
                if (!strcmp(key, "label_smoothing") && json_is_number(v))
                    l.label_smoothing = json_number_value(v);
                else if (!strcmp(key, "huber_delta") && json_is_number(v))
                    l.huber_delta = json_number_value(v);
                else
                    ok = 0;
            }
        if (!ok)
            return ty_fail(err, TY_EFORMAT, NULL,
                           "trainyard.loss must be {\"kind\": a loss name} "
                           "with label_smoothing or huber_delta where they "
                           "apply");
        l.kind = (nn_loss_kind)kind;
    }
    if (nn_loss_resolve(&l, task, num_outputs, err) != TY_OK) {
        if (err) {
            ty_err_prefix(err, "trainyard.loss does not fit the model");
            err->field[0] = '\0';
        }
        return TY_EFORMAT;
    }
    *loss = l;
    return TY_OK;
}
