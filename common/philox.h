/* Philox4x32-10 counter-based RNG (Salmon et al., SC'11; Random123) and the fixed conversions
 * specd derives from it. Everything here is defined bit for bit so that a CUDA port gives the
 * same numbers: integer ops for Philox, then exact float ops for the uniform.
 *
 * Key layout used by specd's keyed sampling (documented for users in include/specd/sampling.h):
 *   key     = { seed & 0xffffffff, seed >> 32 }
 *   counter = { index, position, sequence, purpose }
 * where index is token >> 2 for per-token Gumbel noise (word token & 3 of the block belongs to
 * that token) and the draft row / tree node for accept uniforms. */
#ifndef SPECD_COMMON_PHILOX_H
#define SPECD_COMMON_PHILOX_H

#include <stdint.h>

#define SPECD_PHILOX_M0 0xD2511F53u
#define SPECD_PHILOX_M1 0xCD9E8D57u
#define SPECD_PHILOX_W0 0x9E3779B9u
#define SPECD_PHILOX_W1 0xBB67AE85u

/* One Philox4x32 round: two 32x32->64 multiplies, xors with the round key. */
static inline void specd_philox_round(uint32_t c[4], uint32_t k0, uint32_t k1) {
    uint64_t p0 = (uint64_t)SPECD_PHILOX_M0 * c[0];
    uint64_t p1 = (uint64_t)SPECD_PHILOX_M1 * c[2];
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c[1] ^ k0;
    uint32_t n1 = (uint32_t)p1;
    uint32_t n2 = (uint32_t)(p0 >> 32) ^ c[3] ^ k1;
    uint32_t n3 = (uint32_t)p0;
    c[0] = n0;
    c[1] = n1;
    c[2] = n2;
    c[3] = n3;
}

/* Philox4x32 with 10 rounds: out = philox(ctr, key). */
static inline void specd_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2],
                                       uint32_t out[4]) {
    uint32_t c[4] = {ctr[0], ctr[1], ctr[2], ctr[3]};
    uint32_t k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            k0 += SPECD_PHILOX_W0;
            k1 += SPECD_PHILOX_W1;
        }
        specd_philox_round(c, k0, k1);
    }
    out[0] = c[0];
    out[1] = c[1];
    out[2] = c[2];
    out[3] = c[3];
}

/* Uniform in the open interval (0, 1): u = ((w >> 9) + 0.5) * 2^-23. Every step is exact in
 * binary32 (23-bit integer, +0.5 needs 24 bits, power-of-two scale), so u is the same on any
 * IEEE machine; u ranges over [2^-24, 1 - 2^-24] and is never 0 or 1. */
static inline float specd_u32_to_uniform(uint32_t w) {
    return ((float)(w >> 9) + 0.5f) * 0x1p-23f;
}

/* Out-of-line copy of the block function, for tests and callers outside hot loops. */
void specd_philox4x32_10_block(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

#endif
