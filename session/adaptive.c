#include "session/adaptive.h"

#include <math.h>
#include <stddef.h>

enum {
    REFRESH_EVERY = 48,   /* policy steps between plain steps that keep c0 fresh */
    PROBE_MIN = 8,        /* plain steps from a back-off or a probe to the next probe */
    SELF_PROBE_STEPS = 3, /* a self-speculative probe: its catch-up step and two more */
    SEED_WEIGHT = 4,      /* a new sequence weighs what earlier ones learned as this many steps */
    SEED_TRIES = 2,       /* acceptance follows the text: a new sequence mostly measures its own */
    UNKNOWN_LEFT = 64     /* the least steps left assumed when the sequence's length is unknown */
};
static const double EMA_FLOOR = 0.2;  /* the newest sample's least weight */
static const double ACC_DECAY = 0.9;  /* per drafting step: acceptance follows the text */
static const double ENTER = 1.04;     /* start drafting when expected to be 4% faster */
static const double STAY = 1.0;       /* keep drafting while not expected to be slower */
/* Probing may cost about this fraction of the time: a probe expected to cost x plain steps more
 * than plain decoding of its tokens waits at least x / PROBE_SHARE plain steps after the last. */
static const double PROBE_SHARE = 0.02;
/* a probe's least expected excess, in plain steps: timings on a loaded machine hide less */
static const double PROBE_LEAST = 0.2;
/* acceptance's memory, in steps: evidence this old weighs 1/e against a probe's, and the text
 * has changed since the last probe s steps ago with probability 1 - e^(-s / TEXT_STEPS) */
static const double TEXT_STEPS = 48.0;
static const double GAIN_PRIOR = 0.1; /* what drafting wins where it pays, before it has */
static const double A_HIGH = 0.8;     /* the acceptance a chain drafter's best stretches reach */
static const double PROBE_DECAY = 0.9; /* per probe verdict: the record covers about ten */

static void ema(double *avg, double *w, double x) {
    *w += 1.0;
    double a = 1.0 / *w;
    if (a < EMA_FLOOR) a = EMA_FLOOR;
    *avg += a * (x - *avg);
}

static double cap(double w, double most) { return w < most ? w : most; }
static double at_least(double x, double least) { return x > least ? x : least; }

void specd_adaptive_init(specd_adaptive *g, int enabled, int self_spec, int32_t max_draft,
                         const specd_adaptive_model *prior) {
    *g = (specd_adaptive){.enabled = enabled, .self_spec = self_spec, .max_draft = max_draft,
                          .left = -1};
    if (!prior) return;
    g->m = *prior;
    /* earlier sequences inform, this one's own evidence soon dominates */
    g->m.w_plain = cap(g->m.w_plain, SEED_WEIGHT);
    g->m.w_prop = cap(g->m.w_prop, SEED_WEIGHT);
    g->m.w_self = cap(g->m.w_self, SEED_WEIGHT);
    g->m.w_gain = cap(g->m.w_gain, SEED_WEIGHT);
    if (g->m.acc_try > SEED_TRIES) {
        g->m.acc_hit *= SEED_TRIES / g->m.acc_try;
        g->m.acc_try = SEED_TRIES;
    }
    if (g->m.len_cur > 0) ema(&g->m.len_avg, &g->m.w_len, (double)g->m.len_cur);
    g->m.len_cur = 0;
    /* its text is new to the policy: a probe may come at once if it fits the budget */
    g->fresh = 1;
}

void specd_adaptive_set_text(specd_adaptive *g, int64_t n_prompt, int64_t max_tokens) {
    g->gap = n_prompt > 0 ? n_prompt : 0;
    g->left = max_tokens > 0 ? max_tokens : -1;
}

/* The chain mode's best rate relative to plain decoding at per-position acceptance a. */
static double chain_ratio(const specd_adaptive *g, double a, int32_t *best_k) {
    const specd_adaptive_model *m = &g->m;
    double c0 = m->ns_plain, c1 = m->ns_prop > 0 ? m->ns_prop : 0.0;
    double best = 0.0, ak = a;
    for (int32_t k = 1; k <= g->max_draft; k++) {
        ak *= a; /* a^(k+1) */
        double tokens = (1.0 - ak) / (1.0 - a);
        double r = tokens * c0 / (c0 + c1 * (double)k);
        if (r > best) {
            best = r;
            if (best_k) *best_k = k;
        }
    }
    return best;
}

double specd_adaptive_best_ratio(const specd_adaptive *g, int32_t *best_k) {
    const specd_adaptive_model *m = &g->m;
    if (best_k) *best_k = 0;
    if (m->w_plain <= 0 || m->w_prop <= 0 || m->ns_plain <= 0) return 0.0;
    /* a weak, cautious prior (1 in 4) so one rejected probe is enough to say no */
    double a = (m->acc_hit + 0.5) / (m->acc_try + 2.0);
    if (a > 0.999) a = 0.999;
    return chain_ratio(g, a, best_k);
}

/* A self-speculative step's cost: more rows never cost less than one, so a step measured cheaper
 * than a plain one is load noise (emitting about one token per step never looks like a gain) */
static double self_cost(const specd_adaptive_model *m) {
    return m->ns_self > m->ns_plain ? m->ns_self : m->ns_plain;
}

/* What a probe is expected to cost beyond plain decoding of its tokens, in plain steps, if
 * acceptance has not changed: its steady steps at the current estimates, and the catch-up of
 * the gap's tokens (with a policy's warm-up) in its first step. */
static double probe_cost(const specd_adaptive *g, int64_t gap) {
    const specd_adaptive_model *m = &g->m;
    double c0 = m->ns_plain, wide;
    if (g->self_spec)
        wide = (SELF_PROBE_STEPS - 1) * at_least(self_cost(m) / c0 - m->tok_self, 0.0);
    else
        wide = at_least(m->ns_prop, 0.0) / c0; /* one proposal, rejected */
    double catch_up = at_least(specd_batch_cost_predict(&m->catch_up, (double)gap), 0.0) / c0;
    return at_least(wide + catch_up, PROBE_LEAST);
}

/* What drafting wins per step where it pays: as it last did, bounded for a chain drafter by its
 * rate at a good stretch's acceptance (a drafter whose proposals cost a plain step never wins). */
static double gain(const specd_adaptive *g) {
    double won = g->m.w_gain > 0 ? g->m.gain : GAIN_PRIOR;
    if (!g->self_spec) won = cap(won, chain_ratio(g, A_HIGH, NULL) - 1.0);
    /* ... as often as probes have paid (1 until one has failed) */
    return won * (g->m.probe_wins + 1.0) / (g->m.probe_wins + g->m.probe_fails + 1.0);
}

/* A probe's verdict, once judged. */
static void count_probe(specd_adaptive *g, int paid) {
    if (!g->probe_ended) return;
    g->probe_ended = 0;
    g->m.probe_wins = g->m.probe_wins * PROBE_DECAY + (paid ? 1.0 : 0.0);
    g->m.probe_fails = g->m.probe_fails * PROBE_DECAY + (paid ? 0.0 : 1.0);
}

/* Steps left d plain steps from now. */
static double steps_left(const specd_adaptive *g, int32_t d) {
    if (g->left >= 0) return at_least((double)(g->left - d), 0.0);
    return at_least((double)(g->n_steps + d), UNKNOWN_LEFT);
}

/* Whether a probe s plain steps after the last one, catching up on gap tokens, is worth its
 * cost: within the probing budget, and no more than what it could win if the text changed. A new
 * text's length is max_tokens at most, and about what earlier answers were. */
static int worth_probing(const specd_adaptive *g, int32_t s, int64_t gap, double left) {
    if (!g->fresh && s < PROBE_MIN) return 0;
    if (g->fresh && g->m.w_len > 0 && g->m.len_avg < left) left = g->m.len_avg;
    double x = probe_cost(g, gap);
    /* its share of the plain steps since the last probe (a new text's: of its length) */
    if (x > PROBE_SHARE * ((double)s + (g->fresh ? left : 0.0))) return 0;
    double changed = g->fresh ? 1.0 : 1.0 - exp(-(double)s / TEXT_STEPS);
    return changed * gain(g) * left >= x;
}

int32_t specd_adaptive_probe_spacing(const specd_adaptive *g) {
    if (!g->enabled || g->drafting || !g->judged || g->probing || g->m.ns_plain <= 0) return 0;
    for (int32_t d = 0; d <= SPECD_ADAPTIVE_HORIZON; d++)
        if (worth_probing(g, g->since_probe + d, g->gap + d, steps_left(g, d))) return d;
    return -1;
}

static int32_t start_probe(specd_adaptive *g) {
    g->probing = 1;
    g->probe_from = g->since_probe;
    g->probe_fresh = g->fresh;
    g->since_probe = 0;
    g->fresh = 0;
    g->first_gap = -1;
    if (g->self_spec) {
        g->probe_left = SELF_PROBE_STEPS;
        return g->max_draft;
    }
    /* with c1 unknown, a second step after the first tells a proposal's cost from catch-up */
    g->probe_left = g->m.prop_steady ? 1 : 2;
    return 1;
}

/* The probe's steps are done: its first step's cost beyond a steady step like it is what
 * catching up on the gap cost (measured once the steady steps are). */
static void end_probe(specd_adaptive *g) {
    specd_adaptive_model *m = &g->m;
    g->probing = 0;
    g->probe_left = 0;
    g->probed = 1;
    g->probe_ended = 1;
    if (g->first_gap <= 0) return;
    double steady;
    if (g->self_spec) {
        if (g->first_drafted > 0 && m->w_self <= 0) return;
        steady = g->first_drafted > 0 ? self_cost(m) : m->ns_plain; /* a warm-up: one token */
    } else {
        if (!m->prop_steady) return;
        steady = m->ns_plain + m->ns_prop * (double)g->first_drafted;
    }
    int32_t rows = g->first_gap < INT32_MAX ? (int32_t)g->first_gap : INT32_MAX;
    specd_batch_cost_observe(&m->catch_up, rows, at_least(g->first_ns - steady, 0.0));
}

/* Speculation does not pay: note the back-off, and probe when that is worth it (a policy with
 * shadow drafts and a known proposal cost never needs to: its shadows measure acceptance). */
static int32_t back_off(specd_adaptive *g) {
    count_probe(g, 0);
    if (g->drafting || !g->judged) g->n_backoffs++;
    if (g->drafting) g->since_probe = 0;
    g->drafting = 0;
    g->judged = 1;
    if (g->shadows && g->m.prop_steady) return 0;
    if (worth_probing(g, g->since_probe, g->gap, steps_left(g, 0))) return start_probe(g);
    return 0;
}

static int32_t pays(specd_adaptive *g, int32_t k, double ratio) {
    count_probe(g, 1);
    g->drafting = 1;
    g->judged = 1;
    if (ratio >= ENTER) ema(&g->m.gain, &g->m.w_gain, ratio - 1.0);
    return k;
}

static int32_t decide(specd_adaptive *g) {
    const specd_adaptive_model *m = &g->m;
    if (m->w_plain <= 0 || g->since_plain >= REFRESH_EVERY) return 0;
    /* backed off, only a probe's evidence turns drafting on again: between probes the policy's
     * figures are old and c0 drifts with the machine's load, which would say yes by chance */
    if (g->judged && !g->drafting && !g->probing && !g->probed) return back_off(g);
    g->probed = 0;
    double threshold = g->drafting ? STAY : ENTER;
    if (g->self_spec) {
        if (g->probe_left > 0) return g->max_draft;
        if (m->w_self <= 0 || m->ns_self <= 0) return start_probe(g);
        double ratio = m->tok_self / self_cost(m) * m->ns_plain;
        return ratio >= threshold ? pays(g, g->max_draft, ratio) : back_off(g);
    }
    if (m->w_prop <= 0) return start_probe(g); /* the cautious first probe: one proposal */
    int32_t k;
    double ratio = specd_adaptive_best_ratio(g, &k);
    if (ratio >= threshold) return pays(g, k, ratio);
    return g->probe_left > 0 ? 1 : back_off(g); /* a two-step probe's second step */
}

int32_t specd_adaptive_budget(specd_adaptive *g) {
    g->step_k = g->enabled ? decide(g) : g->max_draft;
    return g->step_k;
}

void specd_adaptive_use_shadows(specd_adaptive *g) { g->shadows = 1; }

int specd_adaptive_wants_shadow(const specd_adaptive *g) {
    return g->enabled && g->shadows && !g->self_spec && g->judged && !g->drafting &&
           !g->probing && g->m.prop_steady;
}

/* Acceptance as a drafting step counts it: the matched proposals, and the first miss. */
static void count_acceptance(specd_adaptive_model *m, int32_t n_drafted, int32_t n_accepted) {
    int32_t examined = n_accepted < n_drafted ? n_accepted + 1 : n_drafted;
    m->acc_hit = m->acc_hit * ACC_DECAY + (double)n_accepted;
    m->acc_try = m->acc_try * ACC_DECAY + (double)examined;
}

void specd_adaptive_shadow(specd_adaptive *g, int32_t n_drafted, int32_t n_accepted) {
    if (!g->enabled || n_drafted <= 0) return;
    if (n_accepted < 0) n_accepted = 0;
    if (n_accepted > n_drafted) n_accepted = n_drafted;
    count_acceptance(&g->m, n_drafted, n_accepted);
    g->probed = 1; /* fresh evidence: the next step is judged on it */
    g->gap = 0;    /* the policy has read the text up to here: nothing to catch up on */
}

/* A policy step's evidence; gap: the tokens it caught up on first. */
static void observe_policy(specd_adaptive *g, int32_t n_drafted, int32_t n_accepted,
                           int32_t n_emitted, double ns, int64_t gap) {
    specd_adaptive_model *m = &g->m;
    /* the text has moved on since the policy last ran: its older evidence weighs less */
    double moved = gap > 0 ? exp(-(double)gap / TEXT_STEPS) : 1.0;
    if (g->self_spec) {
        /* (the EMA's floor bounds the weight that counts) */
        if (gap > 0) m->w_self = cap(m->w_self, 1.0 / EMA_FLOOR) * moved;
        double w = m->w_self;
        if (gap == 0) {
            ema(&m->ns_self, &w, ns);
            ema(&m->tok_self, &m->w_self, (double)n_emitted);
        } else if (n_drafted > 0) {
            ema(&m->tok_self, &w, (double)n_emitted); /* its cost includes the catch-up */
        } /* else a warm-up step (drafts come from the next): no evidence of the rate */
        return;
    }
    m->acc_hit *= moved;
    m->acc_try *= moved;
    /* c1 from a step after one of the policy's own; after plain steps only until there is one,
     * less the catch-up fitted so far */
    if (gap == 0 || !m->prop_steady) {
        double catch_up = gap > 0 ? specd_batch_cost_predict(&m->catch_up, (double)gap) : 0.0;
        if (gap == 0 && !m->prop_steady) {
            m->prop_steady = 1;
            m->w_prop = 0; /* the first steady sample replaces what catch-up inflated */
        }
        if (m->w_plain > 0)
            ema(&m->ns_prop, &m->w_prop, (ns - m->ns_plain - catch_up) / (double)n_drafted);
    }
    count_acceptance(m, n_drafted, n_accepted);
}

void specd_adaptive_observe(specd_adaptive *g, int32_t n_drafted, int32_t n_accepted,
                            int32_t n_emitted, uint64_t step_ns) {
    if (!g->enabled) return;
    specd_adaptive_model *m = &g->m;
    double ns = (double)step_ns;
    int ran = g->step_k > 0; /* the policy ran: it has caught up on the text */
    int64_t gap = g->gap;
    g->gap = ran ? 0 : gap + (n_emitted > 0 ? n_emitted : 0);
    g->n_steps++;
    if (g->left >= 0) g->left = g->left > n_emitted ? g->left - n_emitted : 0;
    if (n_emitted > 0) m->len_cur += n_emitted;
    if (g->probing && ran && !g->self_spec && n_drafted <= 0) {
        /* the drafter had nothing to propose (an n-gram without a match): no probe happened,
         * so the next step may try again */
        g->probing = 0;
        g->probe_left = 0;
        g->since_probe = g->probe_from;
        g->fresh = g->probe_fresh;
    }
    if (!ran || (!g->self_spec && n_drafted <= 0)) {
        ema(&m->ns_plain, &m->w_plain, ns);
        g->since_plain = 0;
        if (!ran) {
            g->since_probe++;
            g->n_plain_steps++;
        }
        return;
    }
    g->since_plain++;
    if (g->probing && g->first_gap < 0) {
        g->first_ns = ns;
        g->first_gap = gap;
        g->first_drafted = n_drafted;
    }
    observe_policy(g, n_drafted, n_accepted, n_emitted, ns, gap);
    if (g->probing && --g->probe_left <= 0) end_probe(g);
}

double specd_adaptive_row_cost(const specd_adaptive *g) {
    const specd_adaptive_model *m = &g->m;
    if (!g->enabled || !m->prop_steady || m->w_prop <= 0 || m->w_plain <= 0 || m->ns_plain <= 0)
        return -1.0;
    return m->ns_prop > 0 ? m->ns_prop / m->ns_plain : 0.0;
}
