/* df_node and the node enums (include/distflow/dag.h; siiRL execution/dag/node.py). */
#include "distflow/dag.h"

#include "planner/dag_internal.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *const k_type_names[DF_NODE_TYPE_COUNT] = {
    "COMPUTE",      "DATA_LOAD",     "ENV_INTERACT",    "MODEL_INFERENCE", "MODEL_TRAIN",
    "PUT_TO_BUFFER", "GET_FROM_BUFFER", "BARRIER_SYNC", "CUSTOM",
};
static const char *const k_role_names[DF_NODE_ROLE_COUNT] = {
    "DEFAULT", "ACTOR", "ADVANTAGE", "CRITIC", "ROLLOUT", "REFERENCE", "REWARD",
    "DYNAMIC_SAMPLING",
    "DATA_REBALANCE",
    "POSTPROCESS_SAMPLING",
};
static const char *const k_status_names[DF_NODE_STATUS_COUNT] = {
    "PENDING", "READY", "RUNNING", "COMPLETED", "FAILED", "SKIPPED",
};

const char *df_node_type_name(df_node_type t)
{
    return (unsigned)t < DF_NODE_TYPE_COUNT ? k_type_names[t] : "UNKNOWN";
}

const char *df_node_role_name(df_node_role r)
{
    return (unsigned)r < DF_NODE_ROLE_COUNT ? k_role_names[r] : "UNKNOWN";
}

const char *df_node_status_name(df_node_status s)
{
    return (unsigned)s < DF_NODE_STATUS_COUNT ? k_status_names[s] : "UNKNOWN";
}

static int parse_name(const char *what, const char *const *names, int count, const char *s,
                      int *out)
{
    for (int i = 0; s && i < count; i++)
        if (!strcasecmp(s, names[i])) {
            *out = i;
            return DF_OK;
        }
    char known[512];
    size_t len = 0;
    known[0] = '\0';
    for (int i = 0; i < count; i++) {
        size_t n = strlen(names[i]);
        if (len + n + 3 >= sizeof known)
            break;
        if (i)
            memcpy(known + len, ", ", 2), len += 2;
        memcpy(known + len, names[i], n + 1);
        len += n;
    }
    return df_error(DF_EINVAL, "unknown %s '%s' (valid: %s)", what, s ? s : "(null)", known);
}

int df_node_type_parse(const char *s, df_node_type *out)
{
    int v = 0, rc = parse_name("node type", k_type_names, DF_NODE_TYPE_COUNT, s, &v);
    if (!rc)
        *out = (df_node_type)v;
    return rc;
}

int df_node_role_parse(const char *s, df_node_role *out)
{
    int v = 0, rc = parse_name("node role", k_role_names, DF_NODE_ROLE_COUNT, s, &v);
    if (!rc)
        *out = (df_node_role)v;
    return rc;
}

int df_node_status_parse(const char *s, df_node_status *out)
{
    int v = 0, rc = parse_name("node status", k_status_names, DF_NODE_STATUS_COUNT, s, &v);
    if (!rc)
        *out = (df_node_status)v;
    return rc;
}

/* ---- lifetime ---------------------------------------------------------------- */

/* siiRL Node.__init__: only model / compute nodes carry a role. */
int df_node_check_kind(const char *id, df_node_type type, df_node_role role)
{
    if ((unsigned)type >= DF_NODE_TYPE_COUNT)
        return df_error(DF_EINVAL, "node '%s': node type %d out of range", id, (int)type);
    if ((unsigned)role >= DF_NODE_ROLE_COUNT)
        return df_error(DF_EINVAL, "node '%s': node role %d out of range", id, (int)role);
    if (role != DF_ROLE_DEFAULT && type != DF_NODE_COMPUTE && type != DF_NODE_MODEL_TRAIN &&
        type != DF_NODE_MODEL_INFERENCE)
        return df_error(DF_EINVAL,
                        "node '%s': a %s node must have role DEFAULT, not %s (only COMPUTE, "
                        "MODEL_TRAIN and MODEL_INFERENCE nodes take a role)",
                        id, df_node_type_name(type), df_node_role_name(role));
    return DF_OK;
}

int df_node_new(const char *node_id, df_node_type type, df_node_role role, df_node **out)
{
    *out = NULL;
    if (!node_id || !node_id[0])
        return df_error(DF_EINVAL, "node id must be a non-empty string");
    int rc = df_node_check_kind(node_id, type, role);
    if (rc)
        return rc;
    df_node *n = calloc(1, sizeof *n);
    if (!n || !(n->node_id = strdup(node_id))) {
        free(n);
        return df_error(DF_ENOMEM, "out of memory creating node '%s'", node_id);
    }
    n->node_type = type;
    n->node_role = role;
    n->status = DF_STATUS_PENDING;
    *out = n;
    return DF_OK;
}

static void free_strings(char **v, int n)
{
    for (int i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

void df_node_free(df_node *node)
{
    if (!node)
        return;
    free(node->node_id);
    free_strings(node->dependencies, node->n_dependencies);
    free_strings(node->config_keys, node->n_config);
    free_strings(node->config_values, node->n_config);
    free(node->executable_ref);
    df_agent_options_free(node->agent_options);
    free(node);
}

/* Append a copy of s to a string array of length *n (grown by one). */
static int push_string(char ***v, int *n, const char *s)
{
    char *copy = strdup(s);
    char **nv = copy ? realloc(*v, (size_t)(*n + 1) * sizeof *nv) : NULL;
    if (!nv) {
        free(copy);
        return df_error(DF_ENOMEM, "out of memory adding '%s'", s);
    }
    nv[(*n)++] = copy;
    *v = nv;
    return DF_OK;
}

int df_node_add_dependency(df_node *node, const char *dep_id)
{
    if (!dep_id || !dep_id[0])
        return df_error(DF_EINVAL, "node '%s': empty dependency id", node->node_id);
    for (int i = 0; i < node->n_dependencies; i++)
        if (!strcmp(node->dependencies[i], dep_id))
            return DF_OK;
    return push_string(&node->dependencies, &node->n_dependencies, dep_id);
}

void df_node_remove_dependency(df_node *node, const char *dep_id)
{
    for (int i = 0; i < node->n_dependencies; i++) {
        if (strcmp(node->dependencies[i], dep_id) != 0)
            continue;
        free(node->dependencies[i]);
        memmove(&node->dependencies[i], &node->dependencies[i + 1],
                (size_t)(node->n_dependencies - i - 1) * sizeof(char *));
        node->n_dependencies--;
        i--; /* duplicates, if a caller wrote the array directly */
    }
}

int df_node_set_config(df_node *node, const char *key, const char *value)
{
    if (!key || !key[0] || !value)
        return df_error(DF_EINVAL, "node '%s': config needs a non-empty key and a value",
                        node->node_id);
    for (int i = 0; i < node->n_config; i++)
        if (!strcmp(node->config_keys[i], key)) {
            char *v = strdup(value);
            if (!v)
                return df_error(DF_ENOMEM, "node '%s': out of memory setting %s", node->node_id,
                                key);
            free(node->config_values[i]);
            node->config_values[i] = v;
            return DF_OK;
        }
    int nk = node->n_config, nv = node->n_config;
    int rc = push_string(&node->config_keys, &nk, key);
    if (!rc && (rc = push_string(&node->config_values, &nv, value)) != 0) {
        free(node->config_keys[--nk]); /* keep keys and values the same length */
    }
    node->n_config = nk;
    return rc;
}

const char *df_node_get_config(const df_node *node, const char *key)
{
    for (int i = 0; key && i < node->n_config; i++)
        if (!strcmp(node->config_keys[i], key))
            return node->config_values[i];
    return NULL;
}

int df_node_set_executable_ref(df_node *node, const char *ref)
{
    char *copy = NULL;
    if (ref && !(copy = strdup(ref)))
        return df_error(DF_ENOMEM, "node '%s': out of memory setting executable ref",
                        node->node_id);
    free(node->executable_ref);
    node->executable_ref = copy;
    node->fn = NULL;
    return DF_OK;
}

int df_node_copy(const df_node *node, df_node **out)
{
    df_node *c;
    int rc = df_node_new(node->node_id, node->node_type, node->node_role, &c);
    if (rc)
        return rc;
    c->only_forward_compute = node->only_forward_compute;
    c->agent_group = node->agent_group;
    c->retry_limit = node->retry_limit;
    for (int i = 0; !rc && i < node->n_dependencies; i++)
        rc = push_string(&c->dependencies, &c->n_dependencies, node->dependencies[i]);
    for (int i = 0; !rc && i < node->n_config; i++)
        rc = df_node_set_config(c, node->config_keys[i], node->config_values[i]);
    if (!rc)
        rc = df_node_set_executable_ref(c, node->executable_ref);
    if (!rc)
        rc = df_agent_options_copy(node->agent_options, &c->agent_options);
    if (rc) {
        df_node_free(c);
        return rc;
    }
    c->fn = node->fn;
    c->status = node->status;
    c->retries_done = node->retries_done;
    *out = c;
    return DF_OK;
}
