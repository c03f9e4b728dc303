/*
 * The embodied job's settings (embodied_worker.h): actor_rollout_ref.embodied.* resolved into the
 * environment class, its config and the policy's action-token tables, and the checks of a train
 * config that names embodied keys (what distflow runs of siiRL's embodied workload, and what it
 * refuses, docs/embodied.md).
 */
#include "workers/embodied/embodied_worker.h"

#include "distflow/dag.h"
#include "distflow/env.h"
#include "planner/dag_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define EMB "actor_rollout_ref.embodied."

bool df_embodied_enabled(const df_train_config *t) { return !strcmp(t->actor_rollout_ref.model.model_type, "embodied"); }

/* A plugin's exported df_embodied_env (env.env_type "lib.so:symbol"): read from the file (load false)
   or loaded and registered under the ref (load true). */
static int plugin_class(const char *ref, bool load)
{
    df_embodied_env probe;
    int rc = df_plugin_check_object(ref, sizeof probe, &probe);
    if (rc || !load)
        return rc;
    void (*sym)(void) = NULL;
    if ((rc = df_plugin_symbol(ref, &sym)))
        return rc;
    const df_embodied_env *obj; /* dlsym's address of the exported object */
    memcpy(&obj, &sym, sizeof obj);
    df_embodied_env env = *obj;
    env.name = ref;
    return df_embodied_env_register(&env);
}

/* The class of env.env_type and its description from one probe episode made with env.config. */
static int resolve_class(df_embodied_setup *s, const df_config *c, const struct df_train_embodied *k, bool load)
{
    const char *type = k->env.env_type;
    int rc = DF_OK;
    if (!strcmp(type, "libero") || !strcmp(type, "maniskill"))
        return df_error(DF_EUNSUPPORTED, "%s: " EMB "env.env_type=%s needs its simulator, which distflow does not "
                        "ship; the built-in simulator is grid_place, and a LIBERO adapter is a plugin "
                        "'path/lib.so:symbol' exporting a df_embodied_env (docs/embodied.md)",
                        df_config_where(c, EMB "env.env_type"), type);
    if (df_plugin_is_ref(type) && (rc = plugin_class(type, load)))
        return df_error_wrap(rc, "%s: " EMB "env.env_type", df_config_where(c, EMB "env.env_type"));
    if (df_plugin_is_ref(type) && !load) /* read, not loaded: nothing to probe */
        return DF_OK;
    if ((rc = df_embodied_env_lookup(type, &s->env)))
        return df_error_wrap(rc, "%s: " EMB "env.env_type", df_config_where(c, EMB "env.env_type"));
    if ((rc = df_config_map_json(k->env.config, &s->env_config)))
        return df_error_wrap(rc, "%s: " EMB "env.config", df_config_where(c, EMB "env.config"));
    void *st = NULL;
    if ((rc = s->env->create(s->env_config ? s->env_config : "{}", &st)))
        return df_error_wrap(rc, "%s: " EMB "env", df_config_where(c, EMB "env.config"));
    s->env->describe(st, &s->info);
    if (s->env->release)
        s->env->release(st);
    if (s->info.action_token_len != k->action_token_len)
        return df_error(DF_EINVAL, "%s: " EMB "action_token_len=%lld, but the environment %s has %d tokens per "
                        "action (set them equal: grid_place's env.config.action_token_len is 1 or 2)",
                        df_config_where(c, EMB "action_token_len"), (long long)k->action_token_len, type,
                        s->info.action_token_len);
    return DF_OK;
}

/* The single token of `text` in tok, or -1 (and *n its token count) when it is not one token. */
static int32_t one_token(const df_tokenizer *tok, const char *text, int64_t *n, int *rc)
{
    int32_t *ids = NULL;
    *n = 0;
    *rc = df_tokenizer_encode(tok, text, false, &ids, n);
    int32_t id = !*rc && *n == 1 ? ids[0] : -1;
    free(ids);
    return id;
}

/* word[p * vocab + v]: the token of action word (p, v) after a space, which must be one token of the
   policy's tokenizer. */
static int token_table(df_embodied_setup *s, const df_tokenizer *tok)
{
    const df_embodied_info *in = &s->info;
    const int64_t cells = (int64_t)in->action_token_len * in->action_vocab;
    if (!in->token_names)
        return df_error(DF_EUNSUPPORTED, "environment %s has no words for its action tokens (token_names): the "
                        "policy answers in text, one token per action token", s->env->name);
    if (!(s->word = malloc((size_t)cells * sizeof *s->word)))
        return df_error(DF_ENOMEM, "out of memory");
    for (int64_t i = 0; i < cells; i++) {
        const char *name = in->token_names[i];
        s->word[i] = -1;
        if (!name)
            continue;
        char text[128];
        snprintf(text, sizeof text, " %s", name);
        int64_t n;
        int rc;
        s->word[i] = one_token(tok, text, &n, &rc);
        if (rc)
            return rc;
        if (s->word[i] < 0)
            return df_error(DF_EUNSUPPORTED, "the action word '%s' is %lld tokens of the policy's tokenizer; the "
                            "embodied rollout reads one token per action token (a tokenizer trained on the "
                            "demonstrations has each word as one token: docs/embodied.md)", text, (long long)n);
    }
    return DF_OK;
}

int df_embodied_setup_init(df_embodied_setup *s, const df_config *c, const df_train_config *t,
                           const df_tokenizer *tok, bool load)
{
    memset(s, 0, sizeof *s);
    const struct df_train_embodied *k = &t->actor_rollout_ref.embodied;
    s->vo = (df_embodied_vec_opts){.num_envs = (int)k->env.num_envs, .max_steps = k->env.max_steps,
                                   .action_chunks_len = (int)k->action_chunks_len};
    s->traj_len = df_embodied_model_calls(k->env.max_steps, (int)k->action_chunks_len);
    s->call_tokens = k->action_chunks_len * k->action_token_len;
    s->env_name = k->env.env_name;
    if (k->env.num_envs > 1 << 20)
        return df_error(DF_EINVAL, "%s: " EMB "env.num_envs=%lld is more than 1048576",
                        df_config_where(c, EMB "env.num_envs"), (long long)k->env.num_envs);
    int rc = resolve_class(s, c, k, load);
    if (!rc && tok && s->env)
        rc = token_table(s, tok);
    if (rc)
        df_embodied_setup_clear(s);
    return rc;
}

void df_embodied_setup_clear(df_embodied_setup *s)
{
    free(s->env_config);
    free(s->word);
    memset(s, 0, sizeof *s);
}

void df_embodied_decode_call(const df_embodied_setup *s, const int32_t *tokens, int32_t *act)
{
    const int atl = s->info.action_token_len, V = s->info.action_vocab;
    for (int64_t t = 0; t < s->call_tokens; t++) {
        const int32_t *row = s->word + (int64_t)(t % atl) * V;
        act[t] = -1;
        for (int v = 0; v < V; v++)
            if (row[v] >= 0 && row[v] == tokens[t])
                act[t] = v;
    }
}

/* ---- the config checks (df_train_check) ------------------------------------------------------------ */

/* reward_model.reward_kwargs as the embodied manager reads it: reward_coef, action_token_len. */
static int reward_kwargs(const df_train_config *t, double *coef, int64_t *atl)
{
    char *json = NULL;
    int rc = df_config_map_json(t->reward_model.reward_kwargs, &json);
    *coef = 1.0, *atl = t->actor_rollout_ref.embodied.action_token_len;
    const df_env_option opts[] = {{"reward_coef", DF_ENV_OPT_NUMBER, -1e30, 1e30, coef},
                                  {"action_token_len", DF_ENV_OPT_INT, 1, DF_EMBODIED_MAX_TOKEN_LEN, atl}};
    if (!rc)
        rc = df_env_config_read("reward_model.reward_kwargs (the embodied reward manager)", json ? json : "{}", opts, 2);
    free(json);
    return rc;
}

int df_embodied_reward_coef(const df_train_config *t, double *coef)
{
    int64_t atl;
    return reward_kwargs(t, coef, &atl);
}

/* What an embodied job needs beside its environment. */
static int check_job(const df_config *c, const df_train_config *t)
{
    const char *key = NULL, *why = NULL;
    double coef;
    int64_t atl;
    int rc = reward_kwargs(t, &coef, &atl);
    if (rc)
        return df_error_wrap(rc, "%s", df_config_where(c, "reward_model.reward_kwargs"));
    if (strcmp(t->data.dataset_type, "embodied"))
        key = "data.dataset_type", why = "must be embodied: each row names an episode (task_id, trial_id)";
    else if (strcmp(t->reward_model.reward_manager, "embodied"))
        key = "reward_model.reward_manager", why = "must be embodied: SRPO's reward scores the episodes";
    else if (atl != t->actor_rollout_ref.embodied.action_token_len)
        key = "reward_model.reward_kwargs", why = "action_token_len differs from " EMB "action_token_len";
    else if (t->data.max_response_length < t->actor_rollout_ref.embodied.action_chunks_len *
                                               t->actor_rollout_ref.embodied.action_token_len)
        key = "data.max_response_length",
        why = "must hold one model call's answer, action_chunks_len x action_token_len tokens";
    else if (t->reward_model.enable)
        key = "reward_model.enable", why = "a reward model scores text; the episodes' reward is SRPO's";
    else if (strcmp(t->actor_rollout_ref.actor.loss_agg_mode, "token-mean"))
        key = "actor_rollout_ref.actor.loss_agg_mode",
        why = "must be token-mean: the actor computes an episode as its model calls, one sequence each, so a "
              "per-sequence mean would weigh calls, not episodes";
    else if (!strcmp(t->actor_rollout_ref.rollout.mode, "async"))
        key = "actor_rollout_ref.rollout.mode", why = "embodied rollouts are not run asynchronously yet";
    else if (t->actor_rollout_ref.rollout.multi_turn.enable || t->dag.env_enable)
        key = t->dag.env_enable ? "dag.env_enable" : "actor_rollout_ref.rollout.multi_turn.enable",
        why = "the embodied rollout is the episode loop; text agent loops do not combine with it";
    else if (t->algorithm.filter_groups.enable)
        key = "algorithm.filter_groups.enable",
        why = "DAPO's text filter re-runs the rollout; the embodied pipeline filters with algorithm.embodied_sampling";
    if (key)
        return df_error(DF_EINVAL, "%s (%s) with actor_rollout_ref.model.model_type=embodied: %s", key,
                        df_config_where(c, key), why);
    return DF_OK;
}

int df_embodied_check(const df_config *c, const df_train_config *t, bool embodied_graph)
{
    if (!df_embodied_enabled(t)) {
        const char *key = !strcasecmp(t->algorithm.workflow_type, "embodied") ? "algorithm.workflow_type"
                          : !strcmp(t->reward_model.reward_manager, "embodied") ? "reward_model.reward_manager"
                          : !strcmp(t->data.dataset_type, "embodied")          ? "data.dataset_type"
                                                                               : NULL;
        if (!key && embodied_graph)
            return df_error(DF_EINVAL, "the graph's embodied sampling node filters control episodes: set "
                            "actor_rollout_ref.model.model_type=embodied (docs/embodied.md)");
        return key ? df_error(DF_EINVAL, "%s (%s) runs control episodes: set actor_rollout_ref.model.model_type="
                              "embodied, with the environment of actor_rollout_ref.embodied.env.* (docs/embodied.md)",
                              key, df_config_where(c, key))
                   : DF_OK;
    }
    int rc = check_job(c, t);
    df_embodied_setup s;
    if (!rc && !(rc = df_embodied_setup_init(&s, c, t, NULL, false)))
        df_embodied_setup_clear(&s);
    return rc;
}

int64_t df_embodied_call_rows(const df_train_config *t, int64_t samples)
{
    const struct df_train_embodied *k = &t->actor_rollout_ref.embodied;
    return samples * df_embodied_model_calls(k->env.max_steps, (int)k->action_chunks_len);
}
