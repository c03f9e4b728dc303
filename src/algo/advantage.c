/* Advantage estimators and uid grouping (include/distflow/algo.h). */
#include "distflow/algo.h"

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

/* ---- registry --------------------------------------------------------------- */

static const df_fn_entry k_builtin_estimators[] = {
    {"grpo", (df_any_fn)df_adv_grpo},
    /* advest: adv_token.c, adv_group.c */
    {"gae", (df_any_fn)df_adv_gae},
    {"rloo", (df_any_fn)df_adv_rloo},
    {"reinforce_plus_plus", (df_any_fn)df_adv_reinforce_plus_plus},
    {"reinforce_plus_plus_baseline", (df_any_fn)df_adv_reinforce_plus_plus_baseline},
    {"remax", (df_any_fn)df_adv_remax},
    {"gpg", (df_any_fn)df_adv_gpg},
    {"gpg_paper", (df_any_fn)df_adv_gpg_paper}, /* the paper's alpha (algo.h) */
    {"cpgd", (df_any_fn)df_adv_cpgd},
};

static df_fn_registry g_estimators = {
    .kind = "advantage estimator",
    .builtins = k_builtin_estimators,
    .n_builtins = sizeof k_builtin_estimators / sizeof k_builtin_estimators[0],
};

int df_adv_estimator_lookup(const char *name, df_adv_estimator_fn *fn)
{
    df_any_fn f;
    int rc = df_fn_registry_lookup(&g_estimators, name, DF_EINVAL, &f);
    if (!rc)
        *fn = (df_adv_estimator_fn)f;
    return rc;
}

int df_adv_estimator_register(const char *name, df_adv_estimator_fn fn)
{
    return df_fn_registry_add(&g_estimators, name, (df_any_fn)fn);
}

/* Only the built-ins are known to honour defer_whiten: a replacement registered under their
   names is treated as an estimator that does not whiten. */
bool df_adv_estimator_whitens(const char *name)
{
    df_any_fn f = name ? df_fn_registry_find(&g_estimators, name) : NULL;
    return f && (f == (df_any_fn)df_adv_gae || f == (df_any_fn)df_adv_reinforce_plus_plus ||
                 f == (df_any_fn)df_adv_reinforce_plus_plus_baseline);
}

bool df_adv_estimator_whitens_returns(const char *name)
{
    df_any_fn f = name ? df_fn_registry_find(&g_estimators, name) : NULL;
    return f && f == (df_any_fn)df_adv_reinforce_plus_plus_baseline;
}
