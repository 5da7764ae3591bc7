/* The MRP residual head (policy/mrp.c): its GGUF opened over the target, whose token embedding
 * and output head it borrows, plus the head's own input projection, which the policy computes in
 * C (the runtime's layers take the projected row as a float-vector input).
 *
 * File (/work/mrp-shared/CONTRACT.md): a llama GGUF with the target's llama.* shape keys but
 * block_count L, blk.* and output_norm.weight, no token_embd/output; plus mrp.enorm.weight and
 * mrp.hnorm.weight (F32 [n_embd]), mrp.eh_proj.weight (F32 or F16, ggml [2 n_embd, n_embd]: the
 * first n_embd inputs take enorm(E[y])), mrp.version = 1, mrp.n_vocab, optional mrp.n_draft.
 *
 * Input row for target position j, with the token y that follows it and a hidden g:
 *     u = eh_proj [ enorm(E[y]) ; hnorm(g) ]
 * Shared by a spec's sequences; read only after open. */
#ifndef SPECD_POLICY_MRP_HEAD_H
#define SPECD_POLICY_MRP_HEAD_H

#include "kernels/cpu/dtype.h"
#include "specd/runtime.h"

typedef struct mrp_matrix_rows {
    const uint8_t *data;
    size_t row_bytes;
    const specd_dtype_traits *traits;
} mrp_matrix_rows;

typedef struct mrp_head {
    specd_model *model;      /* the head's layers over the target (owned) */
    int32_t n_embd, n_vocab, n_layer;
    int32_t n_draft;         /* mrp.n_draft: the K it was trained for (0 = unknown) */
    float eps;               /* the target's RMS epsilon */
    float *eh_proj;          /* n_embd rows of 2 n_embd, f32 (owned) */
    float *enorm, *hnorm;    /* n_embd each (owned copies) */
    mrp_matrix_rows embd;    /* the target's token embedding: E[y] */
    mrp_matrix_rows out;     /* the target's output head (E when tied): C = out . hp */
    const specd_dtype_traits *f32; /* f32 dot kernel */
} mrp_head;

/* Opens the head at path over target. Errors name the file: a missing or misshaped mrp.* tensor
 * or key is SPECD_E_FORMAT, a width or vocabulary that is not the target's SPECD_E_MISMATCH. */
specd_status mrp_head_open(const specd_model *target, const char *path, mrp_head **out,
                           specd_error *err);
void mrp_head_close(mrp_head *h);

/* out[n_embd] = dequantized row `token` of m. */
void mrp_head_row(const mrp_matrix_rows *m, int32_t token, int32_t n_embd, float *out);

/* u[n_embd] = eh_proj [enorm(E[y]); hnorm(g)]; scratch: 2 n_embd floats. */
void mrp_head_input(const mrp_head *h, int32_t y, const float *g, float *u, float *scratch);

/* dot of n floats with the runtime's f32 kernel */
static inline float mrp_dot(const mrp_head *h, const float *a, const float *b, int64_t n) {
    float s;
    h->f32->vec_dot(n, &s, a, b);
    return s;
}

#endif
