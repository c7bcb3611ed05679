/* test_nn_optim.c - SGD and Adam steps against values worked out by hand
 * from torch.optim.SGD / torch.optim.Adam's update rules (two steps each, so
 * momentum and bias correction are exercised), and gradient consumption. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "models/optim.h"

static void test_sgd_momentum_weight_decay(void **state)
{
    train_hparams hp = {.optimizer = TRAIN_OPT_SGD, .learning_rate = 0.1,
                        .momentum = 0.9, .weight_decay = 0.1};
    nn_optim o;
    assert_int_equal(nn_optim_init(&o, &hp, 2, NULL), TY_OK);
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
    train_hparams hp = {.optimizer = TRAIN_OPT_SGD, .learning_rate = 0.5};
    nn_optim o;
    assert_int_equal(nn_optim_init(&o, &hp, 1, NULL), TY_OK);
    assert_int_equal(o.n_slots, 0);
    float p = 3.0f, g = 2.0f;
    nn_optim_step(&o, &nn_backend_cpu, NULL, &p, &g);
    assert_float_equal(p, 2.0, 0);
    nn_optim_free(&o);
}

static void test_adam_two_steps(void **state)
{
    train_hparams hp = {.optimizer = TRAIN_OPT_ADAM, .learning_rate = 0.01,
                        .weight_decay = 0.1, .beta1 = 0.9, .beta2 = 0.999,
                        .epsilon = 1e-8};
    nn_optim o;
    assert_int_equal(nn_optim_init(&o, &hp, 1, NULL), TY_OK);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sgd_momentum_weight_decay),
        cmocka_unit_test(test_sgd_plain),
        cmocka_unit_test(test_adam_two_steps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
