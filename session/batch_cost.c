#include "session/batch_cost.h"

#include <string.h>

static const double DECAY = 0.97;     /* per batch: the machine's load changes */
static const double MIN_SPREAD = 0.02; /* rows' variance (rows^2) before a and b are separated:
                                        * one batch in ~30 differing by a row is enough */

void specd_batch_cost_init(specd_batch_cost *c) { memset(c, 0, sizeof *c); }

void specd_batch_cost_observe(specd_batch_cost *c, int32_t rows, double ns) {
    if (rows < 1 || !(ns >= 0.0)) return;
    double r = (double)rows;
    c->w = c->w * DECAY + 1.0;
    c->sr = c->sr * DECAY + r;
    c->srr = c->srr * DECAY + r * r;
    c->st = c->st * DECAY + ns;
    c->srt = c->srt * DECAY + r * ns;
    double mr = c->sr / c->w, var = c->srr / c->w - mr * mr;
    c->fitted = 0;
    if (var < MIN_SPREAD) return;
    double mt = c->st / c->w, cov = c->srt / c->w - mr * mt;
    double b = cov / var, a = mt - b * mr;
    /* a row never costs less than nothing, and a forward has no negative fixed cost: clamp to
     * the nearest model of that shape */
    if (b < 0.0) {
        b = 0.0;
        a = mt;
    }
    if (a < 0.0) {
        a = 0.0;
        b = c->srt / c->srr; /* least squares through the origin */
    }
    c->a = a;
    c->b = b;
    c->fitted = 1;
}

double specd_batch_cost_share(const specd_batch_cost *c, int32_t n_seqs, int32_t rows,
                              int32_t total_rows, double forward_ns) {
    if (n_seqs < 1 || total_rows < 1) return forward_ns;
    if (!c->fitted) return forward_ns * (double)rows / (double)total_rows;
    /* the model's split, scaled so the shares add up to this batch's measured time */
    double model = c->a + c->b * (double)total_rows;
    double share = c->a / (double)n_seqs + c->b * (double)rows;
    return model > 0.0 ? forward_ns * share / model : forward_ns / (double)n_seqs;
}

double specd_batch_cost_predict(const specd_batch_cost *c, double rows) {
    if (c->fitted) return c->a + c->b * rows;
    return c->sr > 0.0 ? c->st / c->sr * rows : 0.0;
}
