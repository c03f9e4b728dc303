/* The tool and interaction class registries (include/distflow/agent.h): built-ins, verl's class paths
 * for them, and what plugins register (docs/conventions.md §2: registries are the only globals). */
#include "distflow/agent.h"

#include "agent/agent_internal.h"
#include "util/fn_registry.h"

#include <string.h>

/* The registry keeps a function beside each name; a class is its data, the function only a marker. */
static void class_marker(void) {}

static const df_fn_entry k_tools[] = {
    {"calculator", class_marker, &df_tool_calculator},
    {"gsm8k", class_marker, &df_tool_gsm8k},
};

static const df_fn_alias k_tool_aliases[] = {
    {"verl.tools.gsm8k_tool.Gsm8kTool", "gsm8k"},
    {"verl.workers.tool.gsm8k_tool.Gsm8kTool", "gsm8k"}, /* verl <= 0.4's module path */
};

static df_fn_registry g_tools = {"tool class", k_tools, sizeof k_tools / sizeof *k_tools, NULL, 0, 0,
                                 k_tool_aliases, sizeof k_tool_aliases / sizeof *k_tool_aliases};

static const df_fn_entry k_interactions[] = {
    {"gsm8k", class_marker, &df_interaction_gsm8k},
};

static const df_fn_alias k_interaction_aliases[] = {
    {"verl.interactions.gsm8k_interaction.Gsm8kInteraction", "gsm8k"},
};

static df_fn_registry g_interactions = {
    "interaction class", k_interactions, sizeof k_interactions / sizeof *k_interactions, NULL, 0, 0,
    k_interaction_aliases, sizeof k_interaction_aliases / sizeof *k_interaction_aliases};

bool agent_is_plugin_ref(const char *ref)
{
    const char *colon = ref ? strrchr(ref, ':') : NULL;
    if (!colon)
        return false;
    size_t n = (size_t)(colon - ref);
    return (n > 3 && !strncmp(colon - 3, ".so", 3)) || memchr(ref, '/', n) != NULL;
}

static int lookup(const df_fn_registry *r, const char *name, const void **out)
{
    *out = NULL;
    const df_fn_entry *e = name ? df_fn_registry_find_entry(r, name) : NULL;
    if (e && e->data) {
        *out = e->data;
        return DF_OK;
    }
    char known[1024];
    df_fn_registry_names(r, known, sizeof known);
    return df_error(DF_ENOTFOUND, "unknown %s '%s' (known: %s%s)", r->kind, name ? name : "(null)", known,
                    agent_is_plugin_ref(name) ? "; a plugin ref must be loaded first (df_plugin_tool)" : "");
}

int df_tool_class_register(const df_tool *tool)
{
    if (!tool || !tool->name || !tool->name[0] || !tool->create || !tool->execute)
        return df_error(DF_EINVAL, "df_tool_class_register: a tool class needs a name, create and execute");
    return df_fn_registry_add_data(&g_tools, tool->name, (df_any_fn)tool->execute, tool, sizeof *tool);
}

int df_tool_class_lookup(const char *name, const df_tool **out)
{
    const void *p = NULL;
    int rc = lookup(&g_tools, name, &p);
    *out = p;
    return rc;
}

int df_interaction_class_register(const df_interaction *ia)
{
    if (!ia || !ia->name || !ia->name[0] || !ia->start || !ia->generate_response)
        return df_error(DF_EINVAL, "df_interaction_class_register: an interaction class needs a name, start "
                                   "and generate_response");
    return df_fn_registry_add_data(&g_interactions, ia->name, (df_any_fn)ia->generate_response, ia, sizeof *ia);
}

int df_interaction_class_lookup(const char *name, const df_interaction **out)
{
    const void *p = NULL;
    int rc = lookup(&g_interactions, name, &p);
    *out = p;
    return rc;
}

/* A plugin ref not yet registered is loaded, then looked up again. */
static bool needs_load(const df_fn_registry *r, const char *name, df_tool_plugin_loader load)
{
    return load && agent_is_plugin_ref(name) && !df_fn_registry_find_entry(r, name);
}

int agent_tool_class_resolve(const char *name, df_tool_plugin_loader load, const df_tool **out)
{
    *out = NULL;
    int rc = needs_load(&g_tools, name, load) ? load(name) : DF_OK;
    return rc ? rc : df_tool_class_lookup(name, out);
}

int agent_interaction_class_resolve(const char *name, df_tool_plugin_loader load, const df_interaction **out)
{
    *out = NULL;
    int rc = needs_load(&g_interactions, name, load) ? load(name) : DF_OK;
    return rc ? rc : df_interaction_class_lookup(name, out);
}
