/*
 * app.h - the server process's shared state, handed to every handler.
 *
 * Owned by `trainyard serve`'s main: created at start, destroyed after the
 * HTTP daemon and the job runner have stopped.
 */
#ifndef TY_APP_H
#define TY_APP_H

#include <limits.h>
#include <pthread.h>

#include "common/ty.h"
#include "app/config.h"
#include "store/store.h"
#include "server/tls.h"
#include "api/api.h"
#include "jobs/executor.h"

struct jobs_service;
struct deploy_ctl;
struct model_cache;
struct inventory;
struct ev_hub;

typedef struct ty_app {
    ty_config cfg;
    char tmp_dir[PATH_MAX];  /* <data>/tmp: uploads in progress */
    char jobs_dir[PATH_MAX]; /* <data>/jobs/<id>: checkpoints, logs */
    char self_exe[PATH_MAX]; /* this binary, to start workers */
    store *store;
    struct jobs_service *jobs;
    struct deploy_ctl *deploy; /* serving deployments, over jobs */
    struct model_cache *models;
    int bound_port; /* the port actually listened on */
    /* Where jobs train: --train-device resolved at startup (main). */
    place_device train_dev;
    /* The GPUs and MIG slices (--devices), opened at startup (main). */
    struct inventory *inventory;
    /* Live events for SSE (events/hub.h), created by main; NULL: none
     * are published. */
    struct ev_hub *events;
    /* --tls-cert/--tls-key, loaded by main before app_init's data folder
     * work; cert NULL: plain HTTP. Freed by main. */
    tls_pem tls;
    /* What the HTTP handlers see of all this (app_api_ctx). */
    api_ctx api;
    /* --executor slurm: the slurmrestd client and the executor's settings
     * (strings borrowed from cfg); NULL/unused otherwise. */
    slurmrest *slurm;
    exec_slurm_config slurm_exec;
    char slurm_server_url[512];
    /* What app_init found at --data, set once it holds the folder's lock:
     * APP_DATA_ABSENT or APP_DATA_EMPTY (with its mode) is a fresh folder,
     * which a failed start leaves as it was (app_free). */
    int data_found;
    unsigned data_mode;
} ty_app;

enum { APP_DATA_USED = 0, APP_DATA_ABSENT, APP_DATA_EMPTY };

/* Prepares the data folder (creating it), opens the store, recovers jobs
 * left running and removes unreferenced blobs and stale temp files. On
 * failure the caller still calls app_free(app, 1). */
ty_status app_init(ty_app *app, const ty_config *cfg, ty_err *err);

/* Fills app->api from the services main has started; returns it. */
api_ctx *app_api_ctx(ty_app *app);

/* Releases what app_init acquired (the daemon and runner must be stopped).
 * failed_start: the server never listened; a data folder app_init found
 * absent or empty is then removed or emptied (its mode restored), so that
 * a failed start leaves a fresh folder as it found it. Any other folder is
 * left alone; what cannot be removed stays, with a warning. */
void app_free(ty_app *app, int failed_start);

#endif
