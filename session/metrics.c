#include "specd/metrics.h"

#include <stdarg.h>
#include <stdio.h>

typedef struct out_buf {
    char *buf;
    size_t cap, len;
} out_buf;

static void put(out_buf *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(out_buf *o, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    size_t room = o->len < o->cap ? o->cap - o->len : 0;
    int n = vsnprintf(room ? o->buf + o->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0) o->len += (size_t)n;
}

static void counter(out_buf *o, const char *name, const char *help, const char *labels,
                    long long value) {
    put(o, "# HELP specd_%s %s\n# TYPE specd_%s counter\n", name, help, name);
    put(o, "specd_%s{%s} %lld\n", name, labels, value);
}

size_t specd_metrics_format(const specd_seq_stats *s, const char *extra_labels, char *buf,
                            size_t cap) {
    out_buf o = {.buf = buf, .cap = cap};
    const char *l = extra_labels ? extra_labels : "";
    if (buf && cap) buf[0] = '\0';
    counter(&o, "num_drafts_total", "Steps that verified at least one proposal.", l, s->n_drafts);
    counter(&o, "num_draft_tokens_total", "Proposed tokens verified.", l, s->n_draft_tokens);
    counter(&o, "num_accepted_tokens_total", "Proposed tokens accepted.", l, s->n_accepted);
    counter(&o, "num_emitted_tokens_total", "Tokens emitted.", l, s->n_emitted);
    counter(&o, "num_target_forwards_total", "Target forward passes (steps).", l, s->n_steps);
    counter(&o, "num_backoffs_total", "Times the adaptive guard turned drafting off.", l,
            s->n_backoffs);
    counter(&o, "num_guard_plain_steps_total", "Steps the adaptive guard ran without proposals.",
            l, s->n_guard_plain);
    counter(&o, "num_shadow_drafts_total",
            "Shadow drafts the guard judged while backed off (proposals never verified).", l,
            s->n_shadow_drafts);
    counter(&o, "num_shadow_accepted_tokens_total",
            "Tokens of shadow drafts the output matched (what verification would have accepted).",
            l, s->n_shadow_accepted);
    put(&o, "# HELP specd_num_accepted_tokens_per_pos Accepted proposals by draft position.\n"
            "# TYPE specd_num_accepted_tokens_per_pos counter\n");
    for (int i = 0; i < SPECD_MAX_DRAFT && s->drafted_at[i] > 0; i++)
        put(&o, "specd_num_accepted_tokens_per_pos{%s%sposition=\"%d\"} %lld\n", l, *l ? "," : "",
            i, (long long)s->accepted_at[i]);
    if (buf && cap && o.len >= cap) buf[cap - 1] = '\0';
    return o.len;
}

void specd_seq_stats_add(specd_seq_stats *a, const specd_seq_stats *b) {
    a->n_steps += b->n_steps;
    a->n_emitted += b->n_emitted;
    a->n_drafts += b->n_drafts;
    a->n_draft_tokens += b->n_draft_tokens;
    a->n_accepted += b->n_accepted;
    for (int i = 0; i < SPECD_MAX_DRAFT; i++) {
        a->accepted_at[i] += b->accepted_at[i];
        a->drafted_at[i] += b->drafted_at[i];
    }
    a->n_backoffs += b->n_backoffs;
    a->n_guard_plain += b->n_guard_plain;
    a->n_remote_verified += b->n_remote_verified;
    a->n_remote_fallback += b->n_remote_fallback;
    a->n_rows += b->n_rows;
    a->n_tokens_run += b->n_tokens_run;
    a->n_empty_steps += b->n_empty_steps;
    a->n_commit_steps += b->n_commit_steps;
    a->lossy |= b->lossy;
    a->propose_ns += b->propose_ns;
    a->verify_ns += b->verify_ns;
    a->n_shadow_drafts += b->n_shadow_drafts;
    a->n_shadow_accepted += b->n_shadow_accepted;
    a->n_draft_cut += b->n_draft_cut;
    a->n_forced += b->n_forced;
}
