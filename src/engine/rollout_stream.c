/*
 * A stream (df_rollout_stream, include/distflow/rollout.h): the queue of fed prompts, weight
 * changes between forward passes (and the recomputation of the K / V in flight that one may
 * ask for) and the delivery of finished sequences. The scheduler is
 * rollout_gen.c's, the one df_rollout_generate runs: a stream only changes what it admits
 * (the queue instead of a request) and where a finished sequence goes (on_seq instead of the
 * result arena).
 */
#include "engine/rollout_engine.h"

#include <stdlib.h>
#include <string.h>

/* Drop the queue's wholly admitted prompts: those before the admission cursor and before the
 * prompt in chunked prefill (whose tokens the next chunks still read). The queue then holds
 * only what waits, so it does not grow with the stream's length. */
static void queue_compact(gen_ctx *g)
{
    df_rollout_request *q = &g->feed;
    int64_t first = g->next_prompt;
    if (g->pend.on && g->pend.prompt < first)
        first = g->pend.prompt;
    if (first == 0)
        return;
    const int64_t n = q->n_prompts - first, t0 = g->f_off[first];
    memmove(g->f_tok, g->f_tok + t0, (size_t)(g->f_off[q->n_prompts] - t0) * sizeof *g->f_tok);
    for (int64_t i = 0; i <= n; i++)
        g->f_off[i] = g->f_off[first + i] - t0;
    memmove(g->f_key, g->f_key + first, (size_t)n * sizeof *g->f_key);
    memmove(g->f_seed, g->f_seed + first, (size_t)n * sizeof *g->f_seed);
    memmove(g->f_id, g->f_id + first, (size_t)n * sizeof *g->f_id);
    q->n_prompts = n;
    g->next_prompt -= first;
    if (g->pend.on)
        g->pend.prompt -= first;
}

/* Room in the queue for n_more prompts of t_more tokens (grown by doubling). */
static int queue_reserve(gen_ctx *g, int64_t n_more, int64_t t_more)
{
    const int64_t n = g->feed.n_prompts + n_more, t = g->f_off[g->feed.n_prompts] + t_more;
    if (n > g->f_cap) {
        int64_t cap = g->f_cap * 2 > n ? g->f_cap * 2 : n;
        int64_t *o = realloc(g->f_off, (size_t)(cap + 1) * sizeof *o);
        g->f_off = o ? o : g->f_off;
        int64_t *id = o ? realloc(g->f_id, (size_t)cap * sizeof *id) : NULL;
        g->f_id = id ? id : g->f_id;
        uint64_t *k = id ? realloc(g->f_key, (size_t)cap * sizeof *k) : NULL;
        g->f_key = k ? k : g->f_key;
        uint64_t *sd = k ? realloc(g->f_seed, (size_t)cap * sizeof *sd) : NULL;
        g->f_seed = sd ? sd : g->f_seed;
        if (!sd)
            return df_error(DF_ENOMEM, "rollout stream: out of memory queueing %lld prompts",
                            (long long)n);
        g->f_cap = cap;
    }
    if (t > g->f_tok_cap) {
        int64_t cap = g->f_tok_cap * 2 > t ? g->f_tok_cap * 2 : t;
        int32_t *tok = realloc(g->f_tok, (size_t)cap * sizeof *tok);
        if (!tok)
            return df_error(DF_ENOMEM, "rollout stream: out of memory queueing %lld prompt tokens",
                            (long long)t);
        g->f_tok = tok;
        g->f_tok_cap = cap;
    }
    g->feed.prompt_offsets = g->f_off;
    g->feed.prompt_tokens = g->f_tok;
    g->feed.prompt_keys = g->f_key;
    g->feed.prompt_seeds = g->f_seed;
    g->ids = g->f_id;
    return DF_OK;
}

static int check_feed(const gen_ctx *g, const df_rollout_poll *p)
{
    if (g->finishing)
        return df_error(DF_EINVAL, "rollout stream: %lld prompts fed after finish",
                        (long long)p->n_prompts);
    if (p->n_prompts < 0)
        return df_error(DF_EINVAL, "rollout stream: a feed of %lld prompts (n_prompts must be >= 0)",
                        (long long)p->n_prompts);
    if (!p->prompt_offsets || !p->prompt_tokens || !p->prompt_ids)
        return df_error(DF_EINVAL, "rollout stream: a feed of %lld prompts with NULL offsets, "
                        "tokens or ids", (long long)p->n_prompts);
    if (p->prompt_offsets[0] != 0)
        return df_error(DF_EINVAL, "rollout stream: prompt_offsets[0] must be 0 (got %lld)",
                        (long long)p->prompt_offsets[0]);
    return df_rollout_check_prompts(g->e, "rollout stream", p->n_prompts, p->prompt_offsets,
                                    p->prompt_tokens, p->prompt_ids, g->sp->max_new_tokens,
                                    df_model_max_positions(&g->m->cfg));
}

/* Append the fed prompts (checked first, so a bad feed queues nothing) to the queue. */
static int queue_feed(gen_ctx *g, const df_rollout_poll *p)
{
    int rc = check_feed(g, p);
    if (rc)
        return rc;
    queue_compact(g);
    const int64_t np = p->n_prompts, nt = p->prompt_offsets[np];
    if ((rc = queue_reserve(g, np, nt)))
        return rc;
    const int64_t n0 = g->feed.n_prompts, t0 = g->f_off[n0];
    memcpy(g->f_tok + t0, p->prompt_tokens, (size_t)nt * sizeof *g->f_tok);
    for (int64_t i = 0; i < np; i++) {
        g->f_off[n0 + i + 1] = t0 + p->prompt_offsets[i + 1];
        g->f_id[n0 + i] = p->prompt_ids[i];
        g->f_key[n0 + i] = p->prompt_keys ? p->prompt_keys[i] : (uint64_t)p->prompt_ids[i];
        g->f_seed[n0 + i] = p->prompt_seeds ? p->prompt_seeds[i] : g->feed.seed;
    }
    g->feed.n_prompts = n0 + np;
    return DF_OK;
}

static int check_version(int64_t v, const char *what)
{
    if (v < 0 || v > INT32_MAX)
        return df_error(DF_EINVAL, "rollout stream: %s %lld is outside [0, 2^31) (tokens carry "
                        "int32 versions)", what, (long long)v);
    return DF_OK;
}

/* The hook changed m's weights: what the forwards read is made again from them (the KV cache
 * is kept), and the tokens drawn from now on carry the new version. */
static int swap_weights(gen_ctx *g, int64_t version)
{
    int rc = check_version(version, "new_version");
    if (!rc)
        rc = df_rollout_engine_load_weights(g->e, g->m);
    if (!rc)
        rc = df_rollout_infer_weights(g->e, g->m, &g->w);
    if (rc)
        return df_error_wrap(rc, "rollout stream: weight change to version %lld",
                             (long long)version);
    g->version = version;
    g->m_version = g->m->version;
    return DF_OK;
}

int df_rollout_stream_poll(gen_ctx *g, int64_t active)
{
    df_rollout_poll p = {0};
    p.free_slots = g->e->max_num_seqs - active;
    p.active = active;
    p.version = g->version;
    p.queued = g->feed.n_prompts - g->next_prompt;
    int rc = g->hooks->poll(g->hooks->user, &p);
    if (rc)
        return rc;
    if (p.abort) {
        g->aborted = true;
        return DF_OK;
    }
    if (p.weights_changed && (rc = swap_weights(g, p.new_version)))
        return rc;
    if (p.weights_changed && p.recompute_kv && active > 0) { /* a change mid-way starts over */
        g->recompute = true;
        g->rc_slot = g->rc_at = 0;
    }
    /* new weights read without a swap would be tagged with the old version (and a bf16 engine
     * would go on reading its old copy) */
    if (g->m->version != g->m_version)
        return df_error(DF_EINVAL, "rollout stream: the model's weights changed (version %lld, "
                        "was %lld) without a poll answering weights_changed",
                        (long long)g->m->version, (long long)g->m_version);
    if (p.n_prompts != 0 && (rc = queue_feed(g, &p)))
        return rc;
    g->finishing = g->finishing || p.finish;
    return DF_OK;
}

/* Tokens of slot si whose K / V are in the cache: a sequence's prompt and response but the
 * last token (the next decode step writes its K / V), the done chunks of the prompt in chunked
 * prefill (in its first slot: the others get a copy when it ends); *prompt: its prompt. */
static int64_t cached_len(const gen_ctx *g, int64_t si, const int32_t **prompt)
{
    const df_rollout_engine *e = g->e;
    const slot_state *s = &e->slots[si];
    if (s->active) {
        *prompt = g->in_tok + si * e->max_seq_len;
        /* a reply waiting for its prefill: only the tokens before cont_at are cached */
        return s->prompt_len + (s->cont ? s->cont_at : s->n_gen - 1);
    }
    if (g->pend.on && si == g->pend.slots[0]) {
        *prompt = g->req->prompt_tokens + g->req->prompt_offsets[g->pend.prompt];
        return g->pend.done;
    }
    return 0;
}

/* Rows from the recomputation cursor, at most the token budget, into e->b_*; the cursor then
 * rests on the next slot with tokens left (past the last one: done). */
static int64_t plan_recompute(gen_ctx *g)
{
    df_rollout_engine *e = g->e;
    const int64_t budget = e->max_batched_tokens;
    int64_t rows = 0;
    for (; g->rc_slot < e->max_num_seqs; g->rc_slot++, g->rc_at = 0) {
        const int64_t si = g->rc_slot;
        const int32_t *prompt = NULL, *resp = e->out_tok + si * e->max_seq_len;
        const int64_t len = cached_len(g, si, &prompt);
        const int64_t P = e->slots[si].active ? e->slots[si].prompt_len : len;
        if (len == 0)
            continue;
        if (rows == budget)
            break;
        const int64_t n = len - g->rc_at < budget - rows ? len - g->rc_at : budget - rows;
        for (int64_t t = g->rc_at; t < g->rc_at + n; t++, rows++) {
            e->b_tok[rows] = t < P ? prompt[t] : resp[t - P];
            e->b_slot[rows] = (int32_t)si;
            e->b_pos[rows] = (int32_t)t;
        }
        if ((g->rc_at += n) < len) /* the budget ran out inside this slot */
            break;
    }
    return rows;
}

int df_rollout_recompute_step(gen_ctx *g)
{
    df_rollout_engine *e = g->e;
    const int64_t rows = plan_recompute(g);
    g->recompute = g->rc_slot < e->max_num_seqs;
    if (rows == 0)
        return DF_OK;
    /* K / V only: no output row (as a chunk that ends no prompt) */
    df_infer_batch b = {rows, e->b_tok, e->b_slot, e->b_pos, 0, e->b_out, df_rollout_routes_out(e)};
    int rc = df_infer_forward(&e->be, &e->cfg, &g->w, &e->kv, &e->s, &b);
    if (!rc) /* the new weights' routes replace the old (no output row: the last layer's are -1) */
        df_rollout_routes_store(e, rows);
    e->stats.recomputed_tokens += rows;
    return rc ? df_error_wrap(rc, "rollout stream: recomputing the KV cache at version %lld",
                              (long long)g->version)
              : DF_OK;
}

int df_rollout_stream_deliver(gen_ctx *g, int64_t si, int8_t reason)
{
    df_rollout_engine *e = g->e;
    slot_state *s = &e->slots[si];
    const int64_t at = si * e->max_seq_len;
    const int32_t turns = g->turns ? df_rollout_turns_close(g, si) : 1;
    if (g->route_buf)
        df_rollout_routes_read(e, si, g->route_buf);
    const df_rollout_seq q = {s->prompt_id, s->sample, e->out_tok + at, e->out_logp + at,
                              g->out_ver + at, s->n_gen, reason,
                              g->turns ? g->out_mask + at : NULL, turns, s->prompt_len, g->route_buf};
    s->active = false; /* its arrays stay untouched until the next forward */
    g->done++;
    return g->hooks->on_seq(g->hooks->user, &q);
}

static int check_args(const df_rollout_engine *e, const df_model *m, int64_t n_samples,
                      const df_sampling_params *sp, int64_t version0,
                      const df_rollout_stream_hooks *h)
{
    if (!e || !m || !sp || !h || !h->poll || !h->on_seq)
        return df_error(DF_EINVAL, "rollout stream: NULL engine, model, params, hooks or hook");
    if (n_samples < 1)
        return df_error(DF_EINVAL, "rollout stream: n_samples must be >= 1 (got %lld)",
                        (long long)n_samples);
    int rc = check_version(version0, "version0");
    if (!rc)
        rc = df_rollout_check_model(e, m);
    return rc ? rc : df_sampling_params_validate(sp, e->cfg.vocab_size);
}

int df_rollout_stream(df_rollout_engine *e, const df_model *m, int64_t n_samples, uint64_t seed,
                      const df_sampling_params *sp, int64_t version0,
                      const df_rollout_stream_hooks *hooks)
{
    int rc = check_args(e, m, n_samples, sp, version0, hooks);
    if (rc)
        return rc;
    double t0 = df_rollout_begin_call(e);
    gen_ctx g = {.e = e, .m = m, .sp = sp, .hooks = hooks, .turns = hooks->turns,
                 .version = version0, .m_version = m->version};
    g.feed = (df_rollout_request){.n_samples = n_samples, .seed = seed};
    g.req = &g.feed;
    g.f_off = calloc(1, sizeof *g.f_off); /* the empty queue's offsets[0] */
    g.out_ver = malloc((size_t)(e->max_num_seqs * e->max_seq_len) * sizeof *g.out_ver);
    g.in_tok = malloc((size_t)(e->max_num_seqs * e->max_seq_len) * sizeof *g.in_tok);
    if (!g.f_off || !g.out_ver || !g.in_tok)
        rc = df_error(DF_ENOMEM, "rollout stream: out of memory for token versions and prompts");
    g.feed.prompt_offsets = g.f_off;
    if (!rc)
        rc = df_rollout_infer_weights(e, m, &g.w);
    if (!rc)
        rc = df_rollout_ctx_init(&g);
    if (!rc)
        rc = df_rollout_turns_init(&g);
    if (!rc)
        rc = df_rollout_stop_init(&g);
    if (!rc)
        rc = df_rollout_run(&g);
    for (int64_t s = 0; s < e->max_num_seqs; s++) /* abort or error: what was in flight is dropped */
        e->slots[s].active = e->slots[s].reserved = false;
    df_rollout_ctx_release(&g);
    return df_rollout_finish_call(&g, rc, t0);
}
