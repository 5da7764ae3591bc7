/* SimSD (policy simsd, paper 004) on the real model: the paper's precision figures and speedups
 * measured here, each beside its anchor from the same run.
 *
 * 1. Precision (Figs. 3-4, Table 4's KL): for blocks the drafter decodes greedily after each
 *    prompt, KL(D || V) and top-1 agreement by draft step between the drafter's distribution D at
 *    its step r and the target's one-pass verification V at D~_{o_r}: self-draft (the block model
 *    drafting for itself: D is the sequential replay), self-draft without the RoPE copy, and the
 *    cross-model drafter.
 * 2. Speed and acceptance, per block size B and draft length gamma <= B: the target decoding
 *    alone (gamma=0, one slot per forward: the anchor, run right before each drafter run so both
 *    see the same load) and simsd with the self and the cross-model drafter: alpha (accepted /
 *    drafted), accepted drafts per verification (with gamma = B: per block, Table 4's figure), tokens per target forward, the drafter's cost ratio
 *    rho = (time in the policy per draft step) / (one target forward), wall-clock speedup over
 *    the anchor, and T_SD = (1 + gamma rho) T_theta's prediction of it from the measured TPFs.
 * Greedy (T = 0); prompts: the chat-templated ids of tests/data/runtime_greedy_golden.txt.
 *
 * usage: bench_simsd [-m MODEL] [-n TOKENS] [-p PROMPTS] [-t THREADS] [--src DIR]
 *                    [--adapter DIR] [--drafter-adapter DIR] [--drafter-layers L] [--blocks 4]
 *                    [--gammas 1,2,3,4]
 */
#include "tests/golden_prompts.h"

#include "common/clock.h"
#include "policy/dlm/simsd_drafter.h"
#include "policy/dlm/simsd_replay.h"
#include "specd/spec_runtime.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_PROMPTS = 10, MAX_PROMPT = 512, PREC_BLOCKS = 4, PB = 4 };

static int32_t prompts[MAX_PROMPTS][MAX_PROMPT];
static int64_t n_prompts[MAX_PROMPTS];
static int n_p = 6, n_gen = 64, threads = 0, layers = 8;
static char adapter[4096], dadapter[4096];
static specd_model *model;
static int32_t n_vocab;

static int die(const char *what, const specd_error *err) {
    fprintf(stderr, "bench_simsd: %s: %s\n", what, err->message);
    exit(1);
}

static specd_context *context(int32_t n_layers, int32_t n_ctx) {
    specd_context_params cp = specd_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_batch = 64;
    cp.n_threads = threads;
    cp.n_layers = n_layers;
    specd_context *c;
    specd_error err;
    if (specd_context_create(model, &cp, &c, &err) != SPECD_OK) die("context", &err);
    return c;
}

/* --- 1. precision ------------------------------------------------------------------------- */

typedef struct prec {
    double kl[PB], agree[PB];
    int n;
    uint64_t draft_ns, verify_ns; /* the drafter's gamma steps; the target's one-pass forward */
} prec;

static void precision(void) {
    specd_error err;
    specd_lora *lora;
    if (specd_lora_create(model, adapter, &lora, &err) != SPECD_OK) die("adapter", &err);
    int32_t n_embd = 0;
    const float *mvec = specd_lora_mask_embedding(lora, &n_embd);
    specd_context *c = context(0, MAX_PROMPT + PREC_BLOCKS * PB + 2 * PB + 2);
    if (specd_context_set_lora(c, lora, &err) != SPECD_OK) die("lora", &err);
    specd_policy_env env = {.n_vocab = n_vocab, .max_draft = 8, .target = model,
                            .rule = SPECD_ACCEPT_GREEDY};
    env.sampling = specd_sampling_default_params();
    env.sampling.temperature = 0.0f;
    specd_lora *dlora = NULL;
    if (dadapter[0] && specd_lora_create(model, dadapter, &dlora, &err) != SPECD_OK)
        die("drafter adapter", &err);
    specd_simsd_drafter *self, *cross;
    if (specd_simsd_drafter_create(&env, model, 0, lora, PB, 0, threads, &self, &err) != SPECD_OK ||
        specd_simsd_drafter_create(&env, model, layers, dlora ? dlora : lora, PB, 0, threads,
                                   &cross, &err) != SPECD_OK)
        die("drafter", &err);
    const size_t V = (size_t)n_vocab;
    float *one = malloc(PB * V * sizeof(float)), *seq = malloc(PB * V * sizeof(float));
    prec pr[3]; /* self, self without RoPE copy, cross */
    memset(pr, 0, sizeof pr);
    for (int p = 0; p < n_p; p++) {
        static int32_t h[MAX_PROMPT + PREC_BLOCKS * PB];
        int64_t n = n_prompts[p];
        memcpy(h, prompts[p], (size_t)n * sizeof(int32_t));
        specd_context_kv_truncate(c, 0, 0, NULL);
        specd_seq_batch pb = {.seq = 0, .n_tokens = (int32_t)(n - 1), .tokens = h};
        if (specd_context_extend(c, &pb, 1, NULL, &err) != SPECD_OK) die("prefill", &err);
        for (int blk = 0; blk < PREC_BLOCKS; blk++) {
            for (int which = 0; which < 3; which++) {
                specd_simsd_draft dr;
                specd_simsd_drafter *d = which == 2 ? cross : self;
                static const int32_t masks[PB] = {-1, -1, -1, -1};
                uint64_t t0 = specd_now_ns();
                if (specd_simsd_drafter_draft(d, h, n, masks, PB, &dr, &err) != SPECD_OK)
                    die("draft", &err);
                /* the first block's draft also prefills the prompt into the drafter's cache */
                if (blk > 0) pr[which].draft_ns += specd_now_ns() - t0;
                specd_simsd_replay_input in = {.target = c, .use_lora = 1, .mask_vec = mvec,
                                               .n_embd = n_embd, .mask_id = 0, .n_vocab = n_vocab,
                                               .b = PB, .history = h, .n = n, .block = NULL,
                                               .draft = &dr,
                                               .rope_copy = which != 1};
                t0 = specd_now_ns();
                if (specd_simsd_replay(&in, one, NULL, &err) != SPECD_OK) die("replay", &err);
                if (blk > 0) pr[which].verify_ns += specd_now_ns() - t0;
                for (int r = 0; r < PB; r++) {
                    int t;
                    pr[which].kl[r] +=
                        specd_simsd_kl_logits(dr.logits + r * V, one + r * V, n_vocab, &t);
                    pr[which].agree[r] += t;
                }
                pr[which].n++;
                if (which == 0) /* the self-drafted block (the target's own order) goes on */
                    memcpy(h + n, dr.token, PB * sizeof(int32_t));
            }
            specd_seq_batch nb = {.seq = 0, .n_tokens = PB, .tokens = h + n - 1};
            if (specd_context_extend(c, &nb, 1, NULL, &err) != SPECD_OK) die("extend", &err);
            n += PB;
        }
    }
    static const char *const name[3] = {"self-draft", "self-draft, no RoPE copy",
                                        "cross-model (drafter)"};
    printf("precision, B = %d, greedy, %d blocks: KL(D || V) by draft step | top-1 agreement | "
           "rho = one draft step / one verification forward (eq. 3)\n",
           PB, pr[0].n);
    printf("  paper (SDAR 8B, B = 4): self-draft KL 0.089 -> 0.254, top-1 >= 0.975; cross-model "
           "(1.7B -> 8B) KL 0.153 -> 0.501, top-1 >= 0.94; no RoPE copy KL 7.12\n");
    for (int w = 0; w < 3; w++) {
        printf("  %-26s KL", name[w]);
        for (int r = 0; r < PB; r++)
            printf(" %6.3f", pr[w].kl[r] / pr[w].n);
        printf("  | top-1");
        for (int r = 0; r < PB; r++)
            printf(" %.2f", pr[w].agree[r] / pr[w].n);
        if (w != 1) printf("  | rho %.3f", (double)pr[w].draft_ns / PB / (double)pr[w].verify_ns);
        printf("\n");
    }
    free(one);
    free(seq);
    specd_simsd_drafter_destroy(self);
    specd_simsd_drafter_destroy(cross);
    specd_context_destroy(c);
    specd_lora_destroy(dlora);
    specd_lora_destroy(lora);
}

/* --- 2. speed ----------------------------------------------------------------------------- */

typedef struct run {
    specd_seq_stats s; /* summed */
    specd_run_stats r;
} run;

static void run_all(const char *opts, int b, run *out) {
    specd_error err;
    specd_spec_params sp = specd_spec_default_params();
    sp.n_vocab = n_vocab;
    sp.max_draft = 2 * b; /* a step runs up to 3B + 1 rows */
    sp.target = model;
    specd_spec *spec;
    if (specd_spec_create(&sp, &spec, &err) != SPECD_OK) die("spec", &err);
    specd_context *c = context(0, MAX_PROMPT + n_gen + 4 * b + 2);
    char full[8192];
    snprintf(full, sizeof full, "adapter=%s,block=%d,threads=%d,%s", adapter, b, threads, opts);
    specd_seq_params q = specd_seq_default_params();
    q.policy = "simsd";
    q.policy_options = full;
    q.sampling.temperature = 0.0f;
    q.max_tokens = n_gen;
    q.adaptive = 0;
    memset(out, 0, sizeof *out);
    for (int p = 0; p < n_p; p++) {
        if (specd_spec_seq_open(spec, 0, prompts[p], n_prompts[p], &q, &err) != SPECD_OK)
            die(full, &err);
        specd_run_stats rs;
        if (specd_spec_run(spec, 0, c, 0, NULL, NULL, &rs, &err) != SPECD_OK) die(full, &err);
        specd_seq_stats st;
        specd_spec_seq_stats(spec, 0, &st, &err);
        out->s.n_steps += st.n_steps;
        out->s.n_emitted += st.n_emitted;
        out->s.n_drafts += st.n_drafts;
        out->s.n_draft_tokens += st.n_draft_tokens;
        out->s.n_accepted += st.n_accepted;
        out->s.propose_ns += st.propose_ns;
        out->r.decode_ns += rs.decode_ns;
        out->r.forward_ns += rs.forward_ns;
        specd_spec_seq_close(spec, 0);
    }
    specd_context_destroy(c);
    specd_spec_destroy(spec);
}

static void speed(const int *blocks, int n_blocks, const int *gammas, int n_gammas) {
    printf("\nspeed, greedy, %d prompts x %d tokens, threads %d: anchor = the target alone "
           "(gamma=0), run right before each drafter run\n", n_p, n_gen, threads);
    printf("  (rho' = time in the policy per draft step / the anchor's forward; eq.3 = the speedup "
           "T_SD = (1 + gamma rho') T_theta predicts from the two runs' step counts)\n");
    printf("  %-2s %-5s %-10s %6s %8s %6s %6s %8s %8s %7s\n", "B", "gamma", "drafter", "alpha",
           "acc/ver", "TPF", "rho'", "speedup", "eq.3", "tok/s");
    char dopt[4200];
    snprintf(dopt, sizeof dopt, "drafter_layers=%d%s%s", layers, dadapter[0] ? ",drafter_adapter=" : "",
             dadapter);
    const char *const kinds[2] = {"drafter=self", dopt};
    const char *const names[2] = {"self (A4)", "cross"};
    for (int i = 0; i < n_blocks; i++)
        for (int g = 0; g < n_gammas; g++)
            for (int w = 0; w < 2; w++) {
                const int b = blocks[i], gamma = gammas[g];
                if (gamma > b) continue;
                char opts[4300];
                snprintf(opts, sizeof opts, "%s,gamma=%d", kinds[w], gamma);
                run alone, sd;
                run_all("gamma=0", b, &alone);
                run_all(opts, b, &sd);
                const double tf = (double)alone.r.forward_ns / (double)alone.s.n_steps;
                const double verifies = (double)sd.s.n_drafts;
                const double rho =
                    verifies > 0 ? (double)sd.s.propose_ns / (verifies * gamma) / tf : 0.0;
                const double tpf = (double)sd.s.n_emitted / (double)sd.s.n_steps;
                /* eq. 3 over a run: each target forward costs T_theta, each verification adds
                 * gamma drafter steps of rho T_theta */
                const double cost0 = (double)alone.s.n_steps / (double)alone.s.n_emitted;
                const double cost = ((double)sd.s.n_steps + verifies * gamma * rho) /
                                    (double)sd.s.n_emitted;
                printf("  %-2d %-5d %-10s %6.3f %8.2f %6.2f %6.3f %7.2fx %7.2fx %7.1f  "
                       "(anchor TPF %.2f, %.1f tok/s)\n",
                       b, gamma, names[w],
                       sd.s.n_draft_tokens ? (double)sd.s.n_accepted / (double)sd.s.n_draft_tokens
                                           : 0.0,
                       verifies > 0 ? (double)sd.s.n_accepted / verifies : 0.0, tpf, rho,
                       (double)alone.r.decode_ns / (double)sd.r.decode_ns, cost0 / cost,
                       (double)sd.s.n_emitted / ((double)sd.r.decode_ns * 1e-9),
                       (double)alone.s.n_emitted / (double)alone.s.n_steps,
                       (double)alone.s.n_emitted / ((double)alone.r.decode_ns * 1e-9));
            }
}

static int parse_list(char *s, int *out, int cap) {
    int n = 0;
    for (char *t = strtok(s, ","); t && n < cap; t = strtok(NULL, ","))
        if ((out[n] = atoi(t)) >= 1 && out[n] <= 16) n++;
    return n;
}

int main(int argc, char **argv) {
    const char *path = NULL, *src = ".";
    char blocks_s[64] = "4", gammas_s[64] = "1,2,3,4";
    snprintf(adapter, sizeof adapter, "artifacts/adapters/smollm2-135m-sdar");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) return fprintf(stderr, "bench_simsd: %s needs a value\n", a), 2;
        if (!strcmp(a, "-m")) path = v;
        else if (!strcmp(a, "-n")) n_gen = atoi(v);
        else if (!strcmp(a, "-p")) n_p = atoi(v);
        else if (!strcmp(a, "-t")) threads = atoi(v);
        else if (!strcmp(a, "--src")) src = v;
        else if (!strcmp(a, "--adapter")) snprintf(adapter, sizeof adapter, "%s", v);
        else if (!strcmp(a, "--drafter-adapter")) snprintf(dadapter, sizeof dadapter, "%s", v);
        else if (!strcmp(a, "--drafter-layers")) layers = atoi(v);
        else if (!strcmp(a, "--blocks")) snprintf(blocks_s, sizeof blocks_s, "%s", v);
        else if (!strcmp(a, "--gammas")) snprintf(gammas_s, sizeof gammas_s, "%s", v);
        else return fprintf(stderr, "bench_simsd: unknown option %s\n", a), 2;
        i++;
    }
    if (n_p < 1 || n_p > MAX_PROMPTS || n_gen < 1 || layers < 1)
        return fprintf(stderr, "bench_simsd: -p 1..%d, -n >= 1, --drafter-layers >= 1\n",
                       MAX_PROMPTS), 2;
    if (!path) path = getenv("SPECD_MODEL");
    if (!path) return fprintf(stderr, "bench_simsd: -m MODEL (or SPECD_MODEL)\n"), 2;
    if (specd_golden_prompts_read(src, n_p, MAX_PROMPT, &prompts[0][0], n_prompts) != 0)
        return fprintf(stderr, "bench_simsd: prompts not found under %s/tests/data\n", src), 2;
    specd_error err;
    if (specd_model_create(path, &model, &err) != SPECD_OK) die("model", &err);
    n_vocab = specd_model_get_info(model)->n_vocab;
    int blocks[8], gammas[16];
    const int nb = parse_list(blocks_s, blocks, 8), ng = parse_list(gammas_s, gammas, 16);
    printf("bench_simsd: target = the block model (%s), cross drafter = its first %d layers + %s\n",
           adapter, layers, dadapter[0] ? dadapter : "the target's adapter cut there");
    precision();
    speed(blocks, nb, gammas, ng);
    specd_model_destroy(model);
    return 0;
}
