/* SRPO's progress reward (include/distflow/srpo.h): siiRL's compute_embodied_reward
 * (siirl/utils/reward_score/embodied.py) with the two sklearn pieces it calls, StandardScaler and
 * DBSCAN, written out so that their results match sklearn's label for label. */
#include "distflow/srpo.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

df_srpo_opts df_srpo_defaults(void)
{
    return (df_srpo_opts){.eps = 0.5, .min_samples = 2, .fail_scale = 0.6, .steepness = 10.0, .offset = 0.5};
}

int df_standard_scale(double *x, int64_t n, int dim, double *mean_out, double *scale_out)
{
    if (!x || n < 1 || dim < 1)
        return df_error(DF_EINVAL, "df_standard_scale: needs x, n >= 1 and dim >= 1");
    for (int k = 0; k < dim; k++) {
        double mean = 0, var = 0;
        for (int64_t i = 0; i < n; i++)
            mean += x[i * dim + k];
        mean /= (double)n;
        for (int64_t i = 0; i < n; i++)
            var += (x[i * dim + k] - mean) * (x[i * dim + k] - mean);
        var /= (double)n;
        /* sklearn's _is_constant_feature: a variance within rounding of zero is a constant column */
        double nd = (double)n, bound = nd * DBL_EPSILON * var + (nd * mean * DBL_EPSILON) * (nd * mean * DBL_EPSILON);
        double scale = var <= bound ? 1.0 : sqrt(var);
        for (int64_t i = 0; i < n; i++)
            x[i * dim + k] = (x[i * dim + k] - mean) / scale;
        if (mean_out)
            mean_out[k] = mean;
        if (scale_out)
            scale_out[k] = scale;
    }
    return DF_OK;
}

static double dist2(const double *a, const double *b, int dim)
{
    double s = 0;
    for (int k = 0; k < dim; k++)
        s += (a[k] - b[k]) * (a[k] - b[k]);
    return s;
}

/* Grow cluster `label` from core point `seed`. sklearn's dbscan_inner pushes unlabelled neighbours
   and labels them when popped; every point pushed during one growth ends in that cluster whatever the
   order, so labelling at the push gives the same clusters with a stack of at most n. */
static void grow(const double *x, int64_t n, int dim, double eps2, const bool *core, int64_t seed, int32_t label,
                 int32_t *labels, int64_t *stack)
{
    int64_t top = 0;
    labels[seed] = label;
    stack[top++] = seed;
    while (top > 0) {
        int64_t i = stack[--top];
        if (!core[i])
            continue; /* a border point joins but does not extend the cluster */
        for (int64_t j = 0; j < n; j++)
            if (labels[j] == -1 && dist2(x + i * dim, x + j * dim, dim) <= eps2) {
                labels[j] = label;
                stack[top++] = j;
            }
    }
}

int df_dbscan(const double *x, int64_t n, int dim, double eps, int min_samples, int32_t *labels, int *n_clusters)
{
    if (!x || !labels || n < 0 || dim < 1 || !isfinite(eps) || eps < 0 || min_samples < 1)
        return df_error(DF_EINVAL, "df_dbscan: needs x, labels, n >= 0, dim >= 1, a finite eps >= 0 and "
                                   "min_samples >= 1");
    bool *core = calloc((size_t)n + 1, sizeof *core);
    int64_t *stack = malloc(((size_t)n + 1) * sizeof *stack);
    if (!core || !stack) {
        free(core), free(stack);
        return df_error(DF_ENOMEM, "out of memory");
    }
    double eps2 = eps * eps; /* distance <= eps, compared squared (sklearn's radius_neighbors: <=) */
    for (int64_t i = 0; i < n; i++) {
        int64_t count = 0;
        for (int64_t j = 0; j < n; j++)
            count += dist2(x + i * dim, x + j * dim, dim) <= eps2;
        core[i] = count >= min_samples;
        labels[i] = -1;
    }
    int32_t next = 0;
    for (int64_t i = 0; i < n; i++)
        if (labels[i] == -1 && core[i])
            grow(x, n, dim, eps2, core, i, next++, labels, stack);
    free(core), free(stack);
    if (n_clusters)
        *n_clusters = next;
    return DF_OK;
}

/* The mean of the rows of s[ns, dim] whose label is `c` (every row when c < 0) into ctr[dim]. */
static void mean_of(const double *s, int64_t ns, int dim, const int32_t *labels, int32_t c, double *ctr)
{
    int64_t members = 0;
    memset(ctr, 0, (size_t)dim * sizeof *ctr);
    for (int64_t i = 0; i < ns; i++)
        if (c < 0 || labels[i] == c) {
            for (int d = 0; d < dim; d++)
                ctr[d] += s[i * dim + d];
            members++;
        }
    for (int d = 0; d < dim; d++)
        ctr[d] /= (double)members;
}

/* The centres of the successes s[ns, dim] (raw embeddings): each DBSCAN cluster's mean over the
   standardised points, mapped back (= the mean of its raw points), or the mean of every success when
   all are noise. centres gets [*n_centres, dim] (room for ns). */
static int success_centres(const double *s, int64_t ns, int dim, const df_srpo_opts *o, double *centres,
                           int *n_centres)
{
    double *scaled = malloc((size_t)ns * (size_t)dim * sizeof *scaled);
    int32_t *labels = malloc((size_t)ns * sizeof *labels);
    int rc = scaled && labels ? DF_OK : df_error(DF_ENOMEM, "out of memory"), k = 0;
    if (!rc) {
        memcpy(scaled, s, (size_t)ns * (size_t)dim * sizeof *scaled);
        rc = df_standard_scale(scaled, ns, dim, NULL, NULL);
    }
    if (!rc)
        rc = df_dbscan(scaled, ns, dim, o->eps, o->min_samples, labels, &k);
    if (!rc && k == 0)
        mean_of(s, ns, dim, labels, -1, centres);
    for (int c = 0; !rc && c < k; c++)
        mean_of(s, ns, dim, labels, c, centres + (size_t)c * (size_t)dim);
    *n_centres = k > 0 ? k : 1;
    free(scaled), free(labels);
    return rc;
}

/* The shaped rewards of one task's failures f[nf, dim] given its successes' centres. */
static void shape_failures(const double *f, int64_t nf, int dim, const double *centres, int n_centres, double *dist,
                           double *norm)
{
    double lo = INFINITY, hi = -INFINITY;
    for (int64_t i = 0; i < nf; i++) {
        double best = INFINITY;
        for (int c = 0; c < n_centres; c++) {
            double d = sqrt(dist2(f + i * dim, centres + (size_t)c * (size_t)dim, dim));
            best = d < best ? d : best;
        }
        dist[i] = best;
        lo = best < lo ? best : lo;
        hi = best > hi ? best : hi;
    }
    for (int64_t i = 0; i < nf; i++) /* siiRL: a range under 1e-6 puts every failure at 0.5 */
        norm[i] = hi - lo < 1e-6 ? 0.5 : (dist[i] - lo) / (hi - lo);
}

static double sigmoid(double z) { return 1.0 / (1.0 + exp(-z)); }

/* One task's rows idx[m] (valid embeddings): successes 1, failures 0 or shaped. */
static int reward_task(const float *emb, const bool *complete, const int64_t *idx, int64_t m, int dim,
                       const df_srpo_opts *o, float *reward, df_srpo_detail *detail)
{
    int64_t ns = 0, nf = 0;
    for (int64_t j = 0; j < m; j++)
        ns += complete[idx[j]];
    nf = m - ns;
    for (int64_t j = 0; j < m; j++)
        reward[idx[j]] = complete[idx[j]] ? 1.0f : 0.0f;
    if (!ns || !nf)
        return DF_OK;
    double *s = malloc((size_t)ns * (size_t)dim * sizeof *s), *f = malloc((size_t)nf * (size_t)dim * sizeof *f);
    double *centres = malloc((size_t)ns * (size_t)dim * sizeof *centres);
    double *dist = malloc((size_t)nf * 2 * sizeof *dist);
    int rc = s && f && centres && dist ? DF_OK : df_error(DF_ENOMEM, "out of memory"), n_centres = 0;
    for (int64_t j = 0, a = 0, b = 0; !rc && j < m; j++) { /* successes into s, failures into f, in row order */
        double *to = complete[idx[j]] ? s + dim * a++ : f + dim * b++;
        for (int d = 0; d < dim; d++)
            to[d] = (double)emb[idx[j] * dim + d];
    }
    if (!rc)
        rc = success_centres(s, ns, dim, o, centres, &n_centres);
    if (!rc) {
        shape_failures(f, nf, dim, centres, n_centres, dist, dist + nf);
        for (int64_t j = 0, b = 0; j < m; j++) {
            if (complete[idx[j]])
                continue;
            reward[idx[j]] = (float)(o->fail_scale * sigmoid(o->steepness * (o->offset - dist[nf + b])));
            if (detail)
                detail[idx[j]] = (df_srpo_detail){.distance = dist[b], .normalized = dist[nf + b]};
            b++;
        }
    }
    free(s), free(f), free(centres), free(dist);
    return rc;
}

static bool all_zero(const float *e, int dim)
{
    for (int d = 0; d < dim; d++)
        if (e[d] != 0.0f)
            return false;
    return true;
}

int df_srpo_progress_reward(const float *emb, const bool *complete, const int64_t *task, int64_t n, int dim,
                            const df_srpo_opts *o, float *reward, df_srpo_detail *detail)
{
    if (!emb || !complete || !task || !o || !reward || n < 0 || dim < 1)
        return df_error(DF_EINVAL, "df_srpo_progress_reward: needs emb, complete, task, options, reward, n >= 0 "
                                   "and dim >= 1");
    int64_t *idx = malloc(((size_t)n + 1) * sizeof *idx);
    bool *done = calloc((size_t)n + 1, sizeof *done);
    int rc = idx && done ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    for (int64_t i = 0; !rc && i < n; i++) {
        reward[i] = 0.0f; /* invalid rows (all-zero embeddings) keep 0 */
        if (detail)
            detail[i] = (df_srpo_detail){.distance = NAN, .normalized = NAN};
        done[i] = all_zero(emb + i * dim, dim);
    }
    /* each task's valid rows in row order (siiRL's dict of task name -> indices); done: invalid or
       already scored with its task */
    for (int64_t i = 0; !rc && i < n; i++) {
        if (done[i])
            continue;
        int64_t m = 0;
        for (int64_t j = i; j < n; j++)
            if (!done[j] && task[j] == task[i]) {
                idx[m++] = j;
                done[j] = true;
            }
        rc = reward_task(emb, complete, idx, m, dim, o, reward, detail);
    }
    free(idx), free(done);
    return rc;
}
