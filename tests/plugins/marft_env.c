/* MARFT environment classes for test_marft_env (build/plugins/test/libmarft_env.so), each a
 * `const df_marft_env_class` (include/distflow/marft_env.h):
 *   marft_env_length  score = the last agent's response length, stop when it is over 4,
 *                     obs[a] = "<a>|" + agent a's response: every part of a turn is read;
 *   marft_env_short   one observation whatever the number of agents (df_marft_env_step refuses it);
 *   marft_env_no_step no step function (df_marft_env_resolve refuses it);
 *   marft_env_fn      a function, not a class object (refused from the file). */
#include <distflow/dag.h>
#include <distflow/marft_env.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

DF_PLUGIN_DECLARE_ABI;

static char *obs_of(int a, const char *response)
{
    size_t n = strlen(response) + 16;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%d|%s", a, response);
    return s;
}

static int length_step(const df_marft_env_turn *t, df_marft_env_result *out)
{
    out->obs = calloc((size_t)t->n_agents, sizeof *out->obs);
    if (!out->obs)
        return df_error(DF_ENOMEM, "out of memory");
    out->n_obs = t->n_agents;
    for (int a = 0; a < t->n_agents; a++)
        if (!(out->obs[a] = obs_of(a, t->responses[a])))
            return df_error(DF_ENOMEM, "out of memory");
    out->score = (double)strlen(t->responses[t->n_agents - 1]);
    out->stop = out->score > 4;
    return DF_OK;
}

static int short_step(const df_marft_env_turn *t, df_marft_env_result *out)
{
    out->obs = calloc(1, sizeof *out->obs);
    if (!out->obs || !(out->obs[0] = obs_of(0, t->responses[0])))
        return df_error(DF_ENOMEM, "out of memory");
    out->n_obs = 1;
    return DF_OK;
}

DF_API const df_marft_env_class marft_env_length = {.name = "length", .step = length_step};
DF_API const df_marft_env_class marft_env_short = {.name = "short", .step = short_step};
DF_API const df_marft_env_class marft_env_no_step = {.name = "no_step"};

DF_API int marft_env_fn(void)
{
    return 0;
}
