/* Step-batch metrics with verl's names (data_metrics.h). */
#include "workers/common/data_metrics.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

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

double df_row_sum_f32(const float *v, int64_t n)
{
    double t = 0;
    for (int64_t j = 0; j < n; j++)
        t += v[j];
    return t;
}

/* verl's aborted response: one of no tokens (an aborted request returns none). */
static bool aborted(const int64_t *ro, int64_t i) { return ro && ro[i + 1] == ro[i]; }

/* Per-sample sums of a TOK_F32 column over the responses not aborted (ro: response offsets). */
static void seq_sums(const df_batch *b, const char *col, const int64_t *ro, stat *s)
{
    const df_column *c = df_batch_column(b, col);
    if (!c || c->kind != DF_COL_TOK_F32)
        return;
    const float *v = c->data;
    for (int64_t i = 0; i < df_batch_size(b); i++)
        if (!aborted(ro, i))
            stat_add(s, df_row_sum_f32(v + c->offsets[i], c->offsets[i + 1] - c->offsets[i]));
}

/* Token-level values of a TOK_F32 column, on the model's tokens (mask; NULL: all of them). */
static void token_values(const df_batch *b, const char *col, const int32_t *mask, stat *s)
{
    const df_column *c = df_batch_column(b, col);
    if (!c || c->kind != DF_COL_TOK_F32)
        return;
    const float *v = c->data;
    for (int64_t j = 0; j < c->offsets[df_batch_size(b)]; j++)
        if (!mask || mask[j])
            stat_add(s, v[j]);
}

/* Per-sample values of an F32 column. */
static void sample_values(const df_batch *b, const char *col, stat *s)
{
    const float *v = df_batch_f32(b, col);
    for (int64_t i = 0; v && i < df_batch_size(b); i++)
        stat_add(s, v[i]);
}

/* prefix/{mean,max,min,clip_ratio} of the rows' lengths in col, the empty ones left out when
   skip_empty (verl's response_length_non_aborted). */
static void lengths(const df_batch *b, const char *col, int64_t limit, bool skip_empty, df_metrics *m,
                    const char *prefix)
{
    const int64_t *o = df_batch_offsets(b, col);
    if (!o)
        return;
    stat s = {0};
    int64_t clipped = 0;
    for (int64_t i = 0; i < df_batch_size(b); i++) {
        int64_t len = o[i + 1] - o[i];
        if (skip_empty && len == 0)
            continue;
        stat_add(&s, (double)len);
        clipped += limit > 0 && len >= limit;
    }
    stat_put(m, prefix, &s);
    char k[96];
    snprintf(k, sizeof k, "%s/clip_ratio", prefix);
    if (s.n)
        df_metrics_set(m, k, (double)clipped / (double)s.n);
}

void df_explained_var_sums(const df_batch *b, double s[DF_EV_NSUMS])
{
    const df_column *v = df_batch_column(b, "values"), *r = df_batch_column(b, "returns");
    if (!v || !r || v->kind != DF_COL_TOK_F32 || r->kind != DF_COL_TOK_F32)
        return;
    int64_t n = df_batch_size(b), T = r->offsets[n];
    if (memcmp(v->offsets, r->offsets, (size_t)(n + 1) * sizeof *r->offsets))
        return; /* not laid out alike */
    const float *vv = v->data, *rv = r->data;
    const int32_t *mask = NULL; /* multi-turn: the model's tokens (a malformed mask: all) */
    if (df_batch_response_mask(b, &mask))
        mask = NULL;
    for (int64_t t = 0; t < T; t++) {
        if (mask && !mask[t])
            continue;
        double d = (double)rv[t] - vv[t];
        s[0] += 1;
        s[1] += rv[t];
        s[2] += (double)rv[t] * rv[t];
        s[3] += d;
        s[4] += d * d;
    }
}

/* Unbiased variance from n, sum x and sum x^2 (clamped: rounding may dip below 0). */
static double var_of(double n, double sx, double sxx)
{
    double v = (sxx - sx * sx / n) / (n - 1);
    return v > 0 ? v : 0;
}

bool df_explained_var(const double s[DF_EV_NSUMS], double *out)
{
    if (s[0] < 2)
        return false;
    *out = 1.0 - var_of(s[0], s[3], s[4]) / (var_of(s[0], s[1], s[2]) + 1e-5);
    return true;
}

int df_compute_data_metrics(const df_batch *b, int64_t max_response_length,
                            int64_t max_prompt_length, df_metrics *m)
{
    stat score = {0}, rew = {0}, adv = {0}, ret = {0};
    const int32_t *mask = NULL; /* multi-turn: token statistics over the model's tokens (verl) */
    int rc = df_batch_response_mask(b, &mask);
    if (rc)
        return rc;
    const int64_t *ro = df_batch_offsets(b, "response_ids");
    seq_sums(b, "token_level_scores", ro, &score);
    seq_sums(b, "token_level_rewards", ro, &rew);
    token_values(b, "advantages", mask, &adv);
    token_values(b, "returns", mask, &ret);
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
    token_values(b, "values", mask, &val);
    stat_put(m, "critic/values", &val);
    stat turns = {0}; /* multi-turn rollouts: verl's num_turns (user + assistant turns + 1) */
    const int64_t *nt = df_batch_i64(b, "num_turns");
    for (int64_t i = 0; nt && i < df_batch_size(b); i++)
        stat_add(&turns, (double)nt[i]);
    stat_put(m, "num_turns", &turns);
    stat calls = {0}, eret = {0}; /* the agent loop's: verl's agent_loop/tool_calls, the env's episodes */
    const int64_t *tc = df_batch_i64(b, "tool_calls"), *win = df_batch_i64(b, "env_success");
    const float *er = df_batch_f32(b, "env_return");
    double wins = 0;
    for (int64_t i = 0; i < df_batch_size(b); i++) {
        if (tc)
            stat_add(&calls, (double)tc[i]);
        if (er)
            stat_add(&eret, er[i]), wins += win ? (double)win[i] : 0.0;
    }
    stat_put(m, "agent_loop/tool_calls", &calls);
    stat_put(m, "env/episode_return", &eret);
    if (er && df_batch_size(b) > 0)
        df_metrics_set(m, "env/success_rate", wins / (double)df_batch_size(b));
    lengths(b, "response_ids", max_response_length, false, m, "response_length");
    lengths(b, "response_ids", max_response_length, true, m, "response_length_non_aborted");
    int64_t n_aborted = 0;
    for (int64_t i = 0; ro && i < df_batch_size(b); i++)
        n_aborted += aborted(ro, i);
    if (ro && df_batch_size(b) > 0)
        df_metrics_set(m, "response/aborted_ratio", (double)n_aborted / (double)df_batch_size(b));
    lengths(b, "prompt_ids", max_prompt_length, false, m, "prompt_length");
    return DF_OK;
}

void df_step_token_counts(const df_batch *b, double tok[2])
{
    const int64_t *po = df_batch_offsets(b, "prompt_ids"), *ro = df_batch_offsets(b, "response_ids");
    int64_t n = df_batch_size(b);
    tok[0] += po ? (double)po[n] : 0;
    tok[1] += ro ? (double)ro[n] : 0;
}

int df_compute_throughput_metrics(const df_batch *b, double step_seconds, int n_workers,
                                  df_metrics *m)
{
    double tok[2] = {0};
    df_step_token_counts(b, tok);
    double tokens = tok[0] + tok[1];
    df_metrics_set(m, "perf/total_num_tokens", tokens);
    df_metrics_set(m, "perf/time_per_step", step_seconds);
    if (step_seconds > 0 && n_workers > 0)
        df_metrics_set(m, "perf/throughput", tokens / (step_seconds * n_workers));
    return DF_OK;
}

void df_compute_timing_per_token(df_metrics *m, double prompt_tokens, double response_tokens)
{
    static const char *const all[] = {"ref", "values", "adv", "update_critic", "update_actor"};
    for (size_t i = 0; i <= sizeof all / sizeof *all; i++) {
        const char *name = i ? all[i - 1] : "gen";
        double tokens = i ? prompt_tokens + response_tokens : response_tokens;
        char k[64];
        snprintf(k, sizeof k, "timing_s/%s", name);
        double t = df_metrics_get(m, k, NAN);
        snprintf(k, sizeof k, "timing_per_token_ms/%s", name);
        if (!isnan(t) && tokens > 0)
            df_metrics_set(m, k, t * 1000.0 / tokens);
    }
}

void df_record_mfu(df_metrics *m, const char *name, const df_model_config *c, const df_batch *b, int epochs,
                   double seconds, double peak)
{
    const int64_t *po = df_batch_offsets(b, "prompt_ids"), *ro = df_batch_offsets(b, "response_ids");
    double tokens = 0, sq = 0, win = 0;
    const double W = (double)c->sliding_window;
    for (int64_t i = 0; po && ro && i < df_batch_size(b); i++) {
        double len = (double)(po[i + 1] - po[i] + ro[i + 1] - ro[i]);
        tokens += len, sq += len * len, win += len * (W > 0 && W < len ? W : len);
    }
    if (m && seconds > 0 && peak > 0)
        df_metrics_set(m, name, df_model_train_flops_win(c, tokens, sq, win) * (epochs > 0 ? epochs : 1) /
                                    (seconds * peak));
}

void df_record_memory(df_metrics *m, int64_t device_peak, int64_t host_used)
{
    const double gib = 1024.0 * 1024.0 * 1024.0;
    if (device_peak >= 0) {
        df_metrics_set(m, "perf/max_memory_allocated_gb", (double)device_peak / gib);
        df_metrics_set(m, "perf/max_memory_reserved_gb", (double)device_peak / gib);
    }
    if (host_used >= 0)
        df_metrics_set(m, "perf/cpu_memory_used_gb", (double)host_used / gib);
}
