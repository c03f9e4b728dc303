/* Token sampling: temperature, top-k, top-p, greedy (src/engine/sampling.h). */
#include "engine/sampling.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A kept token and its unnormalised weight exp(z - zmax). */
typedef struct {
    double w;
    int32_t id;
} cand;

/* Layout of the work buffer: cand[V] then double[V] (selection scratch). */
int64_t df_sample_work_bytes(int64_t V) { return V * (int64_t)(sizeof(cand) + sizeof(double)); }

void df_sampling_params_defaults(df_sampling_params *sp)
{
    memset(sp, 0, sizeof *sp);
    sp->temperature = 1.0f;
    sp->top_k = -1;
    sp->top_p = 1.0f;
    sp->max_new_tokens = 512;
}

int df_sampling_params_validate(const df_sampling_params *sp, int64_t vocab)
{
    if (!sp)
        return df_error(DF_EINVAL, "sampling params: NULL");
    if (!sp->greedy && !(sp->temperature >= 0.0f && isfinite(sp->temperature)))
        return df_error(DF_EINVAL, "sampling params: temperature must be >= 0 (got %g)",
                        (double)sp->temperature);
    if (!(sp->top_p > 0.0f && sp->top_p <= 1.0f))
        return df_error(DF_EINVAL, "sampling params: top_p must be in (0, 1] (got %g)",
                        (double)sp->top_p);
    if (sp->max_new_tokens < 1)
        return df_error(DF_EINVAL, "sampling params: max_new_tokens must be >= 1 (got %lld)",
                        (long long)sp->max_new_tokens);
    if (sp->n_stop < 0 || (sp->n_stop > 0 && !sp->stop_ids))
        return df_error(DF_EINVAL, "sampling params: n_stop = %d with stop_ids %s", sp->n_stop,
                        sp->stop_ids ? "set" : "NULL");
    for (int i = 0; i < sp->n_stop; i++)
        if (sp->stop_ids[i] < 0 || sp->stop_ids[i] >= vocab)
            return df_error(DF_EINVAL, "sampling params: stop_ids[%d] = %d is outside [0, %lld)",
                            i, sp->stop_ids[i], (long long)vocab);
    return DF_OK;
}

static bool is_greedy(const df_sampling_params *sp) { return sp->greedy || sp->temperature == 0.0f; }

static int32_t argmax_lowest(const float *x, int64_t V)
{
    int64_t best = 0;
    for (int64_t v = 1; v < V; v++)
        if (x[v] > x[best])
            best = v;
    return (int32_t)best;
}

/* log_softmax(logits / T)[tok] in double, over the whole vocabulary. */
static double log_prob_of(const float *logits, int64_t V, double T, int32_t tok)
{
    double zmax = -INFINITY;
    for (int64_t v = 0; v < V; v++)
        if (logits[v] / T > zmax)
            zmax = logits[v] / T;
    double s = 0.0;
    for (int64_t v = 0; v < V; v++)
        s += exp(logits[v] / T - zmax);
    return logits[tok] / T - zmax - log(s);
}

/* k-th largest (1-based) of x[0..n), reordering x (Hoare selection). */
static double kth_largest(double *x, int64_t n, int64_t k)
{
    int64_t lo = 0, hi = n - 1, want = k - 1;
    while (lo < hi) {
        double a = x[lo], b = x[lo + (hi - lo) / 2], c = x[hi];
        double piv = (a > b) == (b > c) ? b : ((b > a) == (a > c) ? a : c); /* median of 3 */
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (x[i] > piv)
                i++;
            while (x[j] < piv)
                j--;
            if (i <= j) {
                double t = x[i];
                x[i++] = x[j];
                x[j--] = t;
            }
        }
        if (want <= j)
            hi = j;
        else if (want >= i)
            lo = i;
        else
            return x[want];
    }
    return x[want];
}

static int cmp_cand_desc(const void *pa, const void *pb)
{
    const cand *a = pa, *b = pb;
    if (a->w != b->w)
        return a->w > b->w ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

/* Sort c[0..n) by weight (desc, ties by id) and return the nucleus size. */
static int64_t nucleus(cand *c, int64_t n, double top_p)
{
    double mass = 0.0;
    for (int64_t i = 0; i < n; i++)
        mass += c[i].w;
    double need = top_p * mass;
    /* Tokens with w >= 1e-4 rank above all others; if their mass already
     * reaches `need`, the nucleus lies among them and only they are sorted. */
    int64_t m = n;
    if (n > 1024) {
        double wmax = 0.0, front = 0.0;
        for (int64_t i = 0; i < n; i++)
            wmax = c[i].w > wmax ? c[i].w : wmax;
        int64_t j = 0;
        for (int64_t i = 0; i < n; i++)
            if (c[i].w >= 1e-4 * wmax)
                front += c[i].w, j++;
        if (front >= need) {
            for (int64_t i = 0, k = 0; i < n && k < j; i++)
                if (c[i].w >= 1e-4 * wmax) {
                    cand t = c[k];
                    c[k++] = c[i];
                    c[i] = t;
                }
            m = j;
        }
    }
    qsort(c, (size_t)m, sizeof *c, cmp_cand_desc);
    double cum = 0.0;
    for (int64_t i = 0; i < m; i++) {
        cum += c[i].w;
        if (cum >= need)
            return i + 1;
    }
    return m;
}

/* Kept tokens and weights after temperature / top-k / top-p, in c[0..return). */
static int64_t filter(const float *logits, int64_t V, const df_sampling_params *sp, void *work)
{
    cand *c = work;
    double *tmp = (double *)(c + V);
    double T = sp->temperature, zmax = -INFINITY;
    for (int64_t v = 0; v < V; v++)
        if (logits[v] / T > zmax)
            zmax = logits[v] / T;
    int64_t n = 0;
    if (sp->top_k > 0 && sp->top_k < V) {
        for (int64_t v = 0; v < V; v++)
            tmp[v] = logits[v] / T;
        double thr = kth_largest(tmp, V, sp->top_k);
        for (int64_t v = 0; v < V; v++)
            if (logits[v] / T >= thr)
                c[n++] = (cand){exp(logits[v] / T - zmax), (int32_t)v};
    } else {
        for (int64_t v = 0; v < V; v++)
            c[n++] = (cand){exp(logits[v] / T - zmax), (int32_t)v};
    }
    if (sp->top_p < 1.0f)
        n = nucleus(c, n, sp->top_p);
    return n;
}

int32_t df_sample_token(const float *logits, int64_t V, const df_sampling_params *sp,
                        df_rng *rng, void *work, float *logp)
{
    if (is_greedy(sp)) {
        int32_t tok = argmax_lowest(logits, V);
        if (logp)
            *logp = (float)log_prob_of(logits, V, 1.0, tok);
        return tok;
    }
    const cand *c = work;
    int64_t n = filter(logits, V, sp, work);
    double mass = 0.0;
    for (int64_t i = 0; i < n; i++)
        mass += c[i].w;
    double target = df_rng_uniform(rng) * mass, cum = 0.0;
    int32_t tok = c[n - 1].id; /* if rounding leaves target beyond the sum */
    for (int64_t i = 0; i < n; i++) {
        cum += c[i].w;
        if (cum > target) {
            tok = c[i].id;
            break;
        }
    }
    if (logp)
        *logp = (float)log_prob_of(logits, V, sp->temperature, tok);
    return tok;
}

void df_sample_probs(const float *logits, int64_t V, const df_sampling_params *sp, void *work,
                     double *probs)
{
    memset(probs, 0, (size_t)V * sizeof *probs);
    if (is_greedy(sp)) {
        probs[argmax_lowest(logits, V)] = 1.0;
        return;
    }
    const cand *c = work;
    int64_t n = filter(logits, V, sp, work);
    double mass = 0.0;
    for (int64_t i = 0; i < n; i++)
        mass += c[i].w;
    for (int64_t i = 0; i < n; i++)
        probs[c[i].id] = c[i].w / mass;
}
