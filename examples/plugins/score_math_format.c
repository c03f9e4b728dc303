/*
 * score_math_format.c — an example distflow plugin that builds on the built-in MATH checker: a
 * custom reward function (verl's custom_reward_function keys)
 *     custom_reward_function:
 *       path: build/plugins/libscore_math_format.so
 *       name: compute_score
 * scoring 1.0 when the last \boxed{} answer equals the ground truth under Hendrycks' MATH
 * normalisation (verl's math_reward.py is_equiv), 0.1 when there is a boxed answer but it is
 * wrong (a format reward), and 0.0 without one. It uses only the public API of distflow/reward.h:
 * df_reward_math_last_boxed and df_reward_math_is_equiv, the pieces of the built-in
 * "HuggingFaceH4/MATH-500" scorer.
 */
#include <distflow/dag.h>
#include <distflow/reward.h>

#include <stdlib.h>
#include <string.h>

DF_PLUGIN_DECLARE_ABI;

#define FORMAT_SCORE 0.1

DF_API int compute_score(const char *data_source, const char *solution_str, const char *ground_truth,
                         const char *extra_info, double *score)
{
    (void)data_source;
    (void)extra_info;
    *score = 0.0;
    const char *ans;
    size_t len;
    if (!solution_str || !ground_truth || !df_reward_math_last_boxed(solution_str, &ans, &len))
        return DF_OK;
    char *a = malloc(len + 1); /* the answer is a slice of the response: make it a string */
    if (!a)
        return df_error(DF_ENOMEM, "score_math_format: out of memory");
    memcpy(a, ans, len);
    a[len] = '\0';
    bool equal = false;
    int rc = df_reward_math_is_equiv(a, ground_truth, &equal);
    free(a);
    if (!rc)
        *score = equal ? 1.0 : FORMAT_SCORE;
    return rc;
}
