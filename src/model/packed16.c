/*
 * The packed copy of a bf16 weight copy's layers (ops.h df_packed16): every projection, and
 * the LM head where its vocabulary tiles can be cut from the packed form, reordered once per
 * weight version into oneDNN's blocked layout, so that the decode steps' short matmuls
 * (M = the running sequences) stream the weights instead of copying each one into that
 * layout at every call.
 */
#include "distflow/common.h"
#include "model/ops.h"
#include "util/pages.h"

#include <stdlib.h>
#include <sys/mman.h>

struct df_packed16 {
    df_model_config cfg;
    df_mm_ctx *mm;
    uint16_t *blob;
    size_t bytes;
    df_layer16 *layers;       /* [L] into blob */
    uint16_t *head;           /* the LM head packed (after the layers), or NULL */
    int64_t head_stride;      /* its column slices' stride (df_mm_packed_col_stride) */
    const df_weights16 *src;  /* what the pages hold now: src at refresh src_refresh */
    int64_t src_refresh;
};

enum { NPROJ = 7 };

/* The [out, in] shapes of one layer's projections, in df_layer16 order. */
static void shapes(const df_model_config *c, int64_t n[NPROJ], int64_t k[NPROJ])
{
    const int64_t H = c->hidden_size, I = c->intermediate_size;
    const int64_t qd = c->num_attention_heads * c->head_dim, kvd = c->num_key_value_heads * c->head_dim;
    const int64_t out[NPROJ] = {qd, kvd, kvd, H, I, I, H}, in[NPROJ] = {H, H, H, qd, H, H, I};
    for (int i = 0; i < NPROJ; i++)
        n[i] = out[i], k[i] = in[i];
}

static const uint16_t **slot(df_layer16 *y, int i)
{
    const uint16_t **p[NPROJ] = {&y->wq, &y->wk, &y->wv, &y->wo, &y->w_gate, &y->w_up, &y->w_down};
    return p[i];
}

/* Bytes of each projection's packed form (64-byte multiples) and of one layer; 0 when a
 * matmul of 1, 64 or max_rows rows on one of them would not run a native kernel (pack then
 * nothing: the row-major copy is read); -1 on a oneDNN failure. */
static int64_t layer_bytes(const df_model_config *cfg, df_mm_ctx *mm, int64_t max_rows,
                           int64_t each[NPROJ])
{
    int64_t n[NPROJ], k[NPROJ], per_layer = 0;
    if (cfg->num_experts > 0) /* sparse layers have no dense MLP to pack: the row-major copy it is */
        return 0;
    shapes(cfg, n, k);
    for (int i = 0; i < NPROJ; i++) {
        each[i] = df_mm_packed_bytes(mm, n[i], k[i]);
        if (each[i] < 0)
            return -1;
        if (!df_mm_packed_native(mm, 1, n[i], k[i]) || !df_mm_packed_native(mm, 64, n[i], k[i]) ||
            !df_mm_packed_native(mm, max_rows, n[i], k[i]))
            return 0;
        each[i] = (each[i] + 63) / 64 * 64;
        per_layer += each[i];
    }
    return per_layer;
}

/* The head's column-slice stride under tiling t (0: it cannot be sliced, or no head), and
 * its packed bytes into *bytes. */
static int64_t head_layout(const df_model_config *cfg, df_mm_ctx *mm, const df_vocab_tiling *t,
                           int64_t *bytes)
{
    *bytes = 0;
    if (!t || cfg->num_labels > 0)
        return 0;
    const int64_t V = cfg->vocab_size, H = cfg->hidden_size;
    /* the widths stats_item's tiles and a draw's group take (ops_vocab.c) */
    const int64_t widths[4] = {t->cols, t->group, V % t->cols ? V % t->cols : t->cols,
                               V % t->group ? V % t->group : t->group};
    int64_t stride = df_mm_packed_col_stride(mm, V, H, t->cols, widths, 4);
    for (int i = 0; i < 4 && stride > 0; i++) /* the tiles' and a draw's rows */
        if (!df_mm_packed_native(mm, t->rows, widths[i], H) || !df_mm_packed_native(mm, 1, widths[i], H))
            stride = 0;
    const int64_t b = stride > 0 ? df_mm_packed_bytes(mm, V, H) : -1;
    if (b < 0)
        return 0;
    *bytes = (b + 63) / 64 * 64;
    return stride;
}

int64_t df_packed16_bytes_for(const df_model_config *cfg, const df_vocab_tiling *head,
                              int64_t max_rows)
{
    df_mm_ctx *mm = NULL;
    int64_t each[NPROJ], hb = 0;
    const int64_t per_layer =
        df_mm_ctx_create(64 * 64, &mm) ? -1 : layer_bytes(cfg, mm, max_rows, each);
    if (per_layer > 0)
        head_layout(cfg, mm, head, &hb);
    df_mm_ctx_free(mm);
    return per_layer <= 0 ? 0 : per_layer * cfg->num_hidden_layers + hb;
}

int df_packed16_create(const df_model_config *cfg, df_mm_ctx *mm, const df_vocab_tiling *head,
                       int64_t max_rows, df_packed16 **out)
{
    *out = NULL;
    int64_t each[NPROJ], hb = 0;
    const int64_t per_layer = layer_bytes(cfg, mm, max_rows, each);
    if (per_layer < 0)
        return df_error_wrap(DF_EINTERNAL, "the rollout's packed weights");
    if (per_layer == 0)
        return DF_OK; /* no native kernel on the packed layout at some size: none made */
    const int64_t stride = head_layout(cfg, mm, head, &hb);
    df_packed16 *p = calloc(1, sizeof *p);
    if (!p)
        return df_error(DF_ENOMEM, "out of memory for the packed weights");
    p->cfg = *cfg;
    p->mm = mm;
    p->bytes = (size_t)(per_layer * cfg->num_hidden_layers + hb);
    void *blob = mmap(NULL, p->bytes ? p->bytes : 64, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    p->blob = blob == MAP_FAILED ? NULL : blob;
    p->layers = calloc((size_t)cfg->num_hidden_layers, sizeof *p->layers);
    if (!p->blob || !p->layers) {
        df_packed16_free(p);
        return df_error(DF_ENOMEM, "out of memory for %.1f MiB of packed weights",
                        (double)per_layer * (double)cfg->num_hidden_layers / (1 << 20));
    }
    char *q = (char *)p->blob;
    for (int64_t l = 0; l < cfg->num_hidden_layers; l++) {
        p->layers[l].packed = true;
        for (int i = 0; i < NPROJ; i++) {
            *slot(&p->layers[l], i) = (const uint16_t *)q;
            q += each[i];
        }
    }
    p->head = hb ? (uint16_t *)q : NULL;
    p->head_stride = hb ? stride : 0;
    *out = p;
    return DF_OK;
}

int df_packed16_pack(df_packed16 *p, const df_weights16 *src)
{
    int64_t n[NPROJ], k[NPROJ];
    shapes(&p->cfg, n, k);
    p->src = NULL; /* a failed pack leaves a half-packed copy */
    for (int64_t l = 0; l < p->cfg.num_hidden_layers; l++) {
        df_layer16 from = *df_weights16_layer(src, l);
        for (int i = 0; i < NPROJ; i++) {
            int rc = df_mm_pack_w16(p->mm, n[i], k[i], *slot(&from, i),
                                    (uint16_t *)*slot(&p->layers[l], i));
            if (rc)
                return df_error_wrap(rc, "packing layer %lld", (long long)l);
        }
    }
    int rc = p->head ? df_mm_pack_w16(p->mm, p->cfg.vocab_size, p->cfg.hidden_size,
                                      df_weights16_lm_head(src), p->head)
                     : DF_OK;
    if (rc)
        return df_error_wrap(rc, "packing the LM head");
    p->src = src;
    p->src_refresh = df_weights16_version(src);
    return DF_OK;
}

bool df_packed16_is_current(const df_packed16 *p, const df_weights16 *src)
{
    return p && src && p->src == src && p->src_refresh == df_weights16_version(src);
}

const df_layer16 *df_packed16_layer(const df_packed16 *p, int64_t l) { return &p->layers[l]; }

const uint16_t *df_packed16_lm_head(const df_packed16 *p, int64_t *stride)
{
    *stride = p ? p->head_stride : 0;
    return p ? p->head : NULL;
}

int64_t df_packed16_bytes(const df_packed16 *p) { return p ? (int64_t)p->bytes : 0; }

int64_t df_packed16_resident(const df_packed16 *p)
{
    return p ? df_pages_resident(p->blob, p->bytes) : 0;
}

int64_t df_packed16_release(df_packed16 *p)
{
    if (!p)
        return 0;
    p->src = NULL;
    return df_pages_release(p->blob, p->bytes);
}

void df_packed16_free(df_packed16 *p)
{
    if (!p)
        return;
    if (p->blob)
        munmap(p->blob, p->bytes ? p->bytes : 64);
    free(p->layers);
    free(p);
}
