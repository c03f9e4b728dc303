/* Inference forward over a KV cache (src/engine/rollout_internal.h). */
#include "engine/rollout_internal.h"
#include "model/ops.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

static void *alloc64(int64_t n_bytes)
{
    size_t b = ((size_t)n_bytes + 63) / 64 * 64;
    return aligned_alloc(64, b ? b : 64);
}

int df_kv_cache_init(df_kv_cache *kv, const df_model_config *cfg, int64_t n_slots,
                     int64_t max_len)
{
    memset(kv, 0, sizeof *kv);
    kv->n_layers = cfg->num_hidden_layers;
    kv->n_slots = n_slots;
    kv->max_len = max_len;
    kv->kv_dim = cfg->num_key_value_heads * cfg->head_dim;
    int64_t n = kv->n_layers * n_slots * max_len * kv->kv_dim;
    kv->k = alloc64(n * (int64_t)sizeof(float));
    kv->v = alloc64(n * (int64_t)sizeof(float));
    if (!kv->k || !kv->v) {
        df_kv_cache_release(kv);
        return df_error(DF_ENOMEM, "out of memory allocating a KV cache of %lld floats (x2)",
                        (long long)n);
    }
    return DF_OK;
}

void df_kv_cache_release(df_kv_cache *kv)
{
    free(kv->k);
    free(kv->v);
    kv->k = kv->v = NULL;
}

void df_kv_cache_copy(df_kv_cache *kv, int64_t src, int64_t dst, int64_t len)
{
    size_t bytes = (size_t)(len * kv->kv_dim) * sizeof(float);
    for (int64_t l = 0; l < kv->n_layers; l++) {
        memcpy(df_kv_row(kv, kv->k, l, dst, 0), df_kv_row(kv, kv->k, l, src, 0), bytes);
        memcpy(df_kv_row(kv, kv->v, l, dst, 0), df_kv_row(kv, kv->v, l, src, 0), bytes);
    }
}

#define NBUF 11

/* Floats per row of each activation buffer, in allocation order. */
static void widths(const df_model_config *c, int64_t w[NBUF])
{
    int64_t H = c->hidden_size, qd = c->num_attention_heads * c->head_dim;
    int64_t kvd = c->num_key_value_heads * c->head_dim, I = c->intermediate_size;
    /* x xn rstd q k v att tmp gate up act (rstd: one per head for qwen3's q/k norms) */
    int64_t r = c->qk_norm ? c->num_attention_heads : 1;
    int64_t v[NBUF] = {H, H, r, qd, kvd, kvd, qd, H, I, I, I};
    memcpy(w, v, sizeof v);
}

static int64_t scores_floats(const df_model_config *c, int64_t max_len)
{
    return c->num_attention_heads * max_len;
}

int64_t df_infer_scratch_bytes(const df_model_config *cfg, int64_t rows_cap, int64_t max_len)
{
    int64_t w[NBUF], per_row = 0;
    widths(cfg, w);
    for (int i = 0; i < NBUF; i++)
        per_row += w[i];
    return rows_cap * (per_row * 4 + 8) +
           (int64_t)omp_get_max_threads() * scores_floats(cfg, max_len) * 4 +
           max_len * cfg->head_dim * 4;
}

int df_infer_scratch_init(df_infer_scratch *s, const df_model_config *cfg, int64_t rows_cap,
                          int64_t max_len)
{
    memset(s, 0, sizeof *s);
    if (cfg->head_dim > DF_MAX_HEAD_DIM)
        return df_error(DF_EUNSUPPORTED, "head_dim %lld exceeds the supported %d",
                        (long long)cfg->head_dim, DF_MAX_HEAD_DIM);
    s->rows_cap = rows_cap;
    int64_t w[NBUF];
    widths(cfg, w);
    float **bufs[NBUF] = {&s->x,   &s->xn,  &s->rstd, &s->q,  &s->k,  &s->v,
                          &s->att, &s->tmp, &s->gate, &s->up, &s->act};
    bool ok = true;
    for (int i = 0; i < NBUF; i++)
        ok &= (*bufs[i] = alloc64(rows_cap * w[i] * 4)) != NULL;
    s->slot = alloc64(rows_cap * 4);
    s->pos = alloc64(rows_cap * 4);
    s->n_threads_cap = omp_get_max_threads();
    s->scores = alloc64(s->n_threads_cap * scores_floats(cfg, max_len) * 4);
    s->rope_cos = alloc64(max_len * (cfg->head_dim / 2) * 4);
    s->rope_sin = alloc64(max_len * (cfg->head_dim / 2) * 4);
    if (!ok || !s->slot || !s->pos || !s->scores || !s->rope_cos || !s->rope_sin) {
        df_infer_scratch_release(s);
        return df_error(DF_ENOMEM, "out of memory allocating rollout activations for %lld rows",
                        (long long)rows_cap);
    }
    /* The model's RoPE must be the config's: df_rollout_generate checks it (check_model). */
    float inv_freq[DF_MAX_HEAD_DIM / 2];
    df_rope_inv_freq(inv_freq, cfg);
    df_rope_table_freq(s->rope_cos, s->rope_sin, max_len, cfg->head_dim, inv_freq);
    return DF_OK;
}

void df_infer_scratch_release(df_infer_scratch *s)
{
    float *bufs[NBUF] = {s->x,   s->xn,  s->rstd, s->q,  s->k,  s->v,
                         s->att, s->tmp, s->gate, s->up, s->act};
    for (int i = 0; i < NBUF; i++)
        free(bufs[i]);
    free(s->slot);
    free(s->pos);
    free(s->scores);
    free(s->rope_cos);
    free(s->rope_sin);
    memset(s, 0, sizeof *s);
}

static void add_inplace(float *x, const float *y, int64_t n)
{
#pragma omp parallel for schedule(static) if (n > DF_PAR_MIN_WORK)
    for (int64_t i = 0; i < n; i++)
        x[i] += y[i];
}

/* Grow the per-thread score buffers if the caller raised the thread count. */
static int ensure_threads(df_infer_scratch *s, const df_kv_cache *kv, int64_t nh)
{
    int nt = omp_get_max_threads();
    if (nt <= s->n_threads_cap)
        return DF_OK;
    float *sc = alloc64((int64_t)nt * nh * kv->max_len * 4);
    if (!sc)
        return df_error(DF_ENOMEM, "out of memory growing attention scratch to %d threads", nt);
    free(s->scores);
    s->scores = sc;
    s->n_threads_cap = nt;
    return DF_OK;
}

/* Keep only the output rows (ascending, so compaction in place is safe). */
static void compact_rows(df_infer_scratch *s, const df_infer_batch *b, int64_t H, int64_t qd)
{
    for (int64_t j = 0; j < b->n_out; j++) {
        int64_t r = b->out_rows[j];
        if (r != j) {
            memcpy(s->x + j * H, s->x + r * H, (size_t)H * sizeof(float));
            memcpy(s->q + j * qd, s->q + r * qd, (size_t)qd * sizeof(float));
        }
        s->slot[j] = b->slot[r];
        s->pos[j] = b->pos[r];
    }
}

static void write_kv(df_kv_cache *kv, const df_infer_scratch *s, const df_infer_batch *b,
                     int64_t l)
{
    size_t bytes = (size_t)kv->kv_dim * sizeof(float);
#pragma omp parallel for schedule(static) if (b->n * kv->kv_dim > DF_PAR_MIN_WORK)
    for (int64_t r = 0; r < b->n; r++) {
        memcpy(df_kv_row(kv, kv->k, l, b->slot[r], b->pos[r]), s->k + r * kv->kv_dim, bytes);
        memcpy(df_kv_row(kv, kv->v, l, b->slot[r], b->pos[r]), s->v + r * kv->kv_dim, bytes);
    }
}

int df_infer_forward(const df_model *m, df_kv_cache *kv, df_infer_scratch *s,
                     const df_infer_batch *b)
{
    const df_model_config *c = &m->cfg;
    int64_t H = c->hidden_size, I = c->intermediate_size, nh = c->num_attention_heads;
    int64_t nkv = c->num_key_value_heads, hd = c->head_dim, qd = nh * hd, kvd = nkv * hd;
    int64_t L = c->num_hidden_layers;
    float eps = (float)c->rms_norm_eps;
    if (b->n > s->rows_cap || b->n < 1)
        return df_error(DF_EINVAL, "rollout forward: %lld rows, capacity %lld",
                        (long long)b->n, (long long)s->rows_cap);
    int rc = ensure_threads(s, kv, nh);
    if (rc)
        return rc;
    df_embedding_fwd(s->x, b->tokens, m->w.embed, b->n, H);
    int64_t n = b->n;
    const int32_t *slot = b->slot, *pos = b->pos;
    for (int64_t l = 0; l < L; l++) {
        const df_layer_view *w = &m->w.layers[l];
        df_rmsnorm_fwd(s->xn, s->rstd, s->x, w->ln1, n, H, eps);
        df_linear_fwd(s->q, s->xn, w->wq, w->bq, n, qd, H);
        df_linear_fwd(s->k, s->xn, w->wk, w->bk, n, kvd, H);
        df_linear_fwd(s->v, s->xn, w->wv, w->bv, n, kvd, H);
        if (c->qk_norm) { /* qwen3: per-head RMSNorm over head_dim, in place */
            df_rmsnorm_fwd(s->q, s->rstd, s->q, w->q_norm, n * nh, hd, eps);
            df_rmsnorm_fwd(s->k, s->rstd, s->k, w->k_norm, n * nkv, hd, eps);
        }
        df_rope_apply(s->q, pos, n, nh, hd, s->rope_cos, s->rope_sin, false);
        df_rope_apply(s->k, pos, n, nkv, hd, s->rope_cos, s->rope_sin, false);
        write_kv(kv, s, b, l);
        /* The last layer only needs the output rows beyond their K / V. */
        if (l == L - 1 && b->out_rows && b->n_out < n) {
            compact_rows(s, b, H, qd);
            n = b->n_out;
            slot = s->slot;
            pos = s->pos;
        }
        df_kv_attention(s->att, s->q, kv, l, slot, pos, n, nh, nkv, hd,
                        df_model_layer_window(c, l), s->scores);
        df_linear_fwd(s->tmp, s->att, w->wo, w->bo, n, H, qd);
        add_inplace(s->x, s->tmp, n * H);
        df_rmsnorm_fwd(s->xn, s->rstd, s->x, w->ln2, n, H, eps);
        df_linear_fwd(s->gate, s->xn, w->w_gate, NULL, n, I, H);
        df_linear_fwd(s->up, s->xn, w->w_up, NULL, n, I, H);
        df_swiglu_fwd(s->act, s->gate, s->up, n * I);
        df_linear_fwd(s->tmp, s->act, w->w_down, NULL, n, H, I);
        add_inplace(s->x, s->tmp, n * H);
    }
    df_rmsnorm_fwd(s->xn, s->rstd, s->x, m->w.final_norm, n, H, eps);
    return DF_OK;
}
