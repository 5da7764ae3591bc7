/* Host API v2 on the real model (specd/spec_batch.h), with specd's runtime as the host engine
 * running one forward per batched step:
 *  - sequences of different policies (none, ngram, draft, layerskip, isd, risd with the shipped
 *    adapter) decoded in one batch emit exactly the tokens each emits alone;
 *  - a request's tokens depend on its stream key, not on its slot or its neighbours (each batched
 *    request sits in another slot than its solo run), and another stream key changes them;
 *  - a foreign host's logits (bf16, vocabulary padded to 49216 with -inf) give the tokens of the
 *    same bf16-rounded logits handed over as dense f32. */
#include "test_main.h"

#include "fixture_model.h"

#include "kernels/cpu/fp16.h"
#include "specd/runtime.h"
#include "specd/spec_batch.h"
#include "specd/spec_runtime.h"

#include <math.h>
#include <string.h>

enum { N_GEN = 20, N_POL = 7, MAX_PROMPT = 64, N_SLOTS = 8, MAX_DRAFT = 4, PADDED = 49216 };

enum { N_PROMPTS = 10 };
static int32_t prompts[N_PROMPTS][MAX_PROMPT];
static int64_t n_prompts[N_PROMPTS];
static specd_model *model;
static specd_context *ctx;
static int32_t n_vocab;
static char draft_opts[1200], risd_opts[1200], tree_opts[1200];
/* "draft" twice: a chain (k=3), and a tree (branch=3: chains from the root's 3 best tokens) */
static const char *policies[N_POL] = {"none", "ngram", "draft", "layerskip", "isd", "risd",
                                      "draft"};
static const char *options[N_POL];

typedef enum { LOGITS_F32, LOGITS_BF16_PADDED, LOGITS_BF16_AS_F32 } logits_mode;

typedef struct request {
    int policy;       /* index into policies */
    int prompt;
    uint64_t stream;
    int32_t slot;     /* sequence id = KV slot */
    int32_t out[N_GEN];
} request;

static void open_request(specd_spec *spec, request *r) {
    specd_seq_params p = specd_seq_default_params();
    p.policy = policies[r->policy];
    p.policy_options = options[r->policy];
    p.sampling.temperature = 0.8f;
    p.seed = 77;
    p.stream_key = r->stream;
    p.max_tokens = N_GEN;
    p.adaptive = 0;
    specd_error err;
    if (specd_spec_seq_open(spec, r->slot, prompts[r->prompt], n_prompts[r->prompt], &p, &err) !=
        SPECD_OK)
        fail_msg("open %s: %s", policies[r->policy], err.message);
    fixture_prefill(ctx, r->slot, prompts[r->prompt], n_prompts[r->prompt] - 1);
}

/* Hands the forward's f32 rows to specd the way mode says. */
static void fill_logits(const float *f32, int32_t n_rows, logits_mode mode, void *buf,
                        specd_logits *lg) {
    *lg = (specd_logits){.data = f32, .row_stride = n_vocab, .n_rows = n_rows,
                         .dtype = SPECD_DTYPE_F32, .device = SPECD_DEVICE_HOST};
    if (mode == LOGITS_F32) return;
    if (mode == LOGITS_BF16_PADDED) {
        uint16_t *h = buf;
        for (int32_t r = 0; r < n_rows; r++)
            for (int32_t x = 0; x < PADDED; x++)
                h[(size_t)r * PADDED + (size_t)x] =
                    x < n_vocab ? specd_fp32_to_bf16(f32[(size_t)r * n_vocab + (size_t)x])
                                : 0xff80u; /* -inf padding */
        *lg = (specd_logits){.data = h, .row_stride = PADDED, .n_rows = n_rows,
                             .dtype = SPECD_DTYPE_BF16, .device = SPECD_DEVICE_HOST};
        return;
    }
    float *f = buf;
    for (size_t i = 0; i < (size_t)n_rows * (size_t)n_vocab; i++)
        f[i] = specd_bf16_to_fp32(specd_fp32_to_bf16(f32[i]));
    lg->data = f;
}

/* Decodes the requests together, one target forward per step over all that are not done. */
static void run_batch(request *reqs, int n, logits_mode mode, int expect_drafts) {
    specd_spec_params sp = specd_spec_default_params();
    sp.n_vocab = n_vocab;
    sp.max_draft = MAX_DRAFT;
    sp.max_seqs = N_SLOTS;
    sp.target = model;
    specd_spec *spec;
    specd_error err;
    assert_int_equal(specd_spec_create(&sp, &spec, &err), SPECD_OK);
    for (int i = 0; i < n; i++) open_request(spec, &reqs[i]);
    size_t max_rows = (size_t)n * (size_t)specd_spec_max_step_rows(spec);
    float *logits = malloc(max_rows * (size_t)n_vocab * sizeof(float));
    void *conv = malloc(max_rows * PADDED * sizeof(float));
    assert_non_null(logits);
    assert_non_null(conv);
    for (;;) {
        int32_t active[N_SLOTS], n_active = 0;
        for (int i = 0; i < n; i++)
            if (!specd_spec_seq_done(spec, reqs[i].slot)) active[n_active++] = reqs[i].slot;
        if (n_active == 0) break;
        specd_batch batch;
        if (specd_spec_batch_layout(spec, active, n_active, &batch, &err) != SPECD_OK)
            fail_msg("layout: %s", err.message);
        specd_seq_batch sb[N_SLOTS];
        int32_t rows[N_SLOTS * (2 * MAX_DRAFT + 1)], kv_before[N_SLOTS];
        const specd_lora *lora = NULL;
        for (int32_t i = 0; i < batch.n_seqs; i++) {
            const specd_batch_seq *b = &batch.seqs[i];
            const specd_step_layout *l = &b->layout;
            sb[i] = specd_step_seq_batch(l, b->seq);
            for (int32_t j = 0; j < l->n_rows; j++)
                rows[b->row_offset + j] = b->token_offset + l->rows[j];
            if (l->lora_gate) {
                assert_non_null(l->lora_path); /* a foreign host would load this */
                assert_true(!lora || lora == l->lora);
                lora = l->lora;
            }
            kv_before[i] = specd_context_kv_len(ctx, b->seq);
        }
        assert_int_equal(batch.needs_lora, lora != NULL);
        assert_int_equal(specd_context_set_lora(ctx, lora, &err), SPECD_OK);
        specd_extend_out out = {.n_rows = batch.n_rows, .rows = rows, .logits = logits};
        assert_int_equal(specd_context_extend(ctx, sb, batch.n_seqs, &out, &err), SPECD_OK);
        specd_logits lg;
        fill_logits(logits, batch.n_rows, mode, conv, &lg);
        specd_batch_result res;
        if (specd_spec_batch_verify(spec, &lg, &res, &err) != SPECD_OK)
            fail_msg("verify: %s", err.message);
        assert_int_equal(res.n_failed, 0);
        for (int32_t i = 0; i < res.n_seqs; i++) {
            const specd_step_outcome *o = &res.outcome[i];
            int32_t keep[2 * MAX_DRAFT + 1];
            for (int32_t j = 0; j < o->n_keep; j++) keep[j] = kv_before[i] + o->keep[j];
            assert_int_equal(specd_context_kv_keep(ctx, res.seq[i], kv_before[i], o->n_keep, keep,
                                                   &err),
                             SPECD_OK);
        }
    }
    specd_context_set_lora(ctx, NULL, NULL);
    for (int i = 0; i < n; i++) {
        int64_t got;
        const int32_t *toks = specd_spec_seq_output(spec, reqs[i].slot, &got);
        assert_int_equal(got, N_GEN);
        memcpy(reqs[i].out, toks, sizeof reqs[i].out);
        specd_seq_stats st;
        assert_int_equal(specd_spec_seq_stats(spec, reqs[i].slot, &st, &err), SPECD_OK);
        if (reqs[i].policy > 0 && expect_drafts) assert_true(st.n_draft_tokens > 0);
        /* the tree really branched: more nodes per drafting step than a chain of k = 3 */
        if (reqs[i].policy == 6 && expect_drafts) {
            assert_true(st.n_draft_tokens > 3 * st.n_drafts);
            assert_true(st.n_accepted > 0);
        }
    }
    free(conv);
    free(logits);
    specd_spec_destroy(spec);
}

static void assert_same(const request *a, const request *b, const char *what) {
    for (int i = 0; i < N_GEN; i++)
        if (a->out[i] != b->out[i])
            fail_msg("%s: policy %s differs at token %d (%d vs %d)", what, policies[a->policy], i,
                     a->out[i], b->out[i]);
}

/* Every policy in one batch, each in another slot than alone, equals its solo run; and (the
 * tree) a draft policy proposing a tree of chains is token-identical to plain decoding. */
static void test_mixed_batch_equals_solo(void **s) {
    (void)s;
    request batch[N_POL];
    for (int i = 0; i < N_POL; i++)
        batch[i] = (request){.policy = i, .prompt = i, .stream = 0x1234500000000ULL + (uint64_t)i,
                             .slot = N_SLOTS - 1 - i};
    run_batch(batch, N_POL, LOGITS_F32, 1);
    int differ = 0;
    for (int i = 0; i < N_POL; i++) {
        request solo = batch[i];
        solo.slot = 0;
        run_batch(&solo, 1, LOGITS_F32, 1);
        assert_same(&batch[i], &solo, "batch vs solo (another slot)");
        request plain = solo;
        plain.policy = 0;
        run_batch(&plain, 1, LOGITS_F32, 0);
        assert_same(&solo, &plain, "policy vs plain decoding");
        /* the stream key really keys the sampling: another one changes the tokens */
        request other = solo;
        other.stream ^= 0x5a5a5a5a5a5aULL;
        run_batch(&other, 1, LOGITS_F32, 0);
        differ += memcmp(other.out, solo.out, sizeof solo.out) != 0;
    }
    assert_true(differ >= N_POL - 1);
}

/* bf16 logits with a padded vocabulary decode as the same values in f32. */
static void test_bf16_padded_logits(void **s) {
    (void)s;
    request a[3], b[3];
    static const int pol[3] = {0, 1, 4};
    for (int i = 0; i < 3; i++)
        a[i] = b[i] = (request){.policy = pol[i], .prompt = 6 + i, .stream = 900 + (uint64_t)i,
                                .slot = i};
    run_batch(a, 3, LOGITS_BF16_PADDED, 0);
    run_batch(b, 3, LOGITS_BF16_AS_F32, 0);
    for (int i = 0; i < 3; i++) assert_same(&a[i], &b[i], "bf16 padded vs bf16-rounded f32");
}

int main(void) {
    const char *path = specd_test_model_path();
    const char *src = getenv("SPECD_SOURCE_DIR");
    model = fixture_model_open();
    fixture_golden_prompts(N_PROMPTS, MAX_PROMPT, &prompts[0][0], n_prompts);
    n_vocab = specd_model_get_info(model)->n_vocab;
    snprintf(draft_opts, sizeof draft_opts, "model=%s,k=3", path);
    snprintf(risd_opts, sizeof risd_opts, "n=3,adapter=%s/artifacts/adapters/smollm2-135m-risd",
             src ? src : ".");
    options[2] = draft_opts;
    options[3] = "layers=10,k=3";
    options[4] = "n=3";
    options[5] = risd_opts;
    snprintf(tree_opts, sizeof tree_opts, "model=%s,k=3,branch=3", path);
    options[6] = tree_opts;
    ctx = fixture_context(model, N_SLOTS, 256, N_SLOTS * (2 * MAX_DRAFT + 1));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mixed_batch_equals_solo),
        cmocka_unit_test(test_bf16_padded_logits),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    fixture_close(model, ctx);
    return rc;
}
