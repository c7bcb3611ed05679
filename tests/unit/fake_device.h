/* fake_device.h - a device backend for tests on machines without a GPU:
 * the CPU's kernels behind an alloc/release that count live and peak bytes,
 * and a status that reports TY_EDEVICE while fake_device_fail is set. It is
 * not the CPU backend, so nn_backend_host_visible says no and the engine
 * takes its device path (host staging, upload, download, status checks)
 * while computing exactly what the CPU computes. It says it trains fast in
 * bf16 and fp16 (lp_ok), so mixed precision runs there too. Include it in one test
 * file and call fake_device_init() before the tests run. */
#ifndef TY_TEST_FAKE_DEVICE_H
#define TY_TEST_FAKE_DEVICE_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/ty.h"
#include "models/backend.h"

#define FAKE_DEVICE_HDR 256u /* keeps the contract's 256-byte alignment */

static uint64_t fake_live, fake_peak, fake_allocs;
static int fake_device_fail;   /* nonzero: status reports TY_EDEVICE */
static nn_backend fake_device; /* filled by fake_device_init */

static void *fake_device_alloc(const nn_exec *ex, size_t bytes)
{
    (void)ex;
    unsigned char *p =
        aligned_alloc(256, FAKE_DEVICE_HDR + (bytes + 255) / 256 * 256);
    if (!p)
        return NULL;
    memcpy(p, &bytes, sizeof bytes);
    fake_live += bytes;
    fake_allocs++;
    if (fake_live > fake_peak)
        fake_peak = fake_live;
    return p + FAKE_DEVICE_HDR;
}

static void fake_device_release(const nn_exec *ex, void *q)
{
    (void)ex;
    if (!q)
        return;
    unsigned char *p = (unsigned char *)q - FAKE_DEVICE_HDR;
    size_t bytes;
    memcpy(&bytes, p, sizeof bytes);
    fake_live -= bytes;
    free(p);
}

static ty_status fake_device_status(const nn_exec *ex, ty_err *err)
{
    (void)ex;
    if (fake_device_fail)
        return ty_fail(err, TY_EDEVICE, NULL,
                       "fake device: an illegal memory access was "
                       "encountered");
    return TY_OK;
}

/* A device that trains fast in every precision: the engine's mixed-
 * precision path runs on the CPU's reference cast and gemm_lp. */
static int fake_device_lp_ok(const nn_exec *ex, nn_dtype dt)
{
    (void)ex;
    (void)dt;
    return 1;
}

static void fake_device_init(void)
{
    fake_device = nn_backend_cpu;
    fake_device.name = "fake-device";
    fake_device.alloc = fake_device_alloc;
    fake_device.release = fake_device_release;
    fake_device.status = fake_device_status;
    fake_device.lp_ok = fake_device_lp_ok;
    fake_live = fake_peak = fake_allocs = 0;
    fake_device_fail = 0;
}

#endif
