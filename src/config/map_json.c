/* A DF_CFG_MAP value as JSON (df_config_map_json, distflow/config.h): for the free-form mappings
 * that code hands on as data, such as data.apply_chat_template_kwargs, whose entries become
 * chat-template variables. The input is the canonical flow text map.c produced; the shared walker
 * (yaml_json.h) types its scalars as the config types YAML (scalar.c), as OmegaConf would hand them
 * to Python, and applies the `<<` merge keys map.c keeps. */
#include "config/config_internal.h"
#include "config/yaml_guard.h"
#include "config/yaml_json.h"

#include <string.h>

int df_config_map_json(const char *map_text, char **json)
{
    *json = NULL;
    if (!map_text)
        return DF_OK;
    yaml_document_t doc;
    int rc = df_yaml_load(map_text, strlen(map_text), "config: mapping text", DF_YAML_VALUE, &doc);
    if (rc)
        return rc;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    json_t *j = NULL;
    if (!root || root->type != YAML_MAPPING_NODE)
        rc = df_error(DF_EINVAL, "config: not a mapping: %s", map_text);
    else if (!(rc = df_yaml_node_json(&doc, root, "config: mapping text", &j)) &&
             !(*json = json_dumps(j, JSON_COMPACT)))
        rc = df_error(DF_ENOMEM, "config: out of memory converting a mapping to JSON");
    json_decref(j);
    yaml_document_delete(&doc);
    return rc;
}
