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

static int cmp_cand_id(const void *pa, const void *pb)
{
    const cand *a = pa, *b = pb;
    return (a->id > b->id) - (a->id < b->id);
}

/* Take tokens of c[0..n) in the given order until have reaches need. */
static int64_t take_until(const cand *c, int64_t n, double have, double need)
{
    for (int64_t i = 0; i < n; i++) {
        have += c[i].w;
        if (have >= need)
            return i + 1;
    }
    return n;
}

/* Three-way partition of c[0..n) by weight around piv: > piv, == piv, < piv.
 * Stores the ends of the first two parts in *gt, *eq. */
static void partition3(cand *c, int64_t n, double piv, int64_t *gt, int64_t *eq)
{
    int64_t lo = 0, i = 0, hi = n;
    while (i < hi) {
        cand t = c[i];
        if (t.w > piv) {
            c[i++] = c[lo];
            c[lo++] = t;
        } else if (t.w < piv) {
            c[i] = c[--hi];
            c[hi] = t;
        } else {
            i++;
        }
    }
    *gt = lo;
    *eq = hi;
}

static double mass_of(const cand *c, int64_t n)
{
    double m = 0.0;
    for (int64_t i = 0; i < n; i++)
        m += c[i].w;
    return m;
}

/* Move the nucleus to c[0..return): the most probable tokens (ties -> lower
 * id) whose mass first reaches top_p of the total. Quickselect-style: expected
 * O(n), no full sort. */
static int64_t nucleus(cand *c, int64_t n, double top_p)
{
    double need = top_p * mass_of(c, n), have = 0.0;
    int64_t lo = 0, hi = n; /* c[0..lo) kept; the boundary lies in [lo, hi) */
    while (hi - lo > 16) {
        cand *r = c + lo;
        int64_t m = hi - lo, gt, eq;
        double a = r[0].w, b = r[m / 2].w, d = r[m - 1].w;
        double piv = (a > b) == (b > d) ? b : ((b > a) == (a > d) ? a : d);
        partition3(r, m, piv, &gt, &eq);
        double mg = mass_of(r, gt);
        if (have + mg >= need) {
            hi = lo + gt;
            continue;
        }
        have += mg;
        double me = mass_of(r + gt, eq - gt);
        if (have + me >= need) { /* boundary among equal weights: lower ids first */
            qsort(r + gt, (size_t)(eq - gt), sizeof *r, cmp_cand_id);
            return lo + gt + take_until(r + gt, eq - gt, have, need);
        }
        have += me;
        lo += eq;
    }
    qsort(c + lo, (size_t)(hi - lo), sizeof *c, cmp_cand_desc);
    return lo + take_until(c + lo, hi - lo, have, need);
}

/* Kept tokens and their weights exp(z - zmax), z = logits / T, in c[0..return)
 * after top-k and top-p; *lse = log sum_v exp(z_v) over the whole vocabulary. */
static int64_t filter(const float *logits, int64_t V, const df_sampling_params *sp, void *work,
                      double *lse)
{
    cand *c = work;
    double *z = (double *)(c + V);
    double T = sp->temperature, zmax = -INFINITY, total = 0.0;
    for (int64_t v = 0; v < V; v++) {
        z[v] = logits[v] / T;
        zmax = z[v] > zmax ? z[v] : zmax;
    }
    for (int64_t v = 0; v < V; v++) {
        c[v] = (cand){exp(z[v] - zmax), (int32_t)v};
        total += c[v].w;
    }
    *lse = zmax + log(total);
    int64_t n = V;
    if (sp->top_k > 0 && sp->top_k < V) {
        double thr = kth_largest(z, V, sp->top_k); /* reorders z */
        n = 0;
        for (int64_t v = 0; v < V; v++)
            if (logits[v] / T >= thr)
                c[n++] = c[v];
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
    double lse;
    int64_t n = filter(logits, V, sp, work, &lse);
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
        *logp = (float)(logits[tok] / (double)sp->temperature - lse);
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
    double lse;
    int64_t n = filter(logits, V, sp, work, &lse);
    double mass = 0.0;
    for (int64_t i = 0; i < n; i++)
        mass += c[i].w;
    for (int64_t i = 0; i < n; i++)
        probs[c[i].id] = c[i].w / mass;
}
