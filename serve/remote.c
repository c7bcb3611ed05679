/*
 * remote.c - predicts on a deployment's replicas (see remote.h).
 *
 * Each thread keeps a few connections, one per replica it talked to
 * lately, keyed by the replica's serial (unique over the server's life, so
 * a connection is never reused for a different replica at the same
 * socket path). A call blocks the thread: deployed predicts run on the
 * server's serving threads (http_req_offload_wait), whose number bounds
 * the requests a server has in flight to its replicas, and one tenant's
 * share of them the requests that tenant has.
 */
#include "serve/remote.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define CONNS 8

static _Thread_local struct {
    uint64_t serial;
    int fd;
    uint64_t used; /* for eviction: the call count when last used */
} conns[CONNS];
static _Thread_local uint64_t calls;
static _Thread_local uint32_t seq;

/* This thread's connection to replica serial at path: its fd, or -1. */
static int conn_get(uint64_t serial, const char *path, ty_err *err)
{
    int victim = 0;
    calls++;
    for (int i = 0; i < CONNS; i++) {
        if (conns[i].serial == serial && conns[i].fd > 0) {
            conns[i].used = calls;
            return conns[i].fd;
        }
        if (conns[i].used < conns[victim].used)
            victim = i;
    }
    int fd = rframe_connect(path, err);
    if (fd < 0)
        return -1;
    if (conns[victim].fd > 0)
        close(conns[victim].fd);
    conns[victim].serial = serial;
    conns[victim].fd = fd;
    conns[victim].used = calls;
    return fd;
}

static void conn_drop(uint64_t serial)
{
    for (int i = 0; i < CONNS; i++)
        if (conns[i].serial == serial && conns[i].fd > 0) {
            close(conns[i].fd);
            conns[i].fd = 0;
            conns[i].serial = 0;
            conns[i].used = 0;
        }
}

/* One replica's answer for all n rows, in frames of RFRAME_MAX_ROWS. */
static ty_status call_rows(int fd, const float *x, uint64_t n, uint64_t f,
                           float *out, uint32_t k, rframe_call_info *info,
                           ty_err *err)
{
    ty_status s = TY_OK;
    for (uint64_t i = 0; i < n && s == TY_OK; i += RFRAME_MAX_ROWS) {
        uint64_t rows = n - i < RFRAME_MAX_ROWS ? n - i : RFRAME_MAX_ROWS;
        s = rframe_call(fd, ++seq, x + i * f, (uint32_t)rows, (uint32_t)f,
                        out + i * k, k, info, err);
    }
    return s;
}

ty_status serve_remote_run(struct deploy_ctl *ctl, deploy_call *c,
                           const float *x, uint64_t n, uint64_t f, float *out,
                           uint32_t k, ty_err *err)
{
    if (f == 0 || f > RFRAME_MAX_COLS ||
        (uint64_t)RFRAME_MAX_ROWS * f * sizeof(float) > RFRAME_MAX_BYTES)
        return ty_fail(err, TY_EINVAL, NULL,
                       "the model's input of %llu values is too big for a "
                       "replica",
                       (unsigned long long)f);
    uint64_t avoid = 0;
    ty_status s = TY_EDEVICE;
    for (int attempt = 0; attempt < 2; attempt++) {
        /* The server's --replica-wait: a cold start, a replacement after a
         * crash. */
        s = deploy_pick(ctl, c, avoid, -1, err);
        if (s != TY_OK)
            return s;
        rframe_call_info info = {0};
        int fd = conn_get(c->serial, c->socket, err);
        s = fd < 0 ? TY_EIO : call_rows(fd, x, n, f, out, k, &info, err);
        deploy_unpick(ctl, c, s == TY_OK, s == TY_OK ? &info : NULL);
        if (s == TY_OK)
            return TY_OK;
        if (s != TY_EIO && s != TY_ECONFLICT && s != TY_EFORMAT)
            return s; /* the replica's own answer: another would say it too */
        conn_drop(c->serial);
        avoid = c->serial;
    }
    /* The details (socket paths) are the server's: the log has them. */
    char why[sizeof err->msg];
    snprintf(why, sizeof why, "%s", err->msg);
    return ty_fail(err, TY_EDEVICE, NULL,
                   "no replica of deployment %s could answer (%.300s)",
                   c->deployment_name, why);
}

ty_status serve_remote_gen_open(struct deploy_ctl *ctl, deploy_call *c,
                                const rframe_gen_req *r, const uint32_t *ids,
                                uint64_t avoid, int *fd, ty_err *err)
{
    *fd = -1;
    ty_status s = TY_EDEVICE;
    for (int attempt = 0; attempt < 2; attempt++) {
        if ((s = deploy_pick(ctl, c, avoid, -1, err)) != TY_OK)
            return s;
        *fd = rframe_connect(c->socket, err);
        s = *fd < 0 ? TY_EIO : rframe_gen_send(*fd, r, ids, err);
        if (s == TY_OK)
            return TY_OK;
        serve_remote_gen_close(ctl, c, *fd, 0);
        *fd = -1;
        avoid = c->serial;
    }
    char why[sizeof err->msg];
    snprintf(why, sizeof why, "%s", err->msg);
    return ty_fail(err, TY_EDEVICE, NULL,
                   "no replica of deployment %s could answer (%.300s)",
                   c->deployment_name, why);
}

void serve_remote_gen_close(struct deploy_ctl *ctl, deploy_call *c, int fd,
                            int ok)
{
    if (fd >= 0)
        close(fd);
    deploy_unpick(ctl, c, ok, NULL);
}
