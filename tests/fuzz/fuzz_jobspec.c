/*
 * fuzz_jobspec - a job request's JSON as admission reads it: the
 * hyperparameters (models/train/hparams.c), the loss they settle, the model
 * spec (models/nn_spec.c, nn_spec_validate_for_loss), the augmentation
 * check, the resources and the priority (jobs/jobreq.c). The dataset the
 * request names is the fuzzer's too: "input_shape" (1 to 4 dims of 1 to
 * 512), "task" and "outputs" (1 to 1000) in the same object, defaults
 * [1, 28, 28], classification, 10.
 */
#include <jansson.h>
#include <stdint.h>

#include "jobs/jobreq.h"
#include "models/nn.h"
#include "models/train/loader.h"
#include "models/train/train.h"
#include "tests/fuzz/fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t size)
{
    json_t *body = json_loadb((const char *)d, size, JSON_DECODE_ANY, NULL);
    if (!json_is_object(body)) {
        json_decref(body);
        return 0;
    }
    uint32_t shape[4] = {1, 28, 28, 0}, ndim = 3;
    const json_t *js = json_object_get(body, "input_shape");
    if (json_is_array(js) && json_array_size(js) >= 1 &&
        json_array_size(js) <= 4) {
        uint32_t n = (uint32_t)json_array_size(js), ok = 1;
        for (uint32_t i = 0; i < n; i++) {
            json_int_t v = json_integer_value(json_array_get(js, i));
            if (v < 1 || v > 512)
                ok = 0;
            else
                shape[i] = (uint32_t)v;
        }
        if (ok)
            ndim = n;
        else
            shape[0] = 1, shape[1] = 28, shape[2] = 28;
    }
    ty_task task = json_is_true(json_object_get(body, "regression"))
                       ? TY_TASK_REGRESSION
                       : TY_TASK_CLASSIFICATION;
    json_int_t o = json_integer_value(json_object_get(body, "outputs"));
    uint32_t outputs = o >= 1 && o <= 1000 ? (uint32_t)o : 10;

    ty_err err = {0};
    train_hparams hp;
    json_t *hp_norm = NULL, *spec = NULL;
    uint64_t params = 0;
    ty_status s = train_hparams_parse(json_object_get(body, "hyperparameters"),
                                      &hp, &hp_norm, &err);
    if (s == TY_OK)
        s = train_hparams_resolve_loss(&hp, task, outputs, hp_norm, &err);
    if (s == TY_OK)
        s = nn_spec_validate_for_loss(json_object_get(body, "model"), shape,
                                      ndim, outputs, task, &hp.loss, &spec,
                                      &params, &err);
    if (s == TY_OK)
        s = loader_augment_check(&hp.augment, shape, ndim, &err);
    if (s == TY_OK && !spec)
        abort();
    if (s != TY_OK && !err.msg[0])
        abort(); /* an error must say what went wrong */
    if (spec) {
        /* What was normalized validates again, to the same count. */
        json_t *again = NULL;
        uint64_t params2 = 0;
        ty_err err2 = {0};
        if (nn_spec_validate_for_loss(spec, shape, ndim, outputs, task,
                                      &hp.loss, &again, &params2,
                                      &err2) != TY_OK ||
            params2 != params)
            abort();
        json_decref(again);
    }
    json_decref(spec);
    json_decref(hp_norm);

    /* Model without hyperparameters: the task's default loss. */
    spec = NULL;
    ty_err err3 = {0};
    if (nn_spec_validate(json_object_get(body, "model"), shape, ndim, outputs,
                         task, &spec, &params, &err3) == TY_OK &&
        !spec)
        abort();
    json_decref(spec);

    sched_request req;
    json_t *res_norm = NULL;
    ty_err err4 = {0};
    int workers = 0;
    if (jobreq_parse(json_object_get(body, "resources"), size && (d[0] & 1),
                     &req, &workers, &res_norm, &err4) == TY_OK) {
        /* The normalized form parses again, to the same gang. */
        sched_request req2;
        json_t *n2 = NULL;
        int workers2 = 0;
        if (jobreq_parse(res_norm, size && (d[0] & 1), &req2, &workers2, &n2,
                         &err4) != TY_OK ||
            workers2 != workers || workers < 1)
            abort();
        json_decref(n2);
    }
    json_decref(res_norm);
    int prio;
    jobreq_priority(json_object_get(body, "priority"), &prio, &err4);
    json_decref(body);
    return 0;
}
