/*
 * table.h - the model table: the model a request's reference names, found
 * and loaded without the store, the model cache's lock or a workspace
 * pool's lock on the way of a request.
 *
 * Each thread keeps its own table: (tenant, reference) -> the store's row
 * (id, name, blob hash, training device) and the loaded model, which the
 * table holds (a model cache reference) until it is emptied; and the
 * workspace of the CPU model it ran last. A lookup shares nothing with
 * other threads but two atomic reads: the store's model counter
 * (STORE_GEN_MODELS, bumped by every model insert and delete before its API
 * call returns) and the model cache's (bumped when the cache wants its
 * entries back: a model dropped or evicted). A thread that sees either move
 * gives back all it holds and empties its table first. So a deleted model
 * is gone from the next request on, a new one is found at once, names
 * resolve to the newest model as the store says, and the cache can still
 * evict. Misses (unknown references) are not kept.
 */
#ifndef TY_SERVE_TABLE_H
#define TY_SERVE_TABLE_H

#include "common/ids.h"
#include "common/ty.h"
#include "serve/modelcache.h"
#include "store/store.h"

#define SERVE_NAME_MAX 256

typedef struct serve_table_row {
    char id[TY_ID_MAX];
    char name[SERVE_NAME_MAX]; /* "" when the model has none */
    char sha256[65];           /* its file in the blob store */
    char trained_on[16];       /* "cuda:N", "cpu", or "" (an import) */
} serve_table_row;

/* The tenant's model named by ref (by id, else by name: store_model_find's
 * rule; by_name keys the table and changes nothing else): its row into
 * *row and the loaded model into
 * *e, loaded from data_dir's blob through the cache on a miss. *e stays
 * valid until this thread's next serve_table_open (the table holds it; the
 * caller releases nothing). Errors are the store's (TY_ENOTFOUND "no model
 * with id or name '<ref>'") and the cache's (a model that does not load). */
ty_status serve_table_open(store *st, model_cache *mc, const char *data_dir,
                           const char *tenant_id, const char *ref, int by_name,
                           serve_table_row *row, model_entry **e, ty_err *err);

/* A workspace for e (from serve_table_open on this thread): for a CPU
 * model, the one this thread keeps for the model it ran last, which goes
 * back to e's pool only when the thread runs another model; NULL when out
 * of memory. Give it back with serve_table_workspace_put. On a CUDA device
 * the entry's pool is used (hold the device lock around both). */
nn_workspace *serve_table_workspace_get(model_entry *e);
void serve_table_workspace_put(model_entry *e, nn_workspace *ws);

#endif
