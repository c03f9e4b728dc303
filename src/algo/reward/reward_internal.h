/*
 * reward_internal.h (internal) — the registry's two forms of a scorer, shared
 * by the dispatch (registry.c) and the reward managers (naive.c).
 */
#ifndef DF_ALGO_REWARD_INTERNAL_H
#define DF_ALGO_REWARD_INTERNAL_H

#include "distflow/reward.h"

/* The scorer of `name` (df_reward_lookup's choice): *fn always, *kw the keyword form for a
 * built-in and NULL for a runtime registration. Errors as df_reward_lookup. */
int df_reward_resolve(const char *name, df_reward_fn *fn, df_reward_kw_fn *kw);

/* Score one response with kw (when non-NULL, given `kwargs`) or else fn (acc = score == 1.0). */
int df_reward_call(df_reward_fn fn, df_reward_kw_fn kw, const char *data_source, const char *solution_str,
                   const char *ground_truth, const char *extra_info, const df_reward_kwargs *kwargs,
                   df_reward_result *out);

#endif /* DF_ALGO_REWARD_INTERNAL_H */
