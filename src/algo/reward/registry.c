/* Reward functions keyed by data_source (include/distflow/reward.h). */
#include "distflow/reward.h"

#include "util/fn_registry.h"

#include <string.h>

static const df_fn_entry BUILTINS[] = {
    {"openai/gsm8k", (df_any_fn)df_reward_gsm8k, NULL},
    {"synthetic/arithmetic", (df_any_fn)df_reward_synthetic, NULL},
};

/* The registry: the one global this module keeps (docs/conventions.md §2). */
static df_fn_registry g_rewards = {.kind = "reward function for data_source", .builtins = BUILTINS,
                                   .n_builtins = sizeof BUILTINS / sizeof BUILTINS[0]};

int df_reward_register(const char *name, df_reward_fn fn)
{
    if (name && strlen(name) >= DF_REWARD_NAME_MAX)
        return df_error(DF_EINVAL, "reward function registry: name '%.40s...' longer than %d bytes",
                        name, DF_REWARD_NAME_MAX - 1);
    return df_fn_registry_add(&g_rewards, name, (df_any_fn)fn);
}

int df_reward_lookup(const char *name, df_reward_fn *out)
{
    df_any_fn fn;
    int rc = df_fn_registry_lookup(&g_rewards, name, DF_ENOTFOUND, &fn);
    if (!rc)
        *out = (df_reward_fn)fn;
    return rc;
}
