/*
 * exec_local.c - the local executor (see executor.h): training workers as
 * child processes of the server, through the supervisor, which already
 * follows their pipes and reaps them (its hooks are the service's).
 */
#include "jobs/executor.h"

#include <stdlib.h>

typedef struct {
    supervisor *sup;
} local_exec;

static ty_status local_start(void *impl, int place, const exec_start *st,
                             json_t **placement, ty_err *err)
{
    local_exec *x = impl;
    pid_t pid = -1;
    ty_status s = supervisor_spawn(x->sup, place, WPROTO_COMMAND, st->job_id,
                                   st->dir, st->device, st->cvd, st->has_cvd,
                                   &pid, err);
    if (s == TY_OK)
        *placement = json_pack("{s:s, s:i}", "executor", "local",
                               "worker_pid", (int)pid);
    return s;
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

executor *exec_local_create(supervisor *sup, ty_err *err)
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
