/*
 * model.c - a tenant's model opened for one request (see model.h).
 */
#include "serve/model.h"

#include <stdio.h>
#include <string.h>

#include "node/placement.h"
#include "serve/remote.h"

/* ---- a model opened for one request ---- */

ty_status serve_model_open(const serve_env *env, const char *tenant_id,
                           const char *ref, int by_name, serve_model *m,
                           ty_err *err)
{
    memset(m, 0, sizeof *m);
    m->env = env;
    snprintf(m->tenant, sizeof m->tenant, "%s", tenant_id);
    /* A KServe name may be a deployment's: it means the model it serves. */
    char dep_model[TY_ID_MAX];
    if (by_name && deploy_find(env->deploy, tenant_id, ref, 1, dep_model)) {
        m->deployed = 1;
        m->deploy_by_name = 1;
        snprintf(m->deploy_ref, sizeof m->deploy_ref, "%s", ref);
        ref = dep_model;
        by_name = 0;
    }
    serve_table_row row;
    ty_status s = serve_table_open(env->store, env->models, env->data_dir,
                                   tenant_id, ref, by_name, &row, &m->e, err);
    if (s != TY_OK) {
        m->e = NULL;
        /* A stored model that does not load is the server's fault, not
         * the request's: 500 with the detail (naming the file) logged. */
        return s == TY_EFORMAT || s == TY_EINVAL ? TY_EIO : s;
    }
    snprintf(m->id, sizeof m->id, "%s", row.id);
    snprintf(m->name, sizeof m->name, "%s", row.name);
    const nn_net *net = model_entry_net(m->e);
    const json_t *meta = nn_net_meta(net);
    m->features = nn_net_input_features(net);
    m->outputs = nn_net_num_outputs(net);
    m->task = nn_net_task(net);
    m->input_shape = json_object_get(meta, "input_shape");
    m->classes = m->task == TY_TASK_CLASSIFICATION
                     ? json_object_get(meta, "classes")
                     : NULL;
    place_device_label(model_entry_device(m->e), m->device, sizeof m->device);
    if (!m->deployed && deploy_find(env->deploy, tenant_id, m->id, 0, NULL)) {
        m->deployed = 1;
        snprintf(m->deploy_ref, sizeof m->deploy_ref, "%s", m->id);
    }
    return TY_OK;
}

int serve_model_deployed(const serve_env *env, const char *tenant_id,
                         const char *ref, int by_name)
{
    return deploy_find(env->deploy, tenant_id, ref, by_name, NULL) ||
           (by_name && deploy_find(env->deploy, tenant_id, ref, 0, NULL));
}

ty_status serve_model_admit(serve_model *m, ty_err *err)
{
    return serve_model_admit_tokens(m, 0, err);
}

ty_status serve_model_admit_tokens(serve_model *m, uint64_t tokens, ty_err *err)
{
    if (!m->deployed || m->admitted)
        return TY_OK;
    const char *tenant = m->tenant;
    ty_status s =
        deploy_admit(m->env->deploy, tenant, m->deploy_ref, m->deploy_by_name,
                     m->id, tokens, &m->call, &m->retry_after, err);
    if (s == TY_ELIMIT && err)
        err->retry_after_s = m->retry_after;
    if (s == TY_ENOTFOUND) {
        /* Deleted since it was opened: this process serves it. */
        m->deployed = 0;
        return TY_OK;
    }
    if (s != TY_OK)
        return s;
    m->admitted = 1;
    snprintf(m->deployment, sizeof m->deployment, "%s",
             m->call.deployment_name);
    return TY_OK;
}

void serve_model_close(serve_model *m)
{
    if (m->admitted)
        deploy_finish(m->env->deploy, &m->call, m->failed);
    m->admitted = 0;
    /* The entry is the thread's model table's (serve/table.h). */
    m->e = NULL;
}

ty_status serve_model_run(serve_model *m, const float *x, uint64_t n,
                          float *out, ty_err *err)
{
    if (m->admitted) {
        ty_status s = serve_remote_run(m->env->deploy, &m->call, x, n,
                                       m->features, out, m->outputs, err);
        if (s == TY_OK) {
            snprintf(m->device, sizeof m->device, "%s", m->call.device);
            return s;
        }
        if (s != TY_ENOTFOUND) {
            m->failed = 1;
            return s;
        }
        /* The deployment moved to another model since this request
         * opened its own: it runs here, on the model it describes. */
        m->deployment[0] = '\0';
        memset(err, 0, sizeof *err);
    }
    model_entry *e = m->e;
    const nn_net *net = model_entry_net(e);
    uint64_t f = m->features;
    uint32_t k = m->outputs;
    model_entry_device_lock(e);
    nn_workspace *ws = serve_table_workspace_get(e);
    if (!ws) {
        model_entry_device_unlock(e);
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    }
    ty_status s = TY_OK;
    for (uint64_t i = 0; i < n && s == TY_OK; i += MODEL_CACHE_BATCH) {
        uint32_t b =
            n - i < MODEL_CACHE_BATCH ? (uint32_t)(n - i) : MODEL_CACHE_BATCH;
        s = nn_net_predict(net, ws, x + i * f, b, out + i * k, err);
    }
    serve_table_workspace_put(e, ws);
    model_entry_device_unlock(e);
    return s;
}
