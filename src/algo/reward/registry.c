/*
 * Reward functions keyed by data_source (include/distflow/reward.h): verl's
 * default_compute_score dispatch (verl/utils/reward_score/__init__.py, commit
 * b178a3cd56f58b2d502255daba591e92833930a7) as a registry a plugin can extend.
 */
#include "distflow/reward.h"

#include "algo/reward/reward_internal.h"
#include "util/fn_registry.h"

#include <stdio.h>
#include <string.h>

/* The keyword form of a built-in, kept beside its plain df_reward_fn in the entry's data. */
typedef struct builtin_kw {
    const char *name;
    df_reward_kw_fn fn;
} builtin_kw;

static int gsm8k_kw(const char *src, const char *sol, const char *gt, const char *extra,
                    const df_reward_kwargs *kw, df_reward_result *out)
{
    (void)src;
    (void)extra;
    return df_reward_gsm8k_ex(sol, gt, kw, out);
}

static int math_kw(const char *src, const char *sol, const char *gt, const char *extra,
                   const df_reward_kwargs *kw, df_reward_result *out)
{
    (void)kw;
    *out = (df_reward_result){0};
    int rc = df_reward_math(src, sol, gt, extra, &out->score);
    out->acc = out->score == 1.0;
    const char *ans;
    size_t len;
    if (!rc && df_reward_math_last_boxed(sol, &ans, &len)) { /* verl returns no pred; this helps a dump */
        len = len < sizeof out->pred ? len : sizeof out->pred - 1;
        while (len && ((unsigned char)ans[len] & 0xC0) == 0x80)
            len--; /* do not cut a code point */
        memcpy(out->pred, ans, len);
        out->pred[len] = '\0';
    }
    return rc;
}

static int math_dapo_kw(const char *src, const char *sol, const char *gt, const char *extra,
                        const df_reward_kwargs *kw, df_reward_result *out)
{
    (void)src;
    (void)extra;
    return df_reward_math_dapo_ex(sol, gt, kw, out);
}

static int synthetic_kw(const char *src, const char *sol, const char *gt, const char *extra,
                        const df_reward_kwargs *kw, df_reward_result *out)
{
    (void)kw;
    *out = (df_reward_result){0};
    int rc = df_reward_synthetic(src, sol, gt, extra, &out->score);
    out->acc = out->score == 1.0;
    return rc;
}

static const builtin_kw GSM8K = {"gsm8k", gsm8k_kw}, MATH = {"math", math_kw},
                        MATH_DAPO = {"math_dapo", math_dapo_kw}, SYNTH = {"synthetic", synthetic_kw};

#define BUILTIN(src, plain, kw)                                                                              \
    {                                                                                                        \
        src, (df_any_fn)(plain), &(kw)                                                                       \
    }
static const df_fn_entry BUILTINS[] = {
    BUILTIN("openai/gsm8k", df_reward_gsm8k, GSM8K),
    BUILTIN("lighteval/MATH", df_reward_math, MATH),
    BUILTIN("DigitalLearningGmbH/MATH-lighteval", df_reward_math, MATH),
    BUILTIN("HuggingFaceH4/MATH-500", df_reward_math, MATH),
    BUILTIN("math_dapo", df_reward_math_dapo, MATH_DAPO),
    BUILTIN("math", df_reward_math_dapo, MATH_DAPO),
    BUILTIN("math_dapo_reasoning", df_reward_math_dapo, MATH_DAPO),
    BUILTIN("synthetic/arithmetic", df_reward_synthetic, SYNTH),
};

/* verl: data_source.startswith("aime") -> math_dapo */
static const df_fn_entry AIME = BUILTIN("aime*", df_reward_math_dapo, MATH_DAPO);

/* The registry: the one global this module keeps (docs/conventions.md §2). */
static df_fn_registry g_rewards = {.kind = "reward function for data_source",
                                   .builtins = BUILTINS,
                                   .n_builtins = sizeof BUILTINS / sizeof BUILTINS[0]};

int df_reward_register(const char *name, df_reward_fn fn)
{
    if (name && strlen(name) >= DF_REWARD_NAME_MAX)
        return df_error(DF_EINVAL, "reward function registry: name '%.40s...' longer than %d bytes", name,
                        DF_REWARD_NAME_MAX - 1);
    return df_fn_registry_add(&g_rewards, name, (df_any_fn)fn);
}

int df_reward_resolve(const char *name, df_reward_fn *fn, df_reward_kw_fn *kw)
{
    const df_fn_entry *e = name ? df_fn_registry_find_entry(&g_rewards, name) : NULL;
    if (!e && name && !strncmp(name, "aime", 4))
        e = &AIME;
    if (!e) {
        df_any_fn any;
        int rc = df_fn_registry_lookup(&g_rewards, name, DF_ENOTFOUND, &any);
        char msg[1024]; /* the registry's message (it lists the names), plus verl's prefix rule */
        snprintf(msg, sizeof msg, "%s", df_last_error());
        return df_error(rc, "%s; any name starting with \"aime\" is scored by math_dapo", msg);
    }
    *fn = (df_reward_fn)e->fn;
    /* runtime registrations carry no data; a built-in's data is its keyword form */
    *kw = e->data ? ((const builtin_kw *)e->data)->fn : NULL;
    return DF_OK;
}

int df_reward_lookup(const char *name, df_reward_fn *out)
{
    df_reward_kw_fn kw;
    return df_reward_resolve(name, out, &kw);
}

int df_reward_call(df_reward_fn fn, df_reward_kw_fn kw, const char *data_source, const char *solution_str,
                   const char *ground_truth, const char *extra_info, const df_reward_kwargs *kwargs,
                   df_reward_result *out)
{
    if (kw)
        return kw(data_source, solution_str, ground_truth, extra_info, kwargs, out);
    *out = (df_reward_result){0};
    int rc = fn(data_source, solution_str, ground_truth, extra_info, &out->score);
    out->acc = out->score == 1.0;
    return rc;
}

int df_reward_compute(const char *data_source, const char *solution_str, const char *ground_truth,
                      const char *extra_info, const df_reward_kwargs *kw, df_reward_result *out)
{
    df_reward_fn fn;
    df_reward_kw_fn kfn;
    int rc = df_reward_resolve(data_source, &fn, &kfn);
    return rc ? rc : df_reward_call(fn, kfn, data_source, solution_str, ground_truth, extra_info, kw, out);
}
