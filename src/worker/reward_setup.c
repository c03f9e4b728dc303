/*
 * The DAG worker's reward manager settings from the config:
 * reward_model.reward_manager (naive | dapo) and DAPO's
 * reward_model.overlong_buffer.*, with data.max_response_length as verl's
 * max_resp_len (verl recipe/dapo/main_dapo.py passes the same key).
 */
#include "worker/worker_internal.h"

#define OB "reward_model.overlong_buffer."

/* The config key behind a df_reward_manager_check error, in the order that function checks. */
static const char *key_at_fault(const df_reward_manager_cfg *r, int rc)
{
    if (rc == DF_ENOTFOUND)
        return "reward_model.reward_manager";
    if (r->max_resp_len < 1)
        return "data.max_response_length";
    return r->overlong_buffer.len < 0 ? OB "len" : OB "penalty_factor";
}

int df_worker_setup_reward(df_dag_worker *w)
{
    const df_config *c = w->cfg;
    w->reward.manager = df_config_str(c, "reward_model.reward_manager");
    w->reward.max_resp_len = df_config_int(c, "data.max_response_length");
    w->reward.overlong_buffer =
        (df_overlong_buffer_cfg){.enable = df_config_bool(c, OB "enable"),
                                 .len = df_config_int(c, OB "len"),
                                 .penalty_factor = df_config_float(c, OB "penalty_factor"),
                                 .log = df_config_bool(c, OB "log")};
    int rc = df_reward_manager_check(&w->reward);
    const char *key = rc ? key_at_fault(&w->reward, rc) : NULL;
    return rc ? df_error_wrap(rc, "%s (%s)", key, df_config_where(c, key)) : DF_OK;
}
