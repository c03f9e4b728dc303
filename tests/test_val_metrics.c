/*
 * test_val_metrics.c — verl's validation metrics and pass@k (workers/common/val_metrics.h):
 * hand-computed per-prompt statistics, the bootstrap's known expectations, the majority vote, the
 * val-core / val-aux placement, and the same metrics from the prompts split over the ranks; the
 * metric rules beside them (agent prefixes, df_metrics_fold's verl reduce_metrics).
 * mpi-test: np 2 3
 *
 * Statistical checks: a bootstrap metric of 0/1 values is the mean of DF_VAL_BOOTSTRAP Bernoulli
 * draws, so it lies within SIGMAS binomial standard errors sqrt(p (1 - p) / B) of its expectation p
 * (the draws are seeded, so the outcome is fixed; 4 sigma would be missed by chance 6e-5).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "distflow/batch.h"
#include "distflow/common.h"
#include "testmpi.h"
#include "tolerance.h"
#include "workers/common/val_metrics.h"
#include "workers/dag/metrics_reduce.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define SIGMAS 4.0
#define B DF_VAL_BOOTSTRAP

static double binom_tol(double p)
{
    return SIGMAS * sqrt(p * (1 - p) / B);
}

/* A double sum of n terms of total magnitude abs_sum (Higham eq. 4.4). */
static double sum_tol64(int64_t n, double abs_sum)
{
    return df_tol_gamma((double)n, DF_U64) * abs_sum;
}

static double get(const df_metrics *m, const char *name)
{
    if (!df_metrics_has(m, name))
        fail_msg("metric %s missing", name);
    return df_metrics_get(m, name, 0);
}

static void test_ns(void **state)
{
    (void)state;
    int64_t ns[DF_VAL_MAX_NS];
    assert_int_equal(df_val_ns(1, ns), 0);
    assert_int_equal(df_val_ns(2, ns), 1);
    assert_int_equal(ns[0], 2);
    assert_int_equal(df_val_ns(5, ns), 3); /* 2, 4, 5 */
    assert_int_equal(ns[1], 4);
    assert_int_equal(ns[2], 5);
    assert_int_equal(df_val_ns(16, ns), 4); /* 2, 4, 8, 16 */
    assert_int_equal(ns[3], 16);
}

/* Chen et al. eq. 1 by hand: 1 - C(n-c, k) / C(n, k). */
static void test_pass_at_k(void **state)
{
    (void)state;
    const double u = 8 * DF_U64; /* a product of at most 4 factors and a difference */
    assert_near(df_pass_at_k(4, 2, 1), 0.5, u);
    assert_near(df_pass_at_k(4, 2, 2), 5.0 / 6.0, u); /* 1 - C(2,2)/C(4,2) = 1 - 1/6 */
    assert_near(df_pass_at_k(4, 2, 4), 1.0, 0);
    assert_near(df_pass_at_k(5, 1, 2), 0.4, u); /* 1 - C(4,2)/C(5,2) = 1 - 6/10 */
    assert_near(df_pass_at_k(5, 0, 3), 0.0, 0);
    assert_near(df_pass_at_k(5, 5, 1), 1.0, 0);
    assert_near(df_pass_at_k(8, 3, 4), 1.0 - 5.0 / 70.0, u); /* C(5,4) / C(8,4) = 5 / 70 */
}

/* acc [1, 0, 0, 1]: the brief's hand-computed case and the bootstrap's expectations. */
static void test_prompt_acc(void **state)
{
    (void)state;
    const double v[] = {1, 0, 0, 1};
    df_metrics *m = df_metrics_new();
    assert_int_equal(df_val_prompt_stats(v, NULL, 4, true, 7, 3, "", m), DF_OK);
    assert_near(get(m, "mean@4"), 0.5, 0);
    assert_near(get(m, "std@4"), 0.5, 0);
    assert_near(get(m, "pass@1"), 0.5, 4 * DF_U64);
    assert_near(get(m, "pass@2"), 5.0 / 6.0, 4 * DF_U64);
    assert_near(get(m, "pass@4"), 1.0, 0);
    /* max / min of N draws with replacement, each 1 with chance 1/2 */
    const int Ns[] = {2, 4};
    for (int k = 0; k < 2; k++) {
        char name[64];
        double pb = 1 - pow(0.5, Ns[k]), pw = pow(0.5, Ns[k]);
        snprintf(name, sizeof name, "best@%d/mean", Ns[k]);
        double bm = get(m, name);
        assert_near(bm, pb, binom_tol(pb));
        snprintf(name, sizeof name, "worst@%d/mean", Ns[k]);
        double wm = get(m, name);
        assert_near(wm, pw, binom_tol(pw));
        /* the std of 0/1 values is exactly sqrt(m (1 - m)) of their mean m, up to rounding */
        snprintf(name, sizeof name, "best@%d/std", Ns[k]);
        assert_near(get(m, name), sqrt(bm * (1 - bm)), sum_tol64(2 * B, 1));
        snprintf(name, sizeof name, "worst@%d/std", Ns[k]);
        assert_near(get(m, name), sqrt(wm * (1 - wm)), sum_tol64(2 * B, 1));
    }
    /* nothing else: no maj@N without predictions */
    assert_int_equal(df_metrics_count(m), 2 + 2 * 4 + 3);
    df_metrics_free(m);
}

/* All values equal: every spread is 0 and every mean the value, up to the rounding of B terms. */
static void test_prompt_equal(void **state)
{
    (void)state;
    const double v[] = {0.3, 0.3, 0.3, 0.3, 0.3};
    df_metrics *m = df_metrics_new();
    assert_int_equal(df_val_prompt_stats(v, NULL, 5, false, 1, 0, "x/", m), DF_OK);
    const double tol = sum_tol64(B, B * 0.3) / B + DF_U64;
    assert_near(get(m, "x/mean@5"), 0.3, sum_tol64(5, 1.5));
    assert_near(get(m, "x/std@5"), 0, sum_tol64(5, 1.5));
    const char *names[] = {"best@2", "best@4", "best@5", "worst@2", "worst@4", "worst@5"};
    for (int k = 0; k < 6; k++) {
        char key[64];
        snprintf(key, sizeof key, "x/%s/mean", names[k]);
        assert_near(get(m, key), 0.3, tol);
        snprintf(key, sizeof key, "x/%s/std", names[k]);
        assert_near(get(m, key), 0, tol);
    }
    assert_false(df_metrics_has(m, "x/pass@1")); /* not the correctness variable */
    df_metrics_free(m);
    /* one response: its value, no spread, no bootstrap */
    m = df_metrics_new();
    assert_int_equal(df_val_prompt_stats(v, NULL, 1, true, 1, 0, "", m), DF_OK);
    assert_near(get(m, "mean@1"), 0.3, 0);
    assert_int_equal(df_metrics_count(m), 2); /* mean@1, pass@1 */
    assert_int_equal(df_val_prompt_stats(v, NULL, 0, true, 1, 0, "", m), DF_EINVAL);
    df_metrics_free(m);
}

/* calc_maj_val: the most frequent prediction, ties to the one seen first, its first value. */
static void test_maj_vote(void **state)
{
    (void)state;
    const double v[] = {10, 20, 30, 40, 50};
    const char *const pred[] = {"a", "b", "b", "a", "c"};
    const int64_t s1[] = {0, 1, 2, 3}; /* a 2, b 2: a was first */
    const int64_t s2[] = {1, 0, 3, 2}; /* b 2, a 2: b was first, at response 1 */
    const int64_t s3[] = {4, 2, 1};    /* b 2 (responses 2 then 1): the first occurrence's value */
    const int64_t s4[] = {4, 4, 0};    /* c 2 */
    assert_near(df_val_maj(v, pred, s1, 4), 10, 0);
    assert_near(df_val_maj(v, pred, s2, 4), 20, 0);
    assert_near(df_val_maj(v, pred, s3, 3), 30, 0);
    assert_near(df_val_maj(v, pred, s4, 3), 50, 0);
}

/*
 * maj@N through the bootstrap: v = [1, 0, 0] voted A, B, B. N = 2 (9 equally likely ordered
 * pairs): A wins when drawn first (a tie goes to it) or twice: 3/9. N = 3 (27 triples): A needs
 * two or three of the draws: 6/27 + 1/27 = 7/27. best@N is 1 - (2/3)^N, not the same.
 */
static void test_maj_bootstrap(void **state)
{
    (void)state;
    const double v[] = {1, 0, 0};
    const char *const pred[] = {"A", "B", "B"};
    df_metrics *m = df_metrics_new();
    assert_int_equal(df_val_prompt_stats(v, pred, 3, false, 11, 5, "", m), DF_OK);
    assert_near(get(m, "maj@2/mean"), 1.0 / 3.0, binom_tol(1.0 / 3.0));
    assert_near(get(m, "maj@3/mean"), 7.0 / 27.0, binom_tol(7.0 / 27.0));
    assert_near(get(m, "best@2/mean"), 5.0 / 9.0, binom_tol(5.0 / 9.0));
    assert_near(get(m, "best@3/mean"), 19.0 / 27.0, binom_tol(19.0 / 27.0));
    assert_true(df_metrics_has(m, "maj@3/std"));
    /* the draws are keyed by (seed, index, N): the same again, bit for bit */
    df_metrics *again = df_metrics_new();
    assert_int_equal(df_val_prompt_stats(v, pred, 3, false, 11, 5, "", again), DF_OK);
    assert_true(get(again, "maj@3/mean") == get(m, "maj@3/mean"));
    assert_true(get(again, "best@2/std") == get(m, "best@2/std"));
    df_metrics_free(again);
    df_metrics_free(m);
}

/* A scored batch: prompts p of n responses, acc[p * n + j] (NULL: no acc column), source per
   prompt, reward = acc + 0.25 on the last response token (1 + j % 2 tokens). */
static df_batch *scored(int P, int n, const float *acc, const char *const *src, const char *const *pred)
{
    int64_t rows = (int64_t)P * n;
    df_batch *b = df_batch_new(rows);
    int64_t *idx = malloc((size_t)rows * sizeof *idx), *off = malloc((size_t)(rows + 1) * sizeof *off);
    const char **s = malloc((size_t)rows * sizeof *s);
    int32_t *ids = calloc((size_t)rows * 2, sizeof *ids);
    float *tls = calloc((size_t)rows * 2, sizeof *tls), *score = malloc((size_t)rows * sizeof *score);
    off[0] = 0;
    for (int64_t i = 0; i < rows; i++) {
        idx[i] = 100 + i / n, s[i] = src[i / n];
        off[i + 1] = off[i] + 1 + i % 2;
        score[i] = (acc ? acc[i] : 0.5f) + 0.25f;
        tls[off[i + 1] - 1] = score[i];
    }
    assert_int_equal(df_batch_set_i64(b, "index", idx), 0);
    assert_int_equal(df_batch_set_str(b, "data_source", s), 0);
    assert_int_equal(df_batch_set_tok_i32(b, "response_ids", off, ids), 0);
    assert_int_equal(df_batch_set_tok_f32(b, "token_level_scores", off, tls), 0);
    assert_int_equal(df_batch_set_f32(b, "score", score), 0);
    if (acc)
        assert_int_equal(df_batch_set_f32(b, "acc", acc), 0);
    if (pred) {
        for (int64_t i = 0; i < rows; i++)
            s[i] = pred[i];
        assert_int_equal(df_batch_set_str(b, "pred", s), 0);
    }
    free(idx), free(off), free(s), free(ids), free(tls), free(score);
    return b;
}

/* A batch mixing a source whose scorer predicts (math_dapo: pred_valid 1) with one whose does not
   (pred_valid 0, its pred ""): maj@N for the first only, as each source scored alone gives. */
static void test_maj_mixed_sources(void **state)
{
    (void)state;
    const float acc[] = {1, 1, 0, 0, 1, 0};
    const char *src[] = {"dapo", "gsm8k"}, *pred[] = {"7", "7", "3", "", "", ""};
    df_batch *b = scored(2, 3, acc, src, pred);
    const int64_t valid[] = {1, 1, 1, 0, 0, 0};
    assert_int_equal(df_batch_set_i64(b, "pred_valid", valid), 0);
    df_metrics *sums = df_metrics_new(), *m = df_metrics_new();
    assert_int_equal(df_val_metrics_add(sums, b, 3, 5), DF_OK);
    assert_int_equal(df_val_metrics_finish(sums, 3, m), DF_OK);
    int maj_dapo = 0, maj_gsm8k = 0;
    for (int i = 0; i < df_metrics_count(m); i++) {
        double x;
        const char *k = df_metrics_at(m, i, &x);
        maj_dapo += strstr(k, "/dapo/") && strstr(k, "/maj@");
        maj_gsm8k += strstr(k, "/gsm8k/") && strstr(k, "/maj@");
    }
    assert_true(maj_dapo > 0);
    assert_int_equal(maj_gsm8k, 0);
    df_metrics_free(sums);
    df_metrics_free(m);
    df_batch_free(b);
}

/* verl's placement: the core variable (acc, else reward) at the largest N in val-core. */
static void test_placement(void **state)
{
    (void)state;
    const float acc[] = {1, 0, 0, 1, 1, 1, 1, 0};
    const char *const src[] = {"s/a", "s/a"};
    df_batch *b = scored(2, 4, acc, src, NULL);
    const char *const src2[] = {"t"};
    df_batch *c = scored(1, 4, NULL, src2, NULL);
    df_metrics *sums = df_metrics_new(), *out = df_metrics_new();
    assert_int_equal(df_val_metrics_add(sums, b, 4, 9), DF_OK);
    assert_int_equal(df_val_metrics_add(sums, c, 4, 9), DF_OK);
    assert_int_equal(df_val_metrics_finish(sums, 4, out), DF_OK);
    /* averaged over the two prompts: [1,0,0,1] and [1,1,1,0] */
    assert_near(get(out, "val-core/s/a/acc/mean@4"), 0.625, 0);
    assert_near(get(out, "val-core/s/a/acc/pass@4"), 1.0, 0);
    assert_near(get(out, "val-aux/s/a/acc/pass@2"), (5.0 / 6.0 + 1.0) / 2, 4 * DF_U64);
    assert_near(get(out, "val-aux/s/a/acc/pass@1"), 0.625, 4 * DF_U64);
    assert_near(get(out, "val-aux/s/a/acc/std@4"), (0.5 + sqrt(3.0) / 4) / 2, 8 * DF_U64);
    assert_true(df_metrics_has(out, "val-core/s/a/acc/best@4/mean"));
    assert_true(df_metrics_has(out, "val-core/s/a/acc/best@4/std")); /* verl: by prefix, std too */
    assert_true(df_metrics_has(out, "val-aux/s/a/acc/best@2/mean"));
    assert_true(df_metrics_has(out, "val-aux/s/a/acc/worst@4/mean"));
    /* reward: the summed token_level_scores (acc + 0.25), auxiliary beside acc */
    assert_near(get(out, "val-aux/s/a/reward/mean@4"), 0.875, sum_tol64(8, 8));
    assert_true(df_metrics_has(out, "val-aux/s/a/reward/best@4/mean"));
    assert_false(df_metrics_has(out, "val-aux/s/a/reward/pass@4")); /* pass@k is acc's */
    /* a source without acc: reward is its core variable */
    assert_near(get(out, "val-core/t/reward/mean@4"), 0.75, 0);
    assert_near(get(out, "val-core/t/reward/best@4/mean"), 0.75, sum_tol64(B, B * 0.75) / B);
    assert_near(get(out, "val-aux/t/reward/worst@4/mean"), 0.75, sum_tol64(B, B * 0.75) / B);
    assert_near(get(out, "val-aux/t/reward/std@4"), 0, 0);
    for (int i = 0; i < df_metrics_count(out); i++) {
        double x;
        const char *k = df_metrics_at(out, i, &x);
        assert_true(!strncmp(k, "val-core/", 9) || !strncmp(k, "val-aux/", 8));
    }
    /* a prompt with other than n consecutive responses */
    assert_int_equal(df_val_metrics_add(sums, b, 3, 9), DF_EINVAL);
    df_metrics_free(sums), df_metrics_free(out);
    df_batch_free(b), df_batch_free(c);
    /* one response per prompt: mean@1 (and pass@1) in val-core */
    b = scored(2, 1, acc, src, NULL);
    sums = df_metrics_new(), out = df_metrics_new();
    assert_int_equal(df_val_metrics_add(sums, b, 1, 9), DF_OK);
    assert_int_equal(df_val_metrics_finish(sums, 1, out), DF_OK);
    assert_near(get(out, "val-core/s/a/acc/mean@1"), 0.5, 0);
    assert_near(get(out, "val-core/s/a/acc/pass@1"), 0.5, 0);
    assert_near(get(out, "val-aux/s/a/reward/mean@1"), 0.75, sum_tol64(2, 2));
    assert_int_equal(df_metrics_count(out), 3);
    df_metrics_free(sums), df_metrics_free(out);
    df_batch_free(b);
}

static df_metric_reduce sum_rule(const char *name)
{
    (void)name;
    return DF_METRIC_SUM;
}

/* P prompts of n responses, acc from a fixed pattern, two sources, votes: prompt p's row i. */
#define P 9
#define NR 6
static void fill(float *acc, const char **src, const char **pred)
{
    static const char *const votes[] = {"1", "2", "3"};
    for (int i = 0; i < P * NR; i++) {
        acc[i] = (float)((i * 7 + i / NR) % 3 == 0);
        pred[i] = acc[i] ? "42" : votes[(i * 5) % 3];
    }
    for (int p = 0; p < P; p++)
        src[p] = p % 3 ? "openai/gsm8k" : "lighteval/MATH";
}

/*
 * Every rank computes the whole set alone, then its share (prompts p % N == R, in batches of one
 * prompt) summed over the ranks: the same names and values but for the order of the sums over
 * prompts (each per-prompt value is the same bits: same inputs, same keyed draws). Each metric is
 * a mean of at most P per-prompt values of magnitude <= 1.25 (values in [0, 1.25]; pass@k <= 1),
 * so two orders differ by at most twice gamma_P * P * 1.25 / P.
 */
static void test_ranks(void **state)
{
    (void)state;
    float acc[P * NR];
    const char *src[P], *pred[P * NR];
    fill(acc, src, pred);
    df_batch *all = scored(P, NR, acc, src, pred);
    df_metrics *whole = df_metrics_new(), *ws = df_metrics_new(), *mine = df_metrics_new(),
               *ms = df_metrics_new();
    assert_int_equal(df_val_metrics_add(ws, all, NR, 5), DF_OK);
    assert_int_equal(df_val_metrics_finish(ws, NR, whole), DF_OK);
    for (int p = R; p < P; p += N) {
        float a[NR];
        const char *pr[NR];
        memcpy(a, acc + p * NR, sizeof a);
        memcpy(pr, pred + p * NR, sizeof pr);
        df_batch *one = scored(1, NR, a, src + p, pr);
        int64_t idx[NR];
        for (int j = 0; j < NR; j++)
            idx[j] = 100 + p; /* the dataset-wide index of the whole set */
        assert_int_equal(df_batch_set_i64(one, "index", idx), 0);
        assert_int_equal(df_val_metrics_add(ms, one, NR, 5), DF_OK);
        df_batch_free(one);
    }
    assert_int_equal(df_metrics_reduce_by(W, ms, sum_rule), DF_OK);
    assert_int_equal(df_val_metrics_finish(ms, NR, mine), DF_OK);
    assert_int_equal(df_metrics_count(mine), df_metrics_count(whole));
    const double tol = 2 * sum_tol64(P, P * 1.25) / P + 2 * DF_U64;
    int maj = 0;
    for (int i = 0; i < df_metrics_count(whole); i++) {
        double x;
        const char *k = df_metrics_at(whole, i, &x);
        assert_near(get(mine, k), x, tol);
        maj += strstr(k, "/maj@6/mean") != NULL;
    }
    assert_int_equal(maj, 2 * 2); /* reward and acc of two sources */
    assert_true(df_metrics_has(whole, "val-core/openai/gsm8k/acc/maj@6/mean"));
    df_metrics_free(whole), df_metrics_free(ws), df_metrics_free(mine), df_metrics_free(ms);
    df_batch_free(all);
}

/* Multi-agent metrics (df_worker_agent_metrics): a node's metrics from its first on get its group's
   prefix, names already prefixed stay, a prefixed name already present takes the value; the
   cross-rank rule reads the name without the prefix. */
static void test_agent_prefix(void **state)
{
    (void)state;
    df_metrics *m = df_metrics_new();
    assert_int_equal(df_metrics_set(m, "agent_1_actor/pg_loss", 9), 0);
    assert_int_equal(df_metrics_set(m, "before", 1), 0);
    assert_int_equal(df_metrics_set(m, "actor/pg_loss", 2), 0);
    assert_int_equal(df_metrics_set(m, "agent_1_kept", 3), 0);
    assert_int_equal(df_metrics_mean(m, "timing_s/gen", 4), 0);
    assert_int_equal(df_metrics_mean(m, "timing_s/gen", 6), 0);
    assert_int_equal(df_metrics_prefix_from(m, 2, "agent_1_"), 0);
    assert_int_equal(df_metrics_count(m), 4);
    double v = 0;
    assert_string_equal(df_metrics_at(m, 0, &v), "agent_1_actor/pg_loss");
    assert_true(v == 2);
    assert_string_equal(df_metrics_at(m, 1, &v), "before");
    assert_string_equal(df_metrics_at(m, 2, &v), "agent_1_kept");
    assert_string_equal(df_metrics_at(m, 3, &v), "agent_1_timing_s/gen");
    assert_true(v == 5);
    /* another group's metric keeps its prefix; a name that only begins "agent_" gets one */
    int mark = df_metrics_count(m);
    assert_int_equal(df_metrics_set(m, "agent_0_critic/score/mean", 7), 0);
    assert_int_equal(df_metrics_set(m, "agent_loop/tool_calls/mean", 8), 0);
    assert_int_equal(df_metrics_prefix_from(m, mark, "agent_1_"), 0);
    assert_true(df_metrics_has(m, "agent_0_critic/score/mean"));
    assert_true(df_metrics_has(m, "agent_1_agent_loop/tool_calls/mean"));
    df_metrics_free(m);
    assert_int_equal(df_metric_reduce_of("agent_1_timing_s/gen"), DF_METRIC_MAX);
    assert_int_equal(df_metric_reduce_of("agent_12_response_length/min"), DF_METRIC_MIN);
    assert_int_equal(df_metric_reduce_of("agent_0_perf/total_num_tokens"), DF_METRIC_SUM);
    assert_int_equal(df_metric_reduce_of("agent_x_timing_s/gen"), DF_METRIC_MEAN);
}

/* df_metrics_fold, verl's reduce_metrics over micro-batches: "max" anywhere in a name takes the
   largest (before "min": seq_max_k2_min is a max), "min" the smallest, the rest the plain mean. */
static void test_fold(void **state)
{
    (void)state;
    df_metrics *acc = df_metrics_new(), *s = df_metrics_new();
    const double v[2][4] = {{1, 5, 2, -1}, {3, 4, 4, -3}};
    const char *names[4] = {"a/x_max", "a/y_min", "a/m", "rs_seq_max_k2_min"};
    for (int k = 0; k < 2; k++) {
        for (int j = 0; j < 4; j++)
            assert_int_equal(df_metrics_set(s, names[j], v[k][j]), 0);
        assert_int_equal(df_metrics_fold(acc, s), 0);
        df_metrics_clear(s);
    }
    assert_true(df_metrics_get(acc, "a/x_max", 0) == 3);
    assert_true(df_metrics_get(acc, "a/y_min", 0) == 4);
    assert_true(df_metrics_get(acc, "a/m", 0) == 3);
    assert_true(df_metrics_get(acc, "rs_seq_max_k2_min", 0) == -1);
    df_metrics_free(acc), df_metrics_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ns),           cmocka_unit_test(test_pass_at_k),
        cmocka_unit_test(test_prompt_acc),   cmocka_unit_test(test_prompt_equal),
        cmocka_unit_test(test_maj_vote),     cmocka_unit_test(test_maj_bootstrap),
        cmocka_unit_test(test_placement),    cmocka_unit_test(test_ranks),
        cmocka_unit_test(test_maj_mixed_sources),
        cmocka_unit_test(test_agent_prefix),
        cmocka_unit_test(test_fold),
    };
    return cmocka_run_group_tests(tests, df_test_world_setup, df_test_world_teardown);
}
