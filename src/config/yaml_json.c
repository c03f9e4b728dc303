/* YAML nodes as JSON values: the shared walker and its scalar typing (yaml_json.h). */
#include "config/yaml_json.h"

#include "config/config_internal.h"
#include "config/yaml_guard.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

bool df_yaml_is_plain(const yaml_node_t *n)
{
    return n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE || n->data.scalar.style == YAML_ANY_SCALAR_STYLE;
}

bool df_yaml_is_null(const yaml_node_t *n)
{
    return n && n->type == YAML_SCALAR_NODE &&
           cfg_is_null_text((const char *)n->data.scalar.value, df_yaml_is_plain(n));
}

bool df_yaml_bool(const yaml_node_t *n, bool *out)
{
    bool b;
    if (!n || n->type != YAML_SCALAR_NODE || !df_yaml_is_plain(n) ||
        cfg_parse_bool((const char *)n->data.scalar.value, &b))
        return false;
    *out = b;
    return true;
}

json_t *df_yaml_scalar_json(const yaml_node_t *n)
{
    const char *s = (const char *)n->data.scalar.value;
    size_t len = n->data.scalar.length;
    bool b;
    int64_t i;
    double f;
    if (!df_yaml_is_plain(n) || strlen(s) != len) /* the parsers below read up to a NUL */
        return json_stringn(s, len);
    if (cfg_is_null_text(s, true))
        return json_null();
    if (!cfg_parse_bool(s, &b))
        return json_boolean(b);
    if (!cfg_parse_int(s, &i))
        return json_integer((json_int_t)i);
    if (!cfg_parse_float(s, &f) && isfinite(f)) /* JSON has no inf / nan: those stay text */
        return json_real(f);
    return json_stringn(s, len);
}

typedef struct {
    yaml_document_t *doc;
    const char *name;
    size_t nodes, bytes; /* visited so far, with aliases expanded */
} walk;

static int at(const walk *w, const yaml_node_t *n, const char *fmt, ...) DF_PRINTF(3, 4);
static int at(const walk *w, const yaml_node_t *n, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return df_error(DF_EINVAL, "%s:%zu:%zu: %s", w->name, n->start_mark.line + 1, n->start_mark.column + 1,
                    what);
}

static const char *kind_of(const yaml_node_t *n)
{
    return n->type == YAML_MAPPING_NODE ? "a mapping" : n->type == YAML_SEQUENCE_NODE ? "a list" : "a scalar";
}

static bool is_merge_key(const yaml_node_t *k)
{
    return k->type == YAML_SCALAR_NODE && df_yaml_is_plain(k) &&
           !strcmp((const char *)k->data.scalar.value, "<<");
}

static int convert(walk *w, yaml_node_t *n, int depth, json_t **out);

/* A long scalar behind many aliases costs its length each time: bound the copies too. */
static int count_bytes(walk *w, const yaml_node_t *s)
{
    if ((w->bytes += s->data.scalar.length) > DF_YAML_MAX_BYTES)
        return at(w, s, "more than %zu MiB of text once aliases are expanded", DF_YAML_MAX_BYTES >> 20);
    return DF_OK;
}

/* The key node k of a mapping as a C string key; errors at k. */
static int key_of(walk *w, const yaml_node_t *k, const char **key)
{
    if (k->type != YAML_SCALAR_NODE)
        return at(w, k, "a mapping key that is not a scalar");
    *key = (const char *)k->data.scalar.value;
    if (strlen(*key) != k->data.scalar.length)
        return at(w, k, "a mapping key containing a NUL character");
    return count_bytes(w, k);
}

/* Merge the converted sources of `<<` key k (value src) into o: a key is added only when the
   mapping does not give it itself (`own`) and no earlier source did. */
static int merge(walk *w, yaml_node_t *k, yaml_node_t *src, json_t *own, json_t *o, int depth)
{
    yaml_node_item_t *it = NULL, *top = NULL;
    if (src->type == YAML_SEQUENCE_NODE)
        it = src->data.sequence.items.start, top = src->data.sequence.items.top;
    else if (src->type != YAML_MAPPING_NODE)
        return at(w, k, "'<<' takes a mapping or a list of mappings, got %s", kind_of(src));
    for (yaml_node_t *m = it ? yaml_document_get_node(w->doc, *it) : src; m;
         m = it && ++it < top ? yaml_document_get_node(w->doc, *it) : NULL) {
        if (m->type != YAML_MAPPING_NODE)
            return at(w, m, "'<<' takes a mapping or a list of mappings, got a list holding %s", kind_of(m));
        json_t *from = NULL;
        int rc = convert(w, m, depth + 1, &from);
        if (rc)
            return rc;
        const char *key = NULL;
        json_t *val;
        json_object_foreach(from, key, val) {
            if (!json_object_get(own, key) && !json_object_get(o, key) && json_object_set(o, key, val)) {
                json_decref(from);
                return df_error(DF_ENOMEM, "out of memory");
            }
        }
        json_decref(from);
    }
    return DF_OK;
}

static int mapping(walk *w, yaml_node_t *n, int depth, json_t *o)
{
    yaml_node_pair_t *start = n->data.mapping.pairs.start, *top = n->data.mapping.pairs.top;
    /* its own keys first, so that a merge placed before one of them does not take it */
    json_t *own = json_object();
    if (!own)
        return df_error(DF_ENOMEM, "out of memory");
    int rc = DF_OK;
    for (yaml_node_pair_t *p = start; !rc && p < top; p++) {
        yaml_node_t *k = yaml_document_get_node(w->doc, p->key);
        const char *key = NULL;
        if (is_merge_key(k))
            continue;
        if ((rc = key_of(w, k, &key)))
            break;
        if (json_object_get(own, key)) /* libyaml keeps both; JSON would keep the last silently */
            rc = at(w, k, "the key '%.100s' appears twice in one mapping", key);
        else if (json_object_set_new(own, key, json_null()))
            rc = at(w, k, "a mapping key that is not valid UTF-8");
    }
    for (yaml_node_pair_t *p = start; !rc && p < top; p++) {
        yaml_node_t *k = yaml_document_get_node(w->doc, p->key),
                    *v = yaml_document_get_node(w->doc, p->value);
        if (is_merge_key(k)) {
            rc = merge(w, k, v, own, o, depth);
            continue;
        }
        json_t *val = NULL;
        if (!(rc = convert(w, v, depth + 1, &val)) &&
            json_object_set_new(o, (const char *)k->data.scalar.value, val)) /* checked above */
            rc = df_error(DF_ENOMEM, "out of memory");
    }
    json_decref(own);
    return rc;
}

static int convert(walk *w, yaml_node_t *n, int depth, json_t **out)
{
    *out = NULL;
    if (depth > DF_YAML_MAX_DEPTH)
        return at(w, n, "nested deeper than %d levels (or an alias refers to itself)", DF_YAML_MAX_DEPTH);
    if (++w->nodes > DF_YAML_MAX_NODES)
        return at(w, n, "more than 2^20 values once aliases are expanded");
    if (n->type == YAML_SCALAR_NODE) {
        int rc = count_bytes(w, n);
        if (rc)
            return rc;
        if (!(*out = df_yaml_scalar_json(n)))
            return at(w, n, "a scalar that is not valid UTF-8 (or out of memory)");
        return DF_OK;
    }
    json_t *v = n->type == YAML_SEQUENCE_NODE ? json_array() : json_object();
    if (!v)
        return df_error(DF_ENOMEM, "out of memory");
    int rc = DF_OK;
    if (n->type == YAML_SEQUENCE_NODE) {
        for (yaml_node_item_t *it = n->data.sequence.items.start; !rc && it < n->data.sequence.items.top;
             it++) {
            json_t *item = NULL;
            rc = convert(w, yaml_document_get_node(w->doc, *it), depth + 1, &item);
            if (!rc && json_array_append_new(v, item))
                rc = df_error(DF_ENOMEM, "out of memory");
        }
    } else {
        rc = mapping(w, n, depth, v);
    }
    if (rc)
        json_decref(v);
    else
        *out = v;
    return rc;
}

int df_yaml_node_json(yaml_document_t *doc, yaml_node_t *node, const char *name, json_t **out)
{
    walk w = {doc, name, 0, 0};
    return convert(&w, node, 0, out);
}

int df_yaml_file_json(const char *path, json_t **out)
{
    *out = NULL;
    yaml_document_t doc;
    int rc = df_yaml_load_file(path, &doc);
    if (rc)
        return rc;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    rc = root ? df_yaml_node_json(&doc, root, path, out)
              : df_error(DF_EINVAL, "%s: empty YAML document", path);
    yaml_document_delete(&doc);
    return rc;
}
