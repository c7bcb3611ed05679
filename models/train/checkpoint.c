/*
 * checkpoint.c - the trainer's files: the final model (nn.h's format)
 * and checkpoints. A checkpoint holds the parameters ("0.weight", ...), the
 * optimizer state ("optim.0.weight.exp_avg", ... named after PyTorch's state
 * dict entries) and the run's position, in one safetensors file written
 * atomically.
 *
 * __metadata__ holds "trainyard.checkpoint" "1", "trainyard.run" (a JSON
 * identity of the job: normalized spec, data shape, training split
 * fingerprint and every hyperparameter that shapes the trajectory, epochs
 * excepted so a run can be extended), "trainyard.spec", "trainyard.seed",
 * the position ("trainyard.epoch" completed epochs, "trainyard.step",
 * "trainyard.epoch_step"), the dropout stream's state ("trainyard.rng"), the
 * epoch's running sums and the last epoch's metrics (a partial epoch's when
 * max_steps ended the run inside it: the position is then inside that
 * epoch, so a larger max_steps resumes there). A resumed run continues
 * exactly: mid-epoch checkpoints replay the same epoch order, skip the steps
 * already taken and restore the dropout stream, so the final weights are
 * bit-identical to an uninterrupted run with the same thread count.
 */
#include <errno.h>
#include <math.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fsutil.h"
#include "models/safetensors.h"
#include "models/train/train_internal.h"

#define NAME_LEN (NN_TENSOR_NAME_LEN + 32)

typedef struct {
    size_t n;
    st_out_tensor *t; /* cap entries */
    char (*names)[NAME_LEN];
    float **dst; /* where each tensor's data lives (for reads) */
} tensor_list;

static size_t tensors_per_block(const nn_arch *a) { return a->n_tensors; }

/* Appends the tensors of a over block, named prefix + name + tail. The
 * parameters' block (with_buffers) is the state block and includes the
 * buffers; an optimizer slot is laid out like the parameters alone. */
static void add_block(tensor_list *tl, const nn_arch *a, float *block,
                      const char *prefix, const char *tail, int with_buffers)
{
    for (uint32_t i = 0; i < a->n_tensors; i++) {
        const nn_named_tensor *nt = &a->tensors[i];
        const nn_tensor_desc *d = nt->desc;
        if (d->buffer && !with_buffers)
            continue;
        snprintf(tl->names[tl->n], NAME_LEN, "%s%s%s", prefix, nt->name, tail);
        st_out_tensor *o = &tl->t[tl->n];
        *o = (st_out_tensor){.name = tl->names[tl->n],
                             .dtype = ST_F32,
                             .ndim = d->ndim,
                             .data = block + nt->offset};
        for (uint32_t j = 0; j < d->ndim; j++)
            o->shape[j] = d->shape[j];
        tl->dst[tl->n] = block + nt->offset;
        tl->n++;
    }
}

static void tensor_list_free(tensor_list *tl)
{
    free(tl->t);
    free(tl->names);
    free(tl->dst);
}

/* Room for `blocks` parameter-shaped blocks of arch's tensors. */
static ty_status tensor_list_alloc(tensor_list *tl, const nn_arch *a,
                                   uint32_t blocks, ty_err *err)
{
    size_t cap = tensors_per_block(a) * blocks + 1;
    tl->n = 0;
    tl->t = calloc(cap, sizeof *tl->t);
    tl->names = calloc(cap, sizeof *tl->names);
    tl->dst = calloc(cap, sizeof *tl->dst);
    if (!tl->t || !tl->names || !tl->dst) {
        tensor_list_free(tl);
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory writing tensors");
    }
    return TY_OK;
}

float *train_host_state(const trainer *t)
{
    return t->host ? t->host : t->params;
}

static uint64_t state_floats(const trainer *t)
{
    return t->arch.param_count + t->arch.buffer_count;
}

float *train_host_slot(const trainer *t, uint32_t k)
{
    if (t->zero_full)
        return k < t->opt.n_slots
                   ? t->zero_full + (size_t)k * t->arch.param_count
                   : NULL;
    if (!t->host)
        return nn_optim_slot(&t->opt, k);
    return k < t->opt.n_slots
               ? t->host + state_floats(t) + (size_t)k * t->arch.param_count
               : NULL;
}

ty_status train_state_download(const trainer *t, int slots, ty_err *err)
{
    if (!t->host)
        return TY_OK;
    const nn_exec *ex = t->ws->ex;
    t->be->download(ex, t->host, t->params, state_floats(t) * sizeof(float));
    for (uint32_t k = 0; slots && k < t->opt.n_slots; k++)
        t->be->download(ex, train_host_slot(t, k), nn_optim_slot(&t->opt, k),
                        t->arch.param_count * sizeof(float));
    return t->be->status(ex, err);
}

ty_status train_state_upload(const trainer *t, ty_err *err)
{
    if (!t->host)
        return TY_OK;
    const nn_exec *ex = t->ws->ex;
    t->be->upload(ex, t->params, t->host, state_floats(t) * sizeof(float));
    for (uint32_t k = 0; k < t->opt.n_slots; k++)
        t->be->upload(ex, nn_optim_slot(&t->opt, k), train_host_slot(t, k),
                      t->arch.param_count * sizeof(float));
    return t->be->status(ex, err);
}

/* Parameters, then each optimizer slot (their host copies). */
static ty_status checkpoint_tensors(const trainer *t, tensor_list *tl,
                                    ty_err *err)
{
    ty_status st = tensor_list_alloc(tl, &t->arch, 1 + t->opt.n_slots, err);
    if (st != TY_OK)
        return st;
    add_block(tl, &t->arch, train_host_state(t), "", "", 1);
    for (uint32_t k = 0; k < t->opt.n_slots; k++) {
        char tail[32];
        snprintf(tail, sizeof tail, ".%s", nn_optim_slot_name(&t->opt, k));
        add_block(tl, &t->arch, train_host_slot(t, k), "optim.", tail, 0);
    }
    return TY_OK;
}

static int set_str(json_t *o, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int set_str(json_t *o, const char *key, const char *fmt, ...)
{
    char buf[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return json_object_set_new(o, key, json_string(buf));
}

static int set_json(json_t *o, const char *key, const json_t *v)
{
    char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    int rc = text ? json_object_set_new(o, key, json_string(text)) : -1;
    free(text);
    return rc;
}

static json_t *metrics_json_base(const train_epoch_metrics *m)
{
    return json_pack("{s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:I}", "epoch",
                     (json_int_t)m->epoch, "train_loss", m->train_loss,
                     "train_accuracy", m->train_accuracy, "val_loss",
                     m->val_loss, "val_accuracy", m->val_accuracy,
                     "samples_per_sec", m->samples_per_sec, "seconds",
                     m->seconds, "loss_scale", m->loss_scale, "skipped_steps",
                     (json_int_t)m->skipped_steps);
}

/* A regression metric for the checkpoint: null when absent (NAN). */
static json_t *real_or_null(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

static const char *const REG_KEYS[] = {"train_rmse", "train_mae", "train_r2",
                                       "val_rmse",   "val_mae",   "val_r2"};

static double *reg_field(train_epoch_metrics *m, size_t i)
{
    double *f[] = {&m->train_rmse, &m->train_mae, &m->train_r2,
                   &m->val_rmse,   &m->val_mae,   &m->val_r2};
    return f[i];
}

static json_t *metrics_json(const train_epoch_metrics *m)
{
    json_t *j = metrics_json_base(m);
    train_epoch_metrics c = *m;
    for (size_t i = 0; j && i < TY_ARRAY_LEN(REG_KEYS); i++)
        json_object_set_new(j, REG_KEYS[i], real_or_null(*reg_field(&c, i)));
    return j;
}

/* fp16: the loss scaler's state and the epoch's skipped steps, so a
 * resumed run scales and skips exactly as an uninterrupted one. */
static int save_loss_scaler(const trainer *t, json_t *meta)
{
    if (t->precision != NN_DT_F16)
        return 0;
    char buf[96];
    loss_scaler_format(&t->scaler, buf, sizeof buf);
    return set_str(meta, "trainyard.loss_scaler", "%s", buf) ||
           set_str(meta, "trainyard.epoch_skipped", "%" PRIu64,
                   t->epoch_skipped);
}

ty_status train_ckpt_save(const trainer *t, ty_err *err)
{
    tensor_list tl;
    ty_status st = train_state_download(t, 1, err);
    if (st != TY_OK)
        return st;
    st = checkpoint_tensors(t, &tl, err);
    if (st != TY_OK)
        return st;
    json_t *meta = json_object();
    json_t *last = t->have_last ? metrics_json(&t->last) : json_null();
    const uint64_t *s = t->drop_rng.s;
    int bad =
        !meta || !last || set_str(meta, "trainyard.checkpoint", "1") ||
        set_json(meta, "trainyard.run", t->identity) ||
        set_json(meta, "trainyard.spec", t->spec) ||
        set_str(meta, "trainyard.seed", "%" PRIu64, t->hp->seed) ||
        set_str(meta, "trainyard.epoch", "%u", t->epoch_done) ||
        set_str(meta, "trainyard.step", "%" PRIu64, t->step) ||
        set_str(meta, "trainyard.epoch_step", "%" PRIu64, t->epoch_step) ||
        set_str(meta, "trainyard.rng",
                "%016" PRIx64 "%016" PRIx64 "%016" PRIx64 "%016" PRIx64, s[0],
                s[1], s[2], s[3]) ||
        set_str(meta, "trainyard.epoch_loss_sum", "%.17g", t->loss_sum) ||
        set_str(meta, "trainyard.epoch_hits", "%" PRIu64, t->hits) ||
        set_str(meta, "trainyard.epoch_seen", "%" PRIu64, t->seen) ||
        set_json(meta, "trainyard.last_epoch", last) ||
        save_loss_scaler(t, meta);
    json_decref(last);
    if (bad)
        st = ty_fail(err, TY_ENOMEM, NULL, "out of memory for a checkpoint");
    else
        st = st_write(t->job->checkpoint_path, meta, tl.t, tl.n, err);
    json_decref(meta);
    tensor_list_free(&tl);
    return st;
}

ty_status train_save_model(const trainer *t, ty_err *err)
{
    const nn_arch *a = &t->arch;
    const json_t *classes = json_object_get(t->ds->meta, "classes");
    if (a->task != TY_TASK_CLASSIFICATION || !json_is_array(classes))
        classes = NULL;
    json_t *meta = nn_model_metadata(t->spec, a->task, &a->input,
                                     a->num_outputs, classes, &t->pp);
    json_t *loss = nn_loss_to_json(&a->loss);
    const json_t *extra = t->job->extra_meta;
    /* The loss decides how predict reads the output, trainyard.target
     * (regression) how outputs go back to the target's units (nn.h). Extra
     * keys never replace the engine's own trainyard.* entries. */
    json_t *target = t->tg.cols ? nn_target_to_json(&t->tg) : NULL;
    int bad = !meta || !loss || set_json(meta, "trainyard.loss", loss) ||
              (t->tg.cols &&
               (!target || set_json(meta, "trainyard.target", target))) ||
              (extra && json_object_update_missing(meta, (json_t *)extra));
    json_decref(loss);
    json_decref(target);
    if (bad) {
        json_decref(meta);
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory writing the model");
    }
    tensor_list tl;
    ty_status st = train_state_download(t, 0, err);
    if (st == TY_OK)
        st = tensor_list_alloc(&tl, a, 1, err);
    if (st == TY_OK) {
        add_block(&tl, a, train_host_state(t), "", "", 1);
        st = st_write(t->job->model_path, meta, tl.t, tl.n, err);
        tensor_list_free(&tl);
    }
    json_decref(meta);
    return st;
}

/* ---- resume ---- */

static int parse_u64(const char *s, uint64_t *out)
{
    if (!s || !*s || *s == '-' || *s == '+' || *s == ' ')
        return 0;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end)
        return 0;
    *out = v;
    return 1;
}

static int parse_double(const char *s, double *out)
{
    if (!s || !*s)
        return 0;
    char *end;
    *out = strtod(s, &end);
    return *end == '\0';
}

static int parse_rng(const char *s, ty_rng *r)
{
    if (!s || strlen(s) != 64)
        return 0;
    for (int i = 0; i < 4; i++) {
        char part[17];
        memcpy(part, s + 16 * i, 16);
        part[16] = '\0';
        char *end;
        r->s[i] = strtoull(part, &end, 16);
        if (*end)
            return 0;
    }
    return 1;
}

static int parse_metrics(const char *s, train_epoch_metrics *m, int *have)
{
    json_t *j = s ? json_loads(s, JSON_DECODE_ANY, NULL) : NULL;
    if (!j)
        return 0;
    *have = 0;
    int ok = 1;
    if (!json_is_null(j)) {
        json_int_t epoch = 0;
        ok = json_unpack(j, "{s:I, s:F, s:F, s:F, s:F, s:F, s:F}", "epoch",
                         &epoch, "train_loss", &m->train_loss, "train_accuracy",
                         &m->train_accuracy, "val_loss", &m->val_loss,
                         "val_accuracy", &m->val_accuracy, "samples_per_sec",
                         &m->samples_per_sec, "seconds", &m->seconds) == 0 &&
             epoch >= 1 && epoch <= UINT32_MAX;
        m->epoch = (uint32_t)epoch;
        /* Written since mixed precision; absent in older checkpoints. */
        json_t *ls = json_object_get(j, "loss_scale");
        json_t *sk = json_object_get(j, "skipped_steps");
        m->loss_scale = json_is_number(ls) ? json_number_value(ls) : 0.0;
        m->skipped_steps = json_is_integer(sk) && json_integer_value(sk) >= 0
                               ? (uint64_t)json_integer_value(sk)
                               : 0;
        /* Regression metrics: written since target scaling; absent or
         * null: none. */
        for (size_t i = 0; i < TY_ARRAY_LEN(REG_KEYS); i++) {
            json_t *v = json_object_get(j, REG_KEYS[i]);
            *reg_field(m, i) = json_is_number(v) ? json_number_value(v) : NAN;
        }
        *have = ok;
    }
    json_decref(j);
    return ok;
}

static ty_status restore_tensors(trainer *t, const st_file *f, ty_err *err)
{
    tensor_list tl;
    ty_status st = checkpoint_tensors(t, &tl, err);
    if (st != TY_OK)
        return st;
    if (f->count != tl.n)
        st = ty_fail(err, TY_EFORMAT, NULL,
                     "the checkpoint has %zu tensors; this job expects %zu",
                     f->count, tl.n);
    for (size_t i = 0; i < tl.n && st == TY_OK; i++) {
        const st_tensor *s = st_find(f, tl.t[i].name);
        int same = s && s->dtype == ST_F32 && s->ndim == tl.t[i].ndim;
        for (uint32_t k = 0; same && k < s->ndim; k++)
            same = s->shape[k] == tl.t[i].shape[k];
        if (!same)
            st = ty_fail(err, TY_EFORMAT, NULL,
                         "the checkpoint's tensor '%s' is missing or has the "
                         "wrong dtype or shape",
                         tl.t[i].name);
        else
            memcpy(tl.dst[i], s->data, s->nbytes);
    }
    tensor_list_free(&tl);
    return st == TY_OK ? train_state_upload(t, err) : st;
}

ty_status train_ckpt_resume(trainer *t, int *resumed, ty_err *err)
{
    *resumed = 0;
    const char *path = t->job->checkpoint_path;
    if (!path || !fs_exists(path))
        return TY_OK;
    st_file f;
    ty_status st = st_open(path, &f, err);
    if (st != TY_OK) {
        ty_err_prefix(err, "cannot resume from the checkpoint");
        return st;
    }
    json_t *run = NULL;
    const char *text = st_meta(&f, "trainyard.run");
    if (text)
        run = json_loads(text, 0, NULL);
    if (!st_meta(&f, "trainyard.checkpoint") || !run ||
        !json_equal(run, t->identity)) {
        st = ty_fail(err, TY_EINVAL, NULL,
                     "checkpoint does not match this job (it was written for "
                     "a different model, data split or hyperparameters)");
        goto done;
    }
    uint64_t epoch, step, estep, hits, seen;
    double loss_sum;
    if (!parse_u64(st_meta(&f, "trainyard.epoch"), &epoch) ||
        !parse_u64(st_meta(&f, "trainyard.step"), &step) ||
        !parse_u64(st_meta(&f, "trainyard.epoch_step"), &estep) ||
        !parse_u64(st_meta(&f, "trainyard.epoch_hits"), &hits) ||
        !parse_u64(st_meta(&f, "trainyard.epoch_seen"), &seen) ||
        !parse_double(st_meta(&f, "trainyard.epoch_loss_sum"), &loss_sum) ||
        !parse_rng(st_meta(&f, "trainyard.rng"), &t->drop_rng) ||
        !parse_metrics(st_meta(&f, "trainyard.last_epoch"), &t->last,
                       &t->have_last) ||
        epoch > UINT32_MAX || estep >= t->steps_per_epoch ||
        step != epoch * t->steps_per_epoch + estep || seen > t->n_train ||
        hits > seen) {
        st = ty_fail(err, TY_EFORMAT, NULL,
                     "the checkpoint has missing or inconsistent position "
                     "metadata");
        goto done;
    }
    if (epoch > t->hp->epochs) {
        st = ty_fail(err, TY_EINVAL, NULL,
                     "checkpoint does not match this job: it has %llu epochs "
                     "done and the job asks for %u",
                     (unsigned long long)epoch, t->hp->epochs);
        goto done;
    }
    loss_scaler scaler;
    uint64_t epoch_skipped = 0;
    loss_scaler_init(&scaler);
    if (t->precision == NN_DT_F16 &&
        (!loss_scaler_parse(&scaler, st_meta(&f, "trainyard.loss_scaler")) ||
         !parse_u64(st_meta(&f, "trainyard.epoch_skipped"), &epoch_skipped) ||
         scaler.skipped > step || epoch_skipped > scaler.skipped)) {
        st = ty_fail(err, TY_EFORMAT, NULL,
                     "the checkpoint has missing or inconsistent loss "
                     "scaler metadata");
        goto done;
    }
    if ((st = restore_tensors(t, &f, err)) != TY_OK)
        goto done;
    t->epoch_done = (uint32_t)epoch;
    t->step = step;
    t->epoch_step = estep;
    /* Skipped steps never reached the optimizer (Adam's step count). */
    t->opt.t = step - scaler.skipped;
    t->scaler = scaler;
    t->epoch_skipped = epoch_skipped;
    if (t->precision == NN_DT_F16)
        t->ws->loss_scale = scaler.scale;
    t->loss_sum = loss_sum;
    t->hits = hits;
    t->seen = seen;
    *resumed = 1;
done:
    json_decref(run);
    st_close(&f);
    return st;
}
