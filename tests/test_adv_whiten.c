/*
 * test_adv_whiten.c — advantage whitening over the whole data-parallel batch:
 * the split statistics helpers (df_adv_whiten_sum / _ssd / _stats) on a
 * hand-computed case and bit for bit against df_adv_whiten for one part;
 * defer_whiten in gae, reinforce_plus_plus and reinforce_plus_plus_baseline
 * (a batch whitened whole equals its halves whitened with the reduced
 * statistics); which estimators whiten; the worker's group whitening over
 * the ranks (replicas, a failure on one rank: every rank errors, none hangs);
 * and reinforce_plus_plus through the DAG worker on all ranks against the
 * one-rank run, sample by sample.
 *
 * mpi-test: np 1 2
 * (as a plain ctest it runs with one rank.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testutil.h"
#include "tolerance.h"

#include "testmpi.h"

#include "distflow/algo.h"
#include "distflow/reward.h"
#include "workers/worker_internal.h"

#include <jansson.h>
#include <math.h>
#include <unistd.h>

static char dir[256];

static void assert_all_near(const float *got, const double *want, int n, double tol)
{
    for (int t = 0; t < n; t++)
        if (!(fabs((double)got[t] - want[t]) <= tol))
            fail_msg("token %d: %.9g, expected %.9g (tol %g)", t, (double)got[t], want[t], tol);
}

/* (max |x| + |mean|) / std of n values: how much (x - mean) / std amplifies the rounding of the
   sums behind mean and std, relative to 1 + |output| */
static double whiten_kappa(int64_t n, const float *x)
{
    double s = 0, ssd = 0, mx = 0;
    for (int64_t t = 0; t < n; t++)
        s += x[t], mx = fmax(mx, fabs(x[t]));
    for (int64_t t = 0; t < n; t++)
        ssd += (x[t] - s / n) * (x[t] - s / n);
    return (mx + fabs(s / n)) / sqrt(ssd / (n - 1));
}

/*
 * Two whitenings of the same n float32 values whose sums are taken in different orders
 * (parts reduced across ranks vs one pass): each output is the float32 rounding (DF_U32 |a|)
 * of a double within gamma_{8n} (sums of n terms and a few operations) of the exact value,
 * times the conditioning kappa (whiten_kappa) and 1 + |a|.
 */
static double order_tol(double a, double b, int64_t n, double kappa)
{
    double dbl = 2 * df_tol_gamma(8 * (double)n, DF_U64) * (1 + kappa);
    return DF_U32 * (fabs(a) + fabs(b)) + dbl * (1 + fmax(fabs(a), fabs(b)));
}

/* ---- the split statistics --------------------------------------------------------------------- */

static void test_stats_hand_computed(void **state)
{
    (void)state;
    /* x = 1, 2 | 3, 6 in two parts. Round 1: sums 3 and 9 -> count 4, sum 12, mean 3.
     * Round 2: (1-3)^2 + (2-3)^2 = 5 and (3-3)^2 + (6-3)^2 = 9 -> ssd 14, var 14 / 3,
     * std 2.1602469; out = (x - 3) / sqrt(14 / 3 + 1e-8) (df_adv_whiten of the whole: test_adv.c).
     * Exact inputs and statistics: the printed digits and one float32 rounding (df_tol_hand). */
    const float a[] = {1, 2}, b[] = {3, 6};
    double sa, sb, da, db;
    assert_int_equal(df_adv_whiten_sum(2, a, &sa), 0);
    assert_int_equal(df_adv_whiten_sum(2, b, &sb), 0);
    assert_true(sa == 3 && sb == 9);
    assert_int_equal(df_adv_whiten_ssd(2, a, 4, sa + sb, &da), 0);
    assert_int_equal(df_adv_whiten_ssd(2, b, 4, sa + sb, &db), 0);
    assert_true(da == 5 && db == 9);
    float oa[2], ob[2];
    assert_int_equal(df_adv_whiten_stats(2, a, 4, 12, 14, oa), 0);
    assert_int_equal(df_adv_whiten_stats(2, b, 4, 12, 14, ob), 0);
    const double wa[] = {-0.9258200988, -0.4629100494}, wb[] = {0, 1.3887301482};
    for (int t = 0; t < 2; t++) {
        assert_near(oa[t], wa[t], df_tol_hand(5e-11, fabs(wa[t]), 0, 2));
        assert_near(ob[t], wb[t], df_tol_hand(5e-11, fabs(wb[t]), 0, 2));
    }
    /* in place, and an empty part (a rank with no tokens) */
    float y[] = {3, 6};
    assert_int_equal(df_adv_whiten_stats(2, y, 4, 12, 14, y), 0);
    assert_true(y[0] == ob[0] && y[1] == ob[1]);
    double s0 = -1, d0 = -1;
    assert_int_equal(df_adv_whiten_sum(0, NULL, &s0), 0);
    assert_int_equal(df_adv_whiten_ssd(0, NULL, 4, 12, &d0), 0);
    assert_true(s0 == 0 && d0 == 0);
    assert_int_equal(df_adv_whiten_stats(0, NULL, 4, 12, 14, NULL), 0);
    /* one token in the whole batch: 0, as df_adv_whiten */
    float one = 5;
    assert_int_equal(df_adv_whiten_stats(1, &one, 1, 5, 0, &one), 0);
    assert_true(one == 0);
    /* equal values: 0 / sqrt(1e-8) */
    const float eq[] = {2, 2};
    float oe[2];
    assert_int_equal(df_adv_whiten_stats(2, eq, 3, 6, 0, oe), 0);
    assert_true(oe[0] == 0 && oe[1] == 0);
}

static void test_stats_one_part_bit_identical(void **state)
{
    (void)state;
    /* irregular values, so any change of the order of operations shows in the last bits */
    enum { T = 37 };
    float x[T], whole[T], split[T];
    for (int t = 0; t < T; t++)
        x[t] = (float)(sin(1.7 * t) * 3.3 + 0.1 * t);
    assert_int_equal(df_adv_whiten(T, x, whole), 0);
    double sum, ssd;
    assert_int_equal(df_adv_whiten_sum(T, x, &sum), 0);
    assert_int_equal(df_adv_whiten_ssd(T, x, T, sum, &ssd), 0);
    assert_int_equal(df_adv_whiten_stats(T, x, T, sum, ssd, split), 0);
    assert_memory_equal(whole, split, sizeof whole);
}

static void test_stats_errors(void **state)
{
    (void)state;
    const float x[] = {1, 2};
    float out[2];
    double s;
    assert_error_mentions(df_adv_whiten_sum(-1, x, &s), DF_EINVAL, "negative token count -1");
    assert_error_mentions(df_adv_whiten_sum(2, NULL, &s), DF_EINVAL, "NULL input");
    assert_error_mentions(df_adv_whiten_sum(2, x, NULL), DF_EINVAL, "NULL");
    assert_error_mentions(df_adv_whiten_ssd(2, x, 1, 3, &s), DF_EINVAL,
                          "token count 1 is less than this part's 2");
    assert_error_mentions(df_adv_whiten_ssd(2, x, 2, NAN, &s), DF_EINVAL, "sum is nan");
    assert_error_mentions(df_adv_whiten_stats(2, x, 2, 3, -0.5, out), DF_EINVAL,
                          "squared deviations is -0.5");
    assert_error_mentions(df_adv_whiten_stats(2, x, 2, 3, INFINITY, out), DF_EINVAL, "squared deviations");
    assert_error_mentions(df_adv_whiten_stats(2, x, 2, INFINITY, 1, out), DF_EINVAL, "sum is inf");
    assert_error_mentions(df_adv_whiten_stats(2, x, 2, 3, 1, NULL), DF_EINVAL, "NULL");
}

/* ---- defer_whiten: the whole equals its halves with the reduced statistics -------------------- */

/*
 * Six samples (lengths 2, 3, 0, 1, 2, 2; groups {0, 1}, {2, 3}, {4, 5}), split
 * after sample 3: both halves hold whole groups, as rollout.n responses of a
 * prompt stay on one rank.
 */
static const int64_t k_off[] = {0, 2, 5, 5, 6, 8, 10};
static const float k_r[] = {0, 1, 0, 0, 0.5f, 2, 0, -1, 0.25f, 0.75f};
static const float k_v[] = {0.1f, 0.4f, -0.2f, 0.3f, 0.0f, 1.0f, 0.5f, -0.5f, 0.2f, 0.6f};
static const int64_t k_group[] = {0, 0, 1, 1, 2, 2};
#define K_N 6
#define K_T 10
#define K_SPLIT 4 /* first sample of the second half */

/* Rows [first, first + n) of the batch above, rebased. */
static df_adv_input half_input(int first, int n, int64_t *off, int64_t *group)
{
    for (int i = 0; i <= n; i++)
        off[i] = k_off[first + i] - k_off[first];
    for (int i = 0; i < n; i++)
        group[i] = k_group[first + i] - k_group[first];
    const int64_t t0 = k_off[first];
    return (df_adv_input){.n = n,
                          .offsets = off,
                          .token_level_rewards = k_r + t0,
                          .values = k_v + t0,
                          .group = group,
                          .gamma = 0.9f,
                          .lam = 0.8f,
                          .epsilon = 1e-6f};
}

static void check_split(const char *name)
{
    df_adv_estimator_fn fn;
    assert_int_equal(df_adv_estimator_lookup(name, &fn), 0);
    int64_t off[K_N + 1], group[K_N];
    df_adv_input whole = half_input(0, K_N, off, group);
    float adv[K_T], ret[K_T];
    assert_int_equal(fn(&whole, adv, ret), 0);

    /* deferred on each half, whitened with the two halves' reduced statistics */
    int64_t off_a[K_N + 1], g_a[K_N], off_b[K_N + 1], g_b[K_N];
    df_adv_input a = half_input(0, K_SPLIT, off_a, g_a), b = half_input(K_SPLIT, K_N - K_SPLIT, off_b, g_b);
    a.defer_whiten = b.defer_whiten = true;
    const int64_t ta = k_off[K_SPLIT], tb = K_T - ta;
    float adv_d[K_T], ret_d[K_T];
    assert_int_equal(fn(&a, adv_d, ret_d), 0);
    assert_int_equal(fn(&b, adv_d + ta, ret_d + ta), 0);
    if (df_adv_estimator_whitens_returns(name)) /* the returns are the advantages, unwhitened */
        assert_memory_equal(ret_d, adv_d, sizeof adv_d);
    else /* the returns do not depend on the flag */
        assert_memory_equal(ret_d, ret, sizeof ret);
    double sa, sb, da, db;
    assert_int_equal(df_adv_whiten_sum(ta, adv_d, &sa), 0);
    assert_int_equal(df_adv_whiten_sum(tb, adv_d + ta, &sb), 0);
    assert_int_equal(df_adv_whiten_ssd(ta, adv_d, K_T, sa + sb, &da), 0);
    assert_int_equal(df_adv_whiten_ssd(tb, adv_d + ta, K_T, sa + sb, &db), 0);
    float got[K_T];
    assert_int_equal(df_adv_whiten_stats(ta, adv_d, K_T, sa + sb, da + db, got), 0);
    assert_int_equal(df_adv_whiten_stats(tb, adv_d + ta, K_T, sa + sb, da + db, got + ta), 0);
    /* The deferred values x_j are the whole's doubles rounded to float32 once (DF_U32 |x_j|),
       which (x - mean) / std carries as in test_adv.c's whiten_tol: d o_t / d x_j =
       ((t == j) - 1/n) / std - o_t o_j / ((n - 1) std) (doubled for second order); the sums
       are taken in another order (order_tol) */
    double err = 0, max_o = 0, max_err = 0, max_ratio = 0;
    for (int t = 0; t < K_T; t++)
        err += fabs(adv_d[t]), max_o = fmax(max_o, fabs(adv[t]));
    const double cond = 2 * DF_U32 * err * (1 + max_o * max_o / (K_T - 1)) / sqrt((da + db) / (K_T - 1));
    const double kappa = whiten_kappa(K_T, adv_d);
    for (int t = 0; t < K_T; t++) {
        double tol = cond + order_tol(got[t], adv[t], K_T, kappa);
        max_err = fmax(max_err, fabs((double)got[t] - adv[t]));
        max_ratio = fmax(max_ratio, fabs((double)got[t] - adv[t]) / tol);
        assert_near(got[t], adv[t], tol);
    }
    print_message("%s: halves vs whole, max |difference| %.3g (%.2g of the bound)\n", name, max_err,
                  max_ratio);
    /* whitening the halves on their own gives something else (the test can tell): a difference
       of the order of the values, far above the bound above (~1e-7) */
    float own[K_T];
    assert_int_equal(df_adv_whiten(ta, adv_d, own), 0);
    assert_true(fabs((double)own[0] - adv[0]) > 1e-3);
}

static void test_defer_split_gae(void **state)
{
    (void)state;
    check_split("gae");
}

static void test_defer_split_reinforce_plus_plus(void **state)
{
    (void)state;
    check_split("reinforce_plus_plus");
}

static void test_defer_split_reinforce_plus_plus_baseline(void **state)
{
    (void)state;
    check_split("reinforce_plus_plus_baseline");
}

/* The deferred advantages are the values each estimator whitens, before whitening. */
static void test_defer_values(void **state)
{
    (void)state;
    /* reinforce_plus_plus, gamma 0.5: r = 1, 2 | 4 -> reward-to-go 2, 2 | 4 (returns = advantages) */
    const int64_t off[] = {0, 2, 3}, g[] = {0, 0};
    const float r[] = {1, 2, 4};
    df_adv_input in = {
        .n = 2, .offsets = off, .token_level_rewards = r, .group = g, .gamma = 0.5f, .defer_whiten = true};
    float adv[3], ret[3];
    assert_int_equal(df_adv_reinforce_plus_plus(&in, adv, ret), 0);
    const double rtg[] = {2, 2, 4};
    assert_all_near(adv, rtg, 3, 0);
    assert_all_near(ret, rtg, 3, 0);
    /* reinforce_plus_plus_baseline: scores 3 and 4, group mean 3.5 -> -0.5, -0.5 | 0.5 in both */
    assert_int_equal(df_adv_reinforce_plus_plus_baseline(&in, adv, ret), 0);
    const double centred[] = {-0.5, -0.5, 0.5};
    assert_all_near(adv, centred, 3, 0);
    assert_all_near(ret, centred, 3, 0);
    /* gae, gamma = lam = 1, V = 0: G = rewards-to-go 3, 2 | 4, returns the same */
    const float zero[3] = {0};
    in.values = zero;
    in.gamma = 1;
    in.lam = 1;
    assert_int_equal(df_adv_gae(&in, adv, ret), 0);
    const double g1[] = {3, 2, 4};
    assert_all_near(adv, g1, 3, 0);
    assert_all_near(ret, g1, 3, 0);
    /* an estimator that does not whiten ignores the flag: grpo gives the same bits */
    float adv2[3], ret2[3];
    assert_int_equal(df_adv_grpo(&in, adv, ret), 0);
    in.defer_whiten = false;
    assert_int_equal(df_adv_grpo(&in, adv2, ret2), 0);
    assert_memory_equal(adv, adv2, sizeof adv);
}

static int plugin_estimator(const df_adv_input *in, float *advantages, float *returns)
{
    (void)in, (void)advantages, (void)returns;
    return 0;
}

static void test_estimator_whitens(void **state)
{
    (void)state;
    const char *yes[] = {"gae", "reinforce_plus_plus", "reinforce_plus_plus_baseline"};
    const char *no[] = {"grpo", "rloo", "remax", "gpg", "cpgd", "no_such_estimator", NULL};
    for (size_t i = 0; i < 3; i++)
        assert_true(df_adv_estimator_whitens(yes[i]));
    for (size_t i = 0; i < sizeof no / sizeof *no; i++)
        assert_false(df_adv_estimator_whitens(no[i]));
    assert_true(df_adv_estimator_whitens_returns("reinforce_plus_plus_baseline"));
    assert_false(df_adv_estimator_whitens_returns("reinforce_plus_plus"));
    assert_false(df_adv_estimator_whitens_returns("gae"));
    assert_false(df_adv_estimator_whitens_returns(NULL));
    /* a plugin (also one replacing a built-in name) is not assumed to honour defer_whiten */
    assert_int_equal(df_adv_estimator_register("test_plugin_adv", plugin_estimator), 0);
    assert_false(df_adv_estimator_whitens("test_plugin_adv"));
    assert_int_equal(df_adv_estimator_register("reinforce_plus_plus", plugin_estimator), 0);
    assert_false(df_adv_estimator_whitens("reinforce_plus_plus"));
    assert_int_equal(df_adv_estimator_register("reinforce_plus_plus", df_adv_reinforce_plus_plus), 0);
    assert_true(df_adv_estimator_whitens("reinforce_plus_plus"));
}

/* ---- the worker's group whitening ------------------------------------------------------------- */

/* x_t = irregular values of a 9-token batch; rank r of N holds tokens [9r / N, 9(r + 1) / N). */
static void batch_values(float *x)
{
    for (int t = 0; t < 9; t++)
        x[t] = (float)(cos(0.9 * t) * 2 + 0.3 * t);
}

static void test_group_whiten_matches_whole(void **state)
{
    (void)state;
    float x[9], whole[9];
    batch_values(x);
    assert_int_equal(df_adv_whiten(9, x, whole), 0);
    const int lo = 9 * R / N, hi = 9 * (R + 1) / N;
    float mine[9], copy[9];
    memcpy(mine, x + lo, (size_t)(hi - lo) * sizeof *mine);
    alarm(60);
    int rc = df_worker_whiten_group(W, DF_OK, false, hi - lo, mine, copy);
    alarm(0);
    if (rc)
        fail_msg("rank %d: %s", R, df_last_error());
    const double kappa = whiten_kappa(9, x);
    for (int t = lo; t < hi; t++)
        assert_near(mine[t - lo], whole[t], order_tol(mine[t - lo], whole[t], 9, kappa));
    assert_memory_equal(copy, mine, (size_t)(hi - lo) * sizeof *mine);
    if (N == 1) /* one rank: df_adv_whiten's bits */
        assert_memory_equal(mine, whole, sizeof whole);
    /* NULL comm: this batch alone */
    memcpy(mine, x, sizeof x);
    assert_int_equal(df_worker_whiten_group(NULL, DF_OK, false, 9, mine, NULL), 0);
    assert_memory_equal(mine, whole, sizeof whole);
}

/* A multi-turn batch (response_mask): the group's statistics are those of the model's tokens, so
 * the model tokens' results equal whitening the batch without its appended tokens; the appended
 * ones are whitened with the same statistics. */
static void test_group_whiten_masked(void **state)
{
    (void)state;
    float x[9], model[9], whole[9];
    const int32_t mask[9] = {1, 0, 0, 1, 1, 0, 1, 1, 1};
    batch_values(x);
    int k = 0;
    for (int t = 0; t < 9; t++)
        if (mask[t])
            model[k++] = x[t];
    assert_int_equal(df_adv_whiten(k, model, whole), 0);
    const int lo = 9 * R / N, hi = 9 * (R + 1) / N;
    float mine[9];
    memcpy(mine, x + lo, (size_t)(hi - lo) * sizeof *mine);
    alarm(60);
    int rc = df_worker_whiten_group_masked(W, DF_OK, false, hi - lo, mask + lo, mine, NULL);
    alarm(0);
    if (rc)
        fail_msg("rank %d: %s", R, df_last_error());
    const double kappa = whiten_kappa(k, model);
    for (int t = lo, j = 0; t < hi; t++) {
        if (!mask[t])
            continue;
        while (model[j] != x[t])
            j++;
        assert_near(mine[t - lo], whole[j], order_tol(mine[t - lo], whole[j], 9, kappa));
        if (N == 1)
            assert_memory_equal(&mine[t - lo], &whole[j], sizeof(float));
    }
    /* NULL mask: the unmasked whitening */
    float plain[9], ref[9];
    memcpy(plain, x, sizeof x);
    assert_int_equal(df_worker_whiten_group_masked(NULL, DF_OK, false, 9, NULL, plain, NULL), 0);
    assert_int_equal(df_adv_whiten(9, x, ref), 0);
    assert_memory_equal(plain, ref, sizeof ref);
}

/* Odd ranks are replicas of the rank before them: the statistics are those of the even ranks' data. */
static void test_group_whiten_replicas(void **state)
{
    (void)state;
    if (N < 2) {
        skip();
        return;
    }
    /* even rank 2k holds tokens [3k, 3k + 3) of x (N / 2 parts of 3), its replica the same */
    float x[9];
    batch_values(x);
    const int parts = N / 2, k = R / 2;
    float mine[3], whole[9];
    memcpy(mine, x + 3 * k, sizeof mine);
    bool replica = R % 2 == 1 || k >= parts; /* a last odd rank out of N is a replica of nothing new */
    assert_int_equal(df_adv_whiten(3 * parts, x, whole), 0);
    alarm(60);
    int rc = df_worker_whiten_group(W, DF_OK, replica, 3, mine, NULL);
    alarm(0);
    if (rc)
        fail_msg("rank %d: %s", R, df_last_error());
    if (k < parts) {
        const double kappa = whiten_kappa(3 * parts, x);
        for (int t = 0; t < 3; t++)
            assert_near(mine[t], whole[3 * k + t], order_tol(mine[t], whole[3 * k + t], 3 * parts, kappa));
    }
}

/* A failure on the last rank only: every rank returns an error, none waits in a collective. */
static void test_group_whiten_fails_on_one_rank(void **state)
{
    (void)state;
    if (N < 2) {
        skip();
        return;
    }
    const bool bad = R == N - 1;
    float x[3] = {1, 2, 4};
    int in_rc = bad ? df_error(DF_EINVAL, "estimator failed here") : DF_OK;
    alarm(60); /* a hang ends the test here rather than at ctest's timeout */
    int rc = df_worker_whiten_group(W, in_rc, false, bad ? 0 : 3, bad ? NULL : x, NULL);
    alarm(0);
    char want[128];
    snprintf(want, sizeof want, "1 other rank(s) of the data-parallel group (%d ranks) failed", N);
    if (bad)
        assert_error_mentions(rc, DF_EINVAL, "estimator failed here");
    else
        assert_error_mentions(rc, DF_EINTERNAL, want);
    assert_true(x[0] == 1 && x[2] == 4); /* nothing whitened */
    /* the ranks are still in step: the next call works everywhere */
    alarm(60);
    rc = df_worker_whiten_group(W, DF_OK, false, 3, x, NULL);
    alarm(0);
    if (rc)
        fail_msg("rank %d: %s", R, df_last_error());
}

/* ---- reinforce_plus_plus through the DAG worker: N ranks against one -------------------------- */

static df_node_fn real_adv;
static json_t *captured; /* "uid|response ids" -> [advantages..., returns...] */

/* The advantage node, then a record of each sample's advantages and returns. */
static int capture_adv(df_node_ctx *ctx, df_batch *b, df_node_output *out)
{
    int rc = real_adv(ctx, b, out);
    if (rc)
        return rc;
    const df_column *ids = df_batch_column(b, "response_ids"), *adv = df_batch_column(b, "advantages"),
                    *ret = df_batch_column(b, "returns");
    for (int64_t i = 0; i < df_batch_size(b); i++) {
        /* identical responses of one prompt have identical advantages, so they may share a key */
        char key[4096];
        int len = snprintf(key, sizeof key, "%s|", df_batch_str(b, "uid", i));
        json_t *v = json_array();
        for (int64_t t = ids->offsets[i]; t < ids->offsets[i + 1]; t++)
            len += snprintf(key + len, sizeof key - (size_t)len, "%d,", ((const int32_t *)ids->data)[t]);
        for (int64_t t = adv->offsets[i]; t < adv->offsets[i + 1]; t++)
            json_array_append_new(v, json_real(((const float *)adv->data)[t]));
        for (int64_t t = ret->offsets[i]; t < ret->offsets[i + 1]; t++)
            json_array_append_new(v, json_real(((const float *)ret->data)[t]));
        json_object_set_new(captured, key, v);
    }
    return DF_OK;
}

static const char *k_workflow =
    "dag_id: capture_rpp\n"
    "nodes:\n"
    "  - {node_id: rollout, node_type: MODEL_INFERENCE, node_role: ROLLOUT}\n"
    "  - {node_id: reward, node_type: COMPUTE, node_role: REWARD, dependencies: [rollout]}\n"
    "  - {node_id: adv, node_type: COMPUTE, node_role: ADVANTAGE, executable_ref: test.capture_adv,\n"
    "     dependencies: [reward]}\n"
    "  - {node_id: old, node_type: MODEL_TRAIN, node_role: ACTOR, only_forward_compute: true,\n"
    "     dependencies: [adv]}\n"
    "  - {node_id: train, node_type: MODEL_TRAIN, node_role: ACTOR, dependencies: [old]}\n";

/* One step of `estimator` on `comm` into dir/<out>; this rank's captures into dir/<out>_r<R>.json. */
static void run_est(df_comm *comm, const char *out, const char *estimator)
{
    char yaml[4096], wf[512];
    snprintf(wf, sizeof wf, "%s/capture_rpp.yaml", dir);
    snprintf(yaml, sizeof yaml,
             "data: {train_files: [%s/train.jsonl], val_files: [], train_batch_size: 8, shuffle: false,\n"
             "       max_prompt_length: 128, max_response_length: 10}\n"
             "actor_rollout_ref:\n"
             "  model: {path: %s/model}\n"
             "  actor: {optim: {lr: 0.01, weight_decay: 0.0}, ppo_mini_batch_size: 4,\n"
             "          ppo_micro_batch_size_per_gpu: 4}\n"
             "  rollout: {n: 2, log_prob_micro_batch_size_per_gpu: 8}\n"
             "algorithm: {adv_estimator: %s, gamma: 0.9}\n"
             "dag: {workflow_path: %s}\n"
             "trainer: {total_training_steps: 1, save_freq: -1, logger: [], default_local_dir: %s/%s}\n",
             dir, dir, estimator, wf, dir, out);
    df_config *cfg = df_test_config(yaml, "est.yaml", NULL, 0);
    captured = json_object();
    if (df_test_run(comm, cfg))
        fail_msg("rank %d, %s: %s", R, out, df_last_error());
    char p[512];
    snprintf(p, sizeof p, "%s/%s_r%d.json", dir, out, df_comm_rank(comm));
    assert_int_equal(json_dump_file(captured, p, JSON_COMPACT), 0);
    json_decref(captured);
    captured = NULL;
}

static json_t *load_json(const char *name)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    json_error_t e;
    json_t *j = json_load_file(p, 0, &e);
    if (!j)
        fail_msg("%s: %s", p, e.text);
    return j;
}

static void test_worker_rpp_matches_one_rank(void **state)
{
    (void)state;
    if (N < 2) { /* the one-rank run is the reference: nothing to compare */
        skip();
        return;
    }
    alarm(600);
    run_est(W, "dp", "reinforce_plus_plus");
    alarm(0);
    assert_int_equal(df_comm_barrier(W), 0);
    if (R != 0)
        return;
    json_t *ref = load_json("ref_r0.json"), *got = json_object();
    for (int r = 0; r < N; r++) {
        char name[64];
        snprintf(name, sizeof name, "dp_r%d.json", r);
        json_t *part = load_json(name);
        json_object_update(got, part);
        json_decref(part);
    }
    assert_int_equal(json_object_size(got), json_object_size(ref));
    assert_true(json_object_size(ref) >= 8); /* most of the 16 responses differ */
    const char *key;
    json_t *want;
    /* The same samples (a flipped token would show as a missing key: the rollouts are computed
       in other batch splits, so a sampled token can only change where a uniform draw falls
       within rounding of a CDF boundary), the same rewards (from the text) and the same
       per-sample returns (reward-to-go, the same operations): exact. The advantages whiten
       the returns of the whole batch, whose sums the ranks reduce in another order: order_tol
       with the returns' kappa. */
    float *rets = NULL;
    int64_t n_tok = 0;
    json_object_foreach(ref, key, want)
    {
        size_t len = json_array_size(want) / 2;
        rets = realloc(rets, (size_t)(n_tok + (int64_t)len) * sizeof *rets);
        for (size_t t = 0; t < len; t++)
            rets[n_tok++] = (float)json_real_value(json_array_get(want, len + t));
    }
    const double kappa = whiten_kappa(n_tok, rets);
    free(rets);
    double max_diff = 0, max_ratio = 0, spread = 0;
    json_object_foreach(ref, key, want)
    {
        json_t *have = json_object_get(got, key);
        if (!have)
            fail_msg("sample %s of the one-rank run is missing from the %d-rank run", key, N);
        assert_int_equal(json_array_size(have), json_array_size(want));
        size_t len = json_array_size(want) / 2;
        for (size_t t = 0; t < json_array_size(want); t++) {
            double a = json_real_value(json_array_get(want, t)), b = json_real_value(json_array_get(have, t));
            double tol = t < len ? order_tol(a, b, n_tok, kappa) : 0;
            max_diff = fmax(max_diff, fabs(a - b));
            max_ratio = fmax(max_ratio, tol > 0 ? fabs(a - b) / tol : 0);
            spread = fmax(spread, fabs(a));
            if (!(fabs(a - b) <= tol))
                fail_msg("sample %s value %zu: %.9g on %d ranks, %.9g on one (tol %g)", key, t, b, N, a, tol);
        }
    }
    print_message("reinforce_plus_plus on %d ranks vs one: max |advantage difference| %.3g (%.2g of the "
                  "bound; max |value| %.3g)\n",
                  N, max_diff, max_ratio, spread);
    assert_true(spread > 0.5); /* the advantages are not all 0 */
    json_decref(ref);
    json_decref(got);
}

/* gpg through the DAG worker on N ranks: alpha = B / M' over the whole step batch (the ranks sum
   their counts), so every sample's advantage is the one-rank run's bit for bit (the same
   per-sample arithmetic); with each rank's own counts the ranks' alphas differ. */
static void test_worker_gpg_matches_one_rank(void **state)
{
    (void)state;
    if (N < 2) {
        skip();
        return;
    }
    alarm(600);
    run_est(W, "gpg_dp", "gpg");
    alarm(0);
    assert_int_equal(df_comm_barrier(W), 0);
    if (R != 0)
        return;
    json_t *ref = load_json("gpg_ref_r0.json"), *got = json_object();
    for (int r = 0; r < N; r++) {
        char name[64];
        snprintf(name, sizeof name, "gpg_dp_r%d.json", r);
        json_t *part = load_json(name);
        json_object_update(got, part);
        json_decref(part);
    }
    assert_int_equal(json_object_size(got), json_object_size(ref));
    const char *key;
    json_t *want;
    int nonzero = 0;
    json_object_foreach(ref, key, want)
    {
        json_t *have = json_object_get(got, key);
        if (!have || !json_equal(have, want))
            fail_msg("sample %s: its advantages on %d ranks differ from the one-rank run's", key, N);
        nonzero += json_real_value(json_array_get(want, 0)) != 0;
    }
    assert_true(nonzero > 0); /* not every group flat */
    json_decref(ref);
    json_decref(got);
}

/* The world, the inputs on rank 0 and (with several ranks) the one-rank reference run. */
static int setup(void **state)
{
    if (df_test_world_setup(state) || df_reward_register("test/digits", df_test_digit_share))
        return -1;
    if (df_worker_register_nodes() || df_exec_resolve("DAGWorker.compute_advantage", &real_adv) ||
        df_exec_register("test.capture_adv", capture_adv))
        return -1;
    if (N < 2)
        return 0;
    if (R == 0) {
        snprintf(dir, sizeof dir, "/tmp/df_whiten_XXXXXX");
        if (!mkdtemp(dir))
            return -1;
        df_test_digits_inputs(dir, "train.jsonl", 16, "test/digits", true);
        char p[512];
        snprintf(p, sizeof p, "%s/capture_rpp.yaml", dir);
        if (df_write_file_atomic(p, k_workflow, strlen(k_workflow)))
            return -1;
    }
    if (df_comm_broadcast(W, dir, sizeof dir, 0))
        return -1;
    df_comm *self = NULL;
    if (df_comm_split(W, R, 0, &self))
        return -1;
    if (R == 0) {
        run_est(self, "ref", "reinforce_plus_plus");
        run_est(self, "gpg_ref", "gpg");
    }
    df_comm_free(self);
    return df_comm_barrier(W);
}

static int teardown(void **state)
{
    if (N >= 2) {
        df_comm_barrier(W);
        if (R == 0)
            df_test_remove_tree(dir);
    }
    return df_test_world_teardown(state);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stats_hand_computed),
        cmocka_unit_test(test_stats_one_part_bit_identical),
        cmocka_unit_test(test_stats_errors),
        cmocka_unit_test(test_defer_split_gae),
        cmocka_unit_test(test_worker_gpg_matches_one_rank),
        cmocka_unit_test(test_defer_split_reinforce_plus_plus),
        cmocka_unit_test(test_defer_split_reinforce_plus_plus_baseline),
        cmocka_unit_test(test_defer_values),
        cmocka_unit_test(test_estimator_whitens),
        cmocka_unit_test(test_group_whiten_matches_whole),
        cmocka_unit_test(test_group_whiten_masked),
        cmocka_unit_test(test_group_whiten_replicas),
        cmocka_unit_test(test_group_whiten_fails_on_one_rank),
        cmocka_unit_test(test_worker_rpp_matches_one_rank),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
