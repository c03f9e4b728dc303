/* Tools, interactions and environments from plugins: an exported class object registered under its
 * ref (include/distflow/dag.h, df_plugin_tool / df_plugin_interaction / df_plugin_env;
 * distflow/agent.h, distflow/env.h); and a multi-agent episode's environment class, which is not
 * registered but pointed at (distflow/marft_env.h, df_marft_env_resolve / df_marft_env_check). */
#include "planner/dag_internal.h"

#include "distflow/agent.h"
#include "distflow/env.h"
#include "distflow/marft_env.h"

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

/* The loaded object's address, through df_plugin_object_register (file checked, library loaded once). */
static int keep_marft_env(const void *obj, void *out)
{
    *(const df_marft_env_class **)out = obj;
    return DF_OK;
}

static int marft_env_loader(const char *ref, bool load, const df_marft_env_class **out)
{
    *out = NULL;
    if (load)
        return df_plugin_object_register(ref, sizeof(df_marft_env_class), keep_marft_env, (void *)out);
    df_marft_env_class bytes; /* only its size and kind matter: its pointers are relocated when loaded */
    return df_plugin_check_object(ref, sizeof bytes, &bytes);
}

int df_marft_env_resolve(const char *entry, const df_marft_env_class **out)
{
    return df_marft_env_lookup(entry, marft_env_loader, true, out);
}

int df_marft_env_check(const char *entry)
{
    const df_marft_env_class *cls = NULL;
    return df_marft_env_lookup(entry, marft_env_loader, false, &cls);
}
