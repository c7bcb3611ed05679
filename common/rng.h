/*
 * rng.h - the seeded random number generator (xoshiro256**, seeded through
 * splitmix64). Every random choice in training (initial weights, shuffling,
 * dropout, validation split) draws from one of these, so a seed reproduces a
 * run bit for bit. The state is a plain struct: copy it to checkpoint it.
 */
#ifndef TY_RNG_H
#define TY_RNG_H

#include <stdint.h>

typedef struct {
    uint64_t s[4];
} ty_rng;

/* Seeds r deterministically from seed and a stream number, so independent
 * streams (e.g. one per epoch) can be derived from one user seed. */
void ty_rng_seed(ty_rng *r, uint64_t seed, uint64_t stream);

uint64_t ty_rng_u64(ty_rng *r);

/* Uniform float in [0, 1). */
float ty_rng_uniform(ty_rng *r);

/* Uniform integer in [0, n); n > 0. */
uint32_t ty_rng_below(ty_rng *r, uint32_t n);

/* Standard normal (Box-Muller). */
float ty_rng_normal(ty_rng *r);

/* Fisher-Yates shuffle of idx[0..n). */
void ty_rng_shuffle_u32(ty_rng *r, uint32_t *idx, uint32_t n);

#endif
