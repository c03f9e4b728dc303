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
#include "distflow/train_config.h"
#include "util/warn.h"

#include <stdio.h>
#include <string.h>

#define ARR "actor_rollout_ref."
#define ACTOR ARR "actor."
#define ROLLOUT ARR "rollout."
#define REF ARR "ref."

/* "key=value (where)" for messages, written into b (KV_CAP bytes): the loaded value and its
   provenance, read from the config's slot (the checks themselves read the typed struct). */
#define KV_CAP 256
static const char *kv(const df_config *c, const char *key, char *b)
{
    int i = cfg_find(c->schema, key);
    if (i < 0) { /* a programming error: every caller names a key of the table */
        snprintf(b, KV_CAP, "%s", key);
        return b;
    }
    const df_config_entry *e = &c->schema->entries[i];
    const cfg_value *v = &c->slots[i].v;
    const char *where = c->slots[i].where;
    if (v->is_null)
        snprintf(b, KV_CAP, "%s=null (%s)", key, where);
    else if (e->type == DF_CFG_INT)
        snprintf(b, KV_CAP, "%s=%lld (%s)", key, (long long)v->i, where);
    else if (e->type == DF_CFG_FLOAT)
        snprintf(b, KV_CAP, "%s=%g (%s)", key, v->f, where);
    else if (e->type == DF_CFG_BOOL)
        snprintf(b, KV_CAP, "%s=%s (%s)", key, v->b ? "true" : "false", where);
    else if (e->type == DF_CFG_STR)
        snprintf(b, KV_CAP, "%s='%s' (%s)", key, v->s, where);
    else
        snprintf(b, KV_CAP, "%s (%s)", key, where);
    return b;
}

/* Set by the user: neither the schema's default nor derived from another key (forward_micro_batch_size_per_gpu
   inherits ppo_micro_batch_size_per_gpu). */
static bool user_set(const df_config *c, const char *key)
{
    int i = cfg_find(c->schema, key);
    return i >= 0 && cfg_slot_user_set(&c->slots[i]);
}


/* verl's check_mutually_exclusive, adapted: distflow reads only the per-GPU
 * key, so the deprecated global one is refused whether or not both are set. */
static int check_micro(const df_config *c, const char *global, df_config_opt_int g_val, const char *per_gpu,
                       df_config_opt_int per_gpu_val, bool dynamic, int world)
{
    char kb[3][KV_CAP];
    if (g_val.set) {
        if (user_set(c, per_gpu) && per_gpu_val.set)
            return df_error(DF_EINVAL,
                            "%s and %s are mutually exclusive: set only %s (the global one is deprecated, as in verl)",
                            kv(c, global, kb[0]), kv(c, per_gpu, kb[1]), per_gpu);
        int64_t g = g_val.v;
        return df_error(DF_EINVAL,
                        "%s is deprecated and not read by distflow: set %s=%lld instead (%lld / %d ranks)",
                        kv(c, global, kb[0]), per_gpu, (long long)(g / world > 0 ? g / world : 1), (long long)g, world);
    }
    if (!dynamic && !per_gpu_val.set)
        return df_error(DF_EINVAL, "%s: set a micro-batch size (or enable dynamic batch size by tokens)",
                        kv(c, per_gpu, kb[0]));
    return DF_OK;
}

/* Mini-batch rules of an actor or critic: verl's train_batch_size >=
 * ppo_mini_batch_size, and the FSDP worker's normalisation mini * n / world
 * (which must be exact) divisible by the micro-batch. */
static int check_mini(const df_config *c, const df_train_config *t, const char *mini_key, int64_t mini,
                      const char *micro_key, df_config_opt_int micro, bool dynamic, int world)
{
    char kb[3][KV_CAP];
    int64_t tbs = t->data.train_batch_size;
    int64_t n = t->actor_rollout_ref.rollout.n;
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
    if (!dynamic && micro.set && per_rank % micro.v)
        return df_error(DF_EINVAL,
                        "%s does not divide the per-rank mini-batch of %lld samples (%s x rollout.n=%lld / %d ranks); "
                        "gradient accumulation needs whole micro-batches",
                        kv(c, micro_key, kb[0]), (long long)per_rank, kv(c, mini_key, kb[1]), (long long)n, world);
    return DF_OK;
}

/*
 * data.gen_batch_size, the dataloader's batch (verl's DAPO trainer): only dynamic sampling cuts a
 * generation batch to train_batch_size (verl would train on the whole gen batch: the actor's
 * mini-batches are sized for train_batch_size here), and mode=async counts its refills in groups
 * of the train batch. Below train_batch_size it means more rounds, as in verl.
 */
static int check_gen_batch(const df_config *c, const df_train_config *t, int world)
{
    char kb[3][KV_CAP];
    int64_t gbs = t->data.gen_batch_size, tbs = t->data.train_batch_size;
    if (gbs % world)
        return df_error(DF_EINVAL,
                        "%s is not divisible by the %d data-parallel ranks: each rank loads gen_batch_size / world "
                        "prompts a generation round",
                        kv(c, "data.gen_batch_size", kb[0]), world);
    if (gbs == tbs)
        return DF_OK;
    if (!t->algorithm.filter_groups.enable)
        return df_error(DF_EINVAL,
                        "%s differs from %s with %s: only DAPO's dynamic sampling cuts a generation batch to the "
                        "train batch (without it verl trains on all %lld prompts); set algorithm.filter_groups."
                        "enable=true or leave data.gen_batch_size unset",
                        kv(c, "data.gen_batch_size", kb[0]), kv(c, "data.train_batch_size", kb[1]),
                        kv(c, "algorithm.filter_groups.enable", kb[2]), (long long)gbs);
    if (!strcmp(t->actor_rollout_ref.rollout.mode, "async"))
        return df_error(DF_EINVAL,
                        "%s differs from %s with %s: the asynchronous runtime's batches and dynamic sampling's "
                        "refills are counted in train batches; leave data.gen_batch_size unset",
                        kv(c, "data.gen_batch_size", kb[0]), kv(c, "data.train_batch_size", kb[1]),
                        kv(c, ROLLOUT "mode", kb[2]));
    return DF_OK;
}

static int check_batches(const df_config *c, const df_train_config *t, int world)
{
    char kb[3][KV_CAP];
    const struct df_train_actor *a = &t->actor_rollout_ref.actor;
    const struct df_train_rollout *r = &t->actor_rollout_ref.rollout;
    const struct df_train_ref *rf = &t->actor_rollout_ref.ref;
    int64_t tbs = t->data.train_batch_size;
    if (tbs % world)
        return df_error(DF_EINVAL,
                        "%s is not divisible by the %d data-parallel ranks: each rank loads "
                        "train_batch_size / world prompts (verl only needs train_batch_size x rollout.n "
                        "divisible; distflow partitions prompts so that groups stay on one rank)",
                        kv(c, "data.train_batch_size", kb[0]), world);
    bool dyn = a->use_dynamic_bsz;
    int rc = check_gen_batch(c, t, world);
    if (!rc)
        rc = check_micro(c, ACTOR "ppo_micro_batch_size", a->ppo_micro_batch_size, ACTOR "ppo_micro_batch_size_per_gpu",
                         a->ppo_micro_batch_size_per_gpu, dyn, world);
    if (!rc)
        rc = check_micro(c, ROLLOUT "log_prob_micro_batch_size", r->log_prob_micro_batch_size,
                         ROLLOUT "log_prob_micro_batch_size_per_gpu", r->log_prob_micro_batch_size_per_gpu,
                         r->log_prob_use_dynamic_bsz, world);
    bool ref = a->use_kl_loss || t->algorithm.use_kl_in_reward;
    if (!rc && ref) /* the reference policy runs only for a KL term */
        rc = check_micro(c, REF "log_prob_micro_batch_size", rf->log_prob_micro_batch_size,
                         REF "log_prob_micro_batch_size_per_gpu", rf->log_prob_micro_batch_size_per_gpu,
                         rf->log_prob_use_dynamic_bsz, world);
    if (!rc)
        rc = check_mini(c, t, ACTOR "ppo_mini_batch_size", a->ppo_mini_batch_size, ACTOR "ppo_micro_batch_size_per_gpu",
                        a->ppo_micro_batch_size_per_gpu, dyn, world);
    if (rc)
        return rc;
    /* one sequence must fit one micro-batch's token budget */
    int64_t seq = r->prompt_length + r->response_length;
    if (dyn && a->ppo_max_token_len_per_gpu < seq)
        return df_error(DF_EINVAL,
                        "%s is smaller than one sequence (%s + %s = %lld tokens): no micro-batch could hold it",
                        kv(c, ACTOR "ppo_max_token_len_per_gpu", kb[0]), kv(c, ROLLOUT "prompt_length", kb[1]),
                        kv(c, ROLLOUT "response_length", kb[2]), (long long)seq);
    if (r->max_model_len.set && r->max_model_len.v < seq)
        return df_error(DF_EINVAL, "%s is shorter than %s + %s = %lld tokens", kv(c, ROLLOUT "max_model_len", kb[0]),
                        kv(c, ROLLOUT "prompt_length", kb[1]), kv(c, ROLLOUT "response_length", kb[2]), (long long)seq);
    return DF_OK;
}

/* An estimator that needs values needs a critic (verl: use_critic when adv_estimator is gae). */
static int check_critic(const df_config *c, const df_train_config *t, int world)
{
    char kb[3][KV_CAP];
    const struct df_train_critic *k = &t->critic;
    const df_adv_estimator_desc *d = df_adv_estimator_find(t->algorithm.adv_estimator);
    bool values = d && (d->needs & DF_ADV_NEEDS_VALUES);
    if (d && k->enable.set && k->enable.v != values) /* verl's need_critic: an explicit enable wins there */
        return df_error(DF_EUNSUPPORTED, "%s with %s: distflow trains a critic exactly when the estimator needs "
                        "values (gae, gae_marft); leave critic.enable null", kv(c, "critic.enable", kb[0]),
                        kv(c, "algorithm.adv_estimator", kb[1]));
    if (!values)
        return DF_OK;
    bool dyn = k->use_dynamic_bsz;
    int rc = check_micro(c, "critic.ppo_micro_batch_size", k->ppo_micro_batch_size, "critic.ppo_micro_batch_size_per_gpu",
                         k->ppo_micro_batch_size_per_gpu, dyn, world);
    if (!rc)
        rc = check_micro(c, "critic.forward_micro_batch_size", k->forward_micro_batch_size,
                         "critic.forward_micro_batch_size_per_gpu", k->forward_micro_batch_size_per_gpu, dyn, world);
    if (rc)
        return df_error_wrap(rc, "%s needs a critic", kv(c, "algorithm.adv_estimator", kb[0]));
    rc = check_mini(c, t, "critic.ppo_mini_batch_size", k->ppo_mini_batch_size, "critic.ppo_micro_batch_size_per_gpu",
                    k->ppo_micro_batch_size_per_gpu, dyn, world);
    return rc ? df_error_wrap(rc, "%s needs a critic", kv(c, "algorithm.adv_estimator", kb[0])) : DF_OK;
}

/* DAPO's filter metric: a built-in column, or a numeric key of a Python reward function's results
   (verl: any key of reward_extra_info), which only a .py custom_reward_function gives. */
static int check_filter_metric(const df_config *c, const df_train_config *t)
{
    const struct df_train_algorithm_filter_groups *fg = &t->algorithm.filter_groups;
    static const char *const builtin[] = {"acc", "score", "seq_reward", "seq_final_reward"};
    for (int i = 0; i < 4; i++)
        if (!strcmp(fg->metric, builtin[i]))
            return DF_OK;
    if (!fg->enable || df_reward_python_file(t->custom_reward_function.path))
        return DF_OK;
    char kb[2][KV_CAP];
    return df_error(DF_EINVAL, "%s: expected acc, score, seq_reward or seq_final_reward; another name is a "
                               "numeric key of a Python reward function's results, and %s is not a .py file",
                    kv(c, "algorithm.filter_groups.metric", kb[0]), kv(c, "custom_reward_function.path", kb[1]));
}

/* reward_model.enable: the reward model's micro-batch size, as verl's RewardModelWorker reads it. */
static int check_reward_model(const df_config *c, const df_train_config *t, int world)
{
    const struct df_train_reward_model *k = &t->reward_model;
    if (!k->enable)
        return DF_OK;
    char kb[2][KV_CAP];
    int rc = check_micro(c, "reward_model.micro_batch_size", k->micro_batch_size,
                         "reward_model.micro_batch_size_per_gpu", k->micro_batch_size_per_gpu, k->use_dynamic_bsz,
                         world);
    if (rc)
        return df_error_wrap(rc, "%s", kv(c, "reward_model.enable", kb[0]));
    /* verl's managers return rm_scores without reward_extra_info: no acc to filter on */
    const struct df_train_algorithm_filter_groups *fg = &t->algorithm.filter_groups;
    if (fg->enable && !strcmp(fg->metric, "acc"))
        return df_error(DF_EINVAL, "%s with %s: a reward model gives no acc; filter on score or seq_reward",
                        kv(c, "algorithm.filter_groups.metric", kb[0]), kv(c, "reward_model.enable", kb[1]));
    return DF_OK;
}

/* Names the algorithm registries must know; the registries' own messages list the known names. */
static int check_algorithm(const df_config *c, const df_train_config *t)
{
    char kb[3][KV_CAP];
    const struct df_train_actor *a = &t->actor_rollout_ref.actor;
    const struct df_train_algorithm *alg = &t->algorithm;
    const char *adv = alg->adv_estimator;
    int64_t n = t->actor_rollout_ref.rollout.n;
    const df_adv_estimator_desc *desc = df_adv_estimator_find(adv);
    if (desc && (desc->needs & DF_ADV_NEEDS_GROUPS) && n < 2)
        return df_error(DF_EINVAL,
                        "%s needs %s > 1: its baseline is taken from the other responses to the same "
                        "prompt (with one response there is none)",
                        kv(c, "algorithm.adv_estimator", kb[0]), kv(c, ROLLOUT "n", kb[1]));
    if (alg->filter_groups.enable && n < 2)
        return df_error(DF_EINVAL, "%s needs %s > 1: a group of one response has no variance to filter on",
                        kv(c, "algorithm.filter_groups.enable", kb[0]), kv(c, ROLLOUT "n", kb[1]));
    if (!desc && df_adv_estimator_get(adv, &desc))
        return df_error_wrap(DF_EINVAL, "%s", kv(c, "algorithm.adv_estimator", kb[0]));
    if ((desc->needs & DF_ADV_NEEDS_SUM_PI_SQUARED) && !a->calculate_sum_pi_squared)
        return df_error(DF_EINVAL,
                        "%s weighs each token by the actor's sum of squared probabilities, which the "
                        "old-log-prob pass computes only with %s: set it to true (as verl requires)",
                        kv(c, "algorithm.adv_estimator", kb[0]),
                        kv(c, ACTOR "calculate_sum_pi_squared", kb[1]));
    df_policy_loss_fn pl;
    if (df_policy_loss_lookup(a->policy_loss.loss_mode, &pl))
        return df_error_wrap(DF_EINVAL, "%s", kv(c, ACTOR "policy_loss.loss_mode", kb[0]));
    if (pl == df_policy_loss_sapo && !(a->tau_pos > 0 && a->tau_neg > 0)) /* sapo divides by them */
        return df_error(DF_EINVAL, "%s with %s and %s: both temperatures must be > 0",
                        kv(c, ACTOR "policy_loss.loss_mode", kb[0]), kv(c, ACTOR "tau_pos", kb[1]),
                        kv(c, ACTOR "tau_neg", kb[2]));
    int64_t off[1] = {0};
    if (df_loss_agg_weights_ex(a->loss_agg_mode, 0, off, 1, 1, 1, NULL))
        return df_error_wrap(DF_EINVAL, "%s", kv(c, ACTOR "loss_agg_mode", kb[0]));
    if (a->use_kl_loss && df_kl_penalty(a->kl_loss_type, 0, NULL, NULL, NULL, NULL))
        return df_error_wrap(DF_EINVAL, "%s", kv(c, ACTOR "kl_loss_type", kb[0]));
    if (alg->use_kl_in_reward && df_kl_penalty(alg->kl_penalty, 0, NULL, NULL, NULL, NULL))
        return df_error_wrap(DF_EINVAL, "%s", kv(c, "algorithm.kl_penalty", kb[0]));
    df_reward_manager_cfg rm = {.manager = t->reward_model.reward_manager};
    if (df_reward_manager_check(&rm))
        return df_error_wrap(DF_EINVAL, "%s", kv(c, "reward_model.reward_manager", kb[0]));
    /* verl resamples only in its gae branch (compute_advantage); another estimator would ignore it */
    if (alg->use_pf_ppo && strcmp(adv, "gae"))
        return df_error(DF_EINVAL, "%s resamples the batch after GAE's advantages (verl applies it with gae "
                        "only); with %s it would do nothing: set algorithm.adv_estimator=gae or drop it",
                        kv(c, "algorithm.use_pf_ppo", kb[0]), kv(c, "algorithm.adv_estimator", kb[1]));
    df_kl_ctrl *kc = NULL; /* the controller's own checks (adaptive needs target_kl > 0, ...) */
    if (alg->use_kl_in_reward &&
        df_kl_ctrl_create(alg->kl_ctrl.type, alg->kl_ctrl.kl_coef, alg->kl_ctrl.target_kl, alg->kl_ctrl.horizon, &kc))
        return df_error_wrap(DF_EINVAL, "%s, %s, %s", kv(c, "algorithm.kl_ctrl.type", kb[0]),
                             kv(c, "algorithm.kl_ctrl.kl_coef", kb[1]), kv(c, "algorithm.kl_ctrl.target_kl", kb[2]));
    df_kl_ctrl_free(kc);
    return DF_OK;
}

static int check_clip(const df_config *c, const df_train_config *t)
{
    char kb[3][KV_CAP];
    const struct df_train_actor *a = &t->actor_rollout_ref.actor;
    static const char *const nonneg[] = {ACTOR "clip_ratio_low", ACTOR "clip_ratio_high"};
    const double nonneg_val[] = {a->clip_ratio_low, a->clip_ratio_high};
    for (size_t i = 0; i < 2; i++)
        if (nonneg_val[i] < 0)
            return df_error(DF_EINVAL, "%s must be >= 0", kv(c, nonneg[i], kb[0]));
    if (a->clip_ratio_c <= 1.0)
        return df_error(DF_EINVAL,
                        "%s must be > 1: dual-clip PPO bounds the loss of negative-advantage tokens "
                        "at clip_ratio_c x |A|, a bound above 1 (Ye et al. 2019; verl asserts it)",
                        kv(c, ACTOR "clip_ratio_c", kb[0]));
    return DF_OK;
}

/* The decoupled PPO objective (docs/async.md): its cap is read only with it, and TIS weights the
   same ratio exp(old - rollout) a second time. */
static int check_decoupled(const df_config *c, const df_train_config *t)
{
    char kb[2][KV_CAP];
    const struct df_train_actor *a = &t->actor_rollout_ref.actor;
    if (!a->use_decoupled_loss) {
        if (user_set(c, ACTOR "behav_imp_weight_cap"))
            return df_error(DF_EINVAL,
                            "%s has an effect only with use_decoupled_loss=true (now %s): set it as well, or "
                            "leave the cap unset",
                            kv(c, ACTOR "behav_imp_weight_cap", kb[0]), kv(c, ACTOR "use_decoupled_loss", kb[1]));
        return DF_OK;
    }
    if (a->tis_imp_ratio_cap > 0)
        return df_error(DF_EINVAL,
                        "%s with %s: both weight the policy loss by exp(old - rollout log-prob), the decoupled "
                        "objective dropping tokens above behav_imp_weight_cap, TIS truncating at its cap; set one",
                        kv(c, ACTOR "use_decoupled_loss", kb[0]), kv(c, ACTOR "tis_imp_ratio_cap", kb[1]));
    double cap = a->behav_imp_weight_cap;
    if (cap > 0 && cap <= 1)
        return df_error(DF_EINVAL,
                        "%s must be > 1 (or <= 0: no cap): a cap of 1 or less drops every token the trainer's "
                        "policy favours over the rollout's (AReaL requires > 1)",
                        kv(c, ACTOR "behav_imp_weight_cap", kb[0]));
    return DF_OK;
}

/* Router replay (docs/models.md): R3 replays what the rollout records, so the two go together (the
   synchronous and the asynchronous rollout record; the multi-agent and embodied ones do not); R2
   records in the old-log-prob pass, which bypass mode skips. (A model without experts is refused
   where the model is loaded.) */
static int check_router_replay(const df_config *c, const df_train_config *t)
{
    char kb[3][KV_CAP];
    const char *mode = t->actor_rollout_ref.actor.router_replay.mode;
    const bool r3 = !strcmp(mode, "R3"), rec = t->actor_rollout_ref.rollout.enable_rollout_routing_replay;
    if (r3 != rec)
        return df_error(DF_EINVAL, "%s with %s: R3 replays the experts the rollout records, and nothing else reads "
                        "them; set both or neither", kv(c, ACTOR "router_replay.mode", kb[0]),
                        kv(c, ROLLOUT "enable_rollout_routing_replay", kb[1]));
    if (r3 && (t->data.multi_agent || !strcmp(t->data.dataset_type, "embodied")))
        return df_error(DF_EUNSUPPORTED, "%s with %s and %s: only the single-agent language rollout records "
                        "routes", kv(c, ACTOR "router_replay.mode", kb[0]), kv(c, "data.multi_agent", kb[1]),
                        kv(c, "data.dataset_type", kb[2]));
    if (!strcmp(mode, "R2") && t->algorithm.rollout_correction.bypass_mode)
        return df_error(DF_EINVAL, "%s with %s: R2 records the routes in the old-log-prob pass, which bypass mode "
                        "skips; use R3", kv(c, ACTOR "router_replay.mode", kb[0]),
                        kv(c, "algorithm.rollout_correction.bypass_mode", kb[1]));
    return DF_OK;
}

#define RC "algorithm.rollout_correction."

/* A key of the rollout correction that acts only with another: refused when away from its default
   without it (verl's generated config spells every default out). */
static int rc_needs(const df_config *c, const char *key, bool changed, bool on, const char *needed)
{
    char kb[2][KV_CAP];
    if (on || !changed)
        return DF_OK;
    return df_error(DF_EINVAL, "%s has an effect only with %s (now %s): set it as well, or leave this key unset",
                    kv(c, key, kb[0]), needed, kv(c, needed, kb[1]));
}

/* What verl's bypass mode replaces or computes elsewhere: refused beside it. */
static int check_bypass(const df_config *c, const df_train_config *t)
{
    char kb[2][KV_CAP];
    const struct df_train_actor *a = &t->actor_rollout_ref.actor;
    const char *by = RC "bypass_mode";
    if (t->algorithm.rollout_correction.rollout_is_batch_normalize)
        return df_error(DF_EUNSUPPORTED,
                        "%s with %s: in bypass mode the weights are made in the loss per micro-batch, where "
                        "verl normalises them over the data-parallel ranks' micro-batches; distflow normalises "
                        "over the step batch in decoupled mode (bypass_mode false) only",
                        kv(c, by, kb[0]), kv(c, RC "rollout_is_batch_normalize", kb[1]));
    if (strcmp(a->policy_loss.loss_mode, "vanilla"))
        return df_error(DF_EINVAL,
                        "%s with %s: verl's bypass mode replaces the policy loss by its own (loss_type: "
                        "ppo_clip, the vanilla loss, or reinforce); set loss_mode vanilla",
                        kv(c, by, kb[0]), kv(c, ACTOR "policy_loss.loss_mode", kb[1]));
    const struct { const char *key; bool set; const char *why; } off[] = {
        {ACTOR "calculate_sum_pi_squared", a->calculate_sum_pi_squared, "needs the old-log-prob forward pass"},
        {ACTOR "tis_imp_ratio_cap", a->tis_imp_ratio_cap > 0, "would weigh by exp(old - rollout) = 1"},
        {ACTOR "use_decoupled_loss", a->use_decoupled_loss, "needs a proximal policy besides the rollout's"},
    };
    for (size_t i = 0; i < sizeof off / sizeof *off; i++)
        if (off[i].set)
            return df_error(DF_EINVAL, "%s with %s: the latter %s, and bypass mode takes the rollout's log-probs "
                                       "as old_log_probs", kv(c, by, kb[0]), kv(c, off[i].key, kb[1]), off[i].why);
    return DF_OK;
}

/* verl's rollout correction (docs/losses.md, "Rollout correction"). */
static int check_rollout_correction(const df_config *c, const df_train_config *t)
{
    char kb[2][KV_CAP];
    const struct df_train_algorithm_rollout_correction *co = &t->algorithm.rollout_correction;
    const struct df_train_actor *a = &t->actor_rollout_ref.actor;
    const bool is = co->rollout_is && *co->rollout_is, rs = co->rollout_rs && *co->rollout_rs;
    int rc = rc_needs(c, RC "rollout_is_threshold", co->rollout_is_threshold != 2.0, is, RC "rollout_is");
    if (!rc)
        rc = rc_needs(c, RC "rollout_is_batch_normalize", co->rollout_is_batch_normalize, is, RC "rollout_is");
    if (!rc)
        rc = rc_needs(c, RC "rollout_rs_threshold", co->rollout_rs_threshold != NULL, rs, RC "rollout_rs");
    if (!rc)
        rc = rc_needs(c, RC "loss_type", strcmp(co->loss_type, "ppo_clip") != 0, co->bypass_mode,
                      RC "bypass_mode");
    if (rc)
        return rc;
    if (is && !(co->rollout_is_threshold > 0))
        return df_error(DF_EINVAL, "%s must be > 0", kv(c, RC "rollout_is_threshold", kb[0]));
    df_rollout_rs parsed;
    if (rs && (rc = df_rollout_rs_parse(co->rollout_rs, co->rollout_rs_threshold, &parsed)))
        return df_error_wrap(rc, "%s, %s", kv(c, RC "rollout_rs", kb[0]), kv(c, RC "rollout_rs_threshold", kb[1]));
    const char *first = co->bypass_mode ? RC "bypass_mode" : is ? RC "rollout_is" : RC "rollout_rs";
    if ((is || rs || co->bypass_mode) && !strcmp(t->actor_rollout_ref.rollout.mode, "async"))
        return df_error(DF_EUNSUPPORTED, "%s with %s: the fully asynchronous trainer corrects for its stale "
                                         "rollouts with actor.use_decoupled_loss (docs/async.md)",
                        kv(c, first, kb[0]), kv(c, ROLLOUT "mode", kb[1]));
    if (co->bypass_mode)
        return check_bypass(c, t);
    if (!is && !rs)
        return DF_OK;
    const char *other = a->use_decoupled_loss ? ACTOR "use_decoupled_loss" : ACTOR "tis_imp_ratio_cap";
    if (a->tis_imp_ratio_cap > 0 || a->use_decoupled_loss)
        return df_error(DF_EINVAL, "%s with %s: both correct the policy loss for the rollout's log-probs; set one",
                        kv(c, first, kb[0]), kv(c, other, kb[1]));
    if (rs && !strcmp(t->algorithm.adv_estimator, "reinforce_plus_plus"))
        return df_error(DF_EUNSUPPORTED, "%s with %s: rejected tokens leave response_mask, and reinforce_plus_plus "
                                         "discounts its return over every response token",
                        kv(c, RC "rollout_rs", kb[0]), kv(c, "algorithm.adv_estimator", kb[1]));
    return DF_OK;
}
#undef RC

static bool is_bf16(const char *dtype)
{
    return dtype && (!strcmp(dtype, "bf16") || !strcmp(dtype, "bfloat16"));
}

/* The fsdp_config dtypes: float32 master weights for the trained models, float32 gradient
   reductions and buffers everywhere, and a bf16-stored reference only where it computes in bf16
   (it keeps bf16 weights only, which only the bf16 matmuls read). */
static int check_dtypes(const df_config *c, const df_train_config *t)
{
    const struct df_train_actor_fsdp_config *a = &t->actor_rollout_ref.actor.fsdp_config;
    const struct df_train_ref_fsdp_config *r = &t->actor_rollout_ref.ref.fsdp_config;
    const struct df_train_critic_model_fsdp_config *k = &t->critic.model.fsdp_config;
    char b1[KV_CAP], b2[KV_CAP];
    const struct { const char *key, *v, *why; } f32[] = {
        {ACTOR "fsdp_config.model_dtype", a->model_dtype, "the actor keeps float32 master weights, gradients and AdamW state"},
        {"critic.model.fsdp_config.model_dtype", k->model_dtype, "the critic keeps float32 master weights, gradients and AdamW state"},
        {ACTOR "fsdp_config.mixed_precision.reduce_dtype", a->mixed_precision.reduce_dtype, "gradients are reduced in float32"},
        {REF "fsdp_config.mixed_precision.reduce_dtype", r->mixed_precision.reduce_dtype, "gradients are reduced in float32"},
        {"critic.model.fsdp_config.mixed_precision.reduce_dtype", k->mixed_precision.reduce_dtype, "gradients are reduced in float32"},
        {ACTOR "fsdp_config.mixed_precision.buffer_dtype", a->mixed_precision.buffer_dtype, "buffers (RoPE tables, norm statistics) are float32"},
        {REF "fsdp_config.mixed_precision.buffer_dtype", r->mixed_precision.buffer_dtype, "buffers (RoPE tables, norm statistics) are float32"},
        {"critic.model.fsdp_config.mixed_precision.buffer_dtype", k->mixed_precision.buffer_dtype, "buffers (RoPE tables, norm statistics) are float32"},
    };
    for (size_t i = 0; i < sizeof f32 / sizeof f32[0]; i++)
        if (is_bf16(f32[i].v))
            return df_error(DF_EUNSUPPORTED, "%s: only fp32 is supported (%s)", kv(c, f32[i].key, b1), f32[i].why);
    if (is_bf16(r->model_dtype) && !is_bf16(r->mixed_precision.param_dtype))
        return df_error(DF_EINVAL, "%s with %s: a reference stored in bf16 keeps only bfloat16 copies of its "
                        "matmul weights, which only bf16 matmuls read; compute in bf16 or store fp32",
                        kv(c, REF "fsdp_config.model_dtype", b1),
                        kv(c, REF "fsdp_config.mixed_precision.param_dtype", b2));
    return DF_OK;
}

static int check_sampling(const df_config *c, const df_train_config *t)
{
    char kb[3][KV_CAP];
    const struct df_train_rollout_val_kwargs *v = &t->actor_rollout_ref.rollout.val_kwargs;
#define VK ROLLOUT "val_kwargs."
    bool sample = v->do_sample;
    if (sample && v->temperature <= 0)
        return df_error(DF_EINVAL, "%s needs %s > 0 (verl: validation temperature must be > 0 when sampling)",
                        kv(c, VK "do_sample", kb[0]), kv(c, VK "temperature", kb[1]));
    if (!sample && v->n > 1)
        return df_error(DF_EINVAL, "%s with %s: the %lld greedy responses per prompt would be identical",
                        kv(c, VK "n", kb[0]), kv(c, VK "do_sample", kb[1]), (long long)v->n);
#undef VK
    const df_config_strs *stop = &t->actor_rollout_ref.rollout.stop;
    for (int i = 0; i < stop->n; i++) {
        size_t n = strlen(stop->items[i]);
        if (n < 1 || n > 256) /* the engine's DF_STOP_STR_MAX (distflow/rollout.h, a layer above) */
            return df_error(DF_EINVAL, "%s: stop string %d has %zu bytes; each must have 1 to 256",
                            kv(c, ROLLOUT "stop", kb[0]), i, n);
    }
    return DF_OK;
}

/* Valid settings that are probably not what the user meant (see df_config_validate_train_ex). */
static void warn_suspicious(const df_config *c, const df_train_config *t, df_warn_fn warn, void *user)
{
    char kb[3][KV_CAP];
    const struct df_train_actor *a = &t->actor_rollout_ref.actor;
    const struct df_train_reward_model *rm = &t->reward_model;
    const df_policy_loss_desc *loss = df_policy_loss_find(a->policy_loss.loss_mode);
    if (loss && loss->loss_agg_mode && strcmp(a->loss_agg_mode, loss->loss_agg_mode))
        df_warnf(warn, user,
                 "%s with %s: the policy term is aggregated with %s, the loss's own (verl forces it; %s); "
                 "loss_agg_mode aggregates the KL and entropy terms",
                 kv(c, ACTOR "policy_loss.loss_mode", kb[0]), kv(c, ACTOR "loss_agg_mode", kb[1]),
                 loss->loss_agg_mode, loss->summary ? loss->summary : "its descriptor");
    const char *manager = rm->reward_manager;
    bool dapo = !strcmp(manager, "dapo");
    if (rm->overlong_buffer.enable && !strcmp(manager, "naive"))
        df_warnf(warn, user,
                 "%s has no effect with %s: only the dapo reward manager applies the overlong "
                 "penalty",
                 kv(c, "reward_model.overlong_buffer.enable", kb[0]),
                 kv(c, "reward_model.reward_manager", kb[1]));
    if (dapo && rm->overlong_buffer.enable && rm->overlong_buffer.len >= t->data.max_response_length)
        df_warnf(warn, user,
                 "%s is not below %s: the penalty ramp starts at 0 tokens or below, so every "
                 "response is penalised",
                 kv(c, "reward_model.overlong_buffer.len", kb[0]), kv(c, "data.max_response_length", kb[1]));
    if (a->use_kl_loss && t->algorithm.use_kl_in_reward)
        df_warnf(warn, user,
                 "%s and %s both penalise KL to the reference policy, counting it twice (verl "
                 "prints the same notice)",
                 kv(c, ACTOR "use_kl_loss", kb[0]), kv(c, "algorithm.use_kl_in_reward", kb[1]));
    const char *kw = rm->reward_kwargs;
    bool prime = !strcmp(manager, "prime"), py = df_reward_python_file(t->custom_reward_function.path);
    if (kw && strcmp(kw, "{}") && prime && !py) /* the embodied manager and prime's pool read it */
        df_warnf(warn, user,
                 "%s has no effect: the prime reward manager's pool (num_processes, timeout) runs a Python "
                 "custom_reward_function; the built-in scorers and a library's function score as naive",
                 kv(c, "reward_model.reward_kwargs", kb[0]));
    else if (kw && strcmp(kw, "{}") && strcmp(manager, "embodied") && !prime)
        df_warnf(
            warn, user,
            "%s is not read by distflow: set the overlong buffer with reward_model.overlong_buffer.* and "
            "max_resp_len with data.max_response_length (siiRL's keys)",
            kv(c, "reward_model.reward_kwargs", kb[0]));
}

/* trainer.logger, tensorboard_dir and the actor's and critic's checkpoint contents (outputs.c). */
static int check_outputs(const df_config *c, const df_train_config *t)
{
    const df_config_list_ref contents[] = {
        {&t->actor_rollout_ref.actor.checkpoint.contents, ARR "actor.checkpoint.contents"},
        {&t->critic.checkpoint.contents, "critic.checkpoint.contents"},
        {&t->actor_rollout_ref.actor.checkpoint.save_contents, ARR "actor.checkpoint.save_contents"},
        {&t->actor_rollout_ref.actor.checkpoint.load_contents, ARR "actor.checkpoint.load_contents"},
        {&t->critic.checkpoint.save_contents, "critic.checkpoint.save_contents"},
        {&t->critic.checkpoint.load_contents, "critic.checkpoint.load_contents"}};
    return df_config_check_outputs(c, contents, (int)(sizeof contents / sizeof *contents));
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
    df_train_config t;
    int rc = df_train_config_resolve(c, &t);
    if (rc)
        return rc;
    rc = df_config_check_compat(c, warn, user);
    if (!rc && warn)
        warn_suspicious(c, &t, warn, user);
    if (!rc)
        rc = check_outputs(c, &t);
    if (!rc)
        rc = check_batches(c, &t, world_size);
    if (!rc)
        rc = check_critic(c, &t, world_size);
    if (!rc)
        rc = check_reward_model(c, &t, world_size);
    if (!rc)
        rc = check_filter_metric(c, &t);
    if (!rc)
        rc = check_algorithm(c, &t);
    if (!rc)
        rc = check_clip(c, &t);
    if (!rc)
        rc = check_decoupled(c, &t);
    if (!rc)
        rc = check_rollout_correction(c, &t);
    if (!rc)
        rc = check_router_replay(c, &t);
    if (!rc)
        rc = check_sampling(c, &t);
    if (!rc)
        rc = check_dtypes(c, &t);
    return rc;
}
