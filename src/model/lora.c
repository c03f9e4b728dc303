/* LoRA adapters (distflow/lora.h): layout, PEFT's initialisation, views and the merge. */
#include "distflow/lora.h"
#include "model/hf_io.h"
#include "distflow/rng.h"
#include "model/ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const target_names[DF_LORA_N_TARGETS] = {
    "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};

const char *df_lora_target_name(df_lora_target t)
{
    return t < DF_LORA_N_TARGETS ? target_names[t] : "?";
}

void df_lora_target_shape(const df_model_config *c, df_lora_target t, int64_t *out_dim,
                          int64_t *in_dim)
{
    const int64_t H = c->hidden_size, I = c->intermediate_size;
    const int64_t qd = c->num_attention_heads * c->head_dim, kvd = c->num_key_value_heads * c->head_dim;
    switch (t) {
    case DF_LORA_Q: *out_dim = qd, *in_dim = H; break;
    case DF_LORA_K:
    case DF_LORA_V: *out_dim = kvd, *in_dim = H; break;
    case DF_LORA_O: *out_dim = H, *in_dim = qd; break;
    case DF_LORA_GATE:
    case DF_LORA_UP: *out_dim = I, *in_dim = H; break;
    default: *out_dim = H, *in_dim = I; break; /* down_proj */
    }
}

/* phi3's fused modules: one nn.Linear each in transformers, so one adapter each in PEFT. */
static const df_lora_module fused_qkv = {"qkv_proj", DF_LORA_Q, 3};
static const df_lora_module fused_gate_up = {"gate_up_proj", DF_LORA_GATE, 2};

unsigned df_lora_module_mask(const df_lora_module *m)
{
    return ((1u << m->n_parts) - 1u) << m->first;
}

int df_lora_modules(const df_model_config *c, unsigned targets, df_lora_module *mods)
{
    const bool fused = df_model_fused_projections(c);
    int n = 0;
    for (int t = 0; t < DF_LORA_N_TARGETS;) {
        df_lora_module m = {target_names[t], (df_lora_target)t, 1};
        if (fused && t == DF_LORA_Q)
            m = fused_qkv;
        else if (fused && t == DF_LORA_GATE)
            m = fused_gate_up;
        if (targets & df_lora_module_mask(&m))
            mods[n++] = m;
        t += m.n_parts;
    }
    return n;
}

/* The projections a target_modules name stands for; 0 for none. */
static unsigned name_bits(const char *name)
{
    if (!strcmp(name, "all-linear"))
        return DF_LORA_ALL_LINEAR;
    if (!strcmp(name, fused_qkv.name))
        return df_lora_module_mask(&fused_qkv);
    if (!strcmp(name, fused_gate_up.name))
        return df_lora_module_mask(&fused_gate_up);
    for (int t = 0; t < DF_LORA_N_TARGETS; t++)
        if (!strcmp(name, target_names[t]))
            return 1u << t;
    return 0;
}

int df_lora_parse_targets(const char *const *names, int n, const char *where, unsigned *mask)
{
    *mask = 0;
    if (n <= 0)
        return df_error(DF_EINVAL, "%s: no target module (give \"all-linear\" or names among "
                        "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)", where);
    for (int i = 0; i < n; i++) {
        unsigned bit = name_bits(names[i]);
        if (!bit)
            return df_error(DF_EINVAL, "%s: unknown target module \"%s\" (known: all-linear, "
                            "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj; phi3's "
                            "qkv_proj, gate_up_proj)", where, names[i]);
        if (*mask & bit)
            return df_error(DF_EINVAL, "%s: target module \"%s\" names a projection twice (qkv_proj is "
                            "q_proj, k_proj and v_proj; gate_up_proj gate_proj and up_proj)", where, names[i]);
        *mask |= bit;
    }
    return DF_OK;
}

/* Where target t of layer l sits in the model's view. */
static float *base_tensor(const df_layer_view *w, df_lora_target t)
{
    float *const p[DF_LORA_N_TARGETS] = {w->wq, w->wk, w->wv, w->wo, w->w_gate, w->w_up, w->w_down};
    return p[t];
}

static int64_t round16(int64_t n) { return (n + 15) / 16 * 16; }

/* Module m's weight as one linear: *out_dim its parts' rows together, *in_dim their input. */
static void module_shape(const df_model_config *c, const df_lora_module *m, int64_t *out_dim, int64_t *in_dim)
{
    *out_dim = 0;
    for (int p = 0; p < m->n_parts; p++) {
        int64_t od;
        df_lora_target_shape(c, (df_lora_target)(m->first + p), &od, in_dim);
        *out_dim += od;
    }
}

/* The tensor table (PEFT names) and the sizes of the blob and of the base copies. */
static int layout(df_lora *l)
{
    const df_model_config *c = &l->mcfg;
    const int64_t L = c->num_hidden_layers, r = l->cfg.rank;
    df_lora_module mods[DF_LORA_N_TARGETS];
    const int n_mods = df_lora_modules(c, l->cfg.targets, mods), nt = 2 * n_mods;
    if (L * nt > 1 << 30)
        return df_error(DF_EINVAL, "LoRA: %lld tensors", (long long)(L * nt));
    l->tensors = calloc((size_t)(L * nt + 2), sizeof *l->tensors);
    if (!l->tensors)
        return df_error(DF_ENOMEM, "LoRA: tensor table");
    int64_t off = 0;
    for (int64_t li = 0; li < L; li++)
        for (int i = 0; i < n_mods; i++) {
            int64_t od, id;
            module_shape(c, &mods[i], &od, &id);
            const char *sub = mods[i].first <= DF_LORA_O ? "self_attn" : "mlp";
            for (int ab = 0; ab < 2; ab++) {
                df_param_desc *d = &l->tensors[l->n_tensors++];
                snprintf(d->name, sizeof d->name, "base_model.model.model.layers.%lld.%s.%s.lora_%c.weight",
                         (long long)li, sub, mods[i].name, ab ? 'B' : 'A');
                d->ndim = 2;
                d->shape[0] = ab ? od : r;
                d->shape[1] = ab ? r : id;
                d->numel = d->shape[0] * d->shape[1];
                d->offset = off;
                off += round16(d->numel);
            }
            l->n_base += od * id;
        }
    l->head = l->head_bias = -1;
    if (c->num_labels == 1) { /* the score head, trained whole (PEFT's modules_to_save) */
        const char *names[2] = {"base_model.model.score.weight", "base_model.model.score.bias"};
        l->head = off;
        l->head_bias = off + round16(c->hidden_size);
        for (int k = 0; k < 2; k++) {
            df_param_desc *d = &l->tensors[l->n_tensors++];
            snprintf(d->name, sizeof d->name, "%s", names[k]);
            d->ndim = k ? 1 : 2; /* [1, H], [1] */
            d->shape[0] = 1;
            d->shape[1] = k ? 0 : c->hidden_size;
            d->numel = k ? 1 : c->hidden_size;
            d->offset = off;
            off += round16(d->numel);
        }
    }
    l->n_params = off;
    return DF_OK;
}

void df_lora_view_of(const df_lora *l, float *blob, df_lora_layer *layers)
{
    const int64_t L = l->mcfg.num_hidden_layers, r = l->cfg.rank;
    df_lora_module mods[DF_LORA_N_TARGETS];
    const int n_mods = df_lora_modules(&l->mcfg, l->cfg.targets, mods);
    memset(layers, 0, (size_t)L * sizeof *layers);
    int i = 0;
    for (int64_t li = 0; li < L; li++)
        for (int k = 0; k < n_mods; k++) {
            float *A = blob + l->tensors[i++].offset, *B = blob + l->tensors[i++].offset;
            for (int p = 0; p < mods[k].n_parts; p++) { /* the parts share A; B's row blocks in order */
                const df_lora_target t = (df_lora_target)(mods[k].first + p);
                int64_t od, id;
                layers[li].a[t] = A;
                layers[li].b[t] = B;
                df_lora_target_shape(&l->mcfg, t, &od, &id);
                B += od * r;
            }
        }
}

const df_param_desc *df_lora_find_tensor(const df_lora *l, const char *name)
{
    for (int i = 0; i < l->n_tensors; i++)
        if (!strcmp(l->tensors[i].name, name))
            return &l->tensors[i];
    return NULL;
}

static int check_config(const df_model *m, const df_lora_config *cfg)
{
    if (cfg->rank < 1)
        return df_error(DF_EINVAL, "LoRA: rank %lld (lora_rank must be >= 1)", (long long)cfg->rank);
    if (!(cfg->alpha > 0) || !isfinite(cfg->alpha))
        return df_error(DF_EINVAL, "LoRA: lora_alpha %g (must be > 0)", cfg->alpha);
    if (!cfg->targets || cfg->targets & ~DF_LORA_ALL_LINEAR)
        return df_error(DF_EINVAL, "LoRA: no target module");
    if (m->cfg.num_labels != 0 && m->cfg.num_labels != 1)
        return df_error(DF_EINVAL, "LoRA: a model of %lld labels", (long long)m->cfg.num_labels);
    const unsigned mlp = 1u << DF_LORA_GATE | 1u << DF_LORA_UP | 1u << DF_LORA_DOWN;
    if (m->cfg.num_experts > 0 && (cfg->targets & mlp)) /* the sparse layers' experts have no adapters */
        return df_error(DF_EUNSUPPORTED, "LoRA: adapters on a model with experts (%s) are not implemented "
                        "for its MLPs (gate_proj, up_proj, down_proj); target the attention projections "
                        "(q_proj, k_proj, v_proj, o_proj)", m->cfg.model_type);
    df_lora_module mods[DF_LORA_N_TARGETS];
    const int n_mods = df_lora_modules(&m->cfg, cfg->targets, mods);
    for (int i = 0; i < n_mods; i++) { /* one adapter per module: a fused one's parts go together */
        const unsigned bits = df_lora_module_mask(&mods[i]);
        if ((cfg->targets & bits) != bits)
            return df_error(DF_EINVAL, "LoRA: %s fuses %s into %s, one module with one adapter in PEFT: "
                            "target all its parts or none", m->cfg.model_type,
                            mods[i].n_parts == 3 ? "q_proj, k_proj and v_proj" : "gate_proj and up_proj",
                            mods[i].name);
    }
    return DF_OK;
}

/* PEFT's default init: A ~ kaiming_uniform_(a = sqrt(5)), bound gain sqrt(3 / fan_in) with
 * gain sqrt(2 / (1 + 5)): 1 / sqrt(in); B = 0 (the memory is zeroed). */
static void init_a(df_lora *l, uint64_t seed)
{
    for (int i = 0; i + 1 < l->n_tensors && (l->head < 0 || l->tensors[i].offset < l->head); i += 2) {
        const df_param_desc *d = &l->tensors[i];
        const double bound = 1.0 / sqrt((double)d->shape[1]);
        df_rng g;
        df_rng_seed(&g, df_rng_key(seed, 0x4c6f5241u /* "LoRA" */, (uint64_t)i, 0));
        float *a = l->params + d->offset;
        for (int64_t k = 0; k < d->numel; k++)
            a[k] = (float)((2.0 * df_rng_uniform(&g) - 1.0) * bound);
    }
}

/* Runs BODY for every targeted W0 of view w in layout order, with W the tensor, N its floats and
 * OFF its offset in the base copy (od_ / id_ its shape, li_ / t_ its layer and target). */
#define FOR_TARGETS(l, w, BODY)                                                                  \
    do {                                                                                         \
        int64_t off_ = 0;                                                                        \
        for (int64_t li_ = 0; li_ < (l)->mcfg.num_hidden_layers; li_++)                          \
            for (int t_ = 0; t_ < DF_LORA_N_TARGETS; t_++) {                                     \
                if (!((l)->cfg.targets >> t_ & 1u))                                              \
                    continue;                                                                    \
                int64_t od_, id_;                                                                \
                df_lora_target_shape(&(l)->mcfg, (df_lora_target)t_, &od_, &id_);               \
                float *W = base_tensor(&(w)->layers[li_], (df_lora_target)t_);                  \
                const int64_t N = od_ * id_, OFF = off_;                                         \
                (void)OFF;                                                                       \
                BODY;                                                                            \
                off_ += N;                                                                       \
            }                                                                                    \
    } while (0)

/* Whether every targeted W0 is a bfloat16 value (its low 16 bits zero): a model read from bf16
 * files, as HF checkpoints mostly are, whose base copy then takes 2 bytes a weight, exactly. */
static bool base_is_bf16(const df_lora *l, const df_model_view *w)
{
    bool exact = true;
    FOR_TARGETS(l, w, {
        const uint32_t *u = (const uint32_t *)W;
        for (int64_t i = 0; i < N && exact; i++)
            exact = (u[i] & 0xFFFFu) == 0;
    });
    return exact;
}

/* The targeted W0 of view w into the base copy (bf16 or float32). */
static void copy_base(df_lora *l, const df_model_view *w)
{
    FOR_TARGETS(l, w, {
        if (l->base16) {
            const uint32_t *u = (const uint32_t *)W;
            for (int64_t i = 0; i < N; i++)
                l->base16[OFF + i] = (uint16_t)(u[i] >> 16);
        } else {
            memcpy(l->base + OFF, W, (size_t)N * sizeof(float));
        }
    });
}

int df_lora_create(const df_model *m, const df_lora_config *cfg, uint64_t seed, df_lora **out)
{
    *out = NULL;
    int rc = check_config(m, cfg);
    if (rc)
        return rc;
    df_lora *l = calloc(1, sizeof *l);
    if (!l)
        return df_error(DF_ENOMEM, "LoRA");
    l->cfg = *cfg;
    l->scale = (float)(cfg->alpha / (double)cfg->rank);
    l->mcfg = m->cfg;
    if ((rc = layout(l))) {
        df_lora_free(l);
        return rc;
    }
    const size_t pbytes = (size_t)l->n_params * sizeof(float); /* tensors rounded to 16 floats */
    l->params = aligned_alloc(64, pbytes > 0 ? pbytes : 64);
    if (base_is_bf16(l, &m->w))
        l->base16 = malloc((size_t)(l->n_base ? l->n_base : 1) * sizeof(uint16_t));
    else
        l->base = malloc((size_t)(l->n_base ? l->n_base : 1) * sizeof(float));
    l->layers = calloc((size_t)m->cfg.num_hidden_layers, sizeof *l->layers);
    if (!l->params || !(l->base || l->base16) || !l->layers) {
        df_lora_free(l);
        return df_error(DF_ENOMEM, "LoRA: %lld adapter and %lld base floats",
                        (long long)l->n_params, (long long)l->n_base);
    }
    memset(l->params, 0, pbytes);
    df_lora_view_of(l, l->params, l->layers);
    init_a(l, seed);
    copy_base(l, &m->w);
    if (l->head >= 0) { /* the head starts as the model's (PEFT copies the module) */
        memcpy(l->params + l->head, m->w.score_weight, (size_t)m->cfg.hidden_size * sizeof(float));
        l->params[l->head_bias] = m->w.score_bias[0];
    }
    *out = l;
    return DF_OK;
}

void df_lora_free(df_lora *l)
{
    if (!l)
        return;
    free(l->tensors);
    free(l->params);
    free(l->base);
    free(l->base16);
    free(l->layers);
    free(l);
}

/* m has the adapter's shapes (DF_EINVAL naming `fn` otherwise). */
static int check_shape(const df_lora *l, const df_model *m, const char *fn)
{
    const df_model_config *a = &l->mcfg, *b = &m->cfg;
    if (a->num_hidden_layers != b->num_hidden_layers || a->hidden_size != b->hidden_size ||
        a->intermediate_size != b->intermediate_size || a->head_dim != b->head_dim ||
        a->num_attention_heads != b->num_attention_heads ||
        a->num_key_value_heads != b->num_key_value_heads)
        return df_error(DF_EINVAL, "%s: the model's shape is not the adapter's", fn);
    return DF_OK;
}

/* The base copy into m's targeted tensors, then (with_lora) W += s B A on each. */
static void write_targets(const df_lora *l, df_model *m, bool with_lora)
{
    const int64_t r = l->cfg.rank;
    const df_lora_layer *ll = l->layers;
    FOR_TARGETS(l, &m->w, {
        if (l->base16) {
            uint32_t *u = (uint32_t *)W;
            for (int64_t i = 0; i < N; i++)
                u[i] = (uint32_t)l->base16[OFF + i] << 16;
        } else {
            memcpy(W, l->base + OFF, (size_t)N * sizeof(float));
        }
        if (with_lora) /* W [od, id] += s B [od, r] A [r, id] */
            df_gemm_nn(od_, id_, r, l->scale, ll[li_].b[t_], ll[li_].a[t_], 1.0f, W);
    });
}

int df_lora_unmerge(const df_lora *l, df_model *m)
{
    int rc = check_shape(l, m, "df_lora_unmerge");
    if (rc)
        return rc;
    write_targets(l, m, false);
    df_model_weights_changed(m);
    return DF_OK;
}

int df_lora_merge(const df_lora *l, df_model *m)
{
    int rc = check_shape(l, m, "df_lora_merge");
    if (rc)
        return rc;
    if (l->head >= 0 && !m->w.score_weight)
        return df_error(DF_EINVAL, "df_lora_merge: the adapter has a score head, the model none");
    write_targets(l, m, true);
    if (l->head >= 0) {
        const int64_t H = l->mcfg.hidden_size;
        memcpy(m->w.score_weight, l->params + l->head, (size_t)H * sizeof(float));
        m->w.score_bias[0] = l->params[l->head_bias];
    }
    df_model_weights_changed(m);
    return DF_OK;
}
