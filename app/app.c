/*
 * app.c - bringing the data folder up (see app.h).
 *
 * Layout of the data folder:
 *   trainyard.db (+ -wal, -shm)   metadata (store.h)
 *   admin.key                     the first admin key, mode 0600
 *   blobs/<aa>/<sha256>           datasets and model weights (blob.h)
 *   jobs/<job id>/                job.json, checkpoint, worker.log
 *   tmp/                          uploads in progress; emptied at start
 *   lock                          held (flock) while a server runs
 *
 * The folder is the server's alone: mode 0700, made so at start when group
 * or others had any access to it (with a warning), since the database
 * holds key hashes, tenants and jobs, and the blobs every tenant's data.
 */
#include "app/app.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "store/blob.h"
#include "common/log.h"

static int lock_fd = -1;

static ty_status lock_data_dir(const char *dir, ty_err *err)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/lock", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return ty_fail(err, TY_EIO, NULL, "cannot open %s: %s", path,
                       strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        close(fd);
        return ty_fail(err, TY_ECONFLICT, "--data",
                       "another trainyard server is using the data folder %s; "
                       "stop it or pass another --data folder",
                       dir);
    }
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    if (ftruncate(fd, 0) == 0 && write(fd, pid, (size_t)n) < 0) {
        /* The pid is only informative. */
    }
    lock_fd = fd;
    return TY_OK;
}

/* Makes dir 0700 when group or others have any access to it, and says so;
 * TY_EIO when it cannot (not the folder's owner). */
static ty_status private_data_dir(const char *dir, ty_err *err)
{
    struct stat st;
    if (stat(dir, &st) != 0)
        return ty_fail(err, ty_errno_status(errno), "--data",
                       "cannot read %s: %s", dir, strerror(errno));
    unsigned mode = (unsigned)st.st_mode & 07777;
    if (!(mode & 077))
        return TY_OK;
    if (chmod(dir, 0700) != 0)
        return ty_fail(err, TY_EIO, "--data",
                       "the data folder %s is mode 0%o, so group or others "
                       "can reach the database, keys and datasets, and it "
                       "cannot be made 0700: %s; run chmod 700 on it or pass "
                       "another --data folder",
                       dir, mode, strerror(errno));
    log_msg("warn",
            "the data folder %s was mode 0%o, open to group or others; made "
            "it 0700 (it holds the database, the admin key and every "
            "tenant's data)",
            dir, mode);
    return TY_OK;
}

/* What is at dir: APP_DATA_ABSENT, APP_DATA_EMPTY (a folder with no
 * entries; *mode its mode) or APP_DATA_USED (anything else, or a folder
 * that cannot be read: never treated as fresh). */
static int data_found(const char *dir, unsigned *mode)
{
    struct stat st;
    if (stat(dir, &st) != 0)
        return errno == ENOENT ? APP_DATA_ABSENT : APP_DATA_USED;
    if (!S_ISDIR(st.st_mode))
        return APP_DATA_USED;
    DIR *d = opendir(dir);
    if (!d)
        return APP_DATA_USED;
    int empty = 1;
    struct dirent *e;
    while (empty && (e = readdir(d)) != NULL)
        empty = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..");
    closedir(d);
    *mode = (unsigned)st.st_mode & 07777;
    return empty ? APP_DATA_EMPTY : APP_DATA_USED;
}

/* Empties dir (which stays). */
static ty_status empty_dir(const char *dir, ty_err *err)
{
    DIR *d = opendir(dir);
    if (!d)
        return ty_fail(err, TY_EIO, NULL, "cannot open %s: %s", dir,
                       strerror(errno));
    ty_status s = TY_OK;
    struct dirent *e;
    while (s == TY_OK && (e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char child[PATH_MAX];
        snprintf(child, sizeof child, "%s/%s", dir, e->d_name);
        s = fs_remove_tree(child, err);
    }
    closedir(d);
    return s;
}

ty_status app_init(ty_app *app, const ty_config *cfg, ty_err *err)
{
    memset(app, 0, sizeof *app);
    app->cfg = *cfg;
    /* The CPU until main resolves --train-device. */
    app->train_dev.device = PLACE_DEVICE_CPU;
    snprintf(app->train_dev.label, sizeof app->train_dev.label, "cpu");
    snprintf(app->train_dev.name, sizeof app->train_dev.name, "cpu");
    const char *dir = cfg->data_dir;
    ty_status s;
    char blobs[PATH_MAX];
    snprintf(app->tmp_dir, sizeof app->tmp_dir, "%s/tmp", dir);
    snprintf(app->jobs_dir, sizeof app->jobs_dir, "%s/jobs", dir);
    snprintf(blobs, sizeof blobs, "%s/blobs", dir);
    unsigned mode = 0;
    int found = data_found(dir, &mode);
    if ((s = fs_mkdirs(dir, 0700, err)) != TY_OK ||
        (s = lock_data_dir(dir, err)) != TY_OK)
        return s;
    /* Ours now: no other server works in it while the lock is held. */
    app->data_found = found;
    app->data_mode = mode;
    if ((s = private_data_dir(dir, err)) != TY_OK)
        return s;
    if ((s = fs_remove_tree(app->tmp_dir, err)) != TY_OK ||
        (s = fs_mkdirs(app->tmp_dir, 0700, err)) != TY_OK ||
        (s = fs_mkdirs(app->jobs_dir, 0700, err)) != TY_OK ||
        (s = fs_mkdirs(blobs, 0700, err)) != TY_OK)
        return s;
    ssize_t n =
        readlink("/proc/self/exe", app->self_exe, sizeof app->self_exe - 1);
    if (n <= 0)
        return ty_fail(err, TY_EIO, NULL, "cannot find this program's path");
    app->self_exe[n] = '\0';
    if ((s = store_open(dir, &app->store, err)) != TY_OK)
        return s;
    int64_t requeued = 0;
    if ((s = store_job_requeue_running(app->store,
                                       app->cfg.executor_slurm ? "slurm" : NULL,
                                       &requeued, err)) != TY_OK)
        return s;
    if (requeued)
        log_msg("info",
                "requeued %lld job(s) that were running when the "
                "server last stopped; they resume from their last checkpoint",
                (long long)requeued);
    int removed = store_blob_gc(app->store);
    if (removed)
        log_msg("info", "removed %d unreferenced blob(s)", removed);
    return TY_OK;
}

void app_free(ty_app *app, int failed_start)
{
    store_close(app->store);
    app->store = NULL;
    /* Before the lock goes: the folder is still this server's alone. */
    if (failed_start && lock_fd >= 0 && app->data_found != APP_DATA_USED) {
        const char *dir = app->cfg.data_dir;
        ty_err err = {0};
        ty_status s = app->data_found == APP_DATA_ABSENT
                          ? fs_remove_tree(dir, &err)
                          : empty_dir(dir, &err);
        if (s == TY_OK && app->data_found == APP_DATA_EMPTY &&
            chmod(dir, app->data_mode) != 0)
            s = ty_fail(&err, TY_EIO, NULL, "cannot restore the mode of %s: %s",
                        dir, strerror(errno));
        if (s != TY_OK)
            log_msg("warn",
                    "the start failed, and the new data folder %s could not "
                    "be left as it was found: %s",
                    dir, err.msg);
    }
    if (lock_fd >= 0) {
        close(lock_fd);
        lock_fd = -1;
    }
}

api_ctx *app_api_ctx(ty_app *app)
{
    app->api = (api_ctx){
        .store = app->store,
        .jobs = app->jobs,
        .deploy = app->deploy,
        .models = app->models,
        .inventory = app->inventory,
        .events = app->events,
        .data_dir = app->cfg.data_dir,
        .max_fetch_bytes = app->cfg.max_fetch_bytes,
        .max_upload_bytes = app->cfg.max_upload_bytes,
        .fetch_timeout_s = app->cfg.fetch_timeout_s,
        .fetch_hosts = app->cfg.fetch_hosts,
        .fetch_allow_networks = app->cfg.fetch_allow_networks,
        .min_free_bytes = app->cfg.min_free_bytes,
    };
    return &app->api;
}
