/*
 * A model's tensors as its Hugging Face checkpoint holds them (hf_io.h): the layout's own tensors,
 * except that phi3 stores each layer's q / k / v weights as one qkv_proj and its gate / up weights
 * as one gate_up_proj (modeling_phi3: the rows of q, then k, then v; gate's rows, then up's).
 */
#include "model/hf_io.h"
#include "model/strutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool df_model_fused_projections(const df_model_config *c) { return !strcmp(c->model_type, "phi3"); }

/* The fused tensor that layout tensors first .. first + n - 1 (named `*suffix[0]`, ...) form. */
static int fuse(const df_model *m, int first, const char *const *suffix, int n, const char *fused,
                df_hf_tensor *t)
{
    const df_param_desc *d = &m->tensors[first];
    size_t plen = strlen(d->name) - strlen(suffix[0]);
    *t = (df_hf_tensor){.ndim = 2, .shape = {0, d->shape[1]}, .n_parts = n};
    for (int k = 0; k < n; k++) {
        const df_param_desc *p = first + k < m->n_tensors ? &m->tensors[first + k] : NULL;
        if (!p || strncmp(p->name, d->name, plen) || strcmp(p->name + plen, suffix[k]) || p->ndim != 2 ||
            p->shape[1] != d->shape[1])
            return df_error(DF_EINTERNAL, "%s: the layout does not place %s next to it", d->name, suffix[k]);
        t->part[k] = first + k;
        t->shape[0] += p->shape[0];
        t->numel += p->numel;
    }
    snprintf(t->name, sizeof t->name, "%.*s%s", (int)plen, d->name, fused);
    return DF_OK;
}

int df_hf_tensor_table(const df_model *m, df_hf_tensor **out, int *n)
{
    static const char *const qkv[] = {"self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                      "self_attn.v_proj.weight"};
    static const char *const gate_up[] = {"mlp.gate_proj.weight", "mlp.up_proj.weight"};
    const bool fused = df_model_fused_projections(&m->cfg);
    df_hf_tensor *t = calloc((size_t)(m->n_tensors ? m->n_tensors : 1), sizeof *t);
    if (!t)
        return df_error(DF_ENOMEM, "out of memory");
    int k = 0, rc = DF_OK;
    for (int i = 0; i < m->n_tensors && !rc; k++) {
        const df_param_desc *d = &m->tensors[i];
        if (fused && df_ends_with(d->name, qkv[0])) {
            rc = fuse(m, i, qkv, 3, "self_attn.qkv_proj.weight", &t[k]);
        } else if (fused && df_ends_with(d->name, gate_up[0])) {
            rc = fuse(m, i, gate_up, 2, "mlp.gate_up_proj.weight", &t[k]);
        } else {
            t[k] = (df_hf_tensor){.ndim = d->ndim, .shape = {d->shape[0], d->shape[1]}, .numel = d->numel,
                                  .n_parts = 1, .part = {i}};
            snprintf(t[k].name, sizeof t[k].name, "%s", d->name);
        }
        i += t[k].n_parts;
    }
    if (rc) {
        free(t);
        return rc;
    }
    *out = t;
    *n = k;
    return DF_OK;
}
