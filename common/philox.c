#include "common/philox.h"

void specd_philox4x32_10_block(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    specd_philox4x32_10(ctr, key, out);
}
