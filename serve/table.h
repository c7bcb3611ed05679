/*
 * table.h - the model table: which model a request's reference names, and
 * where its file is, without asking the store on every request.
 *
 * Each thread keeps its own table of the answers it has had from the store
 * ((tenant, reference) -> id, name, blob hash, training device). A lookup
 * shares nothing with other threads but one atomic read of the store's
 * model counter (STORE_GEN_MODELS), which every model insert and delete
 * bumps before its API call returns; a thread that sees it move empties its
 * table first. So a deleted model is gone from the next request on, a new
 * one can be found at once, and names resolve to the newest model as the
 * store says. Misses (unknown references) are not kept.
 */
#ifndef TY_SERVE_TABLE_H
#define TY_SERVE_TABLE_H

#include "common/ids.h"
#include "common/ty.h"
#include "store/store.h"

#define SERVE_NAME_MAX 256

typedef struct serve_table_row {
    char id[TY_ID_MAX];
    char name[SERVE_NAME_MAX]; /* "" when the model has none */
    char sha256[65];           /* its file in the blob store */
    char trained_on[16];       /* "cuda:N", "cpu", or "" (an import) */
} serve_table_row;

/* The tenant's model named by ref (by id, or, when by_name, else by name:
 * store_model_find's rule) into *row. Errors are the store's
 * (TY_ENOTFOUND "model <ref> not found"). */
ty_status serve_table_find(store *st, const char *tenant_id, const char *ref,
                           int by_name, serve_table_row *row, ty_err *err);

#endif
