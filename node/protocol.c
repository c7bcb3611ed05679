/* protocol.c - the worker protocol's lines, built and read (see
 * protocol.h). The message names live in one table indexed by kind. */
#include "node/protocol.h"

#include <assert.h>
#include <math.h>
#include <string.h>

static const char *const msg_names[] = {
    [WPROTO_MSG_NONE] = "",
    [WPROTO_MSG_UNKNOWN] = "",
    [WPROTO_MSG_STARTED] = "started",
    [WPROTO_MSG_HEARTBEAT] = "heartbeat",
    [WPROTO_MSG_PROGRESS] = "progress",
    [WPROTO_MSG_EPOCH] = "epoch",
    [WPROTO_MSG_RESUME] = "resume",
    [WPROTO_MSG_DONE] = "done",
    [WPROTO_MSG_ERROR] = "error",
    [WPROTO_MSG_PREEMPTED] = "preempted",
    [WPROTO_MSG_READY] = "ready",
};
static_assert(sizeof msg_names / sizeof msg_names[0] == WPROTO_MSG_COUNT,
              "a name for every worker message");

const char *wproto_msg_name(wproto_msg kind)
{
    return kind >= 0 && kind < WPROTO_MSG_COUNT ? msg_names[kind] : "";
}

int wproto_sim_uuid_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > WPROTO_SIM_UUID_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                    "0123456789._:/-",
                    s[i]))
            return 0;
    return 1;
}

ty_status wproto_rank_env(const char *list, int index, char *out, size_t n,
                          ty_err *err)
{
    if (n)
        out[0] = '\0';
    if (!list || index < 0)
        return ty_fail(err, TY_EINVAL, NULL,
                       "no per-rank list, or a rank "
                       "below 0");
    const char *p = list;
    for (int i = 0; i < index; i++) {
        p = strchr(p, ',');
        if (!p)
            return ty_fail(err, TY_EINVAL, NULL,
                           "the gang's per-rank list has no entry for rank "
                           "%d",
                           index);
        p++;
    }
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len == 0 || len >= n)
        return ty_fail(err, TY_EINVAL, NULL,
                       "the gang's per-rank entry for rank %d is %s", index,
                       len ? "too long" : "empty");
    memcpy(out, p, len);
    out[len] = '\0';
    return TY_OK;
}

/* A line object {"event": name}; NULL when out of memory. */
static json_t *line_of(wproto_msg kind)
{
    return json_pack("{s:s}", WPROTO_F_EVENT, msg_names[kind]);
}

json_t *wproto_encode_started(const wproto_started *s)
{
    return json_pack(
        "{s:s, s:I, s:s?, s:s?, s:[s, s], s:{s:s, s:s, s:s, s:s, s:I}}",
        WPROTO_F_EVENT, msg_names[WPROTO_MSG_STARTED], WPROTO_F_PID,
        (json_int_t)s->pid, WPROTO_F_CUDA_VISIBLE_DEVICES,
        s->cuda_visible_devices, WPROTO_F_TRAINYARD_DEVICE, s->trainyard_device,
        WPROTO_F_CAPABILITIES, WPROTO_CAP_HEARTBEAT, WPROTO_CAP_PREEMPT,
        WPROTO_F_CPU_KERNELS, "provider", s->provider, "core", s->core, "isa",
        s->isa, "cpu_isa", s->cpu_isa, "gemm_gflops",
        (json_int_t)(s->gemm_gflops + 0.5));
}

json_t *wproto_encode_heartbeat(void) { return line_of(WPROTO_MSG_HEARTBEAT); }

json_t *wproto_encode_progress(const train_progress *p)
{
    json_t *ev = json_pack(
        "{s:s, s:i, s:i, s:I, s:I, s:f, s:f, s:f, s:f}", WPROTO_F_EVENT,
        msg_names[WPROTO_MSG_PROGRESS], WPROTO_F_EPOCH, (int)p->epoch,
        WPROTO_F_EPOCHS, (int)p->epochs, WPROTO_F_STEP, (json_int_t)p->step,
        WPROTO_F_TOTAL_STEPS, (json_int_t)p->total_steps, WPROTO_F_FRACTION,
        p->fraction, WPROTO_F_LOSS, p->loss, WPROTO_F_SAMPLES_PER_SEC,
        p->samples_per_sec, WPROTO_F_LR, p->lr);
    if (ev && isfinite(p->val_loss))
        json_object_set_new(ev, WPROTO_F_VAL_LOSS, json_real(p->val_loss));
    return ev;
}

json_t *wproto_encode_epoch(const train_epoch_metrics *m,
                            int64_t device_memory_used)
{
    json_t *ev = json_pack(
        "{s:s, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:I}", WPROTO_F_EVENT,
        msg_names[WPROTO_MSG_EPOCH], WPROTO_F_EPOCH, (int)m->epoch,
        WPROTO_F_TRAIN_LOSS, m->train_loss, WPROTO_F_TRAIN_ACCURACY,
        m->train_accuracy, WPROTO_F_VAL_LOSS, m->val_loss,
        WPROTO_F_VAL_ACCURACY, m->val_accuracy, WPROTO_F_SAMPLES_PER_SEC,
        m->samples_per_sec, WPROTO_F_SECONDS, m->seconds,
        WPROTO_F_PEAK_MEMORY_BYTES, (json_int_t)m->peak_memory_bytes);
    if (!ev)
        return NULL;
    if (m->device)
        json_object_set_new(ev, WPROTO_F_DEVICE, json_string(m->device));
    if (m->precision)
        json_object_set_new(ev, WPROTO_F_PRECISION, json_string(m->precision));
    if (m->loss_scale > 0)
        json_object_set_new(ev, WPROTO_F_LOSS_SCALE, json_real(m->loss_scale));
    json_object_set_new(ev, WPROTO_F_SKIPPED_STEPS,
                        json_integer((json_int_t)m->skipped_steps));
    if (m->cuda_graph >= 0)
        json_object_set_new(ev, WPROTO_F_CUDA_GRAPH,
                            json_boolean(m->cuda_graph));
    if (device_memory_used >= 0)
        json_object_set_new(ev, WPROTO_F_DEVICE_MEMORY_USED_BYTES,
                            json_integer((json_int_t)device_memory_used));
    if (m->cuda_graph_reason)
        json_object_set_new(ev, WPROTO_F_CUDA_GRAPH_REASON,
                            json_string(m->cuda_graph_reason));
    if (m->world_size > 1) {
        json_object_set_new(ev, WPROTO_F_WORLD_SIZE,
                            json_integer((json_int_t)m->world_size));
        json_object_set_new(ev, WPROTO_F_ALLREDUCE_SECONDS,
                            json_real(m->allreduce_seconds));
        json_object_set_new(ev, WPROTO_F_ALLREDUCE_SHARE,
                            json_real(m->allreduce_share));
        json_object_set_new(ev, WPROTO_F_OPTIMIZER_STATE_BYTES,
                            json_integer((json_int_t)m->optimizer_state_bytes));
        json_object_set_new(ev, WPROTO_F_COMM_BYTES,
                            json_integer((json_int_t)m->comm_bytes));
    }
    /* Language models: tokens/s and the losses as perplexities. */
    if (m->tokens_per_sec > 0) {
        json_object_set_new(ev, WPROTO_F_TOKENS_PER_SEC,
                            json_real(m->tokens_per_sec));
        json_object_set_new(ev, WPROTO_F_TRAIN_PERPLEXITY,
                            json_real(exp(m->train_loss)));
        json_object_set_new(ev, WPROTO_F_VAL_PERPLEXITY,
                            m->val_loss >= 0 ? json_real(exp(m->val_loss))
                                             : json_null());
    }
    /* Regression (train_rmse is a number): the metrics in the target's
     * units, val_* null without a validation set. */
    if (isfinite(m->train_rmse)) {
        const char *keys[] = {WPROTO_F_TRAIN_RMSE, WPROTO_F_TRAIN_MAE,
                              WPROTO_F_TRAIN_R2,   WPROTO_F_VAL_RMSE,
                              WPROTO_F_VAL_MAE,    WPROTO_F_VAL_R2};
        const double v[] = {m->train_rmse, m->train_mae, m->train_r2,
                            m->val_rmse,   m->val_mae,   m->val_r2};
        for (size_t i = 0; i < TY_ARRAY_LEN(keys); i++)
            json_object_set_new(ev, keys[i],
                                isfinite(v[i]) ? json_real(v[i]) : json_null());
    }
    return ev;
}

json_t *wproto_encode_resume(uint32_t epoch, uint64_t step)
{
    return json_pack("{s:s, s:i, s:I}", WPROTO_F_EVENT,
                     msg_names[WPROTO_MSG_RESUME], WPROTO_F_EPOCH, (int)epoch,
                     WPROTO_F_STEP, (json_int_t)step);
}

json_t *wproto_encode_preempted(int positioned, uint32_t epoch, uint64_t step,
                                int checkpoint)
{
    if (!positioned)
        return json_pack("{s:s, s:n, s:n, s:b}", WPROTO_F_EVENT,
                         msg_names[WPROTO_MSG_PREEMPTED], WPROTO_F_EPOCH,
                         WPROTO_F_STEP, WPROTO_F_CHECKPOINT, checkpoint);
    return json_pack("{s:s, s:i, s:I, s:b}", WPROTO_F_EVENT,
                     msg_names[WPROTO_MSG_PREEMPTED], WPROTO_F_EPOCH,
                     (int)epoch, WPROTO_F_STEP, (json_int_t)step,
                     WPROTO_F_CHECKPOINT, checkpoint);
}

json_t *wproto_encode_done(void) { return line_of(WPROTO_MSG_DONE); }

json_t *wproto_encode_error(const char *message)
{
    return json_pack("{s:s, s:s}", WPROTO_F_EVENT, msg_names[WPROTO_MSG_ERROR],
                     WPROTO_F_MESSAGE, message);
}

json_t *wproto_encode_ready(const wproto_ready *r)
{
    return json_pack("{s:s, s:s, s:I, s:I, s:s, s:f}", WPROTO_F_EVENT,
                     msg_names[WPROTO_MSG_READY], WPROTO_F_SOCKET, r->socket,
                     WPROTO_F_FEATURES, (json_int_t)r->features,
                     WPROTO_F_OUTPUTS, (json_int_t)r->outputs, WPROTO_F_DEVICE,
                     r->device, WPROTO_F_LOAD_SECONDS, r->load_seconds);
}

wproto_msg wproto_kind(const json_t *msg)
{
    const char *kind = json_string_value(json_object_get(msg, WPROTO_F_EVENT));
    if (!kind)
        return WPROTO_MSG_NONE;
    for (int k = WPROTO_MSG_STARTED; k < WPROTO_MSG_COUNT; k++)
        if (!strcmp(kind, msg_names[k]))
            return (wproto_msg)k;
    return WPROTO_MSG_UNKNOWN;
}

wproto_msg wproto_decode(const char *line, json_t **msg)
{
    json_t *ev = json_loads(line, 0, NULL);
    wproto_msg kind = wproto_kind(ev);
    *msg = NULL;
    if (kind == WPROTO_MSG_NONE) {
        json_decref(ev);
        return kind;
    }
    *msg = ev;
    return kind;
}
