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

/**
 * Roundings chained along the deepest path of one forward pass of a
 * Qwen2/Llama decoder over sequences of at most `pos` tokens, to be used as n
 * in df_tol_gamma_prob. Per layer: RMSNorm (a sum of `hidden` squares, then
 * 3 ops), the q/k/v projections (K = hidden), RoPE (3), the scores
 * (K = head_dim, 1 scale), softmax (exp, a sum of <= pos terms, a division),
 * P V (K = pos), o_proj (K = heads * head_dim), the residual (1), RMSNorm
 * again, gate / up (K = hidden), SiLU times up (4), down (K = intermediate),
 * the residual (1). Then the final RMSNorm, the LM head (K = hidden), the
 * temperature (1) and log-softmax (exp, a sum of `vocab` terms, log, 2
 * subtractions). A backward pass retraces the chain, and a weight gradient
 * adds the sum over the micro-batch's tokens: 2 * chain + tokens.
 */
static inline double df_tol_decoder_chain(int64_t hidden, int64_t intermediate, int64_t heads,
                                          int64_t head_dim, int64_t layers, int64_t vocab, int64_t pos)
{
    double layer = 4.0 * (double)hidden + (double)head_dim + 2.0 * (double)pos + (double)(heads * head_dim) +
                   (double)intermediate + 18.0;
    return (double)layers * layer + 2.0 * (double)hidden + (double)vocab + 8.0;
}

#endif
