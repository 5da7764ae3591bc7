/* The MRP residual head (policy/self/mrp.c): its GGUF opened over the target, whose token embedding
 * and output head it borrows, plus the head's own input projection, which the policy computes in
 * C (the runtime's layers take the projected row as a float-vector input).
 *
 * File (written by tools/train/export_mrp.py): a llama GGUF with the target's llama.* shape keys but
 * block_count L, blk.* and output_norm.weight, no token_embd/output; plus mrp.enorm.weight and
 * mrp.hnorm.weight (F32 [n_embd]), mrp.eh_proj.weight (F32, F16 or Q8_0, ggml [2 n_embd, n_embd]: the
 * first n_embd inputs take enorm(E[y])), mrp.version = 1, mrp.n_vocab, optional mrp.n_draft and
 * optional mrp.draft_vocab: an INT32 array of distinct token ids, most frequent first (a key, not
 * a tensor: specd's GGUF reader takes only tensor types it has kernels for).
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

/* The draft vocabulary (FR-Spec's reduced draft vocabulary): the first n ids of mrp.draft_vocab
 * and their rows of the target's output head, copied in the head's own type so that C over them
 * is the very product the runtime's output head computes (hp quantized to vec_dot_type), at
 * n / n_vocab of its cost and in a small, cache-resident block (8192 Q4_1 rows: 3.5 MB). */
typedef struct mrp_vocab {
    int32_t n;               /* 0: no draft vocabulary (every C_1 over the whole vocabulary) */
    int32_t *ids;            /* n token ids (owned) */
    uint8_t *rows;           /* n rows of the output head (owned) */
    size_t row_bytes;
    const specd_dtype_traits *traits; /* the rows' type */
    const specd_dtype_traits *act;    /* its vec_dot_type: hp is quantized to it */
    size_t act_bytes;                 /* one quantized hp */
} mrp_vocab;

typedef struct mrp_head {
    specd_model *model;      /* the head's layers over the target (owned) */
    int32_t n_embd, n_vocab, n_layer;
    int32_t n_draft;         /* mrp.n_draft: the K it was trained for (0 = unknown) */
    float eps;               /* the target's RMS epsilon */
    float *eh_proj;          /* n_embd rows of 2 n_embd, f32 (owned); NULL when ehq is used */
    mrp_matrix_rows ehq;     /* a Q8_0 eh_proj (export --dtype q8_0) as stored: the input row is
                              * quantized to Q8_0 too (its runtime layers' rule), 4x less to read
                              * per row than the f32 copy */
    float *enorm, *hnorm;    /* n_embd each (owned copies) */
    mrp_matrix_rows embd;    /* the target's token embedding: E[y] */
    mrp_matrix_rows out;     /* the target's output head (E when tied): C = out . hp */
    const specd_dtype_traits *f32; /* f32 dot kernel */
    int32_t n_draft_vocab;   /* the file's mrp.draft_vocab length (0 = none) */
    mrp_vocab dv;            /* the draft vocabulary in use (dv.n = 0: none) */
} mrp_head;

/* vocab for mrp_head_open: MRP_VOCAB_AUTO takes the first MRP_VOCAB_DEFAULT ids of the file's
 * list (all of a shorter one; none without one); 0 none; N > 0 the first N (the file must have
 * them). */
#define MRP_VOCAB_AUTO (-1)
#define MRP_VOCAB_DEFAULT 8192

/* Opens the head at path over target, with the draft vocabulary `vocab` (above). Errors name the
 * file: a missing or misshaped mrp.* tensor or key is SPECD_E_FORMAT, a width or vocabulary that
 * is not the target's SPECD_E_MISMATCH, a vocab the file's list cannot give SPECD_E_INVALID_ARG. */
specd_status mrp_head_open(const specd_model *target, const char *path, int32_t vocab,
                           mrp_head **out, specd_error *err);
void mrp_head_close(mrp_head *h);

/* out[n_embd] = dequantized row `token` of m. */
void mrp_head_row(const mrp_matrix_rows *m, int32_t token, int32_t n_embd, float *out);

/* u[n_embd] = eh_proj [enorm(E[y]); hnorm(g)]; scratch: MRP_INPUT_SCRATCH(n_embd) floats. */
#define MRP_INPUT_SCRATCH(n_embd) (3 * (size_t)(n_embd))
void mrp_head_input(const mrp_head *h, int32_t y, const float *g, float *u, float *scratch);

/* c[i] = row i of the draft vocabulary . hp for i < dv.n; scratch: dv.act_bytes. */
void mrp_vocab_logits(const mrp_vocab *dv, const float *hp, int32_t n_embd, float *c,
                      void *scratch);

/* dot of n floats with the runtime's f32 kernel */
static inline float mrp_dot(const mrp_head *h, const float *a, const float *b, int64_t n) {
    float s;
    h->f32->vec_dot(n, &s, a, b);
    return s;
}

#endif
