/* rng.c - xoshiro256** with splitmix64 seeding (see rng.h). */
#include "common/rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void ty_rng_seed(ty_rng *r, uint64_t seed, uint64_t stream)
{
    uint64_t x =
        seed ^ (stream * 0xd1342543de82ef95ULL + 0x632be59bd9b4e019ULL);
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t ty_rng_u64(ty_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

float ty_rng_uniform(ty_rng *r)
{
    return (float)(ty_rng_u64(r) >> 40) * (1.0f / 16777216.0f);
}

uint32_t ty_rng_below(ty_rng *r, uint32_t n)
{
    /* Lemire's multiply-shift with rejection: unbiased. */
    uint64_t m = (uint64_t)(uint32_t)(ty_rng_u64(r) >> 32) * n;
    uint32_t low = (uint32_t)m;
    if (low < n) {
        uint32_t threshold = (uint32_t)(-n) % n;
        while (low < threshold) {
            m = (uint64_t)(uint32_t)(ty_rng_u64(r) >> 32) * n;
            low = (uint32_t)m;
        }
    }
    return (uint32_t)(m >> 32);
}

float ty_rng_normal(ty_rng *r)
{
    double u1 =
        ((double)(ty_rng_u64(r) >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    double u2 = (double)(ty_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

void ty_rng_shuffle_u32(ty_rng *r, uint32_t *idx, uint32_t n)
{
    for (uint32_t i = n; i > 1; i--) {
        uint32_t j = ty_rng_below(r, i);
        uint32_t t = idx[i - 1];
        idx[i - 1] = idx[j];
        idx[j] = t;
    }
}
