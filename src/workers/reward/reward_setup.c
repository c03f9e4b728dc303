/*
 * The DAG worker's reward manager settings from the config:
 * reward_model.reward_manager (naive | dapo) and DAPO's
 * reward_model.overlong_buffer.*, with data.max_response_length as verl's
 * max_resp_len (verl recipe/dapo/main_dapo.py passes the same key), and the
 * built-in scorers' custom_reward_function.reward_kwargs.*.
 */
#include "workers/worker_internal.h"

#include <string.h>

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
    const df_train_config *t = &w->global.cfg;
    const struct df_train_reward_model_overlong_buffer *ob = &t->reward_model.overlong_buffer;
    w->reward.cfg.manager = t->reward_model.reward_manager;
    w->reward.cfg.max_resp_len = t->data.max_response_length;
    w->reward.cfg.overlong_buffer = (df_overlong_buffer_cfg){
        .enable = ob->enable, .len = ob->len, .penalty_factor = ob->penalty_factor, .log = ob->log};
    const struct df_train_custom_reward_function_reward_kwargs *kw = &t->custom_reward_function.reward_kwargs;
    w->reward.kwargs = (df_reward_kwargs){.method = kw->method,
                                          .format_score = kw->format_score,
                                          .score = kw->score,
                                          .last_match = !strcmp(kw->gsm8k_match, "last"),
                                          .strict_box_verify = kw->strict_box_verify};
    w->reward.cfg.kwargs = &w->reward.kwargs;
    int rc = df_reward_manager_check(&w->reward.cfg);
    const char *key = rc ? key_at_fault(&w->reward.cfg, rc) : NULL;
    return rc ? df_error_wrap(rc, "%s (%s)", key, df_config_where(w->cfg, key)) : DF_OK;
}
