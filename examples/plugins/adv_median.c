/*
 * adv_median.c — an example distflow plugin: an advantage estimator.
 *
 * Median baseline: each response's advantage is its outcome score minus the
 * median score of the responses to the same prompt,
 *     A_i = score_i - median{score_j : j in the group of i},
 * on every response token (score_i = sum of sample i's token_level_rewards;
 * returns = advantages). The median is robust to one outlier reward in a
 * group where GRPO's mean and std are not; with 0 / 1 rewards it makes the
 * minority answer of a group carry all the signal.
 *
 * The plugin is one exported descriptor (distflow/algo_desc.h): the function
 * and what it needs. A config names it by its ref,
 *     algorithm.adv_estimator: build/plugins/libadv_median.so:median_baseline
 * `distflow config check` and `plan` read the descriptor from the file (no
 * plugin code runs: they learn that it needs groups, so rollout.n > 1);
 * `train` loads the library and calls the function. Only public headers.
 */
#include <distflow/algo_desc.h>
#include <distflow/dag.h>

#include <stdlib.h>

DF_PLUGIN_DECLARE_ABI;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int median_advantage(const df_adv_input *in, float *advantages, float *returns)
{
    if (!in || in->n < 0 || !in->offsets || (in->n && (!in->group || !in->token_level_rewards)))
        return df_error(DF_EINVAL, "median_baseline: missing inputs (offsets, group, token_level_rewards)");
    int64_t n = in->n;
    double *score = malloc((size_t)(2 * n + 1) * sizeof *score), *members = score + n;
    if (!score)
        return df_error(DF_ENOMEM, "median_baseline: out of memory for %lld samples", (long long)n);
    for (int64_t i = 0; i < n; i++) {
        if (in->group[i] < 0 || in->group[i] >= n) {
            free(score);
            return df_error(DF_EINVAL, "median_baseline: group id %lld of sample %lld outside [0, %lld)",
                            (long long)in->group[i], (long long)i, (long long)n);
        }
        score[i] = 0;
        for (int64_t t = in->offsets[i]; t < in->offsets[i + 1]; t++)
            score[i] += in->token_level_rewards[t];
    }
    /* O(n^2) gathering keeps the example short; groups are a prompt's rollout.n responses */
    for (int64_t i = 0; i < n; i++) {
        int64_t k = 0;
        for (int64_t j = 0; j < n; j++)
            if (in->group[j] == in->group[i])
                members[k++] = score[j];
        qsort(members, (size_t)k, sizeof *members, cmp_double);
        double median = k % 2 ? members[k / 2] : 0.5 * (members[k / 2 - 1] + members[k / 2]);
        for (int64_t t = in->offsets[i]; t < in->offsets[i + 1]; t++)
            advantages[t] = returns[t] = (float)(score[i] - median);
    }
    free(score);
    return DF_OK;
}

/* The one registration: what `config check` reads from the file and `train` registers. */
DF_API const df_adv_estimator_desc median_baseline = {
    .fn = median_advantage,
    .needs = DF_ADV_NEEDS_GROUPS,
    .summary = "outcome score minus the median score of the prompt's responses",
};
