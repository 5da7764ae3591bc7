#include "cli/ab_rounds.h"

#include <stdlib.h>
#include <string.h>

static int same_tokens(const cli_result *a, const cli_result *b) {
    return a->n_tokens == b->n_tokens &&
           !memcmp(a->tokens, b->tokens, (size_t)a->n_tokens * sizeof *a->tokens);
}

/* Index of the run with the median decode time among runs[0..n). */
static int median_run(const cli_result *runs, int n) {
    int *order = malloc((size_t)n * sizeof *order);
    if (!order) return 0;
    for (int i = 0; i < n; i++) order[i] = i;
    for (int i = 1; i < n; i++) /* insertion sort: R is small */
        for (int j = i; j > 0 && runs[order[j]].run.decode_ns < runs[order[j - 1]].run.decode_ns;
             j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    int m = order[(n - 1) / 2];
    free(order);
    return m;
}

int ab_rounds_open(ab_rounds *r, const cli_engine *e, const cli_options *o, int rounds) {
    memset(r, 0, sizeof *r);
    if (rounds < 1 || rounds > 1000) {
        fprintf(stderr, "specd: %d rounds: expected 1 to 1000\n", rounds);
        return 1;
    }
    r->specs = calloc((size_t)rounds, sizeof *r->specs);
    if (!r->specs) {
        fprintf(stderr, "specd: out of memory\n");
        return 1;
    }
    r->n = rounds;
    for (int i = 1; i < rounds; i++)
        if (cli_spec_create(e, o, &r->specs[i])) {
            ab_rounds_close(r);
            return 1;
        }
    return 0;
}

void ab_rounds_close(ab_rounds *r) {
    for (int i = 1; i < r->n; i++) specd_spec_destroy(r->specs[i]);
    free(r->specs);
    memset(r, 0, sizeof *r);
}

int ab_run_rounds(const ab_rounds *rr, const cli_engine *e, const cli_options *o, ab_side *sides,
                  int n_sides) {
    int rounds = rr->n;
    if (n_sides < 1 || rounds < 1) {
        fprintf(stderr, "specd: %d sides over %d rounds: nothing to run\n", n_sides, rounds);
        return 1;
    }
    cli_result *runs = calloc((size_t)n_sides * (size_t)rounds, sizeof *runs);
    if (!runs) {
        fprintf(stderr, "specd: out of memory\n");
        return 1;
    }
    int rc = 0;
    for (int r = 0; r < rounds && !rc; r++) {
        cli_engine round = *e; /* the same model and context, the round's own spec */
        if (r) round.spec = rr->specs[r];
        for (int j = 0; j < n_sides && !rc; j++) {
            int s = (j + r) % n_sides; /* each round starts one side later */
            rc = cli_run(&round, o, sides[s].policy, sides[s].policy_opts, sides[s].ids,
                         sides[s].n_ids, 0, &runs[(size_t)s * (size_t)rounds + (size_t)r]);
        }
    }
    for (int s = 0; s < n_sides; s++) {
        cli_result *mine = &runs[(size_t)s * (size_t)rounds];
        int keep = rc ? -1 : median_run(mine, rounds);
        if (!rc) {
            sides[s].stable = 1;
            for (int r = 1; r < rounds; r++) sides[s].stable &= same_tokens(&mine[0], &mine[r]);
            sides[s].result = mine[keep];
        }
        for (int r = 0; r < rounds; r++)
            if (r != keep) cli_result_free(&mine[r]);
    }
    free(runs);
    return rc;
}
