/*
 * acts.h (internal) — the layout of df_acts: activations saved by
 * df_model_forward for df_model_backward, plus the backward's scratch. Every
 * buffer is sized once for max_tokens / max_out rows (RL micro-batches vary in
 * size) and reused; row-major with T = the current batch's n_tokens rows.
 *
 * Per-layer buffers have one slot per layer, or a single one with
 * activation checkpointing (DF_ACTS_CHECKPOINT), where the forward keeps only
 * the residual stream x entering each layer and the backward recomputes layer
 * l's slot from x[l] (df_acts_layer_recompute) just before its backward. Forward-only
 * activations (DF_ACTS_FORWARD_ONLY) have one slot, two residual buffers used in turn
 * (df_acts_x) and none of the backward's buffers (NULL).
 */
#ifndef DF_MODEL_ACTS_H
#define DF_MODEL_ACTS_H

#include "distflow/backend.h"
#include "distflow/model.h"
#include "model/ops.h"
#include "model/weights_dev.h"

struct df_lora;
struct df_lora_layer;

/* A batch as the backend sees it: index arrays in its memory (the CPU's alias the caller's). */
typedef struct df_acts_batch {
    const int32_t *tokens, *targets, *pos; /* [T], [n_out], [T] */
    const int64_t *rows;                   /* [n_out] */
    df_backend_seqs seqs;
    const int32_t *routes_in;              /* router replay (df_seq_batch's, host memory), or NULL */
    int32_t *routes_out;
} df_acts_batch;

struct df_acts {
    df_model_config cfg;
    int64_t max_tokens, max_out;
    int64_t mlp_rows;    /* rows of gate / up / mlp_a: checkpointed or forward-only, the MLP runs
                          * in chunks of DF_MLP_CHUNK_ROWS (decoder_layer.h); else max_tokens */
    bool ckpt;           /* DF_ACTS_CHECKPOINT: one slot of per-layer activations, recomputed */
    bool fwd_only;       /* DF_ACTS_FORWARD_ONLY: no backward; x holds 2 rows of slots */
    int64_t slot_layer;  /* ckpt: the layer whose activations the slot holds (set by
                          * df_acts_layer_recompute; -1 from a forward's start until then),
                          * so the backward does not recompute the forward's last layer */
    int64_t bytes;       /* backend memory of the buffers below (df_acts_bytes) */
    /* Where every buffer below lives and every operator runs (backend memory unless noted). */
    df_backend be;
    int err;             /* first failure of a backend call in this pass (DF_BE) */
    df_acts_batch bb;    /* the current batch, staged by df_acts_stage */
    /* A device backend's copies: the batch's index arrays and the head's inputs / outputs. */
    int32_t *b_tokens, *b_targets, *b_pos;
    int64_t *b_offsets, *b_rows;
    float *b_io;         /* [4][max_out]: logp, sum_pi_sq, dlogp, dentropy */
    /* A device backend's weights (df_acts_load_weights); the CPU reads the model's own. */
    df_weights_dev wdev;
    df_weights_dev *wlent; /* df_acts_borrow_weights: read instead of wdev (never allocated then) */
    /* Saved per layer l: x always ([L + 1], stride max_tokens rows); the rest in slot
     * df_acts_slot(a, l): 1 slot with ckpt, else num_hidden_layers (written "[L]" below). */
    float *x;            /* [L + 1][T, H] residual stream entering layer l (x[L]: leaving the last);
                          * forward-only [2][T, H]: df_acts_x */
    float *hmid;         /* [L][T, H] residual after attention (forward-only: NULL, x's other one) */
    float *xn1, *xn2;    /* [L][T, H] inputs of the q/k/v and gate/up projections; post_norm:
                          * the attention's and the MLP's outputs (their norms' inputs) */
    float *rstd1, *rstd2;/* [L][T] (post_norm: of those norms) */
    float *q;            /* [L][T, nh * hd] after RoPE */
    float *k, *v;        /* [L][T, nkv * hd] (k after RoPE) */
    /* q/k norms (qk_norm only, else NULL): their inputs (the projections) and row statistics. */
    float *qraw, *kraw;  /* [L][T, nh * hd], [L][T, nkv * hd] */
    float *qrstd, *krstd;/* [L][T * nh], [L][T * nkv] (qk_norm_full: T of each used) */
    float *att;          /* [L][T, nh * hd] attention output (o_proj input) */
    float *att_lse;      /* [L][T, nh] */
    float *gate, *up;    /* [L][T, I]; checkpointed / forward-only: [mlp_rows, I], one chunk */
    /* Output rows (only these go through the final norm and the LM head). */
    float *xf, *xnf;     /* [max_out, H] */
    float *rstdf, *lse, *ent; /* [max_out] */
    /* Positions and RoPE tables. */
    int32_t *pos;        /* [max_tokens] host memory */
    float *rope_cos, *rope_sin; /* [max_tokens, rope_dim / 2] */
    float *rope_cos_local, *rope_sin_local; /* the local RoPE's (rope_local_theta > 0), else NULL */
    /* gemma3_text's sandwich norms (sandwich_norm, else NULL): the input norm's and the
     * pre-feedforward norm's outputs and statistics, and the backward's second [T, H] gradient */
    float *xin, *xff;    /* [L][T, H] */
    float *rstdin, *rstdff; /* [L][T] */
    float *dxn2;         /* [T, H] */
    /* norm_plus_one: the (1 + w) norm weights (df_norm_shift_view) and the view reading them,
     * made by df_acts_weights for every pass */
    float *nshift;       /* df_norm_shift_floats(cfg) */
    df_layer_view *nshift_layers; /* [L] host */
    df_model_view nshift_view;
    /* Scratch: mlp_a (forward and backward), the others the backward's (forward-only: NULL). */
    float *mlp_a;        /* [mlp_rows, I] silu(gate) * up, then its gradient */
    struct df_moe_ws *moe; /* a model with experts: the sparse layers' scratch (host) for
                          * mlp_rows rows; else NULL */
    float *dres, *dxn;   /* [T, H] */
    float *dq, *dk, *dv, *dao; /* [T, nh*hd], [T, nkv*hd] x2, [T, nh*hd] */
    float *dxf, *dxnf;   /* [max_out, H] */
    float *dqn, *dkn;    /* [T, nh*hd], [T, nkv*hd]: gradients of the q/k norms' inputs (qk_norm) */
    float *ones;         /* [max_tokens] of 1: adds the o_proj bias as a rank-1 GEMM (o_proj_bias) */
    float *lm_scratch;   /* df_lmhead_scratch_floats(max_out, V, H); 1 float for a value model */
    df_layer_view *gview_layers; /* [L] for views of the gradient blob */
    df_mm_ctx *mm;       /* bf16 matmul context, NULL: float32 matmuls */
    df_weights16 *w16;   /* mixed precision (with mm): the bf16 copy of the weights the layers'
                          * matmuls read: made and refreshed by df_acts_load_weights, or another
                          * owner's (w16_shared, df_acts_share_weights16); NULL: float32 */
    bool w16_shared;
    /* Mixed precision on a device (no mm there): be.ops is ops16, the device's table with gemm
     * replaced by its gemm_bf16 (what the CPU's gemm does under mm); be32 the device as given,
     * for the float32 GEMMs of the value head (the CPU's sums those in double, unrounded). */
    bool dev16;
    df_backend_ops ops16;
    df_backend be32;
    /* The last forward, checked by the backward. */
    int64_t fwd_tokens, fwd_out;
    float fwd_temperature;
    int fwd_entropy; /* entropy computed (the backward needs it for dentropy) */
    int fwd_valid;
    int fwd_head;    /* DF_ACTS_HEAD_*: which head ran, so a backward of the other kind fails */
    /* LoRA (df_acts_set_lora): the adapter, views of its gradient blob and of its A / B where the
     * backend reads them (the adapter's own blob, or a device copy: lora_dev), and the backward's
     * [max_tokens, r] scratch for t = X A^T and u = dY B, in backend memory. NULL: none. */
    const struct df_lora *lora;
    struct df_lora_layer *lgrads, *lparams; /* [L] */
    float *lgrad_blob;            /* the adapter's gradient blob (its head: a value model's) */
    float *lora_dev;              /* a device's copy of the adapter's blob (df_acts_lora_sync) */
    float *lora_t, *lora_u;
};

enum { DF_ACTS_HEAD_LM = 0, DF_ACTS_HEAD_VALUE = 1 };

/* Rows per MLP chunk when the layer's activations are not all kept (checkpointed, forward-only):
 * gate / up / act of [T, I] were the largest activations (3 x 190 MB at 9,750 tokens of the
 * 0.5B shape); at 2048 rows the GEMMs keep their speed (M >= 2048) and the weight gradients'
 * K = 2048. */
#define DF_MLP_CHUNK_ROWS 2048

/* Call operator `op` of a's backend unless an earlier call of this pass failed; the first
 * failure (and its df_last_error message) stays in a->err. */
#define DF_BE(a, op, ...) \
    ((a)->err ? (void)0 : (void)((a)->err = (a)->be.ops->op((a)->be.ctx, __VA_ARGS__)))

/* DF_BE on the device's float32 table (be32) under mixed precision on a device, else a->be:
 * a GEMM the CPU does not round either (the value head's). */
#define DF_BE32(a, op, ...)                                                                      \
    ((a)->err ? (void)0                                                                          \
              : (void)((a)->err = ((a)->dev16 ? (a)->be32 : (a)->be).ops->op((a)->be.ctx, __VA_ARGS__)))

/* Stage b's index arrays for the backend (a->bb) and the positions (a->pos). */
int df_acts_stage(df_acts *a, const df_seq_batch *b);
/* The weights the backend reads: m's own (CPU), or the copy df_acts_load_weights made; with
 * norm_plus_one a view whose norms are 1 + w (made here, into a->nshift). */
int df_acts_weights(df_acts *a, const df_model *m, const df_model_view **w);
/*
 * A device backend's forwards read `w` (float32, in a's backend memory, m's layout; its owner's,
 * outliving a) instead of a copy of their own: the optimizer's master weights, which the
 * trainer keeps on the device (train_core.c, dev_optim), so the model is held once, not twice.
 * df_acts_load_weights then uploads into w only when it does not hold m's current version
 * (df_weights_dev_sync without force: the owner keeps w's version). No-op on host memory.
 */
void df_acts_borrow_weights(df_acts *a, df_weights_dev *w);

/* Per-layer slices: the slot holding layer l's saved activations. */
static inline int64_t df_acts_slot(const df_acts *a, int64_t l)
{
    return a->ckpt || a->fwd_only ? 0 : l;
}

/* The residual stream entering layer l (l = L: leaving the last layer): its own row of x, or
 * forward-only, one of two rows in turn (layer l reads x[l % 2] and writes the other). */
static inline float *df_acts_x(const df_acts *a, int64_t l)
{
    return a->x + (a->fwd_only ? l % 2 : l) * a->max_tokens * a->cfg.hidden_size;
}

/* The bf16 embedding the lookup reads in mixed precision (the copy holds it), else NULL. */
static inline const uint16_t *df_acts_embed16(const df_acts *a)
{
    return a->w16 && a->be.ops->embedding_fwd_w16 ? df_weights16_embed(a->w16) : NULL;
}

static inline int64_t df_acts_qd(const df_acts *a)
{
    return a->cfg.num_attention_heads * a->cfg.head_dim;
}
static inline int64_t df_acts_kvd(const df_acts *a)
{
    return a->cfg.num_key_value_heads * a->cfg.head_dim;
}

/**
 * Layer l's saved activations (its slot: norms, q / k / v, attention, gate / up) computed
 * again from x[l] with the forward's kernels, for the backward of a checkpointed pass. The
 * batch is the one staged (a->bb). Sets a->slot_layer = l. Failures land in a->err. A post-norm
 * layer (olmo2) runs whole, writing x[l + 1] again with its own bits.
 */
void df_acts_layer_recompute(const df_model_config *c, const df_layer_view *w, df_acts *a,
                             int64_t l);

/**
 * Mixed precision on or off (DF_ACTS_BF16 of df_acts_create_ex, docs/mixed_precision.md):
 * the decoder layers' matmuls in bf16 with float32 accumulation, weights read from a bf16
 * copy that df_acts_load_weights fills (call it before the next forward), the weight
 * gradients' matmuls rounding both operands; the LM head, norms, attention and everything
 * else stay float32. Off frees the copy. Errors: DF_EUNSUPPORTED (a backend without
 * gemm_w16; df_mm_ctx_create's without AMX-BF16 / AVX512-BF16), DF_ENOMEM.
 */
int df_acts_set_bf16_matmul(df_acts *a, bool on);

/* Mixed precision is on: the CPU's bf16 context, or a device's bf16 table. */
static inline bool df_acts_mixed(const df_acts *a)
{
    return a->mm || a->dev16;
}

/* Layer l's bf16 weights in mixed precision, else NULL (float32 matmuls). */
static inline const df_layer16 *df_acts_layer16(const df_acts *a, int64_t l)
{
    return a->w16 ? df_weights16_layer(a->w16, l) : NULL;
}

/* The LM head's bf16 copy when the head runs in mixed precision (the copy holds it and the
 * backend has the bf16 head), else NULL: the float32 head. */
static inline const uint16_t *df_acts_lm_head16(const df_acts *a)
{
    return a->w16 && a->be.ops->lmhead_fwd_w16 && a->be.ops->lmhead_bwd_w16
               ? df_weights16_lm_head(a->w16)
               : NULL;
}

/* C = alpha A op(W) + beta C for a layer weight W (tb: W [N,K] transposed, else W [K,N]):
 * from its bf16 copy W16 when there is one (mixed precision), else the float32 GEMM. */
#define DF_WMM(a, tb, M, N, K, alpha, A, W, W16, beta, C)                              \
    do {                                                                               \
        if (W16)                                                                       \
            DF_BE(a, gemm_w16, tb, M, N, K, alpha, A, W16, beta, C);                   \
        else                                                                           \
            DF_BE(a, gemm, false, tb, M, N, K, alpha, A, W, beta, C);                  \
    } while (0)

/**
 * Check a batch for the LM head against the model and the sizes `a` was created
 * for (DF_EINVAL with the reason): also the temperature, out_targets and that
 * `a` was not created for a value model (it then has no LM-head scratch).
 */
int df_acts_check_batch(const df_acts *a, const df_model_config *cfg, const df_seq_batch *b,
                        float temperature);

#endif /* DF_MODEL_ACTS_H */
