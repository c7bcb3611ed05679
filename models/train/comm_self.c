/*
 * comm_self.c - the world-1 communicator (comm.h): what train_run uses when
 * a job gives no comm. Every collective is the identity but for
 * allreduce's scale, so the trainer's arithmetic is the same at any world
 * size.
 */
#include "models/train/comm.h"

static void scale_buf(float *buf, size_t n, float scale)
{
    if (scale == 1.0f)
        return;
    for (size_t i = 0; i < n; i++)
        buf[i] *= scale;
}

static ty_status self_allreduce(nn_comm *c, const nn_exec *ex, float *buf,
                                size_t n, float scale, ty_err *err)
{
    (void)c, (void)ex, (void)err;
    scale_buf(buf, n, scale);
    return TY_OK;
}

static ty_status self_allreduce_start(nn_comm *c, const nn_exec *ex, float *buf,
                                      size_t n, float scale, nn_comm_req *req,
                                      ty_err *err)
{
    *req = 0;
    return self_allreduce(c, ex, buf, n, scale, err);
}

static ty_status self_allreduce_wait(nn_comm *c, const nn_exec *ex,
                                     nn_comm_req req, ty_err *err)
{
    (void)c, (void)ex, (void)req, (void)err;
    return TY_OK;
}

/* World 1: the bucket's part is the bucket (off[1] covers it). */
static ty_status self_reduce_scatter_start(nn_comm *c, const nn_exec *ex,
                                           float *buf, const size_t *off,
                                           size_t lo, size_t hi, float scale,
                                           nn_comm_req *req, ty_err *err)
{
    size_t a, b;
    nn_comm_part(off, 0, lo, hi, &a, &b);
    *req = 0;
    return self_allreduce(c, ex, buf + a, b - a, scale, err);
}

static ty_status self_bcast(nn_comm *c, void *buf, size_t bytes, int root,
                            ty_err *err)
{
    (void)c, (void)buf, (void)bytes;
    if (root != 0)
        return ty_fail(err, TY_EINTERNAL, NULL,
                       "broadcast from rank %d in a world of 1", root);
    return TY_OK;
}

static ty_status self_allgather(nn_comm *c, float *buf, const size_t *off,
                                ty_err *err)
{
    (void)c, (void)buf, (void)off, (void)err;
    return TY_OK;
}

static ty_status self_barrier(nn_comm *c, ty_err *err)
{
    (void)c, (void)err;
    return TY_OK;
}

static void self_abort(nn_comm *c, const char *why) { (void)c, (void)why; }

static void self_destroy(nn_comm *c) { (void)c; }

static const nn_comm_ops self_ops = {
    .name = "self",
    .allreduce = self_allreduce,
    .allreduce_start = self_allreduce_start,
    .allreduce_wait = self_allreduce_wait,
    .bcast = self_bcast,
    .allgather = self_allgather,
    .reduce_scatter_start = self_reduce_scatter_start,
    .barrier = self_barrier,
    .abort = self_abort,
    .destroy = self_destroy,
};

static nn_comm self_comm = {
    .ops = &self_ops,
    .rank = 0,
    .world = 1,
    .local_world = 1,
    .device_memory = 0,
    .timeout_s = NN_COMM_DEFAULT_TIMEOUT_S,
    .impl = NULL,
};

nn_comm *nn_comm_self(void) { return &self_comm; }
