/*
 * Workflow files (include/distflow/dag.h, df_workflow_load): a task graph
 * written as YAML in siiRL's format (siirl/execution/dag/config_loader.py,
 * siirl/client/config/workflow_*.yaml), loaded by the config layer's guarded
 * df_yaml_load and typed by its scalar predicates (config/yaml_json.h).
 * libyaml's document API resolves anchors and aliases; `<<` merge keys are
 * applied here, where a key is looked up.
 */
#include "distflow/dag.h"

#include "config/yaml_guard.h"
#include "config/yaml_json.h"
#include "planner/dag_internal.h"
#include "util/fsutil.h"
#include "util/sbuf.h"
#include "util/warn.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#define MAX_DEPTH 32
#define MAX_VALUE_BYTES ((size_t)1 << 20) /* a node's config value as text */

typedef struct {
    const char *path;
    yaml_document_t doc;
    yaml_node_t *global; /* top-level global_config mapping (for !Ref), or NULL */
    df_warn_fn warn;
    void *user;
} wf;

static int line_of(const yaml_node_t *n) { return n ? (int)n->start_mark.line + 1 : 0; }

static yaml_node_t *node_at(wf *w, int idx) { return yaml_document_get_node(&w->doc, idx); }

static const char *scalar(const yaml_node_t *n)
{
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

/* "file:line: node 'id': " prefix for messages about a node. */
static int node_err(wf *w, const yaml_node_t *at, const char *id, const char *fmt, ...)
    DF_PRINTF(4, 5);
static int node_err(wf *w, const yaml_node_t *at, const char *id, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return df_error(DF_EINVAL, "%s:%d: node '%s': %s", w->path, line_of(at), id, msg);
}

/* ---- mappings with `<<` merge keys ------------------------------------------ */

/* Value of `key` in mapping m: its own pairs first, then merge sources in order
 * (YAML merge-key semantics: explicit keys win, earlier sources win). */
static yaml_node_t *map_get(wf *w, yaml_node_t *m, const char *key, int depth)
{
    if (!m || m->type != YAML_MAPPING_NODE || depth > MAX_DEPTH)
        return NULL;
    for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
        const char *k = scalar(node_at(w, p->key));
        if (k && !strcmp(k, key))
            return node_at(w, p->value);
    }
    for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
        const char *k = scalar(node_at(w, p->key));
        if (!k || strcmp(k, "<<"))
            continue;
        yaml_node_t *src = node_at(w, p->value);
        if (src && src->type == YAML_SEQUENCE_NODE) {
            for (yaml_node_item_t *it = src->data.sequence.items.start;
                 it < src->data.sequence.items.top; it++) {
                yaml_node_t *v = map_get(w, node_at(w, *it), key, depth + 1);
                if (v)
                    return v;
            }
        } else {
            yaml_node_t *v = map_get(w, src, key, depth + 1);
            if (v)
                return v;
        }
    }
    return NULL;
}

/* Call fn on every key of m, merged ones included (a key may be seen twice). */
typedef int (*key_fn)(wf *w, const char *key, yaml_node_t *knode, void *arg);
static int map_keys(wf *w, yaml_node_t *m, key_fn fn, void *arg, int depth)
{
    if (!m || m->type != YAML_MAPPING_NODE || depth > MAX_DEPTH)
        return DF_OK;
    for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
        yaml_node_t *kn = node_at(w, p->key);
        const char *k = scalar(kn);
        int rc = DF_OK;
        if (!k)
            rc = df_error(DF_EINVAL, "%s:%d: mapping keys must be scalars", w->path, line_of(kn));
        else if (strcmp(k, "<<"))
            rc = fn(w, k, kn, arg);
        else {
            yaml_node_t *src = node_at(w, p->value);
            if (src && src->type == YAML_SEQUENCE_NODE) {
                for (yaml_node_item_t *it = src->data.sequence.items.start;
                     !rc && it < src->data.sequence.items.top; it++)
                    rc = map_keys(w, node_at(w, *it), fn, arg, depth + 1);
            } else if (src && src->type == YAML_MAPPING_NODE)
                rc = map_keys(w, src, fn, arg, depth + 1);
            else
                rc = df_error(DF_EINVAL, "%s:%d: '<<' must merge a mapping or a list of mappings",
                              w->path, line_of(kn));
        }
        if (rc)
            return rc;
    }
    return DF_OK;
}

/* ---- typed fields --------------------------------------------------------- */

static int get_string(wf *w, yaml_node_t *v, const char *id, const char *field, const char **out)
{
    if (!v || df_yaml_is_null(v)) {
        *out = NULL;
        return DF_OK;
    }
    if (!(*out = scalar(v)))
        return node_err(w, v, id, "%s must be a string", field);
    return DF_OK;
}

static int get_bool(wf *w, yaml_node_t *v, const char *id, const char *field, bool *out)
{
    const char *s = v && !df_yaml_is_null(v) ? scalar(v) : NULL;
    if (!v || df_yaml_is_null(v) || df_yaml_bool(v, out))
        return DF_OK; /* null keeps the default */
    return node_err(w, v, id, "%s must be true or false, got %s%s%s", field, s ? "'" : "",
                    s ? s : "a collection", s ? "'" : "");
}

static int get_count(wf *w, yaml_node_t *v, const char *id, const char *field, int *out)
{
    if (!v || df_yaml_is_null(v))
        return DF_OK;
    const char *s = scalar(v);
    char *end = NULL;
    errno = 0;
    long long x = s && s[0] ? strtoll(s, &end, 10) : -1;
    if (!s || !end || *end || errno || x < 0 || x > 1000000)
        return node_err(w, v, id, "%s must be a non-negative integer, got %s%s%s", field,
                        s ? "'" : "", s ? s : "a collection", s ? "'" : "");
    *out = (int)x;
    return DF_OK;
}

/* ---- per-node config: flatten to dotted keys, values as YAML text ----------- */

/* !Ref global_config.a.b (siiRL resolve_refs): the node at that path. */
static int resolve_ref(wf *w, yaml_node_t *v, const char *id, yaml_node_t **out)
{
    const char *path = scalar(v);
    const char *pre = "global_config.";
    if (!path || strncmp(path, pre, strlen(pre)))
        return node_err(w, v, id, "!Ref '%s': only global_config.<path> references are supported",
                        path ? path : "");
    char buf[512];
    snprintf(buf, sizeof buf, "%s", path + strlen(pre));
    yaml_node_t *cur = w->global;
    for (char *save = NULL, *part = strtok_r(buf, ".", &save); cur && part;
         part = strtok_r(NULL, ".", &save))
        cur = map_get(w, cur, part, 0);
    if (!cur || df_yaml_is_null(cur))
        return node_err(w, v, id, "unresolved reference '%s'", path);
    *out = cur;
    return DF_OK;
}

static bool is_ref(const yaml_node_t *v)
{
    return v && v->tag && !strcmp((const char *)v->tag, "!Ref");
}

/* A scalar or list as YAML text: plain scalars verbatim, quoted ones re-quoted. */
static int value_text(wf *w, yaml_node_t *v, const char *id, df_sbuf *b, int depth)
{
    if (is_ref(v) && resolve_ref(w, v, id, &v))
        return DF_EINVAL;
    if (depth > MAX_DEPTH)
        return node_err(w, v, id, "config value nested too deeply");
    if (v->type == YAML_SCALAR_NODE) {
        const char *s = scalar(v);
        if (v->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
            df_sbuf_puts(b, s[0] ? s : "null");
            return DF_OK;
        }
        df_sbuf_puts(b, "\"");
        for (const char *c = s; *c; c++) {
            if (*c == '"' || *c == '\\')
                df_sbuf_puts(b, "\\");
            df_sbuf_put(b, c, 1);
        }
        df_sbuf_puts(b, "\"");
        return DF_OK;
    }
    if (v->type == YAML_SEQUENCE_NODE) {
        df_sbuf_puts(b, "[");
        for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top;
             it++) {
            if (it != v->data.sequence.items.start)
                df_sbuf_puts(b, ", ");
            yaml_node_t *item = node_at(w, *it);
            if (item->type == YAML_MAPPING_NODE)
                return node_err(w, item, id, "config lists may not hold mappings");
            int rc = value_text(w, item, id, b, depth + 1);
            if (rc)
                return rc;
            if (b->len > MAX_VALUE_BYTES) /* aliases of aliases expand exponentially */
                return node_err(w, v, id, "config value longer than 1 MiB once its aliases are expanded");
        }
        df_sbuf_puts(b, "]");
        return DF_OK;
    }
    return node_err(w, v, id, "unexpected mapping in a config value");
}

typedef struct {
    df_node *node;
    yaml_node_t *map;
    const char *prefix;
    int depth;
} flat_arg;

static int flatten(wf *w, df_node *nd, yaml_node_t *m, const char *prefix, int depth);

static int flatten_key(wf *w, const char *key, yaml_node_t *kn, void *argp)
{
    flat_arg *a = argp;
    const char *id = a->node->node_id;
    char full[512];
    int n = snprintf(full, sizeof full, "%s%s%s", a->prefix, a->prefix[0] ? "." : "", key);
    if (n < 0 || (size_t)n >= sizeof full)
        return node_err(w, kn, id, "config key too long: %s", key);
    if (!strcmp(full, "_node_id_"))
        return DF_OK; /* siiRL adds it itself */
    yaml_node_t *v = map_get(w, a->map, key, 0);
    if (v && is_ref(v) && resolve_ref(w, v, id, &v))
        return DF_EINVAL;
    if (v && v->type == YAML_MAPPING_NODE)
        return flatten(w, a->node, v, full, a->depth + 1);
    if (df_node_get_config(a->node, full))
        return DF_OK; /* seen already: an explicit key before a merged one */
    df_sbuf b = {0};
    char *text = NULL;
    int rc = value_text(w, v, id, &b, 0);
    if (rc)
        df_sbuf_free(&b);
    else
        rc = df_sbuf_finish(&b, &text);
    if (!rc)
        rc = df_node_set_config(a->node, full, text);
    free(text);
    return rc;
}

static int flatten(wf *w, df_node *nd, yaml_node_t *m, const char *prefix, int depth)
{
    if (depth > MAX_DEPTH)
        return node_err(w, m, nd->node_id, "config nested too deeply");
    flat_arg a = {nd, m, prefix, depth};
    return map_keys(w, m, flatten_key, &a, 0);
}

/* ---- agent_options (siiRL AgentArguments, siirl/params/model_args.py) ------------ */

typedef struct {
    df_agent_options *o;
    yaml_node_t *map;
    const char *id;
} agent_arg;

/* A list of strings (null: none) into a new array; a second visit of a merged key keeps the first. */
static int string_list(wf *w, yaml_node_t *v, const char *id, const char *field, char ***out, int *n)
{
    if (*out || !v || df_yaml_is_null(v))
        return DF_OK;
    if (v->type != YAML_SEQUENCE_NODE)
        return node_err(w, v, id, "agent_options.%s must be a list of strings", field);
    int cap = (int)(v->data.sequence.items.top - v->data.sequence.items.start);
    if (!(*out = calloc((size_t)(cap ? cap : 1), sizeof **out)))
        return df_error(DF_ENOMEM, "out of memory");
    for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
        const char *s = scalar(node_at(w, *it));
        if (!s)
            return node_err(w, node_at(w, *it), id, "agent_options.%s must be a list of strings", field);
        if (!((*out)[(*n)++] = strdup(s)))
            return df_error(DF_ENOMEM, "out of memory");
    }
    return DF_OK;
}

static int kwargs(wf *w, yaml_node_t *m, const char *id, const char *field, char ***out, int *n)
{
    if (*out || !m || df_yaml_is_null(m))
        return DF_OK;
    if (m->type != YAML_MAPPING_NODE)
        return node_err(w, m, id, "agent_options.%s must be a mapping of names to values", field);
    int cap = 0;
    for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++)
        cap++;
    if (!(*out = calloc((size_t)(2 * cap + 2), sizeof **out)))
        return df_error(DF_ENOMEM, "out of memory");
    for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
        const char *k = scalar(node_at(w, p->key));
        yaml_node_t *v = node_at(w, p->value);
        if (!k || v->type != YAML_SCALAR_NODE)
            return node_err(w, v, id, "agent_options.%s.%s must be a scalar", field, k ? k : "?");
        char *key = strdup(k), *val = strdup(df_yaml_is_null(v) ? "" : scalar(v));
        if (!key || !val) {
            free(key);
            free(val);
            return df_error(DF_ENOMEM, "out of memory");
        }
        (*out)[2 * *n] = key, (*out)[2 * *n + 1] = val;
        ++*n;
    }
    return DF_OK;
}

static int agent_key(wf *w, const char *key, yaml_node_t *kn, void *argp)
{
    agent_arg *a = argp;
    df_agent_options *o = a->o;
    yaml_node_t *v = map_get(w, a->map, key, 0);
    const char *s = NULL;
    int rc = DF_OK, count = -1;
    if (!strcmp(key, "train_cycle")) {
        if (!(rc = get_count(w, v, a->id, "agent_options.train_cycle", &count)) && count >= 0)
            o->train_cycle = count;
    } else if (!strcmp(key, "share_instance")) {
        if (!(rc = get_count(w, v, a->id, "agent_options.share_instance", &count)) && count >= 0)
            o->share_instance = count;
    } else if (!strcmp(key, "obs_with_env")) {
        rc = get_bool(w, v, a->id, "agent_options.obs_with_env", &o->obs_with_env);
    } else if (!strcmp(key, "rewards_with_env")) {
        rc = get_bool(w, v, a->id, "agent_options.rewards_with_env", &o->rewards_with_env);
    } else if (!strcmp(key, "process_path")) {
        rc = get_string(w, v, a->id, "agent_options.process_path", &s);
        if (!rc && s && !o->process_path && !(o->process_path = strdup(s)))
            rc = df_error(DF_ENOMEM, "out of memory");
    } else if (!strcmp(key, "env_path")) {
        rc = string_list(w, v, a->id, "env_path", &o->env_path, &o->n_env_path);
    } else if (!strcmp(key, "pre_process_kwargs") || !strcmp(key, "post_process_kwargs")) {
        bool post = key[1] == 'o';
        rc = kwargs(w, v, a->id, key, post ? &o->post_kwargs : &o->pre_kwargs,
                    post ? &o->n_post_kwargs : &o->n_pre_kwargs);
    } else if (!strcmp(key, "agent_name") || !strcmp(key, "num_workers") || !strcmp(key, "custom_async_server")) {
        df_warnf(w->warn, w->user, "%s:%d: node '%s': agent_options.%s is a rollout-wide option "
                 "(actor_rollout_ref.rollout.agent.%s), not read per node; ignored", w->path, line_of(kn), a->id,
                 key, key);
    } else {
        df_warnf(w->warn, w->user, "%s:%d: node '%s': unknown agent option '%s' ignored (siiRL's per-node "
                 "agent_options: train_cycle, process_path, pre_process_kwargs, post_process_kwargs, env_path, "
                 "obs_with_env, rewards_with_env, share_instance)", w->path, line_of(kn), a->id, key);
    }
    return rc;
}

/* The node's agent_options mapping (null: none) into nd->agent_options. */
static int parse_agent_options(wf *w, yaml_node_t *m, df_node *nd)
{
    if (!m || df_yaml_is_null(m))
        return DF_OK;
    if (m->type != YAML_MAPPING_NODE)
        return node_err(w, m, nd->node_id, "agent_options must be a mapping");
    df_agent_options *o = calloc(1, sizeof *o);
    if (!o)
        return df_error(DF_ENOMEM, "out of memory");
    o->share_instance = -1;
    nd->agent_options = o; /* owned by the node from here, also on failure */
    agent_arg a = {o, m, nd->node_id};
    return map_keys(w, m, agent_key, &a, 0);
}

/* ---- nodes ------------------------------------------------------------------ */

static const char *const k_node_keys[] = {
    "node_id", "node_type", "node_role", "dependencies", "executable_ref", "func",
    "only_forward_compute", "agent_group", "config", "retry_limit", "agent_options",
};

typedef struct {
    const char *id;
    yaml_node_t *map;
} warn_arg;

static int check_key(wf *w, const char *key, yaml_node_t *kn, void *argp)
{
    warn_arg *a = argp;
    for (size_t i = 0; i < sizeof k_node_keys / sizeof *k_node_keys; i++)
        if (!strcmp(key, k_node_keys[i]))
            return DF_OK;
    df_warnf(w->warn, w->user, "%s:%d: node '%s': unknown node option '%s' ignored", w->path, line_of(kn), a->id,
             key);
    return DF_OK;
}

static int add_deps(wf *w, yaml_node_t *deps, df_node *nd, const df_task_graph *ids)
{
    if (!deps || df_yaml_is_null(deps))
        return DF_OK;
    if (deps->type != YAML_SEQUENCE_NODE)
        return node_err(w, deps, nd->node_id, "dependencies must be a list of node ids");
    for (yaml_node_item_t *it = deps->data.sequence.items.start;
         it < deps->data.sequence.items.top; it++) {
        yaml_node_t *d = node_at(w, *it);
        const char *s = scalar(d);
        if (!s || !s[0])
            return node_err(w, d, nd->node_id, "each dependency must be a non-empty node id");
        if (!df_task_graph_get_node(ids, s))
            return node_err(w, d, nd->node_id, "depends on '%s', which is not a node of this "
                                               "workflow",
                            s);
        int rc = df_node_add_dependency(nd, s);
        if (rc)
            return rc;
    }
    return DF_OK;
}

static int parse_kind(wf *w, yaml_node_t *m, const char *id, df_node_type *type, df_node_role *role)
{
    yaml_node_t *tv = map_get(w, m, "node_type", 0), *rv = map_get(w, m, "node_role", 0);
    const char *t = NULL, *r = NULL;
    int rc = get_string(w, tv, id, "node_type", &t);
    if (!rc)
        rc = get_string(w, rv, id, "node_role", &r);
    if (rc)
        return rc;
    if (!t) /* siiRL: "Node '<id>' is missing 'node_type'" */
        return node_err(w, m, id, "missing node_type");
    if (df_node_type_parse(t, type))
        return node_err(w, tv, id, "%s", df_last_error());
    *role = DF_ROLE_DEFAULT;
    if (r && df_node_role_parse(r, role))
        return node_err(w, rv, id, "%s", df_last_error());
    if (df_node_check_kind(id, *type, *role))
        return node_err(w, rv ? rv : tv, id, "%s", df_last_error());
    return DF_OK;
}

static int parse_node(wf *w, yaml_node_t *m, const df_task_graph *ids, df_node **out)
{
    const char *id = scalar(map_get(w, m, "node_id", 0));
    df_node_type type;
    df_node_role role;
    int rc = parse_kind(w, m, id, &type, &role);
    df_node *nd = NULL;
    if (!rc)
        rc = df_node_new(id, type, role, &nd);
    if (!rc)
        rc = get_bool(w, map_get(w, m, "only_forward_compute", 0), id, "only_forward_compute",
                      &nd->only_forward_compute);
    if (!rc)
        rc = get_count(w, map_get(w, m, "agent_group", 0), id, "agent_group", &nd->agent_group);
    if (!rc)
        rc = get_count(w, map_get(w, m, "retry_limit", 0), id, "retry_limit", &nd->retry_limit);
    const char *ref = NULL;
    yaml_node_t *ev = map_get(w, m, "executable_ref", 0), *fv = map_get(w, m, "func", 0);
    if (!rc && ev && fv)
        rc = node_err(w, fv, id, "give either executable_ref or func, not both");
    if (!rc)
        rc = get_string(w, ev ? ev : fv, id, ev ? "executable_ref" : "func", &ref);
    if (!rc && ref)
        rc = df_node_set_executable_ref(nd, ref);
    if (!rc)
        rc = add_deps(w, map_get(w, m, "dependencies", 0), nd, ids);
    yaml_node_t *cv = map_get(w, m, "config", 0);
    if (!rc && cv && !df_yaml_is_null(cv)) {
        if (cv->type != YAML_MAPPING_NODE)
            rc = node_err(w, cv, id, "config must be a mapping of keys to values");
        else
            rc = flatten(w, nd, cv, "", 0);
    }
    if (!rc)
        rc = parse_agent_options(w, map_get(w, m, "agent_options", 0), nd);
    warn_arg wa = {id, m};
    if (!rc)
        rc = map_keys(w, m, check_key, &wa, 0);
    if (rc) {
        df_node_free(nd);
        return rc;
    }
    *out = nd;
    return DF_OK;
}

/* First pass: every node is a mapping with a unique, non-empty node_id. The ids
 * go into `ids` (a graph of bare nodes) so dependencies can be checked with lines. */
static int collect_ids(wf *w, yaml_node_t *nodes, df_task_graph *ids)
{
    int i = 0;
    for (yaml_node_item_t *it = nodes->data.sequence.items.start;
         it < nodes->data.sequence.items.top; it++, i++) {
        yaml_node_t *m = node_at(w, *it);
        if (m->type != YAML_MAPPING_NODE)
            return df_error(DF_EINVAL, "%s:%d: node #%d: each entry of 'nodes' must be a mapping",
                            w->path, line_of(m), i + 1);
        yaml_node_t *iv = map_get(w, m, "node_id", 0);
        const char *id = scalar(iv);
        if (!iv || df_yaml_is_null(iv) || !id || !id[0])
            return df_error(DF_EINVAL, "%s:%d: node #%d: missing node_id (a non-empty string)",
                            w->path, line_of(iv ? iv : m), i + 1);
        df_node *prev = df_task_graph_get_node(ids, id);
        if (prev)
            return node_err(w, iv, id, "duplicate node id (node #%d has it too)",
                            prev->retries_done + 1);
        df_node *nd;
        int rc = df_node_new(id, DF_NODE_COMPUTE, DF_ROLE_DEFAULT, &nd);
        if (rc)
            return rc;
        nd->retries_done = i; /* the first holder's index, for the duplicate message */
        if ((rc = df_task_graph_add_node(ids, nd)))
            return rc;
    }
    return DF_OK;
}

static int build(wf *w, df_task_graph **out)
{
    yaml_node_t *root = yaml_document_get_root_node(&w->doc);
    if (!root)
        return df_error(DF_EINVAL, "%s: the workflow file is empty", w->path);
    if (root->type != YAML_MAPPING_NODE)
        return df_error(DF_EINVAL, "%s:%d: a workflow file is a mapping with dag_id and nodes",
                        w->path, line_of(root));
    yaml_node_t *idv = map_get(w, root, "dag_id", 0);
    const char *dag_id = scalar(idv);
    if (!dag_id || !dag_id[0] || df_yaml_is_null(idv))
        return df_error(DF_EINVAL, "%s:%d: missing dag_id (a non-empty string)", w->path,
                        line_of(idv ? idv : root));
    w->global = map_get(w, root, "global_config", 0);
    yaml_node_t *nodes = map_get(w, root, "nodes", 0);
    if (!nodes)
        return df_error(DF_EINVAL, "%s: the 'nodes' list is missing", w->path);
    if (nodes->type != YAML_SEQUENCE_NODE)
        return df_error(DF_EINVAL, "%s:%d: 'nodes' must be a list", w->path, line_of(nodes));
    df_task_graph *ids = NULL, *g = NULL;
    int rc = df_task_graph_new(dag_id, &ids);
    if (!rc)
        rc = collect_ids(w, nodes, ids);
    if (!rc)
        rc = df_task_graph_new(dag_id, &g);
    for (yaml_node_item_t *it = nodes->data.sequence.items.start;
         !rc && it < nodes->data.sequence.items.top; it++) {
        df_node *nd;
        rc = parse_node(w, node_at(w, *it), ids, &nd);
        if (!rc)
            rc = df_task_graph_add_node(g, nd);
    }
    if (!rc && (rc = df_task_graph_validate(g)))
        df_error_wrap(rc, "%s", w->path);
    df_task_graph_free(ids);
    if (rc) {
        df_task_graph_free(g);
        return rc;
    }
    *out = g;
    return DF_OK;
}

int df_workflow_load_text(const char *text, const char *name, df_warn_fn warn, void *user,
                          df_task_graph **out)
{
    *out = NULL;
    wf w = {.path = name ? name : "workflow", .warn = warn, .user = user};
    if (!text)
        return df_error(DF_EINVAL, "%s: no text", w.path);
    int rc = df_yaml_load(text, strlen(text), w.path, DF_YAML_FILE, &w.doc);
    if (rc)
        return rc;
    rc = build(&w, out);
    yaml_document_delete(&w.doc);
    return rc;
}

int df_workflow_load_ex(const char *path, df_warn_fn warn, void *user, df_task_graph **out)
{
    *out = NULL;
    if (!path || !path[0])
        return df_error(DF_EINVAL, "workflow file: empty path");
    char *text;
    int rc = df_read_file(path, &text, NULL);
    if (rc)
        return df_error_wrap(rc, "workflow file");
    rc = df_workflow_load_text(text, path, warn, user, out);
    free(text);
    return rc;
}

int df_workflow_load(const char *path, df_task_graph **out)
{
    return df_workflow_load_ex(path, NULL, NULL, out);
}
