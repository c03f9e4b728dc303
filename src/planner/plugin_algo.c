/* Algorithms from plugins: an exported descriptor object registered under its ref
 * (include/distflow/dag.h, df_plugin_adv_estimator / df_plugin_policy_loss). */
#include "planner/dag_internal.h"

#include "distflow/algo_desc.h"

/* Stand-ins registered by a check: validation reads the descriptor, nothing may run it. */
static int checked_estimator(const df_adv_input *in, float *advantages, float *returns)
{
    (void)in, (void)advantages, (void)returns;
    return df_error(DF_EINTERNAL, "a plugin estimator was checked but not loaded (df_plugin_adv_estimator "
                                  "with load=true loads it)");
}

static int checked_loss(const df_policy_loss_input *in, df_policy_loss_output *out)
{
    (void)in, (void)out;
    return df_error(DF_EINTERNAL, "a plugin policy loss was checked but not loaded (df_plugin_policy_loss "
                                  "with load=true loads it)");
}

static int register_estimator(const void *obj, void *ref)
{
    df_adv_estimator_desc d = *(const df_adv_estimator_desc *)obj;
    if (d.policy_loss)
        return df_error(DF_EINVAL, "policy_loss must be NULL (choose the loss with "
                                   "actor_rollout_ref.actor.policy_loss.loss_mode)");
    d.name = ref;
    return df_adv_estimator_register_desc(&d);
}

static int register_loss(const void *obj, void *ref)
{
    df_policy_loss_desc d = *(const df_policy_loss_desc *)obj;
    d.name = ref;
    return df_policy_loss_register_desc(&d);
}

int df_plugin_adv_estimator(const char *ref, bool load)
{
    if (!ref || !df_plugin_is_ref(ref))
        return DF_OK; /* a registry name */
    int rc;
    if (load) {
        rc = df_plugin_object_register(ref, sizeof(df_adv_estimator_desc), register_estimator, (void *)ref);
    } else {
        df_adv_estimator_desc d;
        rc = df_plugin_check_object(ref, sizeof d, &d);
        d.name = ref; /* the file holds no relocated pointers */
        d.fn = checked_estimator;
        d.policy_loss = d.summary = NULL;
        if (!rc)
            rc = df_adv_estimator_register_desc(&d);
    }
    return rc ? df_error_wrap(rc, "advantage estimator '%s'", ref) : DF_OK;
}

int df_plugin_policy_loss(const char *ref, bool load)
{
    if (!ref || !df_plugin_is_ref(ref))
        return DF_OK;
    int rc;
    if (load) {
        rc = df_plugin_object_register(ref, sizeof(df_policy_loss_desc), register_loss, (void *)ref);
    } else {
        df_policy_loss_desc d;
        rc = df_plugin_check_object(ref, sizeof d, &d);
        d.name = ref;
        d.fn = checked_loss;
        d.loss_agg_mode = d.summary = NULL;
        if (!rc)
            rc = df_policy_loss_register_desc(&d);
    }
    return rc ? df_error_wrap(rc, "policy loss '%s'", ref) : DF_OK;
}
