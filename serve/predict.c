/*
 * predict.c - the predict service (see predict.h): one path for REST and
 * KServe from a tenant's model to encoded outputs.
 */
#include "serve/predict.h"

#include "serve/lm.h"
#include "serve/rawrows.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/jsonutil.h"
#include "node/placement.h"
#include "models/data/dataset.h"
#include "serve/decode.h"
#include "serve/encode.h"
#include "serve/remote.h"
#include "store/blob.h"

/* A prediction in progress: the model and its input and output buffers
 * (run_free releases all three). */
typedef struct {
    serve_model m;
    const nn_net *net;
    uint64_t features; /* per example */
    uint32_t outputs;  /* per example */
    float *x, *out;
} run;

static ty_status run_open(run *rn, const serve_env *env, const char *tenant_id,
                          const char *model_id, ty_err *err)
{
    memset(rn, 0, sizeof *rn);
    ty_status s = serve_model_open(env, tenant_id, model_id, 0, &rn->m, err);
    if (s != TY_OK)
        return s;
    rn->net = model_entry_net(rn->m.e);
    rn->features = rn->m.features;
    rn->outputs = rn->m.outputs;
    return TY_OK;
}

/* Room for nx input floats and n examples' outputs. */
static ty_status run_alloc(run *rn, uint64_t nx, uint64_t n, ty_err *err)
{
    rn->x = malloc(nx * sizeof *rn->x + 1);
    rn->out = malloc(n * rn->outputs * sizeof *rn->out + 1);
    if (!rn->x || !rn->out)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    return TY_OK;
}

static void run_free(run *rn)
{
    free(rn->x);
    free(rn->out);
    serve_model_close(&rn->m);
}

static void shape_text(const json_t *shape, char *out, size_t n)
{
    char *t = json_dumps(shape, JSON_COMPACT);
    snprintf(out, n, "%s", t ? t : "?");
    free(t);
}

/* The reply of POST /v1/models/{id}/predict for n examples' outputs. */
static void predict_reply(serve_buf *o, const serve_model *m, const float *out,
                          uint64_t n)
{
    uint32_t k = m->outputs;
    serve_buf_reserve(o, 64 + n * k * 14);
    serve_buf_str(o, "{\"model\":");
    serve_buf_json_string(o, m->id);
    serve_buf_str(o, ",\"outputs\":[");
    for (uint64_t i = 0; i < n; i++) {
        serve_buf_str(o, i ? ",[" : "[");
        serve_buf_floats(o, out + i * k, k);
        serve_buf_str(o, "]");
    }
    serve_buf_str(o, "],\"predictions\":[");
    for (uint64_t i = 0; i < n; i++) {
        const float *row = out + i * k;
        if (i)
            serve_buf_str(o, ",");
        if (m->task == TY_TASK_CLASSIFICATION) {
            uint32_t best = 0;
            for (uint32_t j = 1; j < k; j++)
                if (row[j] > row[best])
                    best = j;
            const json_t *label = json_array_get(m->classes, best);
            if (label)
                serve_buf_json(o, label);
            else
                serve_buf_int(o, best);
        } else if (k == 1) {
            serve_buf_float(o, row[0]);
        } else {
            serve_buf_str(o, "[");
            serve_buf_floats(o, row, k);
            serve_buf_str(o, "]");
        }
    }
    serve_buf_str(o, "],\"device\":");
    serve_buf_json_string(o, m->device);
    serve_buf_str(o, ",\"deployment\":");
    if (m->deployment[0])
        serve_buf_json_string(o, m->deployment);
    else
        serve_buf_str(o, "null");
    serve_buf_str(o, "}");
}

ty_status serve_predict(const serve_env *env, const char *tenant_id,
                        const char *model_id, const serve_predict_body *b,
                        serve_buf *reply, double *retry_after, ty_err *err)
{
    uint64_t n = b->count;
    run rn;
    ty_status s = run_open(&rn, env, tenant_id, model_id, err);
    /* The limits before any work on the inputs. */
    if (s == TY_OK && (s = serve_model_admit(&rn.m, err)) == TY_ELIMIT)
        *retry_after = rn.m.retry_after;
    /* A body that is not JSON is answered so before a missing model. */
    if (s != TY_OK) {
        ty_err syntax = {0};
        ty_status ss = serve_predict_check(b, &syntax);
        if (ss != TY_OK) {
            *err = syntax;
            s = ss;
        }
    }
    if (s == TY_OK && rn.m.task == TY_TASK_LANGUAGE_MODELING) {
        s = serve_lm_predict(&rn.m, rn.net, b, reply, err);
        run_free(&rn);
        return s;
    }
    if (s == TY_OK && b->top_k.p)
        s = ty_fail(err, TY_EINVAL, "top_k",
                    "top_k applies to language models; this model is for %s",
                    ty_task_name(rn.m.task));
    uint64_t f = rn.features;
    const json_t *cols = s == TY_OK ? serve_tab_columns(rn.net) : NULL;
    /* a text classifier: texts (or token ids) in */
    const int texts = s == TY_OK && nn_net_token_vocab(rn.net) > 0;
    uint64_t room = cols || texts ? n : serve_predict_room(b, f);
    if (s == TY_OK)
        s = run_alloc(&rn, room * f, n, err);
    if (s == TY_OK && cols) {
        /* raw CSV rows (strings, nulls): a tree of them, as small as the
         * body the server took */
        json_t *rows = serve_tab_rows_load(b->inputs.p, b->inputs.len);
        if (rows)
            s = serve_tab_decode(cols, rows, f, rn.x, err);
        else if ((s = serve_predict_check(b, err)) == TY_OK)
            s = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
        json_decref(rows);
    } else if (s == TY_OK && texts) {
        s = serve_lm_texts(rn.net, b, (uint32_t)f, rn.x, err);
    } else if (s == TY_OK)
        s = serve_predict_decode(b, f, rn.m.input_shape, rn.x, room, err);
    if (s == TY_OK)
        s = serve_model_run(&rn.m, rn.x, n, rn.out, err);
    if (s == TY_OK) {
        predict_reply(reply, &rn.m, rn.out, n);
        if (!serve_buf_ok(reply))
            s = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    }
    run_free(&rn);
    return s;
}

ty_status serve_evaluate(const serve_env *env, const char *tenant_id,
                         const char *model_id, const char *dataset_id,
                         json_t **reply, double *retry_after, ty_err *err)
{
    run rn;
    ty_dataset ds = {0};
    json_t *ds_doc = NULL;
    int32_t *map = NULL;
    const char *id = model_id;
    char sha[65], path[PATH_MAX], ds_id[TY_ID_MAX];
    ty_status s = run_open(&rn, env, tenant_id, model_id, err);
    if (s != TY_OK)
        goto done;
    id = rn.m.id; /* model_id may have been its name */
    /* A deployed model's limits hold for its evaluations too (they run
     * here, on the model's own device, not on a replica: serve_model_run
     * is not called), and the evaluation counts in its traffic. */
    if ((s = serve_model_admit(&rn.m, err)) != TY_OK) {
        if (s == TY_ELIMIT)
            *retry_after = rn.m.retry_after;
        goto done;
    }
    /* By id or name (store_ref_resolve), after the limits as before. */
    s = store_ref_resolve(env->store, STORE_REF_DATASET, tenant_id, dataset_id,
                          ds_id, err);
    if (s == TY_OK)
        s = store_dataset_get(env->store, tenant_id, ds_id, &ds_doc, sha, err);
    if (s == TY_ENOTFOUND) {
        s = TY_EINVAL; /* a field of the body: 422 */
        snprintf(err->field, sizeof err->field, "dataset");
    }
    if (s != TY_OK)
        goto done;
    blob_path(env->data_dir, sha, path, sizeof path);
    /* a token array (text, tokens): a language model's windows over it */
    if (ty_task_parse(json_string_value(json_object_get(ds_doc, "task"))) ==
            TY_TASK_LANGUAGE_MODELING ||
        rn.m.task == TY_TASK_LANGUAGE_MODELING) {
        if (ty_task_parse(json_string_value(json_object_get(ds_doc, "task"))) !=
            (int)rn.m.task)
            s = ty_fail(err, TY_EINVAL, "dataset",
                        "dataset %s is a %s dataset and model %s a %s model",
                        ds_id,
                        json_string_value(json_object_get(ds_doc, "task")), id,
                        ty_task_name(rn.m.task));
        else
            s = serve_lm_evaluate(&rn.m, rn.net, path, ds_id, reply, err);
        goto done;
    }
    if ((s = ty_dataset_open(path, &ds, err)) != TY_OK)
        goto done;
    const nn_net *net = rn.net;
    /* a tabular model maps a CSV dataset's columns itself (its one-hot
     * layout may differ: nn_net_evaluate) */
    if (ds.task != nn_net_task(net) ||
        (ds.features != nn_net_input_features(net) &&
         !serve_tab_columns(net))) {
        char a[128], b[128];
        shape_text(json_object_get(ds.meta, "input_shape"), a, sizeof a);
        shape_text(json_object_get(nn_net_meta(net), "input_shape"), b,
                   sizeof b);
        s = ty_fail(err, TY_EINVAL, "dataset",
                    "dataset %s (%s, input shape %s) does not fit model %s "
                    "(%s, input shape %s)",
                    ds_id, ty_task_name(ds.task), a, id,
                    ty_task_name(nn_net_task(net)), b);
        goto done;
    }
    if (ds.task == TY_TASK_CLASSIFICATION) {
        const json_t *dc = json_object_get(ds.meta, "classes");
        map = calloc(json_array_size(dc) + 1, sizeof *map);
        if (!map) {
            s = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
            goto done;
        }
        if ((s = ty_dataset_class_map(
                 dc, json_object_get(nn_net_meta(net), "classes"), map, err)) !=
            TY_OK) {
            snprintf(err->field, sizeof err->field, "dataset");
            goto done;
        }
    }
    double loss = 0, accuracy = -1;
    nn_reg_metrics reg;
    model_entry_device_lock(rn.m.e);
    s = nn_net_evaluate_metrics(net, &ds, map, &loss, &accuracy, &reg, err);
    model_entry_device_unlock(rn.m.e);
    if (s != TY_OK)
        goto done;
    json_t *res =
        json_pack("{s:s, s:s, s:I, s:f}", "model", id, "dataset", ds_id,
                  "num_examples", (json_int_t)ds.num_examples, "loss", loss);
    json_object_set_new(res, "accuracy",
                        accuracy >= 0 ? json_real(accuracy) : json_null());
    /* Regression: in the target's own units (loss is the training
     * objective, on standardized targets for a model that has them). */
    if (ds.task == TY_TASK_REGRESSION) {
        const char *keys[] = {"mse", "rmse", "mae", "r2"};
        const double v[] = {reg.mse, reg.rmse, reg.mae, reg.r2};
        for (size_t i = 0; i < TY_ARRAY_LEN(keys); i++)
            json_object_set_new(res, keys[i],
                                isfinite(v[i]) ? json_real(v[i]) : json_null());
    }
    json_object_set_new(res, "device", json_string(rn.m.device));
    *reply = res;
done:
    free(map);
    ty_dataset_close(&ds);
    json_decref(ds_doc);
    run_free(&rn);
    return s;
}
