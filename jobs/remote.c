/*
 * remote.c - the job service's side of the remote worker protocol
 * (node/wremote.h): what a worker started by Slurm asks of the server over
 * HTTP, each request authenticated by its attempt's token through the
 * executor (exec_slurm_auth). The worker gets its job folder's job.json
 * with blobs named by content instead of paths, downloads only the blobs
 * its job names, and uploads its checkpoint, model and log tail into the
 * job folder on the server, where a local worker would have written them:
 * every later step (resume, the model's registration) is the same for
 * both executors.
 */
#include "jobs/service.h"
#include "jobs/state.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "common/sha256.h"
#include "node/wremote.h"
#include "store/blob.h"

#define JOB_FILE_LIMIT (1u << 20)

/* The job folder of the current attempt of job_id whose token this is,
 * into dir. */
static ty_status attempt_dir(jobs_service *r, const char *job_id,
                             const char *token, char dir[PATH_MAX], ty_err *err)
{
    if (!exec_is_slurm(r->exec))
        return ty_fail(err, TY_ENOTFOUND, NULL,
                       "this server runs its workers itself");
    pthread_mutex_lock(&r->mu);
    int place = -1;
    ty_status s = exec_slurm_auth(r->exec, job_id, token, &place, err);
    const char *d = s == TY_OK ? svc_run_dir(r, place) : NULL;
    if (s == TY_OK && !d)
        s = ty_fail(err, TY_ECONFLICT, NULL, "this attempt of job %s is over",
                    job_id);
    if (s == TY_OK)
        snprintf(dir, PATH_MAX, "%s", d);
    pthread_mutex_unlock(&r->mu);
    return s;
}

ty_status jobs_worker_auth(jobs_service *r, const char *job_id,
                           const char *token, ty_err *err)
{
    if (!exec_is_slurm(r->exec))
        return ty_fail(err, TY_EINVAL, NULL,
                       "unknown worker token (this server runs its workers "
                       "itself)");
    char dir[PATH_MAX];
    return attempt_dir(r, job_id, token, dir, err);
}

/* {"sha256", "bytes"} of the blob at path (its name is its sha256). */
static json_t *blob_ref(const char *path)
{
    const char *slash = strrchr(path, '/');
    const char *sha = slash ? slash + 1 : path;
    if (strlen(sha) != 64)
        return NULL;
    return json_pack("{s:s, s:I}", WREMOTE_F_SHA256, sha, WREMOTE_F_BYTES,
                     (json_int_t)fs_file_size(path));
}

static ty_status read_job_file(const char *dir, json_t **out, ty_err *err)
{
    char p[PATH_MAX], *text = NULL;
    size_t len = 0;
    snprintf(p, sizeof p, "%s/%s", dir, WPROTO_JOB_FILE);
    ty_status s = fs_read_all(p, JOB_FILE_LIMIT, &text, &len, err);
    if (s != TY_OK)
        return s;
    json_error_t je;
    json_t *doc = json_loadb(text, len, 0, &je);
    free(text);
    if (!json_is_object(doc)) {
        json_decref(doc);
        return ty_fail(err, TY_EIO, NULL, "the job's file cannot be read back");
    }
    *out = doc;
    return TY_OK;
}

/* The attempt's folder and its job.json (new reference). */
static ty_status attempt_job_file(jobs_service *r, const char *job_id,
                                  const char *token, char dir[PATH_MAX],
                                  json_t **doc, ty_err *err)
{
    ty_status s = attempt_dir(r, job_id, token, dir, err);
    return s == TY_OK ? read_job_file(dir, doc, err) : s;
}

ty_status jobs_worker_job(jobs_service *r, const char *job_id,
                          const char *token, json_t **out, ty_err *err)
{
    char dir[PATH_MAX];
    json_t *doc = NULL;
    ty_status s = attempt_job_file(r, job_id, token, dir, &doc, err);
    if (s != TY_OK)
        return s;
    /* the model it starts from travels as a blob too */
    const char *init =
        json_string_value(json_object_get(doc, WPROTO_JOB_INIT_PATH));
    if (init) {
        json_object_set_new(doc, WREMOTE_F_INIT, blob_ref(init));
        json_object_del(doc, WPROTO_JOB_INIT_PATH);
    }
    const char *ds =
        json_string_value(json_object_get(doc, WPROTO_JOB_DATASET_PATH));
    json_object_set_new(doc, WREMOTE_F_DATASET,
                        ds ? blob_ref(ds) : json_null());
    json_object_del(doc, WPROTO_JOB_DATASET_PATH);
    json_t *val = json_object_get(doc, WPROTO_JOB_VALIDATION);
    const char *vds =
        json_string_value(json_object_get(val, WPROTO_JOB_DATASET_PATH));
    if (vds)
        json_object_set_new(
            doc, WPROTO_JOB_VALIDATION,
            json_pack("{s:o}", WREMOTE_F_DATASET, blob_ref(vds)));
    char ckpt[PATH_MAX], sha[65];
    snprintf(ckpt, sizeof ckpt, "%s/checkpoint.safetensors", dir);
    ty_err e2 = {0};
    if (fs_exists(ckpt) && sha256_file_hex(ckpt, sha, &e2) == TY_OK)
        json_object_set_new(doc, WPROTO_F_CHECKPOINT,
                            json_pack("{s:s, s:I}", WREMOTE_F_SHA256, sha,
                                      WREMOTE_F_BYTES,
                                      (json_int_t)fs_file_size(ckpt)));
    else
        json_object_set_new(doc, WPROTO_F_CHECKPOINT, json_null());
    json_object_del(doc, WPROTO_JOB_CHECKPOINT_PATH);
    json_object_del(doc, WPROTO_JOB_MODEL_PATH);
    *out = doc;
    return TY_OK;
}

/* Whether sha names a blob of the job's file (its dataset, validation
 * dataset or init model). */
static int job_names_blob(const json_t *doc, const char *sha)
{
    const char *paths[3] = {
        json_string_value(json_object_get(doc, WPROTO_JOB_DATASET_PATH)),
        json_string_value(
            json_object_get(json_object_get(doc, WPROTO_JOB_VALIDATION),
                            WPROTO_JOB_DATASET_PATH)),
        json_string_value(json_object_get(doc, WPROTO_JOB_INIT_PATH))};
    for (int i = 0; i < 3; i++) {
        const char *slash = paths[i] ? strrchr(paths[i], '/') : NULL;
        if (slash && !strcmp(slash + 1, sha))
            return 1;
    }
    return 0;
}

ty_status jobs_worker_blob(jobs_service *r, const char *job_id,
                           const char *token, const char *sha256,
                           char path[PATH_MAX], ty_err *err)
{
    char dir[PATH_MAX];
    json_t *doc = NULL;
    ty_status s = attempt_job_file(r, job_id, token, dir, &doc, err);
    if (s != TY_OK)
        return s;
    int named = sha256 && strlen(sha256) == 64 && job_names_blob(doc, sha256);
    json_decref(doc);
    if (!named)
        return ty_fail(err, TY_ENOTFOUND, NULL, "job %s names no such blob",
                       job_id);
    blob_path(r->env.data_dir, sha256, path, PATH_MAX);
    return TY_OK;
}

ty_status jobs_worker_checkpoint(jobs_service *r, const char *job_id,
                                 const char *token, char path[PATH_MAX],
                                 char sha[65], ty_err *err)
{
    char dir[PATH_MAX];
    ty_status s = attempt_dir(r, job_id, token, dir, err);
    if (s != TY_OK)
        return s;
    snprintf(path, PATH_MAX, "%s/checkpoint.safetensors", dir);
    if (!fs_exists(path))
        return ty_fail(err, TY_ENOTFOUND, NULL, "job %s has no checkpoint yet",
                       job_id);
    return sha256_file_hex(path, sha, err);
}

/* The file in the job folder an upload of `what` replaces. */
static const char *upload_name(const char *what)
{
    if (!strcmp(what, "checkpoint"))
        return "checkpoint.safetensors";
    if (!strcmp(what, "model"))
        return "model.safetensors";
    if (!strcmp(what, "log"))
        return WPROTO_LOG_FILE;
    return NULL;
}

ty_status jobs_worker_upload(jobs_service *r, const char *job_id,
                             const char *token, const char *what,
                             const char *tmp_path, const char *sha256,
                             json_t **reply, ty_err *err)
{
    const char *name = upload_name(what);
    if (!name)
        return ty_fail(err, TY_ENOTFOUND, NULL, "no such upload");
    char dir[PATH_MAX];
    ty_status s = attempt_dir(r, job_id, token, dir, err);
    if (s != TY_OK)
        return s;
    char got[65];
    if ((s = sha256_file_hex(tmp_path, got, err)) != TY_OK)
        return s;
    int64_t bytes = fs_file_size(tmp_path);
    /* The log is a courtesy copy; checkpoints and models must arrive
     * whole, as the worker hashed them. */
    if (strcmp(what, "log") &&
        (!sha256 || strlen(sha256) != 64 || strcmp(sha256, got)))
        return ty_fail(err, TY_EINVAL, WREMOTE_F_SHA256,
                       "the upload's sha256 does not match its content "
                       "(%s)",
                       got);
    char final[PATH_MAX], have[65];
    snprintf(final, sizeof final, "%s/%s", dir, name);
    ty_err e2 = {0};
    /* Hashed only when the size says it may be the same content: an
     * epoch's new checkpoint is not read back in full for nothing. */
    if (strcmp(what, "log") && fs_file_size(final) == bytes &&
        sha256_file_hex(final, have, &e2) == TY_OK && !strcmp(have, got)) {
        /* A retried upload: already stored. */
        unlink(tmp_path);
    } else {
        /* Whole on disk before it takes the name: a 2xx means stored. */
        int fd = open(tmp_path, O_RDONLY);
        if (fd < 0)
            return ty_fail(err, TY_EIO, NULL, "cannot reopen the upload");
        s = fs_fsync_fd(fd, "the upload", err);
        close(fd);
        if (s == TY_OK)
            s = fs_rename_durable(tmp_path, final, err);
        if (s != TY_OK)
            return s;
    }
    *reply = json_pack("{s:s, s:I}", WREMOTE_F_SHA256, got, WREMOTE_F_BYTES,
                       (json_int_t)bytes);
    return TY_OK;
}

ty_status jobs_worker_events(jobs_service *r, const char *job_id,
                             const char *token, const json_t *lines,
                             const char **action, ty_err *err)
{
    if (!exec_is_slurm(r->exec))
        return ty_fail(err, TY_ENOTFOUND, NULL,
                       "this server runs its workers itself");
    return exec_slurm_deliver(r->exec, &r->mu, job_id, token, lines, action,
                              err);
}

json_t *jobs_executor_status(jobs_service *r)
{
    return r && r->exec ? r->exec->status(r->exec->impl) : NULL;
}
