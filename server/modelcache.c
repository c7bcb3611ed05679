/* modelcache.c - LRU cache of loaded nets (see modelcache.h).
 *
 * Locks: c->mu guards the table (and is held while a missed model loads);
 * e->mu guards an entry's workspace pool; c->device_mu, on a device cache
 * only, serializes every use of the cache's one execution context
 * (loading, predicting, evaluating, freeing nets and workspaces). Order:
 * c->mu before device_mu; nothing takes c->mu while holding device_mu. */
#include "server/modelcache.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ids.h"
#ifdef TY_HAVE_CUDA
#include "gpu/cuda/backend_cuda.h"
#endif

#define POOL_MAX 8

struct model_entry {
    model_cache *cache;
    char id[TY_ID_MAX];
    nn_net *net;
    int refs;
    int evicted;               /* freed at the last release */
    unsigned long last_used;
    pthread_mutex_t mu;        /* guards pool */
    nn_workspace *pool[POOL_MAX];
    int npool;
};

struct model_cache {
    pthread_mutex_t mu;
    int capacity;
    int count;
    unsigned long tick;
    model_entry **entries;     /* count live entries */
    /* Where the nets live: NULL and device -1 for the CPU; else CUDA
     * device `device`, through ex (owned). */
    const nn_backend *be;
    int device;
    nn_exec ex;
    pthread_mutex_t device_mu; /* device caches only */
};

static void device_lock(model_cache *c)
{
    if (c->device >= 0)
        pthread_mutex_lock(&c->device_mu);
}

static void device_unlock(model_cache *c)
{
    if (c->device >= 0)
        pthread_mutex_unlock(&c->device_mu);
}

static void entry_free(model_entry *e)
{
    model_cache *c = e->cache;
    device_lock(c);
    for (int i = 0; i < e->npool; i++)
        nn_workspace_destroy(e->pool[i]);
    nn_net_destroy(e->net);
    device_unlock(c);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

model_cache *model_cache_create(int capacity)
{
    return model_cache_create_on(capacity, -1, NULL);
}

model_cache *model_cache_create_on(int capacity, int device, ty_err *err)
{
#ifndef TY_HAVE_CUDA
    if (device >= 0) {
        ty_fail(err, TY_EDEVICE, NULL,
                "--serve-device cuda: this trainyard was built without CUDA "
                "(trainyard version lists the backends)");
        return NULL;
    }
#endif
    model_cache *c = calloc(1, sizeof *c);
    if (!c) {
        ty_fail(err, TY_ENOMEM, NULL, "out of memory");
        return NULL;
    }
    c->entries = calloc((size_t)capacity + 1, sizeof *c->entries);
    if (!c->entries) {
        free(c);
        ty_fail(err, TY_ENOMEM, NULL, "out of memory");
        return NULL;
    }
    c->capacity = capacity;
    c->device = -1;
#ifdef TY_HAVE_CUDA
    if (device >= 0) {
        char why[256] = "";
        int count = nn_cuda_device_count(why, sizeof why);
        ty_status st = TY_OK;
        if (count == 0)
            st = ty_fail(err, TY_EDEVICE, NULL,
                         "--serve-device cuda:%d: no CUDA device: %s", device,
                         why);
        else if (device >= count)
            st = ty_fail(err, TY_EDEVICE, NULL,
                         "--serve-device cuda:%d: this process sees only %d "
                         "CUDA device%s (numbered from 0)",
                         device, count, count == 1 ? "" : "s");
        else if ((st = nn_cuda_exec_init(&c->ex, device, err)) != TY_OK)
            ty_err_prefix(err, "--serve-device");
        if (st != TY_OK) {
            free(c->entries);
            free(c);
            return NULL;
        }
        c->be = &nn_backend_cuda;
        c->device = device;
        pthread_mutex_init(&c->device_mu, NULL);
    }
#endif
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

void model_cache_destroy(model_cache *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->count; i++)
        entry_free(c->entries[i]);
    free(c->entries);
#ifdef TY_HAVE_CUDA
    if (c->device >= 0) {
        nn_cuda_exec_free(&c->ex);
        pthread_mutex_destroy(&c->device_mu);
    }
#endif
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* Removes entry i from the table (caller holds c->mu). */
static void drop(model_cache *c, int i)
{
    model_entry *e = c->entries[i];
    c->entries[i] = c->entries[--c->count];
    if (e->refs == 0)
        entry_free(e);
    else
        e->evicted = 1;
}

ty_status model_cache_get(model_cache *c, const char *id, const char *path,
                          model_entry **out, ty_err *err)
{
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->count; i++) {
        if (!strcmp(c->entries[i]->id, id)) {
            model_entry *e = c->entries[i];
            e->refs++;
            e->last_used = ++c->tick;
            pthread_mutex_unlock(&c->mu);
            *out = e;
            return TY_OK;
        }
    }
    /* A miss: load under the lock, so one model is never loaded twice. */
    nn_net *net = NULL;
    ty_status s;
    if (c->device < 0) {
        s = nn_net_load(path, &net, err);
    } else {
        device_lock(c);
        s = nn_net_load_on(path, c->be, &c->ex, &net, err);
        device_unlock(c);
    }
    if (s != TY_OK) {
        pthread_mutex_unlock(&c->mu);
        return s;
    }
    model_entry *e = calloc(1, sizeof *e);
    if (!e) {
        device_lock(c);
        nn_net_destroy(net);
        device_unlock(c);
        pthread_mutex_unlock(&c->mu);
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory loading a model");
    }
    snprintf(e->id, sizeof e->id, "%s", id);
    e->cache = c;
    e->net = net;
    e->refs = 1;
    e->last_used = ++c->tick;
    pthread_mutex_init(&e->mu, NULL);
    if (c->count >= c->capacity) {
        int victim = -1;
        for (int i = 0; i < c->count; i++)
            if (c->entries[i]->refs == 0 &&
                (victim < 0 ||
                 c->entries[i]->last_used < c->entries[victim]->last_used))
                victim = i;
        if (victim >= 0)
            drop(c, victim);
    }
    if (c->count < c->capacity)
        c->entries[c->count++] = e;
    else
        e->evicted = 1; /* all in use: serve this call, free after */
    pthread_mutex_unlock(&c->mu);
    *out = e;
    return TY_OK;
}

void model_cache_release(model_cache *c, model_entry *e)
{
    pthread_mutex_lock(&c->mu);
    int free_it = --e->refs == 0 && e->evicted;
    pthread_mutex_unlock(&c->mu);
    if (free_it)
        entry_free(e);
}

const nn_net *model_entry_net(const model_entry *e) { return e->net; }

void model_entry_device_lock(model_entry *e) { device_lock(e->cache); }
void model_entry_device_unlock(model_entry *e) { device_unlock(e->cache); }

nn_workspace *model_entry_workspace_get(model_entry *e)
{
    pthread_mutex_lock(&e->mu);
    nn_workspace *ws = e->npool > 0 ? e->pool[--e->npool] : NULL;
    pthread_mutex_unlock(&e->mu);
    return ws ? ws : nn_workspace_create(e->net, MODEL_CACHE_BATCH);
}

void model_entry_workspace_put(model_entry *e, nn_workspace *ws)
{
    if (!ws)
        return;
    pthread_mutex_lock(&e->mu);
    if (e->npool < POOL_MAX) {
        e->pool[e->npool++] = ws;
        ws = NULL;
    }
    pthread_mutex_unlock(&e->mu);
    if (ws)
        nn_workspace_destroy(ws);
}

void model_cache_evict(model_cache *c, const char *id)
{
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->count; i++)
        if (!strcmp(c->entries[i]->id, id)) {
            drop(c, i);
            break;
        }
    pthread_mutex_unlock(&c->mu);
}
