/* test_loader.c - the trainer's data loader: crop and flip move known pixels
 * and fill with zeros; augmentation draws are per (seed, epoch, position);
 * with augmentation off a batch is exactly the old gather; batches follow
 * the epoch's order across epochs and from a mid-epoch step, prefetched or
 * inline, serial or split over a pool, all bit-identical; stopping early
 * and restarting leave nothing behind; binding the workspace input; and
 * the "augment" hyperparameter's parsing and shape checks. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/train/loader.h"
#include "models/train/train.h"
#include "synth_data.h"
#include "testutil.h"

/* ---- augmentation kernels ---- */

/* One channel, 3 x 3, values 1..9:   1 2 3 / 4 5 6 / 7 8 9. */
static const float img3[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};

static void expect_image(uint32_t pad, uint32_t dy, uint32_t dx, int flip,
                         const float *want)
{
    float out[9];
    memset(out, 0xff, sizeof out); /* NaN: every pixel must be written */
    loader_augment_image(out, img3, 1, 3, 3, pad, dy, dx, flip);
    for (int i = 0; i < 9; i++)
        if (out[i] != want[i])
            fail_msg("pad %u dy %u dx %u flip %d: pixel %d is %g, want %g", pad,
                     dy, dx, flip, i, out[i], want[i]);
}

static void test_crop_and_flip_move_known_pixels(void **state)
{
    /* Centre window of the padded image: unchanged. */
    expect_image(1, 1, 1, 0, img3);
    /* Top-left window: the image moves down-right, zeros come in. */
    const float tl[9] = {0, 0, 0, 0, 1, 2, 0, 4, 5};
    expect_image(1, 0, 0, 0, tl);
    /* Bottom-right window: moves up-left. */
    const float br[9] = {5, 6, 0, 8, 9, 0, 0, 0, 0};
    expect_image(1, 2, 2, 0, br);
    /* Top-right: down and left. */
    const float tr[9] = {0, 0, 0, 2, 3, 0, 5, 6, 0};
    expect_image(1, 0, 2, 0, tr);
    /* Flip alone mirrors each row. */
    const float fl[9] = {3, 2, 1, 6, 5, 4, 9, 8, 7};
    expect_image(0, 0, 0, 1, fl);
    expect_image(1, 1, 1, 1, fl);
    /* Crop then flip (torchvision's order): the top-left window mirrored. */
    const float tlf[9] = {0, 0, 0, 2, 1, 0, 5, 4, 0};
    expect_image(1, 0, 0, 1, tlf);
    /* Padding as wide as the image: a window of zeros but one corner. */
    const float far[9] = {0, 0, 0, 0, 0, 0, 0, 0, 1};
    expect_image(2, 0, 0, 0, far);

    /* Channels move together; rectangular images index rows by width. */
    float src[2 * 2 * 3], out[2 * 2 * 3];
    for (int i = 0; i < 12; i++)
        src[i] = (float)(i + 1); /* ch0: 1 2 3 / 4 5 6, ch1: 7 8 9 / 10 11 12 */
    loader_augment_image(out, src, 2, 2, 3, 1, 1, 2, 1);
    /* Window at (1, 2) of the padded image is src shifted left by one
     * (columns 1, 2, then zero), then mirrored: 0, 3, 2 / 0, 6, 5. */
    const float want[12] = {0, 3, 2, 0, 6, 5, 0, 9, 8, 0, 12, 11};
    assert_memory_equal(out, want, sizeof want);
}

static void test_draws_per_example(void **state)
{
    loader_augment a = {.crop_padding = 2, .horizontal_flip = 1};
    uint32_t seen_dy[5] = {0}, seen_dx[5] = {0}, flips = 0, differ = 0;
    for (uint32_t pos = 0; pos < 2000; pos++) {
        uint32_t dy, dx, dy2, dx2;
        int flip, flip2;
        loader_augment_draw(&a, 42, 3, pos, &dy, &dx, &flip);
        assert_true(dy <= 4 && dx <= 4);
        seen_dy[dy]++;
        seen_dx[dx]++;
        flips += (uint32_t)flip;
        /* The same example draws the same, whoever asks and when. */
        loader_augment_draw(&a, 42, 3, pos, &dy2, &dx2, &flip2);
        assert_int_equal(dy, dy2);
        assert_int_equal(dx, dx2);
        assert_int_equal(flip, flip2);
        /* Another epoch is another stream. */
        loader_augment_draw(&a, 42, 4, pos, &dy2, &dx2, &flip2);
        differ += dy != dy2 || dx != dx2 || flip != flip2;
    }
    for (int i = 0; i < 5; i++) {
        assert_true(seen_dy[i] > 300); /* about 400 each */
        assert_true(seen_dx[i] > 300);
    }
    assert_true(flips > 900 && flips < 1100);
    assert_true(differ > 1500);
    /* Off means off: no offset, no flip. */
    loader_augment off = {0};
    uint32_t dy, dx;
    int flip;
    loader_augment_draw(&off, 42, 0, 7, &dy, &dx, &flip);
    assert_int_equal(dy, 0);
    assert_int_equal(dx, 0);
    assert_int_equal(flip, 0);
    loader_augment crop_only = {.crop_padding = 1};
    for (uint32_t pos = 0; pos < 50; pos++) {
        loader_augment_draw(&crop_only, 1, 0, pos, &dy, &dx, &flip);
        assert_int_equal(flip, 0);
    }
}

/* ---- the loader ---- */

/* n examples of shape (1, 4, 5) bytes; example i's pixels are
 * (i * 7 + j) mod 256, its class i mod 3. */
static void make_images(synth *s, uint32_t n)
{
    const uint32_t shape[] = {1, 4, 5};
    synth_init(s, TY_TASK_CLASSIFICATION, n, shape, 3, TY_DTYPE_U8, 3,
               "scale_255");
    uint8_t *x = s->x;
    for (uint32_t i = 0; i < n; i++) {
        for (uint32_t j = 0; j < 20; j++)
            x[i * 20 + j] = (uint8_t)((i * 7 + j) % 256);
        s->y[i] = (int32_t)(i % 3);
    }
}

static void shuffled(uint32_t *perm, uint32_t n, uint64_t seed)
{
    for (uint32_t i = 0; i < n; i++)
        perm[i] = i;
    ty_rng r;
    ty_rng_seed(&r, seed, 9);
    ty_rng_shuffle_u32(&r, perm, n);
}

typedef struct {
    synth s;
    nn_preproc pp;
    loader_config cfg;
} fixture;

static void fixture_init(fixture *f, uint32_t n, uint32_t bs,
                         loader_augment aug)
{
    make_images(&f->s, n);
    ty_err err;
    assert_int_equal(
        nn_preproc_fit(&f->pp, "scale_255", &f->s.ds, NULL, n, &err), TY_OK);
    f->cfg = (loader_config){.ds = &f->s.ds,
                             .pp = &f->pp,
                             .batch_size = bs,
                             .n = n,
                             .outputs = 3,
                             .augment = aug,
                             .seed = 77};
}

static void fixture_free(fixture *f)
{
    nn_preproc_free(&f->pp);
    synth_free(&f->s);
}

/* What a batch row must hold: example perm[pos] preprocessed, augmented as
 * drawn for (epoch, pos). */
static void expected_row(const fixture *f, uint32_t epoch, const uint32_t *perm,
                         uint32_t pos, float *out)
{
    float plain[20];
    nn_preproc_gather(&f->pp, plain, &f->s.ds, perm, pos, 1);
    const loader_augment *a = &f->cfg.augment;
    if (!a->crop_padding && !a->horizontal_flip) {
        memcpy(out, plain, sizeof plain);
        return;
    }
    uint32_t dy, dx;
    int flip;
    loader_augment_draw(a, f->cfg.seed, epoch, pos, &dy, &dx, &flip);
    loader_augment_image(out, plain, 1, 4, 5, a->crop_padding, dy, dx, flip);
}

/* Takes the rest of the epoch from l and checks every batch against the
 * order perm from first_step; returns the number of batches. */
static uint32_t check_epoch(const fixture *f, loader *l, uint32_t epoch,
                            const uint32_t *perm, uint32_t first_step)
{
    const uint32_t n = f->cfg.n, bs = f->cfg.batch_size;
    uint32_t pos = first_step * bs, batches = 0;
    const loader_batch *b;
    while ((b = loader_next(l))) {
        assert_int_equal(b->first, pos);
        assert_int_equal(b->n, n - pos < bs ? n - pos : bs);
        assert_true(((uintptr_t)b->x & 63) == 0);
        for (uint32_t i = 0; i < b->n; i++, pos++) {
            float want[20];
            expected_row(f, epoch, perm, pos, want);
            assert_memory_equal(b->x + (size_t)i * 20, want, sizeof want);
            assert_int_equal(b->labels[i], f->s.y[perm[pos]]);
        }
        batches++;
    }
    assert_int_equal(pos, n);
    assert_null(loader_next(l)); /* and stays done */
    return batches;
}

static void run_order_case(loader_augment aug, int prefetch, int threads)
{
    fixture f;
    fixture_init(&f, 203, 16, aug); /* 13 batches, the last of 11 */
    nn_pool *pool = threads > 1 ? nn_pool_create(threads) : NULL;
    f.cfg.pool = pool;
    f.cfg.prefetch = prefetch;
    loader *l;
    ty_err err;
    assert_int_equal(loader_create(&f.cfg, &l, &err), TY_OK);
    uint32_t perm[203];
    for (uint32_t e = 0; e < 3; e++) {
        shuffled(perm, 203, e); /* the trainer rewrites perm between epochs */
        loader_begin_epoch(l, e, perm, 0);
        assert_int_equal(check_epoch(&f, l, e, perm, 0), 13);
    }
    /* A mid-epoch start (a resumed run), then the last step alone. */
    shuffled(perm, 203, 5);
    loader_begin_epoch(l, 5, perm, 4);
    assert_int_equal(check_epoch(&f, l, 5, perm, 4), 9);
    loader_begin_epoch(l, 5, perm, 12);
    assert_int_equal(check_epoch(&f, l, 5, perm, 12), 1);
    loader_destroy(l);
    nn_pool_destroy(pool);
    fixture_free(&f);
}

static void test_order_across_epochs_and_from_mid_epoch(void **state)
{
    loader_augment off = {0}, on = {.crop_padding = 2, .horizontal_flip = 1};
    for (int aug = 0; aug < 2; aug++) {
        run_order_case(aug ? on : off, 1, 1); /* the loader's thread */
        run_order_case(aug ? on : off, 0, 1); /* inline, serial */
        run_order_case(aug ? on : off, 0, 3); /* inline, over a pool */
    }
}

/* Augmentation off: a batch is byte for byte what the trainer's gather made
 * before the loader existed (nn_preproc_gather over the batch's slice of
 * perm), float data and standardize included. */
static void test_augment_off_is_the_old_gather(void **state)
{
    synth s;
    synth_xor(&s, 100, 3); /* floats, standardize */
    nn_preproc pp;
    ty_err err;
    assert_int_equal(nn_preproc_fit(&pp, "standardize", &s.ds, NULL, 100, &err),
                     TY_OK);
    for (int prefetch = 0; prefetch < 2; prefetch++) {
        loader_config cfg = {.ds = &s.ds,
                             .pp = &pp,
                             .batch_size = 32,
                             .n = 100,
                             .outputs = 2,
                             .seed = 1,
                             .prefetch = prefetch};
        loader *l;
        assert_int_equal(loader_create(&cfg, &l, &err), TY_OK);
        uint32_t perm[100];
        shuffled(perm, 100, 8);
        loader_begin_epoch(l, 0, perm, 0);
        float old[32 * 4];
        for (uint32_t first = 0; first < 100; first += 32) {
            const loader_batch *b = loader_next(l);
            assert_non_null(b);
            uint32_t m = 100 - first < 32 ? 100 - first : 32;
            assert_int_equal(b->n, m);
            nn_preproc_gather(&pp, old, &s.ds, perm, first, m);
            assert_memory_equal(b->x, old, (size_t)m * 4 * sizeof(float));
        }
        assert_null(loader_next(l));
        loader_destroy(l);
    }
    nn_preproc_free(&pp);
    synth_free(&s);
}

static void test_regression_targets(void **state)
{
    synth s;
    synth_linear(&s, 50, 4);
    nn_preproc pp;
    ty_err err;
    assert_int_equal(nn_preproc_fit(&pp, "none", &s.ds, NULL, 50, &err), TY_OK);
    loader_config cfg = {.ds = &s.ds,
                         .pp = &pp,
                         .batch_size = 8,
                         .n = 50,
                         .outputs = 1,
                         .seed = 1,
                         .prefetch = 1};
    loader *l;
    assert_int_equal(loader_create(&cfg, &l, &err), TY_OK);
    uint32_t perm[50];
    shuffled(perm, 50, 2);
    loader_begin_epoch(l, 0, perm, 0);
    uint32_t pos = 0;
    const loader_batch *b;
    while ((b = loader_next(l))) {
        assert_null(b->labels);
        for (uint32_t i = 0; i < b->n; i++, pos++) {
            assert_float_equal(b->targets[i], s.yv[perm[pos]], 0);
            assert_float_equal(b->x[i * 3], ((float *)s.x)[perm[pos] * 3], 0);
        }
    }
    assert_int_equal(pos, 50);
    loader_destroy(l);
    nn_preproc_free(&pp);
    synth_free(&s);
}

/* Cancel and errors: stop or destroy with batches in flight, at any point;
 * restart an epoch that was not finished. Nothing hangs, nothing leaks (the
 * sanitizer builds check), and what comes after is still right. */
static void test_stop_early(void **state)
{
    loader_augment aug = {.crop_padding = 1};
    fixture f;
    fixture_init(&f, 203, 16, aug);
    f.cfg.prefetch = 1;
    uint32_t perm[203];
    shuffled(perm, 203, 1);
    ty_err err;
    for (int taken = 0; taken < 4; taken++) {
        loader *l;
        assert_int_equal(loader_create(&f.cfg, &l, &err), TY_OK);
        loader_begin_epoch(l, 0, perm, 0);
        for (int i = 0; i < taken; i++)
            assert_non_null(loader_next(l));
        loader_destroy(l); /* with a fill possibly under way */
    }
    loader *l;
    assert_int_equal(loader_create(&f.cfg, &l, &err), TY_OK);
    loader_destroy(l); /* never started an epoch */
    assert_int_equal(loader_create(&f.cfg, &l, &err), TY_OK);
    loader_begin_epoch(l, 0, perm, 0);
    assert_non_null(loader_next(l));
    loader_stop(l);
    assert_null(loader_next(l));
    /* An unfinished epoch begun again from another step. */
    loader_begin_epoch(l, 0, perm, 2);
    assert_non_null(loader_next(l));
    loader_begin_epoch(l, 1, perm, 0);
    assert_int_equal(check_epoch(&f, l, 1, perm, 0), 13);
    loader_destroy(l);
    loader_destroy(NULL);
    fixture_free(&f);
}

/* The step reads the loader's buffer in place: binding moves the input and
 * every leading layer that aliases it (flatten), and nothing else. */
static void test_bind_input(void **state)
{
    const uint32_t shape[] = {1, 4, 5};
    json_t *spec = json_loads("{\"layers\":[{\"type\":\"flatten\"},"
                              "{\"type\":\"dense\",\"units\":3},"
                              "{\"type\":\"flatten\"}]}",
                              0, NULL);
    nn_arch arch;
    ty_err err;
    assert_int_equal(nn_arch_build(spec, shape, 3, 3, TY_TASK_CLASSIFICATION,
                                   &arch, NULL, &err),
                     TY_OK);
    nn_workspace *ws = nn_workspace_create_for(&arch, 4, 1);
    assert_non_null(ws);
    float *a0 = ws->act[0], *a2 = ws->act[2], *a3 = ws->act[3];
    assert_ptr_equal(ws->act[1], a0);
    float buf[4 * 20];
    float *own = loader_bind_input(ws, buf);
    assert_ptr_equal(own, a0);
    assert_ptr_equal(ws->act[0], buf);
    assert_ptr_equal(ws->act[1], buf);
    assert_ptr_equal(ws->act[2], a2);
    assert_ptr_equal(ws->act[3], a3);
    assert_ptr_equal(loader_bind_input(ws, own), buf);
    assert_ptr_equal(ws->act[0], a0);
    assert_ptr_equal(ws->act[1], a0);
    nn_workspace_destroy(ws);
    nn_arch_free(&arch);
    json_decref(spec);
}

/* ---- the hyperparameter ---- */

/* testutil's, under the name the calls below use. */
static void expect_parse_error(const char *text, const char *field)
{
    tu_expect_hparams_error(text, field);
}

static void test_hparams(void **state)
{
    json_t *j = json_loads("{\"augment\":{\"crop_padding\":4,"
                           "\"horizontal_flip\":true},\"seed\":1}",
                           0, NULL);
    train_hparams hp;
    json_t *norm;
    ty_err err;
    assert_int_equal(train_hparams_parse(j, &hp, &norm, &err), TY_OK);
    assert_int_equal(hp.augment.crop_padding, 4);
    assert_int_equal(hp.augment.horizontal_flip, 1);
    json_t *want =
        json_pack("{s:i, s:b}", "crop_padding", 4, "horizontal_flip", 1);
    assert_true(json_equal(json_object_get(norm, "augment"), want));
    json_decref(want);
    train_hparams again;
    assert_int_equal(train_hparams_parse(norm, &again, NULL, &err), TY_OK);
    assert_memory_equal(&hp.augment, &again.augment, sizeof hp.augment);
    json_decref(norm);
    json_decref(j);
    /* Absent: off, and spelled out as off. */
    assert_int_equal(train_hparams_parse(NULL, &hp, &norm, &err), TY_OK);
    assert_int_equal(hp.augment.crop_padding, 0);
    assert_int_equal(hp.augment.horizontal_flip, 0);
    want = json_pack("{s:i, s:b}", "crop_padding", 0, "horizontal_flip", 0);
    assert_true(json_equal(json_object_get(norm, "augment"), want));
    json_decref(want);
    json_decref(norm);

    expect_parse_error("{\"augment\":{\"crop_padding\":-1}}",
                       "hyperparameters.augment.crop_padding");
    expect_parse_error("{\"augment\":{\"crop_padding\":1.5}}",
                       "hyperparameters.augment.crop_padding");
    expect_parse_error("{\"augment\":{\"crop_padding\":70000}}",
                       "hyperparameters.augment.crop_padding");
    expect_parse_error("{\"augment\":{\"horizontal_flip\":1}}",
                       "hyperparameters.augment.horizontal_flip");
    expect_parse_error("{\"augment\":{\"vertical_flip\":true}}",
                       "hyperparameters.augment.vertical_flip");
    expect_parse_error("{\"augment\":true}", "hyperparameters.augment");
    expect_parse_error("{\"augmentation\":{}}", "hyperparameters.augmentation");
}

static void test_augment_needs_images(void **state)
{
    const uint32_t image[] = {3, 32, 28}, table[] = {10}, matrix[] = {28, 28};
    loader_augment flip = {.horizontal_flip = 1}, crop = {.crop_padding = 4},
                   off = {0};
    ty_err err;
    assert_int_equal(loader_augment_check(&flip, image, 3, &err), TY_OK);
    assert_int_equal(loader_augment_check(&crop, image, 3, &err), TY_OK);
    assert_int_equal(loader_augment_check(&flip, table, 1, &err), TY_EINVAL);
    assert_string_equal(err.field, "hyperparameters.augment");
    assert_non_null(strstr(err.msg, "[10]"));
    assert_int_equal(loader_augment_check(&crop, matrix, 2, &err), TY_EINVAL);
    assert_string_equal(err.field, "hyperparameters.augment");
    assert_non_null(strstr(err.msg, "[28, 28]"));
    /* Off is no augmentation, whatever the data (normalized hyperparameters
     * always spell it out). */
    assert_int_equal(loader_augment_check(&off, table, 1, &err), TY_OK);
    /* At most half the smaller side. */
    loader_augment big = {.crop_padding = 14};
    assert_int_equal(loader_augment_check(&big, image, 3, &err), TY_OK);
    big.crop_padding = 15;
    assert_int_equal(loader_augment_check(&big, image, 3, &err), TY_EINVAL);
    assert_string_equal(err.field, "hyperparameters.augment.crop_padding");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crop_and_flip_move_known_pixels),
        cmocka_unit_test(test_draws_per_example),
        cmocka_unit_test(test_order_across_epochs_and_from_mid_epoch),
        cmocka_unit_test(test_augment_off_is_the_old_gather),
        cmocka_unit_test(test_regression_targets),
        cmocka_unit_test(test_stop_early),
        cmocka_unit_test(test_bind_input),
        cmocka_unit_test(test_hparams),
        cmocka_unit_test(test_augment_needs_images),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
