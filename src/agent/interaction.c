/* Interaction sets and sessions (include/distflow/agent.h): verl's interaction registry
 * (verl/interactions/utils/interaction_registry.py) over its interaction config YAML, and one
 * trajectory's instance with BaseInteraction's start / generate_response / calculate_score /
 * finalize lifecycle. */
#include "distflow/agent.h"

#include "agent/agent_internal.h"

#include <ctype.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

typedef struct set_ia {
    df_interaction vt;
    void *state;
    char *name;
} set_ia;

struct df_interaction_set {
    set_ia *items;
    int n, cap;
};

struct df_interaction_session {
    const set_ia *ia;
    void *inst;
};

void df_interaction_result_clear(df_interaction_result *r)
{
    if (r) {
        free(r->text);
        free(r->metrics);
        memset(r, 0, sizeof *r);
    }
}

int df_interaction_set_create(df_interaction_set **out)
{
    *out = calloc(1, sizeof **out);
    return *out ? DF_OK : df_error(DF_ENOMEM, "out of memory");
}

void df_interaction_set_free(df_interaction_set *set)
{
    if (!set)
        return;
    for (int i = 0; i < set->n; i++) {
        if (set->items[i].vt.fini)
            set->items[i].vt.fini(set->items[i].state);
        free(set->items[i].name);
    }
    free(set->items);
    free(set);
}

int df_interaction_set_size(const df_interaction_set *set) { return set ? set->n : 0; }

static const set_ia *find(const df_interaction_set *set, const char *name)
{
    for (int i = 0; set && i < set->n; i++)
        if (!strcmp(set->items[i].name, name))
            return &set->items[i];
    return NULL;
}

int df_interaction_set_add(df_interaction_set *set, const char *name, const df_interaction *ia, const char *config_json)
{
    if (!set || !ia || !ia->start || !ia->generate_response)
        return df_error(DF_EINVAL, "df_interaction_set_add: no set, or a class without start / generate_response");
    if (!name && !(name = ia->name))
        return df_error(DF_EINVAL, "df_interaction_set_add: no name");
    if (find(set, name))
        return df_error(DF_EINVAL, "a second interaction named '%s'", name);
    if (set->n == set->cap) {
        int cap = set->cap ? 2 * set->cap : 4;
        set_ia *p = realloc(set->items, (size_t)cap * sizeof *p);
        if (!p)
            return df_error(DF_ENOMEM, "out of memory");
        set->items = p;
        set->cap = cap;
    }
    set_ia it = {.vt = *ia, .name = strdup(name)};
    if (!it.name)
        return df_error(DF_ENOMEM, "out of memory");
    int rc = ia->init ? ia->init(config_json ? config_json : "{}", &it.state) : DF_OK;
    if (rc) {
        free(it.name);
        return df_error_wrap(rc, "interaction '%s': init", name);
    }
    set->items[set->n++] = it;
    return DF_OK;
}

/* verl's default name: the class's last component, lowercased, without "interaction". */
static char *default_name(const char *class_name)
{
    const char *last = strrchr(class_name, '.');
    const char *colon = strrchr(class_name, ':'); /* a plugin ref: its symbol */
    last = colon && (!last || colon > last) ? colon : last;
    char *s = strdup(last ? last + 1 : class_name);
    if (!s)
        return NULL;
    for (char *p = s; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    char *at = strstr(s, "interaction");
    if (at && at != s)
        memmove(at, at + strlen("interaction"), strlen(at + strlen("interaction")) + 1);
    return s;
}

static int load_entry(df_interaction_set *set, json_t *e, df_tool_plugin_loader load)
{
    if (!json_is_object(e))
        return df_error(DF_EINVAL, "is not a mapping");
    json_t *cls = json_object_get(e, "class_name"), *name = json_object_get(e, "name");
    json_t *cfg = json_object_get(e, "config");
    int rc = agent_known_keys(e, "name|class_name|config", "an entry holds name, class_name, config", NULL);
    if (rc)
        return rc;
    if (!json_is_string(cls))
        return df_error(DF_EINVAL, "has no class_name");
    if (name && !json_is_null(name) && (!json_is_string(name) || !json_string_length(name)))
        return df_error(DF_EINVAL, "name is not a non-empty string");
    if (cfg && !json_is_null(cfg) && !json_is_object(cfg))
        return df_error(DF_EINVAL, "config is not a mapping");
    const df_interaction *vt = NULL;
    rc = agent_interaction_class_resolve(json_string_value(cls), load, &vt);
    if (rc)
        return rc;
    char *nm = json_is_string(name) ? strdup(json_string_value(name)) : default_name(json_string_value(cls));
    char *cfg_text = json_is_object(cfg) ? json_dumps(cfg, JSON_COMPACT | JSON_PRESERVE_ORDER) : strdup("{}");
    rc = nm && cfg_text ? df_interaction_set_add(set, nm, vt, cfg_text) : df_error(DF_ENOMEM, "out of memory");
    free(nm);
    free(cfg_text);
    return rc;
}

struct each_ctx {
    df_interaction_set *set;
    df_tool_plugin_loader load;
};

static int each_entry(void *user, json_t *e)
{
    struct each_ctx *c = user;
    return load_entry(c->set, e, c->load);
}

int df_interaction_set_load(const char *path, df_tool_plugin_loader load_plugin, df_interaction_set **out)
{
    *out = NULL;
    if (!path)
        return df_error(DF_EINVAL, "df_interaction_set_load: NULL path");
    df_interaction_set *set = NULL;
    int rc = df_interaction_set_create(&set);
    struct each_ctx c = {set, load_plugin};
    if (!rc)
        rc = agent_yaml_each(path, "interaction", "interaction", each_entry, &c);
    if (rc) {
        df_interaction_set_free(set);
        return rc;
    }
    *out = set;
    return DF_OK;
}

int df_interaction_session_start(const df_interaction_set *set, const char *instance_id, const char *kwargs,
                                 df_interaction_session **out)
{
    *out = NULL;
    json_error_t e;
    json_t *kw = kwargs ? json_loads(kwargs, 0, &e) : json_object();
    if (!json_is_object(kw)) {
        json_decref(kw);
        return df_error(DF_EINVAL, "interaction_kwargs is not a JSON object%s%s", kw ? "" : ": ", kw ? "" : e.text);
    }
    json_t *nm = json_object_get(kw, "name");
    const char *name = json_is_string(nm) ? json_string_value(nm) : "gsm8k"; /* verl's default */
    const set_ia *ia = find(set, name);
    int rc = DF_OK;
    if (!ia) {
        char known[512] = "";
        for (int i = 0; set && i < set->n; i++) {
            size_t l = strlen(known);
            snprintf(known + l, sizeof known - l, "%s%s", i ? ", " : "", set->items[i].name);
        }
        rc = df_error(DF_ENOTFOUND, "no interaction named '%s' (the config has: %s)", name,
                      known[0] ? known : "none");
    }
    df_interaction_session *s = rc ? NULL : calloc(1, sizeof *s);
    if (!rc && !s)
        rc = df_error(DF_ENOMEM, "out of memory");
    if (!rc && (rc = ia->vt.start(ia->state, instance_id ? instance_id : "", kwargs ? kwargs : "{}", &s->inst)))
        df_error_wrap(rc, "interaction '%s': start", name);
    json_decref(kw);
    if (rc) {
        free(s);
        return rc;
    }
    s->ia = ia;
    *out = s;
    return DF_OK;
}

int df_interaction_session_respond(df_interaction_session *s, const char *messages, df_interaction_result *out)
{
    memset(out, 0, sizeof *out);
    if (!s || !messages)
        return df_error(DF_EINVAL, "df_interaction_session_respond: NULL session or messages");
    int rc = s->ia->vt.generate_response(s->ia->state, s->inst, messages, out);
    if (rc) {
        df_interaction_result_clear(out);
        return df_error_wrap(rc, "interaction '%s'", s->ia->name);
    }
    if (!out->text && !(out->text = strdup("")))
        return df_error(DF_ENOMEM, "out of memory");
    return DF_OK;
}

int df_interaction_session_score(df_interaction_session *s, double *score)
{
    *score = 0;
    if (!s)
        return df_error(DF_EINVAL, "df_interaction_session_score: NULL session");
    int rc = s->ia->vt.calculate_score ? s->ia->vt.calculate_score(s->ia->state, s->inst, score) : DF_OK;
    return rc ? df_error_wrap(rc, "interaction '%s': calculate_score", s->ia->name) : DF_OK;
}

void df_interaction_session_free(df_interaction_session *s)
{
    if (!s)
        return;
    if (s->ia->vt.finalize)
        s->ia->vt.finalize(s->ia->state, s->inst);
    free(s);
}
