/*
 * remote.h - a predict run on a deployment's replica instead of in this
 * process: the rows go over the replica framing (node/rframe.h) on a
 * connection this thread keeps to that replica, and the outputs come
 * back. A call that fails on the connection (the replica died, or is
 * draining) is tried once more on another replica: a predict has no side
 * effects, so running it twice is harmless.
 */
#ifndef TY_SERVE_REMOTE_H
#define TY_SERVE_REMOTE_H

#include <stdint.h>

#include "common/ty.h"
#include "deploy/deploy.h"
#include "node/rframe.h"

/* Runs n examples of f floats (x) on a replica of the deployment c was
 * admitted to (deploy_admit), into out (n * k floats). TY_OK; the
 * replica's error (TY_EINVAL, TY_EDEVICE, TY_ENOMEM), TY_EUNAVAILABLE when
 * none became ready in time, TY_EDEVICE when no replica could answer, or TY_ENOTFOUND when the deployment no longer
 * serves c's model (run it in this process). */
ty_status serve_remote_run(struct deploy_ctl *ctl, deploy_call *c,
                           const float *x, uint64_t n, uint64_t f, float *out,
                           uint32_t k, ty_err *err);

/* A generation on a replica of c's deployment (rframe.h's generation
 * frames): a connection of its own, held while the tokens stream (closing
 * it stops the generation there), to a replica other than avoid (0: any).
 * *fd the connection, the request sent; the errors as serve_remote_run's.
 * Read the tokens with rframe_gen_read, then serve_remote_gen_close (ok 0
 * when the replica or the connection failed). */
ty_status serve_remote_gen_open(struct deploy_ctl *ctl, deploy_call *c,
                                const rframe_gen_req *r, const uint32_t *ids,
                                uint64_t avoid, int *fd, ty_err *err);
void serve_remote_gen_close(struct deploy_ctl *ctl, deploy_call *c, int fd,
                            int ok);

#endif
