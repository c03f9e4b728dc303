/*
 * verl's DAPORewardManager and the choice between reward managers
 * (include/distflow/reward.h). Reference: verl
 * verl/workers/reward_manager/dapo.py at commit
 * 003364bc724da7d6efb63834fa1c496e1a55c888; DAPO, arXiv 2503.14476, eq. 13.
 */
#include "distflow/reward.h"

#include <stdlib.h>
#include <string.h>

/* "embodied" (siiRL's EmbodiedRewardManager) scores episodes, not text: the embodied reward node
   (src/workers/embodied/) runs it, and df_reward_manager_run refuses it. */
static const char *const MANAGERS[] = {"naive", "dapo", "batch", "prime", "embodied"};

static bool is_dapo(const df_reward_manager_cfg *cfg)
{
    return cfg && cfg->manager && !strcmp(cfg->manager, "dapo");
}

double df_reward_overlong_penalty(const df_overlong_buffer_cfg *ob, int64_t max_resp_len, int64_t valid_len)
{
    if (!ob || !ob->enable)
        return 0.0;
    if (ob->len <= 0) /* the ramp's limit as its length goes to 0: a step at max_resp_len */
        return valid_len >= max_resp_len ? -ob->penalty_factor : 0.0;
    double expected = (double)(max_resp_len - ob->len);
    double exceed = (double)valid_len - expected;
    double p = -exceed / (double)ob->len * ob->penalty_factor;
    return p < 0.0 ? p : 0.0;
}

int df_reward_manager_check(const df_reward_manager_cfg *cfg)
{
    const char *name = cfg && cfg->manager && cfg->manager[0] ? cfg->manager : "naive";
    bool known = false;
    for (size_t i = 0; i < sizeof MANAGERS / sizeof *MANAGERS; i++)
        known |= !strcmp(name, MANAGERS[i]);
    if (!known)
        return df_error(DF_ENOTFOUND,
                        "unknown reward manager '%s' (known: naive, dapo, batch, prime, embodied)", name);
    if (!is_dapo(cfg) || !cfg->overlong_buffer.enable)
        return DF_OK;
    const df_overlong_buffer_cfg *ob = &cfg->overlong_buffer;
    if (cfg->max_resp_len < 1)
        return df_error(DF_EINVAL,
                        "dapo reward manager: the overlong buffer needs max_resp_len >= 1 (got %lld)",
                        (long long)cfg->max_resp_len);
    if (ob->len < 0 || !(ob->penalty_factor >= 0))
        return df_error(DF_EINVAL,
                        "dapo reward manager: reward_model.overlong_buffer.len=%lld and penalty_factor=%g "
                        "must be >= 0",
                        (long long)ob->len, ob->penalty_factor);
    return DF_OK;
}

/* df_reward_dapo on a configuration already checked (df_reward_manager_check). */
static int dapo_apply(const df_reward_manager_cfg *cfg, df_batch *b, const char *const *responses,
                      float *scores, float *acc, float *overlong_reward, int64_t *n_empty)
{
    int rc = df_reward_naive(cfg, b, responses, scores, acc, n_empty);
    if (rc)
        return rc;
    bool on = cfg && cfg->overlong_buffer.enable;
    const int64_t *off = df_batch_offsets(b, "token_level_scores");
    float *tls = on ? df_batch_data_mut(b, "token_level_scores") : NULL;
    for (int64_t i = 0; i < df_batch_size(b); i++) {
        int64_t len = off[i + 1] - off[i];
        double p = on ? df_reward_overlong_penalty(&cfg->overlong_buffer, cfg->max_resp_len, len) : 0.0;
        if (tls && len > 0)
            tls[off[i + 1] - 1] += (float)p; /* verl: reward = score + overlong_reward */
        if (overlong_reward)
            overlong_reward[i] = (float)p;
    }
    return DF_OK;
}

int df_reward_dapo(const df_reward_manager_cfg *cfg, df_batch *b, const char *const *responses, float *scores,
                   float *acc, float *overlong_reward, int64_t *n_empty)
{
    int rc = df_reward_manager_check(cfg);
    return rc ? rc : dapo_apply(cfg, b, responses, scores, acc, overlong_reward, n_empty);
}

int df_reward_manager_run(const df_reward_manager_cfg *cfg, df_batch *b, const char *const *responses,
                          float *scores, float *acc, float *overlong_reward, int64_t *n_empty)
{
    int rc = df_reward_manager_check(cfg);
    if (rc)
        return rc;
    if (cfg && cfg->manager && !strcmp(cfg->manager, "embodied"))
        return df_error(DF_EUNSUPPORTED, "the embodied reward manager scores control episodes "
                        "(actor_rollout_ref.model.model_type=embodied), not text responses");
    const char *m = cfg && cfg->manager && cfg->manager[0] ? cfg->manager : "naive";
    df_reward_python_opts o; /* the mode this manager calls a Python function in (no settings read) */
    df_reward_python_opts_for(m, NULL, &o);
    const df_reward_py_mode want = o.mode;
    const df_reward_python *py = cfg ? cfg->python : NULL;
    if (want == DF_REWARD_PY_BATCH && !py)
        return df_error(DF_EINVAL, "the batch reward manager calls a Python reward function once per batch "
                                   "(custom_reward_function.path a .py file), and only it does");
    if (py && df_reward_python_mode(py) != want)
        return df_error(DF_EINVAL, "the %s reward manager's Python reward function was opened for another "
                                   "manager's calls (df_reward_python_opts.mode)", m);
    if (is_dapo(cfg))
        return dapo_apply(cfg, b, responses, scores, acc, overlong_reward, n_empty);
    rc = df_reward_naive(cfg, b, responses, scores, acc, n_empty);
    for (int64_t i = 0; !rc && overlong_reward && i < df_batch_size(b); i++)
        overlong_reward[i] = 0.0f;
    return rc;
}

bool df_reward_manager_logs_overlong(const df_reward_manager_cfg *cfg)
{
    return is_dapo(cfg) && cfg->overlong_buffer.enable && cfg->overlong_buffer.log;
}
