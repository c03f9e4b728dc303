/* YAML files as JSON values (agent_internal.h, agent_yaml_load_json): verl's tool and interaction
 * configs are YAML whose `config` and `tool_schema` parts are handed on as JSON. libyaml's document
 * API resolves anchors and aliases; the depth bound keeps an alias cycle from recursing forever. */
#include "agent/agent_internal.h"

#include "config/config_internal.h"
#include "config/yaml_guard.h"
#include "util/fsutil.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#define MAX_DEPTH 64
#define MAX_NODES ((size_t)1 << 20) /* aliases can repeat a subtree exponentially often */

typedef struct conv {
    const char *path;
    yaml_document_t *doc;
    size_t nodes;
} conv;

static int at(const conv *c, const yaml_node_t *n, int code, const char *what)
{
    return df_error(code, "%s:%d:%d: %s", c->path, (int)n->start_mark.line + 1, (int)n->start_mark.column + 1,
                    what);
}

static bool is_int(const char *s)
{
    if (*s == '-' || *s == '+')
        s++;
    if (!*s)
        return false;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return false;
    return true;
}

/* A plain scalar typed as YAML's core schema; a quoted one is a string. */
static json_t *scalar(const yaml_node_t *n)
{
    const char *s = (const char *)n->data.scalar.value;
    size_t len = n->data.scalar.length;
    /* libyaml's loader tags every untagged scalar !!str, so only the style tells a quoted string */
    if (n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return json_stringn(s, len);
    if (!len || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL"))
        return json_null();
    if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "TRUE"))
        return json_true();
    if (!strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "FALSE"))
        return json_false();
    if (is_int(s) && len < 19)
        return json_integer(strtoll(s, NULL, 10));
    char *end = NULL;
    errno = 0;
    double d = strtod(s, &end);
    bool numeric = end && !*end && !errno && strpbrk(s, "0123456789") && !strpbrk(s, "xXnN");
    return numeric ? json_real(d) : json_stringn(s, len);
}

static int convert(conv *c, yaml_node_t *n, int depth, json_t **out)
{
    *out = NULL;
    if (depth > MAX_DEPTH)
        return at(c, n, DF_EINVAL, "nested deeper than 64 levels (or an alias refers to itself)");
    if (++c->nodes > MAX_NODES)
        return at(c, n, DF_EINVAL, "more than 2^20 values once aliases are expanded");
    if (n->type == YAML_SCALAR_NODE) {
        *out = scalar(n);
        return *out ? DF_OK : df_error(DF_EINVAL, "%s:%d: a scalar that is not valid UTF-8", c->path,
                                       (int)n->start_mark.line + 1);
    }
    json_t *v = n->type == YAML_SEQUENCE_NODE ? json_array() : json_object();
    if (!v)
        return df_error(DF_ENOMEM, "out of memory");
    int rc = DF_OK;
    if (n->type == YAML_SEQUENCE_NODE) {
        for (yaml_node_item_t *it = n->data.sequence.items.start; !rc && it < n->data.sequence.items.top; it++) {
            json_t *item = NULL;
            rc = convert(c, yaml_document_get_node(c->doc, *it), depth + 1, &item);
            if (!rc && json_array_append_new(v, item))
                rc = df_error(DF_ENOMEM, "out of memory");
        }
    } else {
        for (yaml_node_pair_t *p = n->data.mapping.pairs.start; !rc && p < n->data.mapping.pairs.top; p++) {
            yaml_node_t *k = yaml_document_get_node(c->doc, p->key);
            if (k->type != YAML_SCALAR_NODE) {
                rc = at(c, k, DF_EINVAL, "a mapping key that is not a scalar");
                break;
            }
            const char *key = (const char *)k->data.scalar.value;
            if (json_object_get(v, key)) { /* libyaml keeps both; JSON would keep the last silently */
                char what[160];
                snprintf(what, sizeof what, "the key '%.100s' appears twice in one mapping", key);
                rc = at(c, k, DF_EINVAL, what);
                break;
            }
            json_t *val = NULL;
            rc = convert(c, yaml_document_get_node(c->doc, p->value), depth + 1, &val);
            if (!rc && json_object_set_new(v, key, val))
                rc = at(c, k, DF_EINVAL, "a mapping key that is not valid UTF-8");
        }
    }
    if (rc)
        json_decref(v);
    else
        *out = v;
    return rc;
}

int agent_yaml_load_json(const char *path, json_t **out)
{
    *out = NULL;
    char *text = NULL;
    size_t len = 0;
    int rc = df_read_file(path, &text, &len);
    if (rc)
        return rc;
    if ((rc = df_yaml_check_text(text, len, path))) {
        free(text);
        return rc;
    }
    yaml_parser_t p;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&p)) {
        free(text);
        return df_error(DF_ENOMEM, "%s: out of memory", path);
    }
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    if (!yaml_parser_load(&p, &doc)) {
        rc = df_error(DF_EINVAL, "%s:%d:%d: %s", path, (int)p.problem_mark.line + 1, (int)p.problem_mark.column + 1,
                      p.problem ? p.problem : "YAML error");
        yaml_parser_delete(&p);
        free(text);
        return rc;
    }
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    conv c = {path, &doc, 0};
    rc = root ? convert(&c, root, 0, out) : df_error(DF_EINVAL, "%s: empty YAML document", path);
    yaml_document_delete(&doc);
    yaml_parser_delete(&p);
    free(text);
    return rc;
}

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
    char *text = NULL;
    size_t len = 0;
    yaml_parser_t p;
    yaml_document_t doc;
    bool found = false;
    if (df_read_file(path, &text, &len))
        return false;
    if (!df_yaml_check_text(text, len, path) && yaml_parser_initialize(&p)) {
        yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
        if (yaml_parser_load(&p, &doc)) {
            yaml_node_t *k = find_key(&doc, yaml_document_get_root_node(&doc), keys, n);
            if ((found = k != NULL))
                *line = (int)k->start_mark.line + 1, *col = (int)k->start_mark.column + 1;
            yaml_document_delete(&doc);
        }
        yaml_parser_delete(&p);
    }
    free(text);
    return found;
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
    int rc = agent_yaml_load_json(path, &root);
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
