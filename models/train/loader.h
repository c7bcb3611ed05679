/*
 * loader.h - the trainer's data loader: gathers each minibatch (labels or
 * targets, and inputs converted to float and preprocessed), augments image
 * inputs, and - when prefetching - does it on its own thread for step k + 1
 * while step k runs.
 *
 * Double buffering: two batch buffers (slots), each batch_size x features
 * floats plus labels / targets, allocated once by loader_create (from the
 * device backend's pinned host memory when there is one, so the upload of
 * one batch runs while the next is gathered; see loader_uploaded). The trainer
 * holds the slot loader_next returned until its next loader_next call; the
 * loader fills the other one meanwhile. The trainer points its workspace's
 * input at the held slot (loader_bind_input) instead of copying it.
 *
 * The loader follows the order the trainer computed for the epoch (perm,
 * borrowed and unchanged until the epoch's last batch is taken or the loader
 * is stopped) from any step, so a mid-epoch resume replays exactly. Stopping
 * (cancel, errors) abandons what was prefetched and waits at most for one
 * batch fill; nothing leaks, nothing hangs.
 *
 * Augmentation randomness is counter-based: example at position p of epoch
 * e draws from a stream seeded by (seed, LOADER_STREAM_AUGMENT(e) ^ p), so
 * batches are identical whichever thread fills them, with or without
 * prefetch, and from any starting step.
 */
#ifndef TY_LOADER_H
#define TY_LOADER_H

#include <jansson.h>
#include <stdint.h>

#include "common/ty.h"
#include "models/data/dataset.h"
#include "models/nn_internal.h"
#include "models/pool.h"

typedef struct loader loader;

/* Image augmentation applied by the data loader to training batches
 * (hyperparameters.augment, see train.h); all zero: off. */
typedef struct {
    uint32_t crop_padding; /* P: random crop from the image padded by P */
    int horizontal_flip;   /* flip left-right with probability 0.5 */
} loader_augment;

/* The augmentation stream of epoch e, derived from the user's seed (the
 * trainer's other streams are in train_internal.h): XORed with the
 * example's position in the epoch's order (below 2^32), so every (epoch,
 * position) has its own stream. */
#define LOADER_STREAM_AUGMENT(e) (0xa0c3000000000000ull ^ ((uint64_t)(e) << 32))

typedef struct {
    const ty_dataset *ds; /* borrowed; outlives the loader */
    const nn_preproc *pp; /* borrowed; outlives the loader */
    /* Regression: targets are standardized by it (models/target.h); NULL
     * or cols 0: as they are. Borrowed; outlives the loader. */
    const nn_target *tg;
    uint32_t batch_size;
    uint32_t n;             /* examples in an epoch (perm's length) */
    uint32_t outputs;       /* regression: target values per example */
    loader_augment augment; /* checked with loader_augment_check */
    uint64_t seed;
    nn_pool *pool; /* inline fills split over it (NULL: serial);
                                  never used by the loader's own thread */
    int prefetch;  /* 1: fill ahead on the loader's own thread;
                                  0: fill inline inside loader_next */
    /* The backend the batches are uploaded to, or NULL. When it has
     * host_alloc the slots are its staging memory (pinned), uploads from
     * them are asynchronous, and a slot is refilled only after the fence
     * loader_uploaded recorded behind its uploads has passed. Borrowed;
     * ex outlives the loader. */
    const nn_backend *be;
    const nn_exec *ex;
} loader_config;

/* One minibatch. Rows are positions first .. first + n - 1 of the epoch's
 * order. */
typedef struct {
    float *x;        /* (n, features), 64-byte aligned */
    int32_t *labels; /* (n) classification targets */
    float *targets;  /* (n, outputs) regression targets */
    uint32_t n;
    uint32_t first;
} loader_batch;

/* Allocates both slots and starts the loader's thread when cfg->prefetch.
 * On failure TY_ENOMEM (or TY_EINTERNAL when no thread can be started),
 * *out NULL, nothing kept. */
ty_status loader_create(const loader_config *cfg, loader **out, ty_err *err);

/* Stops any epoch in progress, ends the thread and frees everything. NULL
 * is a no-op. */
void loader_destroy(loader *l);

/* Starts delivering epoch `epoch` in the order perm (cfg->n entries,
 * borrowed) from step first_step (0-based; 0 for a whole epoch). An epoch
 * still in progress is stopped first. */
void loader_begin_epoch(loader *l, uint32_t epoch, const uint32_t *perm,
                        uint64_t first_step);

/* The epoch's next batch, waiting for it if it is still being filled; the
 * previous batch is given back. NULL once the epoch's batches are all
 * taken (or after loader_stop). The batch stays valid until the next call
 * of loader_next, loader_begin_epoch, loader_stop or loader_destroy. */
const loader_batch *loader_next(loader *l);

/* Says that the batch loader_next last returned has been queued for
 * upload (cfg->be): its slot is not refilled until the backend has
 * passed this point. Nothing without a backend with fences. Trainer's
 * thread only. */
void loader_uploaded(loader *l);

/* Abandons the rest of the epoch: waits until the loader's thread has
 * finished the fill it is in (if any) and leaves it idle, so perm may be
 * rewritten. */
void loader_stop(loader *l);

/* Points ws's input (act[0], and the activations of leading layers that
 * alias it, such as flatten) at x, which must hold ws->max_batch rows.
 * Returns the previous input, to be bound again when done. */
float *loader_bind_input(nn_workspace *ws, float *x);

/* ---- augmentation ---- */

/* Parses hp's optional "augment" object into *out (absent: all zero). On
 * failure TY_EINVAL naming the field ("hyperparameters.augment",
 * "hyperparameters.augment.crop_padding", ...) and *out zeroed. */
ty_status loader_augment_parse(const json_t *hp, loader_augment *out,
                               ty_err *err);

/* The normalized JSON form {"crop_padding": P, "horizontal_flip": b}; NULL
 * when out of memory. */
json_t *loader_augment_to_json(const loader_augment *a);

/* Whether a fits inputs of shape (per example): augmentation needs rank 3
 * (C, H, W) and crop_padding at most min(H, W) / 2. TY_EINVAL naming
 * "hyperparameters.augment" (or ".crop_padding") otherwise. */
ty_status loader_augment_check(const loader_augment *a, const uint32_t *shape,
                               uint32_t ndim, ty_err *err);

/* The random choices for the example at position pos of epoch `epoch`:
 * crop offsets *dy, *dx in [0, 2P] of the padded image, and *flip. */
void loader_augment_draw(const loader_augment *a, uint64_t seed, uint32_t epoch,
                         uint32_t pos, uint32_t *dy, uint32_t *dx, int *flip);

/* dst (c, h, w) = the h x w window at (dy, dx) of src (c, h, w) zero-padded
 * by pad on each side, mirrored left-right when flip. dst and src must not
 * overlap. */
void loader_augment_image(float *dst, const float *src, uint32_t c, uint32_t h,
                          uint32_t w, uint32_t pad, uint32_t dy, uint32_t dx,
                          int flip);

#endif
