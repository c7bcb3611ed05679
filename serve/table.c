/*
 * table.c - the per-thread model table (see table.h): open addressing over
 * TABLE_SIZE slots, emptied when half full or when the store's models or
 * the model cache change.
 */
#include "serve/table.h"

#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "node/placement.h"
#include "store/blob.h"

#define TABLE_SIZE 256 /* a power of two */

typedef struct {
    int used;
    int by_name;
    char tenant_id[TY_ID_MAX];
    char ref[SERVE_NAME_MAX];
    serve_table_row row;
    model_entry *e; /* held (a cache reference); NULL until loaded */
} slot;

typedef struct {
    const store *st;
    model_cache *mc;
    uint64_t models_gen, cache_gen;
    int count;
    slot slots[TABLE_SIZE];
    /* The workspace of the CPU model this thread ran last. */
    model_entry *ws_entry;
    nn_workspace *ws;
} table;

static __thread table *table_tls;
static pthread_key_t table_key;
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

/* Gives back everything t holds and empties it. */
static void table_clear(table *t)
{
    if (t->ws) {
        model_entry_workspace_put(t->ws_entry, t->ws);
        t->ws = NULL;
        t->ws_entry = NULL;
    }
    for (int i = 0; i < TABLE_SIZE; i++) {
        slot *sl = &t->slots[i];
        if (sl->used && sl->e)
            model_cache_release(t->mc, sl->e);
        sl->used = 0;
        sl->e = NULL;
    }
    t->count = 0;
}

/* A thread's end: what its table holds goes back to the cache. */
static void table_free(void *p)
{
    table *t = p;
    table_clear(t);
    free(t);
}

static void table_init(void) { pthread_key_create(&table_key, table_free); }

static uint32_t hash_of(const char *tenant_id, const char *ref, int by_name)
{
    uint32_t h = ty_hash(tenant_id, strlen(tenant_id) + 1, /* with its NUL */
                         TY_HASH_INIT ^ (uint32_t)by_name);
    return ty_hash(ref, strlen(ref), h);
}

/* This thread's table, current for the two counters; NULL when out of
 * memory. */
static table *table_for(store *st, model_cache *mc, uint64_t models_gen,
                        uint64_t cache_gen)
{
    table *t = table_tls;
    if (!t) {
        pthread_once(&table_once, table_init);
        t = calloc(1, sizeof *t);
        if (!t || pthread_setspecific(table_key, t) != 0) {
            free(t);
            return NULL;
        }
        table_tls = t;
        t->st = st;
        t->mc = mc;
    }
    if (t->st != st || t->mc != mc || t->models_gen != models_gen ||
        t->cache_gen != cache_gen) {
        table_clear(t);
        t->st = st;
        t->mc = mc;
        t->models_gen = models_gen;
        t->cache_gen = cache_gen;
    }
    return t;
}

/* The slot holding the key, or the empty one where it goes. */
static slot *slot_find(table *t, const char *tenant_id, const char *ref,
                       int by_name)
{
    uint32_t i = hash_of(tenant_id, ref, by_name);
    for (int n = 0; n < TABLE_SIZE; n++, i++) {
        slot *sl = &t->slots[i & (TABLE_SIZE - 1)];
        if (!sl->used ||
            (sl->by_name == by_name && !strcmp(sl->tenant_id, tenant_id) &&
             !strcmp(sl->ref, ref)))
            return sl;
    }
    return NULL; /* not reached: the table is never over half full */
}

/* The store's answer. */
static ty_status ask_store(store *st, const char *tenant_id, const char *ref,
                           int by_name, serve_table_row *row, ty_err *err)
{
    json_t *doc = NULL;
    memset(row, 0, sizeof *row);
    /* By id or name either way (an id wins, else the newest of the name):
     * by_name only decides, in predict.c, whether a deployment's name
     * comes first. */
    (void)by_name;
    ty_status s =
        store_model_find(st, tenant_id, ref, row->id, &doc, row->sha256, err);
    if (s != TY_OK)
        return s;
    const char *name = json_string_value(json_object_get(doc, "name"));
    const char *on = json_string_value(json_object_get(doc, "trained_on"));
    snprintf(row->name, sizeof row->name, "%s", name ? name : "");
    snprintf(row->trained_on, sizeof row->trained_on, "%s", on ? on : "");
    json_decref(doc);
    return TY_OK;
}

/* The loaded model of row, through the cache (a reference for the
 * caller). */
static ty_status load(model_cache *mc, const char *data_dir,
                      const serve_table_row *row, model_entry **e, ty_err *err)
{
    char path[PATH_MAX];
    blob_path(data_dir, row->sha256, path, sizeof path);
    /* Served where it was trained when this server has that device
     * (trained_on: "cuda:N"; absent for imports), unless --serve-device
     * says otherwise. */
    return model_cache_get(mc, row->id, path,
                           row->trained_on[0] ? row->trained_on : NULL, e, err);
}

ty_status serve_table_open(store *st, model_cache *mc, const char *data_dir,
                           const char *tenant_id, const char *ref, int by_name,
                           serve_table_row *row, model_entry **e, ty_err *err)
{
    /* Both counters are read before the store and the cache: a change
     * after them moves a counter past what is kept now, and it goes at
     * the next lookup. */
    uint64_t models_gen = store_gen_get(st, STORE_GEN_MODELS);
    uint64_t cache_gen = model_cache_gen(mc);
    /* Ids and names are shorter than this (names: 200 characters at
     * most), so no model has a longer reference. */
    if (strlen(tenant_id) >= TY_ID_MAX || strlen(ref) >= SERVE_NAME_MAX)
        return ty_fail(err, TY_ENOTFOUND, NULL, "model %.64s... not found",
                       ref);
    table *t = table_for(st, mc, models_gen, cache_gen);
    if (!t)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    slot *sl = slot_find(t, tenant_id, ref, by_name);
    if (sl->used && sl->e) {
        *row = sl->row;
        *e = sl->e;
        return TY_OK;
    }
    ty_status s = ask_store(st, tenant_id, ref, by_name, row, err);
    if (s == TY_OK)
        s = load(mc, data_dir, row, e, err);
    if (s != TY_OK)
        return s;
    if (t->count >= TABLE_SIZE / 2) {
        table_clear(t);
        sl = slot_find(t, tenant_id, ref, by_name);
    }
    sl->used = 1;
    sl->by_name = by_name;
    snprintf(sl->tenant_id, sizeof sl->tenant_id, "%s", tenant_id);
    snprintf(sl->ref, sizeof sl->ref, "%s", ref);
    sl->row = *row;
    sl->e = *e;
    t->count++;
    return TY_OK;
}

nn_workspace *serve_table_workspace_get(model_entry *e)
{
    table *t = table_tls;
    if (!t || model_entry_device(e) != PLACE_DEVICE_CPU)
        return model_entry_workspace_get(e);
    if (t->ws && t->ws_entry == e) {
        nn_workspace *ws = t->ws;
        t->ws = NULL; /* lent out until put */
        return ws;
    }
    if (t->ws) {
        model_entry_workspace_put(t->ws_entry, t->ws);
        t->ws = NULL;
        t->ws_entry = NULL;
    }
    return model_entry_workspace_get(e);
}

void serve_table_workspace_put(model_entry *e, nn_workspace *ws)
{
    table *t = table_tls;
    if (!ws)
        return;
    if (!t || t->ws || model_entry_device(e) != PLACE_DEVICE_CPU) {
        model_entry_workspace_put(e, ws);
        return;
    }
    t->ws = ws;
    t->ws_entry = e;
}
