/* lora_grad.h (internal) — a projection's weight gradients in the backward (lora_train.c). */
#ifndef DF_MODEL_LORA_GRAD_H
#define DF_MODEL_LORA_GRAD_H

#include "distflow/lora.h"
#include "model/acts.h"

/*
 * The weight gradients of projection t of layer l, given its input x [n, in_dim] and output
 * gradient dy [n, out_dim]: dw += dy^T x when dw (the base weight's gradient) is not NULL, and,
 * when a LoRA adapter is attached to a (df_acts_set_lora) and targets it, the adapter's
 * dB += s dy^T (x A^T), dA += s (dy B)^T x. Failures land in a->err.
 */
void df_lora_weight_grad(df_acts *a, int64_t l, df_lora_target t, const float *dy, const float *x,
                         int64_t n, int64_t out_dim, int64_t in_dim, float *dw);

/* Give back a's LoRA buffers (df_acts_set_lora's) and detach; df_acts_free calls it. */
void df_acts_lora_release(df_acts *a);

#endif
