/*
 * distflow/optim.h — AdamW, global-norm gradient clipping and learning-rate
 * schedules over flat float32 blobs (docs/conventions.md §4: parameters, gradients and
 * both moments share the model's layout, so every operation is one loop).
 *
 * The usual step, as verl's actor does it:
 *   norm = df_clip_grad_norm(grads, n, max_norm);
 *   if (isfinite(norm)) df_adamw_step(opt, params, grads, lr * df_lr_schedule_factor(&s, k));
 *   else skip the update (verl logs "grad_norm is not finite" and zeroes the grads)
 */
#ifndef DISTFLOW_OPTIM_H
#define DISTFLOW_OPTIM_H

#include "distflow/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- AdamW (Loshchilov & Hutter 2019; torch.optim.AdamW) ----------------------- */

typedef struct df_adamw_config {
    double beta1;        /**< exp_avg decay, torch default 0.9 */
    double beta2;        /**< exp_avg_sq decay, torch default 0.999 */
    double eps;          /**< added outside the square root, torch default 1e-8 */
    double weight_decay; /**< decoupled, applied to every parameter; torch default 0.01 */
} df_adamw_config;

/**
 * Optimizer state. m and v are [n] float32 blobs with the parameter layout;
 * step counts the updates taken (torch's state["step"]). All three are what a
 * checkpoint saves and restores; nothing else is hidden.
 */
typedef struct df_adamw {
    df_adamw_config cfg;
    int64_t n;    /**< elements in params / grads / m / v */
    int64_t step; /**< updates taken so far; the next update uses step + 1 */
    float *m;     /**< [n] first moment (exp_avg), 64-byte aligned */
    float *v;     /**< [n] second moment (exp_avg_sq), 64-byte aligned */
} df_adamw;

/** torch.optim.AdamW defaults: betas (0.9, 0.999), eps 1e-8, weight_decay 0.01. */
DF_API void df_adamw_config_defaults(df_adamw_config *cfg);

/**
 * Allocate zeroed state for n parameters. DF_EINVAL if n <= 0 or a
 * hyper-parameter is out of range (betas in [0, 1), eps > 0, weight_decay >= 0);
 * DF_ENOMEM.
 */
DF_API int df_adamw_create(const df_adamw_config *cfg, int64_t n, df_adamw **out);
DF_API void df_adamw_free(df_adamw *opt);
/** Zero m, v and the step counter. */
DF_API void df_adamw_reset(df_adamw *opt);

/**
 * One update of params[n] from grads[n] at learning rate lr (the schedule
 * already applied), in float32 with torch's single-tensor formulas, t = ++step:
 *   p -= lr * wd * p
 *   m  = b1 m + (1 - b1) g;   v = b2 v + (1 - b2) g^2
 *   p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
 * DF_EINVAL if lr < 0 or not finite.
 */
DF_API int df_adamw_step(df_adamw *opt, float *params, const float *grads, double lr);

/* ---- gradient clipping (torch.nn.utils.clip_grad_norm_) ---------------------------- */

/** Global L2 norm sqrt(sum g^2) of grads[n], accumulated in double. */
DF_API double df_grad_norm(const float *grads, int64_t n);

/**
 * Returns the pre-clip global L2 norm. When it is finite and
 * c = max_norm / (norm + 1e-6) < 1, scales grads by c (torch's clip_coef
 * clamped to 1). A non-finite norm (inf / NaN) leaves grads untouched and is
 * returned as is, so the caller can skip the step. max_norm <= 0 only
 * measures.
 */
DF_API double df_clip_grad_norm(float *grads, int64_t n, double max_norm);

/* ---- learning-rate schedules (verl.utils.torch_functional) ----------------------- */

typedef enum df_lr_kind {
    DF_LR_CONSTANT = 0, /**< get_constant_schedule_with_warmup */
    DF_LR_COSINE = 1,   /**< get_cosine_schedule_with_warmup */
    DF_LR_WSD = 2       /**< get_wsd_schedule_with_warmup (warmup, stable, cosine decay; verl's SFT) */
} df_lr_kind;

/** WSD: the share of the steps after warmup held at the peak (verl's stable_ratio default). */
#define DF_LR_WSD_STABLE_RATIO 0.9

typedef struct df_lr_schedule {
    df_lr_kind kind;
    int64_t warmup_steps; /**< linear warmup from 0 over this many steps (0: none) */
    int64_t total_steps;  /**< cosine, wsd: num_training_steps */
    double min_lr_ratio;  /**< cosine, wsd: floor as a fraction of the peak lr, in [0, 1] (verl default 0) */
    double num_cycles;    /**< cosine, wsd: waves over the decay (verl default 0.5: one half-cosine) */
} df_lr_schedule;

/** Parse verl's warmup_style name: "constant" or "cosine" (DF_EINVAL names the value). */
DF_API int df_lr_kind_parse(const char *name, df_lr_kind *out);

/**
 * The factor the peak lr is multiplied by at scheduler step `step` (0 for the
 * first update; LambdaLR's lr_lambda):
 *   step < warmup:  step / max(1, warmup)
 *   constant:       1
 *   cosine:         p = (step - warmup) / max(1, total - warmup),
 *                   max(0, cos(2 pi num_cycles p) (1 - min) / 2 + (1 + min) / 2)
 *   wsd:            r = max(0, total - warmup), S = floor(0.9 r) stable steps, D = r - S:
 *                   1 while step < warmup + S; then, while step < total,
 *                   p = (step - warmup - S) / max(1, D),
 *                   (1 - min) max(0, (1 + cos(2 pi num_cycles p)) / 2) + min; min after
 *                   (verl.utils.torch_functional.get_wsd_schedule_with_warmup)
 */
DF_API double df_lr_schedule_factor(const df_lr_schedule *s, int64_t step);

#ifdef __cplusplus
}
#endif
#endif /* DISTFLOW_OPTIM_H */
