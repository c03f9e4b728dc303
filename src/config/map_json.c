/* A DF_CFG_MAP value as JSON (df_config_map_json, distflow/config.h): for the free-form mappings
 * that code hands on as data, such as data.apply_chat_template_kwargs, whose entries become
 * chat-template variables. The input is the canonical flow text map.c produced, so it parses;
 * scalars are typed as the config types YAML (scalar.c), as OmegaConf would hand them to Python. */
#include "config/config_internal.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#define JSON_MAX_DEPTH 32

static bool plain(const yaml_node_t *n)
{
    return n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE || n->data.scalar.style == YAML_ANY_SCALAR_STYLE;
}

/* A scalar: a quoted one is a string; a plain one null, a bool, an int, a float, else a string. */
static json_t *scalar(const yaml_node_t *n)
{
    const char *t = (const char *)n->data.scalar.value;
    bool b;
    int64_t i;
    double f;
    if (!plain(n))
        return json_string(t);
    if (cfg_is_null_text(t, true))
        return json_null();
    if (!cfg_parse_bool(t, &b))
        return json_boolean(b);
    if (!cfg_parse_int(t, &i))
        return json_integer((json_int_t)i);
    if (!cfg_parse_float(t, &f) && isfinite(f)) /* JSON has no inf / nan: those stay text */
        return json_real(f);
    return json_string(t);
}

static json_t *node_json(yaml_document_t *doc, yaml_node_t *n, int depth)
{
    if (!n || depth > JSON_MAX_DEPTH)
        return NULL;
    if (n->type == YAML_SCALAR_NODE)
        return scalar(n);
    json_t *out = n->type == YAML_SEQUENCE_NODE ? json_array() : json_object();
    if (n->type == YAML_SEQUENCE_NODE) {
        for (yaml_node_item_t *it = n->data.sequence.items.start; out && it < n->data.sequence.items.top;
             it++)
            if (json_array_append_new(out, node_json(doc, yaml_document_get_node(doc, *it), depth + 1))) {
                json_decref(out);
                out = NULL;
            }
        return out;
    }
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; out && p < n->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key);
        if (!k || k->type != YAML_SCALAR_NODE || /* map.c wrote scalar keys */
            json_object_set_new(out, (const char *)k->data.scalar.value,
                                node_json(doc, yaml_document_get_node(doc, p->value), depth + 1))) {
            json_decref(out);
            out = NULL;
        }
    }
    return out;
}

int df_config_map_json(const char *map_text, char **json)
{
    *json = NULL;
    if (!map_text)
        return DF_OK;
    yaml_parser_t p;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&p))
        return df_error(DF_ENOMEM, "config: out of memory");
    yaml_parser_set_input_string(&p, (const unsigned char *)map_text, strlen(map_text));
    int rc = DF_OK;
    if (!yaml_parser_load(&p, &doc)) {
        rc = df_error(DF_EINVAL, "config: mapping text does not parse: %s", map_text);
    } else {
        yaml_node_t *root = yaml_document_get_root_node(&doc);
        json_t *j = root && root->type == YAML_MAPPING_NODE ? node_json(&doc, root, 0) : NULL;
        if (!root || root->type != YAML_MAPPING_NODE)
            rc = df_error(DF_EINVAL, "config: not a mapping: %s", map_text);
        else if (!j || !(*json = json_dumps(j, JSON_COMPACT)))
            rc = df_error(DF_ENOMEM, "config: out of memory converting a mapping to JSON");
        json_decref(j);
        yaml_document_delete(&doc);
    }
    yaml_parser_delete(&p);
    return rc;
}
