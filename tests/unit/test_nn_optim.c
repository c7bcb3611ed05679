/* test_nn_optim.c - SGD (plain, momentum, Nesterov), Adam and AdamW steps
 * against values worked out by hand from torch.optim's update rules (two
 * steps each, so momentum and bias correction are exercised), gradient
 * consumption, learning-rate schedules against their closed forms, and
 * clipping by global norm. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>

#include "models/train/optim.h"
#include "models/train/train.h"
#include "models/pool.h"

static void test_sgd_momentum_weight_decay(void **state)
{
    train_hparams hp = {.optimizer = NN_OPTIM_SGD,
                        .learning_rate = 0.1,
                        .momentum = 0.9,
                        .weight_decay = 0.1};
    nn_optim o;
    assert_int_equal(nn_optim_init(&o, train_hparams_optim(&hp), 2, NULL),
                     TY_OK);
    assert_int_equal(o.n_slots, 1);
    assert_string_equal(nn_optim_slot_name(&o, 0), "momentum_buffer");
    float p[2] = {1.0f, -2.0f}, g[2] = {0.5f, 0.0f};
    nn_optim_step(&o, &nn_backend_cpu, NULL, p, g);
    /* g' = 0.5 + 0.1*1 = 0.6; buf = 0.6; p = 1 - 0.1*0.6 */
    assert_float_equal(p[0], 0.94, 1e-6);
    assert_float_equal(nn_optim_slot(&o, 0)[0], 0.6, 1e-6);
    /* weight decay alone moves p[1]: g' = 0.1*-2 = -0.2; p = -2 + 0.02 */
    assert_float_equal(p[1], -1.98, 1e-6);
    assert_float_equal(g[0], 0.0, 0); /* consumed */
    g[0] = 0.5f;
    nn_optim_step(&o, &nn_backend_cpu, NULL, p, g);
    /* g' = 0.5 + 0.094 = 0.594; buf = 0.54 + 0.594 = 1.134; p = 0.94 - 0.1134 */
    assert_float_equal(nn_optim_slot(&o, 0)[0], 1.134, 1e-6);
    assert_float_equal(p[0], 0.8266, 1e-6);
    nn_optim_free(&o);
}

static void test_sgd_plain(void **state)
{
    train_hparams hp = {.optimizer = NN_OPTIM_SGD, .learning_rate = 0.5};
    nn_optim o;
    assert_int_equal(nn_optim_init(&o, train_hparams_optim(&hp), 1, NULL),
                     TY_OK);
    assert_int_equal(o.n_slots, 0);
    float p = 3.0f, g = 2.0f;
    nn_optim_step(&o, &nn_backend_cpu, NULL, &p, &g);
    assert_float_equal(p, 2.0, 0);
    nn_optim_free(&o);
}

static void test_adam_two_steps(void **state)
{
    train_hparams hp = {.optimizer = NN_OPTIM_ADAM,
                        .learning_rate = 0.01,
                        .weight_decay = 0.1,
                        .beta1 = 0.9,
                        .beta2 = 0.999,
                        .epsilon = 1e-8};
    nn_optim o;
    assert_int_equal(nn_optim_init(&o, train_hparams_optim(&hp), 1, NULL),
                     TY_OK);
    assert_int_equal(o.n_slots, 2);
    assert_string_equal(nn_optim_slot_name(&o, 0), "exp_avg");
    assert_string_equal(nn_optim_slot_name(&o, 1), "exp_avg_sq");
    float p = 1.0f, g = 0.5f;
    nn_optim_step(&o, &nn_backend_cpu, NULL, &p, &g);
    /* g' = 0.6, m = 0.06, v = 0.00036, bias corrections 0.1 and 0.001:
     * p = 1 - (0.01/0.1) * 0.06 / (sqrt(0.00036)/sqrt(0.001) + 1e-8) */
    assert_float_equal(nn_optim_slot(&o, 0)[0], 0.06, 1e-8);
    assert_float_equal(nn_optim_slot(&o, 1)[0], 0.00036, 1e-9);
    assert_float_equal(p, 0.9900000001666667, 1e-7);
    assert_float_equal(g, 0.0, 0);
    g = 0.5f;
    nn_optim_step(&o, &nn_backend_cpu, NULL, &p, &g);
    assert_float_equal(nn_optim_slot(&o, 0)[0], 0.11390000000166664, 1e-7);
    assert_float_equal(nn_optim_slot(&o, 1)[0], 0.0007184410000199673, 1e-9);
    assert_float_equal(p, 0.9800004386015699, 1e-7);
    assert_int_equal(o.t, 2);
    nn_optim_free(&o);
}

static void test_sgd_nesterov(void **state)
{
    train_hparams hp = {.optimizer = NN_OPTIM_SGD,
                        .learning_rate = 0.1,
                        .momentum = 0.9,
                        .weight_decay = 0.1,
                        .nesterov = 1};
    nn_optim o;
    assert_int_equal(nn_optim_init(&o, train_hparams_optim(&hp), 2, NULL),
                     TY_OK);
    assert_int_equal(o.n_slots, 1);
    float p[2] = {1.0f, -2.0f}, g[2] = {0.5f, 0.0f};
    nn_optim_step(&o, &nn_backend_cpu, NULL, p, g);
    /* p[1]: g' = -0.2; buf = -0.2; d = g' + 0.9 buf = -0.38; p = -2 + 0.038 */
    assert_float_equal(p[1], -1.962, 1e-6);
    assert_float_equal(nn_optim_slot(&o, 0)[1], -0.2, 1e-7);
    assert_float_equal(g[0], 0.0, 0);
    g[0] = 0.5f;
    nn_optim_step(&o, &nn_backend_cpu, NULL, p, g);
    /* g' = 0.1 * -1.962 = -0.1962; buf = -0.18 - 0.1962 = -0.3762;
     * d = -0.1962 + 0.9 * -0.3762 = -0.53478; p = -1.962 + 0.053478 */
    assert_float_equal(nn_optim_slot(&o, 0)[1], -0.3762, 1e-6);
    assert_float_equal(p[1], -1.908522, 1e-6);
    /* p[0] (torch.optim.SGD(nesterov=True) gives 0.725566) */
    assert_float_equal(p[0], 0.725566, 1e-6);
    nn_optim_free(&o);

    /* Without weight decay: 1 - 0.1 (0.5 + 0.45) = 0.905, then
     * buf = 0.95, 0.905 - 0.1 (0.5 + 0.855) = 0.7695. */
    hp.weight_decay = 0.0;
    assert_int_equal(nn_optim_init(&o, train_hparams_optim(&hp), 1, NULL),
                     TY_OK);
    float q = 1.0f, h = 0.5f;
    nn_optim_step(&o, &nn_backend_cpu, NULL, &q, &h);
    assert_float_equal(q, 0.905, 1e-6);
    h = 0.5f;
    nn_optim_step(&o, &nn_backend_cpu, NULL, &q, &h);
    assert_float_equal(q, 0.7695, 1e-6);
    nn_optim_free(&o);
}

static void test_adamw_two_steps(void **state)
{
    train_hparams hp = {.optimizer = NN_OPTIM_ADAMW,
                        .learning_rate = 0.01,
                        .weight_decay = 0.1,
                        .beta1 = 0.9,
                        .beta2 = 0.999,
                        .epsilon = 1e-8};
    nn_optim o;
    assert_int_equal(nn_optim_init(&o, train_hparams_optim(&hp), 1, NULL),
                     TY_OK);
    assert_int_equal(o.n_slots, 2);
    assert_string_equal(nn_optim_slot_name(&o, 1), "exp_avg_sq");
    float p = 1.0f, g = 0.5f;
    nn_optim_step(&o, &nn_backend_cpu, NULL, &p, &g);
    /* p = 1 * (1 - 0.001) = 0.999; m = 0.05, v = 0.00025 (the decay is not
     * in the gradient); p -= (0.01 / 0.1) * 0.05 / (0.5 + 1e-8) */
    assert_float_equal(nn_optim_slot(&o, 0)[0], 0.05, 1e-8);
    assert_float_equal(nn_optim_slot(&o, 1)[0], 0.00025, 1e-9);
    assert_float_equal(p, 0.9890000002, 1e-7);
    g = 0.5f;
    nn_optim_step(&o, &nn_backend_cpu, NULL, &p, &g);
    /* p = 0.9890000002 * 0.999; m = 0.095, v = 0.00049975, bias
     * corrections 0.19 and 0.001999 so sqrt(v / bc2) = 0.5:
     * p -= (0.01 / 0.19) * 0.095 / (0.5 + 1e-8) = 0.0099999998
     * (torch.optim.AdamW gives 0.9780110004) */
    assert_float_equal(nn_optim_slot(&o, 0)[0], 0.095, 1e-7);
    assert_float_equal(p, 0.9780110004, 1e-7);
    nn_optim_free(&o);
}

/* AdamW over a range long enough for the SIMD path and the pool split:
 * each element as the scalar rule computes it. */
static void test_adamw_vector_matches_scalar(void **state)
{
    enum { L = 70001 };
    static float p[L], g[L], q[L], h[L];
    for (int i = 0; i < L; i++) {
        p[i] = q[i] = (float)sin(i * 0.37) * 2.0f;
        g[i] = h[i] = (float)cos(i * 0.11);
    }
    train_hparams hp = {.optimizer = NN_OPTIM_ADAMW,
                        .learning_rate = 0.003,
                        .weight_decay = 0.05,
                        .beta1 = 0.9,
                        .beta2 = 0.99,
                        .epsilon = 1e-8};
    nn_optim a, b;
    assert_int_equal(nn_optim_init(&a, train_hparams_optim(&hp), L, NULL),
                     TY_OK);
    assert_int_equal(nn_optim_init(&b, train_hparams_optim(&hp), 1, NULL),
                     TY_OK);
    nn_pool *pool = nn_pool_create(2);
    nn_exec ex = {.pool = pool};
    nn_optim_step(&a, &nn_backend_cpu, &ex, p, g);
    for (int i = 0; i < L; i += 997) {
        nn_optim_free(&b);
        assert_int_equal(nn_optim_init(&b, train_hparams_optim(&hp), 1, NULL),
                         TY_OK);
        nn_optim_step(&b, &nn_backend_cpu, NULL, &q[i], &h[i]);
        assert_memory_equal(&p[i], &q[i], sizeof(float));
        assert_float_equal(g[i], 0.0, 0);
    }
    nn_optim_free(&a);
    nn_optim_free(&b);
    nn_pool_destroy(pool);
}

static void test_lr_schedules(void **state)
{
    train_hparams hp = {.learning_rate = 0.2};
    /* constant */
    for (uint64_t t = 0; t < 50; t += 7)
        assert_float_equal(train_lr_at(&hp, t, 3, 30), 0.2, 0);
    /* step: 3 steps an epoch, halved every 2 epochs (6 steps) */
    hp.lr_schedule = (train_lr_schedule){
        .kind = TRAIN_LR_STEP, .step_epochs = 2, .gamma = 0.5};
    for (uint64_t t = 0; t < 30; t++) {
        double want = 0.2 * pow(0.5, (double)(t / 6));
        assert_float_equal(train_lr_at(&hp, t, 3, 30), want, 1e-15);
    }
    assert_float_equal(train_lr_at(&hp, 5, 3, 30), 0.2, 0);
    assert_float_equal(train_lr_at(&hp, 6, 3, 30), 0.1, 0);
    /* cosine to min_lr 0.02 over 10 steps: the closed form */
    hp.lr_schedule =
        (train_lr_schedule){.kind = TRAIN_LR_COSINE, .min_lr = 0.02};
    for (uint64_t t = 0; t <= 10; t++) {
        double want = 0.02 + 0.18 * (1.0 + cos(M_PI * (double)t / 10.0)) / 2.0;
        assert_float_equal(train_lr_at(&hp, t, 5, 10), want, 1e-15);
    }
    assert_float_equal(train_lr_at(&hp, 0, 5, 10), 0.2, 1e-15);
    assert_float_equal(train_lr_at(&hp, 5, 5, 10), 0.11, 1e-15);
    /* torch CosineAnnealingLR(T_max=10, eta_min=0.1) on lr 1 at step 1 */
    train_hparams one = {
        .learning_rate = 1.0,
        .lr_schedule = {.kind = TRAIN_LR_COSINE, .min_lr = 0.1}};
    assert_float_equal(train_lr_at(&one, 1, 5, 10), 0.9779754323328191, 1e-15);
    /* warm-up of 3 steps (torch LinearLR(1/4, 1, 3): 0.25, 0.5, 0.75, 1)
     * on top of the cosine */
    hp.warmup_steps = 3;
    for (uint64_t t = 0; t <= 10; t++) {
        double cosv = 0.02 + 0.18 * (1.0 + cos(M_PI * (double)t / 10.0)) / 2.0;
        double f = t < 3 ? (double)(t + 1) / 4.0 : 1.0;
        assert_float_equal(train_lr_at(&hp, t, 5, 10), cosv * f, 1e-15);
    }
    hp.lr_schedule.kind = TRAIN_LR_CONSTANT;
    assert_float_equal(train_lr_at(&hp, 0, 5, 10), 0.05, 1e-15);
    assert_float_equal(train_lr_at(&hp, 2, 5, 10), 0.15, 1e-15);
    assert_float_equal(train_lr_at(&hp, 3, 5, 10), 0.2, 0);
}

static void test_clip_grad_norm(void **state)
{
    /* norm 5: clipped to 1 by 1 / (5 + 1e-6) */
    float g[2] = {3.0f, 4.0f};
    double norm = nn_optim_clip_grad_norm(&nn_backend_cpu, NULL, g, 2, 1.0);
    assert_float_equal(norm, 5.0, 0);
    assert_float_equal(g[0], 3.0 / 5.000001, 1e-7);
    assert_float_equal(g[1], 4.0 / 5.000001, 1e-7);
    /* below max_norm: untouched, bit for bit */
    float h[2] = {3.0f, 4.0f};
    nn_optim_clip_grad_norm(&nn_backend_cpu, NULL, h, 2, 10.0);
    assert_float_equal(h[0], 3.0, 0);
    assert_float_equal(h[1], 4.0, 0);

    /* split over two threads: 100000 values of 0.5 and -0.5, norm
     * sqrt(25000) (exact sums), scaled to norm 2 */
    enum { L = 100000 };
    static float big[L];
    for (int i = 0; i < L; i++)
        big[i] = i % 2 ? 0.5f : -0.5f;
    nn_pool *pool = nn_pool_create(2);
    nn_exec ex = {.pool = pool};
    norm = nn_optim_clip_grad_norm(&nn_backend_cpu, &ex, big, L, 2.0);
    assert_float_equal(norm, sqrt(25000.0), 1e-9);
    float want = (float)(0.5 * (2.0 / (sqrt(25000.0) + 1e-6)));
    assert_float_equal(big[1], want, 0);
    assert_float_equal(big[L - 2], -want, 0);
    double after = 0;
    for (int i = 0; i < L; i++)
        after += (double)big[i] * big[i];
    assert_float_equal(sqrt(after), 2.0, 1e-5);
    nn_pool_destroy(pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sgd_nesterov),
        cmocka_unit_test(test_adamw_two_steps),
        cmocka_unit_test(test_adamw_vector_matches_scalar),
        cmocka_unit_test(test_lr_schedules),
        cmocka_unit_test(test_clip_grad_norm),
        cmocka_unit_test(test_sgd_momentum_weight_decay),
        cmocka_unit_test(test_sgd_plain),
        cmocka_unit_test(test_adam_two_steps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
