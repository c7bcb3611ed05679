/*
 * modelcache.h - trained models kept loaded for predictions.
 *
 * Up to `capacity` nets stay in memory, least recently used evicted first
 * (never one in use). Each cached model has a small pool of workspaces, so
 * concurrent predictions on one model do not allocate per call once warm.
 */
#ifndef TY_MODELCACHE_H
#define TY_MODELCACHE_H

#include "common/ty.h"
#include "models/nn.h"

#define MODEL_CACHE_BATCH 256   /* examples per workspace pass */

typedef struct model_cache model_cache;
typedef struct model_entry model_entry;

model_cache *model_cache_create(int capacity);
void model_cache_destroy(model_cache *c);

/* The loaded model `id`, loading it from path on a miss. The entry is held
 * until model_cache_release. Errors are nn_net_load's. */
ty_status model_cache_get(model_cache *c, const char *id, const char *path,
                          model_entry **out, ty_err *err);
void model_cache_release(model_cache *c, model_entry *e);

const nn_net *model_entry_net(const model_entry *e);

/* A workspace for MODEL_CACHE_BATCH examples (from the pool, or new); NULL
 * when out of memory. Give it back with model_entry_workspace_put. */
nn_workspace *model_entry_workspace_get(model_entry *e);
void model_entry_workspace_put(model_entry *e, nn_workspace *ws);

/* Drops `id` from the cache (a deleted model); an entry in use is freed when
 * its last user releases it. */
void model_cache_evict(model_cache *c, const char *id);

#endif
