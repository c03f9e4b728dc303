/* verl's validation metrics and pass@k (val_metrics.h). */
#include "workers/common/val_metrics.h"

#include "distflow/reward.h"

#include "distflow/rng.h"
#include "workers/common/data_metrics.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEP "\x1f" /* between the parts of a sum's key: a data_source may hold '/' */
#define KEY_CAP 1024

int df_val_ns(int64_t n, int64_t ns[DF_VAL_MAX_NS])
{
    int k = 0;
    if (n <= 1)
        return 0;
    for (int64_t N = 2; N < n; N *= 2)
        ns[k++] = N;
    ns[k++] = n;
    return k;
}

double df_pass_at_k(int64_t n, int64_t c, int64_t k)
{
    if (n - c < k)
        return 1.0; /* every k-subset holds a correct response */
    double miss = 1.0; /* C(n-c, k) / C(n, k) */
    for (int64_t i = n - c + 1; i <= n; i++)
        miss *= 1.0 - (double)k / (double)i;
    return 1.0 - miss;
}

double df_val_maj(const double *v, const char *const *pred, const int64_t *s, int64_t N)
{
    int64_t best = 0;
    double val = 0;
    for (int64_t j = 0; j < N; j++) {
        const char *p = pred[s[j]];
        bool seen = false;
        for (int64_t k = 0; k < j && !seen; k++)
            seen = !strcmp(pred[s[k]], p);
        if (seen)
            continue; /* counted at its first occurrence */
        int64_t cnt = 1;
        for (int64_t k = j + 1; k < N; k++)
            cnt += !strcmp(pred[s[k]], p);
        if (cnt > best) /* strictly: a tie keeps the earlier prediction, as Python's max over a dict */
            best = cnt, val = v[s[j]];
    }
    return val;
}

/* Mean and population standard deviation (numpy's np.std, ddof 0) of x[n], two passes. */
static void mean_std(const double *x, int64_t n, double *mean, double *std)
{
    double s = 0, d = 0;
    for (int64_t i = 0; i < n; i++)
        s += x[i];
    *mean = s / (double)n;
    for (int64_t i = 0; i < n; i++)
        d += (x[i] - *mean) * (x[i] - *mean);
    *std = sqrt(d / (double)n);
}

static int put(df_metrics *sums, const char *prefix, const char *metric, double v)
{
    char key[KEY_CAP];
    if (snprintf(key, sizeof key, "%s%s", prefix, metric) >= (int)sizeof key)
        return df_error(DF_EINVAL, "validation metrics: name '%.60s...' too long", prefix);
    return df_metrics_add(sums, key, v);
}

/* best@N, worst@N (and maj@N with preds) from DF_VAL_BOOTSTRAP resamples; r[3][B], s[N] scratch. */
static int bootstrap(const double *v, const char *const *pred, int64_t n, int64_t N, uint64_t seed,
                     int64_t index, const char *prefix, double *r, int64_t *s, df_metrics *sums)
{
    const int64_t B = DF_VAL_BOOTSTRAP;
    df_rng g;
    df_rng_seed(&g, df_rng_key(seed, DF_VAL_RNG_TAG, (uint64_t)index, (uint64_t)N));
    for (int64_t b = 0; b < B; b++) {
        double hi = -INFINITY, lo = INFINITY;
        for (int64_t j = 0; j < N; j++) {
            s[j] = (int64_t)df_rng_below(&g, (uint64_t)n);
            hi = fmax(hi, v[s[j]]), lo = fmin(lo, v[s[j]]);
        }
        r[b] = hi, r[B + b] = lo;
        if (pred)
            r[2 * B + b] = df_val_maj(v, pred, s, N);
    }
    static const char *const what[] = {"best", "worst", "maj"};
    int rc = DF_OK;
    for (int w = 0; w < (pred ? 3 : 2) && !rc; w++) {
        double mean, std;
        char name[96];
        mean_std(r + w * B, B, &mean, &std);
        snprintf(name, sizeof name, "%s@%lld/mean", what[w], (long long)N);
        rc = put(sums, prefix, name, mean);
        snprintf(name, sizeof name, "%s@%lld/std", what[w], (long long)N);
        if (!rc)
            rc = put(sums, prefix, name, std);
    }
    return rc;
}

/* pass@1 and pass@k for each k of ns: c counts the responses with v == 1. */
static int pass_metrics(const double *v, int64_t n, const int64_t *ns, int nns, const char *prefix,
                        df_metrics *sums)
{
    int64_t c = 0;
    for (int64_t i = 0; i < n; i++)
        c += v[i] == 1.0;
    int rc = DF_OK;
    for (int k = -1; k < nns && !rc; k++) {
        int64_t K = k < 0 ? 1 : ns[k];
        char name[64];
        snprintf(name, sizeof name, "pass@%lld", (long long)K);
        rc = put(sums, prefix, name, df_pass_at_k(n, c, K));
    }
    return rc;
}

int df_val_prompt_stats(const double *v, const char *const *pred, int64_t n, bool pass_at_k,
                        uint64_t seed, int64_t index, const char *prefix, df_metrics *sums)
{
    if (n < 1)
        return df_error(DF_EINVAL, "validation metrics: a prompt with %lld responses", (long long)n);
    int64_t ns[DF_VAL_MAX_NS];
    int nns = df_val_ns(n, ns);
    double mean, std;
    char name[64];
    mean_std(v, n, &mean, &std);
    snprintf(name, sizeof name, "mean@%lld", (long long)n);
    int rc = put(sums, prefix, name, mean);
    snprintf(name, sizeof name, "std@%lld", (long long)n);
    if (!rc && n > 1)
        rc = put(sums, prefix, name, std);
    double *r = nns ? malloc(3 * DF_VAL_BOOTSTRAP * sizeof *r) : NULL;
    int64_t *s = nns ? malloc((size_t)n * sizeof *s) : NULL;
    if (!rc && nns && (!r || !s))
        rc = df_error(DF_ENOMEM, "validation metrics: out of memory");
    for (int k = 0; k < nns && !rc; k++)
        rc = bootstrap(v, pred, n, ns[k], seed, index, prefix, r, s, sums);
    if (!rc && pass_at_k)
        rc = pass_metrics(v, n, ns, nns, prefix, sums);
    free(r), free(s);
    return rc;
}

double df_sequence_score(const df_batch *b, int64_t i)
{
    int64_t len = 0;
    const float *t = df_batch_tok_f32(b, "token_level_scores", i, &len);
    return t && len > 0 ? df_row_sum_f32(t, len) : df_batch_f32(b, "score")[i];
}

bool df_row_has_pred(const df_batch *b, int64_t i)
{
    const int64_t *valid = df_batch_has(b, "pred_valid") ? df_batch_i64(b, "pred_valid") : NULL;
    return df_batch_str(b, "pred", 0) != NULL && (!valid || valid[i]);
}

/* The variables: reward, then the extra infos the batch has (acc gets pass@k), then a Python reward
   function's numeric extra keys (DF_REWARD_EXTRA_PREFIX columns, named by their key). */
static const char *const VARS[] = {"reward", "acc", "overlong_reward", "overlong"};
#define NVARS (int)(sizeof VARS / sizeof *VARS)

/* The batch's variables, found once per batch: names[k] and their columns (cols[0], reward, is
   the sequence score: NULL); acc, when present, is k = 1. */
typedef struct {
    int n;
    const char **names;
    const float **cols;
} var_set;

static int find_vars(const df_batch *b, var_set *vs)
{
    size_t cap = (size_t)(NVARS + df_batch_num_columns(b));
    vs->n = 0;
    vs->names = malloc(cap * sizeof *vs->names);
    vs->cols = malloc(cap * sizeof *vs->cols);
    if (!vs->names || !vs->cols)
        return df_error(DF_ENOMEM, "validation metrics: out of memory");
    for (int k = 0; k < NVARS; k++) { /* the built-in ones keep their places: k == 1 is acc's pass@k */
        vs->names[vs->n] = VARS[k];
        vs->cols[vs->n++] = k ? df_batch_f32(b, VARS[k]) : NULL;
    }
    for (int c = 0; c < df_batch_num_columns(b); c++) {
        const df_column *col = df_batch_column_at(b, c);
        const char *key = df_reward_extra_key(col);
        if (key)
            vs->names[vs->n] = key, vs->cols[vs->n++] = col->data;
    }
    return DF_OK;
}

/* One prompt's rows [lo, lo + n): every variable's statistics under "val<SEP><src><SEP><var><SEP>". */
static int add_prompt(df_metrics *sums, const df_batch *b, const var_set *vs, int64_t lo, int64_t n,
                      uint64_t seed, double *v, const char **pred)
{
    const char *src = df_batch_str(b, "data_source", lo);
    bool has_pred = df_row_has_pred(b, lo); /* a prompt's responses share their data source */
    for (int64_t j = 0; has_pred && j < n; j++)
        pred[j] = df_batch_str(b, "pred", lo + j);
    char prefix[KEY_CAP];
    int rc = DF_OK;
    for (int k = 0; k < vs->n && !rc; k++) {
        const float *col = vs->cols[k];
        if (k > 0 && !col)
            continue;
        for (int64_t j = 0; j < n; j++)
            v[j] = k == 0 ? df_sequence_score(b, lo + j) : (double)col[lo + j];
        if (snprintf(prefix, sizeof prefix, "val" SEP "%s" SEP "%s" SEP, src, vs->names[k]) >= (int)sizeof prefix)
            return df_error(DF_EINVAL, "validation metrics: data_source '%.60s...' too long", src);
        rc = df_val_prompt_stats(v, has_pred ? pred : NULL, n, k == 1, seed,
                                 df_batch_i64(b, "index")[lo], prefix, sums);
    }
    if (!rc && snprintf(prefix, sizeof prefix, "val" SEP "%s" SEP "prompts", src) < (int)sizeof prefix)
        rc = df_metrics_add(sums, prefix, 1);
    return rc;
}

int df_val_metrics_add(df_metrics *sums, const df_batch *b, int64_t n, uint64_t seed)
{
    int64_t rows = df_batch_size(b);
    const int64_t *idx = df_batch_i64(b, "index");
    if (rows > 0 && (!idx || !df_batch_str(b, "data_source", 0) ||
                     (!df_batch_f32(b, "score") && !df_batch_column(b, "token_level_scores"))))
        return df_error(DF_EINVAL, "validation metrics: the batch needs index, data_source and "
                                   "token_level_scores or score");
    if (n < 1)
        return df_error(DF_EINVAL, "validation metrics: %lld responses per prompt", (long long)n);
    double *v = malloc((size_t)n * sizeof *v);
    const char **pred = malloc((size_t)n * sizeof *pred);
    var_set vs = {0};
    int rc = v && pred ? find_vars(b, &vs) : df_error(DF_ENOMEM, "validation metrics: out of memory");
    for (int64_t lo = 0, hi; lo < rows && !rc; lo = hi) {
        for (hi = lo + 1; hi < rows && idx[hi] == idx[lo]; hi++)
            ;
        if (hi - lo != n)
            rc = df_error(DF_EINVAL, "validation metrics: prompt %lld has %lld consecutive responses, "
                                     "not %lld", (long long)idx[lo], (long long)(hi - lo), (long long)n);
        else
            rc = add_prompt(sums, b, &vs, lo, n, seed, v, pred);
    }
    free(v), free((void *)pred), free(vs.names), free(vs.cols);
    return rc;
}

/* A sum's key split in place into data source, variable and metric (metric NULL for the prompt
   count); false for a key that is not one of ours. */
static bool split_key(char *key, char **src, char **var, char **metric)
{
    if (strncmp(key, "val" SEP, 4))
        return false;
    *src = key + 4;
    char *a = strchr(*src, SEP[0]);
    if (!a)
        return false;
    *a = '\0', *var = a + 1;
    char *c = strchr(*var, SEP[0]);
    *metric = c ? c + 1 : NULL;
    if (c)
        *c = '\0';
    return true;
}

/* verl's int(name.split("@")[-1].split("/")[0]): mean@4 -> 4, best@2/std -> 2. */
static int64_t metric_n(const char *metric)
{
    const char *at = strrchr(metric, '@');
    return at ? strtoll(at + 1, NULL, 10) : 0;
}

static bool core_metric(const char *var, const char *metric, int64_t n_max, bool has_acc)
{
    static const char *const core_prefix[] = {"mean", "maj", "best", "pass"};
    if (strcmp(var, has_acc ? "acc" : "reward") || metric_n(metric) != n_max)
        return false;
    for (int p = 0; p < 4; p++)
        if (!strncmp(metric, core_prefix[p], strlen(core_prefix[p])))
            return true;
    return false;
}

int df_val_metrics_finish(const df_metrics *sums, int64_t n, df_metrics *out)
{
    int rc = DF_OK;
    for (int i = 0; i < df_metrics_count(sums) && !rc; i++) {
        double sum;
        char key[KEY_CAP], *src, *var, *metric;
        snprintf(key, sizeof key, "%s", df_metrics_at(sums, i, &sum));
        if (!split_key(key, &src, &var, &metric) || !metric)
            continue;
        char count_key[KEY_CAP + 16], acc_key[KEY_CAP + 32], name[KEY_CAP + 16];
        snprintf(count_key, sizeof count_key, "val" SEP "%s" SEP "prompts", src);
        snprintf(acc_key, sizeof acc_key, "val" SEP "%s" SEP "acc" SEP "mean@%lld", src, (long long)n);
        double prompts = df_metrics_get(sums, count_key, 0);
        bool has_acc = df_metrics_has(sums, acc_key); /* every prompt has n responses: n is the largest N */
        snprintf(name, sizeof name, "%s/%s/%s/%s", core_metric(var, metric, n, has_acc) ? "val-core" : "val-aux",
                 src, var, metric);
        if (prompts > 0)
            rc = df_metrics_set(out, name, sum / prompts);
    }
    return rc;
}
