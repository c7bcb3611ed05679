/* modelcache.c - LRU cache of loaded nets (see modelcache.h). */
#include "server/modelcache.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ids.h"

#define POOL_MAX 8

struct model_entry {
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
};

static void entry_free(model_entry *e)
{
    for (int i = 0; i < e->npool; i++)
        nn_workspace_destroy(e->pool[i]);
    nn_net_destroy(e->net);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

model_cache *model_cache_create(int capacity)
{
    model_cache *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->entries = calloc((size_t)capacity + 1, sizeof *c->entries);
    if (!c->entries) {
        free(c);
        return NULL;
    }
    c->capacity = capacity;
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
    ty_status s = nn_net_load(path, &net, err);
    if (s != TY_OK) {
        pthread_mutex_unlock(&c->mu);
        return s;
    }
    model_entry *e = calloc(1, sizeof *e);
    if (!e) {
        nn_net_destroy(net);
        pthread_mutex_unlock(&c->mu);
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory loading a model");
    }
    snprintf(e->id, sizeof e->id, "%s", id);
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
