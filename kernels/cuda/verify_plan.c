/* Argument checks and scratch layout of the device acceptance kernel (verify_plan.h). */
#include "kernels/cuda/verify_plan.h"

#include <math.h>
#include <stdio.h>

#include "kernels/cuda/cuda_plan.h"

enum { SLOT_WORDS = SPECD_CUDA_VERIFY_SLOT_WORDS };

static size_t align256(size_t n) { return (n + 255) / 256 * 256; }

size_t specd_cuda_verify_scratch_slots_offset(int32_t n_seqs) {
    if (n_seqs < 1 || n_seqs > (1 << 20)) return 0;
    return align256((size_t)n_seqs * sizeof(specd_cuda_verify_seq));
}

size_t specd_cuda_verify_scratch_counts_offset(int32_t n_seqs) {
    size_t o = specd_cuda_verify_scratch_slots_offset(n_seqs);
    if (!o) return 0;
    return o + align256((size_t)n_seqs * SPECD_CUDA_VERIFY_MAX_SLOTS * SLOT_WORDS *
                        sizeof(int32_t));
}

size_t specd_cuda_verify_scratch_bytes(int32_t n_seqs) {
    size_t o = specd_cuda_verify_scratch_counts_offset(n_seqs);
    if (!o) return 0;
    return o + align256((size_t)n_seqs * sizeof(uint32_t));
}

int32_t specd_cuda_verify_grid_slots(const specd_cuda_verify_args *a) {
    int32_t m = 0;
    for (int32_t i = 0; i < a->n_seqs; i++)
        if (a->seqs[i].k + 1 > m) m = a->seqs[i].k + 1;
    return m;
}

#define REFUSE(...)                                                                              \
    do {                                                                                         \
        if (why && why_size) snprintf(why, why_size, __VA_ARGS__);                               \
        return SPECD_CUDA_E_ARGUMENT;                                                            \
    } while (0)

static int check_seq(const specd_cuda_verify_args *a, int32_t i, char *why, size_t why_size) {
    const specd_cuda_verify_seq *s = &a->seqs[i];
    if (s->rule != SPECD_CUDA_VERIFY_COUPLED && s->rule != SPECD_CUDA_VERIFY_GREEDY &&
        s->rule != SPECD_CUDA_VERIFY_REJECTION)
        REFUSE("verify: sequence %d: rule %d is not GREEDY, COUPLED or REJECTION", (int)i,
               (int)s->rule);
    if (!(s->temperature >= 0.0f) || !isfinite(s->temperature))
        REFUSE("verify: sequence %d: temperature %g must be finite and >= 0", (int)i,
               (double)s->temperature);
    if (s->top_k < 0) REFUSE("verify: sequence %d: top_k %d < 0", (int)i, (int)s->top_k);
    if (!(s->top_p > 0.0f && s->top_p <= 1.0f))
        REFUSE("verify: sequence %d: top_p %g outside (0, 1]", (int)i, (double)s->top_p);
    if (!(s->min_p >= 0.0f && s->min_p < 1.0f))
        REFUSE("verify: sequence %d: min_p %g outside [0, 1)", (int)i, (double)s->min_p);
    if (s->bias && ((uintptr_t)s->bias & 3u))
        REFUSE("verify: sequence %d: bias is not 4-byte aligned", (int)i);
    if (!(s->relaxed_tau >= 0.0f) || !isfinite(s->relaxed_tau))
        REFUSE("verify: sequence %d: relaxed_tau %g must be finite and >= 0", (int)i,
               (double)s->relaxed_tau);
    if (s->relaxed_tau > 0.0f && s->rule != SPECD_CUDA_VERIFY_REJECTION)
        REFUSE("verify: sequence %d: relaxed_tau applies to the REJECTION rule only", (int)i);
    if (s->draft_probs) { /* checked under every rule (the engine's), read by REJECTION */
        if ((uintptr_t)s->draft_probs & 3u)
            REFUSE("verify: sequence %d: draft_probs is not 4-byte aligned", (int)i);
        if (s->q_stride < a->n_vocab || s->q_stride > ((int64_t)1 << 40))
            REFUSE("verify: sequence %d: q stride %lld below n_vocab %d or absurd", (int)i,
                   (long long)s->q_stride, (int)a->n_vocab);
    }
    if (s->tree != 0 && s->tree != 1)
        REFUSE("verify: sequence %d: tree %d is neither 0 (chain) nor 1", (int)i, (int)s->tree);
    if (s->k < 0 || s->k > SPECD_CUDA_VERIFY_MAX_K)
        REFUSE("verify: sequence %d: k %d outside [0, %d]", (int)i, (int)s->k,
               SPECD_CUDA_VERIFY_MAX_K);
    if (s->k == 0 && s->row[0] < 0)
        REFUSE("verify: sequence %d: no draft and no bonus row: nothing to verify", (int)i);
    if (s->tree && s->k < 1)
        REFUSE("verify: sequence %d: a tree needs at least one node", (int)i);
    for (int32_t j = 0; j < s->k; j++) {
        if (s->draft[j] < 0 || s->draft[j] >= a->n_vocab)
            REFUSE("verify: sequence %d: draft %d: token %d outside [0, %d)", (int)i, (int)j,
                   (int)s->draft[j], (int)a->n_vocab);
        if (s->row[j] < 0 || s->row[j] >= a->n_rows)
            REFUSE("verify: sequence %d: draft %d's key row %d outside [0, %d)", (int)i, (int)j,
                   (int)s->row[j], (int)a->n_rows);
        if (s->tree && (s->parent[j] < -1 || s->parent[j] >= j))
            REFUSE("verify: sequence %d: tree node %d: parent %d is neither -1 nor an earlier "
                   "node", (int)i, (int)j, (int)s->parent[j]);
    }
    if (s->row[s->k] < -1 || s->row[s->k] >= a->n_rows)
        REFUSE("verify: sequence %d: bonus row %d is neither -1 nor in [0, %d)", (int)i,
               (int)s->row[s->k], (int)a->n_rows);
    if (s->tree && s->row[s->k] < 0)
        REFUSE("verify: sequence %d: a tree scores a row after every node: bonus row -1", (int)i);
    return SPECD_CUDA_OK;
}

int specd_cuda_check_verify(const specd_cuda_verify_args *a, char *why, size_t why_size) {
    if (!a) REFUSE("verify: NULL arguments");
    if (!a->logits || !a->seqs || !a->out || !a->scratch)
        REFUSE("verify: logits, seqs, out or scratch is NULL");
    if (a->dtype != SPECD_CUDA_LOGITS_F32 && a->dtype != SPECD_CUDA_LOGITS_F16 &&
        a->dtype != SPECD_CUDA_LOGITS_BF16)
        REFUSE("verify: logits dtype %d is not f32, f16 or bf16", (int)a->dtype);
    const size_t es = a->dtype == SPECD_CUDA_LOGITS_F32 ? 4 : 2;
    if ((uintptr_t)a->logits % es) REFUSE("verify: logits are not %zu-byte aligned", es);
    if (a->n_vocab < 1) REFUSE("verify: n_vocab %d < 1", (int)a->n_vocab);
    if (a->row_stride < a->n_vocab || a->row_stride > ((int64_t)1 << 40))
        REFUSE("verify: row stride %lld below n_vocab %d or absurd", (long long)a->row_stride,
               (int)a->n_vocab);
    if (a->n_rows < 1) REFUSE("verify: n_rows %d < 1", (int)a->n_rows);
    if (a->mask_at != a->mask_at) REFUSE("verify: mask_at is NaN");
    if (a->n_seqs < 1 || a->n_seqs > 65535)
        REFUSE("verify: n_seqs %d outside [1, 65535] (the grid's y limit)", (int)a->n_seqs);
    if (a->scratch_bytes < specd_cuda_verify_scratch_bytes(a->n_seqs))
        REFUSE("verify: scratch of %zu bytes, %zu needed", a->scratch_bytes,
               specd_cuda_verify_scratch_bytes(a->n_seqs));
    if ((uintptr_t)a->scratch % 256 || (uintptr_t)a->out % 4)
        REFUSE("verify: scratch is not 256-byte aligned or out not 4-byte aligned");
    for (int32_t i = 0; i < a->n_seqs; i++)
        if (check_seq(a, i, why, why_size) != SPECD_CUDA_OK) return SPECD_CUDA_E_ARGUMENT;
    return SPECD_CUDA_OK;
}
