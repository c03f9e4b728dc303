/*
 * score_gsm8k_format.c — an example distflow plugin: a custom reward function, loaded with
 * verl's keys
 *     custom_reward_function:
 *       path: build/plugins/libscore_gsm8k_format.so   # a shared library (verl: a .py file)
 *       name: compute_score                             # the df_reward_fn it exports
 * and then used for every row instead of the built-in scorer chosen by data_source, as verl's
 * custom_reward_function is.
 *
 * compute_score is verl's gsm8k compute_score(method="strict", format_score=0.1, score=1.0)
 * (verl/utils/reward_score/gsm8k.py): 1.0 for the right "#### <answer>", 0.1 for a well-formed
 * but wrong one (the response learned the format), 0.0 without one. It uses only the public API
 * (distflow/reward.h's extractor).
 */
#include <distflow/dag.h>
#include <distflow/reward.h>

DF_PLUGIN_DECLARE_ABI;

#define FORMAT_SCORE 0.1
#define SCORE 1.0

DF_API int compute_score(const char *data_source, const char *solution_str,
                         const char *ground_truth, const char *extra_info, double *score)
{
    double s = 0.0;
    int rc = df_reward_gsm8k(data_source, solution_str, ground_truth, extra_info, &s);
    if (rc)
        return rc;
    char answer[256]; /* only whether an answer is there: a longer one counts as none */
    if (s == SCORE)
        *score = SCORE;
    else
        *score = solution_str && df_reward_gsm8k_extract(solution_str, answer, sizeof answer)
                     ? FORMAT_SCORE
                     : 0.0;
    return DF_OK;
}
