/* The stationary batch loop's requests (specd/spec_loop.h): create, submit, the queue, admission
 * into slots, retirement and event delivery. One step's forward is spec_loop_step.c. */
#include "session/spec_loop_internal.h"

#include "common/alloc.h"
#include "common/status_internal.h"
#include "policy/artifacts.h"

#include <stdio.h>
#include <string.h>

specd_loop_params specd_loop_default_params(void) {
    specd_context_params cp = specd_context_default_params(); /* SPECD_DEVICE's device */
    return (specd_loop_params){.max_seqs = 16,
                               .max_queue = 1024,
                               .n_ctx = 2048,
                               .n_batch = 512,
                               .n_threads = 0,
                               .max_draft = 8,
                               .model_path = NULL,
                               .device = cp.device,
                               .device_index = cp.device_index};
}

static char *dup_str(const char *s) {
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *d = specd_alloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

static void request_free(loop_request *r) {
    specd_free(r->prompt);
    specd_free(r->policy);
    specd_free(r->options);
    specd_free(r->stop);
    specd_free(r->bias);
    memset(r, 0, sizeof *r);
}

/* Deep-copies what the request borrows from its caller, so it can wait in the queue. */
static specd_status request_copy(loop_request *r, const int32_t *prompt, int64_t n_prompt,
                                 const specd_seq_params *p, specd_error *err) {
    memset(r, 0, sizeof *r);
    r->params = *p;
    r->n_prompt = n_prompt;
    r->prompt = specd_alloc_array((size_t)n_prompt, sizeof(int32_t));
    int ok = r->prompt != NULL;
    if (ok) memcpy(r->prompt, prompt, (size_t)n_prompt * sizeof(int32_t));
    if (p->policy) ok &= (r->policy = dup_str(p->policy)) != NULL;
    if (p->policy_options) ok &= (r->options = dup_str(p->policy_options)) != NULL;
    if (p->n_stop_tokens > 0 && p->stop_tokens) {
        ok &= (r->stop = specd_alloc_array((size_t)p->n_stop_tokens, sizeof(int32_t))) != NULL;
        if (r->stop) memcpy(r->stop, p->stop_tokens, (size_t)p->n_stop_tokens * sizeof(int32_t));
    }
    if (p->sampling.n_bias > 0 && p->sampling.bias) {
        ok &= (r->bias = specd_alloc_array(p->sampling.n_bias, sizeof *r->bias)) != NULL;
        if (r->bias) memcpy(r->bias, p->sampling.bias, p->sampling.n_bias * sizeof *r->bias);
    }
    if (!ok) {
        request_free(r);
        return specd_fail(err, SPECD_E_NOMEM, "loop: out of memory copying a request");
    }
    r->params.policy = r->policy;
    r->params.policy_options = r->options;
    r->params.stop_tokens = r->stop;
    r->params.sampling.bias = r->bias;
    return SPECD_OK;
}

void specd_loop_destroy(specd_loop *loop) {
    if (!loop) return;
    for (int32_t i = 0; i < loop->q_count; i++)
        request_free(&loop->queue[(loop->q_head + i) % loop->params.max_queue]);
    specd_spec_destroy(loop->spec);
    specd_context_destroy(loop->ctx);
    specd_free(loop->model_path);
    specd_free(loop->slots);
    specd_free(loop->queue);
    specd_free(loop->run);
    specd_free(loop->run_gen);
    specd_free(loop->kv_before);
    specd_free(loop->rows);
    specd_free(loop->logits);
    specd_free(loop->hidden);
    specd_free(loop->sb);
    specd_free(loop->sb_slot);
    specd_free(loop->ext);
    specd_free(loop->pf_slot);
    specd_free(loop->pf_chunk);
    specd_free(loop->pending);
    specd_free(loop->ev_tokens);
    specd_free(loop->ev_msg);
    specd_free(loop);
}

specd_status specd_loop_create(const specd_model *model, const specd_loop_params *params,
                               specd_loop **out, specd_error *err) {
    if (!model || !params || !out)
        return specd_fail(err, SPECD_E_INVALID_ARG, "loop: NULL argument");
    const specd_loop_params *p = params;
    if (p->max_seqs < 1 || p->max_seqs > 256)
        return specd_fail(err, SPECD_E_INVALID_ARG, "loop: max_seqs %d outside [1, 256]",
                          p->max_seqs);
    if (p->max_queue < 0 || p->max_queue > (1 << 24))
        return specd_fail(err, SPECD_E_INVALID_ARG, "loop: max_queue %d outside [0, 2^24]",
                          p->max_queue);
    if (p->max_draft < 1 || p->max_draft > SPECD_MAX_DRAFT)
        return specd_fail(err, SPECD_E_INVALID_ARG, "loop: max_draft %d outside [1, %d]",
                          p->max_draft, SPECD_MAX_DRAFT);
    int32_t step_rows = 2 * p->max_draft + 1; /* the spec's default max_step_rows */
    if (p->n_batch < step_rows)
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "loop: n_batch %d < %d, the rows one step may have (2 * max_draft + 1)",
                          p->n_batch, step_rows);
    if (p->n_ctx < step_rows + 2)
        return specd_fail(err, SPECD_E_INVALID_ARG, "loop: n_ctx %d leaves no room for a step",
                          p->n_ctx);
    specd_loop *loop = specd_alloc_array(1, sizeof *loop);
    if (!loop) return specd_fail(err, SPECD_E_NOMEM, "loop: out of memory");
    loop->params = *p;
    loop->model = model;
    loop->next_id = 1;
    const specd_model_info *info = specd_model_get_info(model);
    loop->n_vocab = info->n_vocab;
    loop->n_embd = info->n_embd;
    loop->has_target_fp = specd_target_fingerprint_of_gguf(specd_model_gguf(model),
                                                           &loop->target_fp, NULL) == SPECD_OK;
    specd_status st = SPECD_OK;
    if (p->model_path && !(loop->model_path = dup_str(p->model_path)))
        st = specd_fail(err, SPECD_E_NOMEM, "loop: out of memory");
    loop->params.model_path = loop->model_path;

    /* One slot more in the spec than in the context: submit opens a queued request's policy
     * there (and closes it) so a bad policy or option is refused at submit, not at admission. */
    specd_spec_params sp = specd_spec_default_params();
    sp.n_vocab = loop->n_vocab;
    sp.max_draft = p->max_draft;
    sp.max_seqs = p->max_seqs + 1;
    sp.target = model;
    sp.target_path = loop->model_path;
    sp.n_embd = loop->n_embd;
    sp.device = p->device;
    sp.device_index = p->device_index;
    if (st == SPECD_OK) st = specd_spec_create(&sp, &loop->spec, err);
    if (st == SPECD_OK) loop->max_step_rows = specd_spec_max_step_rows(loop->spec);

    specd_context_params cp = specd_context_default_params();
    cp.n_seq = p->max_seqs;
    cp.n_ctx = p->n_ctx;
    cp.n_batch = p->n_batch;
    cp.n_threads = p->n_threads;
    cp.device = p->device;
    cp.device_index = p->device_index;
    if (st == SPECD_OK) st = specd_context_create(model, &cp, &loop->ctx, err);

    if (st == SPECD_OK) {
        size_t n = (size_t)p->max_seqs;
        loop->rows_cap = p->max_seqs * loop->max_step_rows;
        size_t rows = (size_t)loop->rows_cap;
        loop->slots = specd_alloc_array(n, sizeof *loop->slots);
        loop->queue =
            specd_alloc_array(p->max_queue > 0 ? (size_t)p->max_queue : 1, sizeof *loop->queue);
        loop->run = specd_alloc_array(n, sizeof(int32_t));
        loop->run_gen = specd_alloc_array(n, sizeof(uint64_t));
        loop->kv_before = specd_alloc_array(n, sizeof(int32_t));
        loop->rows = specd_alloc_array(rows, sizeof(int32_t));
        /* not zeroed: only rows an extend wrote are read (and untouched pages cost nothing) */
        size_t lbytes, hbytes;
        if (specd_mul_ok(rows * sizeof(float), (size_t)loop->n_vocab, &lbytes))
            loop->logits = specd_alloc(lbytes);
        if (specd_mul_ok(rows * sizeof(float), (size_t)loop->n_embd, &hbytes))
            loop->hidden = specd_alloc(hbytes);
        loop->sb = specd_alloc_array(n, sizeof *loop->sb);
        loop->sb_slot = specd_alloc_array(n, sizeof(int32_t));
        loop->ext = specd_alloc_array(n + 1, sizeof *loop->ext);
        loop->pf_slot = specd_alloc_array(n, sizeof(int32_t));
        loop->pf_chunk = specd_alloc_array(n, sizeof(int32_t));
        loop->pending = specd_alloc_array(n, sizeof *loop->pending);
        loop->ev_tokens = specd_alloc_array(rows, sizeof(int32_t));
        loop->ev_msg = specd_alloc_array(n, sizeof *loop->ev_msg);
        if (!loop->slots || !loop->queue || !loop->run || !loop->run_gen || !loop->kv_before ||
            !loop->rows || !loop->logits || !loop->hidden || !loop->sb || !loop->sb_slot ||
            !loop->ext || !loop->pf_slot || !loop->pf_chunk || !loop->pending || !loop->ev_tokens ||
            !loop->ev_msg)
            st = specd_fail(err, SPECD_E_NOMEM, "loop: out of memory for %d slots", p->max_seqs);
    }
    if (st != SPECD_OK) {
        specd_loop_destroy(loop);
        return st;
    }
    *out = loop;
    return SPECD_OK;
}

int32_t specd_loop_n_running(const specd_loop *loop) {
    if (!loop) return 0;
    int32_t n = 0;
    for (int32_t s = 0; s < loop->params.max_seqs; s++)
        n += loop->slots[s].state != SLOT_FREE;
    return n;
}

int32_t specd_loop_n_queued(const specd_loop *loop) {
    return loop ? loop->q_count : 0;
}

void specd_loop_get_stats(const specd_loop *loop, specd_loop_stats *out) {
    if (!out) return;
    if (!loop) {
        memset(out, 0, sizeof *out);
        return;
    }
    *out = loop->stats;
}

specd_status specd_loop_admit(specd_loop *loop, int32_t s, const loop_request *r,
                              specd_error *err) {
    SPECD_TRY(specd_context_kv_truncate(loop->ctx, s, 0, err));
    SPECD_TRY(specd_spec_seq_open(loop->spec, s, r->prompt, r->n_prompt, &r->params, err));
    loop->slots[s] = (loop_slot){.state = r->n_prompt > 1 ? SLOT_PREFILL : SLOT_RUNNING,
                                 .id = r->id,
                                 .on_event = r->on_event,
                                 .user = r->user,
                                 .n_prompt = r->n_prompt,
                                 .admitted = loop->next_admit++};
    return SPECD_OK;
}

static int32_t free_slot(const specd_loop *loop) {
    for (int32_t s = 0; s < loop->params.max_seqs; s++)
        if (loop->slots[s].state == SLOT_FREE) return s;
    return -1;
}

static void deliver_one(const loop_pending *p, const int32_t *tokens, const char *message) {
    if (!p->on_event) return;
    specd_loop_event ev = {.request = p->id,
                           .tokens = tokens,
                           .n_tokens = p->n_tokens,
                           .done = p->done,
                           .status = p->status,
                           .message = p->done && p->status != SPECD_OK ? message : "",
                           .stats = p->done ? &p->stats : NULL};
    p->on_event(&ev, p->user);
}

void specd_loop_admit_queued(specd_loop *loop) {
    int32_t s;
    while (loop->q_count > 0 && (s = free_slot(loop)) >= 0) {
        loop_request r = loop->queue[loop->q_head];
        loop->q_head = (loop->q_head + 1) % loop->params.max_queue;
        loop->q_count--;
        specd_error e;
        specd_status st = specd_loop_admit(loop, s, &r, &e);
        if (st != SPECD_OK) { /* it passed the same open at submit: memory, most likely */
            loop->stats.n_failed++;
            loop_pending p = {.slot = -1,
                              .id = r.id,
                              .on_event = r.on_event,
                              .user = r.user,
                              .done = 1,
                              .status = st};
            deliver_one(&p, NULL, e.message);
        }
        request_free(&r);
    }
}

void specd_loop_retire(specd_loop *loop, int32_t s, specd_status status, const char *message,
                       const int32_t *tokens, int32_t n_tokens, int deliver_now) {
    loop_slot *sl = &loop->slots[s];
    loop_pending p = {.slot = s,
                      .id = sl->id,
                      .on_event = sl->on_event,
                      .user = sl->user,
                      .n_tokens = n_tokens,
                      .done = 1,
                      .status = status};
    specd_spec_seq_stats(loop->spec, s, &p.stats, NULL);
    if (status == SPECD_OK)
        loop->stats.n_finished++;
    else if (status == SPECD_E_STATE && message && !strcmp(message, "cancelled"))
        loop->stats.n_cancelled++;
    else
        loop->stats.n_failed++;
    if (!deliver_now) {
        /* copy before the close: the tokens live in the sequence's state */
        p.tok0 = loop->n_ev_tokens;
        if (n_tokens > 0)
            memcpy(loop->ev_tokens + p.tok0, tokens, (size_t)n_tokens * sizeof(int32_t));
        loop->n_ev_tokens += n_tokens;
        snprintf(loop->ev_msg[loop->n_pending], SPECD_ERROR_MESSAGE_MAX, "%s",
                 message ? message : "");
        loop->pending[loop->n_pending++] = p;
    }
    specd_spec_seq_close(loop->spec, s);
    *sl = (loop_slot){.state = SLOT_FREE};
    if (deliver_now) deliver_one(&p, NULL, message ? message : "");
}

void specd_loop_push_tokens(specd_loop *loop, int32_t s, const int32_t *tokens, int32_t n) {
    if (n <= 0) return;
    const loop_slot *sl = &loop->slots[s];
    loop_pending p = {.slot = s,
                      .id = sl->id,
                      .on_event = sl->on_event,
                      .user = sl->user,
                      .tok0 = loop->n_ev_tokens,
                      .n_tokens = n};
    memcpy(loop->ev_tokens + p.tok0, tokens, (size_t)n * sizeof(int32_t));
    loop->n_ev_tokens += n;
    loop->ev_msg[loop->n_pending][0] = '\0';
    loop->pending[loop->n_pending++] = p;
}

void specd_loop_deliver(specd_loop *loop) {
    for (int32_t i = 0; i < loop->n_pending; i++) {
        const loop_pending *p = &loop->pending[i];
        /* a callback may have cancelled a request whose tokens are still waiting: its last
         * event has been delivered, so nothing more of it is */
        if (!p->done &&
            (loop->slots[p->slot].state == SLOT_FREE || loop->slots[p->slot].id != p->id))
            continue;
        deliver_one(p, loop->ev_tokens + p->tok0, loop->ev_msg[i]);
    }
    loop->n_pending = 0;
    loop->n_ev_tokens = 0;
}

specd_status specd_loop_submit(specd_loop *loop, const int32_t *prompt, int64_t n_prompt,
                               const specd_seq_params *params, specd_loop_event_fn on_event,
                               void *user, int64_t *request, specd_error *err) {
    if (!loop || !prompt || !params)
        return specd_fail(err, SPECD_E_INVALID_ARG, "loop: NULL argument");
    if (n_prompt < 1) return specd_fail(err, SPECD_E_INVALID_ARG, "loop: empty prompt");
    if (params->stream_key == SPECD_STREAM_KEY_SLOT)
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "loop: give the request its own stream_key (slots are the loop's)");
    if (params->max_tokens < 1)
        return specd_fail(err, SPECD_E_INVALID_ARG, "loop: max_tokens %d must be >= 1",
                          params->max_tokens);
    /* the KV holds the prompt and every emitted token but the last, plus a step in flight */
    int64_t need = n_prompt + (int64_t)params->max_tokens + loop->max_step_rows;
    if (need > loop->params.n_ctx)
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "loop: prompt %lld + max_tokens %d + %d step rows exceed n_ctx %d",
                          (long long)n_prompt, params->max_tokens, loop->max_step_rows,
                          loop->params.n_ctx);
    int32_t s = loop->q_count == 0 ? free_slot(loop) : -1;
    if (s < 0 && loop->q_count >= loop->params.max_queue)
        return specd_fail(err, SPECD_E_STATE, "loop: the queue is full (%d requests waiting)",
                          loop->q_count);
    /* the policy's artifacts trained over this model, unless the request names its own; a
     * policy that needs one and has none is refused here, naming the option */
    specd_seq_params with = *params;
    char opts[8192];
    if (loop->has_target_fp && params->policy) {
        SPECD_TRY(specd_policy_default_options(params->policy, loop->target_fp,
                                               params->policy_options, opts, sizeof opts, err));
        with.policy_options = opts[0] ? opts : NULL;
    }
    loop_request r;
    SPECD_TRY(request_copy(&r, prompt, n_prompt, &with, err));
    int64_t id = r.id = loop->next_id;
    r.on_event = on_event;
    r.user = user;
    specd_status st;
    if (s >= 0) {
        st = specd_loop_admit(loop, s, &r, err);
        request_free(&r);
    } else {
        /* open it where no KV lives, to refuse now what admission would refuse later */
        int32_t probe = loop->params.max_seqs;
        st = specd_spec_seq_open(loop->spec, probe, r.prompt, r.n_prompt, &r.params, err);
        specd_spec_seq_close(loop->spec, probe);
        if (st == SPECD_OK) {
            int32_t at = (loop->q_head + loop->q_count) % loop->params.max_queue;
            loop->queue[at] = r;
            loop->q_count++;
        } else {
            request_free(&r);
        }
    }
    if (st != SPECD_OK) return st == SPECD_E_NOMEM ? st : SPECD_E_INVALID_ARG;
    loop->next_id++;
    loop->stats.n_submitted++;
    if (request) *request = id;
    return SPECD_OK;
}

specd_status specd_loop_cancel(specd_loop *loop, int64_t request) {
    if (!loop) return SPECD_E_INVALID_ARG;
    for (int32_t s = 0; s < loop->params.max_seqs; s++)
        if (loop->slots[s].state != SLOT_FREE && loop->slots[s].id == request) {
            specd_loop_retire(loop, s, SPECD_E_STATE, "cancelled", NULL, 0, 1);
            return SPECD_OK;
        }
    int32_t cap = loop->params.max_queue;
    for (int32_t i = 0; i < loop->q_count; i++) {
        loop_request *r = &loop->queue[(loop->q_head + i) % cap];
        if (r->id != request) continue;
        loop_pending p = {.slot = -1,
                          .id = r->id,
                          .on_event = r->on_event,
                          .user = r->user,
                          .done = 1,
                          .status = SPECD_E_STATE};
        request_free(r);
        for (int32_t j = i; j + 1 < loop->q_count; j++)
            loop->queue[(loop->q_head + j) % cap] = loop->queue[(loop->q_head + j + 1) % cap];
        loop->q_count--;
        loop->stats.n_cancelled++;
        deliver_one(&p, NULL, "cancelled");
        return SPECD_OK;
    }
    return SPECD_E_INVALID_ARG;
}
