/*
 * table.c - the per-thread model table (see table.h): open addressing over
 * TABLE_SIZE slots, emptied when half full or when the store's models
 * change.
 */
#include "serve/table.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TABLE_SIZE 256 /* a power of two */

typedef struct {
    int used;
    int by_name;
    char tenant_id[TY_ID_MAX];
    char ref[SERVE_NAME_MAX];
    serve_table_row row;
} slot;

typedef struct {
    const store *st;
    uint64_t gen;
    int count;
    slot slots[TABLE_SIZE];
} table;

static __thread table *table_tls;
static pthread_key_t table_key;
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void table_free(void *t) { free(t); }
static void table_init(void) { pthread_key_create(&table_key, table_free); }

static uint32_t hash_of(const char *tenant_id, const char *ref, int by_name)
{
    uint32_t h = 2166136261u ^ (uint32_t)by_name;
    for (const char *s = tenant_id; *s; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    h = (h ^ 0xff) * 16777619u;
    for (const char *s = ref; *s; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

static void table_clear(table *t)
{
    for (int i = 0; i < TABLE_SIZE; i++)
        t->slots[i].used = 0;
    t->count = 0;
}

/* This thread's table, current for gen; NULL when out of memory. */
static table *table_for(store *st, uint64_t gen)
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
    }
    if (t->st != st || t->gen != gen) {
        table_clear(t);
        t->st = st;
        t->gen = gen;
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
    ty_status s;
    memset(row, 0, sizeof *row);
    if (by_name) {
        s = store_model_find(st, tenant_id, ref, row->id, &doc, row->sha256,
                             err);
    } else {
        snprintf(row->id, sizeof row->id, "%s", ref);
        s = store_model_get(st, tenant_id, ref, &doc, row->sha256, err);
    }
    if (s != TY_OK)
        return s;
    const char *name = json_string_value(json_object_get(doc, "name"));
    const char *on = json_string_value(json_object_get(doc, "trained_on"));
    snprintf(row->name, sizeof row->name, "%s", name ? name : "");
    snprintf(row->trained_on, sizeof row->trained_on, "%s", on ? on : "");
    json_decref(doc);
    return TY_OK;
}

ty_status serve_table_find(store *st, const char *tenant_id, const char *ref,
                           int by_name, serve_table_row *row, ty_err *err)
{
    /* References too long to be an id or a name are never kept. */
    if (strlen(tenant_id) >= TY_ID_MAX || strlen(ref) >= SERVE_NAME_MAX)
        return ask_store(st, tenant_id, ref, by_name, row, err);
    /* Read before the store: a change committed after the query moves the
     * counter past gen, and what is kept now goes at the next lookup. */
    uint64_t gen = store_gen_get(st, STORE_GEN_MODELS);
    table *t = table_for(st, gen);
    slot *sl = t ? slot_find(t, tenant_id, ref, by_name) : NULL;
    if (sl && sl->used) {
        *row = sl->row;
        return TY_OK;
    }
    ty_status s = ask_store(st, tenant_id, ref, by_name, row, err);
    if (s != TY_OK || !t)
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
    t->count++;
    return TY_OK;
}
