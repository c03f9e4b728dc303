/* LoRA in the backward (distflow/lora.h): the adapter's gradients at each targeted projection. */
#include "distflow/lora.h"
#include "model/acts.h"
#include "model/lora_grad.h"

#include <stdlib.h>

int df_acts_set_lora(df_acts *a, const df_lora *l, float *grads)
{
    free(a->lgrads);
    free(a->lora_t);
    free(a->lora_u);
    a->lora = NULL;
    a->lgrad_blob = NULL;
    a->lgrads = NULL;
    a->lora_t = a->lora_u = NULL;
    if (!l)
        return DF_OK;
    if (!a->be.ops->host_memory)
        return df_error(DF_EUNSUPPORTED, "LoRA: the %s backend (adapters train on the CPU "
                        "backend only)", a->be.ops->name);
    if (l->mcfg.num_hidden_layers != a->cfg.num_hidden_layers ||
        l->mcfg.hidden_size != a->cfg.hidden_size ||
        l->mcfg.intermediate_size != a->cfg.intermediate_size)
        return df_error(DF_EINVAL, "df_acts_set_lora: the adapter is for another model shape");
    if ((a->cfg.num_labels == 1) != (l->head >= 0))
        return df_error(DF_EINVAL, "df_acts_set_lora: the adapter is for a %s, the activations "
                        "a %s's", l->head >= 0 ? "value model" : "causal LM",
                        a->cfg.num_labels ? "value model" : "causal LM");
    if (!grads)
        return df_error(DF_EINVAL, "df_acts_set_lora: no gradient blob");
    const size_t n = (size_t)(a->max_tokens * l->cfg.rank);
    a->lgrads = calloc((size_t)a->cfg.num_hidden_layers, sizeof *a->lgrads);
    a->lora_t = malloc((n ? n : 1) * sizeof(float));
    a->lora_u = malloc((n ? n : 1) * sizeof(float));
    if (!a->lgrads || !a->lora_t || !a->lora_u) {
        df_acts_set_lora(a, NULL, NULL);
        return df_error(DF_ENOMEM, "LoRA: backward scratch of 2 x %zu floats", n);
    }
    df_lora_view_of(l, grads, a->lgrads);
    a->lgrad_blob = grads;
    a->lora = l;
    return DF_OK;
}

void df_lora_weight_grad(df_acts *a, int64_t l, df_lora_target t, const float *dy, const float *x,
                         int64_t n, int64_t out_dim, int64_t in_dim, float *dw)
{
    if (dw) /* the base weight's own gradient: dW += dY^T X */
        DF_BE(a, gemm, true, false, out_dim, in_dim, n, 1.0f, dy, x, 1.0f, dw);
    const df_lora *lo = a->lora;
    if (!lo || !lo->layers[l].a[t])
        return;
    const int64_t r = lo->cfg.rank;
    const float *A = lo->layers[l].a[t], *B = lo->layers[l].b[t];
    float *dA = a->lgrads[l].a[t], *dB = a->lgrads[l].b[t];
    /* t = X A^T [n, r]; dB += s dY^T t [out, r]; u = dY B [n, r]; dA += s u^T X [r, in] */
    DF_BE(a, gemm, false, true, n, r, in_dim, 1.0f, x, A, 0.0f, a->lora_t);
    DF_BE(a, gemm, true, false, out_dim, r, n, lo->scale, dy, a->lora_t, 1.0f, dB);
    DF_BE(a, gemm, false, false, n, r, out_dim, 1.0f, dy, B, 0.0f, a->lora_u);
    DF_BE(a, gemm, true, false, r, in_dim, n, lo->scale, a->lora_u, x, 1.0f, dA);
}
