/* Tools, interactions and environments from plugins: an exported class object registered under its
 * ref (include/distflow/dag.h, df_plugin_tool / df_plugin_interaction / df_plugin_env;
 * distflow/agent.h, distflow/env.h). */
#include "planner/dag_internal.h"

#include "distflow/agent.h"
#include "distflow/env.h"

static int register_tool(const void *obj, void *ref)
{
    df_tool t = *(const df_tool *)obj;
    t.name = ref;
    return df_tool_class_register(&t);
}

static int register_interaction(const void *obj, void *ref)
{
    df_interaction ia = *(const df_interaction *)obj;
    ia.name = ref;
    return df_interaction_class_register(&ia);
}

int df_plugin_tool(const char *ref)
{
    if (!ref || !df_plugin_is_ref(ref))
        return df_error(DF_EINVAL, "tool class '%s' is not a plugin ref (path/to/libx.so:symbol)", ref ? ref : "(null)");
    int rc = df_plugin_object_register(ref, sizeof(df_tool), register_tool, (void *)ref);
    return rc ? df_error_wrap(rc, "tool class '%s'", ref) : DF_OK;
}

int df_plugin_interaction(const char *ref)
{
    if (!ref || !df_plugin_is_ref(ref))
        return df_error(DF_EINVAL, "interaction class '%s' is not a plugin ref (path/to/libx.so:symbol)",
                        ref ? ref : "(null)");
    int rc = df_plugin_object_register(ref, sizeof(df_interaction), register_interaction, (void *)ref);
    return rc ? df_error_wrap(rc, "interaction class '%s'", ref) : DF_OK;
}

static int register_env(const void *obj, void *ref)
{
    df_env e = *(const df_env *)obj;
    e.name = ref;
    return df_env_class_register(&e);
}

int df_plugin_env(const char *ref)
{
    if (!ref || !df_plugin_is_ref(ref))
        return df_error(DF_EINVAL, "environment class '%s' is not a plugin ref (path/to/libx.so:symbol)",
                        ref ? ref : "(null)");
    int rc = df_plugin_object_register(ref, sizeof(df_env), register_env, (void *)ref);
    return rc ? df_error_wrap(rc, "environment class '%s'", ref) : DF_OK;
}
