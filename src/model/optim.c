/* AdamW state and LR schedules (include/distflow/optim.h); the per-step loops are
 * in optim_step.c, a multi-compiled kernel TU. */
#include "distflow/optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void df_adamw_config_defaults(df_adamw_config *c)
{
    c->beta1 = 0.9;
    c->beta2 = 0.999;
    c->eps = 1e-8;
    c->weight_decay = 0.01;
}

int df_adamw_create(const df_adamw_config *c, int64_t n, df_adamw **out)
{
    if (n <= 0)
        return df_error(DF_EINVAL, "AdamW: parameter count must be > 0 (got %lld)", (long long)n);
    if (!(c->beta1 >= 0 && c->beta1 < 1) || !(c->beta2 >= 0 && c->beta2 < 1))
        return df_error(DF_EINVAL, "AdamW: betas must lie in [0, 1) (got %g, %g)", c->beta1,
                        c->beta2);
    if (!(c->eps > 0) || !(c->weight_decay >= 0))
        return df_error(DF_EINVAL, "AdamW: need eps > 0 and weight_decay >= 0 (got %g, %g)",
                        c->eps, c->weight_decay);
    df_adamw *o = calloc(1, sizeof *o);
    size_t bytes = ((size_t)n * sizeof(float) + 63) / 64 * 64;
    if (o) {
        o->m = aligned_alloc(64, bytes);
        o->v = aligned_alloc(64, bytes);
    }
    if (!o || !o->m || !o->v) {
        df_adamw_free(o);
        return df_error(DF_ENOMEM, "AdamW: out of memory for %lld parameters", (long long)n);
    }
    o->cfg = *c;
    o->n = n;
    df_adamw_reset(o);
    *out = o;
    return DF_OK;
}

void df_adamw_free(df_adamw *o)
{
    if (!o)
        return;
    free(o->m);
    free(o->v);
    free(o);
}

void df_adamw_reset(df_adamw *o)
{
    memset(o->m, 0, (size_t)o->n * sizeof(float));
    memset(o->v, 0, (size_t)o->n * sizeof(float));
    o->step = 0;
}

int df_lr_kind_parse(const char *name, df_lr_kind *out)
{
    if (name && !strcmp(name, "constant")) {
        *out = DF_LR_CONSTANT;
        return DF_OK;
    }
    if (name && !strcmp(name, "cosine")) {
        *out = DF_LR_COSINE;
        return DF_OK;
    }
    return df_error(DF_EINVAL, "unknown learning-rate schedule \"%s\" (constant, cosine)",
                    name ? name : "(null)");
}

/* After warmup: held at 1 for the stable share, then a cosine to min_lr_ratio, then min_lr_ratio. */
static double wsd_factor(const df_lr_schedule *s, int64_t step)
{
    int64_t rest = s->total_steps > s->warmup_steps ? s->total_steps - s->warmup_steps : 0;
    int64_t stable = (int64_t)((double)rest * DF_LR_WSD_STABLE_RATIO), decay = rest - stable;
    if (step < s->warmup_steps + stable)
        return 1.0;
    if (step >= s->total_steps)
        return s->min_lr_ratio;
    double progress = (double)(step - s->warmup_steps - stable) / (double)(decay > 1 ? decay : 1);
    double v = 0.5 * (1.0 + cos(M_PI * s->num_cycles * 2.0 * progress));
    return (1.0 - s->min_lr_ratio) * (v > 0.0 ? v : 0.0) + s->min_lr_ratio;
}

double df_lr_schedule_factor(const df_lr_schedule *s, int64_t step)
{
    if (step < s->warmup_steps)
        return (double)step / (double)(s->warmup_steps > 1 ? s->warmup_steps : 1);
    if (s->kind == DF_LR_CONSTANT)
        return 1.0;
    if (s->kind == DF_LR_WSD)
        return wsd_factor(s, step);
    int64_t span = s->total_steps - s->warmup_steps;
    double progress = (double)(step - s->warmup_steps) / (double)(span > 1 ? span : 1);
    double coef = (1.0 - s->min_lr_ratio) * 0.5, intercept = (1.0 + s->min_lr_ratio) * 0.5;
    double f = cos(M_PI * s->num_cycles * 2.0 * progress) * coef + intercept;
    return f > 0.0 ? f : 0.0;
}
