/* Tool sets and sessions (include/distflow/agent.h): verl's initialize_tools_from_config
 * (verl/tools/utils/tool_registry.py) over its tool config YAML, and one trajectory's tool
 * instances with the create / execute / calc_reward / release lifecycle of verl's BaseTool. */
#include "distflow/agent.h"

#include "agent/agent_internal.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct set_tool {
    df_tool vt;     /* the class, copied: a later registration cannot change a loaded set */
    void *state;    /* what init made */
    char *name;     /* the function name (schema.function.name) */
    json_t *schema;
} set_tool;

struct df_tool_set {
    set_tool *tools;
    const char **names; /* [n] the tools' function names, for df_tool_calls_parse */
    int n, cap;
};

struct df_tool_session {
    const df_tool_set *set;
    void **inst; /* [set->n] */
    int64_t n_calls;
};

void df_tool_result_clear(df_tool_result *r)
{
    if (r) {
        free(r->text);
        free(r->metrics);
        memset(r, 0, sizeof *r);
    }
}

int df_tool_set_create(df_tool_set **out)
{
    *out = calloc(1, sizeof **out);
    return *out ? DF_OK : df_error(DF_ENOMEM, "out of memory");
}

void df_tool_set_free(df_tool_set *set)
{
    if (!set)
        return;
    for (int i = 0; i < set->n; i++) {
        if (set->tools[i].vt.fini)
            set->tools[i].vt.fini(set->tools[i].state);
        free(set->tools[i].name);
        json_decref(set->tools[i].schema);
    }
    free(set->tools);
    free(set->names);
    free(set);
}

int df_tool_set_size(const df_tool_set *set) { return set ? set->n : 0; }

const char *const *df_tool_set_names(const df_tool_set *set) { return set ? set->names : NULL; }

/* The schema as an object with type "function" and a function name: a new reference in *out. */
static int check_schema(const char *schema_json, json_t **out, const char **name)
{
    json_error_t e;
    json_t *s = json_loads(schema_json, 0, &e);
    if (!s)
        return df_error(DF_EINVAL, "tool_schema is not valid JSON (%s)", e.text);
    json_t *type = json_object_get(s, "type"), *fn = json_object_get(s, "function");
    json_t *nm = json_object_get(fn, "name");
    const char *why = !json_is_object(s) ? "is not a mapping"
                      : !json_is_string(type) || strcmp(json_string_value(type), "function")
                          ? "needs type: function"
                      : !json_is_object(fn) ? "has no function mapping"
                      : !json_is_string(nm) || !json_string_length(nm) ? "has no function.name"
                                                                         : NULL;
    if (why) {
        json_decref(s);
        return df_error(DF_EINVAL, "tool_schema %s", why);
    }
    *out = s;
    *name = json_string_value(nm);
    return DF_OK;
}

int df_tool_set_add(df_tool_set *set, const df_tool *tool, const char *config_json, const char *schema_json)
{
    if (!set || !tool || !tool->create || !tool->execute)
        return df_error(DF_EINVAL, "df_tool_set_add: no set, or a tool class without create / execute");
    if (!schema_json && !(schema_json = tool->schema))
        return df_error(DF_EINVAL, "tool class '%s' has no default schema: the entry needs a tool_schema",
                        tool->name ? tool->name : "(unnamed)");
    json_t *schema = NULL;
    const char *name = NULL;
    int rc = check_schema(schema_json, &schema, &name);
    if (rc)
        return rc;
    for (int i = 0; i < set->n; i++)
        if (!strcmp(set->names[i], name)) {
            rc = df_error(DF_EINVAL, "a second tool named '%s' (function names must be unique)", name);
            json_decref(schema);
            return rc;
        }
    if (set->n == set->cap) {
        int cap = set->cap ? 2 * set->cap : 4;
        set_tool *t = realloc(set->tools, (size_t)cap * sizeof *t);
        if (t)
            set->tools = t;
        const char **nm = t ? realloc(set->names, (size_t)cap * sizeof *nm) : NULL;
        if (nm)
            set->names = nm;
        if (!t || !nm) {
            json_decref(schema);
            return df_error(DF_ENOMEM, "out of memory");
        }
        set->cap = cap;
    }
    set_tool st = {.vt = *tool, .schema = schema, .name = strdup(name)};
    if (!st.name) {
        json_decref(schema);
        return df_error(DF_ENOMEM, "out of memory");
    }
    if (tool->init && (rc = tool->init(config_json ? config_json : "{}", &st.state))) {
        df_error_wrap(rc, "tool '%s' (class '%s'): init", name, tool->name ? tool->name : "?");
        free(st.name);
        json_decref(schema);
        return rc;
    }
    set->names[set->n] = st.name;
    set->tools[set->n++] = st;
    return DF_OK;
}

int df_tool_set_tools_json(const df_tool_set *set, char **out)
{
    *out = NULL;
    json_t *a = json_array();
    for (int i = 0; a && set && i < set->n; i++)
        if (json_array_append(a, set->tools[i].schema)) {
            json_decref(a);
            a = NULL;
        }
    *out = a ? json_dumps(a, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(a);
    return *out ? DF_OK : df_error(DF_ENOMEM, "out of memory");
}

/* ---- the config file ------------------------------------------------------------------------------- */

/* One `tools` entry: class, config (type native), optional schema. Errors carry no file / entry. */
static int load_entry(df_tool_set *set, json_t *entry, df_tool_plugin_loader load)
{
    if (!json_is_object(entry))
        return df_error(DF_EINVAL, "is not a mapping");
    json_t *cls = json_object_get(entry, "class_name"), *cfg = json_object_get(entry, "config");
    json_t *schema = json_object_get(entry, "tool_schema");
    int rc = agent_known_keys(entry, "class_name|config|tool_schema", "an entry holds class_name, config, tool_schema", NULL);
    if (rc)
        return rc;
    if (!json_is_string(cls))
        return df_error(DF_EINVAL, "has no class_name");
    if (cfg && !json_is_null(cfg) && !json_is_object(cfg))
        return df_error(DF_EINVAL, "config is not a mapping");
    json_t *type = json_object_get(cfg, "type");
    if (type && !json_is_string(type))
        return df_error(DF_EINVAL, "config.type is not a string");
    const char *t = type ? json_string_value(type) : "native"; /* verl <= 0.4 files have no type */
    if (!strcmp(t, "mcp") || !strcmp(t, "benchmax"))
        return df_error(DF_EUNSUPPORTED, "config.type '%s' is not supported (native tools only: a built-in "
                                         "class or a C plugin)", t);
    if (strcmp(t, "native"))
        return df_error(DF_EINVAL, "unknown config.type '%s' (native, mcp, benchmax)", t);
    const df_tool *vt = NULL;
    rc = agent_tool_class_resolve(json_string_value(cls), load, &vt);
    if (rc)
        return rc;
    char *cfg_text = json_is_object(cfg) ? json_dumps(cfg, JSON_COMPACT | JSON_PRESERVE_ORDER) : strdup("{}");
    char *schema_text = schema && !json_is_null(schema) ? json_dumps(schema, JSON_COMPACT | JSON_PRESERVE_ORDER)
                                                         : NULL;
    if (!cfg_text || (schema && !json_is_null(schema) && !schema_text))
        rc = df_error(DF_ENOMEM, "out of memory");
    else
        rc = df_tool_set_add(set, vt, cfg_text, schema_text);
    free(cfg_text);
    free(schema_text);
    return rc;
}

struct each_ctx {
    df_tool_set *set;
    df_tool_plugin_loader load;
};

static int each_entry(void *user, json_t *e)
{
    struct each_ctx *c = user;
    return load_entry(c->set, e, c->load);
}

int df_tool_set_load(const char *path, df_tool_plugin_loader load_plugin, df_tool_set **out)
{
    *out = NULL;
    if (!path)
        return df_error(DF_EINVAL, "df_tool_set_load: NULL path");
    df_tool_set *set = NULL;
    int rc = df_tool_set_create(&set);
    struct each_ctx c = {set, load_plugin};
    if (!rc)
        rc = agent_yaml_each(path, "tools", "tool", each_entry, &c);
    if (rc) {
        df_tool_set_free(set);
        return rc;
    }
    *out = set;
    return DF_OK;
}

/* ---- sessions -------------------------------------------------------------------------------------- */

void df_tool_session_free(df_tool_session *s)
{
    if (!s)
        return;
    for (int i = 0; s->inst && i < s->set->n; i++)
        if (s->set->tools[i].vt.release)
            s->set->tools[i].vt.release(s->set->tools[i].state, s->inst[i]);
    free(s->inst);
    free(s);
}

/* tools_kwargs[name].create_kwargs as JSON text ("{}" when absent). */
static char *create_kwargs(const json_t *kw, const char *name)
{
    json_t *ck = json_object_get(json_object_get(kw, name), "create_kwargs");
    return json_is_object(ck) ? json_dumps(ck, JSON_COMPACT | JSON_PRESERVE_ORDER) : strdup("{}");
}

int df_tool_session_create(const df_tool_set *set, const char *instance_id, const char *tools_kwargs,
                           df_tool_session **out)
{
    *out = NULL;
    if (!set)
        return df_error(DF_EINVAL, "df_tool_session_create: NULL tool set");
    json_error_t e;
    json_t *kw = tools_kwargs ? json_loads(tools_kwargs, 0, &e) : json_object();
    if (!json_is_object(kw)) {
        json_decref(kw);
        return df_error(DF_EINVAL, "tools_kwargs is not a JSON object%s%s", kw ? "" : ": ", kw ? "" : e.text);
    }
    df_tool_session *s = calloc(1, sizeof *s);
    void **inst = s ? calloc((size_t)set->n + 1, sizeof *inst) : NULL;
    int rc = inst ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    int made = 0;
    for (; !rc && made < set->n; made++) {
        const set_tool *t = &set->tools[made];
        char *ck = create_kwargs(kw, t->name);
        size_t idn = strlen(instance_id ? instance_id : "") + strlen(t->name) + 2;
        char *id = malloc(idn);
        if (!ck || !id) {
            rc = df_error(DF_ENOMEM, "out of memory");
        } else {
            snprintf(id, idn, "%s/%s", instance_id ? instance_id : "", t->name);
            if ((rc = t->vt.create(t->state, id, ck, &inst[made])))
                df_error_wrap(rc, "tool '%s': create", t->name);
        }
        free(ck);
        free(id);
        if (rc)
            break;
    }
    json_decref(kw);
    if (rc) {
        for (int i = 0; i < made; i++)
            if (set->tools[i].vt.release)
                set->tools[i].vt.release(set->tools[i].state, inst[i]);
        free(inst);
        free(s);
        return rc;
    }
    s->set = set;
    s->inst = inst;
    *out = s;
    return DF_OK;
}

static int answer(df_tool_result *out, char *text)
{
    df_tool_result_clear(out);
    out->text = text;
    return text ? DF_OK : df_error(DF_ENOMEM, "out of memory");
}

int df_tool_session_execute(df_tool_session *s, const df_tool_call *call, df_tool_result *out)
{
    memset(out, 0, sizeof *out);
    if (!s || !call)
        return df_error(DF_EINVAL, "df_tool_session_execute: NULL session or call");
    s->n_calls++;
    if (call->error)
        return answer(out, strdup(call->error));
    int i = 0;
    while (i < s->set->n && (!call->name || strcmp(s->set->names[i], call->name)))
        i++;
    if (i == s->set->n)
        return answer(out, agent_tool_error("unknown tool '%s'", call->name ? call->name : "(none)"));
    const set_tool *t = &s->set->tools[i];
    df_clear_error();
    int rc = t->vt.execute(t->state, s->inst[i], call->arguments ? call->arguments : "{}", out);
    if (rc == DF_ENOMEM) {
        df_tool_result_clear(out);
        return rc;
    }
    if (rc) /* the tool's own failure is the model's answer (verl: "Error when executing tool: {e}") */
        return answer(out, agent_tool_error("%s", df_last_error()[0] ? df_last_error() : "the tool failed"));
    return out->text ? DF_OK : answer(out, strdup(""));
}

int df_tool_session_reward(df_tool_session *s, int i, double *reward)
{
    *reward = 0;
    if (!s || i < 0 || i >= s->set->n)
        return df_error(DF_EINVAL, "df_tool_session_reward: no tool %d (the set has %d)", i, s ? s->set->n : 0);
    const set_tool *t = &s->set->tools[i];
    int rc = t->vt.calc_reward ? t->vt.calc_reward(t->state, s->inst[i], reward) : DF_OK;
    return rc ? df_error_wrap(rc, "tool '%s': calc_reward", t->name) : DF_OK;
}

int64_t df_tool_session_n_calls(const df_tool_session *s) { return s ? s->n_calls : 0; }
