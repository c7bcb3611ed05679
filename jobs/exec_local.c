/*
 * exec_local.c - the local executor (see executor.h): training workers as
 * child processes of the server, through the supervisor, which already
 * follows their pipes and reaps them (its hooks are the service's).
 */
#include "jobs/executor.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    supervisor *sup;
    char mpirun[PATH_MAX]; /* for data-parallel jobs; "": none */
} local_exec;

static ty_status local_start(void *impl, int place, const exec_start *st,
                             json_t **placement, ty_err *err)
{
    local_exec *x = impl;
    pid_t pid = -1;
    const int ranks = st->ranks > 1 ? st->ranks : 1;
    ty_status s;
    if (ranks > 1 && st->members) {
        /* A gang of whole GPUs: each rank its member's device. */
        const char **devs = calloc((size_t)ranks * 2, sizeof *devs);
        if (!devs)
            return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
        const char **cvds = devs + ranks;
        for (int i = 0; i < ranks; i++) {
            devs[i] = st->members[i].device;
            cvds[i] = st->members[i].cvd;
        }
        s = supervisor_spawn_gang(x->sup, place, WPROTO_COMMAND, st->job_id,
                                  st->dir, devs, cvds, ranks, x->mpirun, &pid,
                                  err);
        free(devs);
    } else {
        s = supervisor_spawn_ranks(x->sup, place, WPROTO_COMMAND, st->job_id,
                                   st->dir, st->device, st->cvd, st->has_cvd,
                                   ranks, x->mpirun, &pid, err);
    }
    if (s != TY_OK)
        return s;
    *placement =
        json_pack("{s:s, s:i}", "executor", "local", "worker_pid", (int)pid);
    if (ranks > 1 && st->members) {
        /* every rank on this machine, each on its member GPU; worker_pid
         * is mpirun's, which started them */
        json_t *list = json_array();
        for (int i = 0; i < ranks; i++) {
            const exec_rank *m = &st->members[i];
            json_array_append_new(
                list,
                json_pack("{s:i, s:s, s:s, s:i, s:i, s:s}", "rank", i, "device",
                          m->device, "cuda_visible_devices", m->cvd, "slot",
                          m->slot, "gpu", m->gpu, "uuid", m->uuid));
        }
        json_object_set_new(*placement, "ranks", list);
        json_object_set_new(*placement, "launcher", json_string("mpirun"));
    } else if (ranks > 1) {
        /* every rank on this machine, on the device the job was given;
         * worker_pid is mpirun's, which started them */
        json_t *list = json_array();
        for (int i = 0; i < ranks; i++)
            json_array_append_new(
                list, json_pack("{s:i, s:s}", "rank", i, "device", st->device));
        json_object_set_new(*placement, "ranks", list);
        json_object_set_new(*placement, "launcher", json_string("mpirun"));
    }
    return TY_OK;
}

static void local_preempt(void *impl, int place)
{
    supervisor_preempt(((local_exec *)impl)->sup, place);
}

static void local_cancel(void *impl, int place)
{
    supervisor_cancel(((local_exec *)impl)->sup, place);
}

static json_t *local_status(void *impl)
{
    (void)impl;
    return json_pack("{s:s, s:b}", "executor", "local", "ok", 1);
}

static void local_destroy(void *impl) { free(impl); }

executor *exec_local_create(supervisor *sup, const char *mpirun, ty_err *err)
{
    executor *x = calloc(1, sizeof *x);
    local_exec *l = calloc(1, sizeof *l);
    if (!x || !l) {
        free(x);
        free(l);
        ty_fail(err, TY_ENOMEM, NULL, "out of memory");
        return NULL;
    }
    l->sup = sup;
    snprintf(l->mpirun, sizeof l->mpirun, "%s", mpirun ? mpirun : "");
    *x = (executor){.name = "local",
                    .impl = l,
                    .start = local_start,
                    .preempt = local_preempt,
                    .cancel = local_cancel,
                    .status = local_status,
                    .destroy = local_destroy};
    return x;
}

void exec_destroy(executor *x)
{
    if (!x)
        return;
    x->destroy(x->impl);
    free(x);
}
