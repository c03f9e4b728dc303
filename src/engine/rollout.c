/* Rollout engine: continuous batching over a KV cache (include/distflow/rollout.h). */
#include "distflow/rollout.h"
#include "distflow/rng.h"
#include "engine/rollout_internal.h"
#include "engine/sampling.h"
#include "model/ops.h"
#include "util/killpoint.h"
#include "util/pages.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* Most columns per tile (and per statistics group) of fused sampling: a draw
 * recomputes one group of one row. */
#define DF_SAMPLE_COLS 512

/* Stream tag separating rollout draws from other users of the same seed. */
#define ROLLOUT_RNG_TAG 0x726f6c6cULL

typedef struct {
    bool active;
    bool reserved;      /* taken by a prompt still being prefilled in chunks */
    int64_t seq;        /* i * n_samples + j */
    int64_t prompt_len;
    int64_t n_gen;
    int64_t limit;      /* min(max_new_tokens, max_seq_len - prompt_len) */
    df_rng rng;
} slot_state;

struct df_rollout_engine {
    df_model_config cfg;
    df_rollout_options opt;   /* max_num_batched_tokens resolved */
    int64_t max_num_seqs, max_seq_len, max_batched_tokens, logit_rows;
    df_backend be;            /* where the decoder runs: the CPU, bf16 matmuls through mm */
    df_mm_ctx *mm;            /* bf16: the matmul context gemm_w16 uses */
    const df_weights16 *w16;  /* bf16: the copy of the matmul weights the forwards read: own16 or
                                 a shared one (df_rollout_engine_share_weights16); NULL until then */
    df_weights16 *own16;      /* bf16: the engine's own copy, made at the first weight sync
                                 without a shared one */
    uint16_t *h16;            /* bf16: final hidden rows rounded for the LM head [rows16, H] */
    df_backend_kv kv;
    df_infer_scratch s;
    float *logits;            /* [logit_rows, vocab] */
    slot_state *slots;        /* [max_num_seqs] */
    int32_t *out_tok;         /* [max_num_seqs, max_seq_len] tokens generated so far */
    float *out_logp;          /* [max_num_seqs, max_seq_len] */
    int32_t *b_tok, *b_slot, *b_pos; /* [rows_cap] rows of the next forward */
    int64_t *b_out;           /* [rows_cap] */
    int64_t bytes;            /* everything allocated (df_rollout_engine_memory) */
    df_rollout_stats stats;
};

/* A prompt group admitted but not yet wholly prefilled (longer than the token budget). */
typedef struct {
    bool on;
    int64_t prompt, j0, cnt, done; /* done: prompt tokens prefilled so far */
    int32_t *slots;                /* [max_num_seqs] its cnt slots */
} pending;

/* Everything one df_rollout_generate call needs besides the engine. */
typedef struct {
    df_rollout_engine *e;
    const df_model *m;
    const df_rollout_request *req;
    const df_sampling_params *sp;
    df_infer_weights w;       /* what the forwards read (m's, and the bf16 copy) */
    uint8_t *is_stop;         /* [vocab] */
    char *work;               /* [n_threads, work_bytes] sampler scratch (filtered sampling) */
    int64_t work_bytes;
    int n_threads;
    /* Sampling straight from hidden states (no top-k / top-p): per-group softmax
     * statistics of the rows of one forward, and per-thread draw buffers. */
    bool fused;
    df_vocab_tiling tiling;
    int64_t n_groups;
    df_vstat *vstat;          /* [max_num_seqs, n_groups] */
    float *draw_buf;          /* [n_threads, 2 * tiling.group] */
    /* finished responses, appended in completion order */
    int32_t *a_tok;
    float *a_logp;
    int64_t a_len, a_cap;
    int64_t *seq_start, *seq_len; /* [n_seqs] into the arena */
    int8_t *finish;               /* [n_seqs] */
    int64_t n_seqs, done, tokens;
    int64_t next_prompt, next_j;  /* admission cursor */
    pending pend;                 /* a prompt in chunked prefill */
    df_rollout_progress_fn progress;
    void *user;
} gen_ctx;

/* One admission in a prefill batch: prompt i, samples [j0, j0 + cnt) into slots. */
typedef struct {
    int64_t prompt, j0, cnt;
    int32_t slots_at;         /* index into the admission slot list */
} admission;

static int64_t rows_cap_of(int64_t max_num_seqs, int64_t max_batched)
{
    return max_num_seqs > max_batched ? max_num_seqs : max_batched;
}

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

/* Floats of the largest activation operand a bf16 matmul rounds: [rows, widest]. */
/* Rows of the bf16 LM head's operand for R hidden rows: whole tiles (df_vocab16_rows: clamped
 * tilings have at most DF_LMHEAD_ROWS rows). */
static int64_t h16_rows(int64_t R) { return (R + DF_LMHEAD_ROWS - 1) / DF_LMHEAD_ROWS * DF_LMHEAD_ROWS; }

static int64_t kv_bytes_of(const df_model_config *cfg, const df_rollout_options *o)
{
    df_backend_kv kv = {.n_layers = cfg->num_hidden_layers, .n_slots = o->max_num_seqs,
                        .max_len = o->max_seq_len,
                        .kv_dim = cfg->num_key_value_heads * cfg->head_dim,
                        .dtype = o->dtype == DF_ROLLOUT_BF16 ? DF_KV_BF16 : DF_KV_F32};
    return 2 * (int64_t)df_backend_kv_bytes(&kv);
}

int64_t df_rollout_engine_bytes_ex(const df_model_config *cfg, const df_rollout_options *o)
{
    const df_rollout_options r = resolved(o);
    int64_t R = rows_cap_of(r.max_num_seqs, r.max_num_batched_tokens);
    int64_t logits = logit_rows_of(R, cfg->vocab_size) * cfg->vocab_size * 4;
    int64_t outs = r.max_num_seqs * r.max_seq_len * 8 + R * 20;
    int64_t bf16 = r.dtype == DF_ROLLOUT_BF16
                       ? df_weights16_bytes_for(cfg, DF_W16_LM_HEAD) + df_mm_ctx_bytes(df_mm_elems_for(cfg, R)) +
                             h16_rows(R) * cfg->hidden_size * 2
                       : 0;
    return kv_bytes_of(cfg, &r) + df_infer_scratch_bytes(cfg, R, r.max_num_seqs, r.max_seq_len) +
           logits + outs + bf16;
}

int64_t df_rollout_engine_bytes(const df_model_config *cfg, int64_t max_num_seqs,
                                int64_t max_seq_len)
{
    const df_rollout_options o = {max_num_seqs, max_seq_len, 0, DF_ROLLOUT_F32, NULL, false};
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
    if (o->dtype != DF_ROLLOUT_F32 && o->dtype != DF_ROLLOUT_BF16)
        return df_error(DF_EINVAL, "rollout engine: unknown dtype %d", (int)o->dtype);
    if (o->dtype == DF_ROLLOUT_BF16 && (rc = df_model_bf16_available()))
        return df_error_wrap(rc, "rollout engine: bfloat16");
    return DF_OK;
}

/* The backend and, in bf16, its matmul context and the weight copy. */
static int engine_backend(df_rollout_engine *e, int64_t R)
{
    e->be = e->opt.backend ? *e->opt.backend : df_backend_cpu();
    e->opt.backend = NULL; /* the caller's pointer is not kept */
    const df_backend_ops *ops = e->be.ops;
    if (!ops->kv_write || !ops->kv_copy || !ops->kv_attention || !ops->kv_scratch_floats ||
        !ops->host_memory)
        return df_error(DF_EUNSUPPORTED, "rollout engine: the %s backend has no KV-cache "
                        "operators", ops->name);
    if (e->opt.dtype != DF_ROLLOUT_BF16)
        return DF_OK;
    if (!df_backend_is_cpu(&e->be))
        return df_error(DF_EUNSUPPORTED, "rollout engine: bfloat16 runs on the cpu backend only "
                        "(not %s)", ops->name);
    /* the weight copy comes with the first weight sync, unless one is shared before */
    int rc = df_mm_ctx_create(df_mm_elems_for(&e->cfg, R), &e->mm);
    const size_t hb = (size_t)(h16_rows(R) * e->cfg.hidden_size) * sizeof(uint16_t);
    if (!rc && !(e->h16 = aligned_alloc(64, (hb + 63) / 64 * 64)))
        rc = df_error(DF_ENOMEM, "out of memory for the bf16 LM head's rows");
    e->be = df_backend_cpu_bf16(&e->mm);
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
    int64_t R = rows_cap_of(max_num_seqs, e->max_batched_tokens);
    e->logit_rows = logit_rows_of(R, cfg->vocab_size);
    e->bytes = df_rollout_engine_bytes_ex(cfg, &e->opt);
    rc = engine_backend(e, R);
    if (!rc)
        rc = df_kv_cache_init(&e->kv, cfg, max_num_seqs, max_seq_len,
                              e->opt.dtype == DF_ROLLOUT_BF16 ? DF_KV_BF16 : DF_KV_F32);
    if (!rc)
        rc = df_infer_scratch_init(&e->s, cfg, R, max_num_seqs, max_seq_len);
    if (rc) {
        df_rollout_engine_free(e);
        return df_error_wrap(rc, "rollout engine (%lld seqs x %lld tokens)",
                             (long long)max_num_seqs, (long long)max_seq_len);
    }
    size_t st = (size_t)(max_num_seqs * max_seq_len);
    e->logits = malloc((size_t)(e->logit_rows * cfg->vocab_size) * sizeof(float));
    e->slots = calloc((size_t)max_num_seqs, sizeof *e->slots);
    e->out_tok = malloc(st * sizeof(int32_t));
    e->out_logp = malloc(st * sizeof(float));
    e->b_tok = malloc((size_t)R * sizeof(int32_t));
    e->b_slot = malloc((size_t)R * sizeof(int32_t));
    e->b_pos = malloc((size_t)R * sizeof(int32_t));
    e->b_out = malloc((size_t)R * sizeof(int64_t));
    if (!e->logits || !e->slots || !e->out_tok || !e->out_logp || !e->b_tok || !e->b_slot ||
        !e->b_pos || !e->b_out) {
        df_rollout_engine_free(e);
        return df_error(DF_ENOMEM, "out of memory allocating rollout buffers");
    }
    *out = e;
    return DF_OK;
}

int df_rollout_engine_create(const df_model_config *cfg, int64_t max_num_seqs,
                             int64_t max_seq_len, df_rollout_engine **out)
{
    const df_rollout_options o = {max_num_seqs, max_seq_len, 0, DF_ROLLOUT_F32, NULL, false};
    return df_rollout_engine_create_ex(cfg, &o, out);
}

void df_rollout_engine_options(const df_rollout_engine *e, df_rollout_options *o) { *o = e->opt; }

void df_rollout_engine_memory(const df_rollout_engine *e, int64_t *kv_bytes, int64_t *total_bytes)
{
    if (kv_bytes)
        *kv_bytes = 2 * (int64_t)df_backend_kv_bytes(&e->kv);
    /* df_rollout_engine_bytes_ex counts an own bf16 copy: not there (yet) while one is shared */
    const int64_t no_copy = e->mm && !e->own16 ? df_weights16_bytes_for(&e->cfg, DF_W16_LM_HEAD) : 0;
    if (total_bytes)
        *total_bytes = e->bytes - no_copy;
}

void df_rollout_engine_free(df_rollout_engine *e)
{
    if (!e)
        return;
    df_kv_cache_release(&e->kv);
    df_infer_scratch_release(&e->s);
    df_weights16_free(e->own16);
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
    free(e);
}

void df_rollout_engine_stats(const df_rollout_engine *e, df_rollout_stats *st) { *st = e->stats; }

int64_t df_rollout_engine_kv_resident(const df_rollout_engine *e) { return df_kv_cache_resident(&e->kv); }

int64_t df_rollout_engine_scratch_resident(const df_rollout_engine *e)
{
    return df_infer_scratch_resident(&e->s, &e->cfg);
}

void df_rollout_result_free(df_rollout_result *r)
{
    if (!r)
        return;
    free(r->offsets);
    free(r->tokens);
    free(r->log_probs);
    free(r->finish_reason);
    memset(r, 0, sizeof *r);
}

/* ---- validation ------------------------------------------------------------ */

static const char *rope_name(const df_model_config *c)
{
    return c->rope_type == DF_ROPE_LLAMA3 ? "llama3 scaling" : "default";
}

static int check_model(const df_rollout_engine *e, const df_model *m)
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
    /* The engine's RoPE table and rstd buffer (widths of qk_norm's rows) follow its config. */
    bool llama3 = a->rope_type == DF_ROPE_LLAMA3;
    if (a->rope_theta != b->rope_theta || a->rope_type != b->rope_type ||
        (llama3 && (a->rope_factor != b->rope_factor ||
                    a->rope_low_freq_factor != b->rope_low_freq_factor ||
                    a->rope_high_freq_factor != b->rope_high_freq_factor ||
                    a->rope_original_max_pos != b->rope_original_max_pos)) ||
        a->qk_norm != b->qk_norm || a->o_proj_bias != b->o_proj_bias)
        return df_error(DF_EINVAL,
                        "rollout: the model's RoPE (theta %g, %s), q/k norms (%s) or o_proj bias "
                        "(%s) differ from the engine's (theta %g, %s; %s; %s)",
                        b->rope_theta, rope_name(b), b->qk_norm ? "yes" : "no",
                        b->o_proj_bias ? "yes" : "no", a->rope_theta, rope_name(a),
                        a->qk_norm ? "yes" : "no", a->o_proj_bias ? "yes" : "no");
    return DF_OK;
}

int df_rollout_engine_load_weights(df_rollout_engine *e, const df_model *m)
{
    int rc = check_model(e, m);
    if (rc || !e->mm || (e->w16 && e->w16 != e->own16))
        return rc; /* float32 reads m's own; a shared copy is refreshed by its owner */
    /* the one conversion of this weight version: every matmul of the rollout reads it */
    if (!e->own16 && (rc = df_weights16_create_ex(&e->cfg, DF_W16_LM_HEAD, &e->own16)))
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
    /* the tensors of a copy the engine would make (the layers' matmuls and the LM head), with or
     * without the bf16 embedding a mixed-precision actor's copy also holds (read here as float32) */
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

/* The weights a forward reads: m's own, and in bf16 a copy of them at m's current version. */
static int infer_weights(const df_rollout_engine *e, const df_model *m, df_infer_weights *w)
{
    if (e->mm && !df_weights16_is_current(e->w16, m))
        return df_error(DF_EINVAL, "rollout: the bf16 copy of this model's weights is %s (weight "
                        "version %lld, copy of %lld): call df_rollout_engine_load_weights after "
                        "every change of them%s", e->w16 ? "stale" : "not made", (long long)m->version,
                        (long long)df_weights16_source_version(e->w16),
                        e->w16 && e->w16 != e->own16 ? " (a shared copy: its owner refreshes it)" : "");
    *w = (df_infer_weights){&m->w, e->w16};
    return DF_OK;
}

static int check_request(const df_rollout_engine *e, const df_rollout_request *q)
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
    for (int64_t i = 0; i < q->n_prompts; i++) {
        int64_t len = q->prompt_offsets[i + 1] - q->prompt_offsets[i];
        if (len < 1 || len > e->max_seq_len - 1)
            return df_error(DF_EINVAL,
                            "rollout request: prompt %lld has %lld tokens; it must have 1 to "
                            "max_seq_len - 1 = %lld",
                            (long long)i, (long long)len, (long long)(e->max_seq_len - 1));
        for (int64_t t = q->prompt_offsets[i]; t < q->prompt_offsets[i + 1]; t++)
            if (q->prompt_tokens[t] < 0 || q->prompt_tokens[t] >= e->cfg.vocab_size)
                return df_error(DF_EINVAL,
                                "rollout request: prompt %lld token %lld is %d, outside [0, %lld)",
                                (long long)i, (long long)(t - q->prompt_offsets[i]),
                                q->prompt_tokens[t], (long long)e->cfg.vocab_size);
    }
    return DF_OK;
}

/* ---- per-call state ---------------------------------------------------------- */

/* Top-k / top-p need a whole row of logits; everything else samples from
 * per-group statistics of the hidden states (df_vocab_stats / df_vocab_draw). */
static bool sampling_is_fused(const df_sampling_params *sp, int64_t V)
{
    bool greedy = sp->greedy || sp->temperature == 0.0f;
    return greedy || (!(sp->top_k > 0 && sp->top_k < V) && !(sp->top_p < 1.0f));
}

static int ctx_init(gen_ctx *g)
{
    int64_t V = g->e->cfg.vocab_size;
    g->n_seqs = g->req->n_prompts * g->req->n_samples;
    g->is_stop = calloc((size_t)V, 1);
    g->n_threads = omp_get_max_threads();
    g->fused = sampling_is_fused(g->sp, V);
    if (g->fused) {
        /* Groups of one tile: the draw recomputes a single tile of one row. */
        g->tiling = df_vocab_tiling_for(V, g->e->cfg.hidden_size);
        g->tiling.cols = g->tiling.cols < DF_SAMPLE_COLS ? g->tiling.cols : DF_SAMPLE_COLS;
        g->tiling.group = g->tiling.cols;
        g->tiling = df_vocab_tiling_clamp(&g->tiling);
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
    for (int i = 0; i < g->sp->n_stop; i++)
        g->is_stop[g->sp->stop_ids[i]] = 1;
    const df_model_config *c = &g->m->cfg; /* the model's own eos ids */
    for (int i = 0; !g->sp->ignore_eos && i < c->n_eos; i++)
        if (c->eos_token_ids[i] >= 0 && c->eos_token_ids[i] < V)
            g->is_stop[c->eos_token_ids[i]] = 1;
    return DF_OK;
}

static void ctx_release(gen_ctx *g)
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
}

/* Move a finished slot's response into the arena and free the slot. */
static int retire(gen_ctx *g, int64_t si, int8_t reason)
{
    df_rollout_engine *e = g->e;
    slot_state *s = &e->slots[si];
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
    g->seq_start[s->seq] = g->a_len;
    g->seq_len[s->seq] = s->n_gen;
    g->finish[s->seq] = reason;
    g->a_len += s->n_gen;
    g->done++;
    s->active = false;
    return DF_OK;
}

/* ---- sampling -------------------------------------------------------------------- */

/* Record token `tok` (log-prob lp) for slot si. */
static void push_token(df_rollout_engine *e, int64_t si, int32_t tok, float lp)
{
    slot_state *s = &e->slots[si];
    e->out_tok[si * e->max_seq_len + s->n_gen] = tok;
    e->out_logp[si * e->max_seq_len + s->n_gen] = lp;
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
        if (g->is_stop[last])
            rc = retire(g, list[k], DF_FINISH_STOP);
        else if (s->n_gen >= s->limit)
            rc = retire(g, list[k], DF_FINISH_LENGTH);
        if (rc)
            return rc;
    }
    return DF_OK;
}

/* Draw the next token of each listed slot from its logits row, then retire
 * the slots that finished. rows[k] is slot list[k]'s row of e->logits. */
static int sample_slots(gen_ctx *g, const int32_t *list, const int64_t *rows, int64_t n)
{
    df_rollout_engine *e = g->e;
    int64_t V = e->cfg.vocab_size;
#pragma omp parallel for schedule(dynamic, 8) if (n * V > 16384)
    for (int64_t k = 0; k < n; k++) {
        slot_state *s = &e->slots[list[k]];
        void *work = g->work + (int64_t)omp_get_thread_num() * g->work_bytes;
        float lp;
        int32_t tok = df_sample_token(e->logits + rows[k] * V, V, g->sp, &s->rng, work, &lp);
        push_token(e, list[k], tok, lp);
    }
    return retire_finished(g, list, n);
}

/* In bf16, the LM head's operands: the final hidden rows [0, n) rounded into e->h16, padded
 * with zero rows to whole tiles; else all NULL (the float32 head). */
static int head16_rows(df_rollout_engine *e, int64_t n, const df_vocab_tiling *t, df_vocab16 *b)
{
    const uint16_t *W16 = e->w16 ? df_weights16_lm_head(e->w16) : NULL;
    *b = (df_vocab16){NULL, NULL, NULL};
    if (!W16)
        return DF_OK;
    const int64_t H = e->cfg.hidden_size, rows = df_vocab16_rows(n, t);
    const int64_t cap = h16_rows(rows_cap_of(e->max_num_seqs, e->max_batched_tokens));
    if (rows > cap)
        return df_error(DF_EINTERNAL, "rollout: %lld bf16 head rows exceed the %lld allocated",
                        (long long)rows, (long long)cap);
    df_bf16_from_f32(e->h16, e->s.xn, n * H);
    memset(e->h16 + n * H, 0, (size_t)((rows - n) * H) * sizeof(uint16_t));
    *b = (df_vocab16){e->mm, e->h16, W16};
    return DF_OK;
}

/* As sample_slots from the final hidden states e->s.xn[0 .. n_rows): statistics
 * of every row once, then per slot a greedy pick or one inverse-CDF draw. */
static int sample_slots_fused(gen_ctx *g, const int32_t *list, const int64_t *rows, int64_t n,
                              int64_t n_rows)
{
    df_rollout_engine *e = g->e;
    const int64_t V = e->cfg.vocab_size, H = e->cfg.hidden_size, G = g->n_groups;
    const bool greedy = g->sp->greedy || g->sp->temperature == 0.0f;
    const float inv_t = greedy ? 1.0f : 1.0f / g->sp->temperature; /* greedy log-probs at T = 1 */
    const float *W = g->m->w.lm_head, *xn = e->s.xn;
    df_vocab16 b16;
    int rc = head16_rows(e, n_rows, &g->tiling, &b16);
    if (rc)
        return rc;
    const unsigned flags = greedy ? DF_VSTAT_ARGMAX : 0u;
    if (b16.W ? df_vocab_stats16(g->vstat, NULL, NULL, &b16, n_rows, V, H, inv_t, flags, &g->tiling)
              : (df_vocab_stats(g->vstat, NULL, NULL, xn, W, n_rows, V, H, inv_t, flags, &g->tiling), 0))
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
            tok = b16.W ? df_vocab_draw16(st, G, &r, u, &b16, rows[k], V, H, inv_t, &g->tiling,
                                          buf, &z)
                        : df_vocab_draw(st, G, &r, u, xn + rows[k] * H, W, V, H, inv_t,
                                        &g->tiling, buf, &z);
        }
        if (tok < 0) {
#pragma omp atomic write
            failed = 1;
            continue;
        }
        push_token(e, list[k], tok, (float)((double)z - lse));
    }
    if (failed)
        return df_error(DF_EINTERNAL, "rollout: oneDNN failed on a bf16 logits row");
    return retire_finished(g, list, n);
}

/* LM head for rows [r0, r0 + n) of the final hidden states into e->logits (bf16: the
 * head's copy, the rows rounded per call). */
static int logits_of(df_rollout_engine *e, const df_model *m, int64_t r0, int64_t n)
{
    int64_t H = e->cfg.hidden_size, V = e->cfg.vocab_size;
    const uint16_t *W16 = e->w16 ? df_weights16_lm_head(e->w16) : NULL;
    if (W16)
        return df_mm_w16(e->mm, true, n, V, H, 1.0f, e->s.xn + r0 * H, W16, 0.0f, e->logits);
    df_gemm_nt(n, V, H, 1.0f, e->s.xn + r0 * H, m->w.lm_head, 0.0f, e->logits);
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
    s->prompt_len = P;
    s->n_gen = 0;
    s->limit = g->sp->max_new_tokens < e->max_seq_len - P ? g->sp->max_new_tokens
                                                           : e->max_seq_len - P;
    df_rng_seed(&s->rng, df_rng_key(q->seed, key, (uint64_t)j, ROLLOUT_RNG_TAG));
}

/* Run one prefill batch of `na` admissions (rows already in e->b_*), share each
 * prompt's KV with the other slots of its admission and draw first tokens.
 * sl, rows: scratch of max_num_seqs entries. */
static int run_prefill(gen_ctx *g, int64_t n_rows, const admission *ad, int64_t na,
                       const int32_t *aslots, int32_t *sl, int64_t *rows)
{
    df_rollout_engine *e = g->e;
    df_infer_batch b = {n_rows, e->b_tok, e->b_slot, e->b_pos, na, e->b_out};
    int rc = df_infer_forward(&e->be, &e->cfg, &g->w, &e->kv, &e->s, &b);
    if (rc)
        return rc;
    e->stats.prefill_tokens += n_rows;
    e->stats.prefill_batches++;
    for (int64_t a = 0; a < na && !rc; a++) {
        const admission *x = &ad[a];
        int64_t P = g->req->prompt_offsets[x->prompt + 1] - g->req->prompt_offsets[x->prompt];
        for (int64_t c = 1; c < x->cnt && !rc; c++)
            rc = e->be.ops->kv_copy(e->be.ctx, &e->kv, aslots[x->slots_at],
                                    aslots[x->slots_at + c], P);
        for (int64_t c = 0; c < x->cnt; c++)
            start_slot(g, aslots[x->slots_at + c], x->prompt, x->j0 + c);
    }
    if (rc || na == 0) /* a prompt's chunk that does not end it: nothing to sample yet */
        return rc;
    /* First tokens: every slot of admission a samples from hidden row a. */
    if (g->fused) {
        int64_t n = 0;
        for (int64_t a = 0; a < na; a++)
            for (int64_t c = 0; c < ad[a].cnt; c++) {
                sl[n] = aslots[ad[a].slots_at + c];
                rows[n++] = a;
            }
        return sample_slots_fused(g, sl, rows, n, na);
    }
    for (int64_t a0 = 0; a0 < na && !rc; a0 += e->logit_rows) {
        int64_t nr = na - a0 < e->logit_rows ? na - a0 : e->logit_rows, n = 0;
        rc = logits_of(e, g->m, a0, nr);
        for (int64_t a = a0; a < a0 + nr; a++)
            for (int64_t c = 0; c < ad[a].cnt; c++) {
                sl[n] = aslots[ad[a].slots_at + c];
                rows[n++] = a - a0;
            }
        if (!rc)
            rc = sample_slots(g, sl, rows, n);
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
    if (g->pend.on)
        return plan_chunk(g, ad, aslots, n_rows);
    int64_t nfree = 0, na = 0, rows = 0, ns = 0, scan = 0;
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
        e->b_out[na++] = rows - 1;
        nfree -= cnt;
        advance(g, cnt);
    }
    *n_rows = rows;
    return na;
}

/* Admit prompt groups into free slots, prefilling them in token-budgeted
 * batches; repeat while slots freed by immediately finished samples allow. */
static int admit(gen_ctx *g, admission *ad, int32_t *aslots, int32_t *list, int64_t *lrows)
{
    for (;;) {
        int64_t rows, na = plan_prefill(g, ad, aslots, &rows);
        if (na == 0 && rows == 0)
            return DF_OK;
        int rc = run_prefill(g, rows, ad, na, aslots, list, lrows);
        if (rc)
            return rc;
        if (g->progress)
            g->progress(g->user, g->done, g->n_seqs, g->tokens);
    }
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
    df_infer_batch b = {n, e->b_tok, e->b_slot, e->b_pos, n, NULL};
    int rc = df_infer_forward(&e->be, &e->cfg, &g->w, &e->kv, &e->s, &b);
    e->stats.decode_steps++;
    e->stats.mean_active += (double)n;
    if (!rc && g->fused) {
        for (int64_t k = 0; k < n; k++)
            rows[k] = k;
        rc = sample_slots_fused(g, list, rows, n, n);
    }
    for (int64_t r0 = 0; !rc && !g->fused && r0 < n; r0 += e->logit_rows) {
        int64_t nr = n - r0 < e->logit_rows ? n - r0 : e->logit_rows;
        rc = logits_of(e, g->m, r0, nr);
        for (int64_t k = 0; k < nr; k++)
            rows[k] = k;
        if (!rc)
            rc = sample_slots(g, list + r0, rows, nr);
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
    return DF_OK;
}

static int generate_loop(gen_ctx *g)
{
    df_rollout_engine *e = g->e;
    size_t ns = (size_t)e->max_num_seqs;
    admission *ad = malloc(ns * sizeof *ad);
    int32_t *aslots = malloc(ns * sizeof *aslots), *list = malloc(ns * sizeof *list);
    int64_t *rows = malloc(ns * sizeof *rows);
    int rc = (!ad || !aslots || !list || !rows)
                 ? df_error(DF_ENOMEM, "rollout: out of memory for the scheduler")
                 : DF_OK;
    while (!rc && g->done < g->n_seqs) {
        rc = admit(g, ad, aslots, list, rows);
        if (!rc && g->done < g->n_seqs) {
            df_kill_point("gen"); /* test-only: a crash mid-generation */
            rc = decode_step(g, list, rows);
        }
    }
    free(ad);
    free(aslots);
    free(list);
    free(rows);
    return rc;
}

/* The activation scratch's pages back to the OS: dead between calls, and as large as a
 * quarter of the weights at 8192 rows per forward. */
static void drop_scratch(df_rollout_engine *e)
{
    const int64_t V = e->cfg.vocab_size, H = e->cfg.hidden_size;
    df_infer_scratch_drop(&e->s, &e->cfg);
    df_pages_release(e->logits, (size_t)(e->logit_rows * V) * sizeof(float));
    if (e->h16)
        df_pages_release(e->h16, (size_t)(h16_rows(rows_cap_of(e->max_num_seqs, e->max_batched_tokens)) * H) *
                                     sizeof(uint16_t));
    df_mm_ctx_release_pages(e->mm);
}

int df_rollout_generate(df_rollout_engine *e, const df_model *m, const df_rollout_request *req,
                        const df_sampling_params *sp, df_rollout_result *res,
                        df_rollout_progress_fn progress, void *user)
{
    memset(res, 0, sizeof *res);
    if (!e || !m || !req || !sp)
        return df_error(DF_EINVAL, "rollout: NULL engine, model, request or params");
    int rc = check_model(e, m);
    if (!rc)
        rc = df_sampling_params_validate(sp, e->cfg.vocab_size);
    if (!rc)
        rc = check_request(e, req);
    if (rc)
        return rc;
    double t0 = omp_get_wtime();
    memset(&e->stats, 0, sizeof e->stats);
    for (int64_t s = 0; s < e->max_num_seqs; s++)
        e->slots[s].active = e->slots[s].reserved = false;
    gen_ctx g = {.e = e, .m = m, .req = req, .sp = sp, .progress = progress, .user = user};
    rc = infer_weights(e, m, &g.w);
    if (!rc)
        rc = ctx_init(&g);
    if (!rc)
        rc = generate_loop(&g);
    if (!rc)
        rc = pack_result(&g, res);
    ctx_release(&g);
    /* free_cache_engine: training does not carry the cache's or the scratch's pages (the next
     * call refaults them) */
    int drc = e->opt.free_cache_engine ? df_kv_cache_drop(&e->kv) : DF_OK;
    if (e->opt.free_cache_engine)
        drop_scratch(e);
    if (!rc && drc)
        rc = drc;
    e->stats.generated_tokens = g.tokens;
    if (e->stats.decode_steps)
        e->stats.mean_active /= (double)e->stats.decode_steps;
    e->stats.seconds = omp_get_wtime() - t0;
    return rc;
}
