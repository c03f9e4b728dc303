/*
 * The optimizer's per-step loops (include/distflow/optim.h): AdamW, gradient
 * norm, clipping. A kernel TU (compiled per instruction-set variant,
 * util/kernels.h): they run over every parameter each step.
 */
#include "model/kernels_rename.h"

#include "distflow/optim.h"

#include <math.h>

int df_adamw_step(df_adamw *o, float *p, const float *g, double lr)
{
    if (!(lr >= 0) || !isfinite(lr))
        return df_error(DF_EINVAL, "AdamW: learning rate must be finite and >= 0 (got %g)", lr);
    o->step++;
    const double t = (double)o->step;
    /* Scalars in double then rounded once, as torch computes them in Python floats. */
    const float decay = (float)(1.0 - lr * o->cfg.weight_decay);
    const float b1 = (float)o->cfg.beta1, b2 = (float)o->cfg.beta2;
    const float omb1 = (float)(1.0 - o->cfg.beta1), omb2 = (float)(1.0 - o->cfg.beta2);
    const float step_size = (float)(lr / (1.0 - pow(o->cfg.beta1, t)));
    const float bc2_sqrt = (float)sqrt(1.0 - pow(o->cfg.beta2, t));
    const float eps = (float)o->cfg.eps;
    float *m = o->m, *v = o->v;
    /* Vectorized (simd; this file is built with -fno-math-errno, cmake/KernelVariants.cmake,
     * so that sqrtf is an instruction): as a scalar loop its square roots and divisions, not
     * memory, bounded the step. The same IEEE operations per element (no contraction in C11
     * mode), so the result is bit-identical to the scalar loop's. */
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < o->n; i++) {
        float gi = g[i];
        float pi = p[i] * decay;
        float mi = m[i] * b1 + gi * omb1;
        float vi = v[i] * b2 + gi * gi * omb2;
        m[i] = mi;
        v[i] = vi;
        p[i] = pi - step_size * (mi / (sqrtf(vi) / bc2_sqrt + eps));
    }
    return DF_OK;
}

double df_grad_norm(const float *g, int64_t n)
{
    double ss = 0.0;
#pragma omp parallel for simd reduction(+ : ss) schedule(static)
    for (int64_t i = 0; i < n; i++)
        ss += (double)g[i] * (double)g[i];
    return sqrt(ss);
}

double df_clip_grad_norm(float *g, int64_t n, double max_norm)
{
    double norm = df_grad_norm(g, n);
    if (!isfinite(norm) || !(max_norm > 0))
        return norm;
    double coef = max_norm / (norm + 1e-6);
    if (coef < 1.0) {
        const float c = (float)coef;
#pragma omp parallel for simd schedule(static)
        for (int64_t i = 0; i < n; i++)
            g[i] *= c;
    }
    return norm;
}
