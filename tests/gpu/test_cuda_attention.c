/* libspecd_cuda.so's attention against the CPU's (kernels/cpu/attention.c): 9 query heads over 3
 * KV heads of 64 dims, an F16 K cache of rows and a transposed F16 V cache, 700 positions (three
 * splits), each row with its own visibility (a prefix of its own length with holes). The cache
 * past n_kv holds NaNs, which must never be read. Then batch invariance: each row alone has the
 * bits it has inside batches of 2..64 rows, and the same bits with n_kv cut just after its last
 * visible position. Last, the tree property: a row with holes has the bits of the same query over
 * a cache holding only its visible positions, packed in order (what plain decoding sees once a
 * tree's accepted path is committed). Skipped (exit 77) without the kernel library or a device. */
#include "gpu_harness.h"

#include "kernels/cpu/fp16.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/cuda_plan.h"

enum {
    ROWS = 64, HEADS = 9, KV_HEADS = 3, HD = 64, NKV = 700, CAP = 768,
    WIDTH = HEADS * HD, KV_DIM = KV_HEADS * HD
};

static float *scratch_scores, *scratch_probs;

static void cpu_attention(const float *q, const uint16_t *k, const uint16_t *vt,
                          const uint8_t *vis, float scale, float *out) {
    for (int r = 0; r < ROWS; r++)
        for (int h = 0; h < HEADS; h++) {
            const int kvh = h / (HEADS / KV_HEADS);
            specd_attention_row(q + (size_t)r * WIDTH + h * HD, k + kvh * HD, KV_DIM,
                                vt + (size_t)kvh * HD * CAP, CAP, vis + (size_t)r * NKV, NKV, HD,
                                scale, scratch_scores, scratch_probs,
                                out + (size_t)r * WIDTH + h * HD, 0);
        }
}

/* Each row with holes against its query over a cache of only its visible positions (K rows and
 * V^T columns gathered in order, the rest NaN, a mask of the first m positions): bitwise. */
static int packed_rows_equal(const gpu_ctx *g, const specd_cuda_attention_args *a,
                             const uint16_t *k, const uint16_t *vt, const uint8_t *vis,
                             const int32_t *last, const float *alone) {
    uint16_t *pk = host_alloc((size_t)CAP * KV_DIM * 2), *pv = host_alloc((size_t)KV_DIM * CAP * 2);
    uint8_t *pvis = host_alloc(NKV);
    const int32_t words = specd_cuda_mask_words(NKV);
    uint32_t *pmask = host_alloc((size_t)words * sizeof(uint32_t));
    float *got = host_alloc(WIDTH * sizeof(float));
    specd_cuda_attention_args one = *a;
    one.n_rows = 1;
    int same = 1, holes = 0;
    for (int r = 0; r < ROWS && same; r++) {
        int32_t m = 0;
        for (size_t i = 0; i < (size_t)CAP * KV_DIM; i++)
            pk[i] = pv[i] = 0x7e00;
        for (int j = 0; j <= last[r]; j++) {
            if (!vis[(size_t)r * NKV + j]) continue;
            memcpy(pk + (size_t)m * KV_DIM, k + (size_t)j * KV_DIM, KV_DIM * 2);
            for (int d = 0; d < KV_DIM; d++)
                pv[(size_t)d * CAP + m] = vt[(size_t)d * CAP + j];
            m++;
        }
        if (m == last[r] + 1) continue; /* no hole: the cut check above covers it */
        holes++;
        memset(pvis, 0, NKV);
        memset(pvis, 1, (size_t)m);
        if (specd_cuda_pack_visibility(pvis, NKV, 1, NKV, pmask, words) != SPECD_CUDA_OK) {
            printf("FAIL: pack_visibility\n");
            return 0;
        }
        one.k = gpu_put(g, pk, (size_t)CAP * KV_DIM * 2);
        one.v = gpu_put(g, pv, (size_t)KV_DIM * CAP * 2);
        one.visible = gpu_put(g, pmask, (size_t)words * sizeof(uint32_t));
        one.q = a->q + (size_t)r * WIDTH;
        gpu_check(g, "attention", g->k->attention(&one, NULL));
        gpu_get(g, got, one.out, WIDTH * sizeof(float));
        same = gpu_same_bits("attention row with holes vs its keys packed", got,
                             alone + (size_t)r * WIDTH, WIDTH);
        gpu_free(g, (void *)one.k), gpu_free(g, (void *)one.v), gpu_free(g, (void *)one.visible);
    }
    printf("attention: %d rows with holes against their visible keys packed: %s\n", holes,
           same ? "bitwise" : "DIFFER  FAIL");
    free(pk), free(pv), free(pvis), free(pmask), free(got);
    return same && holes > 0;
}

int main(void) {
    const gpu_ctx g = gpu_open_or_skip();
    const float scale = 0.125f;
    float *q = host_alloc((size_t)ROWS * WIDTH * sizeof(float)), *tmp = host_alloc(CAP * KV_DIM * sizeof(float));
    uint16_t *k = host_alloc((size_t)CAP * KV_DIM * 2), *vt = host_alloc((size_t)KV_DIM * CAP * 2);
    uint8_t *vis = host_alloc((size_t)ROWS * NKV);
    int32_t last[ROWS];
    gpu_fill(q, (size_t)ROWS * WIDTH, 1.0f);
    gpu_fill(tmp, (size_t)CAP * KV_DIM, 1.0f);
    for (size_t i = 0; i < (size_t)CAP * KV_DIM; i++)
        k[i] = i < (size_t)NKV * KV_DIM ? specd_fp32_to_fp16(tmp[i]) : 0x7e00; /* NaN past n_kv */
    gpu_fill(tmp, (size_t)CAP * KV_DIM, 1.0f);
    for (int d = 0; d < KV_DIM; d++)
        for (int j = 0; j < CAP; j++)
            vt[(size_t)d * CAP + j] = j < NKV ? specd_fp32_to_fp16(tmp[(size_t)d * CAP + j]) : 0x7e00;
    for (int r = 0; r < ROWS; r++) {
        /* row r sees a prefix up to `last` (some rows only the first split, some all three),
         * with about one position in eight hidden; position 0 always visible */
        last[r] = r == 0 ? 0 : (int32_t)(gpu_rng_next() % NKV);
        if (r == 1) last[r] = NKV - 1;
        for (int j = 0; j <= last[r]; j++)
            vis[(size_t)r * NKV + j] = j == 0 || j == last[r] || gpu_rng_next() % 8 != 0;
    }
    scratch_scores = host_alloc(NKV * sizeof(float));
    scratch_probs = host_alloc((NKV + 31) / 32 * 32 * sizeof(float));
    float *cpu = host_alloc((size_t)ROWS * WIDTH * sizeof(float));
    float *gpu = host_alloc((size_t)ROWS * WIDTH * sizeof(float));
    float *alone = host_alloc((size_t)ROWS * WIDTH * sizeof(float));
    cpu_attention(q, k, vt, vis, scale, cpu);

    const int32_t words = specd_cuda_mask_words(NKV);
    uint32_t *mask = host_alloc((size_t)ROWS * words * sizeof(uint32_t));
    if (specd_cuda_pack_visibility(vis, NKV, ROWS, NKV, mask, words) != SPECD_CUDA_OK) {
        printf("FAIL: pack_visibility\n");
        return 1;
    }
    specd_cuda_attention_args a = {0};
    a.q = gpu_put(&g, q, (size_t)ROWS * WIDTH * sizeof(float));
    a.ld_q = WIDTH;
    a.k = gpu_put(&g, k, (size_t)CAP * KV_DIM * 2);
    a.k_pos_stride = KV_DIM;
    a.k_head_stride = HD;
    a.v = gpu_put(&g, vt, (size_t)KV_DIM * CAP * 2);
    a.v_pos_stride = 1;
    a.v_dim_stride = CAP;
    a.v_head_stride = (int64_t)HD * CAP;
    a.visible = gpu_put(&g, mask, (size_t)ROWS * words * sizeof(uint32_t));
    a.mask_words = words;
    a.n_rows = ROWS;
    a.n_heads = HEADS;
    a.n_kv_heads = KV_HEADS;
    a.head_dim = HD;
    a.n_kv = NKV;
    a.scale = scale;
    a.out = gpu_alloc(&g, (size_t)ROWS * WIDTH * sizeof(float));
    a.ld_out = WIDTH;
    a.work_floats = specd_cuda_attention_work_floats(ROWS, HEADS, HD, NKV);
    a.work = gpu_alloc(&g, a.work_floats * sizeof(float));
    gpu_check(&g, "attention", g.k->attention(&a, NULL));
    gpu_get(&g, gpu, a.out, (size_t)ROWS * WIDTH * sizeof(float));
    char name[96];
    snprintf(name, sizeof name, "attention %d/%d heads x %d, %d positions, %d rows", HEADS,
             KV_HEADS, HD, NKV, ROWS);
    int ok = gpu_compare(name, gpu, cpu, (size_t)ROWS * WIDTH, 5e-4);

    /* batch invariance: every row alone (and with n_kv cut after its last visible position),
     * then each batch size */
    specd_cuda_attention_args one = a;
    one.n_rows = 1;
    int invariant = 1, cut = 1;
    for (int r = 0; r < ROWS; r++) {
        one.q = a.q + (size_t)r * WIDTH;
        one.visible = a.visible + (size_t)r * words;
        one.out = a.out + (size_t)r * WIDTH;
        one.n_kv = NKV;
        gpu_check(&g, "attention", g.k->attention(&one, NULL));
    }
    gpu_get(&g, alone, a.out, (size_t)ROWS * WIDTH * sizeof(float));
    for (int r = 0; r < ROWS && cut; r++) {
        one.q = a.q + (size_t)r * WIDTH;
        one.visible = a.visible + (size_t)r * words;
        one.out = a.out;
        one.n_kv = last[r] + 1;
        gpu_check(&g, "attention", g.k->attention(&one, NULL));
        gpu_get(&g, gpu, a.out, WIDTH * sizeof(float));
        cut = gpu_same_bits("attention n_kv cut vs full", gpu, alone + (size_t)r * WIDTH, WIDTH);
    }
    for (int b = 2; b <= ROWS && invariant; b++) {
        specd_cuda_attention_args batch = a;
        batch.n_rows = b;
        gpu_check(&g, "attention", g.k->attention(&batch, NULL));
        gpu_get(&g, gpu, a.out, (size_t)b * WIDTH * sizeof(float));
        invariant = gpu_same_bits("attention batch vs rows alone", gpu, alone, (size_t)b * WIDTH);
    }
    printf("attention: batch invariance over 1..%d rows %s; n_kv cut after the last visible "
           "position %s\n",
           ROWS, invariant ? "bitwise" : "BROKEN  FAIL", cut ? "bitwise" : "DIFFERS  FAIL");
    const int packed = packed_rows_equal(&g, &a, k, vt, vis, last, alone);
    gpu_free(&g, (void *)a.q), gpu_free(&g, (void *)a.k), gpu_free(&g, (void *)a.v);
    gpu_free(&g, (void *)a.visible), gpu_free(&g, a.out), gpu_free(&g, a.work);
    free(q), free(tmp), free(k), free(vt), free(vis), free(mask);
    free(cpu), free(gpu), free(alone), free(scratch_scores), free(scratch_probs);
    ok &= invariant && cut && packed;
    printf("%s\n", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
