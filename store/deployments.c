/*
 * deployments.c - serving deployments' rows (see store.h): what each
 * deployment asks for (its spec, as JSON text) and its generation, so the
 * controller (deploy/deploy.h) finds every deployment again after a restart.
 *
 * A name is unique per tenant (UNIQUE(tenant_id, name)); the insert checks
 * it first inside its transaction, so a taken name is a TY_ECONFLICT that
 * names the field rather than a constraint failure. Every write is one
 * committed transaction (the connection runs synchronous=FULL): when a
 * call returns TY_OK the change survives a crash.
 */
#include "store/store_internal.h"

#include <stdlib.h>

#include "common/jsonutil.h"

ty_status store_deployment_insert(store *st, const char *tenant_id,
                                  const char *id, const char *name,
                                  const json_t *spec, int64_t generation,
                                  ty_err *err)
{
    char now[32];
    ty_now_iso(now);
    char *text = tyjson_dumps(spec, JSON_COMPACT);
    if (!text)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    pthread_mutex_lock(&st->mu);
    json_t *rows = NULL;
    ty_status s = db_exec(st, "BEGIN IMMEDIATE", err);
    if (s != TY_OK)
        goto done;
    s = db_q(st, &rows, NULL, err,
             "SELECT id FROM deployments WHERE tenant_id = ? AND name = ?",
             "ss", tenant_id, name);
    if (s == TY_OK && json_array_size(rows) > 0)
        s = ty_fail(
            err, TY_ECONFLICT, "name",
            "a deployment named %s exists (%s); choose another name "
            "or change that one with PATCH",
            name,
            json_string_value(json_object_get(json_array_get(rows, 0), "id")));
    if (s == TY_OK)
        s = db_q(st, NULL, NULL, err,
                 "INSERT INTO deployments(id, tenant_id, name, spec, "
                 "generation, created_at, updated_at) "
                 "VALUES (?, ?, ?, ?, ?, ?, ?)",
                 "ssssiss", id, tenant_id, name, text, generation, now, now);
    if (s == TY_OK)
        s = db_exec(st, "COMMIT", err);
    if (s != TY_OK)
        db_rollback(st);
done:
    pthread_mutex_unlock(&st->mu);
    json_decref(rows);
    free(text);
    return s;
}

ty_status store_deployment_update(store *st, const char *tenant_id,
                                  const char *id, const json_t *spec,
                                  int64_t generation, ty_err *err)
{
    char now[32];
    ty_now_iso(now);
    char *text = tyjson_dumps(spec, JSON_COMPACT);
    if (!text)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    int changed = 0;
    pthread_mutex_lock(&st->mu);
    ty_status s = db_q(st, NULL, &changed, err,
                       "UPDATE deployments SET spec = ?, generation = ?, "
                       "updated_at = ? WHERE id = ? AND tenant_id = ?",
                       "sisss", text, generation, now, id, tenant_id);
    pthread_mutex_unlock(&st->mu);
    free(text);
    if (s == TY_OK && changed == 0)
        s = ty_fail(err, TY_ENOTFOUND, NULL, "deployment %s not found", id);
    return s;
}

ty_status store_deployment_delete(store *st, const char *tenant_id,
                                  const char *id, ty_err *err)
{
    int changed = 0;
    pthread_mutex_lock(&st->mu);
    ty_status s = db_q(st, NULL, &changed, err,
                       "DELETE FROM deployments WHERE id = ? AND tenant_id = ?",
                       "ss", id, tenant_id);
    pthread_mutex_unlock(&st->mu);
    if (s == TY_OK && changed == 0)
        s = ty_fail(err, TY_ENOTFOUND, NULL, "deployment %s not found", id);
    return s;
}

ty_status store_deployment_all(store *st, json_t **rows, ty_err *err)
{
    pthread_mutex_lock(&st->mu);
    ty_status s = db_q(st, rows, NULL, err,
                       "SELECT id, tenant_id, name, spec AS spec_json, "
                       "generation, created_at, updated_at FROM deployments "
                       "ORDER BY seq",
                       "");
    pthread_mutex_unlock(&st->mu);
    return s;
}
