/*
 * RoPE inverse frequencies of a model configuration (ops.h df_rope_inv_freq): the default ones,
 * Llama 3.1's rescaling of them, linear scaling's division, LongRoPE's short factors and YaRN's
 * blend of the default and interpolated ones, over the
 * rotated dims (df_model_rope_dim); the only definition of them (the theta-only ops
 * df_rope_table / df_rope_fwd / df_rope_bwd call it too). Not a kernel:
 * computed once per table or call, in float32 operation by operation as transformers
 * computes them, so the tables match HF's to the last bit where the math library's powf
 * does.
 */
#include "model/ops.h"

#include <math.h>
#include <string.h>

/* inv_freq[i] = 1 / theta^(2i / hd) in float32, as HF's _compute_default_rope_parameters. */
static float default_inv_freq(int64_t i, int64_t hd, double theta)
{
    float e = (float)(2 * i) / (float)hd;
    return 1.0f / powf((float)theta, e);
}

/*
 * Llama 3.1 (HF _compute_llama3_parameters): with the wavelength wl = 2 pi / f of a
 * frequency f and the original context length n0, frequencies whose wavelength exceeds
 * n0 / low_freq_factor are divided by `factor`, those below n0 / high_freq_factor kept,
 * and those between blended: s = (n0 / wl - low) / (high - low), f' = (1 - s) f / factor +
 * s f. PyTorch evaluates a scalar divided by a tensor as the tensor's reciprocal times the
 * scalar, and the scalars in float32; each step below is one such float operation.
 */
static float llama3_inv_freq(float f, const df_model_config *c)
{
    const float n0 = (float)c->rope_original_max_pos, factor = (float)c->rope_factor;
    const float lo = (float)c->rope_low_freq_factor;
    const float low_wl = (float)((double)c->rope_original_max_pos / c->rope_low_freq_factor);
    const float high_wl = (float)((double)c->rope_original_max_pos / c->rope_high_freq_factor);
    const float wl = (1.0f / f) * (float)(2.0 * M_PI);
    float g = wl > low_wl ? f / factor : f;
    if (!(wl < high_wl) && !(wl > low_wl)) { /* the medium band */
        float s = ((1.0f / wl) * n0 - lo) / (float)(c->rope_high_freq_factor - c->rope_low_freq_factor);
        float a = (1.0f - s) * g;
        float b = s * g;
        g = a / factor + b;
    }
    return g;
}

/* LongRoPE's short range (HF _compute_longrope_parameters): 1 / (ext_factor * theta^(2i / hd)),
   the product and the division in float32 as PyTorch evaluates them. */
static float longrope_inv_freq(int64_t i, int64_t hd, const df_model_config *c)
{
    float e = (float)(2 * i) / (float)hd;
    return 1.0f / ((float)c->rope_short_factor[i] * powf((float)c->rope_theta, e));
}

/* YaRN's correction dim (HF find_correction_dim): the dim whose frequency turns `rot` times over
   n0 positions, dim ln(n0 / (rot 2 pi)) / (2 ln theta), in double as Python's math computes it. */
static double yarn_correction_dim(double rot, int64_t dim, double theta, double n0)
{
    return ((double)dim * log(n0 / (rot * 2 * M_PI))) / (2 * log(theta));
}

/*
 * YaRN (HF _compute_yarn_parameters, transformers 4.56). The correction range [lo, hi] runs from
 * the dim of beta_fast rotations over the original context to that of beta_slow ones (floored /
 * ceiled when truncate, then clipped to [0, dim - 1]); the ramp r_i = clamp((i - lo) / (hi - lo),
 * 0, 1) over i < dim / 2 (hi += 0.001 when the two meet), and with e_i = 1 - r_i the frequency is
 * interp_i (1 - e_i) + extrap_i e_i: extrap_i = 1 / p_i the default one, interp_i = 1 / (factor
 * p_i), p_i = theta^(2i / dim). The range in double (Python floats), the rest in float32 as
 * PyTorch evaluates the tensors (a Python scalar taken to float32 in each operation).
 */
static void yarn_inv_freq(float *inv_freq, int64_t dim, const df_model_config *c)
{
    const double n0 = (double)c->rope_original_max_pos;
    double lo = yarn_correction_dim(c->rope_beta_fast, dim, c->rope_theta, n0);
    double hi = yarn_correction_dim(c->rope_beta_slow, dim, c->rope_theta, n0);
    if (c->rope_truncate)
        lo = floor(lo), hi = ceil(hi);
    lo = lo > 0 ? lo : 0;
    hi = hi < (double)(dim - 1) ? hi : (double)(dim - 1);
    if (lo == hi)
        hi += 0.001; /* HF: prevent singularity */
    const float flo = (float)lo, span = (float)(hi - lo), factor = (float)c->rope_factor;
    for (int64_t i = 0; i < dim / 2; i++) {
        float p = powf((float)c->rope_theta, (float)(2 * i) / (float)dim);
        float extrap = 1.0f / p, interp = 1.0f / (factor * p);
        float r = ((float)i - flo) / span;
        r = r < 0.0f ? 0.0f : r > 1.0f ? 1.0f : r;
        float e = 1.0f - r; /* inv_freq_extrapolation_factor */
        float a = interp * (1.0f - e);
        float b = extrap * e;
        inv_freq[i] = a + b;
    }
}

double df_rope_yarn_attention(const df_model_config *c)
{
    /* HF get_mscale(scale, mscale=1): 1 for scale <= 1, else 0.1 mscale ln(scale) + 1 */
    const double f = c->rope_factor;
    if (c->rope_mscale != 0 && c->rope_mscale_all_dim != 0) /* `if mscale and mscale_all_dim` */
        return f <= 1 ? 1.0 : (0.1 * c->rope_mscale * log(f) + 1.0) / (0.1 * c->rope_mscale_all_dim * log(f) + 1.0);
    return f <= 1 ? 1.0 : 0.1 * log(f) + 1.0;
}

void df_rope_inv_freq(float *inv_freq, const df_model_config *c)
{
    const int64_t rd = df_model_rope_dim(c); /* HF sizes the frequencies by the rotated dims */
    if (c->rope_type == DF_ROPE_YARN) {
        yarn_inv_freq(inv_freq, rd, c);
        return;
    }
    for (int64_t i = 0; i < rd / 2; i++) {
        inv_freq[i] = c->rope_type == DF_ROPE_LONGROPE ? longrope_inv_freq(i, rd, c)
                                                        : default_inv_freq(i, rd, c->rope_theta);
        if (c->rope_type == DF_ROPE_LLAMA3)
            inv_freq[i] = llama3_inv_freq(inv_freq[i], c);
        else if (c->rope_type == DF_ROPE_LINEAR) /* HF: inv_freq /= factor, a float32 division */
            inv_freq[i] /= (float)c->rope_factor;
    }
}

float df_rope_attention_factor(const df_model_config *c)
{
    if (c->rope_type == DF_ROPE_YARN) /* HF: attention_scaling, as LongRoPE's */
        return (float)c->rope_attention_factor;
    return c->rope_type == DF_ROPE_LONGROPE ? (float)c->rope_attention_factor : 1.0f;
}

void df_rope_model_table(float *cos_t, float *sin_t, int64_t n_pos, const df_model_config *c)
{
    float inv_freq[DF_MAX_HEAD_DIM / 2];
    df_rope_inv_freq(inv_freq, c);
    const int64_t rd = df_model_rope_dim(c);
    df_rope_table_freq(cos_t, sin_t, n_pos, rd, inv_freq);
    const float a = df_rope_attention_factor(c);
    if (a == 1.0f)
        return;
    /* HF: cos = emb.cos() * attention_scaling, a float32 product */
    for (int64_t k = 0; k < n_pos * (rd / 2); k++)
        cos_t[k] *= a, sin_t[k] *= a;
}

bool df_rope_same(const df_model_config *a, const df_model_config *b)
{
    if (a->head_dim != b->head_dim || df_model_rope_dim(a) != df_model_rope_dim(b) ||
        df_rope_attention_factor(a) != df_rope_attention_factor(b) || a->rope_local_theta != b->rope_local_theta)
        return false;
    float fa[DF_MAX_HEAD_DIM / 2], fb[DF_MAX_HEAD_DIM / 2];
    df_rope_inv_freq(fa, a);
    df_rope_inv_freq(fb, b);
    return !memcmp(fa, fb, sizeof(float) * (size_t)(df_model_rope_dim(a) / 2));
}
