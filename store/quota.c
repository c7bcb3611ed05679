/*
 * quota.c - the tenant quotas the store enforces (see store.h): storage,
 * checked on every upload before its row is inserted.
 *
 * The storage quota measures the bytes of every dataset and model row the
 * tenant owns; a blob shared by two rows counts twice, so deleting one row
 * always frees what it counted. The arithmetic (store_storage_fits) is a
 * pure function, tested without a database.
 */
#include "store/store_internal.h"

#include <inttypes.h>

ty_status store_tenant_storage(store *st, const char *id, int64_t *bytes,
                               ty_err *err)
{
    return db_q_int(
        st, bytes, err,
        "SELECT (SELECT coalesce(sum(bytes), 0) FROM datasets WHERE "
        "tenant_id = ?1) + (SELECT coalesce(sum(bytes), 0) FROM "
        "models WHERE tenant_id = ?1) AS n",
        "s", id);
}

ty_status store_storage_fits(int64_t used, int64_t adding, int64_t max,
                             ty_err *err)
{
    /* max - adding rather than used + adding: neither may overflow. */
    if (max < 0 || (adding <= max && used <= max - adding))
        return TY_OK;
    return ty_fail(err, TY_ETOOBIG, NULL,
                   "this would take the tenant past its storage quota: "
                   "max_storage_bytes is %" PRId64 ", %" PRId64
                   " bytes are in use and this upload needs %" PRId64
                   " more; delete datasets or models, or ask the admin to "
                   "raise the quota",
                   max, used, adding);
}

ty_status store_storage_check(store *st, const char *tenant_id, int64_t adding,
                              ty_err *err)
{
    store_tenant_limits lim;
    int64_t used = 0;
    ty_status s = store_tenant_limits_get(st, tenant_id, &lim, err);
    if (s != TY_OK || lim.max_storage_bytes == STORE_UNLIMITED)
        return s;
    if ((s = store_tenant_storage(st, tenant_id, &used, err)) != TY_OK)
        return s;
    return store_storage_fits(used, adding, lim.max_storage_bytes, err);
}
