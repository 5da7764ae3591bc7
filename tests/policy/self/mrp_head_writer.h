/* Writes an MRP head GGUF (the layout of policy/self/mrp_head.h) shaped after a target, with small random
 * weights, for the mrp policy's tests: a head file that always exists (the identity tests hold
 * for any head) and broken variants (a tensor left out, another width or vocabulary). The init
 * of the paper is kept (eh_proj = [0 | I], norms 1) with noise on top, so drafts differ from the
 * untrained head's. An optional draft vocabulary goes in as the exporter writes it. Test-side code: returns -1 on any failure. */
#ifndef SPECD_TESTS_MRP_HEAD_WRITER_H
#define SPECD_TESTS_MRP_HEAD_WRITER_H

#include "gguf/gguf_builder.h"
#include "kernels/cpu/dtype.h"
#include "specd/runtime.h"

#include <stdio.h>

typedef struct mrp_head_spec {
    specd_model_info info; /* the target's shape (n_layer = the head's layers) */
    int32_t n_vocab_key;   /* mrp.n_vocab written */
    const char *omit;      /* a tensor to leave out, or NULL */
    int no_version;        /* leave mrp.version out */
    float noise;           /* weight scale */
    int zero_output;       /* output_norm = 0: the head's output and residual are 0 (C = 0) */
    uint32_t seed;
    const int32_t *draft_vocab; /* mrp.draft_vocab (INT32 array key), or NULL */
    int32_t n_draft_vocab;
    int q8_eh_proj;             /* mrp.eh_proj.weight as Q8_0 (export --dtype q8_0) */
} mrp_head_spec;

static uint32_t mrp_w_rng(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}
static float mrp_w_uniform(uint32_t *s) { /* [-1, 1) */
    return (float)mrp_w_rng(s) / (float)(1u << 23) - 1.0f;
}

typedef struct mrp_w_tensor {
    char name[64];
    uint64_t ne[2];
    uint32_t n_dims;
    int kind; /* 0 random, 1 ones (norm), 2 eh_proj init, 3 zeros */
} mrp_w_tensor;

static int mrp_write_head(const char *path, const mrp_head_spec *sp) {
    const specd_model_info *in = &sp->info;
    const uint64_t E = (uint64_t)in->n_embd, F = (uint64_t)in->n_ff,
                   KV = (uint64_t)in->n_head_kv * (uint64_t)in->head_dim;
    mrp_w_tensor t[64];
    int nt = 0;
#define MRP_W_ADD(nm, d, a, b, k)                                                                  \
    do {                                                                                           \
        snprintf(t[nt].name, sizeof t[nt].name, "%s", nm);                                         \
        t[nt].n_dims = d;                                                                          \
        t[nt].ne[0] = a;                                                                           \
        t[nt].ne[1] = b;                                                                           \
        t[nt].kind = k;                                                                            \
        nt++;                                                                                      \
    } while (0)
    for (int l = 0; l < in->n_layer && l < 4; l++) {
        char nm[64];
        static const char *const names[9] = {"attn_norm", "attn_q", "attn_k",  "attn_v",
                                             "attn_output", "ffn_norm", "ffn_gate", "ffn_up",
                                             "ffn_down"};
        const uint64_t ne0[9] = {E, E, E, E, E, E, E, E, F}, ne1[9] = {1, E, KV, KV, E, 1, F, F, E};
        for (int i = 0; i < 9; i++) {
            snprintf(nm, sizeof nm, "blk.%d.%s.weight", l, names[i]);
            MRP_W_ADD(nm, ne1[i] == 1 ? 1 : 2, ne0[i], ne1[i], ne1[i] == 1 ? 1 : 0);
        }
    }
    MRP_W_ADD("output_norm.weight", 1, E, 1, sp->zero_output ? 3 : 1);
    MRP_W_ADD("mrp.enorm.weight", 1, E, 1, 1);
    MRP_W_ADD("mrp.hnorm.weight", 1, E, 1, 1);
    MRP_W_ADD("mrp.eh_proj.weight", 2, 2 * E, E, 2);
#undef MRP_W_ADD
    int n_keep = 0;
    for (int i = 0; i < nt; i++)
        if (!sp->omit || strcmp(sp->omit, t[i].name)) t[n_keep++] = t[i];
    nt = n_keep;

    gguf_builder b;
    memset(&b, 0, sizeof b);
    const int n_kv = 14 + (sp->no_version ? 0 : 1) + (sp->draft_vocab ? 1 : 0);
    gb_header(&b, 3, (uint64_t)nt, (uint64_t)n_kv);
    gb_kv_str(&b, "general.architecture", "llama");
    gb_kv_str(&b, "general.name", "mrp test head");
    gb_kv_u32(&b, "llama.block_count", (uint32_t)in->n_layer);
    gb_kv_u32(&b, "llama.context_length", (uint32_t)in->n_ctx_train);
    gb_kv_u32(&b, "llama.embedding_length", (uint32_t)in->n_embd);
    gb_kv_u32(&b, "llama.feed_forward_length", (uint32_t)in->n_ff);
    gb_kv_u32(&b, "llama.attention.head_count", (uint32_t)in->n_head);
    gb_kv_u32(&b, "llama.attention.head_count_kv", (uint32_t)in->n_head_kv);
    gb_kv_f32(&b, "llama.attention.layer_norm_rms_epsilon", in->rms_eps);
    gb_kv_f32(&b, "llama.rope.freq_base", in->rope_freq_base);
    gb_kv_u32(&b, "llama.rope.dimension_count", (uint32_t)in->n_rot);
    gb_kv_u32(&b, "llama.vocab_size", (uint32_t)in->n_vocab);
    gb_kv_u32(&b, "mrp.n_vocab", (uint32_t)sp->n_vocab_key);
    gb_kv_u32(&b, "mrp.n_draft", 3);
    if (!sp->no_version) gb_kv_u32(&b, "mrp.version", 1);
    if (sp->draft_vocab) {
        gb_key(&b, "mrp.draft_vocab", 9 /* array */);
        gb_u32(&b, 5 /* INT32 */);
        gb_u64(&b, (uint64_t)sp->n_draft_vocab);
        for (int32_t i = 0; i < sp->n_draft_vocab; i++) gb_u32(&b, (uint32_t)sp->draft_vocab[i]);
    }
    uint64_t off = 0;
    for (int i = 0; i < nt; i++) {
        int q8 = sp->q8_eh_proj && t[i].kind == 2;
        gb_tensor(&b, t[i].name, t[i].n_dims, t[i].ne, q8 ? SPECD_DTYPE_Q8_0 : SPECD_DTYPE_F32,
                  off);
        off += q8 ? t[i].ne[1] * specd_dtype_row_bytes(SPECD_DTYPE_Q8_0, (int64_t)t[i].ne[0])
                  : t[i].ne[0] * t[i].ne[1] * 4;
        off = (off + 31) / 32 * 32;
    }
    float rowf[4096];
    uint8_t rowq[4096 * 2];
    gb_pad(&b, 32);
    uint32_t rng = sp->seed ? sp->seed : 1;
    const float in_scale = sp->noise;
    for (int i = 0; i < nt; i++) {
        uint64_t n0 = t[i].ne[0], n1 = t[i].ne[1];
        int q8 = sp->q8_eh_proj && t[i].kind == 2 && n0 <= 4096;
        for (uint64_t r = 0; r < n1; r++) {
            for (uint64_t c = 0; c < n0; c++) {
                float v;
                if (t[i].kind == 1)
                    v = 1.0f;
                else if (t[i].kind == 3)
                    v = 0.0f;
                else if (t[i].kind == 2) /* row r of [W_e | W_h]: W_h = I */
                    v = (c == E + r ? 1.0f : 0.0f) + in_scale * mrp_w_uniform(&rng);
                else
                    v = in_scale * mrp_w_uniform(&rng);
                if (q8)
                    rowf[c] = v;
                else
                    gb_f32(&b, v);
            }
            if (q8) {
                specd_dtype_traits_get(SPECD_DTYPE_Q8_0)->from_float(rowf, rowq, (int64_t)n0);
                gb_bytes(&b, rowq, specd_dtype_row_bytes(SPECD_DTYPE_Q8_0, (int64_t)n0));
            }
        }
        gb_pad(&b, 32);
    }
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(b.buf, 1, b.len, f) == b.len;
    if (f && fclose(f) != 0) ok = 0;
    gb_free(&b);
    return ok ? 0 : -1;
}

#endif
