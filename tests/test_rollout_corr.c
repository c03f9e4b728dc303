/* Unit tests of the rollout correction in the losses block of include/distflow/algo.h (verl
 * rollout_corr_helper.py at b178a3cd5): importance-sampling weights at token and sequence level,
 * the 11 rejection-sampling options, their metrics, the batch normalisation and the parsers.
 *
 * Every case is worked out by hand below. The inputs are floats that hold halves, quarters and
 * eighths exactly, so lr = old - rollout is exact in double; the code then computes in double.
 * A hand value printed to 12 significant digits stands within 5e-12 of its magnitude for the number
 * it means (half a unit in its last digit); the code's roundings add at most gamma_64 u64 of the
 * magnitude it works at (df_tol_hand), and a float output one float rounding. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"
#include "tolerance.h"

#include <math.h>
#include <string.h>

#include "distflow/algo.h"
#include "distflow/metrics.h"

/* a 12-digit hand value v against a double result computed at magnitude mag (>= |v|; the sum of
   squares for a standard deviation, whose subtraction cancels) */
static double lit12(double v, double mag)
{
    return df_tol_hand(5e-12 * fabs(v), 0, 0, fmax(fabs(v), mag));
}
/* the same for a float output: one more rounding, DF_U32 |v| (df_tol_hand doubles it) */
static double lit12f(double v)
{
    return df_tol_hand(5e-12 * fabs(v), fabs(v), 0, fabs(v));
}
/* a value the code and the test both compute as the same few double operations on the same exact
   inputs (1 / (6 + 1e-8)): equal but for the rounding of at most 4 operations */
static double same4(double v)
{
    return df_tol_gamma(4, DF_U64) * fabs(v);
}

#define METRIC(m, name) df_metrics_get(m, "rollout_corr/" name, NAN)
#define assert_metric(m, name, v, tol) assert_near(METRIC(m, name), v, tol)
#define assert_metric_lit(m, name, v) assert_metric(m, name, v, lit12(v, 0))

/* verl_F.masked_mean's denominator: a mean over c model tokens divides by c + 1e-8 */
#define MM(c) ((c) + 1e-8)

/* ====================================================================== batch A: IS weights */

/*
 * Batch A, 4 responses, 7 tokens, threshold 2:
 *   response 0: old [-1, -2, -0.5], rollout [-1.5, -2, -0.25]  lr [0.5, 0, -0.25]
 *   response 1: old [-1, 5, -3], rollout [-2, 0, -2.5], mask [1, 0, 1]: lr [1, (5: a tool token), -0.5]
 *   response 2: empty
 *   response 3: old [-2], rollout [-1]                          lr [-1]
 * T = 6 model tokens, S = 3 responses with one (the empty one takes no part).
 */
static const int64_t A_OFF[] = {0, 3, 6, 6, 7};
static const int32_t A_MASK[] = {1, 1, 1, 1, 0, 1, 1};
static const float A_OLD[] = {-1, -2, -0.5f, -1, 5, -3, -2};
static const float A_RO[] = {-1.5f, -2, -0.25f, -2, 0, -2.5f, -1};

/*
 * Token level. Before truncation p = e^lr on the model tokens:
 *   p = [e^0.5, 1, e^-0.25 | e, e^-0.5 | e^-1]
 *     = [1.6487212707, 1, 0.778800783071 | 2.71828182846, 0.606530659713 | 0.367879441171]
 *   w = min(p, 2): e truncated to 2; the tool token 0.
 *   norm: sum w = 1.6487212707 + 1 + 0.778800783071 + 2 + 0.606530659713 + 0.367879441171
 *       = 6.40193215466 over 6 tokens.
 * Metrics (thr 2, lo 1/2):
 *   mean  = sum p / (6 + 1e-8) = 7.12021398311 / (6 + 1e-8) = 1.18670232854
 *   max e = 2.71828182846, min e^-1 = 0.367879441171
 *   fraction_high: p > 2 only e: 1 / (6 + 1e-8); fraction_low: p < 0.5 only e^-1: the same
 *   q = clamp(p, 0.5, 2) = [e^0.5, 1, e^-0.25, 2, e^-0.5, 0.5]: sum 6.53405271348, sum of squares
 *       e + 1 + e^-0.5 + 4 + e^-1 + 0.25 = 8.94269192934; mean(q) = 6.53405271348 / (6 + 1e-8) =
 *       1.08900878376; std = sqrt(8.94269192934 / (6 + 1e-8) - 1.08900878376^2) = 0.551822907542
 *   eff_sample_size = 1 / ((8.94269192934 / (1.08900878376 + 1e-8)^2) / (6 + 1e-8)) = 0.795693398081
 *   per response v = mean of p over its model tokens:
 *       v0 = (e^0.5 + 1 + e^-0.25) / (3 + 1e-8) = 1.14250734745
 *       v1 = (e + e^-0.5) / (2 + 1e-8) = 1.66240623577, v3 = e^-1 / (1 + 1e-8) = 0.367879437493
 *   seq_mean 1.05759767357, seq_std (n - 1) 0.651427008502, seq_max v1, seq_min v3,
 *   seq_max_deviation |v1 - 1| = 0.662406235774 (|v3 - 1| = 0.632), seq_fraction_high 0 (none > 2),
 *   seq_fraction_low 1/3 (v3 < 0.5)
 * (verl would count the empty response in the seq_ metrics, as v = 0.)
 */
static void test_is_token(void **state)
{
    (void)state;
    df_rollout_corr_cfg cfg = {.is_level = DF_ROLLOUT_IS_TOKEN, .is_threshold = 2.0};
    float w[7];
    int32_t mo[7];
    for (int t = 0; t < 7; t++)
        w[t] = 99, mo[t] = 99;
    double norm[2] = {0, 0};
    df_metrics *m = df_metrics_new();
    assert_int_equal(df_rollout_correction(&cfg, 4, A_OFF, A_MASK, A_OLD, A_RO, w, mo, norm, m), 0);
    const double want[] = {1.6487212707, 1, 0.778800783071, 2, 0, 0.606530659713, 0.367879441171};
    for (int t = 0; t < 7; t++)
        assert_near(w[t], want[t], lit12f(want[t]));
    assert_near(w[3], 2.0, 0); /* exact: the threshold itself */
    assert_near(w[4], 0.0, 0); /* exact: the tool token */
    for (int t = 0; t < 7; t++)
        assert_int_equal(mo[t], A_MASK[t]); /* no rejection: the mask copied */
    /* the sum of the 6 float weights, each within DF_U32 of its value (cond = their sum) */
    assert_near(norm[0], 6.40193215466, df_tol_hand(5e-12 * 6.4, 0, 6.41, 6.41));
    assert_near(norm[1], 6, 0);

    assert_int_equal(df_metrics_count(m), 14);
    assert_metric_lit(m, "rollout_is_mean", 1.18670232854);
    assert_metric_lit(m, "rollout_is_max", 2.71828182846);
    assert_metric_lit(m, "rollout_is_min", 0.367879441171);
    assert_metric(m, "rollout_is_ratio_fraction_high", 1 / MM(6.0), same4(1 / 6.0));
    assert_metric(m, "rollout_is_ratio_fraction_low", 1 / MM(6.0), same4(1 / 6.0));
    assert_metric(m, "rollout_is_std", 0.551822907542, lit12(0.551822907542, 8.95));
    assert_metric_lit(m, "rollout_is_eff_sample_size", 0.795693398081);
    assert_metric_lit(m, "rollout_is_seq_mean", 1.05759767357);
    assert_metric(m, "rollout_is_seq_std", 0.651427008502, lit12(0.651427008502, 3.0));
    assert_metric_lit(m, "rollout_is_seq_max", 1.66240623577);
    assert_metric_lit(m, "rollout_is_seq_min", 0.367879437493);
    assert_metric_lit(m, "rollout_is_seq_max_deviation", 0.662406235774);
    assert_metric(m, "rollout_is_seq_fraction_high", 0.0, 0);
    assert_metric(m, "rollout_is_seq_fraction_low", 1 / 3.0, 0); /* exact: 1.0 / 3.0 both ways */
    df_metrics_free(m);
}

/*
 * Sequence level, batch A: L = the sum of lr over the model tokens (the tool token's 5 left out):
 *   L = [0.25, 1 - 0.5 = 0.5, -1]: P = [e^0.25, e^0.5, e^-1] = [1.28402541669, 1.6487212707, 0.367879441171],
 *   all below 2, so w = P on every model token of the response, 0 on the tool token.
 *   norm: 1.28402541669 + 1.6487212707 + 0.367879441171 = 3.30062612856 over 3 responses.
 * Metrics:
 *   max = exp(min(max L, 20)) = e^0.5, min = exp(min L) = e^-1
 *   mean = (3 e^0.25 + 2 e^0.5 + e^-1) / (6 + 1e-8) = 7.51739823263 / (6 + 1e-8) = 1.25289970335
 *   fraction_high: L > ln 2 = 0.693: none; fraction_low: L < ln(1/2): response 3: 1/3 of the
 *       responses (verl: 1/4, counting the empty one as L = 0)
 *   q = clamp(P, 0.5, 2) on the tokens: 3 x e^0.25, 2 x e^0.5, 0.5: sum 7.64951879146, squares
 *       3 e^0.5 + 2 e + 0.25 = 10.632727469; std = 0.383015344989, eff_sample_size = 0.917217442277
 *   v = [3 e^0.25 / (3 + 1e-8), 2 e^0.5 / (2 + 1e-8), e^-1 / (1 + 1e-8)]
 *     = [1.28402541241, 1.64872126246, 0.367879437493]: seq_mean 1.10020870412, seq_std 0.659909373951,
 *       seq_max 1.64872126246, seq_min 0.367879437493, seq_max_deviation 0.648721262457, fractions 0, 1/3
 */
static void test_is_sequence(void **state)
{
    (void)state;
    df_rollout_corr_cfg cfg = {.is_level = DF_ROLLOUT_IS_SEQUENCE, .is_threshold = 2.0};
    float w[7];
    for (int t = 0; t < 7; t++)
        w[t] = 99;
    double norm[2] = {0, 0};
    df_metrics *m = df_metrics_new();
    assert_int_equal(df_rollout_correction(&cfg, 4, A_OFF, A_MASK, A_OLD, A_RO, w, NULL, norm, m), 0);
    const double want[] = {1.28402541669, 1.28402541669, 1.28402541669, 1.6487212707, 0,
                           1.6487212707,  0.367879441171};
    for (int t = 0; t < 7; t++)
        assert_near(w[t], want[t], lit12f(want[t]));
    assert_near(norm[0], 3.30062612856, df_tol_hand(5e-12 * 3.3, 0, 3.31, 3.31));
    assert_near(norm[1], 3, 0);

    assert_int_equal(df_metrics_count(m), 14);
    assert_metric_lit(m, "rollout_is_max", 1.6487212707);
    assert_metric_lit(m, "rollout_is_min", 0.367879441171);
    assert_metric_lit(m, "rollout_is_mean", 1.25289970335);
    assert_metric(m, "rollout_is_ratio_fraction_high", 0.0, 0);
    assert_metric(m, "rollout_is_ratio_fraction_low", 1 / 3.0, 0);
    assert_metric(m, "rollout_is_std", 0.383015344989, lit12(0.383015344989, 10.7));
    assert_metric_lit(m, "rollout_is_eff_sample_size", 0.917217442277);
    assert_metric_lit(m, "rollout_is_seq_mean", 1.10020870412);
    assert_metric(m, "rollout_is_seq_std", 0.659909373951, lit12(0.659909373951, 3.0));
    assert_metric_lit(m, "rollout_is_seq_max", 1.64872126246);
    assert_metric_lit(m, "rollout_is_seq_min", 0.367879437493);
    assert_metric_lit(m, "rollout_is_seq_max_deviation", 0.648721262457);
    assert_metric(m, "rollout_is_seq_fraction_high", 0.0, 0);
    assert_metric(m, "rollout_is_seq_fraction_low", 1 / 3.0, 0);
    df_metrics_free(m);
}

/*
 * The safety clamp and truncation. Responses: [old 0, rollout -1000] (lr 1000); two tool tokens;
 * [old -1000, rollout 0] (lr -1000); an empty one. T = 2, S = 2.
 * Token level, threshold 2: p = [e^20, e^-20] = [485165195.41, 2.06115362244e-09] (lr clamped to
 * +-20 before exp: no overflow); w = [2, 0, 0, 2.06115362244e-09]; norm (2 + e^-20, 2).
 *   mean = (e^20 + e^-20) / (2 + 1e-8) = 242582596.492; max e^20; min e^-20; fraction_high and _low
 *   1 / (2 + 1e-8) each.
 * With threshold 1e30 the weight is e^20 itself (float 485165184): unclamped it would be inf.
 * Sequence level, threshold 2: L = [1000, -1000]: w = [min(e^20, 2) = 2, 0, 0, e^-20];
 *   max = exp(min(1000, 20)) = e^20, min = exp(-1000) = 0 (unclamped, as verl: underflows),
 *   mean as the token level.
 */
static void test_is_clamp(void **state)
{
    (void)state;
    const int64_t off[] = {0, 1, 3, 4, 4};
    const int32_t mask[] = {1, 0, 0, 1};
    const float old[] = {0, -1, -1, -1000}, ro[] = {-1000, -3, 0, 0};
    float w[4] = {9, 9, 9, 9};
    double norm[2] = {0, 0};
    df_rollout_corr_cfg cfg = {.is_level = DF_ROLLOUT_IS_TOKEN, .is_threshold = 2.0};
    df_metrics *m = df_metrics_new();
    assert_int_equal(df_rollout_correction(&cfg, 4, off, mask, old, ro, w, NULL, norm, m), 0);
    assert_near(w[0], 2.0, 0);
    assert_near(w[1], 0.0, 0);
    assert_near(w[2], 0.0, 0);
    assert_near(w[3], 2.06115362244e-09, lit12f(2.06115362244e-09));
    assert_near(norm[0], 2.00000000206, df_tol_hand(5e-12 * 2, 0, 2e-9, 2));
    assert_near(norm[1], 2, 0);
    assert_metric_lit(m, "rollout_is_mean", 242582596.492);
    assert_metric_lit(m, "rollout_is_max", 485165195.41);
    assert_metric_lit(m, "rollout_is_min", 2.06115362244e-09);
    assert_metric(m, "rollout_is_ratio_fraction_high", 1 / MM(2.0), same4(0.5));
    assert_metric(m, "rollout_is_ratio_fraction_low", 1 / MM(2.0), same4(0.5));

    cfg.is_threshold = 1e30;
    assert_int_equal(df_rollout_correction(&cfg, 4, off, mask, old, ro, w, NULL, NULL, NULL), 0);
    assert_near(w[0], 485165195.41, lit12f(485165195.41));

    cfg = (df_rollout_corr_cfg){.is_level = DF_ROLLOUT_IS_SEQUENCE, .is_threshold = 2.0};
    df_metrics_clear(m);
    norm[0] = norm[1] = 0;
    assert_int_equal(df_rollout_correction(&cfg, 4, off, mask, old, ro, w, NULL, norm, m), 0);
    assert_near(w[0], 2.0, 0);
    assert_near(w[1], 0.0, 0);
    assert_near(w[3], 2.06115362244e-09, lit12f(2.06115362244e-09));
    assert_near(norm[1], 2, 0);
    assert_metric_lit(m, "rollout_is_max", 485165195.41);
    assert_metric(m, "rollout_is_min", 0.0, 0);
    assert_metric_lit(m, "rollout_is_mean", 242582596.492);
    df_metrics_free(m);
}

/* A shard without a model token: weights 0, the mask copied (and rejected nowhere), the sums
 * unchanged, no metric (verl raises on a whole batch without one); one without any token takes
 * NULL arrays. */
static void test_no_model_token(void **state)
{
    (void)state;
    const int64_t off[] = {0, 2, 2};
    const int32_t mask[] = {0, 0};
    const float old[] = {-1, -2}, ro[] = {-3, 0};
    float w[2] = {5, 5};
    int32_t mo[2] = {7, 7};
    df_rollout_rs rs;
    assert_int_equal(df_rollout_rs_parse("token_k1,seq_max_k3", "2,0.1", &rs), 0);
    df_rollout_corr_cfg cfg = {.is_level = DF_ROLLOUT_IS_SEQUENCE, .is_threshold = 2.0, .rs = &rs};
    double norm[2] = {1, 2};
    df_metrics *m = df_metrics_new();
    assert_int_equal(df_rollout_correction(&cfg, 2, off, mask, old, ro, w, mo, norm, m), 0);
    assert_near(w[0], 0, 0);
    assert_near(w[1], 0, 0);
    assert_int_equal(mo[0], 0);
    assert_int_equal(mo[1], 0);
    assert_near(norm[0], 1, 0);
    assert_near(norm[1], 2, 0);
    assert_int_equal(df_metrics_count(m), 0);
    const int64_t none[] = {0, 0};
    assert_int_equal(df_rollout_correction(&cfg, 1, none, NULL, NULL, NULL, NULL, NULL, norm, m), 0);
    assert_int_equal(df_rollout_correction(&cfg, 0, none, NULL, NULL, NULL, NULL, NULL, NULL, m), 0);
    assert_int_equal(df_metrics_count(m), 0);
    df_metrics_free(m);
}

/* ====================================================================== normalisation */

/*
 * Token level, batch A: mean = 6.40193215466 / 6 = 1.06698869244; the model tokens' weights become
 *   [1.6487212707, 1, 0.778800783071, 2, 0.606530659713, 0.367879441171] / 1.06698869244
 *   = [1.54520969377, 0.937217054954, 0.729905376306, 1.87443410991, 0.568450878635, 0.344782886433].
 * The float weights and their float sum are off by DF_U32 relative each (cond 2 |v|), one more
 * rounding for the output. Sequence level: mean 3.30062612856 / 3 = 1.10020870952, weights
 * [e^0.25, e^0.5, e^-1] / 1.10020870952 = [1.16707439741, 1.49855318944, 0.334372413151].
 * Two shards (responses 0-1 and 2-3) add up to the sums of one.
 */
static void test_normalize(void **state)
{
    (void)state;
    df_rollout_corr_cfg cfg = {.is_level = DF_ROLLOUT_IS_TOKEN, .is_threshold = 2.0};
    float w[7];
    double norm[2] = {0, 0}, shards[2] = {0, 0};
    assert_int_equal(df_rollout_correction(&cfg, 4, A_OFF, A_MASK, A_OLD, A_RO, w, NULL, norm, NULL), 0);
    assert_int_equal(df_rollout_correction(&cfg, 2, A_OFF, A_MASK, A_OLD, A_RO, w, NULL, shards, NULL), 0);
    const int64_t off2[] = {0, 0, 1}; /* responses 2 and 3, tokens from 6 */
    assert_int_equal(
        df_rollout_correction(&cfg, 2, off2, A_MASK + 6, A_OLD + 6, A_RO + 6, w + 6, NULL, shards, NULL), 0);
    /* the same 6 terms summed in another grouping: each sum within gamma_5 of their sum 6.41 */
    assert_near(shards[0], norm[0], 2 * df_tol_gamma(5, DF_U64) * 6.41);
    assert_near(shards[1], norm[1], 0);

    df_metrics *m = df_metrics_new();
    assert_int_equal(df_rollout_is_normalize(4, A_OFF, A_MASK, norm, w, m), 0);
    const double tok[] = {1.54520969377,  0.937217054954, 0.729905376306, 1.87443410991, 0,
                          0.568450878635, 0.344782886433};
    for (int t = 0; t < 7; t++)
        assert_near(w[t], tok[t], df_tol_hand(5e-12 * tok[t], tok[t], 2 * tok[t], tok[t]));
    assert_metric(m, "rollout_is_batch_norm_factor", 1.06698869244, df_tol_hand(5e-12 * 1.07, 0, 1.07, 1.07));

    cfg.is_level = DF_ROLLOUT_IS_SEQUENCE;
    norm[0] = norm[1] = 0;
    assert_int_equal(df_rollout_correction(&cfg, 4, A_OFF, A_MASK, A_OLD, A_RO, w, NULL, norm, NULL), 0);
    assert_int_equal(df_rollout_is_normalize(4, A_OFF, A_MASK, norm, w, m), 0);
    const double seq[] = {1.16707439741, 1.16707439741, 1.16707439741, 1.49855318944, 0,
                          1.49855318944, 0.334372413151};
    for (int t = 0; t < 7; t++)
        assert_near(w[t], seq[t], df_tol_hand(5e-12 * seq[t], seq[t], 2 * seq[t], seq[t]));
    assert_metric(m, "rollout_is_batch_norm_factor", 1.10020870952, df_tol_hand(5e-12 * 1.1, 0, 1.1, 1.1));
    df_metrics_free(m);
}

/* mean <= 1e-8 (no model token in the batch: 0 / 0; or a tiny mean) leaves the weights and records
 * a factor of 1; a mean of 2e-8 is applied (x 5e7, exact in float for these weights up to one
 * rounding); mask NULL normalises every token. */
static void test_normalize_unchanged(void **state)
{
    (void)state;
    const int64_t off[] = {0, 2, 3};
    const int32_t mask[] = {1, 0, 1};
    float w[3] = {0.5f, 0, 2};
    df_metrics *m = df_metrics_new();
    const double zero[2] = {0, 0}, tiny[2] = {1e-9, 1}, small[2] = {4e-8, 2}, two[2] = {4, 2};
    assert_int_equal(df_rollout_is_normalize(2, off, mask, zero, w, m), 0);
    assert_metric(m, "rollout_is_batch_norm_factor", 1.0, 0);
    assert_int_equal(df_rollout_is_normalize(2, off, mask, tiny, w, m), 0);
    assert_metric(m, "rollout_is_batch_norm_factor", 1.0, 0);
    assert_near(w[0], 0.5, 0);
    assert_near(w[2], 2.0, 0);
    assert_int_equal(df_rollout_is_normalize(2, off, mask, small, w, m), 0);
    assert_metric(m, "rollout_is_batch_norm_factor", 2e-8, 0); /* 4e-8 / 2: exact halving */
    assert_near(w[0], 0.5 / 2e-8, DF_U32 * 2.5e7 + df_tol_gamma(2, DF_U64) * 2.5e7);
    assert_near(w[1], 0.0, 0);
    assert_near(w[2], 2 / 2e-8, DF_U32 * 1e8 + df_tol_gamma(2, DF_U64) * 1e8);
    float v[3] = {1, 3, 5};
    assert_int_equal(df_rollout_is_normalize(2, off, NULL, two, v, NULL), 0); /* mean 2, exact */
    assert_near(v[0], 0.5, 0);
    assert_near(v[1], 1.5, 0);
    assert_near(v[2], 2.5, 0);
    assert_error_mentions(df_rollout_is_normalize(2, off, mask, NULL, w, m), DF_EINVAL, "NULL sums");
    assert_error_mentions(df_rollout_is_normalize(2, off, mask, two, NULL, m), DF_EINVAL, "NULL weight");
    const int64_t bad[] = {0, 3, 2};
    assert_int_equal(df_rollout_is_normalize(2, bad, mask, two, w, m), DF_EINVAL);
    df_metrics_free(m);
}

/* ====================================================================== batch B: rejection */

/*
 * Batch B, 5 responses, 9 tokens (T = 8 model tokens, S = 4 responses with one):
 *   response 0: lr [0.5, -0.25]
 *   response 1: lr [1, (7: a tool token), -0.5], mask [1, 0, 1]
 *   response 2: lr [0, 0, 0.125]
 *   response 3: empty
 *   response 4: lr [-1.5]
 * Per model token, k1 = -lr, k2 = lr^2 / 2, k3 = e^lr - 1 - lr:
 *   k1: [-0.5, 0.25 | -1, 0.5 | 0, 0, -0.125 | 1.5]
 *   k2: [0.125, 0.03125 | 0.5, 0.125 | 0, 0, 0.0078125 | 1.125]
 *   k3: [0.1487212707, 0.0288007830714 | 0.718281828459, 0.106530659713 | 0, 0, 0.00814845306683 |
 *        0.723130160148]
 * Per response (0, 1, 2, 4), sums and means (sum / (k + 1e-8)) and maxima:
 *   k1 sum [-0.25, -0.5, -0.125, 1.5], mean [-0.125, -0.25, -0.0417, 1.5]
 *   k2 sum [0.15625, 0.625, 0.0078125, 1.125], mean [0.078125, 0.3125, 0.0026, 1.125],
 *      max [0.125, 0.5, 0.0078125, 1.125]
 *   k3 sum [0.1775, 0.8248, 0.0081, 0.7231], mean [0.0888, 0.4124, 0.0027, 0.7231],
 *      max [0.1487, 0.7183, 0.0081, 0.7231]
 * (The tool token's lr of 7, counted, would give response 1 k1 sum -7.5, k2 sum 25.125, ...)
 */
static const int64_t B_OFF[] = {0, 2, 5, 8, 8, 9};
static const int32_t B_MASK[] = {1, 1, 1, 0, 1, 1, 1, 1, 1};
static const float B_OLD[] = {-1, -1, -1, 7, -3, -2, -0.5f, -1, -2.5f};
static const float B_RO[] = {-1.5f, -0.75f, -2, 0, -2.5f, -2, -0.5f, -1.125f, -1};

typedef struct {
    const char *rs, *threshold;
    int32_t keep[9];
    int rejected, seqs; /* model tokens rejected of 8, responses with one of 4 */
} rs_case;

/*
 * Each option on batch B (kept where the bounds hold; k1 bounds in log space):
 *  token_k1 0.5_1.5: -0.693 <= k1 <= 0.405: response 1's -1 (lower) and 0.5 (upper), response 4's 1.5
 *  token_k1 2: a bare bound: lower 1/2, so +-0.693: response 1's 0.5 now kept
 *  token_k2 0.1: k2 <= 0.1: the 0.125s, 0.5 and 1.125 rejected
 *  token_k3 0.12: 0.1487, 0.7183, 0.7231 rejected; 0.1065 kept
 *  seq_sum_k1 0.7_1.5: sums within [ln 0.7, ln 1.5] = [-0.357, 0.405]: response 1 (-0.5), 4 (1.5) out
 *  seq_mean_k1 0.7_1.5: means: response 1's -0.25 is in, only response 4 out
 *  seq_sum_k2 0.3: responses 1 (0.625) and 4 (1.125) out
 *  seq_sum_k3 0.15: 0 (0.1775), 1 and 4 out
 *  seq_mean_k2 0.1: 1 (0.3125) and 4 out;  seq_mean_k3 0.085: 0 (0.0888), 1 and 4 out
 *  seq_max_k2 0.2: 1 (0.5) and 4 out;  seq_max_k3 0.16: 1 (0.718) and 4 out, 0 (0.1487) kept
 *  token_k1,seq_mean_k3 0.8_2,0.1: token_k1 within [-0.223, 0.693] rejects response 0's -0.5,
 *      response 1's -1 and response 4; seq_mean_k3 <= 0.1 rejects responses 1 (0.4124) and 4; a token
 *      stays when both keep it: response 0's second token and response 2
 *  token_k2,seq_max_k2 0.2 (one spec shared): k2 > 0.2 (0.5, 1.125) and responses 1, 4
 */
static const rs_case B_CASES[] = {
    {"token_k1", "0.5_1.5", {1, 1, 0, 0, 0, 1, 1, 1, 0}, 3, 2},
    {"token_k1", "2", {1, 1, 0, 0, 1, 1, 1, 1, 0}, 2, 2},
    {"token_k2", "0.1", {0, 1, 0, 0, 0, 1, 1, 1, 0}, 4, 3},
    {"token_k3", "0.12", {0, 1, 0, 0, 1, 1, 1, 1, 0}, 3, 3},
    {"seq_sum_k1", "0.7_1.5", {1, 1, 0, 0, 0, 1, 1, 1, 0}, 3, 2},
    {"seq_mean_k1", "0.7_1.5", {1, 1, 1, 0, 1, 1, 1, 1, 0}, 1, 1},
    {"seq_sum_k2", "0.3", {1, 1, 0, 0, 0, 1, 1, 1, 0}, 3, 2},
    {"seq_sum_k3", "0.15", {0, 0, 0, 0, 0, 1, 1, 1, 0}, 5, 3},
    {"seq_mean_k2", "0.1", {1, 1, 0, 0, 0, 1, 1, 1, 0}, 3, 2},
    {"seq_mean_k3", "0.085", {0, 0, 0, 0, 0, 1, 1, 1, 0}, 5, 3},
    {"seq_max_k2", "0.2", {1, 1, 0, 0, 0, 1, 1, 1, 0}, 3, 2},
    {"seq_max_k3", "0.16", {1, 1, 0, 0, 0, 1, 1, 1, 0}, 3, 2},
    {"token_k1,seq_mean_k3", "0.8_2,0.1", {0, 1, 0, 0, 0, 1, 1, 1, 0}, 4, 3},
    {"token_k2, seq_max_k2", "0.2", {1, 1, 0, 0, 0, 1, 1, 1, 0}, 3, 2},
};

static void test_rs_options(void **state)
{
    (void)state;
    for (size_t c = 0; c < sizeof B_CASES / sizeof *B_CASES; c++) {
        const rs_case *k = &B_CASES[c];
        df_rollout_rs rs;
        assert_int_equal(df_rollout_rs_parse(k->rs, k->threshold, &rs), 0);
        df_rollout_corr_cfg cfg = {.rs = &rs};
        int32_t mo[9];
        df_metrics *m = df_metrics_new();
        assert_int_equal(df_rollout_correction(&cfg, 5, B_OFF, B_MASK, B_OLD, B_RO, NULL, mo, NULL, m), 0);
        for (int t = 0; t < 9; t++)
            if (mo[t] != k->keep[t])
                fail_msg("%s %s: token %d kept %d, expected %d", k->rs, k->threshold, t, mo[t], k->keep[t]);
        /* counts over 8 tokens and 4 responses: the same two double operations as the code */
        assert_metric(m, "rollout_rs_masked_fraction", k->rejected / MM(8.0), same4(1));
        assert_metric(m, "rollout_rs_seq_masked_fraction", k->seqs / 4.0, 0);
        /* per option 12 metrics, a k1 one 13, + 2 masked fractions; + the 2 totals */
        int want = 2;
        for (int i = 0; i < rs.n; i++)
            want += (rs.opt[i].k == 1 ? 13 : 12) + 2;
        assert_int_equal(df_metrics_count(m), want);
        df_metrics_free(m);
    }
    /* in place (mask_out = mask_in), without metrics */
    int32_t mk[9];
    memcpy(mk, B_MASK, sizeof mk);
    df_rollout_rs rs;
    assert_int_equal(df_rollout_rs_parse("token_k1,seq_mean_k3", "0.8_2,0.1", &rs), 0);
    df_rollout_corr_cfg cfg = {.rs = &rs};
    assert_int_equal(df_rollout_correction(&cfg, 5, B_OFF, mk, B_OLD, B_RO, NULL, mk, NULL, NULL), 0);
    assert_memory_equal(mk, B_CASES[12].keep, sizeof mk);
    /* no mask: every token the model's, so response 1's lr of 7 counts (k1 -7 < ln 0.8): all its tokens out
     */
    int32_t mo[9];
    assert_int_equal(df_rollout_correction(&cfg, 5, B_OFF, NULL, B_OLD, B_RO, NULL, mo, NULL, NULL), 0);
    const int32_t no_mask[] = {0, 1, 0, 0, 0, 1, 1, 1, 0};
    assert_memory_equal(mo, no_mask, sizeof mo);
}

/*
 * Metrics of token_k1 "0.5_1.5" on batch B: s = k1, hi = ln 1.5 = 0.405465108108, lw = ln 0.5:
 *   mean = (-0.5 + 0.25 - 1 + 0.5 + 0 + 0 - 0.125 + 1.5) / (8 + 1e-8) = 0.625 / (8 + 1e-8)
 *   max 1.5, min -1; fraction_high 2 (0.5, 1.5) / (8 + 1e-8); fraction_low 1 (-1) / (8 + 1e-8)
 *   z = clamp(s, lw, hi) = [-0.5, 0.25, -0.693147180560, 0.405465108108, 0, 0, -0.125, 0.405465108108]:
 *       std = sqrt(mean z^2 - (mean z)^2) = 0.375684683189
 *   u = per response means [-0.25 / (2 + 1e-8), -0.5 / (2 + 1e-8), -0.125 / (3 + 1e-8), 1.5 / (1 + 1e-8)]
 *     = [-0.124999999375, -0.24999999875, -0.0416666665278, 1.499999985]
 *   seq_mean 0.270833330087, seq_std 0.82390498938, seq_max = seq_max_deviation = 1.499999985,
 *   seq_min -0.24999999875, seq_fraction_high 1/4 (> 0.405), seq_fraction_low 0 (< -0.693: none)
 *   masked_fraction 3 / (8 + 1e-8), seq_masked_fraction 2/4; totals the same.
 * Metrics of seq_mean_k2 "0.1": the statistic u = [0.078125, 0.3125, 0.00260416666667, 1.125] each
 *   over (k + 1e-8) instead of k: [0.0781249996094, 0.312499998437, 0.00260416665799, 1.12499998875]
 *   mean (per token: 2, 2, 3, 1 tokens) = (0.15625 + 0.625 + 0.0078125 + 1.125) x (1 - ~1e-8 / k) /
 *       (8 + 1e-8) = 0.239257810303
 *   max = seq_max = seq_max_deviation = 1.12499998875; min = seq_min = 0.00260416665799
 *   fraction_high: responses over 0.1: 1 and 4: 2/4; fraction_low 0 (not k1)
 *   z = clamp(s, 0, 0.1) per token: [0.078125 (x2), 0.1 (x2), 0.0026 (x3), 0.1]: std 0.0437437506962
 *   seq_mean 0.379557288364, seq_std 0.514177848725, seq_fraction_high 2/4;
 *   masked_fraction 3 / (8 + 1e-8), seq_masked_fraction 2/4.
 */
static void test_rs_metrics(void **state)
{
    (void)state;
    df_rollout_rs rs;
    assert_int_equal(df_rollout_rs_parse("token_k1", "0.5_1.5", &rs), 0);
    df_rollout_corr_cfg cfg = {.rs = &rs};
    int32_t mo[9];
    df_metrics *m = df_metrics_new();
    assert_int_equal(df_rollout_correction(&cfg, 5, B_OFF, B_MASK, B_OLD, B_RO, NULL, mo, NULL, m), 0);
#define P "rollout_rs_token_k1"
    assert_metric(m, P "_mean", 0.625 / MM(8.0), same4(0.08));
    assert_metric(m, P "_max", 1.5, 0);
    assert_metric(m, P "_min", -1.0, 0);
    assert_metric(m, P "_fraction_high", 2 / MM(8.0), same4(0.25));
    assert_metric(m, P "_fraction_low", 1 / MM(8.0), same4(0.125));
    assert_metric(m, P "_std", 0.375684683189, lit12(0.375684683189, 0.2));
    assert_metric_lit(m, P "_seq_mean", 0.270833330087);
    assert_metric(m, P "_seq_std", 0.82390498938, lit12(0.82390498938, 2.4));
    assert_metric_lit(m, P "_seq_max", 1.499999985);
    assert_metric_lit(m, P "_seq_min", -0.24999999875);
    assert_metric_lit(m, P "_seq_max_deviation", 1.499999985);
    assert_metric(m, P "_seq_fraction_high", 0.25, 0);
    assert_metric(m, P "_seq_fraction_low", 0.0, 0);
    assert_metric(m, P "_masked_fraction", 3 / MM(8.0), same4(0.375));
    assert_metric(m, P "_seq_masked_fraction", 0.5, 0);
#undef P
    assert_metric(m, "rollout_rs_masked_fraction", 3 / MM(8.0), same4(0.375));
    assert_metric(m, "rollout_rs_seq_masked_fraction", 0.5, 0);

    assert_int_equal(df_rollout_rs_parse("seq_mean_k2", "0.1", &rs), 0);
    df_metrics_clear(m);
    assert_int_equal(df_rollout_correction(&cfg, 5, B_OFF, B_MASK, B_OLD, B_RO, NULL, mo, NULL, m), 0);
#define P "rollout_rs_seq_mean_k2"
    assert_metric_lit(m, P "_mean", 0.239257810303);
    assert_metric_lit(m, P "_max", 1.12499998875);
    assert_metric_lit(m, P "_min", 0.00260416665799);
    assert_metric(m, P "_fraction_high", 0.5, 0);
    assert_metric(m, P "_fraction_low", 0.0, 0);
    assert_metric(m, P "_std", 0.0437437506962, lit12(0.0437437506962, 0.01));
    assert_metric_lit(m, P "_seq_mean", 0.379557288364);
    assert_metric(m, P "_seq_std", 0.514177848725, lit12(0.514177848725, 1.3));
    assert_metric_lit(m, P "_seq_max", 1.12499998875);
    assert_metric_lit(m, P "_seq_min", 0.00260416665799);
    assert_metric_lit(m, P "_seq_max_deviation", 1.12499998875);
    assert_metric(m, P "_seq_fraction_high", 0.5, 0);
    assert_false(df_metrics_has(m, "rollout_corr/" P "_seq_fraction_low")); /* k1 only */
    assert_metric(m, P "_masked_fraction", 3 / MM(8.0), same4(0.375));
    assert_metric(m, P "_seq_masked_fraction", 0.5, 0);
#undef P

    /* chained: each option's own fractions, and the totals of the AND (see B_CASES) */
    assert_int_equal(df_rollout_rs_parse("token_k1,seq_mean_k3", "0.8_2,0.1", &rs), 0);
    df_metrics_clear(m);
    assert_int_equal(df_rollout_correction(&cfg, 5, B_OFF, B_MASK, B_OLD, B_RO, NULL, mo, NULL, m), 0);
    assert_metric(m, "rollout_rs_token_k1_masked_fraction", 3 / MM(8.0), same4(0.375));
    assert_metric(m, "rollout_rs_token_k1_seq_masked_fraction", 0.75, 0);
    assert_metric(m, "rollout_rs_seq_mean_k3_masked_fraction", 3 / MM(8.0), same4(0.375));
    assert_metric(m, "rollout_rs_seq_mean_k3_seq_masked_fraction", 0.5, 0);
    assert_metric(m, "rollout_rs_masked_fraction", 4 / MM(8.0), same4(0.5));
    assert_metric(m, "rollout_rs_seq_masked_fraction", 0.75, 0);

    /* with IS on as well: both sets, the weights unaffected by the rejection (verl computes them first) */
    cfg.is_level = DF_ROLLOUT_IS_TOKEN;
    cfg.is_threshold = 2.0;
    float w[9];
    df_metrics_clear(m);
    assert_int_equal(df_rollout_correction(&cfg, 5, B_OFF, B_MASK, B_OLD, B_RO, w, mo, NULL, m), 0);
    assert_int_equal(df_metrics_count(m), 14 + 15 + 14 + 2);
    assert_near(w[0], 1.6487212707, lit12f(1.6487212707)); /* e^0.5, rejected by token_k1 but weighed */
    assert_near(w[3], 0.0, 0);
    df_metrics_free(m);
}

/* ====================================================================== parsing */

static void test_parse(void **state)
{
    (void)state;
    int lv = -1;
    assert_int_equal(df_rollout_is_parse("token", &lv), 0);
    assert_int_equal(lv, DF_ROLLOUT_IS_TOKEN);
    assert_int_equal(df_rollout_is_parse("sequence", &lv), 0);
    assert_int_equal(lv, DF_ROLLOUT_IS_SEQUENCE);
    assert_int_equal(df_rollout_is_parse(NULL, &lv), 0);
    assert_int_equal(lv, DF_ROLLOUT_IS_OFF);
    assert_error_mentions(df_rollout_is_parse("Token", &lv), DF_EINVAL, "'Token' (token, sequence or null)");
    assert_error_mentions(df_rollout_is_parse("", &lv), DF_EINVAL, "unknown level ''");
    assert_error_mentions(df_rollout_is_parse("token", NULL), DF_EINVAL, "NULL");

    df_rollout_rs rs;
    assert_int_equal(df_rollout_rs_parse(NULL, NULL, &rs), 0);
    assert_int_equal(rs.n, 0);
    assert_int_equal(df_rollout_rs_parse("", "junk", &rs), 0); /* off: the threshold is not read */
    assert_int_equal(rs.n, 0);

    assert_int_equal(df_rollout_rs_parse("token_k1", "0.5_2", &rs), 0);
    assert_int_equal(rs.n, 1);
    assert_string_equal(rs.opt[0].name, "token_k1");
    assert_int_equal(rs.opt[0].level, DF_ROLLOUT_RS_TOKEN);
    assert_int_equal(rs.opt[0].k, 1);
    assert_near(rs.opt[0].lower, 0.5, 0);
    assert_near(rs.opt[0].upper, 2, 0);
    /* a bare k1 bound: lower = 1 / upper */
    assert_int_equal(df_rollout_rs_parse("seq_mean_k1", "4", &rs), 0);
    assert_int_equal(rs.opt[0].level, DF_ROLLOUT_RS_SEQ_MEAN);
    assert_near(rs.opt[0].lower, 0.25, 0);
    assert_near(rs.opt[0].upper, 4, 0);
    /* blanks and empty fields, a spec per option in order */
    assert_int_equal(df_rollout_rs_parse(" token_k1 , seq_max_k3 ,", " 0.5 _ 3 ,, 0.25 ", &rs), 0);
    assert_int_equal(rs.n, 2);
    assert_near(rs.opt[0].lower, 0.5, 0);
    assert_near(rs.opt[0].upper, 3, 0);
    assert_string_equal(rs.opt[1].name, "seq_max_k3");
    assert_int_equal(rs.opt[1].level, DF_ROLLOUT_RS_SEQ_MAX);
    assert_int_equal(rs.opt[1].k, 3);
    assert_near(rs.opt[1].lower, 0, 0);
    assert_near(rs.opt[1].upper, 0.25, 0);
    /* one spec shared: k1 reads it as a bare upper bound, k2 as its bound */
    assert_int_equal(df_rollout_rs_parse("seq_sum_k2,token_k1", "2", &rs), 0);
    assert_int_equal(rs.opt[0].level, DF_ROLLOUT_RS_SEQ_SUM);
    assert_near(rs.opt[0].upper, 2, 0);
    assert_near(rs.opt[1].lower, 0.5, 0);
    assert_near(rs.opt[1].upper, 2, 0);
    /* a repeated option kept once; the specs are counted against the distinct options */
    assert_int_equal(df_rollout_rs_parse("token_k2,token_k2,seq_sum_k3", "0.3,0.2", &rs), 0);
    assert_int_equal(rs.n, 2);
    assert_near(rs.opt[1].upper, 0.2, 0);
    assert_int_equal(df_rollout_rs_parse("token_k3", "inf", &rs), 0); /* no bound at all */
    assert_true(isinf(rs.opt[0].upper));

    assert_error_mentions(df_rollout_rs_parse("token_k4", "1", &rs), DF_EINVAL, "unknown option 'token_k4'");
    assert_last_error_mentions("seq_max_k3");
    assert_error_mentions(df_rollout_rs_parse("seq_max_k1", "2", &rs), DF_EINVAL,
                          "unknown option 'seq_max_k1'");
    assert_int_equal(rs.n, 0); /* cleared on error */
    assert_error_mentions(df_rollout_rs_parse(" , ", "1", &rs), DF_EINVAL, "no option in ' , '");
    assert_error_mentions(df_rollout_rs_parse("token_k1", NULL, &rs), DF_EINVAL,
                          "rollout_rs_threshold must be set with rollout_rs ('token_k1')");
    assert_error_mentions(df_rollout_rs_parse("token_k1", " , ", &rs), DF_EINVAL, "no threshold");
    assert_error_mentions(df_rollout_rs_parse("token_k1,token_k2,token_k3", "1,2", &rs), DF_EINVAL,
                          "2 thresholds for 3 rollout_rs options");
    assert_error_mentions(df_rollout_rs_parse("token_k1", "abc", &rs), DF_EINVAL,
                          "'abc' for option token_k1 is not a number");
    assert_error_mentions(df_rollout_rs_parse("token_k1", "0.5_x", &rs), DF_EINVAL, "not a number");
    assert_error_mentions(df_rollout_rs_parse("token_k1", "0.5_2_3", &rs), DF_EINVAL, "'0.5_2_3'");
    assert_error_mentions(df_rollout_rs_parse("seq_mean_k2", "nan", &rs), DF_EINVAL, "not a number");
    assert_error_mentions(df_rollout_rs_parse("seq_mean_k2", "1e-3x", &rs), DF_EINVAL, "not a number");
    assert_error_mentions(df_rollout_rs_parse("token_k2", "0.5_2", &rs), DF_EINVAL,
                          "option token_k2 takes a single upper bound without '_'");
    assert_error_mentions(df_rollout_rs_parse("token_k2", "-1", &rs), DF_EINVAL,
                          "bound for option token_k2 must be positive, got '-1'");
    assert_error_mentions(df_rollout_rs_parse("seq_sum_k3", "0", &rs), DF_EINVAL, "must be positive");
    assert_error_mentions(df_rollout_rs_parse("token_k1", "0_2", &rs), DF_EINVAL,
                          "must be positive, got '0_2'");
    assert_error_mentions(df_rollout_rs_parse("token_k1", "0", &rs), DF_EINVAL, "must be positive");
    assert_error_mentions(df_rollout_rs_parse("token_k1", "inf", &rs), DF_EINVAL,
                          "must be positive"); /* lower 0 */
    assert_error_mentions(df_rollout_rs_parse("token_k1", "2_0.5", &rs), DF_EINVAL,
                          "lower bound 2 is above its upper bound 0.5");
    assert_error_mentions(df_rollout_rs_parse("seq_sum_k1", "0.5", &rs), DF_EINVAL, "lower bound 2 is above");
    assert_error_mentions(df_rollout_rs_parse("token_k1", "2", NULL), DF_EINVAL, "NULL");
}

static void test_errors(void **state)
{
    (void)state;
    df_rollout_rs rs;
    assert_int_equal(df_rollout_rs_parse("token_k1", "2", &rs), 0);
    df_rollout_corr_cfg is = {.is_level = DF_ROLLOUT_IS_TOKEN, .is_threshold = 2}, rj = {.rs = &rs};
    float w[7];
    int32_t mo[7];
    assert_error_mentions(df_rollout_correction(NULL, 4, A_OFF, A_MASK, A_OLD, A_RO, w, mo, NULL, NULL),
                          DF_EINVAL, "NULL settings");
    const int64_t bad[] = {0, 3, 1, 6, 7};
    assert_error_mentions(df_rollout_correction(&is, 4, bad, A_MASK, A_OLD, A_RO, w, mo, NULL, NULL),
                          DF_EINVAL, "offsets decrease");
    assert_error_mentions(df_rollout_correction(&is, 4, A_OFF, A_MASK, NULL, A_RO, w, mo, NULL, NULL),
                          DF_EINVAL, "NULL log-prob");
    assert_error_mentions(df_rollout_correction(&is, 4, A_OFF, A_MASK, A_OLD, A_RO, NULL, mo, NULL, NULL),
                          DF_EINVAL, "weight array is NULL");
    assert_error_mentions(df_rollout_correction(&rj, 4, A_OFF, A_MASK, A_OLD, A_RO, w, NULL, NULL, NULL),
                          DF_EINVAL, "output mask is NULL");
    const double thr[] = {0, -1, NAN, INFINITY};
    for (int i = 0; i < 4; i++) {
        is.is_threshold = thr[i];
        assert_error_mentions(df_rollout_correction(&is, 4, A_OFF, A_MASK, A_OLD, A_RO, w, mo, NULL, NULL),
                              DF_EINVAL, "rollout_is_threshold must be a finite value > 0");
    }
    is.is_threshold = 2;
    is.is_level = 3;
    assert_error_mentions(df_rollout_correction(&is, 4, A_OFF, A_MASK, A_OLD, A_RO, w, mo, NULL, NULL),
                          DF_EINVAL, "unknown rollout_is level 3");
    rs.opt[0].k = 4;
    assert_error_mentions(df_rollout_correction(&rj, 4, A_OFF, A_MASK, A_OLD, A_RO, w, mo, NULL, NULL),
                          DF_EINVAL, "'token_k1') is malformed");
    rs.opt[0].k = 1;
    rs.opt[0].lower = 3; /* above upper 2 */
    assert_error_mentions(df_rollout_correction(&rj, 4, A_OFF, A_MASK, A_OLD, A_RO, w, mo, NULL, NULL),
                          DF_EINVAL, "malformed");
    rs.n = 12;
    assert_error_mentions(df_rollout_correction(&rj, 4, A_OFF, A_MASK, A_OLD, A_RO, w, mo, NULL, NULL),
                          DF_EINVAL, "12 rollout_rs options");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_is_token),   cmocka_unit_test(test_is_sequence),
        cmocka_unit_test(test_is_clamp),   cmocka_unit_test(test_no_model_token),
        cmocka_unit_test(test_normalize),  cmocka_unit_test(test_normalize_unchanged),
        cmocka_unit_test(test_rs_options), cmocka_unit_test(test_rs_metrics),
        cmocka_unit_test(test_parse),      cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
