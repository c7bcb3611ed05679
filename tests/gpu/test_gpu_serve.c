/*
 * test_gpu_serve.c - training and serving on a GPU through the API
 * (ctest label "gpu"): a real `trainyard serve --train-device cuda:0`
 * driven over HTTP with the integration harness.
 *
 *   1. An MLP on vectors and a CNN on 8x8 images train through POST
 *      /v1/jobs: the job, every epoch and the model say cuda:0; each
 *      epoch's peak_memory_bytes is the job's estimated_memory_bytes (the
 *      CUDA backend's sizing, cuDNN's for the convolution) and the
 *      device's own count of used memory is at least that.
 *   2. Predict, evaluate and KServe infer run on cuda:0 (the model's
 *      training device), and a second server with --serve-device cpu on
 *      the same data predicts the same outputs to 1e-4.
 *   3. A deployment of the CNN asking for "gpu": "any": its replica holds
 *      a GPU (or MIG slice) of the inventory, says cuda:0, and answers
 *      with the in-process GPU outputs to 1e-4, batching included.
 *   4. A job whose training cannot fit the device (about 216 GiB of
 *      activations) is refused at submit with a 422 on batch_size that
 *      names the device.
 *
 * Exit status: 0 passed, 1 a check failed, 77 skipped (no CUDA device, or
 * a binary without CUDA), with "SKIPPED: ..." on stdout.
 */
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "common/rng.h"
#include "node/placement.h"
#include "harness.h"

static int failures;

#define CHECK(cond)                                                         \
    do {                                                                    \
        if (!(cond)) {                                                      \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); \
            failures++;                                                     \
        }                                                                   \
    } while (0)

static const char *str_or_none(const json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "(none)";
}

/* n examples of d features; the class is the argmax of the first 3. */
static void write_vectors(const char *xp, const char *yp, size_t n, size_t d)
{
    float *x = malloc(sizeof *x * n * d);
    int64_t *y = malloc(sizeof *y * n);
    ty_rng r;
    ty_rng_seed(&r, 17, 0);
    for (size_t i = 0; i < n; i++) {
        size_t best = 0;
        for (size_t j = 0; j < d; j++) {
            x[i * d + j] = ty_rng_normal(&r);
            if (j < 3 && x[i * d + j] > x[i * d + best])
                best = j;
        }
        y[i] = (int64_t)best;
    }
    write_npy_f32(xp, x, n, d);
    write_npy_i64(yp, y, n);
    free(x);
    free(y);
}

/* n 8x8 IDX images: class 1 bright on top, class 0 at the bottom. */
static void write_images(const char *ip, const char *lp, int n)
{
    unsigned char *img = malloc(16 + (size_t)n * 64),
                  *lab = malloc(8 + (size_t)n);
    const unsigned char h3[16] = {
        0, 0, 8, 3, 0, 0, (unsigned char)(n >> 8), (unsigned char)n, 0, 0,
        0, 8, 0, 0, 0, 8};
    const unsigned char h1[8] = {
        0, 0, 8, 1, 0, 0, (unsigned char)(n >> 8), (unsigned char)n};
    memcpy(img, h3, 16);
    memcpy(lab, h1, 8);
    ty_rng r;
    ty_rng_seed(&r, 23, 0);
    for (int i = 0; i < n; i++) {
        int k = i % 2;
        lab[8 + i] = (unsigned char)k;
        for (int p = 0; p < 64; p++)
            img[16 + (size_t)i * 64 + p] =
                (unsigned char)(((p < 32) == k) ? 180 + ty_rng_below(&r, 70)
                                                : ty_rng_below(&r, 60));
    }
    write_file(ip, img, 16 + (size_t)n * 64);
    write_file(lp, lab, 8 + (size_t)n);
    free(img);
    free(lab);
}

static int upload(const srv *s, const char *const *parts, char id[64])
{
    resp *r = http_upload(s, "/v1/datasets", parts);
    int ok = r->status == 201;
    if (!ok)
        fprintf(stderr, "upload: %ld %s\n", r->status, r->body);
    else
        snprintf(id, 64, "%s", str_or_none(r->json, "id"));
    resp_free(r);
    return ok;
}

/* Trains `layers` on ds on s (cuda:0) and checks where and with how much
 * memory it ran; the model id into model. */
static int train_on_gpu(const srv *s, const char *ds, const char *layers,
                        char model[64])
{
    char body[1024], job[64], path[256];
    snprintf(body, sizeof body,
             "{\"dataset\": \"%s\", \"model\": {\"layers\": %s},"
             " \"hyperparameters\": {\"epochs\": 3, \"batch_size\": 32,"
             " \"optimizer\": \"adam\", \"learning_rate\": 0.01, \"seed\": 2}}",
             ds, layers);
    resp *r = http_json(s, "POST", "/v1/jobs", body);
    if (r->status != 202) {
        fprintf(stderr, "submit: %ld %s\n", r->status, r->body);
        resp_free(r);
        failures++;
        return 0;
    }
    snprintf(job, sizeof job, "%s", str_or_none(r->json, "id"));
    json_int_t est =
        json_integer_value(json_object_get(r->json, "estimated_memory_bytes"));
    CHECK(est > 0);
    resp_free(r);
    json_t *j = wait_job(s, job, 300);
    if (!j || strcmp(str_or_none(j, "status"), "succeeded")) {
        char *t = j ? json_dumps(j, 0) : NULL;
        fprintf(stderr, "job did not succeed: %s\n", t ? t : "(timeout)");
        free(t);
        json_decref(j);
        failures++;
        return 0;
    }
    CHECK(!strcmp(str_or_none(j, "device"), "cuda:0"));
    snprintf(model, 64, "%s", str_or_none(j, "model"));
    json_decref(j);

    snprintf(path, sizeof path, "/v1/jobs/%s/metrics", job);
    r = http_get(s, path);
    const json_t *epochs = json_object_get(r->json, "epochs");
    CHECK(json_array_size(epochs) == 3);
    for (size_t i = 0; i < json_array_size(epochs); i++) {
        const json_t *ep = json_array_get(epochs, i);
        json_int_t peak =
            json_integer_value(json_object_get(ep, "peak_memory_bytes"));
        json_int_t used =
            json_integer_value(json_object_get(ep, "device_memory_used_bytes"));
        printf("%s epoch %zu: device %s, peak %lld, device used %lld, estimate "
               "%lld\n",
               job, i + 1, str_or_none(ep, "device"), (long long)peak,
               (long long)used, (long long)est);
        CHECK(!strcmp(str_or_none(ep, "device"), "cuda:0"));
        CHECK(peak == est);
        CHECK(used >= peak);
    }
    resp_free(r);
    snprintf(path, sizeof path, "/v1/models/%s", model);
    r = http_get(s, path);
    CHECK(!strcmp(str_or_none(r->json, "trained_on"), "cuda:0"));
    resp_free(r);
    return 1;
}

/* Predicts body on model; the outputs (a new reference) and the device. */
static json_t *predict(const srv *s, const char *model, const char *body,
                       const char *want_device)
{
    char path[256];
    snprintf(path, sizeof path, "/v1/models/%s/predict", model);
    resp *r = http_json(s, "POST", path, body);
    if (r->status != 200)
        fprintf(stderr, "predict: %ld %s\n", r->status, r->body);
    CHECK(r->status == 200);
    CHECK(!strcmp(str_or_none(r->json, "device"), want_device));
    json_t *out = json_incref(json_object_get(r->json, "outputs"));
    resp_free(r);
    return out;
}

static int same_outputs(const json_t *a, const json_t *b)
{
    if (json_array_size(a) == 0 || json_array_size(a) != json_array_size(b))
        return 0;
    for (size_t i = 0; i < json_array_size(a); i++) {
        const json_t *ra = json_array_get(a, i), *rb = json_array_get(b, i);
        if (json_array_size(ra) != json_array_size(rb))
            return 0;
        for (size_t k = 0; k < json_array_size(ra); k++)
            if (fabs(json_number_value(json_array_get(ra, k)) -
                     json_number_value(json_array_get(rb, k))) > 1e-4)
                return 0;
    }
    return 1;
}

/* 3. A deployment on a GPU slot: ready, and the same outputs as the
 * in-process path on the GPU. */
static void deploy_on_gpu(const srv *s, const char *model, const char *in,
                          const json_t *want)
{
    char body[512], path[256], id[64] = "";
    snprintf(body, sizeof body,
             "{\"name\": \"gpu-dep\", \"model\": \"%s\", \"resources\": "
             "{\"gpu\": \"any\"}, \"batching\": {\"max_batch_size\": 8, "
             "\"max_queue_delay_us\": 1000}}",
             model);
    resp *r = http_json(s, "POST", "/v1/deployments", body);
    if (r->status != 201)
        fprintf(stderr, "deployment: %ld %s\n", r->status, r->body);
    CHECK(r->status == 201);
    snprintf(id, sizeof id, "%s", str_or_none(r->json, "id"));
    resp_free(r);
    if (r->status != 201)
        return;
    snprintf(path, sizeof path, "/v1/deployments/%s", id);
    int ready = 0;
    for (int i = 0; i < 600 && !ready; i++) {
        r = http_get(s, path);
        json_t *reps = json_object_get(r->json, "replicas");
        ready = json_integer_value(json_object_get(reps, "ready")) >= 1;
        if (ready) {
            json_t *inst =
                json_array_get(json_object_get(r->json, "instances"), 0);
            char *slot =
                json_dumps(json_object_get(inst, "slot"), JSON_ENCODE_ANY);
            printf("replica on slot %s, device %s\n", slot ? slot : "?",
                   str_or_none(inst, "device"));
            free(slot);
            CHECK(json_is_integer(json_object_get(inst, "slot")));
        }
        resp_free(r);
        if (!ready)
            usleep(200 * 1000);
    }
    CHECK(ready);
    if (ready) {
        snprintf(path, sizeof path, "/v1/models/%s/predict", model);
        r = http_json(s, "POST", path, in);
        CHECK(r->status == 200);
        CHECK(!strcmp(str_or_none(r->json, "deployment"), "gpu-dep"));
        CHECK(!strcmp(str_or_none(r->json, "device"), "cuda:0"));
        CHECK(want && same_outputs(want, json_object_get(r->json, "outputs")));
        resp_free(r);
    }
    snprintf(path, sizeof path, "/v1/deployments/%s", id);
    r = http_do(s, "DELETE", path, NULL, NULL, 0, NULL);
    CHECK(r->status == 202);
    resp_free(r);
}

int main(void)
{
    char why[256] = "";
    if (place_cuda_count(why, sizeof why) == 0) {
        printf("SKIPPED: no CUDA device (%s)\n", why);
        return 77;
    }
    char files[PATH_MAX], p[6][PATH_MAX + 8];
    temp_dir(files);
    snprintf(p[0], sizeof p[0], "%s/x.npy", files);
    snprintf(p[1], sizeof p[1], "%s/y.npy", files);
    snprintf(p[2], sizeof p[2], "%s/img.idx3", files);
    snprintf(p[3], sizeof p[3], "%s/lab.idx1", files);
    snprintf(p[4], sizeof p[4], "%s/bx.npy", files);
    snprintf(p[5], sizeof p[5], "%s/by.npy", files);
    write_vectors(p[0], p[1], 1000, 8);
    write_images(p[2], p[3], 256);
    write_vectors(p[4], p[5], 65536, 4);

    srv s;
    const char *flags[] = {"--train-device", "cuda:0", NULL};
    if (srv_start(&s, NULL, flags) != 0) {
        fprintf(stderr,
                "the server did not start with --train-device cuda:0\n");
        return 1;
    }
    char a[PATH_MAX + 16], b[PATH_MAX + 16], vec[64], img[64], big[64];
    char mlp[64] = "", cnn[64] = "";
    snprintf(a, sizeof a, "x=@%s", p[0]);
    snprintf(b, sizeof b, "y=@%s", p[1]);
    const char *v[] = {"name=vectors", "format=npy", a, b, NULL};
    int ok = upload(&s, v, vec);
    snprintf(a, sizeof a, "images=@%s", p[2]);
    snprintf(b, sizeof b, "labels=@%s", p[3]);
    const char *im[] = {"name=images", "format=idx", a, b, NULL};
    ok = ok && upload(&s, im, img);
    snprintf(a, sizeof a, "x=@%s", p[4]);
    snprintf(b, sizeof b, "y=@%s", p[5]);
    const char *bg[] = {"name=big", "format=npy", a, b, NULL};
    ok = ok && upload(&s, bg, big);
    CHECK(ok);

    /* 1. Training on cuda:0. */
    if (ok) {
        train_on_gpu(
            &s, vec,
            "[{\"type\": \"dense\", \"units\": 64}, {\"type\": \"relu\"},"
            " {\"type\": \"dense\", \"units\": 3}]",
            mlp);
        train_on_gpu(
            &s, img,
            "[{\"type\": \"conv2d\", \"filters\": 8, \"kernel_size\": 3,"
            " \"padding\": 1}, {\"type\": \"relu\"},"
            " {\"type\": \"maxpool2d\", \"pool_size\": 2},"
            " {\"type\": \"flatten\"}, {\"type\": \"dense\", \"units\": 2}]",
            cnn);
    }

    /* 2. Serving on cuda:0, and the same outputs from the CPU. */
    const char *vec_in =
        "{\"inputs\": [[1, 0, 0, 0, 0, 0, 0, 0], [0, 0, 2, 0, 1, 1, 1, 1]]}";
    char img_in[1024] = "{\"inputs\": [[";
    for (int i = 0; i < 64; i++)
        strcat(img_in, i ? (i < 32 ? ",230" : ",10") : "230");
    strcat(img_in, "]]}");
    json_t *gpu_mlp = NULL, *gpu_cnn = NULL;
    if (mlp[0]) {
        gpu_mlp = predict(&s, mlp, vec_in, "cuda:0");
        char path[256], body[128];
        snprintf(path, sizeof path, "/v1/models/%s/evaluate", mlp);
        snprintf(body, sizeof body, "{\"dataset\": \"%s\"}", vec);
        resp *r = http_json(&s, "POST", path, body);
        CHECK(r->status == 200);
        CHECK(!strcmp(str_or_none(r->json, "device"), "cuda:0"));
        CHECK(json_number_value(json_object_get(r->json, "accuracy")) > 0.6);
        resp_free(r);
        snprintf(path, sizeof path, "/v2/models/%s/infer", mlp);
        r = http_json(
            &s, "POST", path,
            "{\"inputs\": [{\"name\": \"input\", \"shape\": [1, 8],"
            " \"datatype\": \"FP32\", \"data\": [1, 0, 0, 0, 0, 0, 0, 0]}]}");
        CHECK(r->status == 200);
        CHECK(!strcmp(
            str_or_none(json_object_get(r->json, "parameters"), "device"),
            "cuda:0"));
        resp_free(r);
    }
    if (cnn[0])
        gpu_cnn = predict(&s, cnn, img_in, "cuda:0");

    if (cnn[0])
        deploy_on_gpu(&s, cnn, img_in, gpu_cnn);

    /* 4. Too big for the device: 58982 examples a batch through 13
     * 65536-wide activations: 216 GiB (the CPU's estimate, the same for
     * dense layers on CUDA), past a 141 GiB H200. */
    char body[1024];
    snprintf(
        body, sizeof body,
        "{\"dataset\": \"%s\", \"model\": {\"layers\": [{\"type\": \"dense\","
        " \"units\": 65536}, {\"type\": \"relu\"}, {\"type\": \"relu\"},"
        " {\"type\": \"relu\"}, {\"type\": \"relu\"}, {\"type\": \"relu\"},"
        " {\"type\": \"relu\"}, {\"type\": \"relu\"}, {\"type\": \"relu\"},"
        " {\"type\": \"relu\"}, {\"type\": \"relu\"}, {\"type\": \"relu\"},"
        " {\"type\": \"relu\"},"
        " {\"type\": \"dense\", \"units\": 3}]},"
        " \"hyperparameters\": {\"epochs\": 1, \"batch_size\": 65536}}",
        big);
    resp *r = http_json(&s, "POST", "/v1/jobs", body);
    printf("too big: %ld %s\n", r->status, r->body);
    CHECK(r->status == 422);
    CHECK(!strcmp(str_or_none(r->json, "field"), "hyperparameters.batch_size"));
    CHECK(strstr(str_or_none(r->json, "detail"),
                 "of device memory on cuda:0") != NULL);
    resp_free(r);
    srv_stop(&s, SIGTERM);

    srv cpu;
    const char *cpu_flags[] = {"--serve-device", "cpu", NULL};
    if (srv_start(&cpu, s.data, cpu_flags) == 0) {
        if (gpu_mlp) {
            json_t *c = predict(&cpu, mlp, vec_in, "cpu");
            CHECK(same_outputs(gpu_mlp, c));
            json_decref(c);
        }
        if (gpu_cnn) {
            json_t *c = predict(&cpu, cnn, img_in, "cpu");
            CHECK(same_outputs(gpu_cnn, c));
            json_decref(c);
        }
        srv_stop(&cpu, SIGTERM);
    } else {
        failures++;
    }
    json_decref(gpu_mlp);
    json_decref(gpu_cnn);
    srv_cleanup(&s);
    fs_remove_tree(files, NULL);
    if (failures)
        fprintf(stderr, "%d check(s) failed\n", failures);
    else
        printf("ok\n");
    return failures ? 1 : 0;
}
