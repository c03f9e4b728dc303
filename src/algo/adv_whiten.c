/*
 * Whitening of advantages (verl masked_whiten with every token valid):
 * df_adv_whiten on one array, and the split form df_adv_whiten_sum / _ssd /
 * _stats for a batch cut into parts (data-parallel ranks) whose sums the
 * caller reduces. Both run the same three steps in the same order, so one
 * part gives the same bits as the whole.
 */
#include "algo/adv_internal.h"

#include <math.h>
#include <stdlib.h>

/* verl masked_whiten adds this to the variance before rsqrt. */
#define DF_WHITEN_EPS 1e-8

/* A read-only array of doubles (the estimators' scratch) or floats (the public API). */
typedef struct {
    const double *d;
    const float *f;
} src;

static inline double at(src x, int64_t t)
{
    return x.d ? x.d[t] : (double)x.f[t];
}

/* Sum of the counted values (mask 1; all with no mask), their count into *cnt. */
static double sum_of(src x, const int32_t *m, int64_t n, int64_t *cnt)
{
    double s = 0;
    int64_t c = 0;
    for (int64_t t = 0; t < n; t++)
        if (!m || m[t]) {
            s += at(x, t);
            c++;
        }
    *cnt = c;
    return s;
}

/* Sum of squared deviations about `mean` (the second pass: accurate where sum of squares is not). */
static double ssd_of(src x, const int32_t *m, int64_t n, double mean)
{
    double s = 0;
    for (int64_t t = 0; t < n; t++)
        if (!m || m[t])
            s += (at(x, t) - mean) * (at(x, t) - mean);
    return s;
}

/* out = (x - mean) / sqrt(var + eps), var = ssd / (count - 1); 0 for count 1 (and no count). */
static void apply(src x, int64_t n, int64_t count, double mean, double ssd, float *out)
{
    /* one token: x - mean is exactly 0, so any finite scale gives 0 (verl raises instead) */
    const double var = count > 1 ? ssd / (double)(count - 1) : 0;
    const double scale = 1.0 / sqrt(var + DF_WHITEN_EPS);
    for (int64_t t = 0; t < n; t++)
        out[t] = count > 0 ? (float)((at(x, t) - mean) * scale) : 0.0f;
}

/* Whiten n > 0 values over the counted ones: the three steps of the split form on one part. */
static void whiten(src x, const int32_t *m, int64_t n, float *out)
{
    int64_t count;
    const double sum = sum_of(x, m, n, &count);
    const double mean = count > 0 ? sum / (double)count : 0;
    apply(x, n, count, mean, ssd_of(x, m, n, mean), out);
}

void df_adv_whiten_d(int64_t n_tokens, const double *x, float *out)
{
    if (n_tokens > 0)
        whiten((src){.d = x}, NULL, n_tokens, out);
}

void df_adv_finish_whiten(const df_adv_input *in, int64_t n_tokens, const double *x, float *out)
{
    if (!in->defer_whiten) {
        if (n_tokens > 0)
            whiten((src){.d = x}, in->response_mask, n_tokens, out);
        return;
    }
    for (int64_t t = 0; t < n_tokens; t++)
        out[t] = (float)x[t];
}

int df_adv_whiten(int64_t n_tokens, const float *x, float *out)
{
    if (n_tokens < 0)
        return df_error(DF_EINVAL, "whiten: negative token count %lld", (long long)n_tokens);
    if (n_tokens == 0)
        return DF_OK;
    if (!x || !out)
        return df_error(DF_EINVAL, "whiten: NULL input or output");
    whiten((src){.f = x}, NULL, n_tokens, out);
    return DF_OK;
}

/* ---- split form ------------------------------------------------------------------------------ */

static int check_part(const char *who, int64_t n_tokens, const float *x, const void *out)
{
    if (n_tokens < 0)
        return df_error(DF_EINVAL, "%s: negative token count %lld", who, (long long)n_tokens);
    if (n_tokens > 0 && (!x || !out))
        return df_error(DF_EINVAL, "%s: NULL input or output for %lld tokens", who, (long long)n_tokens);
    return DF_OK;
}

/* The whole batch's count and sum, as given by the caller's reduction; here: this part's count. */
static int check_totals(const char *who, int64_t here, int64_t count, double sum)
{
    if (count < here)
        return df_error(DF_EINVAL,
                        "%s: the batch's token count %lld is less than this part's %lld (pass the count "
                        "summed over every part)",
                        who, (long long)count, (long long)here);
    if (!isfinite(sum))
        return df_error(DF_EINVAL, "%s: the batch's sum is %g", who, sum);
    return DF_OK;
}

/* Tokens of x[n] that count (mask 1; all of them without a mask). */
static int64_t counted(const int32_t *m, int64_t n)
{
    int64_t c = 0;
    for (int64_t t = 0; m && t < n; t++)
        c += m[t] != 0;
    return m ? c : n;
}

int df_adv_whiten_masked_sum(int64_t n_tokens, const float *x, const int32_t *mask, double *sum, int64_t *count)
{
    int rc = check_part("whiten sum", n_tokens, x, sum);
    if (!rc && !sum)
        rc = df_error(DF_EINVAL, "whiten sum: NULL output");
    int64_t c = 0;
    if (!rc)
        *sum = sum_of((src){.f = x}, mask, n_tokens, &c);
    if (!rc && count)
        *count = c;
    return rc;
}

int df_adv_whiten_masked_ssd(int64_t n_tokens, const float *x, const int32_t *mask, int64_t count, double sum,
                             double *ssd)
{
    int rc = check_part("whiten ssd", n_tokens, x, ssd);
    if (!rc && !ssd)
        rc = df_error(DF_EINVAL, "whiten ssd: NULL output");
    if (!rc)
        rc = check_totals("whiten ssd", counted(mask, n_tokens), count, sum);
    if (rc)
        return rc;
    *ssd = count > 0 ? ssd_of((src){.f = x}, mask, n_tokens, sum / (double)count) : 0;
    return DF_OK;
}

int df_adv_whiten_masked_stats(int64_t n_tokens, const float *x, const int32_t *mask, int64_t count, double sum,
                               double ssd, float *out)
{
    int rc = check_part("whiten", n_tokens, x, out);
    if (!rc)
        rc = check_totals("whiten", counted(mask, n_tokens), count, sum);
    if (!rc && !(ssd >= 0 && isfinite(ssd)))
        rc = df_error(DF_EINVAL, "whiten: the batch's sum of squared deviations is %g (must be finite, >= 0)",
                      ssd);
    if (!rc && n_tokens > 0)
        apply((src){.f = x}, n_tokens, count, count > 0 ? sum / (double)count : 0, ssd, out);
    return rc;
}

int df_adv_whiten_sum(int64_t n_tokens, const float *x, double *sum)
{
    return df_adv_whiten_masked_sum(n_tokens, x, NULL, sum, NULL);
}

int df_adv_whiten_ssd(int64_t n_tokens, const float *x, int64_t count, double sum, double *ssd)
{
    return df_adv_whiten_masked_ssd(n_tokens, x, NULL, count, sum, ssd);
}

int df_adv_whiten_stats(int64_t n_tokens, const float *x, int64_t count, double sum, double ssd, float *out)
{
    return df_adv_whiten_masked_stats(n_tokens, x, NULL, count, sum, ssd, out);
}
