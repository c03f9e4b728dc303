/*
 * Cross-field checks of a loaded `train` config (df_config_validate_train).
 *
 * The schema checks each value alone (type, bounds, choices); this file checks
 * what only holds between keys, as verl's RayPPOTrainer._validate_config /
 * check_mutually_exclusive and the FSDP workers' batch normalisation do, plus
 * what distflow's own data-parallel layout needs (the data loader hands every
 * rank train_batch_size / world prompts). The first violated rule is reported;
 * its message names every key involved with its value and origin and says why.
 */
#include "config/config_internal.h"

#include "distflow/algo.h"
#include "distflow/algo_desc.h"
#include "distflow/reward.h"
#include "util/warn.h"

#include <stdio.h>
#include <string.h>

#define ARR "actor_rollout_ref."
#define ACTOR ARR "actor."
#define ROLLOUT ARR "rollout."
#define REF ARR "ref."

/* "key=value (where)" for messages, written into b (KV_CAP bytes). */
#define KV_CAP 256
static const char *kv(const df_config *c, const char *key, char *b)
{
    const df_config_entry *e = df_config_schema_find(df_config_get_schema(c), key);
    const char *where = df_config_where(c, key);
    if (df_config_is_null(c, key))
        snprintf(b, KV_CAP, "%s=null (%s)", key, where);
    else if (e->type == DF_CFG_INT)
        snprintf(b, KV_CAP, "%s=%lld (%s)", key, (long long)df_config_int(c, key), where);
    else if (e->type == DF_CFG_FLOAT)
        snprintf(b, KV_CAP, "%s=%g (%s)", key, df_config_float(c, key), where);
    else if (e->type == DF_CFG_BOOL)
        snprintf(b, KV_CAP, "%s=%s (%s)", key, df_config_bool(c, key) ? "true" : "false", where);
    else if (e->type == DF_CFG_STR)
        snprintf(b, KV_CAP, "%s='%s' (%s)", key, df_config_str(c, key), where);
    else
        snprintf(b, KV_CAP, "%s (%s)", key, where);
    return b;
}

/* Set by the user: neither the schema's default nor derived from another key (forward_micro_batch_size_per_gpu
   inherits ppo_micro_batch_size_per_gpu). */
static bool user_set(const df_config *c, const char *key)
{
    const char *where = df_config_where(c, key);
    return strcmp(where, "default") && strncmp(where, "derived from ", 13);
}

/* verl's check_mutually_exclusive, adapted: distflow reads only the per-GPU
 * key, so the deprecated global one is refused whether or not both are set. */
static int check_micro(const df_config *c, const char *global, const char *per_gpu, bool dynamic, int world)
{
    char kb[3][KV_CAP];
    if (!df_config_is_null(c, global)) {
        if (user_set(c, per_gpu) && !df_config_is_null(c, per_gpu))
            return df_error(DF_EINVAL,
                            "%s and %s are mutually exclusive: set only %s (the global one is deprecated, as in verl)",
                            kv(c, global, kb[0]), kv(c, per_gpu, kb[1]), per_gpu);
        int64_t g = df_config_int(c, global);
        return df_error(DF_EINVAL,
                        "%s is deprecated and not read by distflow: set %s=%lld instead (%lld / %d ranks)",
                        kv(c, global, kb[0]), per_gpu, (long long)(g / world > 0 ? g / world : 1), (long long)g, world);
    }
    if (!dynamic && df_config_is_null(c, per_gpu))
        return df_error(DF_EINVAL, "%s: set a micro-batch size (or enable dynamic batch size by tokens)",
                        kv(c, per_gpu, kb[0]));
    return DF_OK;
}

/* Mini-batch rules of an actor or critic: verl's train_batch_size >=
 * ppo_mini_batch_size, and the FSDP worker's normalisation mini * n / world
 * (which must be exact) divisible by the micro-batch. */
static int check_mini(const df_config *c, const char *mini_key, const char *micro_key, bool dynamic, int world)
{
    char kb[3][KV_CAP];
    int64_t tbs = df_config_int(c, "data.train_batch_size");
    int64_t n = df_config_int(c, ROLLOUT "n");
    int64_t mini = df_config_int(c, mini_key);
    if (mini > tbs)
        return df_error(DF_EINVAL,
                        "%s exceeds %s: a mini-batch cannot hold more prompts than a training step has "
                        "(%lld x rollout.n %lld = %lld samples > %lld)",
                        kv(c, mini_key, kb[0]), kv(c, "data.train_batch_size", kb[1]), (long long)mini, (long long)n,
                        (long long)(mini * n), (long long)(tbs * n));
    if ((mini * n) % world)
        return df_error(DF_EINVAL,
                        "%s x %s = %lld samples per mini-batch is not divisible by the %d data-parallel ranks",
                        kv(c, mini_key, kb[0]), kv(c, ROLLOUT "n", kb[1]), (long long)(mini * n), world);
    int64_t per_rank = mini * n / world;
    if (!dynamic && !df_config_is_null(c, micro_key) && per_rank % df_config_int(c, micro_key))
        return df_error(DF_EINVAL,
                        "%s does not divide the per-rank mini-batch of %lld samples (%s x rollout.n=%lld / %d ranks); "
                        "gradient accumulation needs whole micro-batches",
                        kv(c, micro_key, kb[0]), (long long)per_rank, kv(c, mini_key, kb[1]), (long long)n, world);
    return DF_OK;
}

static int check_batches(const df_config *c, int world)
{
    char kb[3][KV_CAP];
    int64_t tbs = df_config_int(c, "data.train_batch_size");
    if (tbs % world)
        return df_error(DF_EINVAL,
                        "%s is not divisible by the %d data-parallel ranks: each rank loads "
                        "train_batch_size / world prompts (verl only needs train_batch_size x rollout.n "
                        "divisible; distflow partitions prompts so that groups stay on one rank)",
                        kv(c, "data.train_batch_size", kb[0]), world);
    bool dyn = df_config_bool(c, ACTOR "use_dynamic_bsz");
    int rc = check_micro(c, ACTOR "ppo_micro_batch_size", ACTOR "ppo_micro_batch_size_per_gpu", dyn, world);
    if (!rc)
        rc = check_micro(c, ROLLOUT "log_prob_micro_batch_size", ROLLOUT "log_prob_micro_batch_size_per_gpu",
                         df_config_bool(c, ROLLOUT "log_prob_use_dynamic_bsz"), world);
    bool ref = df_config_bool(c, ACTOR "use_kl_loss") || df_config_bool(c, "algorithm.use_kl_in_reward");
    if (!rc && ref) /* the reference policy runs only for a KL term */
        rc = check_micro(c, REF "log_prob_micro_batch_size", REF "log_prob_micro_batch_size_per_gpu",
                         df_config_bool(c, REF "log_prob_use_dynamic_bsz"), world);
    if (!rc)
        rc = check_mini(c, ACTOR "ppo_mini_batch_size", ACTOR "ppo_micro_batch_size_per_gpu", dyn, world);
    if (rc)
        return rc;
    /* one sequence must fit one micro-batch's token budget */
    int64_t seq = df_config_int(c, ROLLOUT "prompt_length") + df_config_int(c, ROLLOUT "response_length");
    if (dyn && df_config_int(c, ACTOR "ppo_max_token_len_per_gpu") < seq)
        return df_error(DF_EINVAL,
                        "%s is smaller than one sequence (%s + %s = %lld tokens): no micro-batch could hold it",
                        kv(c, ACTOR "ppo_max_token_len_per_gpu", kb[0]), kv(c, ROLLOUT "prompt_length", kb[1]),
                        kv(c, ROLLOUT "response_length", kb[2]), (long long)seq);
    if (!df_config_is_null(c, ROLLOUT "max_model_len") && df_config_int(c, ROLLOUT "max_model_len") < seq)
        return df_error(DF_EINVAL, "%s is shorter than %s + %s = %lld tokens", kv(c, ROLLOUT "max_model_len", kb[0]),
                        kv(c, ROLLOUT "prompt_length", kb[1]), kv(c, ROLLOUT "response_length", kb[2]), (long long)seq);
    return DF_OK;
}

/* An estimator that needs values needs a critic (verl: use_critic when adv_estimator is gae). */
static int check_critic(const df_config *c, int world)
{
    char kb[3][KV_CAP];
    const df_adv_estimator_desc *d = df_adv_estimator_find(df_config_str(c, "algorithm.adv_estimator"));
    if (!d || !(d->needs & DF_ADV_NEEDS_VALUES))
        return DF_OK;
    bool dyn = df_config_bool(c, "critic.use_dynamic_bsz");
    int rc = check_micro(c, "critic.ppo_micro_batch_size", "critic.ppo_micro_batch_size_per_gpu", dyn, world);
    if (!rc)
        rc = check_micro(c, "critic.forward_micro_batch_size", "critic.forward_micro_batch_size_per_gpu", dyn, world);
    if (rc)
        return df_error_wrap(rc, "%s needs a critic", kv(c, "algorithm.adv_estimator", kb[0]));
    rc = check_mini(c, "critic.ppo_mini_batch_size", "critic.ppo_micro_batch_size_per_gpu", dyn, world);
    return rc ? df_error_wrap(rc, "%s needs a critic", kv(c, "algorithm.adv_estimator", kb[0])) : DF_OK;
}

/* Names the algorithm registries must know; the registries' own messages list the known names. */
static int check_algorithm(const df_config *c)
{
    char kb[3][KV_CAP];
    const char *adv = df_config_str(c, "algorithm.adv_estimator");
    const df_adv_estimator_desc *desc = df_adv_estimator_find(adv);
    if (desc && (desc->needs & DF_ADV_NEEDS_GROUPS) && df_config_int(c, ROLLOUT "n") < 2)
        return df_error(DF_EINVAL,
                        "%s needs %s > 1: its baseline is taken from the other responses to the same "
                        "prompt (with one response there is none)",
                        kv(c, "algorithm.adv_estimator", kb[0]), kv(c, ROLLOUT "n", kb[1]));
    if (df_config_bool(c, "algorithm.filter_groups.enable") && df_config_int(c, ROLLOUT "n") < 2)
        return df_error(DF_EINVAL, "%s needs %s > 1: a group of one response has no variance to filter on",
                        kv(c, "algorithm.filter_groups.enable", kb[0]), kv(c, ROLLOUT "n", kb[1]));
    if (!desc && df_adv_estimator_get(adv, &desc))
        return df_error_wrap(DF_EINVAL, "%s", kv(c, "algorithm.adv_estimator", kb[0]));
    df_policy_loss_fn pl;
    if (df_policy_loss_lookup(df_config_str(c, ACTOR "policy_loss.loss_mode"), &pl))
        return df_error_wrap(DF_EINVAL, "%s", kv(c, ACTOR "policy_loss.loss_mode", kb[0]));
    int64_t off[1] = {0};
    if (df_loss_agg_weights_ex(df_config_str(c, ACTOR "loss_agg_mode"), 0, off, 1, 1, 1, NULL))
        return df_error_wrap(DF_EINVAL, "%s", kv(c, ACTOR "loss_agg_mode", kb[0]));
    if (df_config_bool(c, ACTOR "use_kl_loss") && df_kl_penalty(df_config_str(c, ACTOR "kl_loss_type"), 0, NULL,
                                                                 NULL, NULL, NULL))
        return df_error_wrap(DF_EINVAL, "%s", kv(c, ACTOR "kl_loss_type", kb[0]));
    if (df_config_bool(c, "algorithm.use_kl_in_reward") &&
        df_kl_penalty(df_config_str(c, "algorithm.kl_penalty"), 0, NULL, NULL, NULL, NULL))
        return df_error_wrap(DF_EINVAL, "%s", kv(c, "algorithm.kl_penalty", kb[0]));
    df_reward_manager_cfg rm = {.manager = df_config_str(c, "reward_model.reward_manager")};
    if (df_reward_manager_check(&rm))
        return df_error_wrap(DF_EINVAL, "%s", kv(c, "reward_model.reward_manager", kb[0]));
    df_kl_ctrl *kc = NULL; /* the controller's own checks (adaptive needs target_kl > 0, ...) */
    if (df_config_bool(c, "algorithm.use_kl_in_reward") &&
        df_kl_ctrl_create(df_config_str(c, "algorithm.kl_ctrl.type"), df_config_float(c, "algorithm.kl_ctrl.kl_coef"),
                          df_config_float(c, "algorithm.kl_ctrl.target_kl"),
                          df_config_float(c, "algorithm.kl_ctrl.horizon"), &kc))
        return df_error_wrap(DF_EINVAL, "%s, %s, %s", kv(c, "algorithm.kl_ctrl.type", kb[0]),
                             kv(c, "algorithm.kl_ctrl.kl_coef", kb[1]), kv(c, "algorithm.kl_ctrl.target_kl", kb[2]));
    df_kl_ctrl_free(kc);
    return DF_OK;
}

static int check_clip(const df_config *c)
{
    char kb[3][KV_CAP];
    static const char *const nonneg[] = {ACTOR "clip_ratio_low", ACTOR "clip_ratio_high"};
    for (size_t i = 0; i < 2; i++)
        if (df_config_float(c, nonneg[i]) < 0)
            return df_error(DF_EINVAL, "%s must be >= 0", kv(c, nonneg[i], kb[0]));
    if (df_config_float(c, ACTOR "clip_ratio_c") <= 1.0)
        return df_error(DF_EINVAL,
                        "%s must be > 1: dual-clip PPO bounds the loss of negative-advantage tokens "
                        "at clip_ratio_c x |A|, a bound above 1 (Ye et al. 2019; verl asserts it)",
                        kv(c, ACTOR "clip_ratio_c", kb[0]));
    return DF_OK;
}

static int check_sampling(const df_config *c)
{
    char kb[3][KV_CAP];
#define VK ROLLOUT "val_kwargs."
    bool sample = df_config_bool(c, VK "do_sample");
    if (sample && df_config_float(c, VK "temperature") <= 0)
        return df_error(DF_EINVAL, "%s needs %s > 0 (verl: validation temperature must be > 0 when sampling)",
                        kv(c, VK "do_sample", kb[0]), kv(c, VK "temperature", kb[1]));
    if (!sample && df_config_int(c, VK "n") > 1)
        return df_error(DF_EINVAL, "%s with %s: the %lld greedy responses per prompt would be identical",
                        kv(c, VK "n", kb[0]), kv(c, VK "do_sample", kb[1]), (long long)df_config_int(c, VK "n"));
#undef VK
    return DF_OK;
}

/* Valid settings that are probably not what the user meant (see df_config_validate_train_ex). */
static void warn_suspicious(const df_config *c, df_warn_fn warn, void *user)
{
    char kb[3][KV_CAP];
    const df_policy_loss_desc *loss = df_policy_loss_find(df_config_str(c, ACTOR "policy_loss.loss_mode"));
    if (loss && loss->loss_agg_mode && strcmp(df_config_str(c, ACTOR "loss_agg_mode"), loss->loss_agg_mode))
        df_warnf(warn, user, "%s with %s: the loss's objective is defined with loss_agg_mode=%s (%s)",
                 kv(c, ACTOR "policy_loss.loss_mode", kb[0]), kv(c, ACTOR "loss_agg_mode", kb[1]),
                 loss->loss_agg_mode, loss->summary ? loss->summary : "its descriptor");
    const char *manager = df_config_str(c, "reward_model.reward_manager");
    bool dapo = !strcmp(manager, "dapo");
    if (df_config_bool(c, "reward_model.overlong_buffer.enable") && !strcmp(manager, "naive"))
        df_warnf(warn, user,
                 "%s has no effect with %s: only the dapo reward manager applies the overlong "
                 "penalty",
                 kv(c, "reward_model.overlong_buffer.enable", kb[0]),
                 kv(c, "reward_model.reward_manager", kb[1]));
    if (dapo && df_config_bool(c, "reward_model.overlong_buffer.enable") &&
        df_config_int(c, "reward_model.overlong_buffer.len") >= df_config_int(c, "data.max_response_length"))
        df_warnf(warn, user,
                 "%s is not below %s: the penalty ramp starts at 0 tokens or below, so every "
                 "response is penalised",
                 kv(c, "reward_model.overlong_buffer.len", kb[0]), kv(c, "data.max_response_length", kb[1]));
    if (df_config_bool(c, ACTOR "use_kl_loss") && df_config_bool(c, "algorithm.use_kl_in_reward"))
        df_warnf(warn, user,
                 "%s and %s both penalise KL to the reference policy, counting it twice (verl "
                 "prints the same notice)",
                 kv(c, ACTOR "use_kl_loss", kb[0]), kv(c, "algorithm.use_kl_in_reward", kb[1]));
    const char *kw = df_config_map_text(c, "reward_model.reward_kwargs");
    if (kw && strcmp(kw, "{}"))
        df_warnf(
            warn, user,
            "%s is not read by distflow: set the overlong buffer with reward_model.overlong_buffer.* and "
            "max_resp_len with data.max_response_length (siiRL's keys)",
            kv(c, "reward_model.reward_kwargs", kb[0]));
}

int df_config_validate_train(const df_config *c, int world_size)
{
    return df_config_validate_train_ex(c, world_size, NULL, NULL);
}

int df_config_validate_train_ex(const df_config *c, int world_size, df_warn_fn warn, void *user)
{
    if (!c || strcmp(df_config_schema_name(df_config_get_schema(c)), "train"))
        return df_error(DF_EINVAL, "df_config_validate_train: not a train config");
    if (world_size < 1)
        return df_error(DF_EINVAL, "df_config_validate_train: world size must be >= 1, got %d", world_size);
    if (warn)
        warn_suspicious(c, warn, user);
    int rc = check_batches(c, world_size);
    if (!rc)
        rc = check_critic(c, world_size);
    if (!rc)
        rc = check_algorithm(c);
    if (!rc)
        rc = check_clip(c);
    if (!rc)
        rc = check_sampling(c);
    return rc;
}
