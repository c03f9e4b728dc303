/* Step-batch metrics with verl's names (data_metrics.h). */
#include "worker/data_metrics.h"

#include <float.h>
#include <stdio.h>

typedef struct {
    double sum, min, max;
    int64_t n;
} stat;

static void stat_add(stat *s, double v)
{
    if (s->n == 0 || v < s->min)
        s->min = v;
    if (s->n == 0 || v > s->max)
        s->max = v;
    s->sum += v;
    s->n++;
}

static void stat_put(df_metrics *m, const char *prefix, const stat *s)
{
    char k[96];
    if (s->n == 0)
        return;
    snprintf(k, sizeof k, "%s/mean", prefix);
    df_metrics_set(m, k, s->sum / (double)s->n);
    snprintf(k, sizeof k, "%s/max", prefix);
    df_metrics_set(m, k, s->max);
    snprintf(k, sizeof k, "%s/min", prefix);
    df_metrics_set(m, k, s->min);
}

/* Per-sample sums of a TOK_F32 column. */
static void seq_sums(const df_batch *b, const char *col, stat *s)
{
    const df_column *c = df_batch_column(b, col);
    if (!c || c->kind != DF_COL_TOK_F32)
        return;
    const float *v = c->data;
    for (int64_t i = 0; i < df_batch_size(b); i++) {
        double t = 0;
        for (int64_t j = c->offsets[i]; j < c->offsets[i + 1]; j++)
            t += v[j];
        stat_add(s, t);
    }
}

/* Token-level values of a TOK_F32 column. */
static void token_values(const df_batch *b, const char *col, stat *s)
{
    const df_column *c = df_batch_column(b, col);
    if (!c || c->kind != DF_COL_TOK_F32)
        return;
    const float *v = c->data;
    for (int64_t j = 0; j < c->offsets[df_batch_size(b)]; j++)
        stat_add(s, v[j]);
}

/* Per-sample values of an F32 column. */
static void sample_values(const df_batch *b, const char *col, stat *s)
{
    const float *v = df_batch_f32(b, col);
    for (int64_t i = 0; v && i < df_batch_size(b); i++)
        stat_add(s, v[i]);
}

static void lengths(const df_batch *b, const char *col, int64_t limit, df_metrics *m,
                    const char *prefix)
{
    const int64_t *o = df_batch_offsets(b, col);
    if (!o)
        return;
    stat s = {0};
    int64_t clipped = 0;
    for (int64_t i = 0; i < df_batch_size(b); i++) {
        int64_t len = o[i + 1] - o[i];
        stat_add(&s, (double)len);
        clipped += limit > 0 && len >= limit;
    }
    stat_put(m, prefix, &s);
    char k[96];
    snprintf(k, sizeof k, "%s/clip_ratio", prefix);
    if (s.n)
        df_metrics_set(m, k, (double)clipped / (double)s.n);
}

/* verl's critic/vf_explained_var: 1 - var(returns - values) / (var(returns) + 1e-5) over
   response tokens, torch.var's unbiased estimates; nothing for fewer than 2 tokens. */
static void explained_var(const df_batch *b, df_metrics *m)
{
    const df_column *v = df_batch_column(b, "values"), *r = df_batch_column(b, "returns");
    if (!v || !r || v->kind != DF_COL_TOK_F32 || r->kind != DF_COL_TOK_F32)
        return;
    int64_t T = r->offsets[df_batch_size(b)];
    if (T < 2 || v->offsets[df_batch_size(b)] != T)
        return;
    const float *vv = v->data, *rv = r->data;
    double sr = 0, sd = 0;
    for (int64_t t = 0; t < T; t++) {
        sr += rv[t];
        sd += (double)rv[t] - vv[t];
    }
    double mr = sr / (double)T, md = sd / (double)T, var_r = 0, var_d = 0;
    for (int64_t t = 0; t < T; t++) {
        double dr = rv[t] - mr, dd = (double)rv[t] - vv[t] - md;
        var_r += dr * dr;
        var_d += dd * dd;
    }
    var_r /= (double)(T - 1);
    var_d /= (double)(T - 1);
    df_metrics_set(m, "critic/vf_explained_var", 1.0 - var_d / (var_r + 1e-5));
}

int df_compute_data_metrics(const df_batch *b, int64_t max_response_length,
                            int64_t max_prompt_length, df_metrics *m)
{
    stat score = {0}, rew = {0}, adv = {0}, ret = {0};
    seq_sums(b, "token_level_scores", &score);
    seq_sums(b, "token_level_rewards", &rew);
    token_values(b, "advantages", &adv);
    token_values(b, "returns", &ret);
    stat_put(m, "critic/score", &score);
    stat_put(m, "critic/rewards", &rew);
    stat_put(m, "critic/advantages", &adv);
    stat_put(m, "critic/returns", &ret);
    stat over = {0}, flag = {0}; /* DAPO's overlong_buffer.log extra info */
    sample_values(b, "overlong_reward", &over);
    sample_values(b, "overlong", &flag);
    stat_put(m, "critic/overlong_reward", &over);
    if (flag.n)
        df_metrics_set(m, "critic/overlong/mean", flag.sum / (double)flag.n);
    stat val = {0}; /* with a critic (verl use_critic) */
    token_values(b, "values", &val);
    stat_put(m, "critic/values", &val);
    explained_var(b, m);
    lengths(b, "response_ids", max_response_length, m, "response_length");
    lengths(b, "prompt_ids", max_prompt_length, m, "prompt_length");
    return DF_OK;
}

int df_compute_throughput_metrics(const df_batch *b, double step_seconds, int n_workers,
                                  df_metrics *m)
{
    const int64_t *po = df_batch_offsets(b, "prompt_ids"), *ro = df_batch_offsets(b, "response_ids");
    int64_t n = df_batch_size(b);
    double tokens = (double)((po ? po[n] : 0) + (ro ? ro[n] : 0));
    df_metrics_set(m, "perf/total_num_tokens", tokens);
    df_metrics_set(m, "perf/time_per_step", step_seconds);
    if (step_seconds > 0 && n_workers > 0)
        df_metrics_set(m, "perf/throughput", tokens / (step_seconds * n_workers));
    return DF_OK;
}
