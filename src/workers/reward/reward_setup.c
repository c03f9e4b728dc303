/*
 * The DAG worker's reward manager settings from the config:
 * reward_model.reward_manager (naive | dapo) and DAPO's
 * reward_model.overlong_buffer.*, with data.max_response_length as verl's
 * max_resp_len (verl recipe/dapo/main_dapo.py passes the same key), the built-in scorers'
 * custom_reward_function.reward_kwargs.*; and with reward_model.enable the reward model of the
 * reward node (verl's RewardModelWorker init_model: its model, its tokenizer when it
 * re-templates, its micro-batching).
 */
#include "workers/worker_internal.h"

#include "distflow/backend.h"
#include "util/fsutil.h"
#include "workers/common/precision.h"

#include <stdlib.h>
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

/* ---- reward_model.enable: the reward model of the reward node ---------------------------- */

#define RM "reward_model."

/* Whether w's graph has a node of the REWARD role (the reward node runs on this rank). */
static bool has_reward_node(const df_dag_worker *w)
{
    for (int i = 0; w->graph && i < df_task_graph_num_nodes(w->graph); i++)
        if (df_task_graph_node_at(w->graph, i)->node_role == DF_ROLE_REWARD)
            return true;
    return false;
}

/* reward_model.model.input_tokenizer: the actor's tokenizer when it names the actor's model or
   tokenizer directory, else loaded from its own directory. */
static int load_input_tokenizer(df_dag_worker *w, const char *path, const df_tokenizer **out)
{
    char *dir = df_expand_user(path);
    if (!dir)
        return df_error(DF_ENOMEM, "out of memory");
    int rc = DF_OK;
    if (!strcmp(dir, w->model_dir) || !strcmp(dir, w->tokenizer_dir))
        *out = w->tok;
    else if (!(rc = df_tokenizer_load(dir, &w->reward.input_tok)))
        *out = w->reward.input_tok;
    free(dir);
    const char *key = RM "model.input_tokenizer";
    return rc ? df_error_wrap(rc, "%s: %s", df_config_where(w->cfg, key), key) : DF_OK;
}

/* The model (and, when re-templating, its tokenizer) of reward_model.model.path. */
static int load_reward_model(df_dag_worker *w, bool retemplate)
{
    const struct df_train_reward_model *k = &w->global.cfg.reward_model;
    /* one of the two limits, as verl's compute_rm_score (df_config_validate_train checked it is set) */
    bool dyn = k->use_dynamic_bsz;
    df_reward_model_params p = {
        .micro_batch_size = !dyn && k->micro_batch_size_per_gpu.set ? k->micro_batch_size_per_gpu.v : 0,
        .max_token_len = dyn ? k->forward_max_token_len_per_gpu : 0,
        /* verl's reward model is bf16; where this machine has no bf16 kernels: a notice, float32 */
        .bf16 = df_role_compute_bf16(RM "model.fsdp_config.mixed_precision.param_dtype",
                                     k->model.fsdp_config.mixed_precision.param_dtype,
                                     w->global.cfg.trainer.device, w->rank == 0)};
    char *dir = df_expand_user(k->model.path);
    if (!dir)
        return df_error(DF_ENOMEM, "out of memory");
    int rc = df_reward_model_load(dir, &p, &w->reward.rm);
    if (!rc && retemplate)
        rc = df_tokenizer_load(dir, &w->reward.rm_tok);
    df_backend be; /* trainer.device, as the actor's */
    if (!rc && ((rc = df_backend_open(w->global.cfg.trainer.device, &be)) ||
                (rc = df_reward_model_set_backend(w->reward.rm, &be))))
        rc = df_error_wrap(rc, "%s", df_config_where(w->cfg, "trainer.device"));
    free(dir);
    return rc ? df_error_wrap(rc, "%s: " RM "model.path", df_config_where(w->cfg, RM "model.path")) : DF_OK;
}

int df_worker_setup_reward_model(df_dag_worker *w)
{
    const df_train_config *t = &w->global.cfg;
    const struct df_train_reward_model *k = &t->reward_model;
    if (!k->enable || !has_reward_node(w))
        return DF_OK;
    const char *in = k->model.input_tokenizer;
    df_rm_scorer *s = &w->reward.scorer;
    int rc = load_reward_model(w, in != NULL);
    if (!rc && in)
        rc = load_input_tokenizer(w, in, &s->input_tok);
    if (rc)
        return rc;
    s->model = w->reward.rm;
    s->rm_tok = w->reward.rm_tok;
    /* verl: max_length, else the prompt + response length the actor's batch is padded to */
    s->max_length = k->max_length.set ? k->max_length.v : t->data.max_prompt_length + t->data.max_response_length;
    int64_t vocab = df_reward_model_model(w->reward.rm)->cfg.vocab_size, ids = df_tokenizer_vocab_size(w->tok);
    if (!in && vocab < ids)
        return df_error(DF_EINVAL,
                        "%s: " RM "model.input_tokenizer is null, so the reward model reads the actor's token ids, "
                        "but its vocab_size %lld is below the actor tokenizer's %lld ids: set input_tokenizer to "
                        "re-template the responses with the reward model's own tokenizer",
                        df_config_where(w->cfg, RM "model.input_tokenizer"), (long long)vocab, (long long)ids);
    return DF_OK;
}

void df_worker_free_reward(df_dag_worker *w)
{
    df_reward_model_free(w->reward.rm);
    df_reward_python_close(w->reward.cfg.python);
    w->reward.cfg.python = NULL;
    df_tokenizer_free(w->reward.rm_tok);
    df_tokenizer_free(w->reward.input_tok);
    memset(&w->reward.scorer, 0, sizeof w->reward.scorer);
    w->reward.rm = NULL, w->reward.rm_tok = w->reward.input_tok = NULL;
}
