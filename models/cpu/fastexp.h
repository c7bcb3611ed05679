/*
 * fastexp.h - exp(x) on [-87, 0] without a branch or a libm call, so that
 * the loops calling it vectorize (GELU's tanh in elementwise.c, the causal
 * softmax in attention.c). Include it after the caller's
 * `#pragma GCC optimize("no-trapping-math")`, so the function is compiled
 * (and inlined) under the same options as those loops.
 */
#ifndef TY_CPU_FASTEXP_H
#define TY_CPU_FASTEXP_H

#include <stdint.h>
#include <string.h>

/* exp(x) for x in [-87, 0] (callers clamp), without a branch or a libm
 * call so that the loops below vectorize: x = n ln2 + r with |r| <= ln2 / 2
 * (ln2 in two parts, Cody and Waite), exp(r) by Cephes' expf polynomial
 * (within 2 ulp), 2^n through the exponent bits (n >= -126: normal). */
static inline float exp_nonpos(float x)
{
    const float magic = 12582912.0f; /* 1.5 * 2^23: + and - round to integer */
    float fn = (x * 1.44269504088896341f + magic) - magic;
    /* a NaN x (a diverged net) gives NaN below; fn must stay a number for
     * the conversion to int, which is undefined for NaN */
    fn = fn >= -126.0f ? fn : -126.0f;
    float r = x - fn * 0.693359375f;
    r = r + fn * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    uint32_t bits = ((uint32_t)(int32_t)fn + 127u) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

#endif
