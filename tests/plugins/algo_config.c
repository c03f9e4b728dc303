/*
 * An advantage estimator and a policy loss that read the typed config they are handed
 * (df_adv_input.config, df_policy_loss_input.config), as verl's functions read `config`:
 * test_plugin_algo checks the values reach the step's metrics. Public headers only.
 */
#include <distflow/algo_desc.h>
#include <distflow/dag.h>
#include <distflow/train_config.h>

DF_PLUGIN_DECLARE_ABI;

/* Every token's advantage (and return) is algorithm.gamma. */
static int gamma_fn(const df_adv_input *in, float *advantages, float *returns)
{
    if (!in || !in->config)
        return df_error(DF_EINVAL, "gamma_advantage: no typed algorithm config in the input");
    for (int64_t t = 0; t < in->offsets[in->n]; t++)
        advantages[t] = returns[t] = (float)in->config->gamma;
    return DF_OK;
}

DF_API const df_adv_estimator_desc gamma_advantage = {
    .fn = gamma_fn,
    .summary = "algorithm.gamma on every token (reads df_adv_input.config)",
};

/* pg_loss_t = actor.clip_ratio_c on every token, aggregated by the weights; no gradient. */
static int clip_c_fn(const df_policy_loss_input *in, df_policy_loss_output *out)
{
    if (!in || !in->config)
        return df_error(DF_EINVAL, "clip_c_loss: no typed actor config in the input");
    double loss = 0;
    for (int64_t t = 0; t < in->offsets[in->n]; t++) {
        loss += in->weights[t] * in->config->clip_ratio_c;
        if (out->grad)
            out->grad[t] = 0;
    }
    *out = (df_policy_loss_output){.loss = loss, .grad = out->grad};
    return DF_OK;
}

DF_API const df_policy_loss_desc clip_c_loss = {
    .fn = clip_c_fn,
    .summary = "actor.clip_ratio_c on every token (reads df_policy_loss_input.config)",
};
