/*
 * blob_refs.c - which blobs the rows still reference (see store.h): the blob
 * lock, a blob's release after its row's delete, and the sweep at start of
 * blobs nothing references. The files themselves are blob.c's, which knows
 * no SQL.
 *
 * A blob may be shared by several dataset and model rows; it is removed only
 * when none references it. store_blob_release counts and removes under the
 * blob lock, so an upload of the same content (which imports the blob and
 * inserts its row under the lock) never finds its file gone; store_blob_gc
 * runs at start, before the server takes uploads. Lock order: st->blob_mu
 * before st->mu, never the reverse (the refs query takes st->mu under the
 * blob lock).
 */
#include "store/store_internal.h"

#include <dirent.h>
#include <stdio.h>
#include <string.h>

#include "store/blob.h"

void store_blob_lock(store *st) { pthread_mutex_lock(&st->blob_mu); }

void store_blob_unlock(store *st) { pthread_mutex_unlock(&st->blob_mu); }

ty_status store_blob_refs(store *st, const char *sha256, int64_t *refs,
                          ty_err *err)
{
    return db_q_int(
        st, refs, err,
        "SELECT (SELECT count(*) FROM datasets WHERE sha256 = ?1) + "
        "(SELECT count(*) FROM models WHERE sha256 = ?1) AS n",
        "s", sha256);
}

void store_blob_release(store *st, const char *sha256)
{
    int64_t refs = 1;
    ty_err err;
    pthread_mutex_lock(&st->blob_mu);
    if (store_blob_refs(st, sha256, &refs, &err) == TY_OK && refs == 0)
        blob_remove(st->data_dir, sha256, &err);
    pthread_mutex_unlock(&st->blob_mu);
}

int store_blob_gc(store *st)
{
    char root[PATH_MAX];
    snprintf(root, sizeof root, "%s/blobs", st->data_dir);
    DIR *d = opendir(root);
    if (!d)
        return 0;
    struct dirent *e;
    int removed = 0;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char sub[PATH_MAX];
        snprintf(sub, sizeof sub, "%s/%s", root, e->d_name);
        DIR *sd = opendir(sub);
        if (!sd)
            continue;
        struct dirent *f;
        while ((f = readdir(sd)) != NULL) {
            if (f->d_name[0] == '.')
                continue;
            int64_t refs = 1;
            ty_err err;
            if (strlen(f->d_name) == 64 &&
                store_blob_refs(st, f->d_name, &refs, &err) == TY_OK &&
                refs == 0 &&
                blob_remove(st->data_dir, f->d_name, &err) == TY_OK)
                removed++;
        }
        closedir(sd);
    }
    closedir(d);
    return removed;
}
