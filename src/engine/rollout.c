/* Rollout engine: its lifetime, sizes and weight sync (include/distflow/rollout.h). */
#include "engine/rollout_engine.h"
#include "util/pages.h"

#include <stdlib.h>
#include <string.h>

/* The engine's own bf16 copy: the layers' matmuls, the LM head and the embedding rows (read in
 * bf16 as the mixed-precision actor reads them; the head's rows when tied, so no extra bytes). */
#define OWN16 (DF_W16_LM_HEAD | DF_W16_EMBED)

static int64_t max_batched_of(int64_t max_seq_len) { return max_seq_len > 2048 ? max_seq_len : 2048; }

static int64_t logit_rows_of(int64_t rows_cap, int64_t V)
{
    int64_t r = ((int64_t)1 << 22) / V;
    r = r < 1 ? 1 : r;
    return r < rows_cap ? r : rows_cap;
}

/* o with max_num_batched_tokens resolved (0: the default). */
static df_rollout_options resolved(const df_rollout_options *o)
{
    df_rollout_options r = *o;
    if (r.max_num_batched_tokens <= 0)
        r.max_num_batched_tokens = max_batched_of(r.max_seq_len);
    return r;
}

static int64_t kv_bytes_of(const df_model_config *cfg, const df_rollout_options *o)
{
    df_backend_kv kv = {.n_layers = cfg->num_hidden_layers, .n_slots = o->max_num_seqs,
                        .max_len = o->max_seq_len,
                        .kv_dim = cfg->num_key_value_heads * cfg->head_dim,
                        .dtype = o->dtype == DF_ROLLOUT_BF16 ? DF_KV_BF16 : DF_KV_F32};
    return 2 * (int64_t)df_backend_kv_bytes(&kv);
}

static int64_t packed_bytes(const df_model_config *cfg, int64_t rows)
{
    const df_vocab_tiling t = df_rollout_head_tiling(cfg);
    return df_packed16_bytes_for(cfg, &t, rows);
}

int64_t df_rollout_engine_bytes_ex(const df_model_config *cfg, const df_rollout_options *o)
{
    const df_rollout_options r = resolved(o);
    int64_t R = df_rollout_rows_cap(r.max_num_seqs, r.max_num_batched_tokens);
    int64_t logits = logit_rows_of(R, cfg->vocab_size) * cfg->vocab_size * 4;
    int64_t outs = r.max_num_seqs * r.max_seq_len * 8 + R * 20;
    int64_t bf16 = r.dtype == DF_ROLLOUT_BF16
                       ? df_weights16_bytes_for(cfg, OWN16) + df_mm_ctx_bytes(df_mm_elems_for(cfg, R)) +
                             df_rollout_h16_rows(R) * cfg->hidden_size * 2 +
                             (r.plain_weights ? 0 : packed_bytes(cfg, R))
                       : 0;
    return kv_bytes_of(cfg, &r) + df_infer_scratch_bytes(cfg, R, r.max_num_seqs, r.max_seq_len) +
           logits + outs + bf16 + df_rollout_routes_bytes(cfg, &r, R);
}

int64_t df_rollout_engine_bytes(const df_model_config *cfg, int64_t max_num_seqs,
                                int64_t max_seq_len)
{
    const df_rollout_options o = {max_num_seqs, max_seq_len, 0, DF_ROLLOUT_F32, NULL, false, false, false};
    return df_rollout_engine_bytes_ex(cfg, &o);
}

static int check_options(const df_model_config *cfg, const df_rollout_options *o)
{
    int rc = df_model_config_validate(cfg);
    if (rc)
        return df_error_wrap(rc, "rollout engine");
    if (o->max_num_seqs < 1 || o->max_seq_len < 2 || o->max_seq_len > INT32_MAX)
        return df_error(DF_EINVAL,
                        "rollout engine: max_num_seqs must be >= 1 and max_seq_len in [2, 2^31) "
                        "(got %lld, %lld)",
                        (long long)o->max_num_seqs, (long long)o->max_seq_len);
    if (o->max_num_batched_tokens > 0 && o->max_num_batched_tokens < o->max_num_seqs)
        return df_error(DF_EINVAL, "rollout engine: max_num_batched_tokens (%lld) must be >= "
                        "max_num_seqs (%lld): a decode step runs one row per sequence (as vLLM)",
                        (long long)o->max_num_batched_tokens, (long long)o->max_num_seqs);
    if (o->record_routes && df_model_route_width(cfg) == 0)
        return df_error(DF_EINVAL, "rollout engine: record_routes needs a model with experts (router "
                        "replay, R3): this one (model_type \"%s\") has no sparse layer",
                        cfg->model_type);
    if (o->dtype != DF_ROLLOUT_F32 && o->dtype != DF_ROLLOUT_BF16)
        return df_error(DF_EINVAL, "rollout engine: unknown dtype %d", (int)o->dtype);
    const bool device = o->backend && !o->backend->ops->host_memory; /* its own bf16 matmuls */
    if (o->dtype == DF_ROLLOUT_BF16 && !device && (rc = df_model_bf16_available()))
        return df_error_wrap(rc, "rollout engine: bfloat16");
    return DF_OK;
}

/* A device's buffers beyond the forward's: the sampler's (ops->sample), else the LM head's
 * logits, downloaded per forward. */
static int device_buffers(df_rollout_engine *e)
{
    const df_backend_ops *ops = e->be.ops;
    void *ctx = e->be.ctx;
    const int64_t S = e->max_num_seqs, V = e->cfg.vocab_size, H = e->cfg.hidden_size;
    if (!ops->sample)
        return ops->alloc(ctx, (size_t)(e->logit_rows * V) * sizeof(float), (void **)&e->d_logits);
    e->h_u = malloc((size_t)S * sizeof(double));
    e->h_tok = malloc((size_t)S * sizeof(int32_t));
    e->h_logp = malloc((size_t)S * sizeof(float));
    int rc = e->h_u && e->h_tok && e->h_logp ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    const int64_t sc = ops->sample_scratch_floats(ctx, S, V, H);
    if (!rc)
        rc = ops->alloc(ctx, (size_t)sc * sizeof(float), (void **)&e->d_sscratch);
    if (!rc)
        rc = ops->alloc(ctx, (size_t)(S * H) * sizeof(float), (void **)&e->d_h);
    if (!rc)
        rc = ops->alloc(ctx, (size_t)S * sizeof(int64_t), (void **)&e->d_rows);
    if (!rc)
        rc = ops->alloc(ctx, (size_t)S * sizeof(int32_t), (void **)&e->d_tok);
    if (!rc)
        rc = ops->alloc(ctx, (size_t)S * sizeof(float), (void **)&e->d_logp);
    return rc;
}

static void device_buffers_free(df_rollout_engine *e)
{
    void *bufs[] = {e->d_logits, e->d_sscratch, e->d_h, e->d_rows, e->d_tok, e->d_logp};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i])
            e->be.ops->release(e->be.ctx, bufs[i]);
    free(e->h_u), free(e->h_tok), free(e->h_logp);
}

/* The backend and, in bf16, its matmul context and the weight copy. */
static int engine_backend(df_rollout_engine *e, int64_t R)
{
    e->be = e->opt.backend ? *e->opt.backend : df_backend_cpu();
    e->opt.backend = NULL; /* the caller's pointer is not kept */
    const df_backend_ops *ops = e->be.ops;
    if (!ops->kv_write || !ops->kv_copy || !ops->kv_attention || !ops->kv_scratch_floats)
        return df_error(DF_EUNSUPPORTED, "rollout engine: the %s backend has no KV-cache "
                        "operators", ops->name);
    /* what the model needs of the backend (Gemma 2's soft-caps in kv_attention and sample, the
     * scalings' `scale`), as training's df_acts_create_on checks it */
    int rc = df_model_check_backend(&e->be, &e->cfg);
    if (rc)
        return rc; /* create_ex names the engine */
    if (!ops->host_memory) {
        if (e->opt.dtype == DF_ROLLOUT_BF16 && (!ops->gemm_w16 || !ops->embedding_fwd_w16))
            return df_error(DF_EUNSUPPORTED, "rollout engine: bfloat16 on the %s backend needs its "
                            "bf16 matmuls (gemm_w16, embedding_fwd_w16)", ops->name);
        return device_buffers(e); /* bf16: the weight copy comes with the first weight sync */
    }
    if (e->opt.dtype != DF_ROLLOUT_BF16)
        return DF_OK;
    if (!df_backend_is_cpu(&e->be))
        return df_error(DF_EUNSUPPORTED, "rollout engine: bfloat16 runs on the cpu backend only "
                        "(not %s)", ops->name);
    /* the weight copy comes with the first weight sync, unless one is shared before */
    rc = df_mm_ctx_create(df_mm_elems_for(&e->cfg, R), &e->mm);
    const size_t hb = (size_t)(df_rollout_h16_rows(R) * e->cfg.hidden_size) * sizeof(uint16_t);
    if (!rc && !(e->h16 = aligned_alloc(64, (hb + 63) / 64 * 64)))
        rc = df_error(DF_ENOMEM, "out of memory for the bf16 LM head's rows");
    e->be = df_backend_cpu_bf16(&e->mm);
    const df_vocab_tiling t = df_rollout_head_tiling(&e->cfg);
    if (!rc && !e->opt.plain_weights) /* pages come with the first pack */
        rc = df_packed16_create(&e->cfg, e->mm, &t, R, &e->p16);
    return rc;
}

int df_rollout_engine_create_ex(const df_model_config *cfg, const df_rollout_options *o,
                                df_rollout_engine **out)
{
    *out = NULL;
    int rc = check_options(cfg, o);
    if (rc)
        return rc;
    df_rollout_engine *e = calloc(1, sizeof *e);
    if (!e)
        return df_error(DF_ENOMEM, "out of memory allocating the rollout engine");
    e->cfg = *cfg;
    e->opt = resolved(o);
    const int64_t max_num_seqs = e->opt.max_num_seqs, max_seq_len = e->opt.max_seq_len;
    e->max_num_seqs = max_num_seqs;
    e->max_seq_len = max_seq_len;
    e->max_batched_tokens = e->opt.max_num_batched_tokens;
    int64_t R = df_rollout_rows_cap(max_num_seqs, e->max_batched_tokens);
    e->logit_rows = logit_rows_of(R, cfg->vocab_size);
    /* the packed copy's bytes from the copy made below, not a second probe of its layouts */
    df_rollout_options unpacked = e->opt;
    unpacked.plain_weights = true;
    e->bytes = df_rollout_engine_bytes_ex(cfg, &unpacked);
    rc = engine_backend(e, R);
    e->bytes += df_packed16_bytes(e->p16);
    if (!rc)
        rc = df_kv_cache_init_on(&e->be, &e->kv, cfg, max_num_seqs, max_seq_len,
                                 e->opt.dtype == DF_ROLLOUT_BF16 ? DF_KV_BF16 : DF_KV_F32);
    if (!rc)
        rc = df_infer_scratch_init(&e->s, &e->be, cfg, R, max_num_seqs, max_seq_len);
    if (rc) {
        df_rollout_engine_free(e);
        return df_error_wrap(rc, "rollout engine (%lld seqs x %lld tokens)",
                             (long long)max_num_seqs, (long long)max_seq_len);
    }
    size_t st = (size_t)(max_num_seqs * max_seq_len);
    /* host rows of logits: not needed where the device samples itself */
    const bool host_logits = e->be.ops->host_memory || !e->be.ops->sample;
    e->logits = host_logits ? malloc((size_t)(e->logit_rows * cfg->vocab_size) * sizeof(float)) : NULL;
    e->slots = calloc((size_t)max_num_seqs, sizeof *e->slots);
    e->out_tok = malloc(st * sizeof(int32_t));
    e->out_logp = malloc(st * sizeof(float));
    e->b_tok = malloc((size_t)R * sizeof(int32_t));
    e->b_slot = malloc((size_t)R * sizeof(int32_t));
    e->b_pos = malloc((size_t)R * sizeof(int32_t));
    e->b_out = malloc((size_t)R * sizeof(int64_t));
    if ((host_logits && !e->logits) || !e->slots || !e->out_tok || !e->out_logp || !e->b_tok || !e->b_slot ||
        !e->b_pos || !e->b_out) {
        df_rollout_engine_free(e);
        return df_error(DF_ENOMEM, "out of memory allocating rollout buffers");
    }
    if ((rc = df_rollout_routes_init(e, R))) {
        df_rollout_engine_free(e);
        return rc;
    }
    *out = e;
    return DF_OK;
}

int df_rollout_engine_create(const df_model_config *cfg, int64_t max_num_seqs,
                             int64_t max_seq_len, df_rollout_engine **out)
{
    const df_rollout_options o = {max_num_seqs, max_seq_len, 0, DF_ROLLOUT_F32, NULL, false, false, false};
    return df_rollout_engine_create_ex(cfg, &o, out);
}

void df_rollout_engine_options(const df_rollout_engine *e, df_rollout_options *o) { *o = e->opt; }

void df_rollout_engine_memory(const df_rollout_engine *e, int64_t *kv_bytes, int64_t *total_bytes)
{
    if (kv_bytes)
        *kv_bytes = 2 * (int64_t)df_backend_kv_bytes(&e->kv);
    /* df_rollout_engine_bytes_ex counts an own bf16 copy: not there (yet) while one is shared */
    const int64_t no_copy = e->mm && !e->own16 ? df_weights16_bytes_for(&e->cfg, OWN16) : 0;
    if (total_bytes)
        *total_bytes = e->bytes - no_copy;
}

void df_rollout_engine_free(df_rollout_engine *e)
{
    if (!e)
        return;
    if (e->be.ops) { /* made by engine_backend */
        df_kv_cache_release_on(&e->be, &e->kv);
        df_infer_scratch_release(&e->s);
        df_weights_dev_free(&e->wdev);
        device_buffers_free(e);
    }
    df_weights16_free(e->own16);
    df_packed16_free(e->p16);
    free(e->h16);
    df_mm_ctx_free(e->mm);
    free(e->logits);
    free(e->slots);
    free(e->out_tok);
    free(e->out_logp);
    free(e->b_tok);
    free(e->b_slot);
    free(e->b_pos);
    free(e->b_out);
    df_rollout_routes_free(e);
    free(e);
}

void df_rollout_engine_stats(const df_rollout_engine *e, df_rollout_stats *st) { *st = e->stats; }

int64_t df_rollout_engine_kv_resident(const df_rollout_engine *e)
{
    return df_kv_cache_resident_on(&e->be, &e->kv);
}

int64_t df_rollout_engine_scratch_resident(const df_rollout_engine *e)
{
    const int64_t s = df_infer_scratch_resident(&e->s, &e->cfg), p = df_packed16_resident(e->p16);
    return s < 0 || p < 0 ? -1 : s + p;
}

void df_rollout_drop_scratch(df_rollout_engine *e)
{
    const int64_t V = e->cfg.vocab_size, H = e->cfg.hidden_size;
    const int64_t R = df_rollout_rows_cap(e->max_num_seqs, e->max_batched_tokens);
    df_infer_scratch_drop(&e->s, &e->cfg);
    df_pages_release(e->logits, (size_t)(e->logit_rows * V) * sizeof(float));
    if (e->h16)
        df_pages_release(e->h16, (size_t)(df_rollout_h16_rows(R) * H) * sizeof(uint16_t));
    df_mm_ctx_release_pages(e->mm);
    df_packed16_release(e->p16);
    df_rollout_routes_drop(e, R); /* record_routes: the slots' routes, rewritten by every call */
}

void df_rollout_result_free(df_rollout_result *r)
{
    if (!r)
        return;
    free(r->offsets);
    free(r->tokens);
    free(r->log_probs);
    free(r->finish_reason);
    free(r->response_mask);
    free(r->assistant_turns);
    free(r->route_offsets);
    free(r->routes);
    memset(r, 0, sizeof *r);
}

/* ---- validation ------------------------------------------------------------ */

/* A config's q/k norms in messages. */
static const char *qk_norm_name(const df_model_config *c)
{
    return !c->qk_norm ? "no" : c->qk_norm_full ? "over the whole projection" : "per head";
}

static const char *layer_name(const df_model_config *c)
{
    return c->sandwich_norm ? "sandwich-norm" : c->post_norm ? "post-norm" : "pre-norm";
}

/* -1 when every layer of a and b attends over the same window with the same one of its RoPEs
 * (global or Gemma 3's local; the tables themselves: df_rope_same), and the Gemma 3 switches
 * (norms, embedding, MLP, q scale) agree; else the first layer that differs, or
 * num_hidden_layers for a switch. a and b have the same layer count. */
static int64_t first_layer_kind_diff(const df_model_config *a, const df_model_config *b)
{
    for (int64_t l = 0; l < a->num_hidden_layers; l++)
        if (df_model_layer_window(a, l) != df_model_layer_window(b, l) ||
            df_model_layer_local_rope(a, l) != df_model_layer_local_rope(b, l))
            return l;
    if (a->norm_plus_one != b->norm_plus_one || a->embed_scale != b->embed_scale || a->geglu != b->geglu ||
        a->query_pre_attn_scalar != b->query_pre_attn_scalar)
        return a->num_hidden_layers;
    return -1;
}

int df_rollout_check_model(const df_rollout_engine *e, const df_model *m)
{
    const df_model_config *a = &e->cfg, *b = &m->cfg;
    if (b->num_labels > 0)
        return df_error(DF_EINVAL, "rollout: a value model (num_labels %lld) has no LM head to "
                        "sample from", (long long)b->num_labels);
    if (a->vocab_size != b->vocab_size || a->hidden_size != b->hidden_size ||
        a->intermediate_size != b->intermediate_size ||
        a->num_hidden_layers != b->num_hidden_layers ||
        a->num_attention_heads != b->num_attention_heads ||
        a->num_key_value_heads != b->num_key_value_heads || a->head_dim != b->head_dim)
        return df_error(DF_EINVAL,
                        "rollout: the model's shapes (vocab %lld, hidden %lld, layers %lld, heads "
                        "%lld/%lld) differ from the engine's (vocab %lld, hidden %lld, layers "
                        "%lld, heads %lld/%lld)",
                        (long long)b->vocab_size, (long long)b->hidden_size,
                        (long long)b->num_hidden_layers, (long long)b->num_attention_heads,
                        (long long)b->num_key_value_heads, (long long)a->vocab_size,
                        (long long)a->hidden_size, (long long)a->num_hidden_layers,
                        (long long)a->num_attention_heads, (long long)a->num_key_value_heads);
    /* The engine's RoPE table, rstd buffer (widths of qk_norm's rows) and layer follow its config. */
    if (!df_rope_same(a, b) || a->qk_norm != b->qk_norm || a->qk_norm_full != b->qk_norm_full ||
        a->o_proj_bias != b->o_proj_bias || a->post_norm != b->post_norm || a->sandwich_norm != b->sandwich_norm) {
        char rb[48], ra[48];
        return df_error(DF_EINVAL,
                        "rollout: the model's RoPE (theta %g, local %g, %s), q/k norms (%s), o_proj bias (%s) "
                        "or layer (%s) differ from the engine's (theta %g, local %g, %s; %s; %s; %s)",
                        b->rope_theta, b->rope_local_theta, df_model_rope_name(b, rb, sizeof rb), qk_norm_name(b),
                        b->o_proj_bias ? "yes" : "no", layer_name(b), a->rope_theta, a->rope_local_theta,
                        df_model_rope_name(a, ra, sizeof ra), qk_norm_name(a), a->o_proj_bias ? "yes" : "no",
                        layer_name(a));
    }
    /* Gemma 2: the engine's attention and sampler apply its config's soft-caps */
    if (a->attn_logit_softcap != b->attn_logit_softcap || a->final_logit_softcap != b->final_logit_softcap)
        return df_error(DF_EINVAL, "rollout: the model's soft-caps (attn_logit_softcapping %g, "
                        "final_logit_softcapping %g; 0: none) differ from the engine's (%g, %g)",
                        b->attn_logit_softcap, b->final_logit_softcap, a->attn_logit_softcap,
                        a->final_logit_softcap);
    const int64_t l = first_layer_kind_diff(a, b);
    if (l >= a->num_hidden_layers)
        return df_error(DF_EINVAL, "rollout: the model's norms, embedding scale, MLP or query scale (Gemma 3's) "
                                   "differ from the engine's");
    if (l >= 0)
        return df_error(DF_EINVAL,
                        "rollout: layer %lld of the model attends over a window of %lld with its %s RoPE, the "
                        "engine's over %lld with its %s RoPE (a window of 0: every earlier position)",
                        (long long)l, (long long)df_model_layer_window(b, l),
                        df_model_layer_local_rope(b, l) ? "local" : "global", (long long)df_model_layer_window(a, l),
                        df_model_layer_local_rope(a, l) ? "local" : "global");
    return DF_OK;
}

/* bf16 on a device: the engine's own bf16 copy there, converted on the device from the float32
 * weights `view` holds at m's version (no transfer). */
static int device_weights16(df_rollout_engine *e, const df_model *m, bool force,
                            const df_model_view *view)
{
    int rc = e->own16 ? DF_OK : df_weights16_create_on(&e->be, &e->cfg, OWN16, &e->own16);
    e->w16 = e->own16;
    if (!rc && (force || !df_weights16_is_current(e->own16, m)))
        rc = df_weights16_refresh_dev(e->own16, m, view);
    return rc;
}

/* A device's weights for m: the shared source when it holds m's version (the own copy freed),
 * else the own copy, uploaded when stale (or `force`d); in bf16 with the bf16 copy made from them. */
static int device_weights(df_rollout_engine *e, const df_model *m, bool force, df_infer_weights *w)
{
    int rc = DF_OK;
    const df_weights_dev *src = e->wsrc;
    const df_model_view *view = &e->wdev.view;
    if (src && df_weights_dev_current(src, m) && src->be.ops == e->be.ops && src->be.ctx == e->be.ctx) {
        df_weights_dev_free(&e->wdev);
        view = &src->view;
    } else {
        rc = df_weights_dev_sync(&e->wdev, &e->be, m, force);
        view = &e->wdev.view;
    }
    if (!rc && e->opt.dtype == DF_ROLLOUT_BF16)
        rc = device_weights16(e, m, force, view);
    *w = (df_infer_weights){view, e->opt.dtype == DF_ROLLOUT_BF16 ? e->w16 : NULL, NULL};
    return rc ? df_error_wrap(rc, "rollout: weight sync") : DF_OK;
}

int df_rollout_engine_share_device_weights(df_rollout_engine *e, const df_weights_dev *src)
{
    if (e->be.ops->host_memory)
        return df_error(DF_EINVAL, "rollout: a %s engine reads the model's own weights; only a "
                        "device's shares device weights", e->be.ops->name);
    if (src && src->blob && (src->be.ops != e->be.ops || src->be.ctx != e->be.ctx))
        return df_error(DF_EINVAL, "rollout: shared device weights on the %s backend, the engine "
                        "on %s", src->be.ops->name, e->be.ops->name);
    e->wsrc = src;
    return DF_OK;
}

int df_rollout_engine_load_weights(df_rollout_engine *e, const df_model *m)
{
    int rc = df_rollout_check_model(e, m);
    if (!rc && !e->be.ops->host_memory) { /* a device reads the actor's or its own, uploaded now */
        df_infer_weights w;
        return device_weights(e, m, true, &w);
    }
    if (rc || !e->mm || (e->w16 && e->w16 != e->own16))
        return rc; /* float32 reads m's own; a shared copy is refreshed by its owner */
    /* the one conversion of this weight version: every matmul of the rollout reads it */
    if (!e->own16 && (rc = df_weights16_create_ex(&e->cfg, OWN16, &e->own16)))
        return df_error_wrap(rc, "rollout: the bf16 weight copy");
    e->w16 = e->own16;
    rc = df_weights16_refresh_model(e->own16, m);
    return rc ? df_error_wrap(rc, "rollout: bf16 weight sync") : DF_OK;
}

int df_rollout_engine_share_weights16(df_rollout_engine *e, const df_weights16 *w)
{
    if (!e)
        return df_error(DF_EINVAL, "df_rollout_engine_share_weights16: NULL engine");
    if (w && !e->mm)
        return df_error(DF_EINVAL, "rollout: a float32 engine reads the model's own weights; only "
                        "a bfloat16 one takes a bf16 copy");
    if (w && df_weights16_on_device(w)) /* the engine's bf16 path is the CPU's */
        return df_error(DF_EINVAL, "rollout: the bf16 copy lives in a device's memory; a bf16 "
                        "engine reads host memory");
    /* the tensors of a copy the engine would make (the layers' matmuls and the LM head), with the
     * bf16 embedding a mixed-precision actor's copy also holds or without (float32 rows then) */
    const int64_t want = df_weights16_bytes_for(&e->cfg, DF_W16_LM_HEAD);
    const int64_t with_embed = df_weights16_bytes_for(&e->cfg, DF_W16_LM_HEAD | DF_W16_EMBED);
    if (w && (!df_weights16_lm_head(w) ||
              (df_weights16_bytes(w) != want && df_weights16_bytes(w) != with_embed)))
        return df_error(DF_EINVAL, "rollout: the shared bf16 copy (%lld bytes%s) is not one of "
                        "this engine's model shapes with the LM head (%lld bytes)",
                        (long long)df_weights16_bytes(w), df_weights16_lm_head(w) ? "" : ", no LM head",
                        (long long)want);
    df_weights16_free(e->own16); /* sharing: the engine's own copy is not needed any more */
    e->own16 = NULL;
    e->w16 = w;
    return DF_OK;
}

/* bf16: the packed copy of w16 as it is now, packed here when it is not (once per weight
 * version: the copy's pages are written again after every sync or release). */
static int packed_current(df_rollout_engine *e)
{
    int rc = e->p16 && !df_packed16_is_current(e->p16, e->w16) ? df_packed16_pack(e->p16, e->w16)
                                                              : DF_OK;
    return rc ? df_error_wrap(rc, "rollout: packing the bf16 weights") : DF_OK;
}

/* The weights a forward reads: m's own, and in bf16 a copy of them at m's current version
 * (with its packed layers unless opt.plain_weights); on a device, its copy of m's at m's
 * current version (uploaded here when it is not). */
int df_rollout_infer_weights(df_rollout_engine *e, const df_model *m, df_infer_weights *w)
{
    if (!e->be.ops->host_memory)
        return device_weights(e, m, false, w);
    if (e->mm && !df_weights16_is_current(e->w16, m))
        return df_error(DF_EINVAL, "rollout: the bf16 copy of this model's weights is %s (weight "
                        "version %lld, copy of %lld): call df_rollout_engine_load_weights after "
                        "every change of them%s", e->w16 ? "stale" : "not made", (long long)m->version,
                        (long long)df_weights16_source_version(e->w16),
                        e->w16 && e->w16 != e->own16 ? " (a shared copy: its owner refreshes it)" : "");
    int rc = packed_current(e);
    if (rc)
        return rc;
    *w = (df_infer_weights){&m->w, e->w16, e->p16};
    return DF_OK;
}
