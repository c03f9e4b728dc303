/*
 * tolerance.h — the floating-point error model behind the tests' tolerances.
 *
 * A tolerance is a bound derived from the computation it checks: the unit
 * roundoff of the format, the number of terms accumulated, and the magnitude
 * of those terms. It is never a number read off one machine's output, because
 * oneDNN picks different kernels per CPU (AVX2, AVX-512, AMX), our kernels are
 * built for different instruction sets, and each sums in its own order.
 * docs/testing.md explains the model and how each kind of test applies it.
 *
 * References: N. J. Higham, Accuracy and Stability of Numerical Algorithms,
 * 2nd ed. (SIAM 2002): Lemma 3.1 (gamma_n), eq. (3.5) (dot products), eq. (4.4)
 * (summation in any order). N. J. Higham and T. Mary, "A New Approach to
 * Probabilistic Rounding Error Analysis", SIAM J. Sci. Comput. 41(5), 2019
 * (Theorem 3.1: lambda sqrt(n) u holds with probability >= 1 - 2 exp(-lambda^2 (1-u)^2 / 2)).
 */
#ifndef DF_TESTS_TOLERANCE_H
#define DF_TESTS_TOLERANCE_H

#include <math.h>
#include <stdint.h>

/** Unit roundoff (half an ulp of 1) of float32, float64 and bfloat16, round to nearest. */
#define DF_U32 0x1p-24
#define DF_U64 0x1p-53
#define DF_U_BF16 0x1p-8

/**
 * gamma_n = n u / (1 - n u) (Higham Lemma 3.1): the worst-case relative error
 * of a chain of n roundings. Infinity when n u >= 1 (no bound).
 */
static inline double df_tol_gamma(double n, double u)
{
    return n * u < 1.0 ? n * u / (1.0 - n * u) : INFINITY;
}

/**
 * Worst-case |fl(sum) - sum| of n float32 terms added in any order or
 * blocking (Higham eq. 4.4): gamma_{n-1} * sum |x_i|. Two evaluations of the
 * same sum in different orders differ by at most twice this.
 */
static inline double df_tol_sum(int64_t n, double abs_sum)
{
    return df_tol_gamma((double)(n > 1 ? n - 1 : 0), DF_U32) * abs_sum;
}

/**
 * Worst-case |fl(x . y) - x . y| of a float32 dot product of length n in any
 * order (Higham eq. 3.5): gamma_n * sum |x_i y_i|. A GEMM's entry C_ij is such
 * a dot product with n = K, so ||C - C_exact||_F <= gamma_K || |A| |B| ||_F.
 */
static inline double df_tol_dot(int64_t n, double abs_dot)
{
    return df_tol_gamma((double)n, DF_U32) * abs_dot;
}

/**
 * The probabilistic counterpart of gamma_n (Higham & Mary 2019, Thm 3.1):
 * lambda sqrt(n) u. With rounding errors modelled as independent and
 * mean-independent, a chain of n roundings stays below it with probability
 * at least 1 - 2 exp(-lambda^2 / 2); lambda = 6 gives 1 - 3e-8. Used where a
 * worst-case bound over a deep computation (a whole model, a training step)
 * would be too loose to catch a wrong term, and said so where it is used.
 */
static inline double df_tol_gamma_prob(double n, double lambda, double u)
{
    return lambda * sqrt(n) * u;
}

/* ---- algorithms (tolalgo: hand-computed cases, finite differences; test_algo.c, test_losses.c, ...) */

/**
 * A value worked out by hand against code that reads float32 inputs, computes
 * in double and returns a double or float32 (src/algo: losses, advantages, KL):
 *   lit   the hand value's own error: half a unit in its last printed digit (0 for an exact one);
 *   out   |f| times the number of float32 roundings of the result (|f| for one float32 output,
 *         0 for a double result);
 *   cond  sum_i |x_i df/dx_i| over the inputs float32 cannot hold (0.1f, 1e-6f; a float libm
 *         result such as logf(1.1f) counts twice for its ulp; integers, halves, quarters are
 *         exact): their DF_U32 |x_i| representation errors carried to f, to first order
 *         (doubled: the second-order terms);
 *   mag   the magnitude the double arithmetic works at (|f|, or the sum of |terms| of a sum
 *         that cancels): gamma_64 of it in double, the hand cases' chains being shorter.
 * An exact hand value of exact inputs through exact arithmetic (halves, small sums) needs no
 * bound: compare with 0.
 */
static inline double df_tol_hand(double lit, double out, double cond, double mag)
{
    return lit + 2.0 * DF_U32 * (out + cond) + df_tol_gamma(64, DF_U64) * mag;
}

/**
 * |(f(x + h) - f(x - h)) / (2h) - g| for a central difference whose step 2h is the
 * exact difference of the two arguments used, against an analytic derivative g
 * (Taylor with remainder): the truncation h^2/6 m3 (m3 >= |f'''| on [x - h, x + h]);
 * the shift of the midpoint when x +- h are rounded to float32, mid * m2 (mid =
 * |midpoint - x| <= DF_U32 (|x| + h), m2 >= |f''|); the rounding of the two
 * evaluations, 2 ferr / 2h (ferr >= |computed f - f|); the float32 rounding of g.
 */
static inline double df_tol_fd(double h, double m3, double mid, double m2, double ferr, double g)
{
    return h * h / 6.0 * m3 + mid * m2 + ferr / h + DF_U32 * fabs(g);
}

/* ---- engine (src/model kernels; tests/test_ops.c, test_vocab.c) ---------------- */

/**
 * Relative error bound of the kernels' own exp, df_expf / df_v16_exp /
 * df_v16_exp_softmax (src/model/ops_math.h), for an exact float argument and a
 * normal result. First-order running error analysis of its evaluation, with
 * or without FMA: the reduction r = x - n ln2 (n ln2_hi exact, one rounding
 * of n ln2_lo and of the difference, ln2's split error), the degree-7 Taylor
 * polynomial in Horner form (at most two roundings per step, float
 * coefficients) and its truncation, and the exact scaling by 2^n: at most
 * 2.51 u over |r| <= ln2 / 2 and |n| <= 128 (worst near r = -ln2 / 2),
 * rounded up to 3 u. test_vocab's test_exp_softmax_accuracy holds the kernel
 * to it on a sweep.
 */
#define DF_TOL_EXPF (3 * DF_U32)

/**
 * Roundings on the longest path through a pre-norm decoder (Qwen2 / Llama:
 * RMSNorm, attention with RoPE over at most L keys, SwiGLU MLP) of `layers`
 * layers, hidden H, intermediate I, nh query heads of hd: the n of
 * df_tol_gamma_prob for its final hidden state. Per layer: RMSNorm (H squares
 * summed, 4 more), q / k / v projection (H + bias), RoPE (3), scores (hd + 3),
 * online softmax over L keys (L + 4), P V (L + 2), o_proj (nh hd), residual,
 * RMSNorm, gate / up (H), SwiGLU (4), down (I), residual; then the final
 * RMSNorm. A head (LM head: H + 2, log-softmax: V + 4; value head: H + 2) is
 * the caller's to add.
 */
static inline double df_tol_decoder_fwd_chain(int64_t H, int64_t I, int64_t nh, int64_t hd, int64_t L,
                                              int64_t layers)
{
    double layer = (double)((H + 4) + (H + 1) + 3 + (hd + 3) + (L + 4) + (L + 2) + nh * hd + 1 +
                            (H + 4) + H + 4 + I + 1);
    return (double)layers * layer + (double)(H + 4);
}

/**
 * Roundings on the longest path of the backward of that decoder, from the
 * head's gradient to a parameter's: the final RMSNorm's backward (H + 8), per
 * layer the MLP (down^T: H, SwiGLU: 6, gate^T / up^T summed: 2 I), RMSNorm
 * (H + 8), o_proj^T (H), attention (D = dO . O: hd, dS: 5, dq / dk / dv sums
 * over the group's rows: grp L), the q / k / v projections^T summed
 * ((nh + 2 nkv) hd), RoPE (3), RMSNorm (H + 8), two residual adds; then a
 * parameter gradient sums T tokens. Add the forward chain (the backward reads
 * its activations) and the head's backward for the whole n.
 */
static inline double df_tol_decoder_bwd_chain(int64_t H, int64_t I, int64_t nh, int64_t nkv, int64_t hd,
                                              int64_t L, int64_t layers, int64_t T)
{
    double layer = (double)(H + 6 + 2 * I + (H + 8) + H + hd + 5 + (nh / nkv) * L +
                            (nh + 2 * nkv) * hd + 3 + (H + 8) + 2);
    return (double)(H + 8) + (double)layers * layer + (double)T;
}

/* ---- training: Adam and the decoder's chain of roundings (toltrain) ---- */

/**
 * Gain of Adam's bias-corrected direction u_t = m^_t / (sqrt(v^_t) + eps) at
 * step t (1-based) as a function of the gradients g_1..g_t, per coordinate:
 *   |u_t(g + dg) - u_t(g)| <= df_tol_adam_gain(t, b1, b2) * max_k |dg_k| / eps.
 * m^ = sum a_k g_k and v^ = sum b_k g_k^2 are averages (a, b >= 0, each summing
 * to 1), so |dm^| <= max|dg|, |d sqrt(v^)| <= max|dg| (a weighted 2-norm), and
 * |m^| / sqrt(v^) <= c_t = sqrt(sum a_k^2 / b_k) (Cauchy-Schwarz); the gain is
 * 1 + c_t, and |u_t| <= c_t. Divided by eps this is Adam's amplification of
 * gradient rounding: with eps = 1e-8 a parameter whose gradient is rounding
 * noise moves by up to ~lr either way, so tests that compare weights after
 * Adam steps take eps well above that noise (the update is then Lipschitz).
 */
static inline double df_tol_adam_gain(int t, double beta1, double beta2)
{
    double s = 0;
    for (int k = 1; k <= t; k++) {
        double a = (1 - beta1) * pow(beta1, t - k) / (1 - pow(beta1, t));
        double b = (1 - beta2) * pow(beta2, t - k) / (1 - pow(beta2, t));
        if (a > 0)
            s += b > 0 ? a * a / b : INFINITY;
    }
    return 1 + sqrt(s);
}

#endif
