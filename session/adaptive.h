/* The adaptive guard: decides per step how many proposals a sequence may make (0 = a plain step)
 * from a cost model, so speculation never makes a sequence much slower than plain decoding.
 *
 * Drafter-shaped policies (chain mode): a step with k proposals costs c0 + c1 * k (c0 = a plain
 * step, c1 = one proposal's marginal cost: proposing it, its forward row, verifying it) and is
 * expected to emit E(k) = 1 + a + ... + a^k tokens at per-position acceptance a. The guard drafts
 * the k that maximises E(k) / (c0 + c1 k) when that beats plain decoding's 1 / c0 by a margin,
 * else it steps plainly and probes with one proposal now and then. Self-speculative policies lay
 * out their own steps, so their guard is on/off: the policy's measured tokens per second against
 * plain steps, probed with a few of its steps.
 *
 * Catch-up: a policy's first step after plain steps first processes the text since its last step
 * (a draft model prefills those tokens, a residual head commits the plain steps' hidden rows), so
 * that step's cost is not a proposal's: it is fitted apart as catch-up = f + u * gap over the gap's
 * tokens (session/batch_cost.h's fit; f takes a policy's warm-up step, u the per-token part), and
 * only steps that follow one of the policy's own steps measure c1 or a self-speculative step's
 * cost. A drafter whose c1 no such step has measured yet probes with two steps.
 *
 * Probing after a back-off: a probe's expected excess X (its wide steps beyond plain decoding
 * when acceptance has not changed, plus the catch-up of the gap) is weighed at every plain step
 * against what it could win: P(the text changed since the last probe) * G * L, with G what
 * drafting won when it last paid and L the steps left; and probing may cost about 2% of the
 * time (X <= 2% of the plain steps since the last probe). A cheap probe (a policy whose catch-up
 * is nearly free, as ngram's or mrp's) comes every few dozen steps however long the sequence;
 * one whose catch-up per token costs more than the 2% never comes within a sequence. A probe's
 * evidence outweighs older evidence by how long ago that was (acceptance follows the text).
 * What a probe could win is also weighed by how often probes have turned drafting on, over this
 * sequence and the earlier ones (the model carries the count): a policy whose probes never pay on
 * this machine (a head whose catch-up is dear, drafts that are rarely right) is probed less and
 * less, so its probes stop costing time; one that pays now and then keeps being probed.
 *
 * Start: a plain step first (c0), then a one-proposal probe (c1, and acceptance from a weak
 * prior), so the first judgement comes after two steps. A spec handle passes what one sequence
 * learned (costs, acceptance, catch-up, gain) to the next sequence with the same policy, which
 * starts from it (its text is new: it probes at once if a probe fits the budget over its expected
 * length: max_tokens, or less when earlier answers were shorter: a 2% budget over 128 allowed
 * tokens is 8% of a 32-token answer)
 * and keeps adapting with its own evidence (older evidence is down-weighted). All decisions are
 * deterministic functions of the observations fed in (tests feed synthetic timings).
 *
 * Shadow drafts: a drafter whose proposals cost next to nothing (SPECD_POLICY_SHADOW_DRAFTS:
 * n-gram, suffix, recycle) is asked for proposals on plain steps too while backed off; what the
 * tokens that followed would have accepted of each feeds acceptance like a drafting step's, and
 * is judged at once. Drafting then resumes where the text turns predictable, without probes:
 * once a proposal's cost is known, such a policy's probes stop. */
#ifndef SPECD_SESSION_ADAPTIVE_H
#define SPECD_SESSION_ADAPTIVE_H

#include "session/batch_cost.h"

#include <stdint.h>

/* What is learned; carried from sequence to sequence. Weights count observations. */
typedef struct specd_adaptive_model {
    double ns_plain, w_plain; /* plain step cost c0 */
    double ns_prop, w_prop;   /* chain: marginal cost c1 of one proposal */
    double acc_hit, acc_try;  /* chain: proposals accepted / examined (decayed counts) */
    int prop_steady;          /* chain: c1 was measured by a step after one of the policy's own */
    double ns_self, tok_self, w_self; /* self-speculative: a policy step's cost and tokens */
    double gain, w_gain;      /* what drafting won (rate / plain rate - 1) while it paid */
    double probe_wins, probe_fails; /* probes that turned drafting on / did not (decayed) */
    specd_batch_cost catch_up; /* a first step's cost beyond a steady one, over the gap's tokens */
    /* answer lengths: what earlier sequences emitted (EMA), and this one so far (which the next
     * sequence folds in: the model is handed on when a sequence ends) */
    double len_avg, w_len;
    int64_t len_cur;
} specd_adaptive_model;

typedef struct specd_adaptive {
    int enabled;
    int self_spec;     /* on/off guard for policies that lay out their own steps */
    int shadows;       /* acceptance while backed off comes from shadow drafts */
    int32_t max_draft;
    specd_adaptive_model m;
    int32_t step_k;    /* budget handed out for the step in flight */
    int drafting;      /* the current judgement: speculation pays */
    int judged;        /* a judgement has been made */
    int32_t since_plain;  /* policy steps since the last plain step */
    int32_t since_probe;  /* plain steps since the last probe (or the back-off) */
    int32_t probe_left;   /* policy steps of the probe still to run */
    int probing;          /* the steps in flight are a probe */
    int probed;           /* a probe has just ended: the next step is judged on its evidence */
    int probe_ended;      /* ... a probe, not a shadow draft: its verdict is counted */
    int32_t probe_from;   /* since_probe when it started (a probe without proposals gives it back) */
    int probe_fresh;      /* ... and fresh */
    int fresh;            /* no probe has seen this sequence's text yet (seeded by a prior) */
    int64_t gap;          /* tokens the policy must catch up on at its next step */
    int64_t left;         /* tokens still allowed (max_tokens - emitted); < 0: not known */
    int64_t n_steps;      /* steps observed */
    /* the probe's first step, whose catch-up is told apart once its steady steps are measured */
    double first_ns;
    int64_t first_gap;
    int32_t first_drafted;
    int64_t n_backoffs;   /* times the guard turned drafting off */
    int64_t n_plain_steps; /* steps the guard ran without proposals */
} specd_adaptive;

/* One more proposal's cost relative to a plain step (c1 / c0, at least 0), once a step after one of
 * the policy's own has measured it (this sequence's or, through the prior, an earlier one's);
 * -1 before that and with the guard off. */
double specd_adaptive_row_cost(const specd_adaptive *g);

/* prior may be NULL (nothing learned yet). */
void specd_adaptive_init(specd_adaptive *g, int enabled, int self_spec, int32_t max_draft,
                         const specd_adaptive_model *prior);
/* The sequence's text: n_prompt tokens the policy catches up on at its first step (0 if it has
 * them already), and at most max_tokens to generate (0: not known). Optional, after init. */
void specd_adaptive_set_text(specd_adaptive *g, int64_t n_prompt, int64_t max_tokens);
/* Proposals the next step may make; 0 = a plain step. For self-speculative policies any value
 * > 0 means "let the policy lay out its step". Must be followed by one observe. */
int32_t specd_adaptive_budget(specd_adaptive *g);
/* Records the step laid out after the last budget call: proposals verified, of which accepted,
 * tokens emitted, and its cost: a lone sequence's wall time from layout to the end of
 * verification, or a batched sequence's share of its batch (session/batch_cost.h). */
void specd_adaptive_observe(specd_adaptive *g, int32_t n_drafted, int32_t n_accepted,
                            int32_t n_emitted, uint64_t step_ns);

/* The policy's proposals are cheap enough to make on plain steps (shadow drafts). After init. */
void specd_adaptive_use_shadows(specd_adaptive *g);
/* Whether a plain step should make a shadow draft: backed off, with a proposal's cost known. */
int specd_adaptive_wants_shadow(const specd_adaptive *g);
/* A shadow draft's outcome: of n_drafted proposals, the first n_accepted match the tokens that
 * followed (a tree: the matched path's length). The next budget call judges on it. */
void specd_adaptive_shadow(specd_adaptive *g, int32_t n_drafted, int32_t n_accepted);

/* The chain mode's expected tokens per second relative to plain decoding at its best k
 * (written to *best_k), from the current model; 0 when it has no estimate yet. */
double specd_adaptive_best_ratio(const specd_adaptive *g, int32_t *best_k);
/* While backed off: the plain steps from now until the guard probes if nothing new is observed
 * (the gap and the steps left move on as plain steps run); -1 if it would not probe within
 * SPECD_ADAPTIVE_HORIZON steps, 0 when not backed off. */
#define SPECD_ADAPTIVE_HORIZON 4096
int32_t specd_adaptive_probe_spacing(const specd_adaptive *g);

#endif
