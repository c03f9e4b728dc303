/*
 * The bf16 copy of a model's matmul weights (model.h df_weights16): one 64-byte aligned
 * blob with the layers' seven projections and the LM head, refreshed from the float32
 * master weights once per weight version. Mixed-precision matmuls read it instead of
 * rounding the same weight again at every call (backend gemm_w16).
 */
#include "distflow/model.h"
#include "model/ops.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct df_weights16 {
    df_model_config cfg;
    uint16_t *blob;
    int64_t elems;       /* blob length, every tensor rounded up to 32 elements (64 bytes) */
    df_layer16 *layers;  /* [L] into blob */
    const uint16_t *lm_head;
    int64_t version;     /* refreshes so far */
    int64_t src_version; /* df_model.version converted from (df_weights16_refresh_model); 0: none */
};

static int64_t up32(int64_t n) { return (n + 31) / 32 * 32; }

/* Elements of one layer's seven projections, each padded to 64 bytes. */
static int64_t layer_elems(const df_model_config *c)
{
    const int64_t H = c->hidden_size, I = c->intermediate_size;
    const int64_t qd = c->num_attention_heads * c->head_dim, kvd = c->num_key_value_heads * c->head_dim;
    return up32(qd * H) + 2 * up32(kvd * H) + up32(H * qd) + 3 * up32(I * H);
}

/* The LM head's elements in a copy made with `flags`: none without DF_W16_LM_HEAD or in a
 * value model. */
static int64_t head_elems(const df_model_config *cfg, unsigned flags)
{
    return (flags & DF_W16_LM_HEAD) && cfg->num_labels == 0 ? up32(cfg->vocab_size * cfg->hidden_size) : 0;
}

int64_t df_weights16_bytes_for(const df_model_config *cfg, unsigned flags)
{
    const int64_t head = head_elems(cfg, flags);
    return (cfg->num_hidden_layers * layer_elems(cfg) + head) * (int64_t)sizeof(uint16_t);
}

int64_t df_mm_elems_for(const df_model_config *cfg, int64_t rows)
{
    int64_t w = cfg->hidden_size > cfg->intermediate_size ? cfg->hidden_size : cfg->intermediate_size;
    const int64_t qd = cfg->num_attention_heads * cfg->head_dim;
    return rows * (qd > w ? qd : w);
}

int df_weights16_create(const df_model_config *cfg, df_weights16 **out)
{
    return df_weights16_create_ex(cfg, DF_W16_LM_HEAD, out);
}

int df_weights16_create_ex(const df_model_config *cfg, unsigned flags, df_weights16 **out)
{
    int rc = df_model_config_validate(cfg);
    if (rc)
        return df_error_wrap(rc, "df_weights16_create");
    if (flags & ~(unsigned)DF_W16_LM_HEAD)
        return df_error(DF_EINVAL, "df_weights16_create: unknown flags 0x%x", flags);
    const int64_t H = cfg->hidden_size, I = cfg->intermediate_size, L = cfg->num_hidden_layers;
    const int64_t qd = cfg->num_attention_heads * cfg->head_dim;
    const int64_t kvd = cfg->num_key_value_heads * cfg->head_dim;
    const int64_t head = head_elems(cfg, flags);
    df_weights16 *w = calloc(1, sizeof *w);
    if (!w)
        return df_error(DF_ENOMEM, "out of memory for the bf16 weights");
    w->cfg = *cfg;
    w->elems = df_weights16_bytes_for(cfg, flags) / (int64_t)sizeof(uint16_t);
    w->blob = aligned_alloc(64, (size_t)(w->elems > 0 ? w->elems : 32) * sizeof(uint16_t));
    w->layers = calloc((size_t)L, sizeof *w->layers);
    if (!w->blob || !w->layers) {
        df_weights16_free(w);
        return df_error(DF_ENOMEM, "out of memory for %lld bf16 weights (%.1f MiB)",
                        (long long)w->elems, (double)w->elems * 2.0 / (1 << 20));
    }
    memset(w->blob, 0, (size_t)w->elems * sizeof(uint16_t));
    uint16_t *p = w->blob;
    for (int64_t l = 0; l < L; l++) {
        df_layer16 *y = &w->layers[l];
        y->wq = p, p += up32(qd * H);
        y->wk = p, p += up32(kvd * H);
        y->wv = p, p += up32(kvd * H);
        y->wo = p, p += up32(H * qd);
        y->w_gate = p, p += up32(I * H);
        y->w_up = p, p += up32(I * H);
        y->w_down = p, p += up32(I * H);
    }
    w->lm_head = head ? p : NULL;
    *out = w;
    return DF_OK;
}

int df_weights16_refresh(df_weights16 *w, const df_model_view *src)
{
    if (!w || !src || !src->layers)
        return df_error(DF_EINVAL, "df_weights16_refresh: NULL argument");
    if ((w->cfg.num_labels > 0) != (src->lm_head == NULL))
        return df_error(DF_EINVAL, "df_weights16_refresh: the weights are %s, the bf16 copy was "
                        "made for %s", src->lm_head ? "a causal LM's" : "a value model's",
                        w->cfg.num_labels > 0 ? "a value model" : "a causal LM");
    const df_model_config *c = &w->cfg;
    const int64_t H = c->hidden_size, I = c->intermediate_size;
    const int64_t qd = c->num_attention_heads * c->head_dim, kvd = c->num_key_value_heads * c->head_dim;
    /* Tensor by tensor; each conversion is a parallel loop over its elements. */
    for (int64_t l = 0; l < c->num_hidden_layers; l++) {
        const df_layer_view *s = &src->layers[l];
        const df_layer16 *d = &w->layers[l];
        df_bf16_from_f32((uint16_t *)d->wq, s->wq, qd * H);
        df_bf16_from_f32((uint16_t *)d->wk, s->wk, kvd * H);
        df_bf16_from_f32((uint16_t *)d->wv, s->wv, kvd * H);
        df_bf16_from_f32((uint16_t *)d->wo, s->wo, H * qd);
        df_bf16_from_f32((uint16_t *)d->w_gate, s->w_gate, I * H);
        df_bf16_from_f32((uint16_t *)d->w_up, s->w_up, I * H);
        df_bf16_from_f32((uint16_t *)d->w_down, s->w_down, I * H);
    }
    if (w->lm_head)
        df_bf16_from_f32((uint16_t *)w->lm_head, src->lm_head, c->vocab_size * H);
    w->version++;
    w->src_version = 0; /* a bare view carries no version */
    return DF_OK;
}

int df_weights16_refresh_model(df_weights16 *w, const df_model *m)
{
    if (!m)
        return df_error(DF_EINVAL, "df_weights16_refresh_model: NULL model");
    if (w) /* a failed refresh may leave a half-converted copy: no version until the next one */
        w->src_version = 0;
    int rc = df_weights16_refresh(w, &m->w);
    if (!rc)
        w->src_version = m->version;
    return rc;
}

int64_t df_weights16_source_version(const df_weights16 *w) { return w ? w->src_version : 0; }

bool df_weights16_is_current(const df_weights16 *w, const df_model *m)
{
    return w && m && w->src_version > 0 && w->src_version == m->version;
}

const df_layer16 *df_weights16_layer(const df_weights16 *w, int64_t l)
{
    return &w->layers[l];
}

const uint16_t *df_weights16_lm_head(const df_weights16 *w) { return w->lm_head; }

int64_t df_weights16_bytes(const df_weights16 *w)
{
    return w ? w->elems * (int64_t)sizeof(uint16_t) : 0;
}

int64_t df_weights16_version(const df_weights16 *w) { return w ? w->version : 0; }

void df_weights16_free(df_weights16 *w)
{
    if (!w)
        return;
    free(w->blob);
    free(w->layers);
    free(w);
}

/* The whole pages inside [p, p + n floats): returned to the OS (reads then see zeros). */
static int64_t release_pages(float *p, int64_t n, int64_t page)
{
    uintptr_t b = ((uintptr_t)p + (uintptr_t)page - 1) / (uintptr_t)page * (uintptr_t)page;
    uintptr_t e = ((uintptr_t)(p + n)) / (uintptr_t)page * (uintptr_t)page;
    if (e <= b || madvise((void *)b, e - b, MADV_DONTNEED))
        return 0;
    return (int64_t)(e - b);
}

int64_t df_model_release_layer_matmuls(df_model *m)
{
    const long ps = sysconf(_SC_PAGESIZE);
    const int64_t page = ps > 0 ? ps : 4096;
    const df_model_config *c = &m->cfg;
    const int64_t H = c->hidden_size, I = c->intermediate_size;
    const int64_t qd = c->num_attention_heads * c->head_dim, kvd = c->num_key_value_heads * c->head_dim;
    int64_t bytes = 0;
    for (int64_t l = 0; l < c->num_hidden_layers; l++) {
        df_layer_view *w = &m->w.layers[l];
        bytes += release_pages(w->wq, qd * H, page) + release_pages(w->wk, kvd * H, page) +
                 release_pages(w->wv, kvd * H, page) + release_pages(w->wo, H * qd, page) +
                 release_pages(w->w_gate, I * H, page) + release_pages(w->w_up, I * H, page) +
                 release_pages(w->w_down, I * H, page);
    }
    return bytes;
}
