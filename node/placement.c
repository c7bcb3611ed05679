/* placement.c - training and serving devices, device memory fit (see
 * placement.h). */
#include "node/placement.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if TRAINYARD_HAVE_CUDA
#include "gpu/cuda/backend.h"
#endif

void place_device_label(int device, char *buf, size_t n)
{
    if (device == PLACE_DEVICE_AUTO)
        snprintf(buf, n, "auto");
    else if (device < 0)
        snprintf(buf, n, "cpu");
    else
        snprintf(buf, n, "cuda:%d", device);
}

/* "cuda" -> 0, "cuda:N" -> N; -1 for anything else. */
static int parse_cuda(const char *s)
{
    if (!s || strncmp(s, "cuda", 4) != 0)
        return -1;
    if (s[4] == '\0')
        return 0;
    if (s[4] != ':' || s[5] < '0' || s[5] > '9')
        return -1;
    char *end = NULL;
    errno = 0;
    long n = strtol(s + 5, &end, 10);
    if (errno || *end || n < 0 || n > PLACE_DEVICE_MAX)
        return -1;
    return (int)n;
}

int place_label_device(const char *label)
{
    int d = parse_cuda(label);
    return d >= 0 ? d : PLACE_DEVICE_CPU;
}

ty_status place_parse_device(const char *flag, const char *val, int allow_auto,
                             int *out, ty_err *err)
{
    if (val && !strcmp(val, "cpu")) {
        *out = PLACE_DEVICE_CPU;
        return TY_OK;
    }
    if (val && allow_auto && !strcmp(val, "auto")) {
        *out = PLACE_DEVICE_AUTO;
        return TY_OK;
    }
    int d = parse_cuda(val);
    if (d >= 0) {
        *out = d;
        return TY_OK;
    }
    return ty_fail(err, TY_EINVAL, flag,
                   "%s needs %scpu, cuda or cuda:N (a device number), not "
                   "'%s'",
                   flag, allow_auto ? "auto, " : "", val ? val : "");
}

ty_status place_resolve(const char *flag, int requested, int count,
                        const char *why, int *out, ty_err *err)
{
    if (requested == PLACE_DEVICE_AUTO) {
        *out = count > 0 ? 0 : PLACE_DEVICE_CPU;
        return TY_OK;
    }
    if (requested < 0) {
        *out = PLACE_DEVICE_CPU;
        return TY_OK;
    }
    if (count <= 0)
        return ty_fail(err, TY_EDEVICE, flag, "%s cuda:%d: no CUDA device: %s",
                       flag, requested,
                       why && *why ? why : "none is visible to this process");
    if (requested >= count)
        return ty_fail(err, TY_EDEVICE, flag,
                       "%s cuda:%d: this process sees only %d CUDA device%s "
                       "(numbered from 0)",
                       flag, requested, count, count == 1 ? "" : "s");
    *out = requested;
    return TY_OK;
}

int place_serve_device(int serve_device, const char *trained_on, int count)
{
    if (serve_device != PLACE_DEVICE_AUTO)
        return serve_device < 0 ? PLACE_DEVICE_CPU : serve_device;
    int d = place_label_device(trained_on);
    return d >= 0 && d < count ? d : PLACE_DEVICE_CPU;
}

ty_status place_check_device_memory(const train_memory *m, uint64_t overhead,
                                    uint64_t available, const char *label,
                                    int is_free, ty_err *err)
{
    uint64_t need = m->total + overhead;
    if (need >= m->total && need <= available)
        return TY_OK;
    char total[32], state[32], grads[32], opt[32], act[32], work[32], over[32],
        avail[32];
    train_format_bytes(need, total, sizeof total);
    train_format_bytes(m->state, state, sizeof state);
    train_format_bytes(m->grads, grads, sizeof grads);
    train_format_bytes(m->optimizer, opt, sizeof opt);
    train_format_bytes(m->activations, act, sizeof act);
    train_format_bytes(m->work, work, sizeof work);
    train_format_bytes(overhead, over, sizeof over);
    train_format_bytes(available, avail, sizeof avail);
    return ty_fail(err, TY_EINVAL, "hyperparameters.batch_size",
                   "the job needs about %s of device memory on %s "
                   "(parameters %s, gradients %s, optimizer state %s, "
                   "activations %s at batch %u, working memory %s, plus %s "
                   "for the CUDA context and libraries) but %s has %s%s%s; "
                   "lower batch_size or use a smaller model",
                   total, label, state, grads, opt, act, m->batch_rows, work,
                   over, label, is_free ? "only " : "", avail,
                   is_free ? " free now (other processes hold the rest)"
                           : " of memory in all");
}

int place_cuda_count(char *why, size_t n)
{
#if TRAINYARD_HAVE_CUDA
    return nn_cuda_device_count(why, n);
#else
    if (why && n)
        snprintf(why, n,
                 "this trainyard was built without CUDA (trainyard "
                 "version lists the backends)");
    return 0;
#endif
}

ty_status place_device_open(const char *flag, int requested, place_device *out,
                            ty_err *err)
{
    memset(out, 0, sizeof *out);
    out->device = PLACE_DEVICE_CPU;
    char why[256] = "";
    /* An explicit CPU asks nothing of CUDA. */
    int count =
        requested == PLACE_DEVICE_CPU ? 0 : place_cuda_count(why, sizeof why);
    int d;
    ty_status s = place_resolve(flag, requested, count, why, &d, err);
    if (s != TY_OK)
        return s;
    place_device_label(d, out->label, sizeof out->label);
    if (d < 0) {
        snprintf(out->name, sizeof out->name, "cpu");
        return TY_OK;
    }
#if TRAINYARD_HAVE_CUDA
    nn_cuda_device info;
    if ((s = nn_cuda_device_get(d, &info, err)) != TY_OK) {
        ty_err_prefix(err, "%s cuda:%d", flag, d);
        return s;
    }
    out->device = d;
    snprintf(out->name, sizeof out->name, "%s", info.name);
    out->total_bytes = info.total_bytes;
    return TY_OK;
#else
    return ty_fail(err, TY_EINTERNAL, flag, "no CUDA in this binary");
#endif
}

ty_status place_cuda_memory(int device, uint64_t *free_bytes,
                            uint64_t *total_bytes, ty_err *err)
{
#if TRAINYARD_HAVE_CUDA
    nn_cuda_device info;
    ty_status s = nn_cuda_device_get(device, &info, err);
    if (s != TY_OK)
        return s;
    *free_bytes = info.free_bytes;
    *total_bytes = info.total_bytes;
    return TY_OK;
#else
    *free_bytes = *total_bytes = 0;
    return ty_fail(err, TY_EDEVICE, NULL,
                   "cuda:%d: this trainyard was built without CUDA", device);
#endif
}
