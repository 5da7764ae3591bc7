/* Host-side planning of the device acceptance kernel (kernels/cuda/verify.cu): the per-sequence
 * description a caller fills, the argument checks the launcher runs before it enqueues anything,
 * and the scratch it needs. Plain C, unit-tested on machines without a GPU
 * (tests/gpu/test_verify_plan.c).
 *
 * What the kernel decides is what the CPU engine (include/specd/accept.h) decides for the same
 * rows, bit for bit: specd_accept_chain_keyed for chains of k drafts (each draft i checked against
 * its key row at its key position, then the correction or the bonus token) and specd_accept_tree
 * for trees (tree = 1: draft[i] is node i, parent[i] its parent, row[s] the row after node s - 1),
 * under GREEDY, COUPLED and REJECTION (q rows in device memory, checked under every rule as the
 * engine checks them, or none: a deterministic drafter; relaxed_tau as the engine's). Transform: temperature, dense logit bias, top-k, top-p,
 * min-p. Fields added after the first version (draft_probs .. parent) keep the first version's
 * behaviour at zero. */
#ifndef SPECD_KERNELS_CUDA_VERIFY_PLAN_H
#define SPECD_KERNELS_CUDA_VERIFY_PLAN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Most drafts per sequence; slots are drafts plus the bonus slot. */
enum { SPECD_CUDA_VERIFY_MAX_K = 32, SPECD_CUDA_VERIFY_MAX_SLOTS = SPECD_CUDA_VERIFY_MAX_K + 1 };
/* Threads per block of the verify kernel: the 256 lanes of the engine's fixed sums. */
enum { SPECD_CUDA_VERIFY_THREADS = 256 };
/* Words of scratch per (sequence, slot). */
enum { SPECD_CUDA_VERIFY_SLOT_WORDS = 8 };

/* Rules: the values of specd_accept_rule (include/specd/accept.h). */
enum { SPECD_CUDA_VERIFY_COUPLED = 0, SPECD_CUDA_VERIFY_GREEDY = 1, SPECD_CUDA_VERIFY_REJECTION = 2 };
/* Logits element types: the values of specd_dtype (include/specd/spec_batch.h). */
enum { SPECD_CUDA_LOGITS_F32 = 0, SPECD_CUDA_LOGITS_F16 = 1, SPECD_CUDA_LOGITS_BF16 = 2 };

/* One sequence of a step. Chain (tree = 0): slot s < k checks draft[s] against logits row row[s]
 * at key position pos[s]; slot k draws the bonus token from row[k] at pos[k], or, with
 * row[k] = -1, there is no bonus slot (the engine's SPECD_CHAIN_NO_BONUS). Tree (tree = 1): k
 * nodes in topological order, node i holding token draft[i] under parent[i] (-1: the root, else
 * an earlier node); slot s (0..k) is the row scoring the position after node s - 1 (slot 0: the
 * root), row[s] >= 0 for every slot, and pos[s] its key position (the engine's key.position plus
 * the depth of node s - 1 plus one; key.position for slot 0). */
typedef struct specd_cuda_verify_seq {
    int32_t rule;        /* SPECD_CUDA_VERIFY_* (GREEDY ignores temperature) */
    float temperature;   /* >= 0, finite; 0 = greedy */
    int32_t top_k;       /* 0 = off */
    float top_p;         /* (0, 1]; 1 = off */
    float min_p;         /* [0, 1) */
    const float *bias;   /* device: n_vocab floats added to the row (0 where unbiased; -inf
                          * bans), or NULL */
    uint64_t seed;       /* the sampling key (specd_sample_key): Philox key words */
    uint32_t sequence;   /* the counter's sequence word (never the batch row) */
    int32_t k;           /* drafts, 0..SPECD_CUDA_VERIFY_MAX_K */
    int32_t draft[SPECD_CUDA_VERIFY_MAX_K];
    int32_t row[SPECD_CUDA_VERIFY_MAX_SLOTS];
    uint32_t pos[SPECD_CUDA_VERIFY_MAX_SLOTS];
    /* ---- added with REJECTION and trees; all zero = the first version's behaviour ---- */
    const float *draft_probs; /* device: q, one row of q_stride floats per draft (per node), or
                               * NULL: a deterministic drafter (q one-hot at the draft). Checked
                               * under every rule, as the engine checks it; read by REJECTION */
    int64_t q_stride;         /* floats between q rows, >= n_vocab when draft_probs is set */
    float relaxed_tau;        /* REJECTION only: 0 exact, > 0 the engine's lossy relaxed test */
    int32_t tree;             /* 0: a chain; 1: a tree with parent[] */
    int32_t parent[SPECD_CUDA_VERIFY_MAX_K];
} specd_cuda_verify_seq;

/* Per sequence, written by the kernel in device memory. status: SPECD_CUDA_VERIFY_OK, or
 * BAD_ROW (a key row holds NaN or +inf, or masks every token: the engine's check before any
 * decision), BAD_Q (draft_probs set, under any rule: a q row is not a probability row summing to 1
 * within 1e-3, or gives its draft q = 0; bad_row names the draft / node) or BAD_PREPARE (a row the walk reached has a
 * biased logit overflowing, every token banned after the bias, or logits / T overflowing);
 * bad_row names the logits row, and the other fields are then undefined (the caller asks the CPU
 * engine for the readable message). */
enum {
    SPECD_CUDA_VERIFY_OK = 0,
    SPECD_CUDA_VERIFY_BAD_ROW = 1,
    SPECD_CUDA_VERIFY_BAD_PREPARE = 2,
    SPECD_CUDA_VERIFY_BAD_Q = 3
};
typedef struct specd_cuda_verify_out {
    int32_t status;
    int32_t bad_row;
    int32_t n_accepted;
    int32_t n_emitted;
    int32_t tokens[SPECD_CUDA_VERIFY_MAX_SLOTS];
    int32_t path[SPECD_CUDA_VERIFY_MAX_K]; /* the accepted drafts (tree nodes), root first */
} specd_cuda_verify_out;

typedef struct specd_cuda_verify_args {
    const void *logits;  /* device: row r at logits + r * row_stride elements */
    int32_t dtype;       /* SPECD_CUDA_LOGITS_* */
    int64_t row_stride;  /* elements, >= n_vocab */
    int32_t n_rows;      /* rows in the block; every row named is below it */
    int32_t n_vocab;
    float mask_at;       /* values <= mask_at are banned (-FLT_MAX: the engine's rule) */
    int32_t n_seqs;
    const specd_cuda_verify_seq *seqs; /* HOST memory, n_seqs entries (copied by the launcher) */
    specd_cuda_verify_out *out;        /* device, n_seqs entries */
    void *scratch;                     /* device, specd_cuda_verify_scratch_bytes(n_seqs) */
    size_t scratch_bytes;
} specd_cuda_verify_args;

/* 0 on overflow or n_seqs < 1. */
size_t specd_cuda_verify_scratch_bytes(int32_t n_seqs);
/* Slots the kernel's grid spans: the largest k + 1 over the sequences. */
int32_t specd_cuda_verify_grid_slots(const specd_cuda_verify_args *a);
/* SPECD_CUDA_OK or SPECD_CUDA_E_ARGUMENT with a readable reason in why. */
int specd_cuda_check_verify(const specd_cuda_verify_args *a, char *why, size_t why_size);

/* Layout of the scratch: the sequences' copy, then per (sequence, slot) the slot's token, flags
 * and prepared-row summary (SPECD_CUDA_VERIFY_SLOT_WORDS words), then one arrival counter per sequence (zeroed by the launcher before each launch). */
size_t specd_cuda_verify_scratch_slots_offset(int32_t n_seqs);
size_t specd_cuda_verify_scratch_counts_offset(int32_t n_seqs);

#ifdef __cplusplus
}
#endif
#endif
