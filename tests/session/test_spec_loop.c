/* The stationary batch loop (specd/spec_loop.h) on the real model:
 *  - 64 requests (12 under the sanitizers) of mixed policies (none, ngram, draft with the target
 *    as its own drafter, layerskip, isd, risd with the shipped adapter), greedy and coupled T 0.8,
 *    each with its own stream key, admitted at different steps, emit exactly what each emits alone
 *    (a loop of one slot), and their events add up to their output;
 *  - cancel of a running and of a queued request delivers the last event before it returns and
 *    frees the slot; a full queue is SPECD_E_STATE; what cannot fit n_ctx, a bad policy and a
 *    slot-keyed stream are refused at submit; destroy(NULL) is a no-op;
 *  - penalties: recycle beside other requests emits what none does with the same penalties. */
#include "test_main.h"

#include "fixture_model.h"

#include "specd/spec_loop.h"

#include <string.h>

/* Under the sanitizers every request runs several times slower; 12 requests still mix every
 * policy (policy_of's table), both samplers, runs with and without the guard and the three
 * admission waves (7, 2 and 3 requests). */
#ifdef SPECD_TEST_SANITIZED
enum { N_REQ = 12 };
#else
enum { N_REQ = 64 };
#endif
/* admitted in three waves: FIRST at once, then WAVE at step 3 and WAVE at step 5 */
enum { FIRST = N_REQ * 5 / 8, WAVE = (N_REQ - FIRST) / 2 };
enum { N_GEN = 12, MAX_PROMPT = 64, N_PROMPTS = 10, MAX_DRAFT = 4, N_THREADS = 1 };

static int32_t prompts[N_PROMPTS][MAX_PROMPT];
static int64_t n_prompts[N_PROMPTS];
static specd_model *model;
static const char *model_path;
static char draft_opts[1200], risd_opts[1200];

/* One request's view of its events. */
typedef struct record {
    int64_t id;
    int32_t out[N_GEN + 2 * MAX_DRAFT + 1];
    int32_t n_out;
    int n_events, n_done;
    specd_status status;
    char message[256];
    specd_seq_stats stats;
    specd_loop *loop; /* with cancel: cancel that request from this one's first event */
    int64_t cancel;
    specd_status cancel_status;
} record;

static void on_event(const specd_loop_event *ev, void *user) {
    record *r = user;
    assert_int_equal(ev->request, r->id);
    assert_int_equal(r->n_done, 0); /* nothing after the last event */
    r->n_events++;
    assert_true(r->n_out + ev->n_tokens <= N_GEN);
    if (ev->n_tokens > 0)
        memcpy(r->out + r->n_out, ev->tokens, sizeof(int32_t) * (size_t)ev->n_tokens);
    r->n_out += ev->n_tokens;
    if (r->cancel) {
        r->cancel_status = specd_loop_cancel(r->loop, r->cancel);
        r->cancel = 0;
    }
    if (ev->done) {
        r->n_done = 1;
        r->status = ev->status;
        snprintf(r->message, sizeof r->message, "%s", ev->message);
        assert_non_null(ev->stats);
        r->stats = *ev->stats;
    } else {
        assert_null(ev->stats);
        assert_true(ev->n_tokens > 0);
    }
}

/* Request i's policy: mostly cheap ones, a few that run a drafter model per step. */
typedef struct policy_choice {
    const char *name;
    const char *options;
} policy_choice;

static policy_choice policy_of(int i) {
    static const int table[16] = {0, 1, 2, 4, 1, 5, 0, 3, 1, 4, 0, 5, 1, 0, 1, 0};
    switch (table[i % 16]) {
    case 1: return (policy_choice){"ngram", NULL};
    case 2: return (policy_choice){"draft", draft_opts};
    case 3: return (policy_choice){"layerskip", "layers=10,k=3"};
    case 4: return (policy_choice){"isd", "n=3"};
    case 5: return (policy_choice){"risd", risd_opts};
    default: return (policy_choice){"none", NULL};
    }
}

static specd_seq_params params_of(int i) {
    specd_seq_params p = specd_seq_default_params();
    policy_choice c = policy_of(i);
    p.policy = c.name;
    p.policy_options = c.options;
    p.sampling.temperature = i % 3 == 0 ? 0.0f : 0.8f;
    p.seed = 42;
    p.stream_key = 0x5eed000000000ULL + (uint64_t)i * 7919u;
    p.max_tokens = N_GEN;
    p.adaptive = i % 4 == 3; /* mostly the policies' own steps; some under the guard */
    return p;
}

static specd_loop *make_loop(int32_t max_seqs, int32_t max_queue, int32_t n_ctx) {
    specd_loop_params lp = specd_loop_default_params();
    lp.max_seqs = max_seqs;
    lp.max_queue = max_queue;
    lp.n_ctx = n_ctx;
    lp.n_batch = 256;
    lp.n_threads = N_THREADS;
    lp.max_draft = MAX_DRAFT;
    lp.model_path = model_path;
    specd_loop *loop = NULL;
    specd_error err;
    if (specd_loop_create(model, &lp, &loop, &err) != SPECD_OK) fail_msg("create: %s", err.message);
    return loop;
}

static void submit(specd_loop *loop, int i, record *r) {
    specd_seq_params p = params_of(i);
    specd_error err;
    memset(r, 0, sizeof *r);
    int pr = i % N_PROMPTS;
    if (specd_loop_submit(loop, prompts[pr], n_prompts[pr], &p, on_event, r, &r->id, &err) !=
        SPECD_OK)
        fail_msg("submit %d (%s): %s", i, p.policy, err.message);
}

static void step(specd_loop *loop, specd_loop_step_info *info) {
    specd_error err;
    if (specd_loop_step(loop, info, &err) != SPECD_OK) fail_msg("step: %s", err.message);
}

static void drain(specd_loop *loop) {
    while (specd_loop_n_running(loop) + specd_loop_n_queued(loop) > 0)
        step(loop, NULL);
}

static void test_mixed_equals_solo(void **s) {
    (void)s;
    static record batch[N_REQ], solo;
    specd_loop *loop = make_loop(N_REQ, N_REQ, 128);
    /* admitted in three waves: the later ones join while the first are decoding */
    int next = 0, max_running = 0, mixed_steps = 0, finished = 0, emitted = 0;
    for (; next < FIRST; next++)
        submit(loop, next, &batch[next]);
    for (int k = 0; specd_loop_n_running(loop) > 0 || next < N_REQ; k++) {
        if ((k == 3 && next < FIRST + WAVE) || (k == 5 && next < N_REQ))
            for (int end = k == 3 ? FIRST + WAVE : N_REQ; next < end; next++)
                submit(loop, next, &batch[next]);
        specd_loop_step_info info;
        step(loop, &info);
        if (info.n_running > max_running) max_running = info.n_running;
        finished += info.n_finished;
        emitted += info.n_emitted;
        mixed_steps += info.n_running > 0 && info.n_prefill > 0;
    }
    assert_true(max_running > FIRST); /* they really ran side by side */
    assert_true(mixed_steps > 0);  /* prompt chunks rode with running steps */
    specd_loop_stats ls;
    specd_loop_get_stats(loop, &ls);
    assert_int_equal(ls.n_submitted, N_REQ);
    assert_int_equal(ls.n_finished, N_REQ);
    assert_int_equal(ls.n_failed, 0);
    assert_int_equal(ls.n_emitted, N_REQ * N_GEN);
    assert_int_equal(finished, N_REQ);
    assert_int_equal(emitted, N_REQ * N_GEN);
    assert_true(ls.n_accepted > 0);
    specd_loop_destroy(loop);

    int64_t drafted = 0;
    specd_loop *one = make_loop(1, 0, 128);
    for (int i = 0; i < N_REQ; i++) {
        record *b = &batch[i];
        assert_int_equal(b->n_done, 1);
        if (b->status != SPECD_OK) fail_msg("request %d: %s", i, b->message);
        assert_int_equal(b->n_out, N_GEN);
        assert_int_equal(b->stats.n_emitted, N_GEN);
        drafted += b->stats.n_draft_tokens;
        submit(one, i, &solo);
        drain(one);
        assert_int_equal(solo.status, SPECD_OK);
        for (int t = 0; t < N_GEN; t++)
            if (solo.out[t] != b->out[t])
                fail_msg("request %d (%s, T %.1f): token %d is %d among 63 others, %d alone", i,
                         params_of(i).policy, params_of(i).sampling.temperature, t, b->out[t],
                         solo.out[t]);
    }
    assert_true(drafted > 0);
    specd_loop_destroy(one);
}

static void test_cancel(void **s) {
    (void)s;
    static record a, b, c;
    specd_loop *loop = make_loop(1, 4, 128);
    submit(loop, 1, &a);
    submit(loop, 2, &b);
    assert_int_equal(specd_loop_n_running(loop), 1);
    assert_int_equal(specd_loop_n_queued(loop), 1);
    while (a.n_out == 0)
        step(loop, NULL); /* a is decoding, b waits */
    assert_int_equal(b.n_events, 0);
    /* running: its last event arrives inside cancel, and its slot goes to b at the next step */
    assert_int_equal(specd_loop_cancel(loop, a.id), SPECD_OK);
    assert_int_equal(a.n_done, 1);
    assert_int_equal(a.status, SPECD_E_STATE);
    assert_string_equal(a.message, "cancelled");
    assert_int_equal(specd_loop_n_running(loop), 0);
    assert_int_equal(specd_loop_cancel(loop, a.id), SPECD_E_INVALID_ARG);
    step(loop, NULL);
    assert_int_equal(specd_loop_n_running(loop), 1);
    assert_int_equal(specd_loop_n_queued(loop), 0);
    /* queued: c waits behind b and is cancelled before it ever runs */
    submit(loop, 3, &c);
    assert_int_equal(specd_loop_n_queued(loop), 1);
    assert_int_equal(specd_loop_cancel(loop, c.id), SPECD_OK);
    assert_int_equal(c.n_done, 1);
    assert_int_equal(c.n_out, 0);
    assert_int_equal(c.status, SPECD_E_STATE);
    assert_int_equal(specd_loop_n_queued(loop), 0);
    drain(loop);
    assert_int_equal(b.status, SPECD_OK);
    assert_int_equal(b.n_out, N_GEN);
    specd_loop_stats ls;
    specd_loop_get_stats(loop, &ls);
    assert_int_equal(ls.n_cancelled, 2);
    assert_int_equal(ls.n_finished, 1);
    assert_int_equal(specd_loop_cancel(loop, 12345), SPECD_E_INVALID_ARG);
    specd_loop_destroy(loop);

    /* from inside an event (a server that finds its client gone while streaming): the other
     * request's last event arrives inside that call, nothing of it after, and the caller goes
     * on to finish */
    loop = make_loop(2, 0, 128);
    submit(loop, 4, &a);
    submit(loop, 5, &b);
    a.loop = loop;
    a.cancel = b.id;
    drain(loop);
    assert_int_equal(a.cancel_status, SPECD_OK);
    assert_int_equal(a.status, SPECD_OK);
    assert_int_equal(a.n_out, N_GEN);
    assert_int_equal(b.n_done, 1);
    assert_int_equal(b.status, SPECD_E_STATE);
    assert_true(b.n_out < N_GEN);
    specd_loop_destroy(loop);
}

/* A self-speculative policy that steps plainly (one row, greedy) and fails on purpose at its
 * third layout ("layout") or third verify ("verify"). */
typedef struct failing {
    int32_t n_vocab, calls, fail_layout;
    int32_t tok, pos, row, out;
} failing;

static specd_status failing_create(const specd_policy_env *env, const char *opts, void **st,
                                   specd_error *err) {
    (void)err;
    failing *f = calloc(1, sizeof *f);
    f->n_vocab = env->n_vocab;
    f->fail_layout = opts && !strcmp(opts, "layout");
    *st = f;
    return SPECD_OK;
}
static void failing_destroy(void *st) {
    free(st);
}
static specd_status fail_with(specd_error *err, specd_status st, const char *msg) {
    if (err) {
        err->status = st;
        snprintf(err->message, sizeof err->message, "%s", msg);
    }
    return st;
}
static specd_status failing_layout(void *st, const int32_t *h, int64_t n, specd_step_layout *out,
                                   specd_error *err) {
    failing *f = st;
    if (f->fail_layout && ++f->calls == 3)
        return fail_with(err, SPECD_E_INTERNAL, "failing: layout fails on purpose");
    f->tok = h[n - 1];
    f->pos = (int32_t)n - 1;
    f->row = 0;
    *out = (specd_step_layout){
        .n_tokens = 1, .tokens = &f->tok, .pos = &f->pos, .n_rows = 1, .rows = &f->row};
    return SPECD_OK;
}
static specd_status failing_verify(void *st, const float *logits, specd_step_outcome *out,
                                   specd_error *err) {
    failing *f = st;
    if (!f->fail_layout && ++f->calls == 3)
        return fail_with(err, SPECD_E_NUMERIC, "failing: verify fails on purpose");
    f->out = 0;
    for (int32_t x = 1; x < f->n_vocab; x++)
        if (logits[x] > logits[f->out]) f->out = x;
    *out = (specd_step_outcome){.n_emitted = 1, .emitted = &f->out, .n_keep = 1, .keep = &f->row};
    return SPECD_OK;
}
static const specd_policy_ops failing_ops = {.abi_version = SPECD_POLICY_ABI_VERSION,
                                             .name = "failing",
                                             .create = failing_create,
                                             .destroy = failing_destroy,
                                             .layout = failing_layout,
                                             .verify = failing_verify};

/* A request whose step fails (its layout, or its verify) is retired with that status and
 * message; the requests beside it go on to finish. */
static void test_failing_request_retired(void **s) {
    (void)s;
    static record r[4];
    specd_loop *loop = make_loop(4, 0, 128);
    for (int i = 0; i < 4; i++) {
        specd_seq_params p = params_of(i);
        p.adaptive = 0;
        if (i >= 2) {
            p.policy_ops = &failing_ops;
            p.policy_options = i == 2 ? "layout" : "verify";
        }
        memset(&r[i], 0, sizeof r[i]);
        specd_error err;
        if (specd_loop_submit(loop, prompts[i], n_prompts[i], &p, on_event, &r[i], &r[i].id,
                              &err) != SPECD_OK)
            fail_msg("submit: %s", err.message);
    }
    drain(loop);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(r[i].status, SPECD_OK);
        assert_int_equal(r[i].n_out, N_GEN);
    }
    assert_int_equal(r[2].status, SPECD_E_INTERNAL);
    assert_non_null(strstr(r[2].message, "layout fails on purpose"));
    assert_int_equal(r[3].status, SPECD_E_NUMERIC);
    assert_non_null(strstr(r[3].message, "verify fails on purpose"));
    assert_int_equal(r[2].n_out, 2); /* the steps before the failure were delivered */
    assert_int_equal(r[3].n_out, 2);
    specd_loop_stats ls;
    specd_loop_get_stats(loop, &ls);
    assert_int_equal(ls.n_failed, 2);
    assert_int_equal(ls.n_finished, 2);
    specd_loop_destroy(loop);
}

static void test_queue_full(void **s) {
    (void)s;
    static record a, b, c;
    specd_loop *loop = make_loop(1, 1, 128);
    submit(loop, 0, &a);
    submit(loop, 1, &b);
    specd_seq_params p = params_of(2);
    specd_error err;
    int64_t id = -1;
    assert_int_equal(specd_loop_submit(loop, prompts[2], n_prompts[2], &p, on_event, &c, &id, &err),
                     SPECD_E_STATE);
    assert_int_equal(id, -1);
    assert_int_equal(specd_loop_n_queued(loop), 1);
    drain(loop);
    assert_int_equal(c.n_events, 0);
    assert_int_equal(b.status, SPECD_OK);
    specd_loop_destroy(loop);
}

static void test_refused_at_submit(void **s) {
    (void)s;
    static record r;
    specd_loop *loop = make_loop(1, 4, 64);
    specd_error err;
    int64_t id = -1;
    specd_seq_params p = params_of(1);
    /* 18 prompt tokens + 40 + a step's 9 rows do not fit 64 KV rows */
    p.max_tokens = 40;
    assert_int_equal(specd_loop_submit(loop, prompts[2], n_prompts[2], &p, on_event, &r, &id, &err),
                     SPECD_E_INVALID_ARG);
    assert_non_null(strstr(err.message, "n_ctx"));
    p.max_tokens = 8;
    p.stream_key = SPECD_STREAM_KEY_SLOT;
    assert_int_equal(specd_loop_submit(loop, prompts[2], n_prompts[2], &p, on_event, &r, &id, &err),
                     SPECD_E_INVALID_ARG);
    /* a bad option is refused whether the request would run at once or wait */
    p = params_of(1);
    p.max_tokens = 8;
    p.policy_options = "k=99";
    assert_int_equal(specd_loop_submit(loop, prompts[2], n_prompts[2], &p, on_event, &r, &id, &err),
                     SPECD_E_INVALID_ARG);
    assert_int_equal(specd_loop_n_running(loop), 0);
    p.policy_options = NULL;
    submit(loop, 5, &r);
    p.policy = "nope";
    assert_int_equal(specd_loop_submit(loop, prompts[2], n_prompts[2], &p, on_event, &r, &id, &err),
                     SPECD_E_INVALID_ARG);
    assert_int_equal(specd_loop_n_queued(loop), 0);
    assert_int_equal(id, -1);
    specd_loop_destroy(loop);
    specd_loop_destroy(NULL);
}

/* Penalties (specd_seq_params.penalties) in the loop: recycle's requests (trees), batched beside others,
 * emit what none's emit with the same penalties and stream key, which is not what they emit
 * without them; a policy that cannot apply them is refused at submit. */
static void test_penalties_in_the_loop(void **s) {
    (void)s;
    enum { N_CASES = 4 };
    static record r[N_CASES][3]; /* none + penalties, recycle + penalties, none without */
    specd_loop *loop = make_loop(3 * N_CASES, 0, 128);
    const specd_penalties_params pen = {.presence_penalty = 0.5f, .frequency_penalty = 0.5f,
                                        .repetition_penalty = 1.3f};
    for (int c = 0; c < N_CASES; c++)
        for (int v = 0; v < 3; v++) {
            specd_seq_params p = specd_seq_default_params();
            p.policy = v == 1 ? "recycle" : "none";
            p.sampling.temperature = c % 2 ? 0.8f : 0.0f;
            p.seed = 11;
            p.stream_key = 0x9e9a000ULL + (uint64_t)c;
            p.max_tokens = N_GEN;
            p.adaptive = 0;
            if (v < 2) p.penalties = pen;
            specd_error err;
            memset(&r[c][v], 0, sizeof r[c][v]);
            int pr = c / 2;
            if (specd_loop_submit(loop, prompts[pr], n_prompts[pr], &p, on_event, &r[c][v],
                                  &r[c][v].id, &err) != SPECD_OK)
                fail_msg("submit: %s", err.message);
        }
    drain(loop);
    int changed = 0;
    int64_t drafted = 0;
    for (int c = 0; c < N_CASES; c++) {
        for (int v = 0; v < 3; v++) assert_int_equal(r[c][v].status, SPECD_OK);
        assert_memory_equal(r[c][0].out, r[c][1].out, sizeof(int32_t) * N_GEN);
        changed += memcmp(r[c][0].out, r[c][2].out, sizeof(int32_t) * N_GEN) != 0;
        drafted += r[c][1].stats.n_draft_tokens;
    }
    assert_true(changed > 0);
    assert_true(drafted > 0);
    specd_seq_params p = params_of(3); /* isd: it lays out its own rows */
    p.penalties = pen;
    specd_error err;
    int64_t id = -1;
    static record refused;
    assert_int_equal(specd_loop_submit(loop, prompts[0], n_prompts[0], &p, on_event, &refused,
                                       &id, &err), SPECD_E_INVALID_ARG);
    assert_non_null(strstr(err.message, "drafter-shaped"));
    specd_loop_destroy(loop);
}

int main(void) {
    model = fixture_model_open();
    model_path = specd_test_model_path();
    fixture_golden_prompts(N_PROMPTS, MAX_PROMPT, &prompts[0][0], n_prompts);
    char adapter[1100];
    fixture_source_path("artifacts/adapters/smollm2-135m-risd", adapter, sizeof adapter);
    snprintf(draft_opts, sizeof draft_opts, "model=%s,k=3", model_path);
    snprintf(risd_opts, sizeof risd_opts, "n=3,adapter=%s", adapter);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refused_at_submit),
        cmocka_unit_test(test_queue_full),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_failing_request_retired),
        cmocka_unit_test(test_penalties_in_the_loop),
        cmocka_unit_test(test_mixed_equals_solo),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    fixture_close(model, NULL);
    return rc;
}
