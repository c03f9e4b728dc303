/*
 * The bf16 copy of a model's matmul weights (model.h df_weights16): one 64-byte aligned
 * blob with the layers' seven projections, the LM head and the token embedding (the head's
 * rows when tied), refreshed from the float32
 * master weights once per weight version. Mixed-precision matmuls read it instead of
 * rounding the same weight again at every call (backend gemm_w16).
 */
#include "distflow/backend.h"
#include "distflow/model.h"
#include "model/ops.h"
#include "util/pages.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

struct df_weights16 {
    df_model_config cfg;
    uint16_t *blob;
    int64_t elems;       /* blob length, every tensor rounded up to 32 elements (64 bytes) */
    df_layer16 *layers;  /* [L] into blob */
    const uint16_t *lm_head;
    const uint16_t *embed; /* the lm_head's rows (tied) or its own tensor; NULL: not held */
    bool own_embed;        /* embed is a tensor of its own (refreshed from the embedding) */
    int64_t version;       /* refreshes so far */
    int64_t src_version;   /* df_model.version converted from (df_weights16_refresh_model /
                            * _refresh_release); 0: none */
    df_backend be;         /* dev: the backend whose memory holds blob (df_weights16_create_on) */
    bool dev;
};

static int64_t up32(int64_t n) { return (n + 31) / 32 * 32; }

int64_t df_weights16_expert_elems(const df_model_config *c)
{
    return 3 * up32(c->moe_intermediate_size * c->hidden_size);
}

int64_t df_weights16_shared_elems(const df_model_config *c)
{
    return c->shared_expert_intermediate_size > 0 ? 3 * up32(c->shared_expert_intermediate_size * c->hidden_size) : 0;
}

/* A sparse layer's shared expert gate [1, hidden] (qwen2_moe), else nothing. */
static int64_t shared_gate_elems(const df_model_config *c)
{
    return c->shared_expert_intermediate_size > 0 ? up32(c->hidden_size) : 0;
}

/* Elements of layer l's projections, each padded to 64 bytes: the attention's four, then the
 * dense MLP's three or a sparse layer's router, experts (and shared expert with its gate). */
static int64_t layer_elems(const df_model_config *c, int64_t l)
{
    const int64_t H = c->hidden_size, I = c->intermediate_size;
    const int64_t qd = c->num_attention_heads * c->head_dim, kvd = c->num_key_value_heads * c->head_dim;
    const int64_t mlp = df_model_layer_moe(c, l) ? up32(c->num_experts * H) + c->num_experts * df_weights16_expert_elems(c) +
                                                       df_weights16_shared_elems(c) + shared_gate_elems(c)
                                                 : 3 * up32(I * H);
    return up32(qd * H) + 2 * up32(kvd * H) + up32(H * qd) + mlp;
}

/* The LM head's elements in a copy made with `flags`: none without DF_W16_LM_HEAD or in a
 * value model. */
static int64_t head_elems(const df_model_config *cfg, unsigned flags)
{
    return (flags & DF_W16_LM_HEAD) && cfg->num_labels == 0 ? up32(cfg->vocab_size * cfg->hidden_size) : 0;
}

/* Whether a copy made with `flags` holds the embedding in a tensor of its own: held, and not
 * the tied head's rows. */
static bool own_embed(const df_model_config *cfg, unsigned flags)
{
    return (flags & DF_W16_EMBED) && !(cfg->tie_word_embeddings && head_elems(cfg, flags) > 0);
}

int64_t df_weights16_bytes_for(const df_model_config *cfg, unsigned flags)
{
    const int64_t head = head_elems(cfg, flags);
    const int64_t embed = own_embed(cfg, flags) ? up32(cfg->vocab_size * cfg->hidden_size) : 0;
    int64_t layers = 0;
    for (int64_t l = 0; l < cfg->num_hidden_layers; l++)
        layers += layer_elems(cfg, l);
    return (layers + head + embed) * (int64_t)sizeof(uint16_t);
}

int64_t df_mm_elems_for(const df_model_config *cfg, int64_t rows)
{
    const int64_t I = df_model_mlp_width(cfg), E = cfg->num_experts; /* the router's gradient: [rows, E] */
    int64_t w = cfg->hidden_size > I ? cfg->hidden_size : I;
    w = w > E ? w : E;
    const int64_t qd = cfg->num_attention_heads * cfg->head_dim;
    return rows * (qd > w ? qd : w);
}

/* The blob's mapping length (one 64-byte unit when empty). */
static size_t blob_bytes(const df_weights16 *w)
{
    return (size_t)(w->elems > 0 ? w->elems : 32) * sizeof(uint16_t);
}

int df_weights16_create(const df_model_config *cfg, df_weights16 **out)
{
    return df_weights16_create_ex(cfg, DF_W16_LM_HEAD, out);
}

int df_weights16_create_ex(const df_model_config *cfg, unsigned flags, df_weights16 **out)
{
    return df_weights16_create_on(NULL, cfg, flags, out);
}

int df_weights16_create_on(const df_backend *be, const df_model_config *cfg, unsigned flags,
                           df_weights16 **out)
{
    int rc = df_model_config_validate(cfg);
    if (rc)
        return df_error_wrap(rc, "df_weights16_create");
    if (flags & ~(unsigned)(DF_W16_LM_HEAD | DF_W16_EMBED))
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
    w->dev = be && be->ops && !be->ops->host_memory;
    if (w->dev) {
        w->be = *be;
        void *blob = NULL;
        if (be->ops->alloc(be->ctx, blob_bytes(w), &blob))
            blob = NULL;
        w->blob = blob;
    } else {
        /* Anonymous pages: zero and page-aligned, and resident only once a refresh writes them
         * (so a release-as-you-convert refresh never holds both copies whole). */
        void *blob = mmap(NULL, blob_bytes(w), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        w->blob = blob == MAP_FAILED ? NULL : blob;
    }
    w->layers = calloc((size_t)L, sizeof *w->layers);
    if (!w->blob || !w->layers) {
        const char *where = w->dev ? be->ops->name : "host";
        const int64_t elems = w->elems;
        df_weights16_free(w);
        return df_error(DF_ENOMEM, "out of %s memory for %lld bf16 weights (%.1f MiB)", where,
                        (long long)elems, (double)elems * 2.0 / (1 << 20));
    }
    uint16_t *p = w->blob;
    for (int64_t l = 0; l < L; l++) {
        df_layer16 *y = &w->layers[l];
        y->wq = p, p += up32(qd * H);
        y->wk = p, p += up32(kvd * H);
        y->wv = p, p += up32(kvd * H);
        y->wo = p, p += up32(H * qd);
        if (df_model_layer_moe(cfg, l)) {
            y->router = p, p += up32(cfg->num_experts * H);
            y->experts = p, p += cfg->num_experts * df_weights16_expert_elems(cfg);
            if (cfg->shared_expert_intermediate_size > 0) {
                y->shared = p, p += df_weights16_shared_elems(cfg);
                y->shared_gate = p, p += shared_gate_elems(cfg);
            }
            continue;
        }
        y->w_gate = p, p += up32(I * H);
        y->w_up = p, p += up32(I * H);
        y->w_down = p, p += up32(I * H);
    }
    w->lm_head = head ? p : NULL;
    p += head;
    w->own_embed = own_embed(cfg, flags);
    w->embed = w->own_embed ? p : (flags & DF_W16_EMBED) ? w->lm_head : NULL;
    *out = w;
    return DF_OK;
}

/* Which float32 tensors a refresh gives back after converting them (release), and the count;
 * for a copy in a device's memory how each tensor gets there. */
typedef struct {
    bool release;          /* false: keep everything (a plain refresh) */
    bool embed, head;      /* the vocabulary tables too (their rules: df_weights16_refresh_release) */
    int64_t bytes;
    const df_backend *be;  /* a device copy: its backend, else NULL */
    bool on_dev;           /* src is device memory: be's bf16_from_f32 there; else host
                              conversion into tmp, then an upload */
    uint16_t *tmp;         /* [tmp_n] host staging (host conversion into a device copy) */
    int64_t tmp_n;
    int rc;                /* the first failure */
} give_back;

/* One tensor into the copy; then, when g says so (release and `go`), its float32 pages back. */
static void conv(const uint16_t *dst, const float *src, int64_t n, give_back *g, bool go)
{
    if (g->rc)
        return;
    if (g->be && g->on_dev) {
        g->rc = g->be->ops->bf16_from_f32(g->be->ctx, (uint16_t *)dst, src, n);
        return;
    }
    if (g->be) { /* host rounding, the same bits, then up */
        if (n > g->tmp_n) {
            free(g->tmp);
            g->tmp_n = n;
            g->tmp = malloc((size_t)n * sizeof(uint16_t));
            if (!g->tmp) {
                g->tmp_n = 0;
                g->rc = df_error(DF_ENOMEM, "out of memory staging a bf16 tensor");
                return;
            }
        }
        df_bf16_from_f32(g->tmp, src, n);
        g->rc = g->be->ops->upload(g->be->ctx, (void *)dst, g->tmp, (size_t)n * sizeof(uint16_t));
        return;
    }
    df_bf16_from_f32((uint16_t *)dst, src, n);
    if (g->release && go)
        g->bytes += df_pages_release((void *)src, (size_t)n * sizeof(float));
}

static int refresh(df_weights16 *w, const df_model_view *src, give_back *g)
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
        conv(d->wq, s->wq, qd * H, g, true);
        conv(d->wk, s->wk, kvd * H, g, true);
        conv(d->wv, s->wv, kvd * H, g, true);
        conv(d->wo, s->wo, H * qd, g, true);
        if (d->experts) { /* each expert's three tensors, one stride in each copy */
            conv(d->router, s->router, c->num_experts * H, g, true);
            const int64_t fs = df_model_expert_floats(c), bs = df_weights16_expert_elems(c);
            for (int64_t e = 0; e < 3 * c->num_experts; e++)
                conv(d->experts + e / 3 * bs + e % 3 * (bs / 3), s->experts + e / 3 * fs + e % 3 * (fs / 3),
                     c->moe_intermediate_size * H, g, true);
            const int64_t ss = df_weights16_shared_elems(c) / 3, sf = df_model_shared_floats(c) / 3;
            for (int64_t j = 0; d->shared && j < 3; j++)
                conv(d->shared + j * ss, s->shared + j * sf, c->shared_expert_intermediate_size * H, g, true);
            if (d->shared_gate)
                conv(d->shared_gate, s->shared_gate, H, g, true);
            continue;
        }
        conv(d->w_gate, s->w_gate, I * H, g, true);
        conv(d->w_up, s->w_up, I * H, g, true);
        conv(d->w_down, s->w_down, I * H, g, true);
    }
    /* tied: the head's rows are the embedding's, read by both */
    const bool tied = src->lm_head == src->embed;
    if (w->lm_head)
        conv(w->lm_head, src->lm_head, c->vocab_size * H, g, g->head && (!tied || g->embed));
    if (w->own_embed)
        conv(w->embed, src->embed, c->vocab_size * H, g, g->embed && !tied);
    free(g->tmp);
    g->tmp = NULL;
    g->tmp_n = 0;
    if (g->rc)
        return df_error_wrap(g->rc, "df_weights16_refresh into %s memory", w->be.ops->name);
    w->version++;
    w->src_version = 0; /* a bare view carries no version */
    return DF_OK;
}

bool df_weights16_holds(const df_model *m, const float *p, unsigned flags)
{
    if ((p == m->w.lm_head && (flags & DF_W16_LM_HEAD)) || (p == m->w.embed && (flags & DF_W16_EMBED)))
        return true;
    for (int64_t l = 0; l < m->cfg.num_hidden_layers; l++) {
        const df_layer_view *v = &m->w.layers[l];
        if (p == v->wq || p == v->wk || p == v->wv || p == v->wo || p == v->w_gate || p == v->w_up ||
            p == v->w_down || p == v->router || (p && p == v->shared_gate))
            return true;
        const int64_t sf = df_model_shared_floats(&m->cfg) / 3; /* the shared expert's three */
        if (v->shared && (p == v->shared || p == v->shared + sf || p == v->shared + 2 * sf))
            return true;
        const int64_t fs = df_model_expert_floats(&m->cfg); /* an expert's tensor: at a third of a stride */
        if (v->experts && p >= v->experts && p < v->experts + m->cfg.num_experts * fs && (p - v->experts) % (fs / 3) == 0)
            return true;
    }
    return false;
}

/* A plain refresh from host weights: into a device copy by host rounding and uploads. */
static give_back keep_all(const df_weights16 *w)
{
    return (give_back){.be = w && w->dev ? &w->be : NULL};
}

int df_weights16_refresh(df_weights16 *w, const df_model_view *src)
{
    give_back keep = keep_all(w);
    return refresh(w, src, &keep);
}

/* refresh from m, the copy then naming m's weight version (none while the refresh fails: a
 * failed one may leave a half-converted copy). */
static int refresh_versioned(df_weights16 *w, const df_model *m, give_back *g)
{
    if (!m)
        return df_error(DF_EINVAL, "df_weights16_refresh: NULL model");
    if (w)
        w->src_version = 0;
    int rc = refresh(w, &m->w, g);
    if (!rc)
        w->src_version = m->version;
    return rc;
}

int df_weights16_refresh_release(df_weights16 *w, df_model *m, bool head16, int64_t *released)
{
    /* a device copy: the device's forward reads float32 weights it uploads from m (norms, a
     * float32 head), so nothing is given back */
    give_back g = w && w->dev ? keep_all(w) : (give_back){.release = true, .embed = w && w->embed, .head = head16};
    /* the float32 pages given back keep the version: the copy is the weights now */
    int rc = refresh_versioned(w, m, &g);
    if (released)
        *released = g.bytes;
    return rc;
}

int df_weights16_refresh_model(df_weights16 *w, const df_model *m)
{
    give_back keep = keep_all(w);
    return refresh_versioned(w, m, &keep);
}

int df_weights16_refresh_dev(df_weights16 *w, const df_model *m, const df_model_view *dsrc)
{
    if (!w || !m || !dsrc)
        return df_error(DF_EINVAL, "df_weights16_refresh_dev: NULL argument");
    if (!w->dev || !w->be.ops->bf16_from_f32) /* host rounding of m's weights: the same bits */
        return df_weights16_refresh_model(w, m);
    give_back g = {.be = &w->be, .on_dev = true};
    w->src_version = 0;
    int rc = refresh(w, dsrc, &g);
    if (!rc)
        w->src_version = m->version;
    return rc;
}

bool df_weights16_on_device(const df_weights16 *w) { return w && w->dev; }

const uint16_t *df_weights16_blob(const df_weights16 *w, int64_t *elems)
{
    *elems = w->elems;
    return w->blob;
}

uint16_t *df_weights16_write_begin(df_weights16 *w, int64_t *elems)
{
    w->src_version = 0;
    *elems = w->elems;
    return w->blob;
}

void df_weights16_write_end(df_weights16 *w, const df_model *m)
{
    w->version++;
    w->src_version = m->version;
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

const uint16_t *df_weights16_embed(const df_weights16 *w) { return w->embed; }

int64_t df_weights16_bytes(const df_weights16 *w)
{
    return w ? w->elems * (int64_t)sizeof(uint16_t) : 0;
}

int64_t df_weights16_version(const df_weights16 *w) { return w ? w->version : 0; }

void df_weights16_free(df_weights16 *w)
{
    if (!w)
        return;
    if (w->blob && w->dev)
        w->be.ops->release(w->be.ctx, w->blob);
    else if (w->blob)
        munmap(w->blob, blob_bytes(w));
    free(w->layers);
    free(w);
}

int df_weights16_offload(df_weights16 *w, const char *dir)
{
    if (w->dev) /* device memory: no host pages to hand to a file */
        return DF_OK;
    int rc = df_pages_to_file(w->blob, blob_bytes(w), dir, NULL);
    return rc ? df_error_wrap(rc, "the bf16 weights (%.1f MiB)", (double)blob_bytes(w) / 1048576.0) : DF_OK;
}

int64_t df_weights16_page_out(df_weights16 *w)
{
    return w && !w->dev ? df_pages_release(w->blob, blob_bytes(w)) : 0;
}
