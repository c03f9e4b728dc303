/* A custom reward function for test_plugin_algo: 0.25 for every response, whatever its
 * data_source, so the trainer's critic/score/mean shows which scorer ran. */
#include <distflow/dag.h>

DF_PLUGIN_DECLARE_ABI;

DF_API int score_quarter(const char *data_source, const char *solution_str, const char *ground_truth,
                         const char *extra_info, double *score)
{
    (void)data_source, (void)solution_str, (void)ground_truth, (void)extra_info;
    *score = 0.25;
    return DF_OK;
}
