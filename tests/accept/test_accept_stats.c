/* Statistical proof that REJECTION verification is lossless, chain and tree.
 *
 * Each case draws a random target P_t(. | previous token) and drafter Q_t(. | previous token) over
 * a small vocabulary (Markov, or position-only so the textbook closed form applies), then
 * generates L tokens many times by repeated verify calls, exactly as a serving loop would. The
 * tokens at every position, and the first two jointly, must follow the target (G-test); the
 * accepted length of the first call must follow its closed form built from
 * alpha = sum_x min(p(x), q(x)) (for a Markov model the same product taken along the chain).
 * All tests of a run share one Bonferroni-corrected level, alpha = 1e-3 / number of tests.
 * Then the same harness runs the engine with a subtly wrong rule and must reject it.
 *
 * Arguments: --full (the long suite: k = 1..8 x 10 seeds, 10^6 draws per case, ctest -L long);
 * otherwise a reduced but powered run. SPECD_STAT_SCALE (env, default 1) multiplies the draws,
 * e.g. 0.1 under sanitizers. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/philox.h"
#include "gof.h"
#include "specd/specd.h"
#include "verifier/accept/accept_internal.h"

/* Sanitizer builds run several times slower: fewer draws by default (still powered: the wrong
 * rules below stay rejected). */
#if defined(__SANITIZE_ADDRESS__)
#define DEFAULT_SCALE 0.15
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DEFAULT_SCALE 0.15
#endif
#endif
#ifndef DEFAULT_SCALE
#define DEFAULT_SCALE 1.0
#endif

#define MAXV 64
#define MAXK 8
#define MAXT (MAXK + MAXK + 4)
#define CTX 0 /* the token before position 0 */

typedef struct trng {
    uint32_t key[2], ctr[4], buf[4];
    int left;
} trng;
static void trng_init(trng *r, uint64_t seed) {
    memset(r, 0, sizeof *r);
    r->key[0] = (uint32_t)seed ^ 0x51a7u;
    r->key[1] = (uint32_t)(seed >> 32) ^ 0xd1ceu;
}
static uint32_t trng_u32(trng *r) {
    if (r->left == 0) {
        r->ctr[0]++;
        if (r->ctr[0] == 0) r->ctr[1]++;
        specd_philox4x32_10_block(r->ctr, r->key, r->buf);
        r->left = 4;
    }
    return r->buf[--r->left];
}
static double trng_unif(trng *r) { return ((double)trng_u32(r) + 0.5) / 4294967296.0; }
static int trng_int(trng *r, int n) { return (int)(trng_u32(r) % (uint32_t)n); }
static double trng_normal(trng *r) {
    return sqrt(-2.0 * log(trng_unif(r))) * cos(6.283185307179586 * trng_unif(r));
}

enum { MODE_INDEPENDENT = 0, MODE_MARKOV = 1, MODE_DETERMINISTIC = 2 };

typedef struct scase {
    int tree;          /* 0 chain, 1 tree */
    int v, k;          /* vocabulary; drafts per chain or nodes per tree */
    int parent[MAXK];  /* tree shape */
    int depth[MAXK];
    int mode;
    uint64_t seed;
    int L;             /* tokens generated per draw */
} scase;

typedef struct tables {
    float lp[MAXT][MAXV][MAXV]; /* target logits */
    float pp[MAXT][MAXV][MAXV]; /* the engine's p (sampler probs of the same transform) */
    float q[MAXT][MAXV][MAXV];  /* drafter probabilities */
    int qarg[MAXT][MAXV];       /* deterministic drafter: argmax q */
    int qrank[MAXT][MAXV][MAXK]; /* deterministic tree: the top tokens of q */
} tables;

static specd_sampling_params case_sampling(const scase *c) {
    specd_sampling_params sp = specd_sampling_default_params();
    if (c->seed % 2) { /* the transform is part of what is verified */
        sp.temperature = 0.7f;
        sp.top_k = c->v / 2 + 1;
    }
    return sp;
}

static void build_tables(const scase *c, tables *tb) {
    trng r;
    trng_init(&r, c->seed * 7919 + 13);
    specd_sampling_params sp = case_sampling(c);
    specd_sampler *s = NULL;
    specd_error err;
    if (specd_sampler_create(&sp, c->v, &s, &err) != SPECD_OK) abort();
    int v = c->v;
    for (int t = 0; t < MAXT; t++) {
        for (int a = 0; a < v; a++) {
            if (c->mode == MODE_INDEPENDENT && a > 0) { /* P and Q ignore the previous token */
                memcpy(tb->lp[t][a], tb->lp[t][0], sizeof tb->lp[t][a]);
                memcpy(tb->q[t][a], tb->q[t][0], sizeof tb->q[t][a]);
            } else {
                double scale = 0.5 + 2.5 * trng_unif(&r);
                for (int y = 0; y < v; y++) tb->lp[t][a][y] = (float)(scale * trng_normal(&r));
                double c1 = trng_unif(&r), c2 = 0.5 + 1.5 * trng_unif(&r), w[MAXV], sum = 0;
                int holes = trng_int(&r, 3) == 0;
                for (int y = 0; y < v; y++) {
                    w[y] = exp(c1 * tb->lp[t][a][y] + c2 * trng_normal(&r));
                    if (holes && trng_int(&r, 4) == 0) w[y] = 0.0; /* q = 0 where p > 0 */
                }
                w[trng_int(&r, v)] += 1e-3;
                for (int y = 0; y < v; y++) sum += w[y];
                for (int y = 0; y < v; y++) tb->q[t][a][y] = (float)(w[y] / sum);
            }
            if (specd_sampler_probs(s, tb->lp[t][a], v, tb->pp[t][a], &err) != SPECD_OK) abort();
            /* ranks of q for deterministic drafters: descending, lowest index first */
            int used[MAXV] = {0};
            for (int j = 0; j < MAXK; j++) {
                if (j >= v) { /* more siblings than tokens: repeats (the second one never wins) */
                    tb->qrank[t][a][j] = tb->qrank[t][a][j % v];
                    continue;
                }
                int best = -1;
                for (int y = 0; y < v; y++)
                    if (!used[y] && (best < 0 || tb->q[t][a][y] > tb->q[t][a][best])) best = y;
                used[best] = 1;
                tb->qrank[t][a][j] = best;
            }
            tb->qarg[t][a] = tb->qrank[t][a][0];
        }
    }
    specd_sampler_destroy(s);
}

static int sample_q(trng *r, const float *q, int v) {
    double u = trng_unif(r), c = 0;
    for (int y = 0; y < v; y++) {
        c += q[y];
        if (u < c) return y;
    }
    for (int y = v - 1; y >= 0; y--)
        if (q[y] > 0) return y;
    return 0;
}

typedef struct counts {
    uint64_t marg[MAXK + 2][MAXV];
    uint64_t joint[MAXV * MAXV];
    uint64_t len[MAXK + 2];
} counts;

/* Exact laws: marginals by forward recursion, joint of the first two, first-call length. */
typedef struct expect {
    double marg[MAXK + 2][MAXV];
    double joint[MAXV * MAXV];
    double len[MAXK + 2];
    int has_len;
} expect;

static void expected_laws(const scase *c, const tables *tb, expect *ex) {
    int v = c->v;
    memset(ex, 0, sizeof *ex);
    for (int y = 0; y < v; y++) ex->marg[0][y] = tb->pp[0][CTX][y];
    for (int t = 1; t < c->L; t++)
        for (int a = 0; a < v; a++)
            for (int y = 0; y < v; y++) ex->marg[t][y] += ex->marg[t - 1][a] * tb->pp[t][a][y];
    for (int a = 0; a < v; a++)
        for (int y = 0; y < v; y++) ex->joint[a * v + y] = tb->pp[0][CTX][a] * tb->pp[1][a][y];
    if (!c->tree) {
        /* f_i(a): probability that drafts 0..i-1 were accepted and draft i-1 is a. Position-only
         * models make this prod_i alpha_i with alpha_i = sum_x min(p_i(x), q_i(x)). */
        double f[MAXV] = {0}, g[MAXV], at_least[MAXK + 2];
        f[CTX] = 1.0;
        at_least[0] = 1.0;
        for (int i = 0; i < c->k; i++) {
            double tot = 0;
            for (int y = 0; y < v; y++) {
                g[y] = 0;
                for (int a = 0; a < v; a++) {
                    if (f[a] == 0) continue;
                    double p = tb->pp[i][a][y];
                    double q = c->mode == MODE_DETERMINISTIC ? (y == tb->qarg[i][a]) : tb->q[i][a][y];
                    g[y] += f[a] * (p < q ? p : q);
                }
                tot += g[y];
            }
            memcpy(f, g, sizeof f);
            at_least[i + 1] = tot;
        }
        for (int j = 0; j <= c->k; j++)
            ex->len[j] = at_least[j] - (j < c->k ? at_least[j + 1] : 0.0);
        ex->has_len = 1;
    } else if (c->mode == MODE_DETERMINISTIC) {
        /* Distinct deterministic siblings: recursive rejection accepts child x with probability
         * p(x) exactly, so a path's probability is the product of p along it. */
        double reach[MAXK] = {0};
        int tok[MAXK] = {0};
        for (int i = 0; i < c->k; i++) {
            int pa = c->parent[i];
            int ctx = pa < 0 ? CTX : tok[pa];
            int rank = 0;
            for (int j = 0; j < i; j++) rank += c->parent[j] == pa;
            tok[i] = tb->qrank[c->depth[i]][ctx][rank];
            int repeat = 0;
            for (int j = 0; j < i; j++) repeat |= c->parent[j] == pa && tok[j] == tok[i];
            reach[i] = repeat ? 0.0 : (pa < 0 ? 1.0 : reach[pa]) * tb->pp[c->depth[i]][ctx][tok[i]];
        }
        /* P(accepted depth >= d) = sum of reach over nodes at depth d - 1 */
        double at_least[MAXK + 2] = {1.0};
        for (int i = 0; i < c->k; i++) at_least[c->depth[i] + 1] += reach[i];
        for (int j = 0; j <= c->k; j++) ex->len[j] = at_least[j] - at_least[j + 1];
        ex->has_len = 1;
    }
}

/* One generation of c->L tokens by repeated verify calls. */
static void draw(const scase *c, const tables *tb, specd_accept *acc, trng *r, uint32_t seq,
                 int *out_tokens, int *first_len) {
    static float logits[(MAXK + 1) * MAXV], q[MAXK * MAXV];
    int32_t draft[MAXK], tokens[MAXK + 1], path[MAXK], ctx[MAXK + 1];
    int v = c->v, pos = 0, n = 0, prev = CTX, first = 1;
    specd_error err;
    while (n < c->L) {
        int32_t n_acc, n_emit;
        if (!c->tree) {
            ctx[0] = prev;
            for (int i = 0; i < c->k; i++) {
                const float *qr = tb->q[pos + i][ctx[i]];
                draft[i] = c->mode == MODE_DETERMINISTIC ? tb->qarg[pos + i][ctx[i]]
                                                         : sample_q(r, qr, v);
                memcpy(q + i * v, qr, sizeof(float) * (size_t)v);
                ctx[i + 1] = draft[i];
            }
            for (int i = 0; i <= c->k; i++)
                memcpy(logits + i * v, tb->lp[pos + i][ctx[i]], sizeof(float) * (size_t)v);
            specd_chain_input in = {
                .k = c->k,
                .draft = draft,
                .draft_probs = c->mode == MODE_DETERMINISTIC ? NULL : q,
                .q_vocab = v,
                .target_logits = logits,
                .n_vocab = v,
                .key = {.seed = c->seed, .sequence = seq, .position = (uint32_t)pos}};
            specd_chain_result out = {.tokens = tokens,
                                      .accept_prob = NULL,
                                      .n_accepted = 0,
                                      .n_emitted = 0,
                                      .lossy = false};
            if (specd_accept_chain(acc, &in, &out, &err) != SPECD_OK) {
                fprintf(stderr, "chain: %s\n", err.message);
                abort();
            }
            n_acc = out.n_accepted;
            n_emit = out.n_emitted;
        } else {
            memcpy(logits, tb->lp[pos][prev], sizeof(float) * (size_t)v);
            for (int i = 0; i < c->k; i++) {
                int pa = c->parent[i], cx = pa < 0 ? prev : draft[pa], t = pos + c->depth[i];
                const float *qr = tb->q[t][cx];
                if (c->mode == MODE_DETERMINISTIC) {
                    int rank = 0;
                    for (int j = 0; j < i; j++) rank += c->parent[j] == pa;
                    draft[i] = tb->qrank[t][cx][rank];
                } else {
                    draft[i] = sample_q(r, qr, v);
                }
                memcpy(q + i * v, qr, sizeof(float) * (size_t)v);
                memcpy(logits + (i + 1) * v, tb->lp[t + 1][draft[i]], sizeof(float) * (size_t)v);
            }
            specd_tree_input in = {
                .n_nodes = c->k,
                .parent = c->parent,
                .token = draft,
                .draft_probs = c->mode == MODE_DETERMINISTIC ? NULL : q,
                .q_vocab = v,
                .target_logits = logits,
                .n_vocab = v,
                .key = {.seed = c->seed, .sequence = seq, .position = (uint32_t)pos}};
            specd_tree_result out = {
                .path = path, .tokens = tokens, .n_accepted = 0, .n_emitted = 0, .lossy = false};
            if (specd_accept_tree(acc, &in, &out, &err) != SPECD_OK) {
                fprintf(stderr, "tree: %s\n", err.message);
                abort();
            }
            n_acc = out.n_accepted;
            n_emit = out.n_emitted;
        }
        if (first) *first_len = n_acc;
        first = 0;
        for (int j = 0; j < n_emit && n < c->L; j++) out_tokens[n++] = tokens[j];
        pos += n_emit;
        prev = tokens[n_emit - 1];
    }
}

typedef struct result {
    double min_p;
    int tests;
} result;

static result run_case(const scase *c, uint64_t draws, specd_accept_mutant mutant, int verbose) {
    static tables tb;
    static counts ct;
    expect ex;
    build_tables(c, &tb);
    expected_laws(c, &tb, &ex);
    memset(&ct, 0, sizeof ct);
    specd_accept_params ap = specd_accept_default_params();
    ap.rule = SPECD_ACCEPT_REJECTION;
    ap.sampling = case_sampling(c);
    ap.max_k = c->k;
    ap.max_vocab = c->v;
    specd_accept *acc = NULL;
    specd_error err;
    if (specd_accept_create(&ap, &acc, &err) != SPECD_OK) abort();
    specd_accept_debug_mutate(acc, mutant);
    trng r;
    trng_init(&r, c->seed ^ 0xfeedull);
    int toks[MAXK + 2];
    for (uint64_t d = 0; d < draws; d++) {
        int len = 0;
        draw(c, &tb, acc, &r, (uint32_t)d, toks, &len);
        for (int t = 0; t < c->L; t++) ct.marg[t][toks[t]]++;
        ct.joint[toks[0] * c->v + toks[1]]++;
        ct.len[len]++;
    }
    specd_accept_destroy(acc);
    result res = {1.0, 0};
    char line[512];
    int at = snprintf(line, sizeof line, "%s v=%-2d k=%d mode=%d seed=%-3llu:", c->tree ? "tree " : "chain",
                      c->v, c->k, c->mode, (unsigned long long)c->seed);
    for (int t = 0; t < c->L; t++) {
        double pv = gof_pvalue(ct.marg[t], ex.marg[t], c->v, draws);
        res.min_p = fmin(res.min_p, pv);
        res.tests++;
    }
    double pj = gof_pvalue(ct.joint, ex.joint, c->v * c->v, draws);
    res.min_p = fmin(res.min_p, pj);
    res.tests++;
    double pl = -1;
    if (ex.has_len) {
        pl = gof_pvalue(ct.len, ex.len, c->k + 1, draws);
        res.min_p = fmin(res.min_p, pl);
        res.tests++;
    }
    at += snprintf(line + at, sizeof line - (size_t)at, " joint p=%.3g length p=%.3g min p=%.3g",
                   pj, pl, res.min_p);
    if (verbose) printf("%s\n", line);
    return res;
}

static void make_tree(scase *c, trng *r) {
    /* a random shape with at least two children at the root */
    for (int i = 0; i < c->k; i++) {
        c->parent[i] = i < 2 ? -1 : (trng_int(r, 3) == 0 ? -1 : trng_int(r, i));
        c->depth[i] = c->parent[i] < 0 ? 0 : c->depth[c->parent[i]] + 1;
    }
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* progress lines survive a timeout */
    int full = argc > 1 && strcmp(argv[1], "--full") == 0;
    double scale = getenv("SPECD_STAT_SCALE") ? atof(getenv("SPECD_STAT_SCALE")) : DEFAULT_SCALE;
    if (!(scale > 0)) scale = 1.0;
    static const int vocab[5] = {4, 8, 16, 32, 64};
    scase cases[200];
    int nc = 0;
    trng shape;
    trng_init(&shape, 2024);
    int seeds = full ? 10 : 3;
    for (int k = 1; k <= MAXK; k++) {
        if (!full && k != 1 && k != 3 && k != 8) continue;
        for (int s = 0; s < seeds; s++) {
            scase *c = &cases[nc++];
            memset(c, 0, sizeof *c);
            c->v = vocab[(s + k) % 5];
            c->k = k;
            c->mode = s % 3;
            c->seed = (uint64_t)(100 * k + s);
            c->L = k + 1 < 2 ? 2 : k + 1;
            if (c->L < 2) c->L = 2;
        }
    }
    int tree_cases = full ? 10 : 4;
    for (int s = 0; s < tree_cases; s++) {
        scase *c = &cases[nc++];
        memset(c, 0, sizeof *c);
        c->tree = 1;
        c->v = vocab[s % 5];
        c->k = 3 + trng_int(&shape, MAXK - 2);
        c->mode = s % 2 ? MODE_DETERMINISTIC : MODE_MARKOV;
        c->seed = (uint64_t)(5000 + s);
        c->L = 3;
        make_tree(c, &shape);
    }
    uint64_t draws = (uint64_t)((full ? 1e6 : 1.5e5) * scale);
    if (draws < 1000) draws = 1000;
    /* The Bonferroni level needs the number of tests before the first p-value is judged. */
    int total_tests = 0;
    for (int i = 0; i < nc; i++) {
        int has_len = !cases[i].tree || cases[i].mode == MODE_DETERMINISTIC;
        total_tests += cases[i].L + 1 + has_len;
    }
    double level = 1e-3 / total_tests;
    printf("%d cases, %d tests, %llu draws per case, per-test level %.3g\n", nc, total_tests,
           (unsigned long long)draws, level);
    int failed = 0;
    double overall = 1.0;
    for (int i = 0; i < nc; i++) {
        result r = run_case(&cases[i], draws, SPECD_MUTANT_NONE, 1);
        overall = fmin(overall, r.min_p);
        if (r.min_p < level) {
            printf("  ^ REJECTED at level %.3g\n", level);
            failed++;
        }
    }
    printf("lossless: %d of %d cases rejected, smallest p-value %.3g (level %.3g)\n", failed, nc,
           overall, level);

    /* Power: the same harness must reject each wrong rule, at the same per-test level. */
    scase m = {0};
    m.v = 8;
    m.k = 2;
    m.mode = MODE_INDEPENDENT;
    m.seed = 42;
    m.L = 3;
    scase mt = {0};
    mt.tree = 1;
    mt.v = 8;
    mt.k = 4;
    mt.parent[0] = mt.parent[1] = mt.parent[2] = -1;
    mt.parent[3] = 0;
    mt.depth[3] = 1;
    mt.mode = MODE_MARKOV;
    mt.seed = 44;
    mt.L = 3;
    struct {
        const scase *c;
        specd_accept_mutant mutant;
        const char *name;
    } mutants[] = {{&m, SPECD_MUTANT_RATIO_Q_OVER_P, "min(1, q/p)"},
                   {&m, SPECD_MUTANT_RESIDUAL_IS_P, "resample from p on rejection"},
                   {&mt, SPECD_MUTANT_NO_RENORMALISE, "tree residual not renormalised"}};
    uint64_t mdraws = (uint64_t)(2e5 * scale);
    if (mdraws < 20000) mdraws = 20000;
    for (int i = 0; i < 3; i++) {
        result r = run_case(mutants[i].c, mdraws, mutants[i].mutant, 0);
        int caught = r.min_p < level;
        printf("wrong rule '%s': smallest p-value %.3g -> %s\n", mutants[i].name, r.min_p,
               caught ? "rejected (good)" : "NOT rejected");
        if (!caught) failed++;
        result ok = run_case(mutants[i].c, mdraws, SPECD_MUTANT_NONE, 0);
        printf("  the right rule on the same case: smallest p-value %.3g\n", ok.min_p);
        if (ok.min_p < level) failed++;
    }
    printf("%s\n", failed ? "FAILED" : "PASSED");
    return failed ? 1 : 0;
}
