/*
 * nn_net.c - networks: workspaces, forward and backward passes, the loss,
 * evaluation, prediction, and loading a trained model file. (The losses
 * themselves are in loss.c.)
 *
 * Memory: a network's parameters are one allocation (param_count floats); a
 * workspace's float buffers are one allocation sized from the architecture
 * and max_batch when it is created, so passes never allocate. A training
 * workspace keeps every layer's output (backward reads them) plus two
 * activation-gradient buffers used in turn; an inference workspace lets
 * activations alternate between two buffers. Layers that move no data
 * (flatten, and dropout outside training) share their input's buffer.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/nn_internal.h"
#include "models/safetensors.h"

#define ALIGN_FLOATS 16u /* 64-byte alignment of every region */

static uint64_t round_up(uint64_t n)
{
    return (n + ALIGN_FLOATS - 1) / ALIGN_FLOATS * ALIGN_FLOATS;
}

nn_workspace *nn_workspace_create_for(const nn_arch *arch, uint32_t max_batch,
                                      int training)
{
    return nn_workspace_create_on(arch, max_batch, training, NULL);
}

int nn_workspace_layout(const nn_arch *arch, uint32_t max_batch, int training,
                        int host_visible, nn_ws_layout *lay)
{
    memset(lay, 0, sizeof *lay);
    if (max_batch == 0)
        return -1;
    const uint64_t b = max_batch;
    const uint64_t big = round_up(b * arch->max_numel);
    uint64_t total = 0;
    lay->big = big;
    if (training) {
        lay->act[0] = total;
        total += round_up(b * nn_shape_numel(&arch->input));
        for (uint32_t i = 0; i < arch->n_layers; i++) {
            const nn_layer *l = &arch->layers[i];
            if (l->kind->alias) {
                lay->act[i + 1] = lay->act[i];
            } else {
                lay->act[i + 1] = total;
                total += round_up(b * nn_shape_numel(&l->out));
            }
            lay->scratch[i] = total;
            total += round_up(b * l->scratch_per_example + l->scratch_fixed);
        }
        lay->grad = total;
        total += 2 * big;
    } else {
        /* act[0] is region B; each layer writes the region it does not read.
         * Layers run one at a time, so they share one scratch region. */
        int which = 1;
        uint64_t scratch = 0;
        lay->act[0] = big;
        for (uint32_t i = 0; i < arch->n_layers; i++) {
            const nn_layer *l = &arch->layers[i];
            if (l->kind->alias || l->kind->identity_in_eval) {
                lay->act[i + 1] = lay->act[i];
            } else {
                which ^= 1;
                lay->act[i + 1] = which ? big : 0;
            }
            lay->scratch[i] = 2 * big;
            uint64_t need =
                round_up(b * l->scratch_per_example + l->scratch_fixed);
            if (need > scratch)
                scratch = need;
        }
        total = 2 * big + scratch;
    }
    lay->labels = total;
    total += round_up(b);
    lay->targets = total;
    total += round_up(b * nn_arch_target_width(arch));
    lay->ids = total;
    if (arch->task == TY_TASK_LANGUAGE_MODELING)
        total += round_up(b * nn_arch_target_width(arch));
    lay->lens = total;
    if (nn_arch_takes_tokens(arch))
        total += round_up(b);
    lay->out = total;
    const uint64_t out_w =
        nn_shape_numel(&arch->output) > 2 ? nn_shape_numel(&arch->output) : 2;
    if (!host_visible)
        total += round_up(b * out_w);
    lay->total = total;
    lay->work_per_thread = round_up(arch->max_work);
    return total > SIZE_MAX / sizeof(float) ? -1 : 0;
}

uint64_t nn_workspace_bytes(const nn_arch *arch, uint32_t max_batch,
                            int training, int threads, uint64_t *work_bytes)
{
    nn_ws_layout lay;
    nn_workspace_layout(arch, max_batch, training,
                        nn_backend_host_visible(arch->be), &lay);
    uint64_t work = lay.work_per_thread *
                    (uint64_t)(threads > 1 ? threads : 1) * sizeof(float);
    if (work_bytes)
        *work_bytes = work;
    return lay.total * sizeof(float);
}

nn_workspace *nn_workspace_create_on(const nn_arch *arch, uint32_t max_batch,
                                     int training, const nn_exec *base)
{
    nn_ws_layout lay;
    const nn_backend *be = arch->be;
    const int host = nn_backend_host_visible(be);
    if (nn_workspace_layout(arch, max_batch, training, host, &lay) != 0)
        return NULL;
    nn_workspace *ws = calloc(1, sizeof *ws);
    if (!ws)
        return NULL;
    ws->arch = arch;
    ws->be = be;
    ws->max_batch = max_batch;
    ws->training = training;
    /* The device context first: alloc needs it. The arena comes later. */
    ws->own = (nn_exec){.pool = base ? base->pool : NULL,
                        .device = base ? base->device : NULL,
                        .precision = base ? base->precision : NN_DT_F32};
    ws->ex = &ws->own;
    ws->loss_scale = 1.0f;
    const uint64_t b = max_batch;
    const uint64_t big = lay.big, total = lay.total;
    if (total > SIZE_MAX / sizeof(float))
        goto fail;
    ws->mem = be->alloc(ws->ex, (size_t)total * sizeof(float));
    if (!ws->mem)
        goto fail;
    ws->mem_bytes = (uint64_t)total * sizeof(float);
    for (uint32_t i = 0; i <= arch->n_layers; i++)
        ws->act[i] = ws->mem + lay.act[i];
    for (uint32_t i = 0; i < arch->n_layers; i++)
        ws->scratch[i] = ws->mem + lay.scratch[i];
    if (training) {
        ws->grad[0] = ws->mem + lay.grad;
        ws->grad[1] = ws->mem + lay.grad + big;
    }
    ws->labels = (int32_t *)(ws->mem + lay.labels);
    ws->targets = ws->mem + lay.targets;
    if (arch->task == TY_TASK_LANGUAGE_MODELING)
        ws->ids = (int32_t *)(ws->mem + lay.ids);
    if (nn_arch_takes_tokens(arch))
        ws->lens = (int32_t *)(ws->mem + lay.lens);
    if (host) {
        ws->host_in = ws->act[0];
        ws->host_labels = ws->labels;
        ws->host_targets = ws->targets;
    } else {
        /* The host writes here, then uploads (no alignment needs: plain
         * row copies and memcpy). */
        const uint64_t in = b * nn_shape_numel(&arch->input);
        const uint64_t tg = b * nn_arch_target_width(arch);
        ws->out = ws->mem + lay.out;
        ws->host_mem = malloc((size_t)(in + b + tg) * sizeof(float));
        if (!ws->host_mem)
            goto fail;
        ws->host_in = ws->host_mem;
        ws->host_labels = (int32_t *)(ws->host_in + in);
        ws->host_targets = ws->host_in + in + b;
    }
    if (nn_workspace_set_pool(ws, ws->own.pool) != TY_OK)
        goto fail;
    return ws;
fail:
    nn_workspace_destroy(ws);
    return NULL;
}

ty_status nn_workspace_set_pool(nn_workspace *ws, nn_pool *pool)
{
    const nn_backend *be = ws->be;
    nn_ws_layout lay;
    nn_workspace_layout(ws->arch, ws->max_batch, ws->training,
                        nn_backend_host_visible(be), &lay);
    const uint64_t per = lay.work_per_thread;
    const uint64_t threads = (uint64_t)nn_pool_threads(pool);
    float *work = NULL;
    if (per) {
        if (per > SIZE_MAX / sizeof(float) / threads)
            return TY_ENOMEM;
        work = be->alloc(ws->ex, (size_t)(per * threads) * sizeof(float));
        if (!work)
            return TY_ENOMEM;
    }
    be->release(ws->ex, ws->own.work);
    ws->own = (nn_exec){.pool = pool,
                        .device = ws->own.device,
                        .work = work,
                        .work_floats = (size_t)per,
                        .precision = ws->own.precision};
    ws->work_bytes = work ? per * threads * sizeof(float) : 0;
    return TY_OK;
}

void nn_workspace_destroy(nn_workspace *ws)
{
    if (!ws)
        return;
    ws->be->release(ws->ex, ws->own.work);
    ws->be->release(ws->ex, ws->mem);
    free(ws->host_mem);
    free(ws);
}

void nn_workspace_upload_input(nn_workspace *ws, uint32_t n)
{
    if (ws->host_in == ws->act[0])
        return;
    ws->be->upload(ws->ex, ws->act[0], ws->host_in,
                   (size_t)n * nn_shape_numel(&ws->arch->input) *
                       sizeof(float));
}

void nn_workspace_upload_targets(nn_workspace *ws, uint32_t n)
{
    if (ws->host_labels == ws->labels)
        return;
    const nn_backend *be = ws->be;
    if (ws->arch->task == TY_TASK_CLASSIFICATION)
        be->upload(ws->ex, ws->labels, ws->host_labels,
                   (size_t)n * sizeof(int32_t));
    else
        be->upload(ws->ex, ws->targets, ws->host_targets,
                   (size_t)n * nn_arch_target_width(ws->arch) * sizeof(float));
}

uint32_t nn_workspace_max_batch(const nn_workspace *ws)
{
    return ws->max_batch;
}

nn_workspace *nn_workspace_create(const nn_net *net, uint32_t max_batch)
{
    return nn_workspace_create_on(&net->arch, max_batch, 0, net->ex);
}

/* Points p's reduced-precision fields at lp_params, arch->precision's
 * copy of the parameters that start at params. */
static void nn_pass_set_lp(nn_pass *p, const nn_arch *arch, const float *params,
                           const void *lp_params)
{
    if (arch->precision == NN_DT_F32)
        return;
    p->precision = arch->precision;
    p->lp_base = params;
    p->lp_params = lp_params;
}

const float *nn_forward(const nn_arch *arch, const float *params,
                        nn_workspace *ws, uint32_t n, int training, ty_rng *rng)
{
    /* Only a training pass writes the buffers (running statistics). */
    nn_pass p = {.be = arch->be,
                 .ex = ws->ex,
                 .n = n,
                 .training = training,
                 .rng = rng,
                 .buffers = (float *)params + arch->param_count,
                 .lens = ws->lens};
    /* Mixed precision trains only: evaluation stays fp32. */
    if (training && ws->training && ws->lp_params)
        nn_pass_set_lp(&p, arch, params, ws->lp_params);
    nn_seq_forward(arch, &p, params, ws->act, ws->scratch);
    return ws->act[arch->n_layers];
}

void nn_backward(const nn_arch *arch, const float *params, float *grads,
                 nn_workspace *ws, uint32_t n)
{
    nn_pass p = {.be = arch->be,
                 .ex = ws->ex,
                 .n = n,
                 .training = 1,
                 .buffers = (float *)params + arch->param_count,
                 .lens = ws->lens,
                 .grad_hook = ws->grad_hook,
                 .hook_ctx = ws->hook_ctx};
    if (ws->lp_params)
        nn_pass_set_lp(&p, arch, params, ws->lp_params);
    /* The loss gradient is in grad[0]; the sequence ping-pongs between the
     * two buffers, so hand it the pair in an order that never overwrites
     * its own input. */
    nn_seq_backward(arch, &p, params, grads, ws->act, ws->scratch, ws->grad[0],
                    ws->grad[1], ws->grad[0], NULL);
}

static ty_status eval_examples_reg(const nn_arch *arch, const float *params,
                                   const nn_preproc *pp, const nn_target *tg,
                                   nn_workspace *ws, const ty_dataset *ds,
                                   const uint32_t *idx, uint32_t n,
                                   const int32_t *class_map, double *loss,
                                   double *accuracy, nn_reg_metrics *reg,
                                   ty_err *err);

ty_status nn_eval_examples(const nn_arch *arch, const float *params,
                           const nn_preproc *pp, nn_workspace *ws,
                           const ty_dataset *ds, const uint32_t *idx,
                           uint32_t n, const int32_t *class_map, double *loss,
                           double *accuracy, ty_err *err)
{
    return nn_eval_examples_reg(arch, params, pp, NULL, ws, ds, idx, n,
                                class_map, loss, accuracy, NULL, err);
}

/* The batch's outputs y (m, c) into the target's units in pred (host),
 * added to acc against ds's targets of rows idx[first..first+m). */
static void eval_reg_batch(const nn_arch *arch, nn_workspace *ws,
                           const float *y, const nn_target *tg,
                           const ty_dataset *ds, const uint32_t *idx,
                           uint32_t first, uint32_t m, float *pred,
                           nn_reg_acc *acc)
{
    const uint32_t c = arch->num_outputs;
    if (nn_backend_host_visible(arch->be))
        memcpy(pred, y, (size_t)m * c * sizeof *pred);
    else
        arch->be->download(ws->ex, pred, y, (size_t)m * c * sizeof *pred);
    if (tg)
        nn_target_unscale(tg, pred, m);
    for (uint32_t i = 0; i < m; i++) {
        uint32_t row = idx ? idx[first + i] : first + i;
        nn_reg_acc_add(acc, pred + (size_t)i * c,
                       ds->y_value + (size_t)row * ds->y_dim, 1);
    }
}

ty_status nn_eval_examples_reg(const nn_arch *arch, const float *params,
                               const nn_preproc *pp, const nn_target *tg,
                               nn_workspace *ws, const ty_dataset *ds,
                               const uint32_t *idx, uint32_t n,
                               const int32_t *class_map, double *loss,
                               double *accuracy, nn_reg_metrics *reg,
                               ty_err *err)
{
    /* a CSV dataset's columns in the model's one-hot layout */
    ty_dataset view;
    float *x = NULL;
    ty_status st = nn_preproc_bind(pp, ds, &view, &x, err);
    if (st == TY_OK)
        st = eval_examples_reg(arch, params, pp, tg, ws, x ? &view : ds, idx, n,
                               class_map, loss, accuracy, reg, err);
    free(x);
    return st;
}

static ty_status eval_examples_reg(const nn_arch *arch, const float *params,
                                   const nn_preproc *pp, const nn_target *tg,
                                   nn_workspace *ws, const ty_dataset *ds,
                                   const uint32_t *idx, uint32_t n,
                                   const int32_t *class_map, double *loss,
                                   double *accuracy, nn_reg_metrics *reg,
                                   ty_err *err)
{
    const int cls = arch->task == TY_TASK_CLASSIFICATION;
    /* A language model's loss is already a mean over positions per
     * example; its targets are the next tokens (nn_arch_target_width). */
    const int lm = arch->task == TY_TASK_LANGUAGE_MODELING;
    const uint32_t tw = nn_arch_target_width(arch);
    if (ds->features != nn_shape_numel(&arch->input) || ds->task != arch->task)
        return ty_fail(err, TY_EINVAL, NULL,
                       "the dataset (%s, %llu features) does not fit the model "
                       "(%s, %llu features)",
                       nn_task_str(ds->task), (unsigned long long)ds->features,
                       nn_task_str(arch->task),
                       (unsigned long long)nn_shape_numel(&arch->input));
    if (!cls && ds->y_dim != tw)
        return ty_fail(err, TY_EINVAL, NULL,
                       "the dataset has %u target values per example but the "
                       "model predicts %u",
                       ds->y_dim, tw);
    if (n == 0)
        return ty_fail(err, TY_EINVAL, NULL,
                       "there are no examples to evaluate");
    if (reg)
        *reg = (nn_reg_metrics){NAN, NAN, NAN, NAN};
    if (tg && (cls || lm || !tg->cols))
        tg = NULL;
    /* Regression metrics: the outputs come to the host, into pred. */
    nn_reg_acc acc = {0};
    float *pred = NULL;
    if (reg && !cls && !lm) {
        ty_status st = nn_reg_acc_init(&acc, ds, idx, n, err);
        if (st != TY_OK)
            return st;
        pred = malloc((size_t)ws->max_batch * arch->num_outputs * sizeof *pred);
        if (!pred) {
            nn_reg_acc_free(&acc);
            return ty_fail(err, TY_ENOMEM, NULL, "out of memory evaluating");
        }
    }
    ty_status st = TY_OK;
    double sum = 0.0;
    uint64_t hits = 0;
    for (uint32_t first = 0; first < n; first += ws->max_batch) {
        uint32_t m = n - first < ws->max_batch ? n - first : ws->max_batch;
        for (uint32_t i = 0; i < m; i++) {
            uint32_t row = idx ? idx[first + i] : first + i;
            if (row >= ds->num_examples) {
                st = ty_fail(err, TY_EINVAL, NULL,
                             "example index %u is out of range", row);
                goto done;
            }
            if (cls) {
                int32_t y = ds->y_class[row];
                if (class_map && y >= 0 && (uint32_t)y < ds->num_classes)
                    y = class_map[y];
                else if (class_map)
                    y = -1;
                if (y < 0 || (uint32_t)y >= arch->num_outputs) {
                    st = ty_fail(err, TY_EINVAL, NULL,
                                 "example %u has a class the model does not "
                                 "know",
                                 row);
                    goto done;
                }
                ws->host_labels[i] = y;
            } else {
                float *t = ws->host_targets + (size_t)i * tw;
                memcpy(t, ds->y_value + (size_t)row * ds->y_dim,
                       tw * sizeof(float));
                if (tg)
                    nn_target_scale(tg, t, t, 1);
            }
        }
        nn_preproc_gather(pp, ws->host_in, ds, idx, first, m);
        nn_workspace_upload_input(ws, m);
        nn_workspace_upload_targets(ws, m);
        const float *y = nn_forward(arch, params, ws, m, 0, NULL);
        uint32_t c = 0;
        sum += nn_loss(arch, ws, m, ws->labels, ws->targets, &c, 0);
        hits += c;
        if (pred)
            eval_reg_batch(arch, ws, y, tg, ds, idx, first, m, pred, &acc);
        /* A failed device makes the sums garbage: stop at the first. */
        if ((st = arch->be->status(ws->ex, err)) != TY_OK)
            goto done;
    }
    *loss = cls || lm ? sum / n : sum / ((double)n * arch->num_outputs);
    *accuracy = cls ? (double)hits / n : -1.0;
    if (pred)
        nn_reg_acc_result(&acc, reg);
done:
    free(pred);
    nn_reg_acc_free(&acc);
    return st;
}

/* ---- trained networks ---- */

const json_t *nn_net_meta(const nn_net *net) { return net->meta; }

void nn_net_describe(const nn_net *net, json_t *doc)
{
    const json_t *meta = net->meta;
    static const char *const copied[] = {"task", "input_shape", "num_outputs",
                                         "classes"};
    for (size_t i = 0; i < TY_ARRAY_LEN(copied); i++)
        json_object_set(doc, copied[i], json_object_get(meta, copied[i]));
    json_object_set_new(doc, "param_count",
                        json_integer((json_int_t)net->arch.param_count));
    json_object_set(doc, "spec", json_object_get(meta, "spec"));
    json_object_set(
        doc, "preprocess",
        json_object_get(json_object_get(meta, "preprocess"), "kind"));
    if (nn_arch_takes_tokens(&net->arch))
        nn_lm_describe(net, doc);
    /* A tabular model's raw columns (without its statistics): what a
     * predict row holds. */
    const json_t *cols =
        net->pp.kind == NN_PRE_TABULAR ? net->pp.tab_columns : NULL;
    json_t *shown = cols ? json_array() : NULL;
    for (size_t i = 0; shown && i < json_array_size(cols); i++) {
        const json_t *c = json_array_get(cols, i);
        json_t *o = json_pack("{s:O, s:O}", "name", json_object_get(c, "name"),
                              "type", json_object_get(c, "type"));
        if (o && json_object_get(c, "categories"))
            json_object_set(o, "categories", json_object_get(c, "categories"));
        json_array_append_new(shown, o);
    }
    if (shown)
        json_object_set_new(doc, "columns", shown);
}
ty_task nn_net_task(const nn_net *net) { return net->arch.task; }
uint32_t nn_net_num_outputs(const nn_net *net) { return net->arch.num_outputs; }
uint64_t nn_net_param_count(const nn_net *net) { return net->arch.param_count; }

uint64_t nn_net_input_features(const nn_net *net)
{
    return nn_shape_numel(&net->arch.input);
}

void nn_net_destroy(nn_net *net)
{
    if (!net)
        return;
    if (nn_backend_host_visible(net->arch.be))
        free(net->params);
    else if (net->arch.be)
        net->arch.be->release(net->ex, net->params);
    nn_arch_free(&net->arch);
    nn_preproc_free(&net->pp);
    nn_target_free(&net->tg);
    json_decref(net->meta);
    nn_lm_tokenizer_free(net);
    free(net);
}

/* A language model's next-token distribution for each of n prompts: row
 * i of x is a prompt's ids, then -1 up to the context length (at least one
 * id first). The logits of its last id's position (causal: the padding
 * after it changes nothing) are softmaxed into out (n, vocabulary). */
static ty_status lm_predict(const nn_net *net, nn_workspace *ws, const float *x,
                            uint32_t n, float *out, ty_err *err)
{
    const nn_arch *a = &net->arch;
    const uint32_t t = a->input.d[0], v = a->num_outputs;
    memcpy(ws->host_in, x, (size_t)n * t * sizeof *x);
    nn_workspace_upload_input(ws, n);
    const float *y = nn_forward(a, net->params, ws, n, 0, NULL);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t len = 0;
        while (len < t && x[(size_t)i * t + len] >= 0.0f)
            len++;
        if (len == 0)
            return ty_fail(err, TY_EINVAL, NULL, "prompt %u has no tokens", i);
        const float *row = y + ((size_t)i * t + len - 1) * v;
        float *dst = out + (size_t)i * v;
        if (nn_backend_host_visible(a->be))
            memcpy(dst, row, v * sizeof *dst);
        else
            a->be->download(ws->ex, dst, row, v * sizeof *dst);
    }
    ty_status st = a->be->status(ws->ex, err);
    if (st != TY_OK)
        return st;
    for (uint32_t i = 0; i < n; i++) {
        float *r = out + (size_t)i * v;
        float max = r[0];
        for (uint32_t j = 1; j < v; j++)
            max = r[j] > max ? r[j] : max;
        double sum = 0.0;
        for (uint32_t j = 0; j < v; j++)
            sum += exp((double)r[j] - max);
        for (uint32_t j = 0; j < v; j++)
            r[j] = (float)(exp((double)r[j] - max) / sum);
    }
    return TY_OK;
}

ty_status nn_net_predict(const nn_net *net, nn_workspace *ws, const float *x,
                         uint32_t n, float *out, ty_err *err)
{
    if (!ws || ws->arch != &net->arch)
        return ty_fail(err, TY_EINVAL, NULL,
                       "the workspace was not made for this network");
    if (n > ws->max_batch)
        return ty_fail(err, TY_EINVAL, NULL,
                       "%u examples are more than the workspace holds (%u)", n,
                       ws->max_batch);
    if (n == 0)
        return TY_OK;
    const nn_arch *a = &net->arch;
    if (a->task == TY_TASK_LANGUAGE_MODELING)
        return lm_predict(net, ws, x, n, out, err);
    nn_preproc_apply(&net->pp, ws->host_in, x, n);
    nn_workspace_upload_input(ws, n);
    const float *y = nn_forward(a, net->params, ws, n, 0, NULL);
    const uint32_t width = (uint32_t)nn_shape_numel(&a->output);
    if (!ws->out) {
        nn_loss_output(&a->loss, a->be, ws->ex, out, y, n, width);
        /* Regression: into the target's units (models/target.h). */
        nn_target_unscale(&net->tg, out, n);
        return TY_OK;
    }
    /* Off the host: computed on the backend, then downloaded. */
    nn_loss_output(&a->loss, a->be, ws->ex, ws->out, y, n, width);
    const size_t w = a->loss.kind == NN_LOSS_BINARY_CROSS_ENTROPY ? 2 : width;
    a->be->download(ws->ex, out, ws->out, (size_t)n * w * sizeof *out);
    ty_status st = a->be->status(ws->ex, err);
    if (st == TY_OK)
        nn_target_unscale(&net->tg, out, n);
    return st;
}

void nn_net_transform(const nn_net *net, const float *x, uint32_t n, float *out)
{
    nn_preproc_apply(&net->pp, out, x, n);
}

ty_status nn_net_evaluate(const nn_net *net, const ty_dataset *ds,
                          const int32_t *class_map, double *loss,
                          double *accuracy, ty_err *err)
{
    return nn_net_evaluate_metrics(net, ds, class_map, loss, accuracy, NULL,
                                   err);
}

ty_status nn_net_evaluate_metrics(const nn_net *net, const ty_dataset *ds,
                                  const int32_t *class_map, double *loss,
                                  double *accuracy, nn_reg_metrics *reg,
                                  ty_err *err)
{
    uint32_t batch = ds->num_examples < 256 ? ds->num_examples : 256;
    nn_workspace *ws =
        nn_workspace_create_on(&net->arch, batch ? batch : 1, 0, net->ex);
    if (!ws)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory evaluating");
    ty_status st = nn_eval_examples_reg(
        &net->arch, net->params, &net->pp, &net->tg, ws, ds, NULL,
        ds->num_examples, class_map, loss, accuracy, reg, err);
    nn_workspace_destroy(ws);
    return st;
}

static json_t *shape_json(const nn_shape *s)
{
    json_t *a = json_array();
    for (uint32_t i = 0; a && i < s->ndim; i++)
        json_array_append_new(a, json_integer(s->d[i]));
    return a;
}

static int set_dump(json_t *meta, const char *key, const json_t *v)
{
    char *text = v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    int rc = text ? json_object_set_new(meta, key, json_string(text)) : -1;
    free(text);
    return rc;
}

json_t *nn_model_metadata(const json_t *spec, ty_task task,
                          const nn_shape *input, uint32_t num_outputs,
                          const json_t *classes, const nn_preproc *pp)
{
    char num[16];
    snprintf(num, sizeof num, "%u", num_outputs);
    json_t *meta =
        json_pack("{s:s, s:s, s:s}", "trainyard.format", "1", "trainyard.task",
                  nn_task_str(task), "trainyard.num_outputs", num);
    json_t *shape = shape_json(input), *pre = nn_preproc_to_json(pp);
    json_t *null = json_null();
    int bad = !meta || set_dump(meta, "trainyard.spec", spec) ||
              set_dump(meta, "trainyard.input_shape", shape) ||
              set_dump(meta, "trainyard.classes", classes ? classes : null) ||
              set_dump(meta, "trainyard.preprocess", pre);
    json_decref(shape);
    json_decref(pre);
    if (bad) {
        json_decref(meta);
        return NULL;
    }
    return meta;
}

/* ---- loading ---- */

static ty_status meta_json(const st_file *f, const char *key, json_t **out,
                           ty_err *err)
{
    const char *text = st_meta(f, key);
    if (!text)
        return ty_fail(err, TY_EFORMAT, NULL, "the model has no %s metadata",
                       key);
    *out = json_loads(text, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, NULL);
    if (!*out)
        return ty_fail(err, TY_EFORMAT, NULL,
                       "the model's %s metadata is not valid JSON", key);
    return TY_OK;
}

static ty_status parse_input_shape(const json_t *a, nn_shape *s, ty_err *err)
{
    if (!json_is_array(a) || json_array_size(a) < 1 ||
        json_array_size(a) > NN_MAX_DIMS)
        return ty_fail(err, TY_EFORMAT, NULL,
                       "trainyard.input_shape must be an array of 1 to %d "
                       "sizes",
                       NN_MAX_DIMS);
    s->ndim = (uint32_t)json_array_size(a);
    for (uint32_t i = 0; i < s->ndim; i++) {
        const json_t *v = json_array_get(a, i);
        if (!json_is_integer(v) || json_integer_value(v) < 1 ||
            json_integer_value(v) > TY_DS_MAX_FEATURES)
            return ty_fail(err, TY_EFORMAT, NULL,
                           "trainyard.input_shape[%u] must be a size from 1 to "
                           "%u",
                           i, TY_DS_MAX_FEATURES);
        s->d[i] = (uint32_t)json_integer_value(v);
    }
    return TY_OK;
}

static ty_status parse_num_outputs(const char *s, uint32_t *out, ty_err *err)
{
    uint64_t v = 0;
    size_t len = s ? strlen(s) : 0;
    for (size_t i = 0; i < len && i < 12; i++)
        v = s[i] >= '0' && s[i] <= '9' ? v * 10 + (uint64_t)(s[i] - '0')
                                       : UINT64_MAX;
    if (len == 0 || len > 10 || v == 0 || v > TY_DS_MAX_CLASSES ||
        (len > 1 && s[0] == '0'))
        return ty_fail(err, TY_EFORMAT, NULL,
                       "trainyard.num_outputs must be a decimal number from 1 "
                       "to %u",
                       TY_DS_MAX_CLASSES);
    *out = (uint32_t)v;
    return TY_OK;
}

/* Reads and checks every metadata field, builds arch (for be) and pp. */
static ty_status load_meta(nn_net *net, const st_file *f, const nn_backend *be,
                           ty_err *err)
{
    json_t *spec = NULL, *shape = NULL, *classes = NULL, *pre = NULL,
           *normalized = NULL, *loss_j = NULL, *loss_norm = NULL,
           *target_j = NULL;
    ty_status st;
    const char *format = st_meta(f, "trainyard.format");
    if (!format || strcmp(format, "1") != 0)
        return ty_fail(err, TY_EFORMAT, NULL,
                       "not a trainyard model: trainyard.format must be \"1\"");
    int task = nn_task_from_str(st_meta(f, "trainyard.task"));
    if (task < 0)
        return ty_fail(err, TY_EFORMAT, NULL,
                       "trainyard.task must be classification, regression "
                       "or language_modeling");
    uint32_t num_outputs = 0;
    nn_shape input = {0};
    if ((st = parse_num_outputs(st_meta(f, "trainyard.num_outputs"),
                                &num_outputs, err)) != TY_OK ||
        (st = meta_json(f, "trainyard.spec", &spec, err)) != TY_OK ||
        (st = meta_json(f, "trainyard.input_shape", &shape, err)) != TY_OK ||
        (st = parse_input_shape(shape, &input, err)) != TY_OK ||
        (st = meta_json(f, "trainyard.classes", &classes, err)) != TY_OK ||
        (st = meta_json(f, "trainyard.preprocess", &pre, err)) != TY_OK)
        goto done;
    if (!json_is_null(classes) &&
        (!json_is_array(classes) || task != TY_TASK_CLASSIFICATION ||
         json_array_size(classes) != num_outputs)) {
        st = ty_fail(err, TY_EFORMAT, NULL,
                     "trainyard.classes must be null or, for classification, "
                     "an array of %u classes",
                     num_outputs);
        goto done;
    }
    nn_loss_spec loss;
    if (st_meta(f, "trainyard.loss") &&
        (st = meta_json(f, "trainyard.loss", &loss_j, err)) != TY_OK)
        goto done;
    if ((st = nn_loss_from_json(&loss, loss_j, (ty_task)task, num_outputs,
                                err)) != TY_OK)
        goto done;
    st = nn_arch_build_on(spec, input.d, input.ndim, num_outputs, (ty_task)task,
                          &loss, be, &net->arch, &normalized, err);
    if (st != TY_OK) {
        ty_err_prefix(err, "the model's spec does not fit its metadata");
        if (st != TY_ENOMEM) /* out of memory is no fault of the file */
            st = TY_EFORMAT;
        goto done;
    }
    if ((st = nn_preproc_from_json(&net->pp, pre, nn_shape_numel(&input),
                                   err)) != TY_OK)
        goto done;
    /* Optional (models/target.h): older files and imports have none. */
    if (st_meta(f, "trainyard.target") &&
        ((st = meta_json(f, "trainyard.target", &target_j, err)) != TY_OK ||
         (st = nn_target_from_json(&net->tg, target_j, num_outputs, err)) !=
             TY_OK))
        goto done;
    if (net->tg.cols && task != TY_TASK_REGRESSION) {
        st = ty_fail(err, TY_EFORMAT, NULL,
                     "trainyard.target applies to regression models only");
        goto done;
    }
    loss_norm = nn_loss_to_json(&loss);
    net->meta =
        json_pack("{s:o, s:s, s:O, s:I, s:O, s:O, s:O}", "spec", normalized,
                  "task", nn_task_str((ty_task)task), "input_shape", shape,
                  "num_outputs", (json_int_t)num_outputs, "classes", classes,
                  "preprocess", pre, "loss", loss_norm);
    normalized = NULL;
    if (!net->meta) {
        st = ty_fail(err, TY_ENOMEM, NULL, "out of memory loading the model");
        goto done;
    }
    /* A token model's tokenizer (its training data's; a language model or
     * a text classifier): optional, JSON ("byte", an object, or null for
     * token ids made elsewhere). */
    if (st_meta(f, "trainyard.tokenizer")) {
        json_t *tz = NULL;
        if ((st = meta_json(f, "trainyard.tokenizer", &tz, err)) != TY_OK)
            goto done;
        if (!nn_arch_takes_tokens(&net->arch) ||
            !(json_is_string(tz) || json_is_object(tz) || json_is_null(tz))) {
            json_decref(tz);
            st = ty_fail(err, TY_EFORMAT, NULL,
                         "trainyard.tokenizer must be the tokenizer of a "
                         "model on token ids: \"byte\", an object or null");
            goto done;
        }
        json_object_set_new(net->meta, "tokenizer", tz);
        if ((st = nn_lm_tokenizer_load(net, tz, err)) != TY_OK)
            goto done;
    }
    /* An import's config.json (kept for export): its end-of-text token.
     * A config that does not parse is export's to refuse, not load's. */
    json_t *hf_config = NULL;
    ty_err ignore = {0};
    if (nn_arch_takes_tokens(&net->arch) && st_meta(f, "trainyard.hf_config") &&
        meta_json(f, "trainyard.hf_config", &hf_config, &ignore) == TY_OK)
        nn_lm_eos_load(net, hf_config);
    json_decref(hf_config);
done:
    json_decref(spec);
    json_decref(shape);
    json_decref(classes);
    json_decref(pre);
    json_decref(normalized);
    json_decref(loss_j);
    json_decref(loss_norm);
    json_decref(target_j);
    return st;
}

static int is_expected_tensor(const nn_arch *a, const char *name)
{
    for (uint32_t i = 0; i < a->n_tensors; i++)
        if (!strcmp(a->tensors[i].name, name))
            return 1;
    return 0;
}

static void format_dims(char *buf, size_t n, const uint64_t *d, uint32_t ndim)
{
    nn_shape s = {.ndim = ndim < NN_MAX_DIMS ? ndim : NN_MAX_DIMS};
    for (uint32_t i = 0; i < s.ndim; i++)
        s.d[i] = d[i] > UINT32_MAX ? UINT32_MAX : (uint32_t)d[i];
    nn_shape_format(&s, buf, n);
    if (ndim == 0)
        snprintf(buf, n, "[]");
}

/* Copies every expected tensor, checking name, dtype and shape. Tensors the
 * architecture does not expect are an error: a file with extra tensors was
 * made for a different model, and loading it would silently drop weights. */
static ty_status load_params(const nn_arch *a, float *state, const st_file *f,
                             ty_err *err)
{
    for (uint32_t i = 0; i < a->n_tensors; i++) {
        const nn_named_tensor *nt = &a->tensors[i];
        const nn_tensor_desc *d = nt->desc;
        const st_tensor *st = st_find(f, nt->name);
        if (!st)
            return ty_fail(err, TY_EFORMAT, NULL,
                           "the model has no tensor '%s'", nt->name);
        int same = st->dtype == ST_F32 && st->ndim == d->ndim;
        for (uint32_t k = 0; same && k < d->ndim; k++)
            same = st->shape[k] == d->shape[k];
        if (!same) {
            uint64_t want_d[NN_MAX_DIMS];
            for (uint32_t k = 0; k < d->ndim; k++)
                want_d[k] = d->shape[k];
            char want[64], got[64];
            format_dims(want, sizeof want, want_d, d->ndim);
            format_dims(got, sizeof got, st->shape, st->ndim);
            return ty_fail(err, TY_EFORMAT, NULL,
                           "tensor '%s' must be F32 %s, got %s %s", nt->name,
                           want, st_dtype_name(st->dtype), got);
        }
        memcpy(state + nt->offset, st->data, d->numel * sizeof(float));
    }
    /* PyTorch's batchnorm also saves a step counter, which inference does
     * not use; anything else unexpected means a different model. */
    for (size_t i = 0; i < f->count; i++) {
        const char *name = f->tensors[i].name;
        size_t len = strlen(name);
        static const char counter[] = ".num_batches_tracked";
        if (len > sizeof counter - 1 &&
            !strcmp(name + len - (sizeof counter - 1), counter))
            continue;
        if (!is_expected_tensor(a, name))
            return ty_fail(err, TY_EFORMAT, NULL,
                           "the model has an unexpected tensor '%.64s'", name);
    }
    for (uint64_t i = 0; i < a->param_count + a->buffer_count; i++)
        if (!isfinite(state[i]))
            return ty_fail(err, TY_EFORMAT, NULL,
                           "the model's parameters contain NaN or Inf");
    return TY_OK;
}

ty_status nn_net_load(const char *path, nn_net **out, ty_err *err)
{
    return nn_net_load_on(path, NULL, NULL, out, err);
}

ty_status nn_net_load_on(const char *path, const nn_backend *be,
                         const nn_exec *ex, nn_net **out, ty_err *err)
{
    *out = NULL;
    if (!be)
        be = &nn_backend_cpu;
    st_file f;
    ty_status st = st_open(path, &f, err);
    if (st != TY_OK)
        return st;
    float *host = NULL;
    nn_net *net = calloc(1, sizeof *net);
    if (!net) {
        st_close(&f);
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory loading the model");
    }
    net->ex = nn_backend_host_visible(be) ? NULL : ex;
    if ((st = load_meta(net, &f, be, err)) != TY_OK)
        goto fail;
    /* Loaded and checked on the host; a device net then gets a copy.
     * net->params holds only be's memory, so destroy frees it right. */
    const uint64_t state = net->arch.param_count + net->arch.buffer_count;
    const size_t bytes = (size_t)(state ? state : 1) * sizeof(float);
    host = malloc(bytes);
    if (!host) {
        st = ty_fail(err, TY_ENOMEM, NULL, "out of memory loading the model");
        goto fail;
    }
    if ((st = load_params(&net->arch, host, &f, err)) != TY_OK)
        goto fail;
    st_close(&f);
    if (nn_backend_host_visible(be)) {
        net->params = host;
    } else {
        net->params = be->alloc(net->ex, bytes);
        if (!net->params) {
            st = ty_fail(err, TY_ENOMEM, NULL,
                         "out of %s memory loading the model (%zu bytes)",
                         be->name, bytes);
            goto fail_closed;
        }
        be->upload(net->ex, net->params, host, bytes);
        if ((st = be->status(net->ex, err)) != TY_OK)
            goto fail_closed;
        free(host);
    }
    *out = net;
    return TY_OK;
fail:
    st_close(&f);
fail_closed:
    free(host);
    nn_net_destroy(net);
    return st;
}
