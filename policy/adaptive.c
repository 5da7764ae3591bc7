#include "policy/adaptive.h"

enum {
    WARMUP_STEPS = 8,     /* samples of each kind before judging */
    PROBE_EVERY = 64,     /* force a plain step this often to keep its timing fresh */
    PAUSE_MIN = 16,
    PAUSE_MAX = 1024
};
static const double EMA = 0.125;
static const double SLOWER = 0.97; /* back off below 97% of plain throughput */
static const double FASTER = 1.10; /* grow the budget above 110% */

void specd_adaptive_init(specd_adaptive *g, int enabled, int32_t max_draft) {
    *g = (specd_adaptive){.enabled = enabled, .max_draft = max_draft, .budget = max_draft,
                          .pause_len = PAUSE_MIN};
}

int32_t specd_adaptive_budget(specd_adaptive *g) {
    if (!g->enabled) return g->max_draft;
    if (g->pause_left > 0) return 0;
    /* Judging needs fresh plain timings: after the warm-up, a step with no draft now and then. */
    int need_plain = g->n_plain < 2 || g->since_plain >= PROBE_EVERY;
    if (need_plain && g->n_spec >= WARMUP_STEPS) return 0;
    return g->budget;
}

static void ema(double *avg, int64_t n, double x) { *avg = n == 1 ? x : *avg + EMA * (x - *avg); }

void specd_adaptive_observe(specd_adaptive *g, int32_t n_drafted, int32_t n_emitted,
                            uint64_t step_ns) {
    if (!g->enabled) return;
    if (n_drafted == 0) {
        g->n_plain++;
        g->since_plain = 0;
        ema(&g->ns_plain, g->n_plain, (double)step_ns);
        if (g->pause_left > 0) g->pause_left--;
        return;
    }
    g->n_spec++;
    g->since_plain++;
    ema(&g->ns_spec, g->n_spec, (double)step_ns);
    ema(&g->tok_spec, g->n_spec, (double)n_emitted);
    if (g->n_spec < WARMUP_STEPS || g->n_plain < 2 || g->ns_spec <= 0 || g->ns_plain <= 0) return;
    double spec_rate = g->tok_spec / g->ns_spec, plain_rate = 1.0 / g->ns_plain;
    if (spec_rate < SLOWER * plain_rate) {
        g->n_backoffs++;
        if (g->budget > 1) {
            g->budget /= 2;
        } else {
            g->pause_left = g->pause_len;
            if (g->pause_len < PAUSE_MAX) g->pause_len *= 2;
        }
        g->n_spec = 0; /* judge the new setting on fresh samples */
    } else if (spec_rate > FASTER * plain_rate) {
        if (g->budget < g->max_draft) g->budget++;
        g->pause_len = PAUSE_MIN;
    }
}
