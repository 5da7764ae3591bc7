/* fuzz_safetensors: the LoRA adapter's safetensors parser (and through it the JSON reader) on
 * arbitrary bytes; every accepted tensor's data must lie inside the input. */
#include "model/runtime/safetensors.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    rt_st_file f;
    specd_error err;
    if (rt_st_parse(data, size, &f, &err) != SPECD_OK) return 0;
    for (uint32_t i = 0; i < f.n; i++) {
        const rt_st_tensor *t = &f.tensors[i];
        if (t->data < data || t->data + t->n_bytes > data + size) abort();
        if (t->n_bytes) {
            volatile float v = rt_st_get(t, 0);
            (void)v;
        }
    }
    rt_st_free(&f);
    return 0;
}
