/*
 * Fuzz target: YAML bytes through the one YAML -> JSON walker (src/config/yaml_json.h:
 * df_yaml_load's guard and parse, then df_yaml_node_json), as the agent's tool / interaction /
 * environment files and config map values reach it. Properties of an accepted input: the JSON
 * nests at most DF_YAML_MAX_DEPTH deep and holds at most DF_YAML_MAX_NODES values, it prints,
 * and a second conversion of the same document is equal (the walker keeps no state). A refusal
 * names the input.
 */
#include "fuzz.h"

#include "config/yaml_guard.h"
#include "config/yaml_json.h"
#include "distflow/common.h"

int df_fuzz_status;

#define NAME "in.yaml"

/* Values in v (itself included); *depth the deepest level below v (v is 0). */
static size_t count(json_t *v, int level, int *depth)
{
    if (level > *depth)
        *depth = level;
    size_t n = 1;
    if (json_is_array(v))
        for (size_t i = 0; i < json_array_size(v); i++)
            n += count(json_array_get(v, i), level + 1, depth);
    const char *key;
    json_t *val;
    if (json_is_object(v)) {
        json_object_foreach(v, key, val) {
            n += count(val, level + 1, depth);
        }
    }
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    df_clear_error();
    yaml_document_t doc;
    df_fuzz_status = df_yaml_load((const char *)data, size, NAME, DF_YAML_FILE, &doc);
    if (df_fuzz_status) {
        DF_FUZZ_CHECK(!strncmp(df_last_error(), NAME, strlen(NAME)));
        return 0;
    }
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    json_t *j = NULL, *again = NULL;
    df_fuzz_status = root ? df_yaml_node_json(&doc, root, NAME, &j) : df_error(DF_EINVAL, NAME ": empty");
    if (df_fuzz_status) {
        DF_FUZZ_CHECK(j == NULL && !strncmp(df_last_error(), NAME ":", strlen(NAME) + 1));
    } else {
        int depth = 0;
        DF_FUZZ_CHECK(j && count(j, 0, &depth) <= DF_YAML_MAX_NODES && depth <= DF_YAML_MAX_DEPTH);
        char *text = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
        DF_FUZZ_CHECK(text != NULL);
        free(text);
        DF_FUZZ_CHECK(df_yaml_node_json(&doc, root, NAME, &again) == DF_OK && json_equal(j, again));
    }
    json_decref(j);
    json_decref(again);
    yaml_document_delete(&doc);
    return 0;
}
