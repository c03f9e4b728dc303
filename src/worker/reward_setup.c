/*
 * The DAG worker's reward manager settings from the config:
 * reward_model.reward_manager (naive | dapo) and DAPO's
 * reward_model.overlong_buffer.*, with data.max_response_length as verl's
 * max_resp_len (verl recipe/dapo/main_dapo.py passes the same key).
 */
#include "worker/worker_internal.h"

int df_worker_setup_reward(df_dag_worker *w)
{
    const df_config *c = w->cfg;
#define OB "reward_model.overlong_buffer."
    w->reward.manager = df_config_str(c, "reward_model.reward_manager");
    w->reward.max_resp_len = df_config_int(c, "data.max_response_length");
    w->reward.overlong_buffer =
        (df_overlong_buffer_cfg){.enable = df_config_bool(c, OB "enable"),
                                 .len = df_config_int(c, OB "len"),
                                 .penalty_factor = df_config_float(c, OB "penalty_factor"),
                                 .log = df_config_bool(c, OB "log")};
#undef OB
    int rc = df_reward_manager_check(&w->reward);
    return rc ? df_error_wrap(rc, "reward_model.reward_manager (%s)",
                              df_config_where(c, "reward_model.reward_manager"))
              : DF_OK;
}
