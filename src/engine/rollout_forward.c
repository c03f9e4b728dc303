/*
 * Inference forward over a KV cache (src/engine/rollout_internal.h): the model's one decoder
 * layer (model/decoder_layer.h) with the cache's attention step, on a compute backend: the
 * host's (buffers in host memory, the batch's arrays read where they are) or a device's
 * (buffers, cache and weights in its memory, the batch's arrays uploaded per call).
 */
#include "engine/rollout_internal.h"
#include "model/decoder_layer.h"
#include "model/moe.h"
#include "model/ops.h"
#include "util/pages.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static void *alloc64(int64_t n_bytes)
{
    size_t b = ((size_t)n_bytes + 63) / 64 * 64;
    return aligned_alloc(64, b ? b : 64);
}

int df_kv_cache_init(df_backend_kv *kv, const df_model_config *cfg, int64_t n_slots,
                     int64_t max_len, df_kv_dtype dtype)
{
    memset(kv, 0, sizeof *kv);
    *kv = (df_backend_kv){.n_layers = cfg->num_hidden_layers, .n_slots = n_slots,
                          .max_len = max_len,
                          .kv_dim = cfg->num_key_value_heads * cfg->head_dim, .dtype = dtype};
    /* Mappings of their own: reserved once, pages given back between rollouts (df_kv_cache_drop). */
    const size_t bytes = df_backend_kv_bytes(kv);
    void *k = mmap(NULL, bytes ? bytes : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    void *v = mmap(NULL, bytes ? bytes : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    kv->k = k == MAP_FAILED ? NULL : k;
    kv->v = v == MAP_FAILED ? NULL : v;
    if (!kv->k || !kv->v) {
        df_kv_cache_release(kv);
        return df_error(DF_ENOMEM, "out of memory mapping a KV cache of 2 x %zu bytes", bytes);
    }
    return DF_OK;
}

void df_kv_cache_release(df_backend_kv *kv)
{
    const size_t bytes = df_backend_kv_bytes(kv);
    if (kv->k)
        munmap(kv->k, bytes ? bytes : 1);
    if (kv->v)
        munmap(kv->v, bytes ? bytes : 1);
    kv->k = kv->v = NULL;
}

int df_kv_cache_drop(df_backend_kv *kv)
{
    const size_t bytes = df_backend_kv_bytes(kv);
    if (!bytes)
        return DF_OK;
    /* private anonymous pages: freed now, read back as zeros, faulted in again on the next write */
    if (madvise(kv->k, bytes, MADV_DONTNEED) || madvise(kv->v, bytes, MADV_DONTNEED))
        return df_error(DF_EIO, "rollout: releasing the KV cache's pages (madvise): %s", strerror(errno));
    return DF_OK;
}

int64_t df_kv_cache_resident(const df_backend_kv *kv)
{
    const size_t bytes = df_backend_kv_bytes(kv);
    if (!bytes || !kv->k || !kv->v)
        return 0;
    int64_t a = df_pages_resident(kv->k, bytes), b = df_pages_resident(kv->v, bytes);
    return a < 0 || b < 0 ? -1 : a + b;
}

/* On a device backend the cache is two buffers of the backend's; free_cache_engine releases them
 * (vLLM's sleep) and the next forward allocates them again (df_kv_cache_ready). */
int df_kv_cache_init_on(const df_backend *be, df_backend_kv *kv, const df_model_config *cfg,
                        int64_t n_slots, int64_t max_len, df_kv_dtype dtype)
{
    if (be->ops->host_memory)
        return df_kv_cache_init(kv, cfg, n_slots, max_len, dtype);
    *kv = (df_backend_kv){.n_layers = cfg->num_hidden_layers, .n_slots = n_slots,
                          .max_len = max_len,
                          .kv_dim = cfg->num_key_value_heads * cfg->head_dim, .dtype = dtype};
    return df_kv_cache_ready(be, kv);
}

int df_kv_cache_ready(const df_backend *be, df_backend_kv *kv)
{
    if (be->ops->host_memory || (kv->k && kv->v))
        return DF_OK;
    const size_t bytes = df_backend_kv_bytes(kv);
    int rc = kv->k ? DF_OK : be->ops->alloc(be->ctx, bytes, &kv->k);
    if (!rc && !kv->v)
        rc = be->ops->alloc(be->ctx, bytes, &kv->v);
    if (rc)
        df_kv_cache_release_on(be, kv);
    return rc ? df_error_wrap(rc, "a KV cache of 2 x %zu bytes on the %s backend", bytes,
                              be->ops->name)
              : DF_OK;
}

void df_kv_cache_release_on(const df_backend *be, df_backend_kv *kv)
{
    if (be->ops->host_memory) {
        df_kv_cache_release(kv);
        return;
    }
    if (kv->k)
        be->ops->release(be->ctx, kv->k);
    if (kv->v)
        be->ops->release(be->ctx, kv->v);
    kv->k = kv->v = NULL;
}

int df_kv_cache_drop_on(const df_backend *be, df_backend_kv *kv)
{
    if (be->ops->host_memory)
        return df_kv_cache_drop(kv);
    df_kv_cache_release_on(be, kv);
    return DF_OK;
}

int64_t df_kv_cache_resident_on(const df_backend *be, const df_backend_kv *kv)
{
    if (be->ops->host_memory)
        return df_kv_cache_resident(kv);
    return kv->k && kv->v ? 2 * (int64_t)df_backend_kv_bytes(kv) : 0;
}

#define NBUF 10

/* Floats per row of each activation buffer, in allocation order. */
static void widths(const df_model_config *c, int64_t w[NBUF])
{
    int64_t H = c->hidden_size, qd = c->num_attention_heads * c->head_dim;
    int64_t kvd = c->num_key_value_heads * c->head_dim, I = df_model_mlp_width(c);
    /* x xn rstd q k v att gate up act (rstd: one per head for qwen3's q/k norms) */
    int64_t r = c->qk_norm && !c->qk_norm_full ? c->num_attention_heads : 1;
    int64_t v[NBUF] = {H, H, r, qd, kvd, kvd, qd, I, I, I};
    memcpy(w, v, sizeof v);
}

int64_t df_infer_scratch_bytes(const df_model_config *cfg, int64_t rows_cap, int64_t out_cap,
                               int64_t max_len)
{
    int64_t w[NBUF], per_row = 0, H = cfg->hidden_size;
    int64_t qd = cfg->num_attention_heads * cfg->head_dim;
    widths(cfg, w);
    for (int i = 0; i < NBUF; i++)
        per_row += w[i];
    const int64_t rope = max_len * cfg->head_dim * 4 * (cfg->rope_local_theta > 0 ? 2 : 1);
    return rows_cap * (per_row + (cfg->o_proj_bias ? 1 : 0)) * 4 + out_cap * ((H + qd) * 4 + 8) +
           df_kv_scratch_floats(cfg->num_attention_heads, max_len) * 4 + rope + df_norm_shift_floats(cfg) * 4 +
           df_moe_ws_bytes(cfg, rows_cap);
}

/* A buffer of s's backend (the CPU's: 64-byte aligned host memory); *ok cleared on failure. */
static void *sbuf(const df_infer_scratch *s, int64_t bytes, bool *ok)
{
    void *p = NULL;
    if (s->be.ops->alloc(s->be.ctx, (size_t)bytes, &p))
        p = NULL;
    *ok &= p != NULL;
    return p;
}

static void sfree(const df_infer_scratch *s, void *p)
{
    if (p)
        s->be.ops->release(s->be.ctx, p);
}

/* The ones and the RoPE tables of cfg for positions [0, max_len), made on the host. */
static int fill_tables(df_infer_scratch *s, const df_model_config *cfg, int64_t max_len)
{
    const int64_t half = df_model_rope_dim(cfg) / 2, n = s->rows_cap > max_len * half ? s->rows_cap : max_len * half;
    float *h = alloc64(2 * n * 4);
    if (!h)
        return df_error(DF_ENOMEM, "out of memory for the rollout's RoPE tables");
    int rc = DF_OK;
    if (s->ones) {
        for (int64_t i = 0; i < s->rows_cap; i++)
            h[i] = 1.0f;
        rc = s->be.ops->upload(s->be.ctx, s->ones, h, (size_t)s->rows_cap * 4);
    }
    /* The model's RoPE must be the config's: df_rollout_generate checks it (check_model). */
    df_rope_model_table(h, h + n, max_len, cfg);
    if (!rc)
        rc = s->be.ops->upload(s->be.ctx, s->rope_cos, h, (size_t)(max_len * half) * 4);
    if (!rc)
        rc = s->be.ops->upload(s->be.ctx, s->rope_sin, h + n, (size_t)(max_len * half) * 4);
    if (!rc && s->rope_cos_local) { /* gemma3's sliding layers */
        df_model_config local;
        df_model_local_rope(cfg, &local);
        df_rope_model_table(h, h + n, max_len, &local);
        rc = s->be.ops->upload(s->be.ctx, s->rope_cos_local, h, (size_t)(max_len * half) * 4);
        if (!rc)
            rc = s->be.ops->upload(s->be.ctx, s->rope_sin_local, h + n, (size_t)(max_len * half) * 4);
    }
    if (!rc && s->nshift)
        rc = df_norm_shift_init(&s->be, cfg, s->nshift);
    free(h);
    return rc;
}

int df_infer_scratch_init(df_infer_scratch *s, const df_backend *be, const df_model_config *cfg,
                          int64_t rows_cap, int64_t out_cap, int64_t max_len)
{
    memset(s, 0, sizeof *s);
    if (cfg->head_dim > DF_MAX_HEAD_DIM)
        return df_error(DF_EUNSUPPORTED, "head_dim %lld exceeds the supported %d",
                        (long long)cfg->head_dim, DF_MAX_HEAD_DIM);
    s->be = *be;
    s->dev = !be->ops->host_memory;
    s->rows_cap = rows_cap;
    s->out_cap = out_cap;
    int64_t w[NBUF], H = cfg->hidden_size, qd = cfg->num_attention_heads * cfg->head_dim;
    widths(cfg, w);
    float **bufs[NBUF] = {&s->x, &s->xn, &s->rstd, &s->q,    &s->k,
                          &s->v, &s->att, &s->gate, &s->up, &s->act};
    bool ok = true;
    for (int i = 0; i < NBUF; i++)
        *bufs[i] = sbuf(s, rows_cap * w[i] * 4, &ok);
    s->xc = sbuf(s, out_cap * H * 4, &ok);
    s->qc = sbuf(s, out_cap * qd * 4, &ok);
    s->slot = sbuf(s, out_cap * 4, &ok);
    s->pos = sbuf(s, out_cap * 4, &ok);
    s->ones = cfg->o_proj_bias ? sbuf(s, rows_cap * 4, &ok) : NULL;
    s->scores_floats = be->ops->kv_scratch_floats(be->ctx, cfg->num_attention_heads, max_len);
    s->scores = sbuf(s, s->scores_floats * 4, &ok);
    s->rope_cos = sbuf(s, max_len * (df_model_rope_dim(cfg) / 2) * 4, &ok);
    s->rope_sin = sbuf(s, max_len * (df_model_rope_dim(cfg) / 2) * 4, &ok);
    if (cfg->rope_local_theta > 0) {
        s->rope_cos_local = sbuf(s, max_len * (df_model_rope_dim(cfg) / 2) * 4, &ok);
        s->rope_sin_local = sbuf(s, max_len * (df_model_rope_dim(cfg) / 2) * 4, &ok);
    }
    if (cfg->norm_plus_one) {
        s->nshift = sbuf(s, df_norm_shift_floats(cfg) * 4, &ok);
        s->nshift_layers = ok ? calloc((size_t)cfg->num_hidden_layers, sizeof(df_layer_view)) : NULL;
        ok &= s->nshift_layers != NULL;
    }
    if (ok && cfg->num_experts > 0 && df_moe_ws_create(cfg, rows_cap, &s->moe))
        ok = false;
    if (s->dev) { /* the batch's index arrays in device memory, the output rows' staged here */
        s->tok = sbuf(s, rows_cap * 4, &ok);
        s->bslot = sbuf(s, rows_cap * 4, &ok);
        s->bpos = sbuf(s, rows_cap * 4, &ok);
        s->orows = sbuf(s, out_cap * 8, &ok);
        s->h_slot = ok ? alloc64(out_cap * 8) : NULL;
        ok &= s->h_slot != NULL;
        s->h_pos = ok ? s->h_slot + out_cap : NULL;
    }
    int rc = ok ? fill_tables(s, cfg, max_len)
                : df_error(DF_ENOMEM, "out of memory allocating rollout activations for %lld "
                           "rows on the %s backend", (long long)rows_cap, be->ops->name);
    if (rc)
        df_infer_scratch_release(s);
    return rc;
}

void df_infer_scratch_release(df_infer_scratch *s)
{
    if (!s->be.ops) /* never made */
        return;
    float *bufs[NBUF] = {s->x, s->xn, s->rstd, s->q, s->k, s->v, s->att, s->gate, s->up, s->act};
    for (int i = 0; i < NBUF; i++)
        sfree(s, bufs[i]);
    void *more[] = {s->xc, s->qc, s->slot, s->pos, s->ones, s->scores, s->rope_cos,
                    s->rope_sin, s->tok, s->bslot, s->bpos, s->orows, s->rope_cos_local,
                    s->rope_sin_local, s->nshift};
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++)
        sfree(s, more[i]);
    free(s->h_slot);
    free(s->nshift_layers);
    df_moe_ws_free(s->moe);
    memset(s, 0, sizeof *s);
}

/* The buffers whose contents are dead between forward calls, and their bytes. */
static int dead_bufs(const df_infer_scratch *s, const df_model_config *cfg, float *p[NBUF + 3],
                     size_t bytes[NBUF + 3])
{
    int64_t w[NBUF], H = cfg->hidden_size, qd = cfg->num_attention_heads * cfg->head_dim;
    widths(cfg, w);
    float *bufs[NBUF + 3] = {s->x, s->xn, s->rstd, s->q, s->k, s->v, s->att, s->gate, s->up, s->act,
                             s->xc, s->qc, s->scores};
    for (int i = 0; i < NBUF; i++)
        bytes[i] = (size_t)(s->rows_cap * w[i]) * sizeof(float);
    bytes[NBUF] = (size_t)(s->out_cap * H) * sizeof(float);
    bytes[NBUF + 1] = (size_t)(s->out_cap * qd) * sizeof(float);
    bytes[NBUF + 2] = (size_t)s->scores_floats * sizeof(float);
    memcpy(p, bufs, sizeof bufs);
    return NBUF + 3;
}

int64_t df_infer_scratch_drop(df_infer_scratch *s, const df_model_config *cfg)
{
    if (s->dev)
        return 0;
    float *p[NBUF + 3];
    size_t bytes[NBUF + 3];
    int64_t n = 0;
    for (int i = 0, k = dead_bufs(s, cfg, p, bytes); i < k; i++)
        n += df_pages_release(p[i], bytes[i]);
    return n;
}

int64_t df_infer_scratch_resident(const df_infer_scratch *s, const df_model_config *cfg)
{
    if (s->dev)
        return 0;
    float *p[NBUF + 3];
    size_t bytes[NBUF + 3];
    int64_t n = 0;
    for (int i = 0, k = dead_bufs(s, cfg, p, bytes); i < k; i++) {
        const int64_t r = df_pages_resident(p[i], bytes[i]);
        if (r < 0)
            return -1;
        n += r;
    }
    return n;
}

/* Grow kv_attention's scratch if it needs more now (the caller raised the thread count). */
static int ensure_scratch(const df_backend *be, df_infer_scratch *s, const df_backend_kv *kv,
                          int64_t nh)
{
    const int64_t need = be->ops->kv_scratch_floats(be->ctx, nh, kv->max_len);
    if (need <= s->scores_floats)
        return DF_OK;
    bool ok = true;
    float *sc = sbuf(s, need * 4, &ok);
    if (!ok)
        return df_error(DF_ENOMEM, "out of memory growing attention scratch to %lld floats",
                        (long long)need);
    sfree(s, s->scores);
    s->scores = sc;
    s->scores_floats = need;
    return DF_OK;
}

/* The rows of one layer call: the residual x updated in place (h = xout = x), every per-row
 * statistic in one rstd buffer (none is read again), q / k normalised in place. */
static df_layer_bufs infer_bufs(const df_infer_scratch *s, const df_infer_batch *b)
{
    return (df_layer_bufs){.pos = b->pos, .rope_cos = s->rope_cos, .rope_sin = s->rope_sin,
                           .ones = s->ones, .x = s->x, .xn1 = s->xn, .rstd1 = s->rstd,
                           .qraw = s->q, .kraw = s->k, .qrstd = s->rstd, .krstd = s->rstd,
                           .q = s->q, .k = s->k, .v = s->v, .att = s->att, .h = s->x,
                           .xn2 = s->xn, .rstd2 = s->rstd, .gate = s->gate, .up = s->up,
                           .act = s->act, .xout = s->x, .rope_cos_local = s->rope_cos_local,
                           .rope_sin_local = s->rope_sin_local, .xin = s->xn, .rstdin = s->rstd,
                           .xff = s->xn, .rstdff = s->rstd, .moe = s->moe};
}

/* The batch's arrays where the backend reads them: b's own on the host; on a device, copies in
 * s's buffers (the output rows' slots and positions gathered on the host first). */
static int stage_batch(df_infer_scratch *s, const df_infer_batch *b, bool compact,
                       df_infer_batch *d)
{
    int32_t *oslot = s->dev ? s->h_slot : s->slot, *opos = s->dev ? s->h_pos : s->pos;
    for (int64_t j = 0; compact && j < b->n_out; j++) {
        oslot[j] = b->slot[b->out_rows[j]];
        opos[j] = b->pos[b->out_rows[j]];
    }
    *d = *b;
    if (!s->dev)
        return DF_OK;
    const df_backend *be = &s->be;
    const size_t n4 = (size_t)b->n * 4, o4 = compact ? (size_t)b->n_out * 4 : 0;
    int rc = be->ops->upload(be->ctx, s->tok, b->tokens, n4);
    if (!rc)
        rc = be->ops->upload(be->ctx, s->bslot, b->slot, n4);
    if (!rc)
        rc = be->ops->upload(be->ctx, s->bpos, b->pos, n4);
    if (!rc && compact)
        rc = be->ops->upload(be->ctx, s->orows, b->out_rows, 2 * o4);
    if (!rc && compact)
        rc = be->ops->upload(be->ctx, s->slot, oslot, o4);
    if (!rc && compact)
        rc = be->ops->upload(be->ctx, s->pos, opos, o4);
    *d = (df_infer_batch){b->n, s->tok, s->bslot, s->bpos, b->n_out, compact ? s->orows : NULL,
                          b->routes_out};
    return rc;
}

int df_infer_forward(const df_backend *be, const df_model_config *c, const df_infer_weights *wt,
                     df_backend_kv *kv, df_infer_scratch *s, const df_infer_batch *hb)
{
    const int64_t H = c->hidden_size, L = c->num_hidden_layers;
    if (hb->n > s->rows_cap || hb->n < 1 || (hb->out_rows && hb->n_out > s->out_cap))
        return df_error(DF_EINVAL, "rollout forward: %lld rows (%lld output rows), capacity "
                        "%lld (%lld)", (long long)hb->n, (long long)hb->n_out,
                        (long long)s->rows_cap, (long long)s->out_cap);
    /* The last layer only needs the output rows beyond their K / V. */
    const bool compact = hb->out_rows && hb->n_out < hb->n;
    df_infer_batch bd;
    int rc = ensure_scratch(be, s, kv, c->num_attention_heads);
    if (!rc)
        rc = df_kv_cache_ready(be, kv);
    if (!rc)
        rc = stage_batch(s, hb, compact, &bd);
    if (rc)
        return rc;
    const df_infer_batch *b = &bd;
    /* bf16: the copy's embedding rows when it holds them (as the mixed-precision actor) */
    const uint16_t *e16 = wt->w16 ? df_weights16_embed(wt->w16) : NULL;
    int err = e16 ? be->ops->embedding_fwd_w16(be->ctx, s->x, b->tokens, e16, b->n, H)
                  : be->ops->embedding_fwd(be->ctx, s->x, b->tokens, wt->w->embed, b->n, H);
    if (!err && c->embed_scale) /* Gemma3TextScaledWordEmbedding, as the training forward */
        err = be->ops->scale(be->ctx, s->x, b->n * H, df_model_embed_scale(c));
    const df_model_view *w = wt->w;
    df_model_view shifted;
    if (s->nshift) { /* Gemma3RMSNorm's 1 + w, from the weights of this call */
        df_norm_shift_view(be, c, wt->w, s->nshift, s->nshift_layers, &shifted, &err);
        w = &shifted;
    }
    df_layer_bufs bufs = infer_bufs(s, b);
    /* router replay's record: each sparse layer's k columns of the rows' routes; -1 where a row
     * does not reach a layer's MLP (the last layer past the output rows) */
    const int64_t W = b->routes_out ? df_model_route_width(c) : 0;
    for (int64_t i = 0; i < b->n * W; i++)
        b->routes_out[i] = -1;
    bufs.route_stride = W;
    df_layer_attn at = {.kv = kv, .slot = b->slot, .scratch = s->scores};
    for (int64_t l = 0; l < L && !err; l++) {
        bufs.routes_out = W && df_model_layer_moe(c, l)
                              ? b->routes_out + df_model_route_col(c, l)
                              : NULL;
        if (l == L - 1 && compact)
            at = (df_layer_attn){.kv = kv, .slot = b->slot, .scratch = s->scores,
                                 .n_out = b->n_out, .out_rows = b->out_rows,
                                 .out_slot = s->slot, .out_pos = s->pos, .xc = s->xc,
                                 .qc = s->qc};
        const df_layer16 *w16 = wt->p16   ? df_packed16_layer(wt->p16, l)
                                : wt->w16 ? df_weights16_layer(wt->w16, l)
                                          : NULL;
        df_decoder_layer(be, c, &w->layers[l], w16, l, b->n, &bufs, &at, &err);
    }
    const int64_t n = compact ? b->n_out : b->n;
    if (!err)
        err = be->ops->rmsnorm_fwd(be->ctx, s->xn, s->rstd, compact ? s->xc : s->x,
                                   w->final_norm, n, H, (float)c->rms_norm_eps);
    return err ? df_error_wrap(err, "rollout forward on the %s backend", be->ops->name) : DF_OK;
}
