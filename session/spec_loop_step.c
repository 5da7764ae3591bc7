/* One step of the stationary batch loop (specd/spec_loop.h): lay out every running request's
 * step, run them and newly admitted requests' prompt chunks through the target, verify, trim the
 * KV caches, retire what finished. */
#include "session/spec_loop_internal.h"
#include "specd/spec_runtime.h"

#include "common/clock.h"
#include "common/status_internal.h"
#include "session/spec_internal.h"

#include <stdio.h>
#include <string.h>

/* The running slots, those whose last step used an adapter after the others and grouped by it,
 * so that the layout's order rarely has to be cut into more extends than adapters in use. */
static int32_t list_running(specd_loop *loop) {
    int32_t n = 0;
    for (int32_t s = 0; s < loop->params.max_seqs; s++) {
        if (loop->slots[s].state != SLOT_RUNNING) continue;
        int32_t at = n++;
        uintptr_t key = (uintptr_t)loop->slots[s].last_lora;
        while (at > 0 && (uintptr_t)loop->slots[loop->run[at - 1]].last_lora > key) {
            loop->run[at] = loop->run[at - 1];
            at--;
        }
        loop->run[at] = s;
    }
    return n;
}

/* Lays out the running requests. A request whose own layout fails (its policy) is retired with
 * that error and the others are laid out again (a batch layout leaves none of its list laid
 * out); *n is what remains. The culprit is the last request whose step generation moved: the
 * session lays a batch out in list order and stops at the first failure, so the policy that
 * failed is not asked again. */
static void layout_running(specd_loop *loop, int32_t *n, specd_batch *batch) {
    while (*n > 0) {
        for (int32_t i = 0; i < *n; i++)
            loop->run_gen[i] = loop->spec->seqs[loop->run[i]].step_gen;
        specd_error e;
        if (specd_spec_batch_layout(loop->spec, loop->run, *n, batch, &e) == SPECD_OK) return;
        int32_t bad = -1;
        for (int32_t i = 0; i < *n; i++)
            if (loop->spec->seqs[loop->run[i]].step_gen != loop->run_gen[i]) bad = i;
        if (bad < 0) { /* refused before any layout: nothing to single out */
            for (int32_t i = 0; i < *n; i++)
                specd_loop_retire(loop, loop->run[i], e.status, e.message, NULL, 0, 0);
            *n = 0;
            return;
        }
        specd_loop_retire(loop, loop->run[bad], e.status, e.message, NULL, 0, 0);
        memmove(loop->run + bad, loop->run + bad + 1, (size_t)(*n - bad - 1) * sizeof(int32_t));
        (*n)--;
    }
}

/* Cuts the batch into extends: consecutive sequences share one while their gated rows (if any)
 * use the same adapter and their tokens fit n_batch (a context applies one adapter at a time;
 * rows without a gate run on base weights under any adapter). */
static int32_t plan_extends(specd_loop *loop, const specd_batch *batch) {
    int32_t n_ext = 0;
    loop_extend *e = NULL;
    for (int32_t i = 0; i < batch->n_seqs; i++) {
        const specd_step_layout *l = &batch->seqs[i].layout;
        const struct specd_lora *lora = l->lora_gate ? l->lora : NULL;
        if (!e || (lora && e->lora && lora != e->lora) ||
            e->n_tokens + l->n_tokens > loop->params.n_batch) {
            e = &loop->ext[n_ext++];
            *e = (loop_extend){.seq0 = i, .row0 = batch->seqs[i].row_offset};
        }
        if (lora) e->lora = lora;
        /* the row's index within its extend's concatenated tokens */
        for (int32_t j = 0; j < l->n_rows; j++)
            loop->rows[batch->seqs[i].row_offset + j] = e->n_tokens + l->rows[j];
        e->n_seqs++;
        e->n_tokens += l->n_tokens;
        e->n_rows += l->n_rows;
        loop->slots[batch->seqs[i].seq].last_lora = lora;
    }
    return n_ext;
}

/* Prompt chunks of requests still prefilling, first admitted first, in the room the last extend
 * leaves, or in an extend of their own when there is none or that room is under a quarter of
 * n_batch (so admission keeps pace while the steps fill the batch). Returns the extends now
 * planned. */
static int32_t plan_prefill(specd_loop *loop, int32_t n_ext, int32_t *n_pf) {
    *n_pf = 0;
    for (int32_t s = 0; s < loop->params.max_seqs; s++) {
        if (loop->slots[s].state != SLOT_PREFILL) continue;
        int32_t at = (*n_pf)++;
        while (at > 0 && loop->slots[loop->pf_slot[at - 1]].admitted > loop->slots[s].admitted) {
            loop->pf_slot[at] = loop->pf_slot[at - 1];
            at--;
        }
        loop->pf_slot[at] = s;
    }
    if (*n_pf == 0) return n_ext;
    int32_t n_batch = loop->params.n_batch;
    int64_t pending = 0;
    for (int32_t i = 0; i < *n_pf; i++)
        pending +=
            loop->slots[loop->pf_slot[i]].n_prompt - 1 - loop->slots[loop->pf_slot[i]].n_cached;
    int32_t room = n_ext > 0 ? n_batch - loop->ext[n_ext - 1].n_tokens : 0;
    if (n_ext == 0 || (room < pending && room < n_batch / 4)) {
        int32_t seq0 = n_ext > 0 ? loop->ext[n_ext - 1].seq0 + loop->ext[n_ext - 1].n_seqs : 0;
        loop->ext[n_ext++] = (loop_extend){.seq0 = seq0};
    }
    loop_extend *e = &loop->ext[n_ext - 1];
    int32_t used = 0;
    room = n_batch - e->n_tokens;
    for (int32_t i = 0; i < *n_pf; i++) {
        const loop_slot *sl = &loop->slots[loop->pf_slot[i]];
        int64_t left = sl->n_prompt - 1 - sl->n_cached;
        int32_t chunk = (int32_t)(left < room ? left : room);
        loop->pf_chunk[i] = chunk;
        room -= chunk;
        if (chunk > 0) used = i + 1;
    }
    *n_pf = used;
    e->n_prefill = used;
    for (int32_t i = 0; i < used; i++)
        e->n_tokens += loop->pf_chunk[i];
    return n_ext;
}

/* The sequence batches of extend e: its steps, then its prompt chunks (pf: the first chunk's
 * index). Returns how many. */
static int32_t extend_batches(specd_loop *loop, const specd_batch *batch, const loop_extend *e,
                              int32_t pf) {
    int32_t n = 0;
    for (int32_t i = e->seq0; i < e->seq0 + e->n_seqs; i++) {
        const specd_batch_seq *b = &batch->seqs[i];
        loop->kv_before[i] = specd_context_kv_len(loop->ctx, b->seq);
        loop->sb_slot[n] = b->seq;
        loop->sb[n++] = specd_step_seq_batch(&b->layout, b->seq);
    }
    for (int32_t i = pf; i < pf + e->n_prefill; i++) {
        int32_t s = loop->pf_slot[i];
        const int32_t *prompt = specd_spec_seq_prompt(loop->spec, s, NULL);
        loop->sb_slot[n] = s;
        loop->sb[n++] = (specd_seq_batch){
            .seq = s, .n_tokens = loop->pf_chunk[i], .tokens = prompt + loop->slots[s].n_cached};
    }
    return n;
}

/* A forward failed: its requests are retired with its error; requests whose extends ran undo
 * their step's KV rows (their steps are laid out again next time), prompt chunks that ran stay. */
static void forward_failed(specd_loop *loop, const specd_batch *batch, int32_t n_ext,
                           int32_t failed, specd_status st, const specd_error *e) {
    int32_t pf = 0;
    for (int32_t x = 0; x < n_ext; x++) {
        const loop_extend *ext = &loop->ext[x];
        for (int32_t i = ext->seq0; i < ext->seq0 + ext->n_seqs; i++) {
            int32_t s = batch->seqs[i].seq;
            if (x == failed)
                specd_loop_retire(loop, s, st, e->message, NULL, 0, 0);
            else if (x < failed)
                specd_context_kv_truncate(loop->ctx, s, loop->kv_before[i], NULL);
        }
        for (int32_t i = pf; i < pf + ext->n_prefill; i++) {
            int32_t s = loop->pf_slot[i];
            if (x == failed)
                specd_loop_retire(loop, s, st, e->message, NULL, 0, 0);
            else if (x < failed &&
                     (loop->slots[s].n_cached += loop->pf_chunk[i]) == loop->slots[s].n_prompt - 1)
                loop->slots[s].state = SLOT_RUNNING;
        }
        pf += ext->n_prefill;
    }
}

/* Runs the planned extends. */
static specd_status run_forward(specd_loop *loop, const specd_batch *batch, int32_t n_ext,
                                specd_error *err) {
    int32_t pf = 0;
    specd_status st = SPECD_OK;
    specd_error e = {0};
    /* A CUDA context's logits stay on the device when one extend scores them all (a later
     * extend would reuse the device rows of an earlier one) and no policy reads hidden rows:
     * the batch is then verified there (session/spec_device.h). */
    const int on_device = n_ext == 1 && !batch->needs_hidden &&
                          specd_context_device(loop->ctx) == SPECD_DEVICE_CUDA;
    loop->device_logits = NULL;
    for (int32_t x = 0; x < n_ext && st == SPECD_OK; x++) {
        const loop_extend *ext = &loop->ext[x];
        int32_t n = extend_batches(loop, batch, ext, pf);
        size_t r0 = (size_t)ext->row0;
        specd_extend_out out = {
            .n_rows = ext->n_rows,
            .rows = loop->rows + r0,
            .logits = on_device ? NULL : loop->logits + r0 * (size_t)loop->n_vocab,
            .hidden = batch->needs_hidden ? loop->hidden + r0 * (size_t)loop->n_embd : NULL,
            .device_logits = on_device ? &loop->device_logits : NULL};
        st = specd_context_set_lora(loop->ctx, ext->lora, &e);
        if (st == SPECD_OK)
            st = specd_context_extend(loop->ctx, loop->sb, n, ext->n_rows > 0 ? &out : NULL, &e);
        if (st != SPECD_OK) {
            forward_failed(loop, batch, n_ext, x, st, &e);
            break;
        }
        loop->stats.n_forwards++;
        loop->stats.n_tokens_run += ext->n_tokens;
        loop->stats.n_rows += ext->n_rows;
        pf += ext->n_prefill;
    }
    /* the adapter belongs to its policy, which may close before the next step */
    specd_context_set_lora(loop->ctx, NULL, NULL);
    if (st != SPECD_OK && err) *err = e;
    return st;
}

/* Verifies the batch from the forward's rows; trims each request's KV to what it keeps, queues
 * its tokens and retires it when done or failed. Returns tokens emitted. */
static int32_t verify_batch(specd_loop *loop, const specd_batch *batch) {
    specd_logits lg = {.data = loop->device_logits ? (const void *)loop->device_logits
                                                   : (const void *)loop->logits,
                       .row_stride = loop->n_vocab,
                       .n_rows = batch->n_rows,
                       .dtype = SPECD_DTYPE_F32,
                       .device = loop->device_logits ? SPECD_DEVICE_CUDA : SPECD_DEVICE_HOST};
    specd_logits hd = {.data = loop->hidden,
                       .row_stride = loop->n_embd,
                       .n_rows = batch->n_rows,
                       .dtype = SPECD_DTYPE_F32,
                       .device = SPECD_DEVICE_HOST};
    specd_batch_result res = {0};
    specd_error first = {0};
    specd_status vst = specd_spec_batch_verify_hidden(
        loop->spec, &lg, batch->needs_hidden ? &hd : NULL, &res, &first);
    int32_t emitted = 0;
    int first_seen = 0;
    for (int32_t i = 0; i < batch->n_seqs; i++) {
        int32_t s = batch->seqs[i].seq;
        /* a refusal of the whole call (no per-sequence status) fails every request in it */
        specd_status st = res.status ? res.status[i] : vst;
        if (st != SPECD_OK) {
            char msg[SPECD_ERROR_MESSAGE_MAX];
            /* the call names only its first failure: the others get their status */
            if (!first_seen && vst != SPECD_OK && st == vst) {
                snprintf(msg, sizeof msg, "%s", first.message);
                first_seen = 1;
            } else {
                snprintf(msg, sizeof msg, "verify of request %lld failed: %s",
                         (long long)loop->slots[s].id, specd_status_name(st));
            }
            specd_loop_retire(loop, s, st, msg, NULL, 0, 0);
            continue;
        }
        const specd_step_outcome *o = &res.outcome[i];
        int32_t *keep = loop->rows; /* free again once the forward ran */
        for (int32_t j = 0; j < o->n_keep; j++)
            keep[j] = loop->kv_before[i] + o->keep[j];
        specd_error e;
        st = specd_context_kv_keep(loop->ctx, s, loop->kv_before[i], o->n_keep, keep, &e);
        emitted += o->n_emitted;
        loop->stats.n_drafts += o->n_drafted > 0;
        loop->stats.n_draft_tokens += o->n_drafted;
        loop->stats.n_accepted += o->n_accepted;
        if (st != SPECD_OK)
            specd_loop_retire(loop, s, st, e.message, o->emitted, o->n_emitted, 0);
        else if (specd_spec_seq_done(loop->spec, s))
            specd_loop_retire(loop, s, SPECD_OK, "", o->emitted, o->n_emitted, 0);
        else
            specd_loop_push_tokens(loop, s, o->emitted, o->n_emitted);
    }
    return emitted;
}

specd_status specd_loop_step(specd_loop *loop, specd_loop_step_info *info, specd_error *err) {
    if (!loop) return specd_fail(err, SPECD_E_INVALID_ARG, "loop: NULL argument");
    if (loop->in_step)
        return specd_fail(err, SPECD_E_STATE, "loop: step called from an event callback");
    uint64_t t0 = specd_now_ns();
    specd_loop_step_info si = {0};
    loop->in_step = 1; /* callbacks run inside (admission failures, the step's events) */
    specd_loop_admit_queued(loop);

    int32_t n_run = list_running(loop);
    specd_batch batch = {0};
    layout_running(loop, &n_run, &batch);
    if (n_run == 0) batch = (specd_batch){0};
    specd_status st = SPECD_OK;
    int32_t n_ext = n_run > 0 ? plan_extends(loop, &batch) : 0, n_pf;
    n_ext = plan_prefill(loop, n_ext, &n_pf);
    for (int32_t x = 0; x < n_ext; x++) {
        si.n_tokens += loop->ext[x].n_tokens;
        si.n_rows += loop->ext[x].n_rows;
    }
    si.n_prefill = n_pf;
    if (n_ext > 0) {
        uint64_t f0 = specd_now_ns();
        st = run_forward(loop, &batch, n_ext, err);
        si.forward_ns = specd_now_ns() - f0;
        if (st == SPECD_OK && n_run > 0 && si.n_tokens > 0) {
            /* the guard reads a step's forward as layout-to-verify time over its scored rows
             * (session/batch_cost.h): the prompt chunks' part of the forward, by tokens, is no
             * step's cost, so it is moved out of that window (else it would read as fixed cost
             * and make proposals look cheap while requests are being admitted) */
            int32_t pf_tokens = 0;
            for (int32_t i = 0; i < n_pf; i++)
                pf_tokens += loop->pf_chunk[i];
            loop->spec->batch_t0 +=
                (uint64_t)((double)si.forward_ns * (double)pf_tokens / (double)si.n_tokens);
        }
        if (st == SPECD_OK) {
            for (int32_t i = 0; i < n_pf; i++) {
                loop_slot *sl = &loop->slots[loop->pf_slot[i]];
                sl->n_cached += loop->pf_chunk[i];
                loop->stats.n_prompt_tokens += loop->pf_chunk[i];
                if (sl->n_cached == sl->n_prompt - 1) sl->state = SLOT_RUNNING;
            }
            if (n_run > 0) {
                si.n_running = n_run;
                si.n_emitted = verify_batch(loop, &batch);
            }
        }
    }
    for (int32_t i = 0; i < loop->n_pending; i++)
        si.n_finished += loop->pending[i].done;
    loop->stats.n_emitted += si.n_emitted;
    loop->stats.forward_ns += si.forward_ns;
    if (n_ext > 0 || n_run > 0) loop->stats.n_steps++;
    specd_loop_deliver(loop);
    loop->in_step = 0;
    si.step_ns = specd_now_ns() - t0;
    loop->stats.step_ns += si.step_ns;
    if (info) *info = si;
    return st;
}
