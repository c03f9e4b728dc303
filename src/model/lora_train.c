/* LoRA in the backward (distflow/lora.h): the adapter's gradients at each targeted projection. */
#include "distflow/lora.h"
#include "model/acts.h"
#include "model/lora_grad.h"

#include <stdlib.h>

void df_acts_lora_release(df_acts *a)
{
    float *bufs[] = {a->lora_t, a->lora_u, a->lora_dev}; /* backend memory */
    for (int i = 0; i < 3; i++)
        if (bufs[i])
            a->be.ops->release(a->be.ctx, bufs[i]);
    free(a->lgrads);
    free(a->lparams);
    a->lora = NULL;
    a->lgrad_blob = a->lora_dev = a->lora_t = a->lora_u = NULL;
    a->lgrads = a->lparams = NULL;
}

int df_acts_lora_sync(df_acts *a)
{
    if (!a->lora || !a->lora_dev)
        return DF_OK;
    int rc = a->be.ops->upload(a->be.ctx, a->lora_dev, a->lora->params,
                               (size_t)a->lora->n_params * sizeof(float));
    return rc ? df_error_wrap(rc, "LoRA: the adapter to the %s backend", a->be.ops->name) : DF_OK;
}

/* Backend buffers of n floats each, into *p (none on error). */
static int alloc_floats(df_acts *a, size_t n, float **p)
{
    return a->be.ops->alloc(a->be.ctx, (n ? n : 1) * sizeof(float), (void **)p);
}

int df_acts_set_lora(df_acts *a, const df_lora *l, float *grads)
{
    df_acts_lora_release(a);
    if (!l)
        return DF_OK;
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
    const bool host = a->be.ops->host_memory;
    a->lgrads = calloc((size_t)a->cfg.num_hidden_layers, sizeof *a->lgrads);
    a->lparams = calloc((size_t)a->cfg.num_hidden_layers, sizeof *a->lparams);
    int rc = a->lgrads && a->lparams ? DF_OK : df_error(DF_ENOMEM, "LoRA: views");
    if (!rc)
        rc = alloc_floats(a, n, &a->lora_t);
    if (!rc)
        rc = alloc_floats(a, n, &a->lora_u);
    if (!rc && !host) /* the adapter where the backend reads it, uploaded at every change */
        rc = alloc_floats(a, (size_t)l->n_params, &a->lora_dev);
    if (rc) {
        df_acts_lora_release(a);
        return df_error_wrap(rc, "LoRA: the backward's buffers (2 x %zu floats of scratch)", n);
    }
    df_lora_view_of(l, grads, a->lgrads);
    df_lora_view_of(l, host ? l->params : a->lora_dev, a->lparams);
    a->lgrad_blob = grads;
    a->lora = l;
    return df_acts_lora_sync(a);
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
    const float *A = a->lparams[l].a[t], *B = a->lparams[l].b[t];
    float *dA = a->lgrads[l].a[t], *dB = a->lgrads[l].b[t];
    /* t = X A^T [n, r]; dB += s dY^T t [out, r]; u = dY B [n, r]; dA += s u^T X [r, in] */
    DF_BE(a, gemm, false, true, n, r, in_dim, 1.0f, x, A, 0.0f, a->lora_t);
    DF_BE(a, gemm, true, false, out_dim, r, n, lo->scale, dy, a->lora_t, 1.0f, dB);
    DF_BE(a, gemm, false, false, n, r, out_dim, 1.0f, dy, B, 0.0f, a->lora_u);
    DF_BE(a, gemm, true, false, r, in_dim, n, lo->scale, a->lora_u, x, 1.0f, dA);
}
