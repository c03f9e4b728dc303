/* Drawing the next token of each active sequence from the final hidden states or a row of
 * logits, and retiring the sequences that stopped (rollout_engine.h). */
#include "engine/rollout_engine.h"
#include "engine/sampling.h"
#include "util/killpoint.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* ---- sampling -------------------------------------------------------------------- */

/* Record token `tok` (log-prob lp) for slot si, and in a stream the version that drew it. */
static void push_token(gen_ctx *g, int64_t si, int32_t tok, float lp)
{
    df_rollout_engine *e = g->e;
    slot_state *s = &e->slots[si];
    e->out_tok[si * e->max_seq_len + s->n_gen] = tok;
    e->out_logp[si * e->max_seq_len + s->n_gen] = lp;
    if (g->out_ver)
        g->out_ver[si * e->max_seq_len + s->n_gen] = (int32_t)g->version;
    s->n_gen++;
}

/* Retire the listed slots whose last token stops them or that reached their limit. */
static int retire_finished(gen_ctx *g, const int32_t *list, int64_t n)
{
    df_rollout_engine *e = g->e;
    g->tokens += n;
    for (int64_t k = 0; k < n; k++) {
        slot_state *s = &e->slots[list[k]];
        int32_t last = e->out_tok[list[k] * e->max_seq_len + s->n_gen - 1];
        int rc = DF_OK;
        bool stop = g->is_stop[last] || (g->stop_len && df_rollout_stop_hit(g, list[k], last));
        if (stop) /* multi-turn: the turn ends, the handler decides */
            rc = g->turns ? df_rollout_turn_end(g, list[k]) : df_rollout_retire(g, list[k], DF_FINISH_STOP);
        else if (s->n_gen >= s->limit)
            rc = df_rollout_retire(g, list[k], DF_FINISH_LENGTH);
        if (rc)
            return rc;
    }
    return DF_OK;
}

/* Draw the next token of each listed slot from its logits row, then retire
 * the slots that finished. rows[k] is slot list[k]'s row of e->logits. */
int df_rollout_sample_slots(gen_ctx *g, const int32_t *list, const int64_t *rows, int64_t n)
{
    df_rollout_engine *e = g->e;
    int64_t V = e->cfg.vocab_size;
#pragma omp parallel for schedule(dynamic, 8) if (n * V > 16384)
    for (int64_t k = 0; k < n; k++) {
        slot_state *s = &e->slots[list[k]];
        void *work = g->work + (int64_t)omp_get_thread_num() * g->work_bytes;
        float lp;
        int32_t tok = df_sample_token(e->logits + rows[k] * V, V, g->sp, &s->rng, work, &lp);
        push_token(g, list[k], tok, lp);
    }
    return retire_finished(g, list, n);
}

/* The packed LM head of the current weights, or NULL (row-major then). */
static const uint16_t *packed_head(const df_rollout_engine *e, int64_t *stride)
{
    *stride = 0;
    return df_packed16_is_current(e->p16, e->w16) ? df_packed16_lm_head(e->p16, stride) : NULL;
}

/* In bf16, the LM head's operands: the final hidden rows [0, n) rounded into e->h16, padded
 * with zero rows to whole tiles; else all NULL (the float32 head). */
static int head16_rows(df_rollout_engine *e, int64_t n, const df_vocab_tiling *t, df_vocab16 *b)
{
    const uint16_t *W16 = e->w16 ? df_weights16_lm_head(e->w16) : NULL;
    *b = (df_vocab16){NULL, NULL, NULL, 0};
    if (!W16)
        return DF_OK;
    const int64_t H = e->cfg.hidden_size, rows = df_vocab16_rows(n, t);
    const int64_t cap = df_rollout_h16_rows(df_rollout_rows_cap(e->max_num_seqs, e->max_batched_tokens));
    if (rows > cap)
        return df_error(DF_EINTERNAL, "rollout: %lld bf16 head rows exceed the %lld allocated",
                        (long long)rows, (long long)cap);
    df_bf16_from_f32(e->h16, e->s.xn, n * H);
    memset(e->h16 + n * H, 0, (size_t)((rows - n) * H) * sizeof(uint16_t));
    int64_t stride = 0; /* the packed head when the forwards read packed weights */
    const uint16_t *P = packed_head(e, &stride);
    *b = (df_vocab16){e->mm, e->h16, P ? P : W16, P ? stride : 0};
    return DF_OK;
}

/* As sample_slots from the final hidden states e->s.xn[0 .. n_rows): statistics
 * of every row once, then per slot a greedy pick or one inverse-CDF draw. */
int df_rollout_sample_fused(gen_ctx *g, const int32_t *list, const int64_t *rows, int64_t n,
                              int64_t n_rows)
{
    df_rollout_engine *e = g->e;
    const int64_t V = e->cfg.vocab_size, H = e->cfg.hidden_size, G = g->n_groups;
    const bool greedy = g->sp->greedy || g->sp->temperature == 0.0f;
    const float inv_t = greedy ? 1.0f : 1.0f / g->sp->temperature; /* greedy log-probs at T = 1 */
    const float cap = (float)e->cfg.final_logit_softcap; /* Gemma 2 (0: none) */
    const float *W = g->m->w.lm_head, *xn = e->s.xn;
    df_vocab16 b16;
    int rc = head16_rows(e, n_rows, &g->tiling, &b16);
    if (rc)
        return rc;
    const unsigned flags = greedy ? DF_VSTAT_ARGMAX : 0u;
    if (b16.W ? df_vocab_stats16(g->vstat, NULL, NULL, &b16, n_rows, V, H, inv_t, cap, flags, &g->tiling)
              : (df_vocab_stats(g->vstat, NULL, NULL, xn, W, n_rows, V, H, inv_t, cap, flags, &g->tiling), 0))
        return df_error(DF_EINTERNAL, "rollout: oneDNN failed on a bf16 logits tile");
    int failed = 0;
#pragma omp parallel for schedule(dynamic, 2) if (n > 1 && !greedy)
    for (int64_t k = 0; k < n; k++) {
        const df_vstat *st = g->vstat + rows[k] * G;
        df_vrow r;
        df_vstat_merge(st, G, &r);
        double lse = r.m + log(r.s0);
        int32_t tok = r.arg;
        float z = (float)r.m;
        if (!greedy) {
            float *buf = g->draw_buf + (int64_t)omp_get_thread_num() * 2 * g->tiling.group;
            double u = df_rng_uniform(&e->slots[list[k]].rng);
            tok = b16.W ? df_vocab_draw16(st, G, &r, u, &b16, rows[k], V, H, inv_t, cap, &g->tiling,
                                          buf, &z)
                        : df_vocab_draw(st, G, &r, u, xn + rows[k] * H, W, V, H, inv_t, cap,
                                        &g->tiling, buf, &z);
        }
        if (tok < 0) {
#pragma omp atomic write
            failed = 1;
            continue;
        }
        push_token(g, list[k], tok, (float)((double)z - lse));
    }
    if (failed)
        return df_error(DF_EINTERNAL, "rollout: oneDNN failed on a bf16 logits row");
    return retire_finished(g, list, n);
}

/* Gemma 2's final-logit soft-cap on the n x V logits of e->logits (C tanh(z / C); 0: none;
 * libm's tanhf: the fused path's df_softcap_row differs by a few ulps of C). */
static void cap_logits(df_rollout_engine *e, int64_t n)
{
    const float C = (float)e->cfg.final_logit_softcap;
    if (!(C > 0.0f))
        return;
    const int64_t V = e->cfg.vocab_size;
#pragma omp parallel for schedule(static) if (n * V > 65536)
    for (int64_t i = 0; i < n; i++) {
        float *z = e->logits + i * V;
        for (int64_t v = 0; v < V; v++)
            z[v] = C * tanhf(z[v] / C);
    }
}

/* rows [r0, r0 + n) of the final hidden states times the LM head into e->logits */
static int rollout_logits_raw(df_rollout_engine *e, const df_infer_weights *w, int64_t r0, int64_t n)
{
    int64_t H = e->cfg.hidden_size, V = e->cfg.vocab_size;
    /* a device's bf16 copy is not read by the host's bf16 head: its head stays float32 */
    const uint16_t *W16 = e->w16 && e->be.ops->host_memory ? df_weights16_lm_head(e->w16) : NULL;
    int64_t stride;
    const uint16_t *P = W16 ? packed_head(e, &stride) : NULL;
    if (P)
        return df_mm_w16_packed(e->mm, n, V, H, 1.0f, e->s.xn + r0 * H, P, 0.0f, e->logits);
    if (W16)
        return df_mm_w16(e->mm, true, n, V, H, 1.0f, e->s.xn + r0 * H, W16, 0.0f, e->logits);
    if (e->be.ops->host_memory) {
        df_gemm_nt(n, V, H, 1.0f, e->s.xn + r0 * H, w->w->lm_head, 0.0f, e->logits);
        return DF_OK;
    }
    const df_backend *be = &e->be; /* the device's head, its logits downloaded for sampling */
    int rc = be->ops->gemm(be->ctx, false, true, n, V, H, 1.0f, e->s.xn + r0 * H,
                           w->w->lm_head, 0.0f, e->d_logits);
    if (!rc)
        rc = be->ops->download(be->ctx, e->logits, e->d_logits, (size_t)(n * V) * sizeof(float));
    return rc ? df_error_wrap(rc, "rollout: the LM head on the %s backend", be->ops->name) : DF_OK;
}

/* LM head for rows [r0, r0 + n) of the final hidden states into e->logits (bf16: the
 * head's copy, packed or row-major, the rows rounded per call), soft-capped for Gemma 2. */
int df_rollout_logits(df_rollout_engine *e, const df_infer_weights *w, int64_t r0, int64_t n)
{
    int rc = rollout_logits_raw(e, w, r0, n);
    if (!rc)
        cap_logits(e, n);
    return rc;
}

/* On a device with a sampler: the listed slots' hidden rows (rows[k] of the chunk at r0; gathered
 * when they are not the chunk's rows in order) drawn from there with one uniform of each
 * slot's stream; only the tokens and log-probs come back. */
static int sample_on_device(gen_ctx *g, int64_t r0, const int32_t *list, const int64_t *rows,
                            int64_t n)
{
    df_rollout_engine *e = g->e;
    const df_backend *be = &e->be;
    const int64_t V = e->cfg.vocab_size, H = e->cfg.hidden_size;
    const bool greedy = g->sp->greedy || g->sp->temperature == 0.0f;
    const float cap = (float)e->cfg.final_logit_softcap; /* Gemma 2 (0: none) */
    bool in_order = true;
    for (int64_t k = 0; k < n; k++) {
        in_order &= rows[k] == k;
        e->h_u[k] = greedy ? 0.0 : df_rng_uniform(&e->slots[list[k]].rng);
    }
    const float *h = e->s.xn + r0 * H;
    int rc = DF_OK;
    if (!in_order) {
        rc = be->ops->upload(be->ctx, e->d_rows, rows, (size_t)n * sizeof(int64_t));
        if (!rc)
            rc = be->ops->gather_rows(be->ctx, e->d_h, h, e->d_rows, n, H);
        h = e->d_h;
    }
    if (!rc)
        rc = be->ops->sample(be->ctx, e->d_tok, e->d_logp, h, g->w.w->lm_head, n, V, H,
                             greedy ? 0.0f : g->sp->temperature, cap, g->sp->top_k, g->sp->top_p,
                             greedy ? NULL : e->h_u, e->d_sscratch);
    if (!rc)
        rc = be->ops->download(be->ctx, e->h_tok, e->d_tok, (size_t)n * sizeof(int32_t));
    if (!rc)
        rc = be->ops->download(be->ctx, e->h_logp, e->d_logp, (size_t)n * sizeof(float));
    if (rc)
        return df_error_wrap(rc, "rollout: sampling on the %s backend", be->ops->name);
    for (int64_t k = 0; k < n; k++)
        push_token(g, list[k], e->h_tok[k], e->h_logp[k]);
    return retire_finished(g, list, n);
}

int df_rollout_sample_rows(gen_ctx *g, int64_t r0, int64_t nr, const int32_t *list,
                           const int64_t *rows, int64_t n)
{
    if (g->e->d_sscratch)
        return sample_on_device(g, r0, list, rows, n);
    int rc = df_rollout_logits(g->e, &g->w, r0, nr);
    return rc ? rc : df_rollout_sample_slots(g, list, rows, n);
}
