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
/* A cache whose nets live on `device`: -1 the CPU (model_cache_create),
 * else CUDA device N with one execution context for the whole cache, which
 * serves one prediction or evaluation at a time (model_entry_device_lock).
 * NULL with err set: TY_ENOMEM, or TY_EDEVICE for a binary without CUDA, a
 * device this process does not see, or a context that cannot be made. */
model_cache *model_cache_create_on(int capacity, int device, ty_err *err);
void model_cache_destroy(model_cache *c);

/* The loaded model `id`, loading it from path on a miss. The entry is held
 * until model_cache_release. Errors are nn_net_load's. */
ty_status model_cache_get(model_cache *c, const char *id, const char *path,
                          model_entry **out, ty_err *err);
void model_cache_release(model_cache *c, model_entry *e);

const nn_net *model_entry_net(const model_entry *e);

/* Held around every use of the entry's net and workspaces (workspace get,
 * predict, evaluate, workspace put) on a device cache, whose one device
 * context serves one thread at a time; nothing on a CPU cache. Never call
 * model_cache_get, _release or _evict while holding it. */
void model_entry_device_lock(model_entry *e);
void model_entry_device_unlock(model_entry *e);

/* A workspace for MODEL_CACHE_BATCH examples (from the pool, or new); NULL
 * when out of memory. Give it back with model_entry_workspace_put. */
nn_workspace *model_entry_workspace_get(model_entry *e);
void model_entry_workspace_put(model_entry *e, nn_workspace *ws);

/* Drops `id` from the cache (a deleted model); an entry in use is freed when
 * its last user releases it. */
void model_cache_evict(model_cache *c, const char *id);

#endif
