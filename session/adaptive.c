#include "session/adaptive.h"

enum {
    REFRESH_EVERY = 48, /* policy steps between plain steps that keep c0 fresh */
    PROBE_MIN = 8,      /* plain steps before the first re-probe after a back-off */
    PROBE_MAX = 1024,
    SELF_PROBE_STEPS = 3, /* a self-speculative probe: its propose step and two more */
    SEED_WEIGHT = 4,    /* a new sequence weighs what earlier ones learned as this many steps */
    SEED_TRIES = 2,     /* acceptance follows the text: a new sequence mostly measures its own */
    CHEAP_PROBE_WAIT = 50 /* a probe costing under one plain step more than plain decoding */
};
static const double EMA_FLOOR = 0.2;  /* the newest sample's least weight */
static const double ACC_DECAY = 0.9;  /* per drafting step: acceptance follows the text */
static const double ENTER = 1.04;     /* start drafting when expected to be 4% faster */
static const double STAY = 1.0;       /* keep drafting while not expected to be slower */
/* Probing may cost about this fraction of the time: a probe that cost x plain steps more than
 * plain decoding of its tokens (a drafter catching up on the text since its last proposal, a
 * self-speculative policy's wide steps) waits x / PROBE_SHARE plain steps before the next. */
static const double PROBE_SHARE = 0.02;

static void ema(double *avg, double *w, double x) {
    *w += 1.0;
    double a = 1.0 / *w;
    if (a < EMA_FLOOR) a = EMA_FLOOR;
    *avg += a * (x - *avg);
}

static double cap(double w, double most) { return w < most ? w : most; }

void specd_adaptive_init(specd_adaptive *g, int enabled, int self_spec, int32_t max_draft,
                         const specd_adaptive_model *prior) {
    *g = (specd_adaptive){.enabled = enabled, .self_spec = self_spec, .max_draft = max_draft};
    g->m.probe_every = PROBE_MIN;
    if (!prior) return;
    g->m = *prior;
    /* earlier sequences inform, this one's own evidence soon dominates */
    g->m.w_plain = cap(g->m.w_plain, SEED_WEIGHT);
    g->m.w_prop = cap(g->m.w_prop, SEED_WEIGHT);
    g->m.w_self = cap(g->m.w_self, SEED_WEIGHT);
    if (g->m.acc_try > SEED_TRIES) {
        g->m.acc_hit *= SEED_TRIES / g->m.acc_try;
        g->m.acc_try = SEED_TRIES;
    }
    /* acceptance follows the text, so a new sequence probes again as soon as what probing
     * costs allows, rather than where the last sequence's doubling had got to */
    g->m.probe_every = g->m.probe_wait > PROBE_MIN ? (int32_t)g->m.probe_wait : PROBE_MIN;
    if (g->m.probe_every > PROBE_MAX) g->m.probe_every = PROBE_MAX;
    /* where probing is cheap, the new sequence's text gets a probe at once */
    if (g->m.probe_wait < CHEAP_PROBE_WAIT) g->since_probe = g->m.probe_every;
}

double specd_adaptive_best_ratio(const specd_adaptive *g, int32_t *best_k) {
    const specd_adaptive_model *m = &g->m;
    if (best_k) *best_k = 0;
    if (m->w_plain <= 0 || m->w_prop <= 0 || m->ns_plain <= 0) return 0.0;
    /* a weak, cautious prior (1 in 4) so one rejected probe is enough to say no */
    double a = (m->acc_hit + 0.5) / (m->acc_try + 2.0);
    if (a > 0.999) a = 0.999;
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

static int32_t start_probe(specd_adaptive *g, int retry) {
    g->probing = 1;
    g->probe_retry = retry;
    g->since_probe = 0;
    g->probe_excess = 0.0;
    if (!g->self_spec) return 1;
    g->probe_left = SELF_PROBE_STEPS;
    return g->max_draft;
}

/* A probe's steps are done: space the next twice as far as the last, and by what this one
 * cost. */
static void end_probe(specd_adaptive *g) {
    g->probing = 0;
    if (g->probe_retry)
        g->m.probe_every = g->m.probe_every < PROBE_MAX / 2 ? 2 * g->m.probe_every : PROBE_MAX;
    double wait = g->probe_excess / PROBE_SHARE;
    if (wait > PROBE_MAX) wait = PROBE_MAX;
    g->m.probe_wait = wait;
    if (wait > g->m.probe_every) g->m.probe_every = (int32_t)wait;
}

/* Speculation does not pay: note the back-off, and probe now and then. */
static int32_t back_off(specd_adaptive *g) {
    if (g->drafting || !g->judged) g->n_backoffs++;
    if (g->drafting) g->since_probe = 0;
    g->drafting = 0;
    g->judged = 1;
    if (g->since_probe >= g->m.probe_every) return start_probe(g, 1);
    return 0;
}

static int32_t pays(specd_adaptive *g, int32_t k) {
    if (!g->drafting) g->m.probe_every = PROBE_MIN;
    g->drafting = 1;
    g->judged = 1;
    return k;
}

static int32_t decide(specd_adaptive *g) {
    const specd_adaptive_model *m = &g->m;
    if (m->w_plain <= 0 || g->since_plain >= REFRESH_EVERY) return 0;
    double threshold = g->drafting ? STAY : ENTER;
    if (g->self_spec) {
        if (g->probe_left > 0) return g->max_draft;
        if (m->w_self <= 0 || m->ns_self <= 0) return start_probe(g, 0);
        /* more rows never cost less than one: a step measured cheaper than a plain one is load
         * noise, so emitting about one token per step can never look like a gain */
        double cost = m->ns_self > m->ns_plain ? m->ns_self : m->ns_plain;
        double ratio = m->tok_self / cost * m->ns_plain;
        return ratio >= threshold ? pays(g, g->max_draft) : back_off(g);
    }
    if (m->w_prop <= 0) return start_probe(g, 0); /* the cautious first probe: one proposal */
    int32_t k;
    double ratio = specd_adaptive_best_ratio(g, &k);
    return ratio >= threshold ? pays(g, k) : back_off(g);
}

int32_t specd_adaptive_budget(specd_adaptive *g) {
    g->step_k = g->enabled ? decide(g) : g->max_draft;
    return g->step_k;
}

void specd_adaptive_observe(specd_adaptive *g, int32_t n_drafted, int32_t n_accepted,
                            int32_t n_emitted, uint64_t step_ns) {
    if (!g->enabled) return;
    specd_adaptive_model *m = &g->m;
    double ns = (double)step_ns;
    int plain = g->step_k == 0 || (!g->self_spec && n_drafted <= 0);
    if (g->probing && g->step_k > 0 && !g->self_spec && n_drafted <= 0) {
        /* the drafter had nothing to propose (an n-gram without a match): no probe happened,
         * so the next step tries again */
        g->probing = 0;
        g->since_probe = g->m.probe_every;
    } else if (g->probing && g->step_k > 0 && m->ns_plain > 0) {
        double excess = (ns - m->ns_plain * (double)n_emitted) / m->ns_plain;
        if (excess > 0) g->probe_excess += excess;
        if (!g->self_spec || g->probe_left <= 1) end_probe(g);
    }
    if (plain) {
        ema(&m->ns_plain, &m->w_plain, ns);
        g->since_plain = 0;
        if (g->step_k == 0) {
            g->since_probe++;
            g->n_plain_steps++;
        }
        return;
    }
    g->since_plain++;
    if (g->self_spec) {
        double w = m->w_self;
        ema(&m->ns_self, &w, ns);
        ema(&m->tok_self, &m->w_self, (double)n_emitted);
        if (g->probe_left > 0) g->probe_left--;
        return;
    }
    if (m->w_plain > 0) ema(&m->ns_prop, &m->w_prop, (ns - m->ns_plain) / (double)n_drafted);
    int32_t examined = n_accepted < n_drafted ? n_accepted + 1 : n_drafted;
    m->acc_hit = m->acc_hit * ACC_DECAY + (double)n_accepted;
    m->acc_try = m->acc_try * ACC_DECAY + (double)examined;
}
