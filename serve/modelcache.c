/* modelcache.c - LRU cache of loaded nets (see modelcache.h).
 *
 * Each entry lives on the CPU or on one CUDA device; each device the cache
 * uses has one execution context (dev_ctx), made at create for an
 * explicit --serve-device and on first use otherwise.
 *
 * Locks: c->mu guards the table and the making of device contexts (and is
 * held while a missed model loads); e->mu guards an entry's workspace
 * pool; a device's d->mu serializes every use of its one context
 * (loading, predicting, evaluating, freeing nets and workspaces). Order:
 * c->mu before a device's mu; nothing takes c->mu while holding one. */
#include "serve/modelcache.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ids.h"
#include "node/gen_engine.h"
#include "node/placement.h"
#include "common/log.h"
#if TRAINYARD_HAVE_CUDA
#include "gpu/cuda/backend.h"
#endif

#define POOL_MAX 8

/* One CUDA device's context. */
typedef struct {
    int device;
    int state; /* 0 not made yet, 1 ready, -1 failed */
    nn_exec ex;
    pthread_mutex_t mu; /* serializes every use of ex */
} dev_ctx;

struct model_entry {
    model_cache *cache;
    char id[TY_ID_MAX];
    nn_net *net;
    dev_ctx *dev; /* where net lives; NULL: the CPU */
    int refs;
    int evicted; /* freed at the last release */
    unsigned long last_used;
    pthread_mutex_t mu; /* guards pool */
    nn_workspace *pool[POOL_MAX];
    int npool;
};

struct model_cache {
    pthread_mutex_t mu;
    int capacity;
    int count;
    unsigned long tick;
    model_entry **entries; /* count live entries */
    /* --serve-device (AUTO, -1 the CPU, or N), and the ndev CUDA devices
     * this process sees, one context slot each (none when the cache serves
     * on the CPU only). */
    int serve_device;
    int ndev;
    dev_ctx *devs;
    /* Bumped when the cache wants its entries back from the per-thread
     * model tables (serve/table.c): an entry dropped, or none free to
     * make room. Read without c->mu. */
    uint64_t gen;
};

static void gen_bump(model_cache *c)
{
    __atomic_add_fetch(&c->gen, 1, __ATOMIC_RELEASE);
}

uint64_t model_cache_gen(const model_cache *c)
{
    return __atomic_load_n(&c->gen, __ATOMIC_ACQUIRE);
}

static void dev_lock(dev_ctx *d)
{
    if (d)
        pthread_mutex_lock(&d->mu);
}

static void dev_unlock(dev_ctx *d)
{
    if (d)
        pthread_mutex_unlock(&d->mu);
}

/* Device `device`'s context, made now if it was not (caller holds c->mu,
 * or is create). NULL with err set when it cannot be made; a failure is
 * kept, so a broken device is not retried on every request. */
static dev_ctx *dev_open(model_cache *c, int device, ty_err *err)
{
    if (device < 0 || device >= c->ndev) {
        ty_fail(err, TY_EDEVICE, NULL, "cuda:%d is not a device of this server",
                device);
        return NULL;
    }
    dev_ctx *d = &c->devs[device];
#if TRAINYARD_HAVE_CUDA
    if (d->state == 0)
        d->state = nn_cuda_exec_init(&d->ex, device, err) == TY_OK ? 1 : -1;
    else if (d->state < 0)
        ty_fail(err, TY_EDEVICE, NULL,
                "cuda:%d: its context could not be made earlier", device);
#else
    d->state = -1;
    ty_fail(err, TY_EDEVICE, NULL, "this trainyard was built without CUDA");
#endif
    return d->state > 0 ? d : NULL;
}

static void entry_free(model_entry *e)
{
    /* a language model's generation cache outlives its requests (for
     * the prefix cache): it goes before its network */
    gen_engine_forget(e->net);
    dev_lock(e->dev);
    for (int i = 0; i < e->npool; i++)
        nn_workspace_destroy(e->pool[i]);
    nn_net_destroy(e->net);
    dev_unlock(e->dev);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

model_cache *model_cache_create(int capacity)
{
    return model_cache_create_on(capacity, PLACE_DEVICE_CPU, NULL);
}

model_cache *model_cache_create_on(int capacity, int serve_device, ty_err *err)
{
    model_cache *c = calloc(1, sizeof *c);
    if (!c ||
        !(c->entries = calloc((size_t)capacity + 1, sizeof *c->entries))) {
        free(c);
        ty_fail(err, TY_ENOMEM, NULL, "out of memory");
        return NULL;
    }
    c->capacity = capacity;
    c->serve_device = serve_device;
    /* Serving on the CPU only asks nothing of CUDA. */
    char why[256] = "";
    int count = serve_device == PLACE_DEVICE_CPU
                    ? 0
                    : place_cuda_count(why, sizeof why);
    int d = PLACE_DEVICE_CPU;
    if (serve_device >= 0 && place_resolve("--serve-device", serve_device,
                                           count, why, &d, err) != TY_OK) {
        free(c->entries);
        free(c);
        return NULL;
    }
    if (count > 0 && !(c->devs = calloc((size_t)count, sizeof *c->devs))) {
        free(c->entries);
        free(c);
        ty_fail(err, TY_ENOMEM, NULL, "out of memory");
        return NULL;
    }
    c->ndev = count;
    for (int i = 0; i < c->ndev; i++) {
        c->devs[i].device = i;
        pthread_mutex_init(&c->devs[i].mu, NULL);
    }
    pthread_mutex_init(&c->mu, NULL);
    if (d >= 0 && !dev_open(c, d, err)) {
        ty_err_prefix(err, "--serve-device");
        model_cache_destroy(c);
        return NULL;
    }
    return c;
}

void model_cache_destroy(model_cache *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->count; i++)
        entry_free(c->entries[i]);
    free(c->entries);
    for (int i = 0; i < c->ndev; i++) {
#if TRAINYARD_HAVE_CUDA
        if (c->devs[i].state > 0)
            nn_cuda_exec_free(&c->devs[i].ex);
#endif
        pthread_mutex_destroy(&c->devs[i].mu);
    }
    free(c->devs);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* Removes entry i from the table (caller holds c->mu). */
static void drop(model_cache *c, int i)
{
    model_entry *e = c->entries[i];
    gen_bump(c);
    c->entries[i] = c->entries[--c->count];
    if (e->refs == 0)
        entry_free(e);
    else
        e->evicted = 1;
}

/* Loads path on the device chosen for trained_on (caller holds c->mu):
 * *dev gets that device's context, or NULL for the CPU. */
static ty_status load(model_cache *c, const char *id, const char *path,
                      const char *trained_on, nn_net **net, dev_ctx **dev,
                      ty_err *err)
{
    *dev = NULL;
    int want = place_serve_device(c->serve_device, trained_on, c->ndev);
    if (want < 0)
        return nn_net_load(path, net, err);
    ty_err why = {0};
    ty_status s = TY_EDEVICE;
    dev_ctx *d = dev_open(c, want, &why);
#if TRAINYARD_HAVE_CUDA
    if (d) {
        dev_lock(d);
        s = nn_net_load_on(path, &nn_backend_cuda, &d->ex, net, &why);
        dev_unlock(d);
    }
#endif
    if (s == TY_OK) {
        *dev = d;
        return TY_OK;
    }
    /* The operator's --serve-device is kept to; the device a model came
     * from is only a preference, and the CPU serves when it fails. */
    if (c->serve_device != PLACE_DEVICE_AUTO) {
        *err = why;
        return s;
    }
    log_msg_limited(id, "warn", "model %s: serving on the CPU, not cuda:%d: %s",
                    id, want, why.msg);
    return nn_net_load(path, net, err);
}

ty_status model_cache_get(model_cache *c, const char *id, const char *path,
                          const char *trained_on, model_entry **out,
                          ty_err *err)
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
    dev_ctx *d = NULL;
    ty_status s = load(c, id, path, trained_on, &net, &d, err);
    if (s != TY_OK) {
        pthread_mutex_unlock(&c->mu);
        return s;
    }
    model_entry *e = calloc(1, sizeof *e);
    if (!e) {
        dev_lock(d);
        nn_net_destroy(net);
        dev_unlock(d);
        pthread_mutex_unlock(&c->mu);
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory loading a model");
    }
    snprintf(e->id, sizeof e->id, "%s", id);
    e->cache = c;
    e->net = net;
    e->dev = d;
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
    if (c->count < c->capacity) {
        c->entries[c->count++] = e;
    } else {
        e->evicted = 1; /* all in use: serve this call, free after */
        gen_bump(c);    /* and ask the threads' tables for theirs */
    }
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

void model_cache_hold(model_cache *c, model_entry *e)
{
    pthread_mutex_lock(&c->mu);
    e->refs++;
    pthread_mutex_unlock(&c->mu);
}

const nn_net *model_entry_net(const model_entry *e) { return e->net; }

int model_entry_device(const model_entry *e)
{
    return e->dev ? e->dev->device : PLACE_DEVICE_CPU;
}

void model_entry_device_lock(model_entry *e) { dev_lock(e->dev); }
void model_entry_device_unlock(model_entry *e) { dev_unlock(e->dev); }

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
