/*
 * refs.c - a tenant's dataset, model or job named by reference (see
 * store.h's store_ref_resolve): the one place that says what a name means.
 *
 * An id always wins: it is looked up first, through the table's unique
 * index on id. Only when no row of the tenant has that id is the reference
 * taken as a name, and then the newest row of that name wins: the latest
 * created_at (ISO 8601 to the millisecond, so text order is time order),
 * and on an equal created_at the row inserted last (seq). Names are not
 * unique, so this is the documented tie-break, not an accident of the
 * query plan. Both queries carry the tenant: another tenant's rows are
 * never read, whether the reference is an id or a name.
 */
#include "store/store_internal.h"

#include <assert.h>
#include <stdio.h>

/* What differs between the kinds: the noun in messages and the two
 * queries (?1 the reference, ?2 the tenant; one column "id"). */
typedef struct {
    const char *noun;
    const char *by_id, *by_name;
} ref_kind;

#define REF_BY_ID(table) \
    "SELECT id FROM " table " WHERE id = ?1 AND tenant_id = ?2"
#define REF_BY_NAME(table, name)                                       \
    "SELECT id FROM " table " WHERE tenant_id = ?2 AND " name " = ?1 " \
    "ORDER BY created_at DESC, seq DESC LIMIT 1"

static const ref_kind ref_kinds[] = {
    [STORE_REF_DATASET] = {"dataset", REF_BY_ID("datasets"),
                           REF_BY_NAME("datasets",
                                       "json_extract(doc, '$.name')")},
    [STORE_REF_MODEL] = {"model", REF_BY_ID("models"),
                         REF_BY_NAME("models", "json_extract(doc, '$.name')")},
    [STORE_REF_JOB] = {"job", REF_BY_ID("jobs"), REF_BY_NAME("jobs", "name")},
};
static_assert(TY_ARRAY_LEN(ref_kinds) == STORE_REF_KIND_COUNT,
              "every reference kind needs its queries");

const char *store_ref_noun(store_ref_kind kind)
{
    return (unsigned)kind < STORE_REF_KIND_COUNT ? ref_kinds[kind].noun : "?";
}

ty_status db_ref_resolve(store *st, store_ref_kind kind, const char *tenant_id,
                         const char *ref, char id[TY_ID_MAX], ty_err *err)
{
    const ref_kind *k = &ref_kinds[kind];
    json_t *rows = NULL;
    ty_status s = db_q(st, &rows, NULL, err, k->by_id, "ss", ref, tenant_id);
    if (s == TY_OK && json_array_size(rows) == 0) {
        json_decref(rows);
        rows = NULL;
        s = db_q(st, &rows, NULL, err, k->by_name, "ss", ref, tenant_id);
    }
    if (s != TY_OK)
        return s;
    const char *found =
        json_string_value(json_object_get(json_array_get(rows, 0), "id"));
    if (!found) {
        json_decref(rows);
        return ty_fail(err, TY_ENOTFOUND, NULL,
                       "no %s with id or name '%.200s'", k->noun, ref);
    }
    snprintf(id, TY_ID_MAX, "%s", found);
    json_decref(rows);
    return TY_OK;
}

ty_status store_ref_resolve(store *st, store_ref_kind kind,
                            const char *tenant_id, const char *ref,
                            char id[TY_ID_MAX], ty_err *err)
{
    if ((unsigned)kind >= STORE_REF_KIND_COUNT || !ref)
        return ty_fail(err, TY_EINVAL, NULL, "no reference to resolve");
    pthread_mutex_lock(&st->mu);
    ty_status s = db_ref_resolve(st, kind, tenant_id, ref, id, err);
    pthread_mutex_unlock(&st->mu);
    return s;
}
