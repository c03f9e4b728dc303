/* Advantage estimators and uid grouping (include/distflow/algo.h). */
#include "distflow/algo.h"
#include "distflow/algo_desc.h"

#include "algo/algo_internal.h"
#include "util/fn_registry.h"
#include "util/hash.h"

#include <stdlib.h>
#include <string.h>

int df_algo_check_offsets(const char *who, int64_t n, const int64_t *offsets)
{
    if (n < 0)
        return df_error(DF_EINVAL, "%s: negative sample count %lld", who, (long long)n);
    if (!offsets)
        return df_error(DF_EINVAL, "%s: offsets is NULL", who);
    if (offsets[0] != 0)
        return df_error(DF_EINVAL, "%s: offsets[0] is %lld, expected 0", who,
                        (long long)offsets[0]);
    for (int64_t i = 0; i < n; i++)
        if (offsets[i + 1] < offsets[i])
            return df_error(DF_EINVAL, "%s: offsets decrease at sample %lld (%lld -> %lld)", who,
                            (long long)i, (long long)offsets[i], (long long)offsets[i + 1]);
    return DF_OK;
}

/* ---- uid -> dense group id ----------------------------------------------- */

int df_group_ids(const char *const *uids, int64_t n, int64_t *group)
{
    if (n < 0)
        return df_error(DF_EINVAL, "group ids: negative sample count %lld", (long long)n);
    if (n == 0)
        return DF_OK;
    if (!uids || !group)
        return df_error(DF_EINVAL, "group ids: NULL uids or output");
    /* Open addressing; a slot holds the first sample index with that uid. */
    int64_t cap = 16;
    while (cap < 2 * n)
        cap *= 2;
    int64_t *slot = malloc((size_t)cap * sizeof *slot);
    if (!slot)
        return df_error(DF_ENOMEM, "group ids: out of memory for %lld samples", (long long)n);
    memset(slot, 0xff, (size_t)cap * sizeof *slot); /* all -1 */
    int64_t next = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!uids[i]) {
            free(slot);
            return df_error(DF_EINVAL, "group ids: uid of sample %lld is NULL", (long long)i);
        }
        int64_t h = (int64_t)(df_fnv1a(uids[i]) & (uint64_t)(cap - 1));
        while (slot[h] >= 0 && strcmp(uids[slot[h]], uids[i]) != 0)
            h = (h + 1) & (cap - 1);
        if (slot[h] < 0) {
            slot[h] = i;
            group[i] = next++;
        } else {
            group[i] = group[slot[h]];
        }
    }
    free(slot);
    return DF_OK;
}

/* ---- registry: one descriptor per estimator (include/distflow/algo_desc.h) ---- */

#define G DF_ADV_NEEDS_GROUPS
#define V DF_ADV_NEEDS_VALUES
#define BL DF_ADV_NEEDS_BASELINES
#define AG DF_ADV_NEEDS_AGENTS
#define SQ DF_ADV_NEEDS_SUM_PI_SQUARED
#define W DF_ADV_WHITENS
#define WR (DF_ADV_WHITENS | DF_ADV_WHITENS_RETURNS)
#define BC DF_ADV_BATCH_COUNTS
/* X(id, function, needs, flags, implied policy loss, summary) */
#define BUILTIN_ESTIMATORS(X)                                                                        \
    X(grpo, df_adv_grpo, G, 0, NULL, "group-normalised outcome score (DeepSeekMath, verl grpo)")      \
    X(gae, df_adv_gae, V, W, NULL, "generalised advantage estimation with a critic (Schulman 2016)")  \
    X(rloo, df_adv_rloo, G, 0, NULL, "leave-one-out group baseline (Ahmadian 2024)")                   \
    X(reinforce_plus_plus, df_adv_reinforce_plus_plus, 0, W, NULL,                                    \
      "discounted return, whitened over the batch (REINFORCE++, Hu 2025)")                             \
    X(reinforce_plus_plus_baseline, df_adv_reinforce_plus_plus_baseline, G, WR, NULL,                  \
      "group-mean baseline, whitened over the batch (REINFORCE++-baseline)")                           \
    X(remax, df_adv_remax, BL, 0, NULL, "return minus the greedy response's reward (ReMax, Li 2023)") \
    X(gpg, df_adv_gpg, G, BC, NULL, "group baseline with GPG's correction, verl's alpha (Chu 2025)")  \
    X(gpg_paper, df_adv_gpg_paper, G, BC, NULL, "GPG with the paper's alpha (Chu 2025, section 3)")    \
    X(cpgd, df_adv_cpgd, G, BC, "cpgd", "group baseline for clipped policy gradient (CPGD, Liu 2025)")      \
    X(gae_marft, df_adv_gae_marft_single, V | AG, W, NULL,                                            \
      "GAE chained across the agents and turns of multi-agent episodes (siiRL MARFT)")                \
    X(grpo_vectorized, df_adv_grpo_vectorized, G, 0, NULL, "grpo with the group variance floored at epsilon (verl)") \
    X(rloo_vectorized, df_adv_rloo_vectorized, G, 0, NULL, "rloo giving a group of one 0 (verl)")     \
    X(grpo_passk, df_adv_grpo_passk, G, 0, NULL,                                                      \
      "the best response's margin over the second (Pass@k training, Chen 2025)")                        \
    X(opo, df_adv_opo, G, 0, NULL, "length-weighted group mean as baseline (OPO, Hao 2025)")        \
    X(optimal_token_baseline, df_adv_optimal_token_baseline, G | SQ, 0, NULL,                         \
      "per-token group baseline weighted by accumulated path variance (OTB, Li 2025, verl)")           \
    X(tir_optimal_token_baseline, df_adv_tir_optimal_token_baseline, G | SQ, 0, NULL,                 \
      "OTB over the model's tokens of multi-turn responses, zero tail (OTB, Li 2025, verl)")

#define DESC(id, f, nd, fl, pl, sum) {#id, f, nd, fl, pl, sum},
static const df_adv_estimator_desc k_builtin_descs[] = {BUILTIN_ESTIMATORS(DESC)};
#undef DESC
enum {
#define IDX(id, ...) IDX_##id,
    BUILTIN_ESTIMATORS(IDX)
#undef IDX
};
#define ENTRY(id, f, ...) {#id, (df_any_fn)f, &k_builtin_descs[IDX_##id]},
static const df_fn_entry k_builtin_estimators[] = {BUILTIN_ESTIMATORS(ENTRY)};
#undef ENTRY
#undef G
#undef V
#undef BL
#undef AG
#undef SQ
#undef W
#undef WR
#undef BC

static df_fn_registry g_estimators = {
    .kind = "advantage estimator",
    .builtins = k_builtin_estimators,
    .n_builtins = sizeof k_builtin_estimators / sizeof k_builtin_estimators[0],
};

int df_adv_estimator_register_desc(const df_adv_estimator_desc *d)
{
    if (!d)
        return df_error(DF_EINVAL, "advantage estimator registry: NULL descriptor");
    const unsigned needs = DF_ADV_NEEDS_GROUPS | DF_ADV_NEEDS_VALUES | DF_ADV_NEEDS_BASELINES |
                           DF_ADV_NEEDS_AGENTS | DF_ADV_NEEDS_SUM_PI_SQUARED;
    const unsigned flags = DF_ADV_WHITENS | DF_ADV_WHITENS_RETURNS | DF_ADV_BATCH_COUNTS;
    if ((d->needs & ~needs) || (d->flags & ~flags))
        return df_error(DF_EINVAL, "advantage estimator '%s': unknown needs / flags bits (0x%x / 0x%x)",
                        d->name ? d->name : "(null)", d->needs & ~needs, d->flags & ~flags);
    if ((d->flags & DF_ADV_WHITENS_RETURNS) && !(d->flags & DF_ADV_WHITENS))
        return df_error(DF_EINVAL, "advantage estimator '%s': DF_ADV_WHITENS_RETURNS without DF_ADV_WHITENS",
                        d->name ? d->name : "(null)");
    return df_fn_registry_add_data(&g_estimators, d->name, (df_any_fn)d->fn, d, sizeof *d);
}

const df_adv_estimator_desc *df_adv_estimator_find(const char *name)
{
    const df_fn_entry *e = df_fn_registry_find_entry(&g_estimators, name);
    return e ? e->data : NULL;
}

int df_adv_estimator_get(const char *name, const df_adv_estimator_desc **out)
{
    df_any_fn f;
    *out = df_adv_estimator_find(name);
    return *out ? DF_OK : df_fn_registry_lookup(&g_estimators, name, DF_EINVAL, &f); /* its message */
}

const char *df_adv_estimator_pipeline(const df_adv_estimator_desc *d)
{
    return d && (d->needs & DF_ADV_NEEDS_VALUES) ? "ppo" : "grpo";
}

int df_adv_estimator_lookup(const char *name, df_adv_estimator_fn *fn)
{
    df_any_fn f;
    int rc = df_fn_registry_lookup(&g_estimators, name, DF_EINVAL, &f);
    if (!rc)
        *fn = (df_adv_estimator_fn)f;
    return rc;
}

/* A plain registration of a built-in function (under any name) keeps that function's needs and
   flags; any other function has none: a replacement of a built-in is not assumed to whiten. */
int df_adv_estimator_register(const char *name, df_adv_estimator_fn fn)
{
    df_adv_estimator_desc d = {.name = name, .fn = fn};
    for (size_t i = 0; fn && i < sizeof k_builtin_descs / sizeof *k_builtin_descs; i++)
        if (k_builtin_descs[i].fn == fn) {
            d = k_builtin_descs[i];
            d.name = name;
        }
    return df_adv_estimator_register_desc(&d);
}

bool df_adv_estimator_whitens(const char *name)
{
    const df_adv_estimator_desc *d = df_adv_estimator_find(name);
    return d && (d->flags & DF_ADV_WHITENS);
}

bool df_adv_estimator_whitens_returns(const char *name)
{
    const df_adv_estimator_desc *d = df_adv_estimator_find(name);
    return d && (d->flags & DF_ADV_WHITENS_RETURNS);
}
