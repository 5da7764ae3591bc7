/* SPECD_PROFILE for the mrp policy: where its own time per step goes, next to the runtime's
 * per-op tables (model/runtime). SPECD_PROFILE=cpu counts this thread's CPU time (robust to a
 * loaded machine; the head context's worker threads, with threads > 1, are in its runtime table
 * instead), any other value wall time. The table goes to stderr when the policy is destroyed, as
 * the runtime's does; off (no clock reads) without SPECD_PROFILE. */
#ifndef SPECD_POLICY_MRP_PROF_H
#define SPECD_POLICY_MRP_PROF_H

#include <stdint.h>

typedef enum mrp_prof_part {
    MRP_PROF_INPUT,   /* head input rows (eh_proj over [enorm(E[y]); hnorm(g)]) */
    MRP_PROF_COMMIT,  /* the committed rows' head forward (with C_1 by the output head when the
                       * whole vocabulary is used) */
    MRP_PROF_C1,      /* C_1 over the draft vocabulary, z_1 and the shortlist S */
    MRP_PROF_SPEC,    /* the speculative rows' head forwards (k >= 2) */
    MRP_PROF_RESID,   /* C_k over S (k >= 2) */
    MRP_PROF_PICK,    /* drafts, q, confidences */
    MRP_PROF_VERIFY,  /* the acceptance engine / the target's samples */
    MRP_PROF_PREFILL, /* the prompt's head rows (once per sequence; not in the per-round total) */
    MRP_PROF_CATCH_UP, /* plain steps' head rows (the guard's plain steps; not per round) */
    MRP_PROF_N
} mrp_prof_part;

typedef struct mrp_prof {
    int on, cpu;
    uint64_t last;
    uint64_t ns[MRP_PROF_N];
    uint64_t rounds;
} mrp_prof;

void mrp_prof_init(mrp_prof *p);
/* starts a timed stretch: the next mark charges from here */
void mrp_prof_start(mrp_prof *p);
/* charges the time since the last start or mark to part */
void mrp_prof_mark(mrp_prof *p, mrp_prof_part part);
/* prints the table (per round) to stderr when on */
void mrp_prof_report(const mrp_prof *p);

#endif
