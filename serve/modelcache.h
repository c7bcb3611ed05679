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

#define MODEL_CACHE_BATCH 256 /* examples per workspace pass */

typedef struct model_cache model_cache;
typedef struct model_entry model_entry;

model_cache *model_cache_create(int capacity);
/* A cache that serves each model on the device place_serve_device picks
 * for serve_device (--serve-device: PLACE_DEVICE_AUTO, -1 the CPU, or CUDA
 * device N) and the model's training device. Each CUDA device the cache
 * uses gets one execution context, made at create for an explicit
 * serve_device and on first use otherwise, which serves one prediction or
 * evaluation at a time (model_entry_device_lock). NULL with err set:
 * TY_ENOMEM, or TY_EDEVICE naming --serve-device for a binary without
 * CUDA, a device this process does not see, or a context that cannot be
 * made. */
model_cache *model_cache_create_on(int capacity, int serve_device, ty_err *err);
void model_cache_destroy(model_cache *c);

/* The loaded model `id`, loading it from path on a miss, on the device
 * chosen for a model trained on `trained_on` ("cuda:N", "cpu", or NULL for
 * an imported model). A model the server only prefers on a device (no
 * explicit --serve-device) loads on the CPU when that device's context or
 * memory fails (logged). The entry is held until model_cache_release.
 * Errors are nn_net_load's. */
ty_status model_cache_get(model_cache *c, const char *id, const char *path,
                          const char *trained_on, model_entry **out,
                          ty_err *err);
void model_cache_release(model_cache *c, model_entry *e);
/* One more hold on an entry already held (released with
 * model_cache_release): for work that outlives the request's thread's
 * hold, as a streamed generation does. */
void model_cache_hold(model_cache *c, model_entry *e);

const nn_net *model_entry_net(const model_entry *e);

/* Where the entry's net lives: PLACE_DEVICE_CPU (-1) or CUDA device N. */
int model_entry_device(const model_entry *e);

/* Held around every use of the entry's net and workspaces (workspace get,
 * predict, evaluate, workspace put) of an entry on a CUDA device, whose
 * one context serves one thread at a time; nothing for the CPU. Never call
 * model_cache_get, _release or _evict while holding it. */
void model_entry_device_lock(model_entry *e);
void model_entry_device_unlock(model_entry *e);

/* A workspace for MODEL_CACHE_BATCH examples (from the pool, or new); NULL
 * when out of memory. Give it back with model_entry_workspace_put. */
nn_workspace *model_entry_workspace_get(model_entry *e);
void model_entry_workspace_put(model_entry *e, nn_workspace *ws);

/* A counter that moves whenever the cache wants the entries held outside
 * it given back (an entry dropped, or all held when a model must load):
 * holders that keep entries across requests (serve/table.c) release theirs
 * when it has moved. Read without a lock. */
uint64_t model_cache_gen(const model_cache *c);

/* Drops `id` from the cache (a deleted model); an entry in use is freed when
 * its last user releases it. */
void model_cache_evict(model_cache *c, const char *id);

#endif
