/* Environment classes and dag.environment_path (include/distflow/env.h): the class registry
 * (built-ins and what plugins register; docs/conventions.md §2: registries are the only globals)
 * and the resolution of a name, a plugin ref or an environment config file into a class + config. */
#include "distflow/env.h"

#include "agent/agent_internal.h"
#include "config/yaml_json.h"
#include "util/fn_registry.h"

#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void class_marker(void) {}

static const df_fn_entry k_envs[] = {
    {"grid_nav", class_marker, &df_env_grid_nav},
    {"guess_number", class_marker, &df_env_guess_number},
};

static df_fn_registry g_envs = {"environment class", k_envs, sizeof k_envs / sizeof *k_envs, NULL, 0, 0, NULL, 0};

void df_env_step_clear(df_env_step *s)
{
    if (!s)
        return;
    free(s->observation);
    free(s->info);
    memset(s, 0, sizeof *s);
}

int df_env_class_register(const df_env *env)
{
    if (!env || !env->name || !env->name[0] || !env->create || !env->reset || !env->step)
        return df_error(DF_EINVAL, "df_env_class_register: an environment class needs a name, create, reset "
                                   "and step");
    return df_fn_registry_add_data(&g_envs, env->name, (df_any_fn)env->step, env, sizeof *env);
}

int df_env_class_lookup(const char *name, const df_env **out)
{
    *out = NULL;
    const df_fn_entry *e = name ? df_fn_registry_find_entry(&g_envs, name) : NULL;
    if (e && e->data) {
        *out = e->data;
        return DF_OK;
    }
    char known[1024];
    df_fn_registry_names(&g_envs, known, sizeof known);
    return df_error(DF_ENOTFOUND, "unknown environment class '%s' (known: %s%s)", name ? name : "(null)", known,
                    agent_is_plugin_ref(name) ? "; a plugin ref must be loaded first (df_plugin_env)" : "");
}

void df_env_spec_clear(df_env_spec *s)
{
    if (!s)
        return;
    free(s->config);
    free(s->source);
    memset(s, 0, sizeof *s);
}

static bool is_yaml(const char *path)
{
    size_t n = strlen(path);
    return (n > 5 && !strcmp(path + n - 5, ".yaml")) || (n > 4 && !strcmp(path + n - 4, ".yml"));
}

/* The class named `name`, loading a plugin ref first when it is one and not yet registered. A
   loader that only checks the library (config check) registers nothing: *out stays NULL. */
static int resolve_class(const char *name, df_env_plugin_loader load, const df_env **out)
{
    *out = NULL;
    if (load && agent_is_plugin_ref(name) && !df_fn_registry_find_entry(&g_envs, name)) {
        int rc = load(name);
        if (rc || !df_fn_registry_find_entry(&g_envs, name))
            return rc;
    }
    return df_env_class_lookup(name, out);
}

/* "path:line:col" of the key keys[n - 1] in the file (just "path" when it cannot be found). The
   lookup may change df_last_error(): call it before setting the message. */
static void where(const char *path, const char *const *keys, int n, char *buf, size_t cap)
{
    int line, col;
    if (agent_yaml_locate(path, keys, n, &line, &col))
        snprintf(buf, cap, "%s:%d:%d", path, line, col);
    else
        snprintf(buf, cap, "%s", path);
}

/* Every key of `o` (the file's top level, or under `parent`) must be one of choices "a|b", with
   `holds` saying what belongs there: a misspelt `confg:` would otherwise leave the defaults on. */
static int known_keys(const char *path, json_t *o, const char *parent, const char *choices, const char *holds)
{
    const char *bad = NULL;
    int rc = agent_known_keys(o, choices, holds, &bad);
    if (!rc)
        return DF_OK;
    char *msg = strdup(df_last_error()), loc[1100];
    const char *keys[2] = {parent ? parent : bad, bad};
    where(path, keys, parent ? 2 : 1, loc, sizeof loc);
    rc = df_error(rc, "environment config %s: %s%s%s", loc, parent ? parent : "", parent ? ": " : "",
                  msg ? msg : "unknown key");
    free(msg);
    return rc;
}

/* The `environment:` mapping of a config file: its name and its config as JSON text. */
static int read_file(const char *path, df_env_plugin_loader load, df_env_spec *out)
{
    json_t *doc = NULL;
    int rc = df_yaml_file_json(path, &doc);
    if (rc)
        return df_error_wrap(rc, "environment config %s", path);
    json_t *env = json_object_get(doc, "environment");
    json_t *name = json_object_get(env, "name"), *cfg = json_object_get(env, "config");
    if (!json_is_object(env))
        rc = df_error(DF_EINVAL, "environment config %s: no `environment:` mapping (with name: and config:)", path);
    else if ((rc = known_keys(path, doc, NULL, "environment", "the file holds `environment:` only")) ||
             (rc = known_keys(path, env, "environment", "name|config", "environment holds name and config")))
        ;
    else if (!json_is_string(name))
        rc = df_error(DF_EINVAL, "environment config %s: environment.name must be a class name or a plugin ref "
                                 "(path/to/libx.so:symbol)", path);
    else if (cfg && !json_is_object(cfg) && !json_is_null(cfg))
        rc = df_error(DF_EINVAL, "environment config %s: environment.config must be a mapping", path);
    else if ((rc = resolve_class(json_string_value(name), load, &out->env)))
        rc = df_error_wrap(rc, "environment config %s: environment.name", path);
    else if (!(out->config = json_is_object(cfg) ? json_dumps(cfg, JSON_COMPACT | JSON_SORT_KEYS) : strdup("{}")))
        rc = df_error(DF_ENOMEM, "out of memory");
    json_decref(doc);
    return rc;
}

/* The key of config `config_json` that message `msg` names as "config.<key>", or NULL. */
static const char *named_key(const char *config_json, const char *msg, char *buf, size_t cap)
{
    json_t *cfg = json_loads(config_json, 0, NULL);
    const char *key, *found = NULL;
    json_t *val;
    json_object_foreach(cfg, key, val) {
        char pat[160];
        snprintf(pat, sizeof pat, "config.%s", key);
        const char *at = strstr(msg, pat);
        size_t n = strlen(pat);
        /* the whole key: config.low is not config.low_x */
        if (at && !(isalnum((unsigned char)at[n]) || at[n] == '_') && strlen(key) < cap) {
            found = strcpy(buf, key);
            break;
        }
    }
    json_decref(cfg);
    return found;
}

/* Make and free one environment, so that a bad config fails when the spec is loaded. Its error
   names the class and the spec's source, with the line of the config key it names in a file. */
static int try_config(const df_env_spec *s, bool file)
{
    void *state = NULL;
    int rc = s->env->create(s->config, &state);
    if (!rc) {
        if (s->env->release)
            s->env->release(state);
        return DF_OK;
    }
    char *msg = strdup(df_last_error()), key[128], loc[1200];
    const char *k = file && msg ? named_key(s->config, msg, key, sizeof key) : NULL;
    if (k) {
        const char *keys[3] = {"environment", "config", k};
        where(s->source, keys, 3, loc, sizeof loc);
        rc = df_error(rc, "environment '%s' (%s, environment.config.%s): %s", s->env->name, loc, k, msg);
    } else {
        rc = df_error(rc, "environment '%s' (%s): %s", s->env->name, s->source, msg ? msg : df_last_error());
    }
    free(msg);
    return rc;
}

int df_env_spec_load(const char *environment_path, df_env_plugin_loader load, df_env_spec *out)
{
    if (!out)
        return df_error(DF_EINVAL, "df_env_spec_load: NULL out");
    memset(out, 0, sizeof *out);
    if (!environment_path || !environment_path[0])
        return df_error(DF_EINVAL, "no environment named (an environment config file, a class name or a "
                                   "plugin ref path/to/libx.so:symbol)");
    int rc = DF_OK;
    if (!(out->source = strdup(environment_path)))
        return df_error(DF_ENOMEM, "out of memory");
    if (is_yaml(environment_path))
        rc = read_file(environment_path, load, out);
    else if (!(rc = resolve_class(environment_path, load, &out->env)) && !(out->config = strdup("{}")))
        rc = df_error(DF_ENOMEM, "out of memory");
    if (!rc && out->env)
        rc = try_config(out, is_yaml(environment_path));
    if (rc)
        df_env_spec_clear(out);
    return rc;
}
