/*
 * loader.c - the trainer's data loader (see loader.h): minibatch gathers,
 * image augmentation, and prefetching on a thread of its own.
 *
 * Hand-off protocol (prefetch): counters under mu, counted from the start
 * of the current plan (an epoch from some step):
 *   filled   - batches the thread has finished filling,
 *   taken    - batches handed to the trainer,
 *   released - batches the trainer gave back (taken, or taken - 1 while it
 *              holds one).
 * Batch s lives in slot s % 2. The thread fills batch s once s < n_batches
 * and s < released + 2, i.e. into a slot nobody holds; the trainer takes
 * batch s once s < filled. Slot contents are written outside the lock and
 * published by the counter update under it, so every read of a slot
 * happens after its write. The plan (perm, epoch, first step) is written
 * only while the thread is idle (not filling, plan inactive), under mu.
 *
 * Pinned slots (cfg.be with host_alloc): an upload reads its slot when the
 * device gets to it, so the trainer records a fence after queuing a
 * batch's uploads (loader_uploaded) and the trainer's own thread waits for
 * it before the slot can be filled again: in loader_next before giving the
 * slot back, in loader_begin_epoch (both slots: the thread refills them)
 * and in loader_destroy before freeing. The loader's thread never calls
 * the backend. The wait in loader_next is the pipeline's only one: the
 * fence passes once the device has finished the step before and the
 * upload, while the step just launched still runs.
 *
 * Without prefetch (one compute thread, or an epoch of one batch) the
 * trainer fills slot 0 itself inside loader_next, split over the pool like
 * the gather before it. Either way a batch's contents depend only on the
 * plan and the position, never on which thread filled it.
 */
#include "models/train/loader.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/jsonutil.h"

#define AUG "hyperparameters.augment"
#define MAX_PADDING 65535

typedef struct {
    loader_batch b;
    void *fence;   /* cfg.be's, behind this slot's uploads */
    int uploading; /* a fence was recorded and not waited for */
} slot;

struct loader {
    loader_config cfg;
    uint64_t features;
    int augmenting;
    uint32_t img_c, img_h, img_w;
    slot slots[2];
    int n_slots;
    float *scratch; /* parts x features: one image per fill part */
    int parts;
    /* the plan; see the file comment for when it may change */
    uint32_t epoch;
    const uint32_t *perm;
    uint64_t first_step;
    uint64_t n_batches;
    /* hand-off, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    int started;
    int active;
    int filling;
    int quit;
    uint64_t filled, taken, released;
};

/* ---- filling ---- */

/* Rows [from, to) of batch b (positions b->first + from ...). scratch holds
 * one image (augmenting only). */
static void fill_rows(const loader *l, loader_batch *b, uint32_t epoch,
                      const uint32_t *perm, uint32_t from, uint32_t to,
                      float *scratch)
{
    const loader_config *cfg = &l->cfg;
    const ty_dataset *ds = cfg->ds;
    const uint64_t f = l->features;
    for (uint32_t i = from; i < to; i++) {
        uint32_t row = perm[b->first + i];
        if (b->labels)
            b->labels[i] = ds->y_class[row];
        else if (cfg->tg && cfg->tg->cols)
            nn_target_scale(cfg->tg, b->targets + (size_t)i * cfg->outputs,
                            ds->y_value + (size_t)row * ds->y_dim, 1);
        else
            memcpy(b->targets + (size_t)i * cfg->outputs,
                   ds->y_value + (size_t)row * ds->y_dim,
                   cfg->outputs * sizeof(float));
    }
    if (!l->augmenting) {
        nn_preproc_gather(cfg->pp, b->x + from * f, ds, perm, b->first + from,
                          to - from);
        return;
    }
    for (uint32_t i = from; i < to; i++) {
        uint32_t pos = b->first + i, dy, dx;
        int flip;
        nn_preproc_gather(cfg->pp, scratch, ds, perm, pos, 1);
        loader_augment_draw(&cfg->augment, cfg->seed, epoch, pos, &dy, &dx,
                            &flip);
        loader_augment_image(b->x + i * f, scratch, l->img_c, l->img_h,
                             l->img_w, cfg->augment.crop_padding, dy, dx, flip);
    }
}

/* Sets b's extent for batch seq of the plan. */
static void batch_place(const loader *l, loader_batch *b, uint64_t seq)
{
    uint64_t first = (l->first_step + seq) * l->cfg.batch_size;
    uint64_t left = l->cfg.n - first;
    b->first = (uint32_t)first;
    b->n = (uint32_t)(left < l->cfg.batch_size ? left : l->cfg.batch_size);
}

typedef struct {
    const loader *l;
    loader_batch *b;
} fill_job;

static void fill_part(void *arg, int part, int parts)
{
    const fill_job *j = arg;
    size_t b, e;
    nn_pool_range(j->b->n, part, parts, 1, &b, &e);
    if (e > b)
        fill_rows(j->l, j->b, j->l->epoch, j->l->perm, (uint32_t)b, (uint32_t)e,
                  j->l->scratch ? j->l->scratch + (size_t)part * j->l->features
                                : NULL);
}

static void *loader_main(void *arg)
{
    loader *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->quit && !(l->active && l->filled < l->n_batches &&
                             l->filled < l->released + 2))
            pthread_cond_wait(&l->cv, &l->mu);
        if (l->quit)
            break;
        uint64_t seq = l->filled;
        uint32_t epoch = l->epoch;
        const uint32_t *perm = l->perm;
        loader_batch *b = &l->slots[seq % 2].b;
        batch_place(l, b, seq);
        l->filling = 1;
        pthread_mutex_unlock(&l->mu);
        fill_rows(l, b, epoch, perm, 0, b->n, l->scratch);
        pthread_mutex_lock(&l->mu);
        l->filling = 0;
        l->filled = seq + 1;
        pthread_cond_broadcast(&l->cv);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* ---- the loader ---- */

/* Host memory for a slot: the backend's staging memory when it has some. */
static void *slot_mem(const loader *l, size_t bytes)
{
    const nn_backend *be = l->cfg.be;
    bytes = (bytes + 63) / 64 * 64;
    if (be && be->host_alloc)
        return be->host_alloc(l->cfg.ex, bytes ? bytes : 64);
    return aligned_alloc(64, bytes ? bytes : 64);
}

static void slot_mem_free(const loader *l, void *p)
{
    const nn_backend *be = l->cfg.be;
    if (p && be && be->host_alloc)
        be->host_release(l->cfg.ex, p);
    else
        free(p);
}

static ty_status slot_alloc(const loader *l, slot *s)
{
    const loader_config *cfg = &l->cfg;
    s->b.x = slot_mem(l, (size_t)cfg->batch_size * l->features * sizeof(float));
    if (cfg->ds->task == TY_TASK_CLASSIFICATION)
        s->b.labels =
            slot_mem(l, (size_t)cfg->batch_size * sizeof *s->b.labels);
    else
        s->b.targets =
            slot_mem(l, ((size_t)cfg->batch_size * cfg->outputs + 1) *
                            sizeof *s->b.targets);
    if (cfg->be && cfg->be->host_alloc && cfg->be->fence_create &&
        !(s->fence = cfg->be->fence_create(cfg->ex)))
        return TY_ENOMEM;
    return s->b.x && (s->b.labels || s->b.targets) ? TY_OK : TY_ENOMEM;
}

/* Waits until the device has read slot s (trainer's thread). */
static void slot_wait(const loader *l, slot *s)
{
    if (!s->uploading)
        return;
    l->cfg.be->fence_wait(l->cfg.ex, s->fence);
    s->uploading = 0;
}

void loader_uploaded(loader *l)
{
    /* The batch held: slot 0 inline, else the one taken last. */
    slot *s = &l->slots[l->started && l->taken ? (l->taken - 1) % 2 : 0];
    if (!s->fence || !l->taken)
        return;
    l->cfg.be->fence_record(l->cfg.ex, s->fence);
    s->uploading = 1;
}

ty_status loader_create(const loader_config *cfg, loader **out, ty_err *err)
{
    *out = NULL;
    loader *l = calloc(1, sizeof *l);
    if (!l)
        return ty_fail(err, TY_ENOMEM, NULL,
                       "out of memory for the data loader");
    l->cfg = *cfg;
    l->features = cfg->ds->features;
    const loader_augment *a = &cfg->augment;
    l->augmenting = a->crop_padding > 0 || a->horizontal_flip;
    if (l->augmenting) {
        /* loader_augment_check has vouched for the rank. */
        l->img_c = cfg->ds->shape[0];
        l->img_h = cfg->ds->shape[1];
        l->img_w = cfg->ds->shape[2];
    }
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    ty_status st = TY_OK;
    l->n_slots = cfg->prefetch ? 2 : 1;
    for (int i = 0; i < l->n_slots && st == TY_OK; i++)
        st = slot_alloc(l, &l->slots[i]);
    /* The thread fills with part 0's image; inline fills use one per part. */
    l->parts = cfg->prefetch ? 1 : nn_pool_threads(cfg->pool);
    if (st == TY_OK && l->augmenting &&
        !(l->scratch = malloc((size_t)l->parts * l->features * sizeof(float))))
        st = TY_ENOMEM;
    if (st != TY_OK) {
        loader_destroy(l);
        return ty_fail(err, st, NULL, "out of memory for the data loader");
    }
    if (cfg->prefetch) {
        if (pthread_create(&l->thread, NULL, loader_main, l) != 0) {
            loader_destroy(l);
            return ty_fail(err, TY_EINTERNAL, NULL,
                           "cannot start the data loader's thread");
        }
        l->started = 1;
    }
    *out = l;
    return TY_OK;
}

void loader_stop(loader *l)
{
    if (!l->started) {
        l->active = 0;
        return;
    }
    pthread_mutex_lock(&l->mu);
    l->active = 0;
    while (l->filling)
        pthread_cond_wait(&l->cv, &l->mu);
    pthread_mutex_unlock(&l->mu);
}

void loader_destroy(loader *l)
{
    if (!l)
        return;
    if (l->started) {
        loader_stop(l);
        pthread_mutex_lock(&l->mu);
        l->quit = 1;
        pthread_cond_broadcast(&l->cv);
        pthread_mutex_unlock(&l->mu);
        pthread_join(l->thread, NULL);
    }
    for (int i = 0; i < 2; i++) {
        slot *s = &l->slots[i];
        if (s->fence) {
            slot_wait(l, s);
            l->cfg.be->fence_release(l->cfg.ex, s->fence);
        }
        slot_mem_free(l, s->b.x);
        slot_mem_free(l, s->b.labels);
        slot_mem_free(l, s->b.targets);
    }
    free(l->scratch);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    free(l);
}

void loader_begin_epoch(loader *l, uint32_t epoch, const uint32_t *perm,
                        uint64_t first_step)
{
    loader_stop(l);
    /* The thread is idle; it refills both slots once the plan is on. */
    for (int i = 0; i < 2; i++)
        slot_wait(l, &l->slots[i]);
    const uint64_t bs = l->cfg.batch_size;
    const uint64_t steps = (l->cfg.n + bs - 1) / bs;
    if (l->started)
        pthread_mutex_lock(&l->mu);
    l->epoch = epoch;
    l->perm = perm;
    l->first_step = first_step;
    l->n_batches = first_step < steps ? steps - first_step : 0;
    l->filled = l->taken = l->released = 0;
    l->active = 1;
    if (l->started) {
        pthread_cond_broadcast(&l->cv);
        pthread_mutex_unlock(&l->mu);
    }
}

const loader_batch *loader_next(loader *l)
{
    if (!l->started) {
        if (!l->active || l->taken >= l->n_batches)
            return NULL;
        slot_wait(l, &l->slots[0]);
        loader_batch *b = &l->slots[0].b;
        batch_place(l, b, l->taken++);
        fill_job j = {.l = l, .b = b};
        nn_pool_run(l->cfg.pool, fill_part, &j);
        return b;
    }
    const loader_batch *b = NULL;
    /* The held batch's slot (taken - 1) % 2 goes back to the thread. */
    if (l->taken)
        slot_wait(l, &l->slots[(l->taken - 1) % 2]);
    pthread_mutex_lock(&l->mu);
    l->released = l->taken;
    pthread_cond_broadcast(&l->cv);
    if (l->active && l->taken < l->n_batches) {
        while (l->filled <= l->taken)
            pthread_cond_wait(&l->cv, &l->mu);
        b = &l->slots[l->taken % 2].b;
        l->taken++;
    }
    pthread_mutex_unlock(&l->mu);
    return b;
}

float *loader_bind_input(nn_workspace *ws, float *x)
{
    float *old = ws->act[0];
    const nn_arch *a = ws->arch;
    ws->act[0] = x;
    for (uint32_t i = 0; i < a->n_layers; i++) {
        const nn_layer_kind *k = a->layers[i].kind;
        if (!k->alias && !(!ws->training && k->identity_in_eval))
            break;
        ws->act[i + 1] = x;
    }
    return old;
}

/* ---- augmentation ---- */

ty_status loader_augment_parse(const json_t *hp, loader_augment *out,
                               ty_err *err)
{
    static const char *const keys[] = {"crop_padding", "horizontal_flip", NULL};
    memset(out, 0, sizeof *out);
    const json_t *a = json_object_get(hp, "augment");
    if (!a || json_is_null(a))
        return TY_OK;
    int64_t pad;
    int flip;
    ty_status st;
    if ((st = tyjson_check_keys(a, keys, AUG, err)) != TY_OK ||
        (st = tyjson_get_int(a, "crop_padding", AUG, 0, 0, MAX_PADDING, 0, &pad,
                             err)) != TY_OK ||
        (st = tyjson_get_bool(a, "horizontal_flip", AUG, 0, 0, &flip, err)) !=
            TY_OK)
        return st;
    out->crop_padding = (uint32_t)pad;
    out->horizontal_flip = flip;
    return TY_OK;
}

json_t *loader_augment_to_json(const loader_augment *a)
{
    return json_pack("{s:I, s:b}", "crop_padding", (json_int_t)a->crop_padding,
                     "horizontal_flip", a->horizontal_flip);
}

ty_status loader_augment_check(const loader_augment *a, const uint32_t *shape,
                               uint32_t ndim, ty_err *err)
{
    if (!a->crop_padding && !a->horizontal_flip)
        return TY_OK;
    if (ndim != 3) {
        char s[64] = "";
        size_t used = 0;
        for (uint32_t i = 0; i < ndim && used < sizeof s; i++)
            used += (size_t)snprintf(s + used, sizeof s - used, "%s%u",
                                     i ? ", " : "", shape[i]);
        return ty_fail(err, TY_EINVAL, AUG,
                       AUG " applies to image data, examples of shape "
                           "[channels, height, width]; this dataset's examples "
                           "have shape [%s]",
                       s);
    }
    uint32_t side = shape[1] < shape[2] ? shape[1] : shape[2];
    if (a->crop_padding > side / 2)
        return ty_fail(err, TY_EINVAL, AUG ".crop_padding",
                       AUG ".crop_padding must be at most half the image's "
                           "height and width (%u for %u x %u images), got %u",
                       side / 2, shape[1], shape[2], a->crop_padding);
    return TY_OK;
}

void loader_augment_draw(const loader_augment *a, uint64_t seed, uint32_t epoch,
                         uint32_t pos, uint32_t *dy, uint32_t *dx, int *flip)
{
    ty_rng r;
    ty_rng_seed(&r, seed, LOADER_STREAM_AUGMENT(epoch) ^ pos);
    /* torchvision's order: the crop's top, its left, then the coin. */
    const uint32_t p = a->crop_padding;
    *dy = p ? ty_rng_below(&r, 2 * p + 1) : 0;
    *dx = p ? ty_rng_below(&r, 2 * p + 1) : 0;
    *flip = a->horizontal_flip && ty_rng_uniform(&r) < 0.5f;
}

void loader_augment_image(float *restrict dst, const float *restrict src,
                          uint32_t c, uint32_t h, uint32_t w, uint32_t pad,
                          uint32_t dy, uint32_t dx, int flip)
{
    /* Output (y, x) reads padded (y + dy, x' + dx), x' = x or w - 1 - x;
     * padded (i, j) is src (i - pad, j - pad) inside the image, else 0. */
    const int64_t oy = (int64_t)dy - pad, ox = (int64_t)dx - pad;
    for (uint32_t ch = 0; ch < c; ch++) {
        const float *s = src + (size_t)ch * h * w;
        float *d = dst + (size_t)ch * h * w;
        for (uint32_t y = 0; y < h; y++) {
            float *row = d + (size_t)y * w;
            int64_t sy = (int64_t)y + oy;
            if (sy < 0 || sy >= h) {
                memset(row, 0, w * sizeof *row);
                continue;
            }
            const float *srow = s + (size_t)sy * w;
            for (uint32_t x = 0; x < w; x++) {
                int64_t sx = (int64_t)(flip ? w - 1 - x : x) + ox;
                row[x] = sx >= 0 && sx < w ? srow[sx] : 0.0f;
            }
        }
    }
}
