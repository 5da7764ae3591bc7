/* Writes a random PEFT LoRA adapter (adapter_config.json + adapter_model.safetensors, F32) for a
 * model's shape: q_proj, v_proj and down_proj of every layer, entries uniform in [-amp, amp] from
 * a fixed LCG, so a test gets the same adapter every run. Returns 0 on success.
 * isd_write_random_adapter_mask also writes specd's mask embedding: mask (n_mask floats, or NULL
 * for no tensor) as tensor mask_embedding [n_mask] and, with flag, "specd_mask_embedding": true
 * (the two are set apart so a test can write either one alone). */
#ifndef SPECD_TESTS_POLICY_ISD_RANDOM_ADAPTER_H
#define SPECD_TESTS_POLICY_ISD_RANDOM_ADAPTER_H

#include "specd/runtime.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline int isd_write_random_adapter_mask(const specd_model_info *in, const char *dir,
                                                int32_t rank, float amp, uint32_t seed,
                                                const float *mask, int32_t n_mask, int flag) {
    static const char *const mod[3] = {"self_attn.q_proj", "self_attn.v_proj", "mlp.down_proj"};
    const int64_t n_in[3] = {in->n_embd, in->n_embd, in->n_ff};
    const int64_t n_out[3] = {(int64_t)in->n_head * in->head_dim,
                              (int64_t)in->n_head_kv * in->head_dim, in->n_embd};
    char path[4096];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "{\"r\": %d, \"lora_alpha\": %d, \"target_modules\": "
               "[\"q_proj\", \"v_proj\", \"down_proj\"], \"peft_type\": \"LORA\"%s}\n",
            rank, 2 * rank, flag ? ", \"specd_mask_embedding\": true" : "");
    fclose(f);

    size_t cap = (size_t)in->n_layer * 6 * 160 + 256, len = 0;
    char *hdr = malloc(cap);
    if (!hdr) return -1;
    uint64_t off = 0;
    len += (size_t)snprintf(hdr + len, cap - len, "{");
    for (int32_t l = 0; l < in->n_layer; l++)
        for (int m = 0; m < 3; m++)
            for (int b = 0; b < 2; b++) {
                int64_t rows = b ? n_out[m] : rank, cols = b ? rank : n_in[m];
                uint64_t bytes = (uint64_t)(rows * cols) * 4;
                len += (size_t)snprintf(hdr + len, cap - len,
                                        "%s\"base_model.model.model.layers.%d.%s.lora_%c.weight\":"
                                        "{\"dtype\":\"F32\",\"shape\":[%lld,%lld],"
                                        "\"data_offsets\":[%llu,%llu]}",
                                        len > 1 ? "," : "", l, mod[m], b ? 'B' : 'A',
                                        (long long)rows, (long long)cols,
                                        (unsigned long long)off,
                                        (unsigned long long)(off + bytes));
                off += bytes;
            }
    if (mask)
        len += (size_t)snprintf(hdr + len, cap - len,
                                ",\"mask_embedding\":{\"dtype\":\"F32\",\"shape\":[%d],"
                                "\"data_offsets\":[%llu,%llu]}",
                                n_mask, (unsigned long long)off,
                                (unsigned long long)(off + 4 * (uint64_t)n_mask));
    len += (size_t)snprintf(hdr + len, cap - len, "}");
    while (len % 8) hdr[len++] = ' ';
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    f = fopen(path, "wb");
    if (!f) {
        free(hdr);
        return -1;
    }
    uint64_t hl = len;
    fwrite(&hl, 8, 1, f);
    fwrite(hdr, 1, len, f);
    free(hdr);
    uint32_t x = seed;
    for (uint64_t i = 0; i < off / 4; i++) {
        x = x * 1664525u + 1013904223u;
        float v = amp * (2.0f * (float)(x >> 8) / 16777216.0f - 1.0f);
        fwrite(&v, 4, 1, f);
    }
    if (mask) fwrite(mask, 4, (size_t)n_mask, f);
    return fclose(f) == 0 ? 0 : -1;
}

static inline int isd_write_random_adapter(const specd_model_info *in, const char *dir,
                                           int32_t rank, float amp, uint32_t seed) {
    return isd_write_random_adapter_mask(in, dir, rank, amp, seed, NULL, 0, 0);
}

#endif
