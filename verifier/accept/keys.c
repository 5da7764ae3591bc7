/* The sampling keys of the acceptance engine: where every keyed decision of a sequence draws its
 * Philox stream from (specd/sampling.h). One definition, used by the session, the daemons and any
 * host that samples its own plain steps. */
#include "specd/sampling.h"

static uint64_t mix64(uint64_t x) { /* splitmix64's finaliser */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

specd_sample_key specd_stream_sample_key(uint64_t seed, uint64_t stream, uint32_t position) {
    uint64_t hi = stream >> 32;
    specd_sample_key k = {.seed = hi ? mix64(seed ^ mix64(hi)) : seed,
                          .sequence = (uint32_t)stream, .position = position};
    return k;
}
