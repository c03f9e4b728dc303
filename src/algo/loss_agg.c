/* Loss aggregation as per-token weights (include/distflow/algo.h; verl agg_loss). */
#include "distflow/algo.h"

#include "algo/algo_internal.h"

#include <string.h>

/* Each mode is one rule: the weight of every token of a sample of length len. */
typedef enum { NEED_TOKENS = 1, NEED_SEQS = 2, NEED_NORM = 4 } agg_need;

typedef enum { TOKEN_MEAN, SEQ_TOKEN_SUM, SEQ_TOKEN_MEAN, SEQ_TOKEN_SUM_NORM, SEQ_TOKEN_SUM_NORM_SEQAVG } agg_kind;

typedef struct agg_mode {
    const char *name;
    agg_kind kind;
    int need;
} agg_mode;

/* New modes (e.g. verl's token-mean-unbiased) slot in here and in sample_weight. */
static const agg_mode k_modes[] = {
    {"token-mean", TOKEN_MEAN, NEED_TOKENS},
    {"seq-mean-token-sum", SEQ_TOKEN_SUM, NEED_SEQS},
    {"seq-mean-token-mean", SEQ_TOKEN_MEAN, NEED_SEQS},
    {"seq-mean-token-sum-norm", SEQ_TOKEN_SUM_NORM, NEED_NORM},
    {"seq-mean-token-sum-norm-seqavg", SEQ_TOKEN_SUM_NORM_SEQAVG, NEED_SEQS | NEED_NORM},
};
enum { N_MODES = sizeof k_modes / sizeof k_modes[0] };

static double sample_weight(agg_kind k, int64_t len, int64_t tokens, int64_t seqs, int64_t norm)
{
    switch (k) {
    case TOKEN_MEAN: return 1.0 / (double)tokens;
    case SEQ_TOKEN_SUM: return 1.0 / (double)seqs;
    case SEQ_TOKEN_MEAN: return 1.0 / ((double)seqs * (double)len); /* len > 0 here */
    case SEQ_TOKEN_SUM_NORM: return 1.0 / (double)norm;              /* verl: no mean over sequences */
    case SEQ_TOKEN_SUM_NORM_SEQAVG: return 1.0 / ((double)seqs * (double)norm);
    }
    return 0;
}

int64_t df_loss_agg_count_seqs(int64_t n, const int64_t *offsets)
{
    int64_t s = 0;
    for (int64_t i = 0; offsets && i < n; i++)
        s += offsets[i + 1] > offsets[i];
    return s;
}

/* Model tokens of sample i (all of them without a mask). */
static int64_t model_tokens(const int64_t *offsets, const int32_t *mask, int64_t i)
{
    if (!mask)
        return offsets[i + 1] - offsets[i];
    int64_t k = 0;
    for (int64_t t = offsets[i]; t < offsets[i + 1]; t++)
        k += mask[t] != 0;
    return k;
}

void df_loss_agg_count_masked(int64_t n, const int64_t *offsets, const int32_t *mask,
                              int64_t *tokens, int64_t *seqs)
{
    int64_t tk = 0, sq = 0;
    for (int64_t i = 0; offsets && i < n; i++) {
        int64_t k = model_tokens(offsets, mask, i);
        tk += k;
        sq += k > 0;
    }
    if (tokens)
        *tokens = tk;
    if (seqs)
        *seqs = sq;
}

int df_loss_agg_weights_ex(const char *mode, int64_t n, const int64_t *offsets,
                           int64_t global_tokens, int64_t global_seqs, int64_t norm_length,
                           float *w)
{
    return df_loss_agg_weights_masked(mode, n, offsets, NULL, global_tokens, global_seqs, norm_length, w);
}

int df_loss_agg_weights_masked(const char *mode, int64_t n, const int64_t *offsets,
                               const int32_t *mask, int64_t global_tokens, int64_t global_seqs,
                               int64_t norm_length, float *w)
{
    int m = -1;
    for (int i = 0; mode && i < N_MODES; i++)
        if (!strcmp(mode, k_modes[i].name))
            m = i;
    if (m < 0)
        return df_error(DF_EINVAL,
                        "unknown loss_agg_mode '%s' (known: token-mean, seq-mean-token-sum, "
                        "seq-mean-token-mean, seq-mean-token-sum-norm, seq-mean-token-sum-norm-seqavg)",
                        mode ? mode : "(null)");
    int rc = df_algo_check_offsets(mode, n, offsets);
    if (rc)
        return rc;
    int need = k_modes[m].need;
    if ((need & NEED_TOKENS) && global_tokens <= 0)
        return df_error(DF_EINVAL, "loss_agg_mode %s: global token count must be > 0, got %lld",
                        mode, (long long)global_tokens);
    if ((need & NEED_SEQS) && global_seqs <= 0)
        return df_error(DF_EINVAL,
                        "loss_agg_mode %s: global sequence count must be > 0, got %lld", mode,
                        (long long)global_seqs);
    if ((need & NEED_NORM) && norm_length <= 0)
        return df_error(DF_EINVAL,
                        "loss_agg_mode %s: needs a positive constant length normaliser "
                        "(max response length), got %lld",
                        mode, (long long)norm_length);
    /* A micro-batch is part of its mini-batch: more tokens / responses than the
     * totals means the caller passed micro-batch counts or mixed up batches. Only
     * responses with tokens count (verl agg_loss leaves fully masked rows out). */
    int64_t tokens_here, seqs_here;
    df_loss_agg_count_masked(n, offsets, mask, &tokens_here, &seqs_here);
    if ((need & NEED_TOKENS) && tokens_here > global_tokens)
        return df_error(DF_EINVAL,
                        "loss_agg_mode %s: %lld tokens here exceed the mini-batch total %lld",
                        mode, (long long)tokens_here, (long long)global_tokens);
    seqs_here = (need & NEED_SEQS) ? seqs_here : 0;
    if (seqs_here > global_seqs)
        return df_error(DF_EINVAL,
                        "loss_agg_mode %s: %lld non-empty responses here exceed the mini-batch total %lld",
                        mode, (long long)seqs_here, (long long)global_seqs);
    if (offsets[n] > 0 && !w)
        return df_error(DF_EINVAL, "loss_agg_mode %s: NULL weight array", mode);
    for (int64_t i = 0; i < n; i++) {
        int64_t len = model_tokens(offsets, mask, i);
        float wi = len ? (float)sample_weight(k_modes[m].kind, len, global_tokens, global_seqs, norm_length)
                       : 0.0f;
        if (!mask && !len)
            continue;
        for (int64_t t = offsets[i]; t < offsets[i + 1]; t++) /* appended tokens: no loss term */
            w[t] = !mask || mask[t] ? wi : 0.0f;
    }
    return DF_OK;
}

int df_loss_agg_weights(const char *mode, int64_t n, const int64_t *offsets,
                        int64_t global_tokens, int64_t global_seqs, float *w)
{
    return df_loss_agg_weights_ex(mode, n, offsets, global_tokens, global_seqs, 0, w);
}

double df_loss_agg_apply(int64_t n_tokens, const float *values, const float *w)
{
    double s = 0;
    for (int64_t t = 0; t < n_tokens; t++)
        s += (double)w[t] * (double)values[t];
    return s;
}

double df_entropy_loss(int64_t n_tokens, const float *entropy, const float *w)
{
    return df_loss_agg_apply(n_tokens, entropy, w);
}
