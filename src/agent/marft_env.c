/*
 * The environment of a chained multi-agent episode (include/distflow/marft_env.h): the built-in
 * MathEnv (siiRL's examples/experimental/marft/config/math_env.py), the checked step every caller
 * goes through, and how an env_path entry names a class. Loading a plugin is the plan's (a lower
 * layer cannot load libraries): it comes in as a df_marft_env_loader.
 */
#include "distflow/marft_env.h"

#include "distflow/reward.h"

#include "agent/agent_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* siiRL's MathEnv appends these to every agent's episode text */
#define RIGHT " This answer is right."
#define WRONG " This answer is wrong."
/* the scorer siiRL's MathEnv always uses (siirl.utils.reward_score.math), for rows without a data source */
#define MATH_SOURCE "lighteval/MATH"

void df_marft_env_result_clear(df_marft_env_result *r)
{
    if (!r)
        return;
    for (int a = 0; r->obs && a < r->n_obs; a++)
        free(r->obs[a]);
    free(r->obs);
    memset(r, 0, sizeof *r);
}

static const char *class_name(const df_marft_env_class *cls)
{
    return cls && cls->name && cls->name[0] ? cls->name : "(unnamed)";
}

/* DF_EINVAL naming `who` for a turn that is not n_agents >= 1 agents with their texts. */
static int check_turn(const char *who, const df_marft_env_turn *t)
{
    if (!t || t->n_agents < 1 || !t->episodes || !t->responses)
        return df_error(DF_EINVAL,
                        "MARFT environment %s: a turn needs n_agents >= 1 (got %d) and their "
                        "episodes and responses",
                        who, t ? t->n_agents : 0);
    for (int a = 0; a < t->n_agents; a++)
        if (!t->episodes[a] || !t->responses[a])
            return df_error(DF_EINVAL, "MARFT environment %s: agent %d of %d has no %s text", who, a,
                            t->n_agents, t->episodes[a] ? "response" : "episode");
    return DF_OK;
}

int df_marft_env_step(const df_marft_env_class *cls, const df_marft_env_turn *turn, df_marft_env_result *out)
{
    if (!out)
        return df_error(DF_EINVAL, "MARFT environment %s: no result to fill", class_name(cls));
    memset(out, 0, sizeof *out);
    if (!cls || !cls->step)
        return df_error(DF_EINVAL, "MARFT environment %s: the class has no step function", class_name(cls));
    int rc = check_turn(class_name(cls), turn);
    if (rc)
        return rc;
    df_clear_error();
    if ((rc = cls->step(turn, out))) {
        df_marft_env_result_clear(out);
        return df_error_wrap(rc, "MARFT environment %s", class_name(cls));
    }
    /* a plugin's result is checked here, so that the rollout never reads a missing observation */
    if (out->n_obs != turn->n_agents || !out->obs)
        rc = df_error(DF_EINVAL, "MARFT environment %s: step gave %d observations for %d agents",
                      class_name(cls), out->obs ? out->n_obs : 0, turn->n_agents);
    for (int a = 0; !rc && a < out->n_obs; a++)
        if (!out->obs[a])
            rc = df_error(DF_EINVAL, "MARFT environment %s: step gave no observation for agent %d",
                          class_name(cls), a);
    if (!rc && !isfinite(out->score))
        rc =
            df_error(DF_EINVAL, "MARFT environment %s: step gave a score of %g", class_name(cls), out->score);
    if (rc)
        df_marft_env_result_clear(out);
    return rc;
}

/* ---- the built-in MathEnv ---------------------------------------------------------------------- */

static char *concat(const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    char *s = malloc(na + nb + 1);
    if (s) {
        memcpy(s, a, na);
        memcpy(s + na, b, nb + 1);
    }
    return s;
}

static int math_step(const df_marft_env_turn *t, df_marft_env_result *out)
{
    int rc = check_turn(DF_MARFT_ENV_MATH_CLASS, t);
    if (rc)
        return rc;
    if (!t->ground_truth)
        return df_error(DF_EINVAL, "MARFT environment " DF_MARFT_ENV_MATH_CLASS ": the row has no "
                                   "reward_model.ground_truth to score the answer against");
    const char *source = t->data_source && t->data_source[0] ? t->data_source : MATH_SOURCE;
    df_reward_result r;
    memset(&r, 0, sizeof r);
    /* the last agent's own response: an earlier agent's answer in the episode text never counts */
    rc = df_reward_compute(source, t->responses[t->n_agents - 1], t->ground_truth, t->extra_info,
                           t->reward_kwargs, &r);
    if (rc)
        return df_error_wrap(rc, "MARFT environment " DF_MARFT_ENV_MATH_CLASS);
    out->score = r.score;
    out->stop = r.score == 1.0; /* siiRL's test, exactly */
    out->obs = calloc((size_t)t->n_agents, sizeof *out->obs);
    if (!out->obs)
        return df_error(DF_ENOMEM, "out of memory");
    out->n_obs = t->n_agents;
    for (int a = 0; a < t->n_agents; a++)
        if (!(out->obs[a] = concat(t->episodes[a], out->stop ? RIGHT : WRONG)))
            return df_error(DF_ENOMEM, "out of memory");
    return DF_OK;
}

const df_marft_env_class df_marft_env_math = {.name = DF_MARFT_ENV_MATH_CLASS, .step = math_step};

/* ---- env_path entries ---------------------------------------------------------------------------- */

#define FORMS                                                                                                \
    "the built-in '<dir>/" DF_MARFT_ENV_MATH_FILE ":" DF_MARFT_ENV_MATH_CLASS                                \
    "' (siiRL's MathEnv) or a plugin "                                                                       \
    "'path/to/libx.so:symbol' exporting a df_marft_env_class (include/distflow/marft_env.h)"

static bool ends_with(const char *s, size_t n, const char *tail)
{
    size_t k = strlen(tail);
    return n >= k && !memcmp(s + n - k, tail, k);
}

/* The built-in a Python entry "<file>.py:<Class>" (file = entry[0, n)) stands for. */
static int python_entry(const char *entry, size_t n, const char *cls, const df_marft_env_class **out)
{
    const char *base = entry;
    for (const char *p = entry; p < entry + n; p++)
        if (*p == '/')
            base = p + 1;
    size_t nb = (size_t)(entry + n - base);
    if (nb == strlen(DF_MARFT_ENV_MATH_FILE) && !memcmp(base, DF_MARFT_ENV_MATH_FILE, nb) &&
        !strcmp(cls, DF_MARFT_ENV_MATH_CLASS)) {
        *out = &df_marft_env_math;
        return DF_OK;
    }
    return df_error(DF_EUNSUPPORTED,
                    "env_path entry '%s': a Python class distflow does not have (distflow runs "
                    "no Python); environments: " FORMS,
                    entry);
}

int df_marft_env_lookup(const char *entry, df_marft_env_loader loader, bool load,
                        const df_marft_env_class **out)
{
    *out = NULL;
    const char *colon = entry ? strrchr(entry, ':') : NULL;
    if (!entry || !entry[0] || !colon || colon == entry || !colon[1])
        return df_error(DF_EINVAL,
                        "env_path entry '%s' is not 'file.py:Class' or 'lib.so:symbol': environments: " FORMS,
                        entry ? entry : "(null)");
    size_t n = (size_t)(colon - entry);
    if (ends_with(entry, n, ".py"))
        return python_entry(entry, n, colon + 1, out);
    if (!agent_is_plugin_ref(entry))
        return df_error(DF_EINVAL,
                        "env_path entry '%s' names neither a Python file nor a shared library: "
                        "environments: " FORMS,
                        entry);
    if (!loader)
        return df_error(DF_EINVAL, "env_path entry '%s': a plugin, and no plugin loader was given", entry);
    int rc = loader(entry, load, out);
    if (rc)
        df_error_wrap(rc, "env_path entry '%s'", entry);
    else if (load && (!*out || !(*out)->step))
        rc = df_error(DF_EINVAL, "env_path entry '%s': the plugin's df_marft_env_class has no step function",
                      entry);
    if (rc)
        *out = NULL;
    return rc;
}
