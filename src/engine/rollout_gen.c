/* The rollout scheduler: admission, chunked prefill and decode steps (continuous batching over
 * the engine's KV cache, include/distflow/rollout.h), for df_rollout_generate (a request fed at
 * once, its result packed at the end) and df_rollout_stream (a queue fed by a poll hook,
 * rollout_stream.c). */
#include "engine/rollout_engine.h"
#include "engine/sampling.h"
#include "util/killpoint.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

int df_rollout_check_prompts(const df_rollout_engine *e, const char *what, int64_t n,
                             const int64_t *off, const int32_t *tok, const int64_t *ids,
                             int64_t max_new, int64_t max_pos)
{
    const char *name = ids ? "prompt id" : "prompt";
    for (int64_t i = 0; i < n; i++) {
        long long id = ids ? (long long)ids[i] : (long long)i;
        int64_t len = off[i + 1] - off[i];
        if (len < 1 || len > e->max_seq_len - 1)
            return df_error(DF_EINVAL,
                            "%s: %s %lld has %lld tokens; it must have 1 to max_seq_len - 1 = %lld",
                            what, name, id, (long long)len, (long long)(e->max_seq_len - 1));
        /* the slot's limit (slot_state.limit): no position of the sequence may pass the model's
           range, whatever a turn handler appends (it counts against the same limit) */
        int64_t room = e->max_seq_len - len, limit = max_new < room ? max_new : room;
        if (len + limit > max_pos)
            return df_error(DF_EINVAL,
                            "%s: %s %lld has %lld tokens and may grow by %lld (min(max_new_tokens %lld, "
                            "max_seq_len %lld - prompt)) to %lld positions, more than the model's "
                            "%s %lld: positions past it are outside the range the "
                            "model was trained for (lower max_new_tokens or the prompt length)",
                            what, name, id, (long long)len, (long long)limit, (long long)max_new,
                            (long long)e->max_seq_len, (long long)(len + limit), df_model_max_positions_name(&e->cfg),
                            (long long)max_pos);
        for (int64_t t = off[i]; t < off[i + 1]; t++)
            if (tok[t] < 0 || tok[t] >= e->cfg.vocab_size)
                return df_error(DF_EINVAL, "%s: %s %lld token %lld is %d, outside [0, %lld)", what,
                                name, id, (long long)(t - off[i]), tok[t],
                                (long long)e->cfg.vocab_size);
    }
    return DF_OK;
}

static int check_request(const df_rollout_engine *e, const df_model *m, const df_rollout_request *q,
                         const df_sampling_params *sp)
{
    if (q->n_prompts < 0 || (q->n_prompts > 0 && (!q->prompt_offsets || !q->prompt_tokens)))
        return df_error(DF_EINVAL, "rollout request: %lld prompts with NULL offsets or tokens",
                        (long long)q->n_prompts);
    if (q->n_samples < 1)
        return df_error(DF_EINVAL, "rollout request: n_samples must be >= 1 (got %lld)",
                        (long long)q->n_samples);
    if (q->n_prompts > 0 && q->prompt_offsets[0] != 0)
        return df_error(DF_EINVAL, "rollout request: prompt_offsets[0] must be 0 (got %lld)",
                        (long long)q->prompt_offsets[0]);
    return df_rollout_check_prompts(e, "rollout request", q->n_prompts, q->prompt_offsets,
                                    q->prompt_tokens, NULL, sp->max_new_tokens,
                                    df_model_max_positions(&m->cfg));
}

/* ---- per-call state ---------------------------------------------------------- */

/* Top-k / top-p need a whole row of logits; everything else samples from
 * per-group statistics of the hidden states (df_vocab_stats / df_vocab_draw). */
static bool sampling_is_fused(const df_sampling_params *sp, int64_t V)
{
    bool greedy = sp->greedy || sp->temperature == 0.0f;
    return greedy || (!(sp->top_k > 0 && sp->top_k < V) && !(sp->top_p < 1.0f));
}

df_vocab_tiling df_rollout_head_tiling(const df_model_config *cfg)
{
    /* Groups of one tile: the draw recomputes a single tile of one row. */
    df_vocab_tiling t = df_vocab_tiling_for(cfg->vocab_size, cfg->hidden_size);
    t.cols = t.cols < DF_SAMPLE_COLS ? t.cols : DF_SAMPLE_COLS;
    t.group = t.cols;
    return df_vocab_tiling_clamp(&t);
}

int df_rollout_ctx_init(gen_ctx *g)
{
    int64_t V = g->e->cfg.vocab_size;
    g->n_seqs = g->req->n_prompts * g->req->n_samples;
    g->is_stop = calloc((size_t)V, 1);
    g->n_threads = omp_get_max_threads();
    /* on a device the LM head's logits are made there and the rows sampled here */
    g->fused = g->e->be.ops->host_memory && sampling_is_fused(g->sp, V);
    if (g->fused) {
        g->tiling = df_rollout_head_tiling(&g->e->cfg);
        g->n_groups = df_vocab_groups(V, &g->tiling);
        g->vstat = malloc((size_t)(g->e->max_num_seqs * g->n_groups) * sizeof(df_vstat));
        g->draw_buf = aligned_alloc(64, (size_t)(g->n_threads * 2 * g->tiling.group) * 4);
    } else {
        g->work_bytes = (df_sample_work_bytes(V) + 63) / 64 * 64;
        g->work = aligned_alloc(64, (size_t)(g->n_threads * g->work_bytes));
    }
    g->pend.slots = malloc((size_t)g->e->max_num_seqs * sizeof(int32_t));
    g->seq_start = calloc((size_t)g->n_seqs + 1, sizeof(int64_t));
    g->seq_len = calloc((size_t)g->n_seqs + 1, sizeof(int64_t));
    g->finish = calloc((size_t)g->n_seqs + 1, 1);
    if (!g->is_stop || (g->fused ? !g->vstat || !g->draw_buf : !g->work) || !g->pend.slots ||
        !g->seq_start ||
        !g->seq_len || !g->finish)
        return df_error(DF_ENOMEM, "rollout: out of memory for %lld sequences",
                        (long long)g->n_seqs);
    int rc = df_rollout_routes_ctx_init(g);
    if (rc)
        return rc;
    for (int i = 0; i < g->sp->n_stop; i++)
        g->is_stop[g->sp->stop_ids[i]] = 1;
    const df_model_config *c = &g->m->cfg; /* the model's own eos ids */
    for (int i = 0; !g->sp->ignore_eos && i < c->n_eos; i++)
        if (c->eos_token_ids[i] >= 0 && c->eos_token_ids[i] < V)
            g->is_stop[c->eos_token_ids[i]] = 1;
    return DF_OK;
}

void df_rollout_ctx_release(gen_ctx *g)
{
    free(g->is_stop);
    free(g->pend.slots);
    free(g->work);
    free(g->vstat);
    free(g->draw_buf);
    free(g->seq_start);
    free(g->seq_len);
    free(g->finish);
    free(g->a_tok);
    free(g->a_logp);
    free(g->out_ver);
    free(g->in_tok);
    free(g->f_off);
    free(g->f_id);
    free(g->f_key);
    free(g->f_seed);
    free(g->f_tok);
    df_rollout_turns_release(g);
    df_rollout_stop_release(g);
    df_rollout_routes_ctx_release(g);
}

/* Move a finished slot's response into the arena (a stream: to on_seq) and free the slot. */
int df_rollout_retire(gen_ctx *g, int64_t si, int8_t reason)
{
    df_rollout_engine *e = g->e;
    slot_state *s = &e->slots[si];
    if (g->hooks)
        return df_rollout_stream_deliver(g, si, reason);
    if (g->a_len + s->n_gen > g->a_cap) {
        int64_t cap = g->a_cap ? g->a_cap : 4096;
        while (cap < g->a_len + s->n_gen)
            cap *= 2;
        int32_t *t = realloc(g->a_tok, (size_t)cap * sizeof(int32_t));
        if (t)
            g->a_tok = t;
        float *p = realloc(g->a_logp, (size_t)cap * sizeof(float));
        if (p)
            g->a_logp = p;
        if (!t || !p)
            return df_error(DF_ENOMEM, "rollout: out of memory storing %lld tokens",
                            (long long)cap);
        g->a_cap = cap;
    }
    memcpy(g->a_tok + g->a_len, e->out_tok + si * e->max_seq_len,
           (size_t)s->n_gen * sizeof(int32_t));
    memcpy(g->a_logp + g->a_len, e->out_logp + si * e->max_seq_len,
           (size_t)s->n_gen * sizeof(float));
    int rc = df_rollout_turns_retire(g, si);
    if (!rc)
        rc = df_rollout_routes_retire(g, si);
    if (rc)
        return rc;
    g->seq_start[s->seq] = g->a_len;
    g->seq_len[s->seq] = s->n_gen;
    g->finish[s->seq] = reason;
    g->a_len += s->n_gen;
    g->done++;
    s->active = false;
    return DF_OK;
}

/* ---- prefill ---------------------------------------------------------------------- */

static void start_slot(gen_ctx *g, int32_t si, int64_t prompt, int64_t j)
{
    df_rollout_engine *e = g->e;
    const df_rollout_request *q = g->req;
    slot_state *s = &e->slots[si];
    uint64_t key = q->prompt_keys ? q->prompt_keys[prompt] : (uint64_t)prompt;
    int64_t P = q->prompt_offsets[prompt + 1] - q->prompt_offsets[prompt];
    s->active = true;
    s->reserved = false;
    s->seq = prompt * q->n_samples + j;
    s->prompt_id = g->ids ? g->ids[prompt] : prompt;
    s->sample = j;
    s->prompt_len = P;
    s->n_gen = 0;
    s->cont = false;
    s->cont_at = s->turn_start = s->turns = 0;
    df_rollout_stop_reset(g, si);
    s->limit = g->sp->max_new_tokens < e->max_seq_len - P ? g->sp->max_new_tokens
                                                           : e->max_seq_len - P;
    uint64_t seed = q->prompt_seeds ? q->prompt_seeds[prompt] : q->seed;
    df_rng_seed(&s->rng, df_rng_key(seed, key, (uint64_t)j, ROLLOUT_RNG_TAG));
    if (g->in_tok) /* a stream: kept for a recomputation of its K / V */
        memcpy(g->in_tok + si * e->max_seq_len, q->prompt_tokens + q->prompt_offsets[prompt],
               (size_t)P * sizeof *g->in_tok);
}

/* Add the slots that sample from output row r of a prefill batch to sl / rows (as row `as`):
 * rows [0, n_cont_out) end continuations (one slot each), then admission r - n_cont_out. */
static void out_row_slots(const gen_ctx *g, const admission *ad, const int32_t *aslots, int64_t r,
                          int64_t as, int32_t *sl, int64_t *rows, int64_t *n)
{
    if (r < g->n_cont_out) {
        sl[*n] = g->cont_slots[r];
        rows[(*n)++] = as;
        return;
    }
    const admission *x = &ad[r - g->n_cont_out];
    for (int64_t c = 0; c < x->cnt; c++) {
        sl[*n] = aslots[x->slots_at + c];
        rows[(*n)++] = as;
    }
}

/* Run one prefill batch of `na` admissions after g->n_cont_out completed continuations (rows
 * already in e->b_*), share each prompt's KV with the other slots of its admission and draw
 * the next tokens. sl, rows: scratch of max_num_seqs entries. */
static int run_prefill(gen_ctx *g, int64_t n_rows, const admission *ad, int64_t na,
                       const int32_t *aslots, int32_t *sl, int64_t *rows)
{
    df_rollout_engine *e = g->e;
    const int64_t n_out = g->n_cont_out + na;
    df_infer_batch b = {n_rows, e->b_tok, e->b_slot, e->b_pos, n_out, e->b_out, df_rollout_routes_out(e)};
    int rc = df_infer_forward(&e->be, &e->cfg, &g->w, &e->kv, &e->s, &b);
    if (rc)
        return rc;
    df_rollout_routes_store(e, n_rows); /* before the copies below, and before a retire reads them */
    e->stats.prefill_tokens += n_rows - g->carried; /* a turn's stop token is a model token */
    e->stats.prefill_batches++;
    for (int64_t a = 0; a < na && !rc; a++) {
        const admission *x = &ad[a];
        int64_t P = g->req->prompt_offsets[x->prompt + 1] - g->req->prompt_offsets[x->prompt];
        for (int64_t c = 1; c < x->cnt && !rc; c++) {
            rc = e->be.ops->kv_copy(e->be.ctx, &e->kv, aslots[x->slots_at],
                                    aslots[x->slots_at + c], P);
            df_rollout_routes_copy(e, aslots[x->slots_at], aslots[x->slots_at + c], P);
        }
        for (int64_t c = 0; c < x->cnt; c++)
            start_slot(g, aslots[x->slots_at + c], x->prompt, x->j0 + c);
    }
    if (rc || n_out == 0) /* a chunk that ends no prompt or continuation: nothing to sample yet */
        return rc;
    /* Next tokens: every slot of output row r samples from hidden row r. */
    if (g->fused) {
        int64_t n = 0;
        for (int64_t r = 0; r < n_out; r++)
            out_row_slots(g, ad, aslots, r, r, sl, rows, &n);
        return df_rollout_sample_fused(g, sl, rows, n, n_out);
    }
    for (int64_t r0 = 0; r0 < n_out && !rc; r0 += e->logit_rows) {
        int64_t nr = n_out - r0 < e->logit_rows ? n_out - r0 : e->logit_rows, n = 0;
        for (int64_t r = r0; r < r0 + nr; r++)
            out_row_slots(g, ad, aslots, r, r - r0, sl, rows, &n);
        rc = df_rollout_sample_rows(g, r0, nr, sl, rows, n);
    }
    return rc;
}

/* Samples of the next prompt group to admit given `nfree` free slots (0: wait). */
static int64_t admit_count(const gen_ctx *g, int64_t nfree)
{
    int64_t rem = g->req->n_samples - g->next_j;
    if (rem <= nfree)
        return rem;
    return g->req->n_samples > g->e->max_num_seqs ? nfree : 0;
}

/* Rows [0, n) of the next forward: tokens [t0, t0 + n) of prompt i into slot `slot`. */
static void prompt_rows(gen_ctx *g, int64_t row0, int64_t i, int64_t t0, int64_t n, int32_t slot)
{
    df_rollout_engine *e = g->e;
    const int32_t *tok = g->req->prompt_tokens + g->req->prompt_offsets[i];
    for (int64_t t = 0; t < n; t++) {
        e->b_tok[row0 + t] = tok[t0 + t];
        e->b_slot[row0 + t] = slot;
        e->b_pos[row0 + t] = (int32_t)(t0 + t);
    }
}

/* Advance the admission cursor past cnt samples of the current prompt. */
static void advance(gen_ctx *g, int64_t cnt)
{
    if ((g->next_j += cnt) == g->req->n_samples) {
        g->next_prompt++;
        g->next_j = 0;
    }
}

/* The next chunk of the prompt in chunked prefill: rows [0, n); when it ends the prompt, its
 * admission ad[0] (returns 1), else 0. */
static int64_t plan_chunk(gen_ctx *g, admission *ad, int32_t *aslots, int64_t *n_rows)
{
    df_rollout_engine *e = g->e;
    pending *p = &g->pend;
    int64_t P = g->req->prompt_offsets[p->prompt + 1] - g->req->prompt_offsets[p->prompt];
    int64_t n = P - p->done < e->max_batched_tokens ? P - p->done : e->max_batched_tokens;
    prompt_rows(g, 0, p->prompt, p->done, n, p->slots[0]);
    p->done += n;
    *n_rows = n;
    if (p->done < P)
        return 0;
    p->on = false;
    memcpy(aslots, p->slots, (size_t)p->cnt * sizeof *aslots);
    ad[0] = (admission){p->prompt, p->j0, p->cnt, 0};
    e->b_out[0] = n - 1;
    return 1;
}

/* Take `cnt` free slots (scanning from *scan) into out. */
static void take_slots(gen_ctx *g, int64_t cnt, int64_t *scan, int32_t *out)
{
    for (int64_t c = 0; c < cnt; c++) {
        while (g->e->slots[*scan].active || g->e->slots[*scan].reserved)
            (*scan)++;
        out[c] = (int32_t)(*scan)++;
    }
}

/* Fill e->b_* with the next prompt groups that fit into the free slots and the token budget
 * (max_num_batched_tokens); returns the number of admissions, *n_rows the rows. A prompt
 * longer than the budget is prefilled alone, in chunks of it (vLLM's chunked prefill): its
 * slots are reserved, and the call ending it returns its admission. */
static int64_t plan_prefill(gen_ctx *g, admission *ad, int32_t *aslots, int64_t *n_rows)
{
    df_rollout_engine *e = g->e;
    const df_rollout_request *q = g->req;
    g->n_cont_out = g->carried = 0;
    if (g->pend.on) /* alone: waiting continuations come after its last chunk */
        return plan_chunk(g, ad, aslots, n_rows);
    /* waiting continuations first: their slots hold KV cache already */
    int64_t rows = g->n_cont ? df_rollout_plan_turns(g, e->max_batched_tokens) : 0;
    int64_t nfree = 0, na = 0, ns = 0, scan = 0, o = g->n_cont_out;
    for (int64_t s = 0; s < e->max_num_seqs; s++)
        nfree += !e->slots[s].active && !e->slots[s].reserved;
    while (g->next_prompt < q->n_prompts) {
        int64_t i = g->next_prompt, cnt = admit_count(g, nfree);
        int64_t P = q->prompt_offsets[i + 1] - q->prompt_offsets[i];
        if (cnt == 0 || (rows + P > e->max_batched_tokens && rows > 0))
            break;
        if (P > e->max_batched_tokens) { /* the first chunk of a long prompt, alone */
            g->pend = (pending){true, i, g->next_j, cnt, 0, g->pend.slots};
            take_slots(g, cnt, &scan, g->pend.slots);
            for (int64_t c = 0; c < cnt; c++)
                e->slots[g->pend.slots[c]].reserved = true;
            advance(g, cnt);
            return plan_chunk(g, ad, aslots, n_rows);
        }
        ad[na] = (admission){i, g->next_j, cnt, (int32_t)ns};
        take_slots(g, cnt, &scan, aslots + ns);
        ns += cnt;
        prompt_rows(g, rows, i, 0, P, aslots[ad[na].slots_at]); /* into its first slot */
        rows += P;
        e->b_out[o + na++] = rows - 1;
        nfree -= cnt;
        advance(g, cnt);
    }
    *n_rows = rows;
    return na;
}

/* ---- decode ---------------------------------------------------------------------- */

static int decode_step(gen_ctx *g, int32_t *list, int64_t *rows)
{
    df_rollout_engine *e = g->e;
    int64_t n = 0;
    for (int64_t si = 0; si < e->max_num_seqs; si++) {
        slot_state *s = &e->slots[si];
        if (!s->active)
            continue;
        e->b_tok[n] = e->out_tok[si * e->max_seq_len + s->n_gen - 1];
        e->b_slot[n] = (int32_t)si;
        e->b_pos[n] = (int32_t)(s->prompt_len + s->n_gen - 1);
        list[n++] = (int32_t)si;
    }
    if (n == 0)
        return df_error(DF_EINTERNAL, "rollout: no active sequence to decode");
    df_infer_batch b = {n, e->b_tok, e->b_slot, e->b_pos, n, NULL, df_rollout_routes_out(e)};
    int rc = df_infer_forward(&e->be, &e->cfg, &g->w, &e->kv, &e->s, &b);
    if (!rc)
        df_rollout_routes_store(e, n);
    e->stats.decode_steps++;
    e->stats.mean_active += (double)n;
    if (!rc && g->fused) {
        for (int64_t k = 0; k < n; k++)
            rows[k] = k;
        rc = df_rollout_sample_fused(g, list, rows, n, n);
    }
    for (int64_t r0 = 0; !rc && !g->fused && r0 < n; r0 += e->logit_rows) {
        int64_t nr = n - r0 < e->logit_rows ? n - r0 : e->logit_rows;
        for (int64_t k = 0; k < nr; k++)
            rows[k] = k;
        rc = df_rollout_sample_rows(g, r0, nr, list + r0, rows, nr);
    }
    if (!rc && g->progress)
        g->progress(g->user, g->done, g->n_seqs, g->tokens);
    return rc;
}

/* ---- result ----------------------------------------------------------------------- */

static int pack_result(gen_ctx *g, df_rollout_result *res)
{
    int64_t n = g->n_seqs, total = g->a_len;
    res->n_seqs = n;
    res->offsets = malloc((size_t)(n + 1) * sizeof(int64_t));
    res->tokens = malloc((size_t)(total ? total : 1) * sizeof(int32_t));
    res->log_probs = malloc((size_t)(total ? total : 1) * sizeof(float));
    res->finish_reason = malloc((size_t)(n ? n : 1));
    if (!res->offsets || !res->tokens || !res->log_probs || !res->finish_reason) {
        df_rollout_result_free(res);
        return df_error(DF_ENOMEM, "rollout: out of memory for a result of %lld tokens",
                        (long long)total);
    }
    res->offsets[0] = 0;
    for (int64_t s = 0; s < n; s++) {
        int64_t o = res->offsets[s], len = g->seq_len[s];
        memcpy(res->tokens + o, g->a_tok + g->seq_start[s], (size_t)len * sizeof(int32_t));
        memcpy(res->log_probs + o, g->a_logp + g->seq_start[s], (size_t)len * sizeof(float));
        res->finish_reason[s] = g->finish[s];
        res->offsets[s + 1] = o + len;
    }
    int rc = df_rollout_turns_pack(g, res);
    if (!rc)
        rc = df_rollout_routes_pack(g, res);
    if (rc)
        df_rollout_result_free(res);
    return rc;
}

/* Sequences in flight: active slots, and those reserved by a prompt in chunked prefill. */
static int64_t count_in_flight(const df_rollout_engine *e, int64_t *active)
{
    int64_t n = 0, a = 0;
    for (int64_t s = 0; s < e->max_num_seqs; s++) {
        a += e->slots[s].active;
        n += e->slots[s].active || e->slots[s].reserved;
    }
    *active = a;
    return n;
}

/* One forward pass per round: the next prefill batch (or chunk) while prompts wait for slots,
 * else a decode step; a stream polls its hook before each. Ends once finishing with nothing
 * queued or in flight (a queued prompt always finds a free slot when none is in flight). */
int df_rollout_run(gen_ctx *g)
{
    df_rollout_engine *e = g->e;
    size_t ns = (size_t)e->max_num_seqs;
    admission *ad = malloc(ns * sizeof *ad);
    int32_t *aslots = malloc(ns * sizeof *aslots), *list = malloc(ns * sizeof *list);
    int64_t *rows = malloc(ns * sizeof *rows);
    int rc = (!ad || !aslots || !list || !rows)
                 ? df_error(DF_ENOMEM, "rollout: out of memory for the scheduler")
                 : DF_OK;
    while (!rc) {
        int64_t active, busy = count_in_flight(e, &active);
        if (g->hooks && ((rc = df_rollout_stream_poll(g, busy)) || g->aborted))
            break;
        if (g->recompute) { /* before any forward reads the cache: new weights, old K / V */
            rc = df_rollout_recompute_step(g);
            continue;
        }
        int64_t n_rows, na = plan_prefill(g, ad, aslots, &n_rows);
        if (na > 0 || n_rows > 0) {
            rc = run_prefill(g, n_rows, ad, na, aslots, list, rows);
            if (!rc && g->progress)
                g->progress(g->user, g->done, g->n_seqs, g->tokens);
        } else if (active > 0) {
            df_kill_point("gen"); /* test-only: a crash mid-generation */
            rc = decode_step(g, list, rows);
        } else if (g->finishing) {
            break;
        }
    }
    free(ad);
    free(aslots);
    free(list);
    free(rows);
    return rc;
}

int df_rollout_generate(df_rollout_engine *e, const df_model *m, const df_rollout_request *req,
                        const df_sampling_params *sp, df_rollout_result *res,
                        df_rollout_progress_fn progress, void *user)
{
    return df_rollout_generate_turns(e, m, req, sp, NULL, res, progress, user);
}

int df_rollout_generate_turns(df_rollout_engine *e, const df_model *m,
                              const df_rollout_request *req, const df_sampling_params *sp,
                              const df_turn_handler *turns, df_rollout_result *res,
                              df_rollout_progress_fn progress, void *user)
{
    memset(res, 0, sizeof *res);
    if (!e || !m || !req || !sp)
        return df_error(DF_EINVAL, "rollout: NULL engine, model, request or params");
    int rc = df_rollout_check_model(e, m);
    if (!rc)
        rc = df_sampling_params_validate(sp, e->cfg.vocab_size);
    if (!rc)
        rc = check_request(e, m, req, sp);
    if (rc)
        return rc;
    double t0 = df_rollout_begin_call(e);
    gen_ctx g = {.e = e, .m = m, .req = req, .sp = sp, .progress = progress, .user = user,
                 .turns = turns, .finishing = true};
    rc = df_rollout_infer_weights(e, m, &g.w);
    if (!rc)
        rc = df_rollout_ctx_init(&g);
    if (!rc)
        rc = df_rollout_turns_init(&g);
    if (!rc)
        rc = df_rollout_stop_init(&g);
    if (!rc)
        rc = df_rollout_run(&g);
    if (!rc)
        rc = pack_result(&g, res);
    df_rollout_ctx_release(&g);
    return df_rollout_finish_call(&g, rc, t0);
}

double df_rollout_begin_call(df_rollout_engine *e)
{
    memset(&e->stats, 0, sizeof e->stats);
    for (int64_t s = 0; s < e->max_num_seqs; s++)
        e->slots[s].active = e->slots[s].reserved = false;
    return omp_get_wtime();
}

int df_rollout_finish_call(gen_ctx *g, int rc, double t0)
{
    df_rollout_engine *e = g->e;
    /* free_cache_engine: training does not carry the cache's or the scratch's pages (the next
     * call refaults them) */
    int drc = e->opt.free_cache_engine ? df_kv_cache_drop_on(&e->be, &e->kv) : DF_OK;
    if (e->opt.free_cache_engine)
        df_rollout_drop_scratch(e);
    if (!rc && drc)
        rc = drc;
    e->stats.generated_tokens = g->tokens;
    if (e->stats.decode_steps)
        e->stats.mean_active /= (double)e->stats.decode_steps;
    e->stats.seconds = omp_get_wtime() - t0;
    return rc;
}
