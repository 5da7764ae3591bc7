/* The adaptive guard's decisions (session/adaptive.h) under synthetic step timings: it starts with
 * a plain step and a one-proposal probe, drafts when the cost model says it pays, backs off (and
 * says so) when it does not, probes again at a spacing its cost model sets (a probe's cost,
 * catch-up included, against what it could win), governs self-speculative policies on/off, and
 * seeds a new sequence with what an earlier one learned. No clock is read there.
 * Through the session: a policy that reads hidden states (a residual head) and never has a draft
 * accepted is switched off like any other, stops being run, and gets every plain step's hidden
 * row to catch up with (a verdict that needs no clock: one token per step never pays). */
#include "test_main.h"

#include "session/adaptive.h"
#include "specd/spec_batch.h"

#include <string.h>

/* One step: ask for the budget, then report a step of that budget. A chain step with k
 * proposals costs c0 + c1 * k ns and accepts the first `acc` of them. A policy step first catches
 * up on the tokens since the policy's last step (the prompt's included) at catch_up ns each; a
 * warm_up policy (a residual head) drafts nothing in that first step (its drafts come from it)
 * and costs a plain step plus the catch-up there. */
typedef struct sim {
    double c0, c1;   /* plain step cost, marginal cost of one proposal */
    int32_t acc;     /* proposals accepted per drafting step (chain), tokens per step (self) */
    double c_self;   /* a self-speculative policy step's cost */
    double catch_up; /* per token the policy has not seen */
    int warm_up;
    int64_t gap;     /* tokens the policy has not seen */
    double ns;       /* the time of all steps so far */
    int64_t tokens;  /* tokens emitted so far */
    int32_t probes;  /* policy steps after a plain one */
    int32_t last_k;
} sim;

/* Reports the step the guard gave budget k. */
static void report(specd_adaptive *g, sim *s, int32_t k) {
    double ns;
    int32_t emitted;
    if (k == 0) {
        ns = s->c0;
        emitted = 1;
        specd_adaptive_observe(g, 0, 0, 1, (uint64_t)ns);
    } else {
        double catch_up = s->catch_up * (double)s->gap;
        s->probes += s->last_k == 0;
        if (s->warm_up && s->gap > 0) {
            ns = s->c0 + catch_up;
            emitted = 1;
            specd_adaptive_observe(g, 0, 0, 1, (uint64_t)ns);
        } else if (g->self_spec) {
            ns = s->c_self + catch_up;
            emitted = s->acc;
            specd_adaptive_observe(g, 2, s->acc - 1, s->acc, (uint64_t)ns);
        } else {
            int32_t a = s->acc < k ? s->acc : k;
            ns = s->c0 + s->c1 * k + catch_up;
            emitted = a + 1;
            specd_adaptive_observe(g, k, a, emitted, (uint64_t)ns);
        }
    }
    s->gap = k > 0 ? 0 : s->gap + emitted;
    s->ns += ns;
    s->tokens += emitted;
    s->last_k = k;
}

static int32_t step(specd_adaptive *g, sim *s) {
    int32_t k = specd_adaptive_budget(g);
    report(g, s, k);
    return k;
}

/* A step of a drafter with shadow drafts: a plain step the guard wants one from makes a shadow
 * draft of 8 proposals, of which the text accepts the first s->acc (resolved within the step, as
 * the session does when its first proposal misses). */
static int32_t shadow_step(specd_adaptive *g, sim *s, int32_t *shadows) {
    int32_t k = specd_adaptive_budget(g);
    if (k == 0 && specd_adaptive_wants_shadow(g)) {
        specd_adaptive_shadow(g, 8, s->acc < 8 ? s->acc : 8);
        ++*shadows;
    }
    report(g, s, k);
    return k;
}

/* The time spent beyond plain decoding of the same tokens, as a fraction. */
static double excess(const sim *s) { return s->ns / (s->c0 * (double)s->tokens) - 1.0; }

static void test_starts_plain_then_probes_one(void **state) {
    (void)state;
    specd_adaptive g;
    specd_adaptive_init(&g, 1, 0, 8, NULL);
    sim s = {.c0 = 1e6, .c1 = 1e5, .acc = 8};
    assert_int_equal(step(&g, &s), 0); /* c0 first */
    assert_int_equal(step(&g, &s), 1); /* the cautious probe */
    /* the probe was accepted and proposals are cheap: a longer draft pays */
    int32_t k = step(&g, &s);
    assert_true(k > 1);
    assert_int_equal(g.n_backoffs, 0);
}

static void test_expensive_drafter_backs_off_at_once(void **state) {
    (void)state;
    specd_adaptive g;
    specd_adaptive_init(&g, 1, 0, 8, NULL);
    /* a proposal costs as much as a plain step (a drafter as big as the target) */
    sim s = {.c0 = 1e6, .c1 = 1e6, .acc = 1};
    assert_int_equal(step(&g, &s), 0);
    assert_int_equal(step(&g, &s), 1);
    /* the probe's second step measures c1 after one of the drafter's own steps; then it is
     * judged: even accepting everything, a step with k proposals costs k + 1 plain steps for at
     * most k + 1 tokens, so no text could make it pay and it is not probed again */
    int32_t drafted = 0, probes = 0;
    for (int i = 0; i < 64; i++) {
        int32_t k = step(&g, &s);
        drafted += k > 0;
        probes += k == 1;
    }
    assert_int_equal(g.n_backoffs, 1);
    assert_int_equal(drafted, probes);
    assert_int_equal(probes, 1);
    assert_int_equal(specd_adaptive_probe_spacing(&g), -1);
    assert_true(g.n_plain_steps >= 60);
}

/* A probe that costs more waits longer: probing costs about 2% of the time (a probe of x plain
 * steps' excess waits x / 0.02 plain steps), and a policy that never pays stays near plain speed
 * over a long sequence, with probes coming all along. */
static void test_probes_fit_the_budget(void **state) {
    (void)state;
    /* chain: one rejected proposal costs 0.2 / 0.6 of a plain step */
    const double c1s[2] = {2e5, 6e5};
    int32_t spacing[2];
    for (int i = 0; i < 2; i++) {
        specd_adaptive g;
        specd_adaptive_init(&g, 1, 0, 8, NULL);
        sim s = {.c0 = 1e6, .c1 = c1s[i], .acc = 0};
        for (int j = 0; j < 4; j++) step(&g, &s); /* plain, the two-step probe, judged */
        assert_int_equal(g.drafting, 0);
        spacing[i] = specd_adaptive_probe_spacing(&g) + g.since_probe;
        assert_true(spacing[i] >= c1s[i] / s.c0 / 0.02 - 1);
        int32_t last = 0, probes = 0;
        for (int j = 0; j < 3000; j++) {
            if (step(&g, &s) > 0) {
                if (probes++ > 0) assert_true(j - last >= spacing[i]);
                last = j;
            }
        }
        assert_true(probes >= 3000 / (2 * spacing[i])); /* probes keep coming */
        assert_true(excess(&s) < 0.03);
    }
    assert_true(spacing[1] > spacing[0]);
    /* self-speculative: a step costs 1.5 plain steps and emits one token */
    specd_adaptive g;
    specd_adaptive_init(&g, 1, 1, 3, NULL);
    sim s = {.c0 = 1e6, .c_self = 1.5e6, .acc = 1};
    for (int j = 0; j < 3000; j++) step(&g, &s);
    assert_int_equal(g.drafting, 0);
    assert_true(s.probes >= 10);
    assert_true(excess(&s) < 0.03);
}

/* A drafter whose probe first catches up on the tokens since its last proposal (a draft model
 * prefilling them) is charged that: its probes come further apart than a policy's whose
 * catch-up is free, the total stays within the budget, and one whose catch-up alone costs more
 * than the budget per token is not probed again. The prompt's catch-up in the first probe is
 * the catch-up of many tokens, not an expensive probe: later probes are not kept away by it. */
static void test_catch_up_spaces_probes(void **state) {
    (void)state;
    const double per_token[3] = {0.0, 0.006e6, 0.03e6};
    int32_t probes[3];
    for (int i = 0; i < 3; i++) {
        specd_adaptive g;
        specd_adaptive_init(&g, 1, 0, 8, NULL);
        specd_adaptive_set_text(&g, 300, 0);
        sim s = {.c0 = 1e6, .c1 = 2e5, .acc = 0, .catch_up = per_token[i], .gap = 300};
        for (int j = 0; j < 2000; j++) step(&g, &s);
        probes[i] = s.probes;
        assert_true(excess(&s) < 0.03 + 300 * per_token[i] / s.c0 / 2000);
    }
    assert_true(probes[0] > probes[1]);
    assert_int_equal(probes[2], 1); /* the first probe only */
    /* a residual head (free catch-up but for its warm-up step) after a 300-token prompt whose
     * catch-up cost 1.2 plain steps: the next probe comes as soon as its own cost allows */
    specd_adaptive g;
    specd_adaptive_init(&g, 1, 1, 3, NULL);
    specd_adaptive_set_text(&g, 300, 0);
    sim s = {.c0 = 1e6, .c_self = 1.2e6, .acc = 1, .catch_up = 0.004e6, .warm_up = 1,
             .gap = 300};
    int32_t at = -1;
    for (int j = 0; j < 200 && at < 0; j++) {
        step(&g, &s);
        if (j > 4 && s.probes == 2) at = j;
    }
    assert_true(at > 0 && at <= 40);
}

/* An n-gram drafter without a match proposes nothing: that is no probe, so the guard asks again
 * on the next step (free), and the spacing is not reset. */
static void test_probe_without_proposals_retries(void **state) {
    (void)state;
    specd_adaptive g;
    specd_adaptive_init(&g, 1, 0, 8, NULL);
    sim s = {.c0 = 1e6, .c1 = 4e5, .acc = 0};
    for (int i = 0; i < 4; i++) step(&g, &s); /* plain, probe (rejected, two steps), judged off */
    assert_int_equal(g.drafting, 0);
    int32_t pe = specd_adaptive_probe_spacing(&g);
    assert_true(pe > 0);
    for (int i = 0; i < pe; i++) assert_int_equal(step(&g, &s), 0);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(specd_adaptive_budget(&g), 1); /* the re-probe... */
        specd_adaptive_observe(&g, 0, 0, 1, 1000000);  /* ...found nothing to propose */
        assert_int_equal(specd_adaptive_probe_spacing(&g), 0);
    }
    assert_int_equal(step(&g, &s), 1); /* proposals at last: this one counts */
    assert_true(specd_adaptive_probe_spacing(&g) > 0);
}

/* What earlier sequences learned decides whether a new one probes at once: yes where probing is
 * cheap (its text may suit the drafter), no where a probe costs several plain steps. */
static void test_new_sequence_probes_when_cheap(void **state) {
    (void)state;
    specd_adaptive g, next;
    specd_adaptive_init(&g, 1, 0, 8, NULL);
    sim cheap = {.c0 = 1e6, .c1 = 4e5, .acc = 0};
    for (int i = 0; i < 40; i++) step(&g, &cheap);
    specd_adaptive_init(&next, 1, 0, 8, &g.m);
    cheap.gap = 0;
    assert_int_equal(step(&next, &cheap), 1);
    specd_adaptive_init(&g, 1, 0, 8, NULL);
    sim costly = {.c0 = 1e6, .c1 = 5e6, .acc = 0};
    for (int i = 0; i < 40; i++) step(&g, &costly);
    specd_adaptive_init(&next, 1, 0, 8, &g.m);
    for (int i = 0; i < 40; i++) assert_int_equal(step(&next, &costly), 0);
}

static void test_poor_acceptance_backs_off(void **state) {
    (void)state;
    specd_adaptive g;
    specd_adaptive_init(&g, 1, 0, 8, NULL);
    /* cheap proposals but none accepted: a proposal adds 20% to the step for nothing */
    sim s = {.c0 = 1e6, .c1 = 2e5, .acc = 0};
    int32_t drafted = 0;
    for (int i = 0; i < 40; i++) drafted += step(&g, &s) > 0;
    assert_int_equal(g.drafting, 0);
    assert_true(g.n_backoffs >= 1);
    /* the first probe's two steps, then one probe of 0.2 plain steps per 10 plain steps */
    assert_true(drafted <= 2 + 40 / 10);
    /* right after a probe, the machine's load rises (plain steps cost 20x): with the proposals'
     * old cost they now look cheap, but only the next probe's evidence turns drafting on */
    while (!(g.since_probe == 0 && g.m.prop_steady && !g.probing)) step(&g, &s);
    int32_t k = 0;
    for (int i = 0; i < 200 && k == 0; i++) {
        k = specd_adaptive_budget(&g);
        if (k == 0) specd_adaptive_observe(&g, 0, 0, 1, 20000000);
    }
    assert_true(k > 0);
    assert_int_equal(g.probing, 1);
}

static void test_good_drafter_keeps_drafting_with_refresh(void **state) {
    (void)state;
    specd_adaptive g;
    specd_adaptive_init(&g, 1, 0, 6, NULL);
    sim s = {.c0 = 1e6, .c1 = 5e4, .acc = 6};
    int32_t plain = 0, full = 0;
    for (int i = 0; i < 200; i++) {
        int32_t k = step(&g, &s);
        plain += k == 0;
        full += k == 6;
    }
    assert_int_equal(g.n_backoffs, 0);
    assert_true(full >= 190);
    /* the first step and a refresh of the plain timing every 48 drafting steps */
    assert_true(plain >= 4 && plain <= 6);
}

static void test_recovers_when_acceptance_returns(void **state) {
    (void)state;
    specd_adaptive g;
    specd_adaptive_init(&g, 1, 0, 8, NULL);
    sim bad = {.c0 = 1e6, .c1 = 1e5, .acc = 0};
    for (int i = 0; i < 30; i++) step(&g, &bad);
    assert_int_equal(g.drafting, 0);
    /* the text turns repetitive: a re-probe is accepted and drafting resumes */
    sim good = {.c0 = 1e6, .c1 = 1e5, .acc = 8};
    int resumed = 0;
    for (int i = 0; i < 80 && !resumed; i++) resumed = step(&g, &good) > 1;
    assert_true(resumed);
    assert_int_equal(g.drafting, 1);
}

/* The must-show of a long answer: a policy pays on its first part, stops paying for a long
 * stretch (backed off), and pays again later in the same sequence. A probe comes within the
 * spacing the cost model names (a cheap probe: a few dozen steps, however long the back-off
 * lasted), its evidence outweighs the old (acceptance follows the text), and the policy drafts
 * there. For a residual head (self-speculative, warm-up step, nearly free catch-up) and an
 * n-gram drafter. */
static void test_probes_again_late_in_a_long_answer(void **state) {
    (void)state;
    for (int self = 0; self <= 1; self++) {
        specd_adaptive g;
        specd_adaptive_init(&g, 1, self, 3, NULL);
        specd_adaptive_set_text(&g, 40, 2000);
        sim s = self ? (sim){.c0 = 1e6, .c_self = 1.25e6, .acc = 2, .catch_up = 0.002e6,
                             .warm_up = 1, .gap = 40}
                     : (sim){.c0 = 1e6, .c1 = 1.5e5, .acc = 3, .gap = 40};
        int32_t drafted = 0;
        for (int i = 0; i < 200; i++) drafted += step(&g, &s) > 0;
        assert_true(drafted > 150); /* it pays on the first part */
        s.acc = self ? 1 : 0;      /* ... then not, for long */
        for (int i = 0; i < 900; i++) step(&g, &s);
        assert_int_equal(g.drafting, 0);
        assert_true(g.n_backoffs >= 1);
        /* it pays again: the next probe comes within the spacing, well under 64 steps */
        s.acc = self ? 2 : 3;
        int32_t n = specd_adaptive_probe_spacing(&g);
        assert_true(n >= 0 && n < 64);
        int32_t probes = s.probes, at = -1;
        for (int i = 0; i <= n && at < 0; i++)
            if (step(&g, &s) > 0 && s.probes > probes) at = i;
        assert_true(at >= 0);
        /* the probe's evidence decides: drafting resumes and lasts */
        drafted = 0;
        for (int i = 0; i < 200; i++) drafted += step(&g, &s) > 0;
        assert_true(drafted > 180);
        assert_int_equal(g.drafting, 1);
    }
}

/* Shadow drafts replace probes: once a proposal's cost is known, a backed-off drafter with
 * shadow drafts runs no policy step while its shadows say nothing would be accepted (plain speed
 * exactly), and the first shadow that would have been accepted turns drafting on at once. */
static void test_shadows_replace_probes(void **state) {
    (void)state;
    specd_adaptive g;
    specd_adaptive_init(&g, 1, 0, 8, NULL);
    specd_adaptive_use_shadows(&g);
    sim s = {.c0 = 1e6, .c1 = 2e5, .acc = 0};
    int32_t shadows = 0;
    for (int i = 0; i < 20; i++) shadow_step(&g, &s, &shadows);
    assert_int_equal(g.drafting, 0);
    assert_true(g.n_backoffs >= 1);
    assert_true(g.m.prop_steady);
    int32_t policy_steps = 0;
    shadows = 0;
    for (int i = 0; i < 300; i++) policy_steps += shadow_step(&g, &s, &shadows) > 0;
    assert_int_equal(policy_steps, 0);
    assert_int_equal(shadows, 300);
    /* without shadows the same drafter is probed all along (test_poor_acceptance_backs_off) */
    s.acc = 8;
    assert_int_equal(shadow_step(&g, &s, &shadows), 0); /* its shadow is judged at the next */
    assert_true(shadow_step(&g, &s, &shadows) > 0);
    assert_int_equal(g.drafting, 1);
    assert_int_equal(g.probing, 0);
    /* a guard without shadow drafts never asks for one */
    specd_adaptive plain;
    specd_adaptive_init(&plain, 1, 0, 8, NULL);
    sim t = {.c0 = 1e6, .c1 = 2e5, .acc = 0};
    for (int i = 0; i < 40; i++) {
        assert_false(specd_adaptive_wants_shadow(&plain));
        step(&plain, &t);
    }
}

static void test_self_speculative_on_off(void **state) {
    (void)state;
    specd_adaptive g;
    /* a policy step costs 1.6 plain steps and emits 1 token: off after the probe */
    specd_adaptive_init(&g, 1, 1, 2, NULL);
    sim slow = {.c0 = 1e6, .acc = 1, .c_self = 1.6e6};
    assert_int_equal(step(&g, &slow), 0);
    for (int i = 0; i < 3; i++) assert_true(step(&g, &slow) > 0); /* the probe */
    int32_t on = 0;
    for (int i = 0; i < 40; i++) on += step(&g, &slow) > 0;
    assert_int_equal(g.n_backoffs, 1);
    assert_int_equal(on, 0); /* a probe costs 1.2 plain steps: 60 plain steps to the next */
    /* emitting 2 tokens per 1.3 plain steps pays: always on */
    specd_adaptive_init(&g, 1, 1, 2, NULL);
    sim fast = {.c0 = 1e6, .acc = 2, .c_self = 1.3e6};
    on = 0;
    for (int i = 0; i < 40; i++) on += step(&g, &fast) > 0;
    assert_int_equal(g.n_backoffs, 0);
    assert_int_equal(on, 39);
    /* one token per step never pays, even when load noise makes policy steps look cheap; such
     * probes cost nothing measurable, so they may come every 10 plain steps (the least cost a
     * probe is charged, 0.2 plain steps, at 2%) */
    specd_adaptive_init(&g, 1, 1, 2, NULL);
    sim noisy = {.c0 = 1e6, .acc = 1, .c_self = 0.8e6};
    on = 0;
    for (int i = 0; i < 40; i++) on += step(&g, &noisy) > 0;
    assert_int_equal(g.n_backoffs, 1);
    assert_true(on <= 3 * (1 + 40 / 10));
}

static void test_prior_seeds_next_sequence(void **state) {
    (void)state;
    specd_adaptive g;
    specd_adaptive_init(&g, 1, 0, 8, NULL);
    /* a probe costs 4 plain steps for 2 tokens: nothing could make such proposals pay */
    sim s = {.c0 = 1e6, .c1 = 3e6, .acc = 1};
    for (int i = 0; i < 40; i++) step(&g, &s);
    specd_adaptive_model learned = g.m;
    /* the next sequence starts judged: plain from its first step, no probe */
    specd_adaptive next;
    specd_adaptive_init(&next, 1, 0, 8, &learned);
    int32_t drafted = 0;
    for (int i = 0; i < 12; i++) drafted += step(&next, &s) > 0;
    assert_int_equal(drafted, 0);
    assert_int_equal(next.n_backoffs, 1);
    /* earlier evidence is down-weighted: the new sequence's own steps dominate soon */
    assert_true(next.m.w_plain <= 4 + 12);
    /* cheap probes: a new sequence's text gets a probe at once, however the last one ended */
    specd_adaptive_init(&g, 1, 0, 8, NULL);
    sim poor = {.c0 = 1e6, .c1 = 2e5, .acc = 0};
    for (int i = 0; i < 60; i++) step(&g, &poor);
    learned = g.m;
    specd_adaptive_init(&next, 1, 0, 8, &learned);
    assert_int_equal(step(&next, &poor), 1);
    /* a good drafter's prior: the next sequence drafts from its first step */
    specd_adaptive_init(&g, 1, 0, 8, NULL);
    sim good = {.c0 = 1e6, .c1 = 5e4, .acc = 8};
    for (int i = 0; i < 10; i++) step(&g, &good);
    learned = g.m;
    specd_adaptive_init(&next, 1, 0, 8, &learned);
    assert_true(step(&next, &good) > 1);
}

/* A policy whose probes never pay on this machine (self-speculative: a step costs 1.5 plain
 * steps for one token; its catch-up is cheap, so each new text gets a probe at once) is probed
 * less as its failed probes add up, across sequences (the model is handed on): the first
 * sequences pay for probes, later ones run at plain speed. */
static void test_failed_probes_thin_out(void **state) {
    (void)state;
    specd_adaptive_model learned;
    int32_t probes[10];
    double last_excess = 1.0;
    for (int seq = 0; seq < 10; seq++) {
        specd_adaptive g;
        specd_adaptive_init(&g, 1, 1, 3, seq ? &learned : NULL);
        specd_adaptive_set_text(&g, 700, 128);
        sim s = {.c0 = 1e6, .c_self = 1.5e6, .acc = 1, .catch_up = 1e3, .gap = 700};
        for (int i = 0; i < 128; i++) step(&g, &s);
        probes[seq] = s.probes;
        last_excess = excess(&s);
        learned = g.m;
    }
    fprintf(stderr, "probes per sequence: %d %d %d ... %d\n", probes[0], probes[1], probes[2], probes[9]);
    assert_true(probes[0] >= 1 && probes[1] >= 1);
    assert_int_equal(probes[9], 0);
    assert_true(last_excess < 0.005);
    assert_true(learned.probe_fails > 3.0 && learned.probe_wins == 0.0);
}

/* A new text's opening probe is budgeted over the answer it will get: 2% of 128 allowed tokens
 * pays for a probe costing 2 plain steps, 2% of the 24-token answers earlier sequences gave does
 * not. Self-speculative, each step one token for 1.5 plain steps, after a 50-token prompt whose
 * catch-up costs 0.02 plain steps a token. */
static void test_opening_probe_fits_the_expected_length(void **state) {
    (void)state;
    const int32_t lens[2] = {128, 24};
    int32_t opened[2];
    for (int i = 0; i < 2; i++) {
        specd_adaptive_model learned = {0};
        for (int seq = 0; seq < 3; seq++) {
            specd_adaptive g;
            specd_adaptive_init(&g, 1, 1, 3, seq ? &learned : NULL);
            specd_adaptive_set_text(&g, 50, 128);
            sim s = {.c0 = 1e6, .c_self = 1.5e6, .acc = 1, .catch_up = 0.02e6, .gap = 50};
            opened[i] = 0;
            for (int j = 0; j < lens[i]; j++) {
                int32_t k = step(&g, &s);
                if (j < 4 && k > 0) opened[i] = 1;
            }
            learned = g.m;
        }
    }
    assert_int_equal(opened[0], 1);
    assert_int_equal(opened[1], 0);
}

static void test_disabled_always_full(void **state) {
    (void)state;
    specd_adaptive g;
    specd_adaptive_init(&g, 0, 0, 5, NULL);
    sim s = {.c0 = 1e6, .c1 = 1e7, .acc = 0};
    for (int i = 0; i < 20; i++) assert_int_equal(step(&g, &s), 5);
    assert_int_equal(g.n_backoffs, 0);
}

static void test_cost_model_ratio(void **state) {
    (void)state;
    specd_adaptive g;
    specd_adaptive_init(&g, 1, 0, 4, NULL);
    int32_t k = -1;
    assert_true(specd_adaptive_best_ratio(&g, &k) == 0.0); /* nothing known */
    assert_int_equal(k, 0);
    /* c0 = 1, c1 = 0.5, acceptance (9 + 0.5) / (10 + 2) -> rate of k: E(k) / (1 + k / 2) */
    g.m.ns_plain = 1.0;
    g.m.w_plain = 1;
    g.m.ns_prop = 0.5;
    g.m.w_prop = 1;
    g.m.acc_hit = 9;
    g.m.acc_try = 10;
    double a = 9.5 / 12.0, best = 0;
    int32_t want = 0;
    for (int32_t i = 1; i <= 4; i++) {
        double e = 0, p = 1;
        for (int32_t j = 0; j <= i; j++, p *= a) e += p;
        if (e / (1.0 + 0.5 * i) > best) best = e / (1.0 + 0.5 * i), want = i;
    }
    double r = specd_adaptive_best_ratio(&g, &k);
    assert_int_equal(k, want);
    assert_true(r > best - 1e-9 && r < best + 1e-9);
}


/* --- a hidden-state policy through the session ---------------------------------------------- */

enum { HV = 16, HE = 4, H_PROMPT = 3, H_OUT = 400 };

/* The target: a one-hot row at a token fixed by the position. */
static int32_t target_token(int32_t pos) { return (pos * 7 + 3) % HV; }

/* A residual-head stand-in: lays out [pending | one draft] where the draft is never the target's
 * token, reads both rows' hidden states, and records which target positions' hidden rows reached
 * it (through verify_hidden or, for the guard's plain steps, prefill_hidden). */
typedef struct hidden_policy {
    int64_t n_at;
    int32_t tokens[2], pos[2], rows[2], emitted[1], keep[1];
    int64_t n_layouts, n_verifies, n_catch_up_rows;
    int64_t next_row;   /* the next target position whose hidden row is due */
    int64_t bad_rows;   /* rows out of order, with the wrong value or the wrong next token */
} hidden_policy;

static hidden_policy *hp_last;

static specd_status hp_create(const specd_policy_env *env, const char *options, void **state,
                              specd_error *err) {
    (void)env;
    (void)options;
    (void)err;
    hidden_policy *s = calloc(1, sizeof *s);
    s->rows[0] = 0;
    s->rows[1] = 1;
    *state = hp_last = s;
    return SPECD_OK;
}

static void hp_destroy(void *state) { free(state); }

/* row j's hidden state carries j, and its next token is history[j + 1] */
static void hp_take_row(hidden_policy *s, const int32_t *history, int64_t j, const float *h) {
    if (j != s->next_row || h[0] != (float)j || history[j + 1] != target_token((int32_t)j))
        s->bad_rows++;
    s->next_row = j + 1;
}

static specd_status hp_layout(void *state, const int32_t *history, int64_t n_history,
                              specd_step_layout *out, specd_error *err) {
    (void)err;
    hidden_policy *s = state;
    s->n_layouts++;
    s->n_at = n_history;
    s->tokens[0] = history[n_history - 1];
    s->tokens[1] = (target_token((int32_t)n_history - 1) + 1) % HV; /* always rejected */
    s->pos[0] = (int32_t)n_history - 1;
    s->pos[1] = (int32_t)n_history;
    *out = (specd_step_layout){.n_tokens = 2, .tokens = s->tokens, .pos = s->pos, .n_rows = 2,
                               .rows = s->rows};
    return SPECD_OK;
}

static specd_status hp_verify(void *state, const float *logits, specd_step_outcome *out,
                              specd_error *err) {
    (void)state;
    (void)logits;
    (void)out;
    (void)err;
    return SPECD_E_STATE; /* the session calls verify_hidden for this policy */
}

static int32_t argmax(const float *row) {
    int32_t best = 0;
    for (int32_t x = 1; x < HV; x++)
        if (row[x] > row[best]) best = x;
    return best;
}

static specd_status hp_verify_hidden(void *state, const float *logits, const float *hidden,
                                     int32_t n_embd, specd_step_outcome *out, specd_error *err) {
    (void)err;
    (void)n_embd;
    hidden_policy *s = state;
    s->n_verifies++;
    s->emitted[0] = argmax(logits); /* the draft is never it: one token per step */
    s->keep[0] = 0;
    if (hidden[0] != (float)(s->n_at - 1) || s->n_at - 1 != s->next_row) s->bad_rows++;
    s->next_row = s->n_at;
    *out = (specd_step_outcome){.n_emitted = 1, .emitted = s->emitted, .n_keep = 1,
                                .keep = s->keep, .n_drafted = 1, .n_accepted = 0};
    return SPECD_OK;
}

static specd_status hp_prefill_hidden(void *state, const int32_t *history, int64_t n_history,
                                      const float *hidden, int64_t row0, int32_t n_rows,
                                      int32_t n_embd, specd_error *err) {
    (void)err;
    (void)n_history;
    hidden_policy *s = state;
    for (int32_t i = 0; i < n_rows; i++) {
        s->n_catch_up_rows += row0 + i >= H_PROMPT - 1; /* a plain step's, not the prompt's */
        hp_take_row(s, history, row0 + i, hidden + (size_t)i * (size_t)n_embd);
    }
    return SPECD_OK;
}

static const specd_policy_ops hidden_ops = {
    .abi_version = SPECD_POLICY_ABI_VERSION,
    .name = "hidden-never-accepted",
    .create = hp_create,
    .destroy = hp_destroy,
    .layout = hp_layout,
    .verify = hp_verify,
    .flags = SPECD_POLICY_WANTS_HIDDEN | SPECD_POLICY_WANTS_PREFILL_HIDDEN |
             SPECD_POLICY_HIDDEN_CATCH_UP,
    .verify_hidden = hp_verify_hidden,
    .prefill_hidden = hp_prefill_hidden,
};

static void test_hidden_policy_is_switched_off(void **state) {
    (void)state;
    specd_spec_params sp = specd_spec_default_params();
    sp.n_vocab = HV;
    sp.n_embd = HE;
    sp.max_draft = 4;
    sp.max_seqs = 1;
    specd_spec *spec;
    specd_error err;
    assert_int_equal(specd_spec_create(&sp, &spec, &err), SPECD_OK);
    specd_seq_params p = specd_seq_default_params();
    p.policy_ops = &hidden_ops;
    p.rule = SPECD_ACCEPT_GREEDY;
    p.sampling.temperature = 0.0f;
    p.max_tokens = H_OUT;
    const int32_t prompt[H_PROMPT] = {1, target_token(0), target_token(1)};
    assert_int_equal(specd_spec_seq_open(spec, 0, prompt, H_PROMPT, &p, &err), SPECD_OK);
    assert_int_equal(specd_spec_seq_wants_prefill_hidden(spec, 0), 1);
    float prompt_hidden[(H_PROMPT - 1) * HE] = {0};
    for (int32_t j = 0; j < H_PROMPT - 1; j++) prompt_hidden[j * HE] = (float)j;
    assert_int_equal(specd_spec_seq_prefill_hidden(spec, 0, prompt_hidden, 0, H_PROMPT - 1, &err),
                     SPECD_OK);
    float logits[2 * HV], hidden[2 * HE];
    int64_t n_steps = 0;
    while (!specd_spec_seq_done(spec, 0)) {
        const int32_t seq = 0;
        specd_batch b;
        assert_int_equal(specd_spec_batch_layout(spec, &seq, 1, &b, &err), SPECD_OK);
        /* the host gives hidden states whenever the batch asks: plain steps included */
        assert_int_equal(b.needs_hidden, 1);
        const specd_step_layout *l = &b.seqs[0].layout;
        memset(logits, 0, sizeof logits);
        memset(hidden, 0, sizeof hidden);
        for (int32_t r = 0; r < l->n_rows; r++) {
            int32_t pos = l->pos[l->rows[r]];
            logits[r * HV + target_token(pos)] = 10.0f;
            hidden[r * HE] = (float)pos;
        }
        specd_logits lg = {.data = logits, .row_stride = HV, .n_rows = l->n_rows,
                           .dtype = SPECD_DTYPE_F32, .device = SPECD_DEVICE_HOST};
        specd_logits hd = {.data = hidden, .row_stride = HE, .n_rows = l->n_rows,
                           .dtype = SPECD_DTYPE_F32, .device = SPECD_DEVICE_HOST};
        specd_batch_result res;
        assert_int_equal(specd_spec_batch_verify_hidden(spec, &lg, &hd, &res, &err), SPECD_OK);
        n_steps++;
    }
    int64_t n_out;
    const int32_t *out = specd_spec_seq_output(spec, 0, &n_out);
    assert_int_equal(n_out, H_OUT);
    for (int64_t i = 0; i < n_out; i++)
        assert_int_equal(out[i], target_token((int32_t)(H_PROMPT - 1 + i)));
    specd_seq_stats st;
    assert_int_equal(specd_spec_seq_stats(spec, 0, &st, &err), SPECD_OK);
    hidden_policy *s = hp_last;
    fprintf(stderr, "hidden policy: %lld steps, %lld of them the policy's, %lld plain rows caught "
                    "up, %lld back-offs\n", (long long)n_steps, (long long)s->n_layouts,
            (long long)s->n_catch_up_rows, (long long)st.n_backoffs);
    /* switched off: the policy ran in its probes only (three steps each, at least 8 plain steps
     * apart); its steps are one token each */
    assert_true(st.n_backoffs >= 1);
    assert_true(s->n_layouts * 8 <= 3 * st.n_guard_plain + 3 * 8);
    assert_int_equal(s->n_verifies, s->n_layouts);
    assert_int_equal(st.n_guard_plain + s->n_layouts, n_steps);
    /* and it saw every decided position's hidden row, in order, plain steps' included */
    assert_int_equal(s->bad_rows, 0);
    assert_int_equal(s->next_row, H_PROMPT - 1 + H_OUT);
    assert_int_equal(s->n_catch_up_rows, st.n_guard_plain);
    specd_spec_destroy(spec);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_starts_plain_then_probes_one),
        cmocka_unit_test(test_expensive_drafter_backs_off_at_once),
        cmocka_unit_test(test_probes_fit_the_budget),
        cmocka_unit_test(test_catch_up_spaces_probes),
        cmocka_unit_test(test_probe_without_proposals_retries),
        cmocka_unit_test(test_new_sequence_probes_when_cheap),
        cmocka_unit_test(test_poor_acceptance_backs_off),
        cmocka_unit_test(test_good_drafter_keeps_drafting_with_refresh),
        cmocka_unit_test(test_recovers_when_acceptance_returns),
        cmocka_unit_test(test_probes_again_late_in_a_long_answer),
        cmocka_unit_test(test_shadows_replace_probes),
        cmocka_unit_test(test_failed_probes_thin_out),
        cmocka_unit_test(test_self_speculative_on_off),
        cmocka_unit_test(test_prior_seeds_next_sequence),
        cmocka_unit_test(test_opening_probe_fits_the_expected_length),
        cmocka_unit_test(test_disabled_always_full),
        cmocka_unit_test(test_cost_model_ratio),
        cmocka_unit_test(test_hidden_policy_is_switched_off),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
