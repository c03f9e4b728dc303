/* verl's YAML config files (agent_internal.h): tool and interaction configs, whose `config` and
 * `tool_schema` parts are handed on as JSON, and environment configs. They are read by the config
 * layer's one YAML -> JSON walker (config/yaml_json.h: typing, anchors, merge keys, bounds, errors at
 * path:line:col); here: where a key stands in a file, unknown keys, and the walk of a top-level list. */
#include "agent/agent_internal.h"

#include "config/config_internal.h"
#include "config/yaml_guard.h"
#include "config/yaml_json.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

/* The key node of keys[0..n) from `root`, each a mapping key under the last; NULL when absent. */
static yaml_node_t *find_key(yaml_document_t *doc, yaml_node_t *node, const char *const *keys, int n)
{
    yaml_node_t *key = NULL;
    for (int i = 0; i < n; i++) {
        if (!node || node->type != YAML_MAPPING_NODE)
            return NULL;
        yaml_node_t *next = NULL;
        for (yaml_node_pair_t *p = node->data.mapping.pairs.start; p < node->data.mapping.pairs.top; p++) {
            yaml_node_t *k = yaml_document_get_node(doc, p->key);
            if (k && k->type == YAML_SCALAR_NODE && !strcmp((const char *)k->data.scalar.value, keys[i])) {
                key = k, next = yaml_document_get_node(doc, p->value);
                break;
            }
        }
        if (!next)
            return NULL;
        node = next;
    }
    return key;
}

bool agent_yaml_locate(const char *path, const char *const *keys, int n, int *line, int *col)
{
    yaml_document_t doc;
    if (df_yaml_load_file(path, &doc))
        return false;
    yaml_node_t *k = find_key(&doc, yaml_document_get_root_node(&doc), keys, n);
    if (k)
        *line = (int)k->start_mark.line + 1, *col = (int)k->start_mark.column + 1;
    yaml_document_delete(&doc);
    return k != NULL;
}

int agent_known_keys(json_t *o, const char *choices, const char *holds, const char **bad)
{
    const char *key;
    json_t *val;
    json_object_foreach(o, key, val) {
        size_t n = strlen(key);
        bool known = false;
        for (const char *p = choices; *p && !known; p += strcspn(p, "|"), p += *p == '|')
            known = strcspn(p, "|") == n && !strncmp(p, key, n);
        if (known)
            continue;
        char near[64];
        bool hint = cfg_suggest_choice(choices, key, near, sizeof near);
        if (bad)
            *bad = key;
        return df_error(DF_EINVAL, "unknown key '%.100s' (%s)%s%s%s", key, holds, hint ? "; did you mean '" : "",
                        hint ? near : "", hint ? "'?" : "");
    }
    return DF_OK;
}

int agent_yaml_each(const char *path, const char *key, const char *what,
                    int (*fn)(void *user, json_t *entry), void *user)
{
    json_t *root = NULL;
    int rc = df_yaml_file_json(path, &root);
    if (rc)
        return df_error_wrap(rc, "%s config", what);
    json_t *list = json_object_get(root, key);
    char holds[64];
    snprintf(holds, sizeof holds, "the file holds `%s:` only", key);
    if (!json_is_array(list))
        rc = df_error(DF_EINVAL, "%s config %s: no `%s:` list at the top level", what, path, key);
    else if ((rc = agent_known_keys(root, key, holds, NULL)))
        df_error_wrap(rc, "%s config %s", what, path);
    for (size_t i = 0; !rc && i < json_array_size(list); i++) {
        json_t *e = json_array_get(list, i), *cls = json_object_get(e, "class_name");
        if ((rc = fn(user, e)))
            df_error_wrap(rc, "%s config %s: %s[%zu] (class_name '%s')", what, path, key, i,
                          json_is_string(cls) ? json_string_value(cls) : "?");
    }
    json_decref(root);
    return rc;
}
