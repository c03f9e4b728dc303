/* YAML documents and overrides onto a df_config (config_internal.h).
 *
 * Everything that assigns a value goes through libyaml's document API: the
 * file, each override's value, each schema default and each resolved
 * interpolation, so one set of rules types and checks them all. */
#include "config/config_internal.h"
#include "config/yaml_guard.h"
#include "config/yaml_json.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#define PLACE_CAP 1024
#define MAX_DEPTH 32

typedef struct {
    df_config *c;
    yaml_document_t *doc;
    const cfg_src *src;
} walker;

static void node_place(const walker *w, const yaml_node_t *n, char *buf, size_t cap)
{
    if (w->src->file)
        snprintf(buf, cap, "%s:%zu", w->src->file, n->start_mark.line + 1);
    else
        snprintf(buf, cap, "%s", w->src->place);
}

static const char *text_of(const yaml_node_t *n) { return (const char *)n->data.scalar.value; }
static bool is_list(df_config_type t) { return t == DF_CFG_STR_LIST || t == DF_CFG_FLOAT_LIST; }

static const char *kind_of(const yaml_node_t *n)
{
    return n->type == YAML_MAPPING_NODE ? "a mapping" : n->type == YAML_SEQUENCE_NODE ? "a list" : "a scalar";
}

/* ---- checks ---- */

static int check_number(const df_config_entry *e, const char *name, double x, bool integral,
                        const char *place)
{
    char got[48], b[120];
    if (integral)
        snprintf(got, sizeof got, "%.0f", x);
    else
        cfg_format_float(x, got, sizeof got);
    if (isnan(x))
        return df_error(DF_EINVAL, "%s: %s: expected a number, got .nan", place, name);
    if (x >= e->min && x <= e->max)
        return DF_OK;
    cfg_bounds_text(e, b, sizeof b);
    return df_error(DF_EINVAL, "%s: %s: must be %s%s, got %s", place, name, b[0] == '[' ? "in " : "",
                    b, got);
}

static int check_choice(const df_config_entry *e, const char *name, const char *s, const char *place)
{
    if (!e->choices || cfg_choice_ok(e->choices, s))
        return DF_OK;
    char shown[80], hint[64];
    cfg_show_text(s, shown, sizeof shown);
    if (cfg_suggest_choice(e->choices, s, hint, sizeof hint))
        return df_error(DF_EINVAL, "%s: %s: expected one of %s, got %s (did you mean '%s'?)", place,
                        name, e->choices, shown, hint);
    return df_error(DF_EINVAL, "%s: %s: expected one of %s, got %s", place, name, e->choices, shown);
}

int cfg_check(const df_config_entry *e, const cfg_value *v, const char *place)
{
    if (v->is_null)
        return e->nullable ? DF_OK : df_error(DF_EINVAL, "%s: %s: may not be null", place, e->key);
    char name[300];
    int rc = DF_OK;
    switch (e->type) {
    case DF_CFG_BOOL:
    case DF_CFG_MAP: /* free-form: content not validated */
        return DF_OK;
    case DF_CFG_INT:
        return check_number(e, e->key, (double)v->i, true, place);
    case DF_CFG_FLOAT:
        return check_number(e, e->key, v->f, false, place);
    case DF_CFG_STR:
        return check_choice(e, e->key, v->s, place);
    case DF_CFG_STR_LIST:
    case DF_CFG_FLOAT_LIST:
        if (e->list_len && v->n_items != e->list_len)
            return df_error(DF_EINVAL, "%s: %s: expected a list of %d items, got %d", place, e->key,
                            e->list_len, v->n_items);
        for (int i = 0; i < v->n_items && !rc; i++) {
            snprintf(name, sizeof name, "%s[%d]", e->key, i);
            rc = e->type == DF_CFG_STR_LIST ? check_choice(e, name, v->items[i], place)
                                            : check_number(e, name, v->fitems[i], false, place);
        }
        return rc;
    }
    return DF_OK;
}

/* ---- scalars ---- */

static int parse_number(const df_config_entry *e, const char *name, const char *t, cfg_value *v,
                        int item, const char *place)
{
    char shown[80];
    cfg_show_text(t, shown, sizeof shown);
    int r;
    if (e->type == DF_CFG_INT) {
        if ((r = cfg_parse_int(t, &v->i)) == -2)
            return df_error(DF_EINVAL, "%s: %s: %s does not fit in a 64-bit integer", place, name, shown);
        if (r)
            return df_error(DF_EINVAL, "%s: %s: expected an integer, got %s", place, name, shown);
        return DF_OK;
    }
    double *dst = item >= 0 ? &v->fitems[item] : &v->f;
    if ((r = cfg_parse_float(t, dst)) == -2)
        return df_error(DF_EINVAL, "%s: %s: %s is out of the range of a double", place, name, shown);
    if (r)
        return df_error(DF_EINVAL, "%s: %s: expected a number, got %s", place, name, shown);
    return DF_OK;
}

static int parse_scalar(const df_config_entry *e, const char *t, cfg_value *v, const char *place)
{
    char shown[80];
    switch (e->type) {
    case DF_CFG_BOOL:
        if (!cfg_parse_bool(t, &v->b))
            return DF_OK;
        cfg_show_text(t, shown, sizeof shown);
        return df_error(DF_EINVAL, "%s: %s: expected a boolean (true/false), got %s", place, e->key, shown);
    case DF_CFG_INT:
    case DF_CFG_FLOAT:
        return parse_number(e, e->key, t, v, -1, place);
    case DF_CFG_STR:
        return (v->s = strdup(t)) ? DF_OK : df_error(DF_ENOMEM, "%s: out of memory", place);
    default:
        return DF_EINTERNAL;
    }
}

static int list_alloc(const df_config_entry *e, cfg_value *v, int n, const char *place)
{
    v->n_items = 0;
    if (e->type == DF_CFG_STR_LIST)
        v->items = calloc((size_t)n + 1, sizeof *v->items);
    else
        v->fitems = calloc((size_t)n + 1, sizeof *v->fitems);
    if (!v->items && !v->fitems)
        return df_error(DF_ENOMEM, "%s: out of memory", place);
    return DF_OK;
}

/* Append item text t (plain: YAML plain style) to list value v. */
static int list_push(const df_config_entry *e, cfg_value *v, const char *t, bool plain, const char *place)
{
    char name[300];
    int i = v->n_items;
    snprintf(name, sizeof name, "%s[%d]", e->key, i);
    if (cfg_is_null_text(t, plain))
        return df_error(DF_EINVAL, "%s: %s: expected %s, got null", place, name,
                        e->type == DF_CFG_STR_LIST ? "a string" : "a number");
    if (e->type == DF_CFG_FLOAT_LIST) {
        int rc = parse_number(e, name, t, v, i, place);
        if (rc)
            return rc;
    } else if (!(v->items[i] = strdup(t))) {
        return df_error(DF_ENOMEM, "%s: out of memory", place);
    }
    v->n_items++;
    return DF_OK;
}

/* ---- assignment of one node to one key ---- */

static bool whole_ref(const char *t)
{
    size_t n = strlen(t);
    return n > 3 && !strncmp(t, "${", 2) && t[n - 1] == '}' && !strchr(t + 2, '$') &&
           strchr(t, '}') == t + n - 1;
}

/* A DF_CFG_MAP key: a mapping (kept as canonical text), null, or `${key}`. */
static int assign_map(walker *w, int idx, yaml_node_t *n, const char *place)
{
    const df_config_entry *e = &w->c->schema->entries[idx];
    cfg_value v = {0};
    char *raw = NULL;
    int rc = DF_OK;
    bool scalar = n->type == YAML_SCALAR_NODE;
    if (n->type == YAML_MAPPING_NODE) {
        rc = cfg_map_text(w->doc, n, place, &v.s);
    } else if (df_yaml_is_null(n)) {
        v.is_null = true;
    } else if (scalar && !w->src->no_interp && whole_ref(text_of(n))) {
        if (!(raw = strdup(text_of(n))))
            rc = df_error(DF_ENOMEM, "%s: out of memory", place);
    } else if (scalar) {
        char shown[80];
        cfg_show_text(text_of(n), shown, sizeof shown);
        return df_error(DF_EINVAL, "%s: %s: expected a mapping (or null), got a scalar %s", place, e->key,
                        shown);
    } else {
        return df_error(DF_EINVAL, "%s: %s: expected a mapping (or null), got %s", place, e->key, kind_of(n));
    }
    if (rc) {
        cfg_value_clear(&v);
        free(raw);
        return rc;
    }
    return cfg_commit(w->c, idx, &v, raw, w->src->where ? w->src->where : place);
}

/* Map key `idx` with the entry at dotted path `sub` inside it set to `val`. */
static int assign_map_entry(walker *w, int idx, const char *sub, yaml_node_t *val, const char *place)
{
    cfg_slot *slot = &w->c->slots[idx];
    const char *key = w->c->schema->entries[idx].key;
    if (slot->raw)
        return df_error(DF_EINVAL, "%s: cannot set '%s' inside '%s' while that is the interpolation '%s'",
                        place, sub, key, slot->raw);
    cfg_value v = {0};
    int rc = cfg_map_patch(slot->v.is_null ? NULL : slot->v.s, sub, w->doc, val, place, &v.s);
    const char *where = w->src->where ? w->src->where : place;
    if (!rc && cfg_is_open(&w->c->schema->entries[idx])) /* each name of an open group keeps its origin */
        rc = cfg_slot_note_sub(slot, sub, strcspn(sub, "."), where);
    if (rc) {
        free(v.s);
        return rc;
    }
    return cfg_commit(w->c, idx, &v, NULL, where);
}

/* Index of the map key that `full` lies under ("a.m" for "a.m.x.y"), or -1. */
static int map_owner(const df_config_schema *s, const char *full)
{
    for (int i = 0; i < s->n; i++) {
        const char *k = s->entries[i].key;
        size_t n = strlen(k);
        if (s->entries[i].type == DF_CFG_MAP && !cfg_is_open(&s->entries[i]) && !strncmp(full, k, n) &&
            full[n] == '.')
            return i;
    }
    return -1;
}

/* OmegaConf's `???` (a value the user must give; verl's rollout.name): a key without effect keeps its
   default, any other key is refused, as verl fails when it reads one left missing. */
static int missing_value(const walker *w, int idx, const char *place)
{
    const df_config_schema *s = w->c->schema;
    if (df_config_schema_compat(s, idx) == DF_CFG_NO_EFFECT)
        return DF_OK;
    return df_error(DF_EINVAL, "%s: %s: '?\?\?' (OmegaConf's missing mandatory value): give it a value",
                    place, s->entries[idx].key);
}

static int assign_node(walker *w, int idx, yaml_node_t *n)
{
    const df_config_entry *e = &w->c->schema->entries[idx];
    char place[PLACE_CAP];
    node_place(w, n, place, sizeof place);
    if (n->type == YAML_SCALAR_NODE && df_yaml_is_plain(n) && !strcmp(text_of(n), "?\?\?"))
        return missing_value(w, idx, place);
    if (e->type == DF_CFG_MAP)
        return assign_map(w, idx, n, place);
    cfg_value v = {0};
    char *raw = NULL;
    int rc = DF_OK;
    if (n->type == YAML_MAPPING_NODE || (n->type == YAML_SEQUENCE_NODE && !is_list(e->type)))
        return df_error(DF_EINVAL, "%s: %s: expected %s, got %s", place, e->key, cfg_type_desc(e->type),
                        kind_of(n));
    if (n->type == YAML_SEQUENCE_NODE) {
        yaml_node_item_t *it = n->data.sequence.items.start;
        int count = (int)(n->data.sequence.items.top - it);
        rc = list_alloc(e, &v, count, place);
        for (int i = 0; i < count && !rc; i++) {
            yaml_node_t *item = yaml_document_get_node(w->doc, it[i]);
            char ip[PLACE_CAP];
            node_place(w, item, ip, sizeof ip);
            if (item->type != YAML_SCALAR_NODE)
                rc = df_error(DF_EINVAL, "%s: %s[%d]: expected %s, got %s", ip, e->key, i,
                              e->type == DF_CFG_STR_LIST ? "a string" : "a number", kind_of(item));
            else if (!w->src->no_interp && strstr(text_of(item), "${"))
                rc = df_error(DF_EINVAL, "%s: %s[%d]: interpolation inside a list item is not supported",
                              ip, e->key, i);
            else
                rc = list_push(e, &v, text_of(item), df_yaml_is_plain(item), ip);
        }
    } else {
        const char *t = text_of(n);
        bool plain = df_yaml_is_plain(n);
        if (strlen(t) != n->data.scalar.length)
            rc = df_error(DF_EINVAL, "%s: %s: value contains a NUL character", place, e->key);
        else if (!w->src->no_interp && strstr(t, "${")) {
            if (e->type != DF_CFG_STR && !whole_ref(t))
                rc = df_error(DF_EINVAL, "%s: %s: keys of type %s take an interpolation only as the "
                              "whole value ('${key}')",
                              place, e->key, df_config_type_name(e->type));
            else if (!(raw = strdup(t)))
                rc = df_error(DF_ENOMEM, "%s: out of memory", place);
        } else if (cfg_is_null_text(t, plain)) {
            v.is_null = true;
        } else if (is_list(e->type)) { /* a single scalar is a one-item list */
            rc = list_alloc(e, &v, 1, place);
            if (!rc)
                rc = list_push(e, &v, t, plain, place);
        } else {
            rc = parse_scalar(e, t, &v, place);
        }
    }
    if (!rc && !raw)
        rc = cfg_check(e, &v, place);
    if (rc) {
        cfg_value_clear(&v);
        free(raw);
        return rc;
    }
    return cfg_commit(w->c, idx, &v, raw, w->src->where ? w->src->where : place);
}

/* ---- mappings ---- */

static char *join_key(const char *prefix, const char *name)
{
    size_t a = strlen(prefix), b = strlen(name);
    char *k = malloc(a + b + 2);
    if (!k)
        return NULL;
    if (a) {
        memcpy(k, prefix, a);
        k[a++] = '.';
    }
    memcpy(k + a, name, b + 1);
    return k;
}

static int walk_mapping(walker *w, yaml_node_t *map, const char *prefix, int depth);

/* Apply value node `val` at dotted key `full` (a key or a group). */
static int apply_at(walker *w, const char *full, yaml_node_t *key_node, yaml_node_t *val, int depth)
{
    const df_config_schema *s = w->c->schema;
    char place[PLACE_CAP];
    node_place(w, key_node ? key_node : val, place, sizeof place);
    int idx = cfg_find(s, full);
    if (idx >= 0 && cfg_is_open(&s->entries[idx]))
        return df_error(DF_EINVAL, "%s: '%s': '*' stands for the other keys of an open group: set each by its "
                        "name", place, full);
    if (idx >= 0) {
        cfg_slot *slot = &w->c->slots[idx];
        if (w->src->in_file && slot->file_line)
            return df_error(DF_EINVAL, "%s: duplicate key '%s' (first set at line %d)", place, full,
                            slot->file_line);
        int rc = assign_node(w, idx, val);
        if (!rc && w->src->in_file)
            slot->file_line = (int)(key_node ? key_node : val)->start_mark.line + 1;
        return rc;
    }
    if (cfg_is_group(s, full)) {
        if (val->type == YAML_MAPPING_NODE)
            return walk_mapping(w, val, full, depth + 1);
        if (df_yaml_is_null(val))
            return DF_OK; /* `critic:` with nothing under it */
        node_place(w, val, place, sizeof place);
        return df_error(DF_EINVAL, "%s: '%s' is a group of settings: expected a mapping, got %s", place,
                        full, kind_of(val));
    }
    int m = map_owner(s, full);
    if (m >= 0) /* below a free-form map: an entry of its content */
        return assign_map_entry(w, m, full + strlen(s->entries[m].key) + 1, val, place);
    if ((m = cfg_open_owner(s, full)) >= 0) /* another name in an open group: an entry of its "g.*" map */
        return assign_map_entry(w, m, full + strlen(s->entries[m].key) - 1, val, place);
    char hint[256];
    if (cfg_suggest_key(s, full, hint, sizeof hint))
        return df_error(DF_EINVAL, "%s: unknown key '%s' (did you mean '%s'?)", place, full, hint);
    return df_error(DF_EINVAL, "%s: unknown key '%s'", place, full);
}

static bool mapping_has(yaml_document_t *doc, yaml_node_t *map, const char *name)
{
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key);
        if (k->type == YAML_SCALAR_NODE && !strcmp(text_of(k), name))
            return true;
    }
    return false;
}

static bool is_merge_key(const yaml_node_t *k)
{
    return k->type == YAML_SCALAR_NODE && df_yaml_is_plain(k) && !strcmp(text_of(k), "<<");
}

/* Apply the pairs of `m` at `prefix`; `skip(name)` pairs are left out. */
static int apply_pairs(walker *w, yaml_node_t *m, const char *prefix, int depth, yaml_node_t *const *skip,
                       int n_skip)
{
    char place[PLACE_CAP];
    for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(w->doc, p->key);
        yaml_node_t *v = yaml_document_get_node(w->doc, p->value);
        node_place(w, k, place, sizeof place);
        if (k->type != YAML_SCALAR_NODE)
            return df_error(DF_EINVAL, "%s: a key must be a plain name, got %s", place, kind_of(k));
        if (is_merge_key(k)) {
            if (n_skip) /* inside a merge source */
                return df_error(DF_EINVAL, "%s: nested '<<' merges are not supported", place);
            continue;
        }
        const char *name = text_of(k);
        if (!*name)
            return df_error(DF_EINVAL, "%s: empty key", place);
        if (!strcmp(name, "_target_"))
            continue; /* verl's dataclass hint inside copied configs */
        bool skipped = false;
        for (int i = 0; i < n_skip && !skipped; i++)
            skipped = mapping_has(w->doc, skip[i], name);
        if (skipped)
            continue;
        char *full = join_key(prefix, name);
        if (!full)
            return df_error(DF_ENOMEM, "%s: out of memory", place);
        int rc = apply_at(w, full, k, v, depth);
        free(full);
        if (rc)
            return rc;
    }
    return DF_OK;
}

/* `<<: *base` or `<<: [*a, *b]`: keys of the mapping itself win, then earlier sources. */
static int apply_merge(walker *w, yaml_node_t *map, yaml_node_t *src, const char *prefix, int depth)
{
    yaml_node_t *srcs[MAX_DEPTH + 1];
    int n = 0;
    char place[PLACE_CAP];
    node_place(w, src, place, sizeof place);
    if (src->type == YAML_MAPPING_NODE) {
        srcs[n++] = src;
    } else if (src->type == YAML_SEQUENCE_NODE) {
        for (yaml_node_item_t *it = src->data.sequence.items.start; it < src->data.sequence.items.top; it++) {
            yaml_node_t *m = yaml_document_get_node(w->doc, *it);
            if (m->type != YAML_MAPPING_NODE || n == MAX_DEPTH)
                return df_error(DF_EINVAL, "%s: '<<' takes a mapping or a list of at most %d mappings",
                                place, MAX_DEPTH);
            srcs[n++] = m;
        }
    } else {
        return df_error(DF_EINVAL, "%s: '<<' takes a mapping or a list of mappings, got %s", place,
                        kind_of(src));
    }
    yaml_node_t *skip[MAX_DEPTH + 2];
    skip[0] = map;
    for (int i = 0; i < n; i++) {
        int rc = apply_pairs(w, srcs[i], prefix, depth, skip, i + 1);
        if (rc)
            return rc;
        skip[i + 1] = srcs[i];
    }
    return DF_OK;
}

static int walk_mapping(walker *w, yaml_node_t *map, const char *prefix, int depth)
{
    if (depth > MAX_DEPTH) {
        char place[PLACE_CAP];
        node_place(w, map, place, sizeof place);
        return df_error(DF_EINVAL, "%s: mappings nested deeper than %d levels", place, MAX_DEPTH);
    }
    int rc = apply_pairs(w, map, prefix, depth, NULL, 0);
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; !rc && p < map->data.mapping.pairs.top; p++)
        if (is_merge_key(yaml_document_get_node(w->doc, p->key)))
            rc = apply_merge(w, map, yaml_document_get_node(w->doc, p->value), prefix, depth);
    return rc;
}

/* ---- documents ---- */

int cfg_apply_document(df_config *c, const char *text, size_t len, const char *name)
{
    yaml_document_t doc;
    int rc = df_yaml_load(text, len, name, DF_YAML_FILE, &doc);
    if (rc)
        return rc;
    cfg_src src = {.file = name, .in_file = true};
    walker w = {c, &doc, &src};
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (root && root->type == YAML_MAPPING_NODE)
        rc = walk_mapping(&w, root, "", 0);
    else if (root && !df_yaml_is_null(root))
        rc = df_error(DF_EINVAL, "%s:%zu: the top level must be a mapping of settings, got %s", name,
                      root->start_mark.line + 1, kind_of(root));
    yaml_document_delete(&doc);
    return rc;
}

int cfg_assign_text(df_config *c, int idx, const char *key, const char *text, const cfg_src *src)
{
    yaml_document_t doc;
    int rc = df_yaml_load(text, strlen(text), src->place, DF_YAML_VALUE, &doc);
    if (rc)
        return rc;
    walker w = {c, &doc, src};
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    yaml_node_t empty = {.type = YAML_SCALAR_NODE};
    if (!root) { /* empty text: a plain empty scalar, i.e. null */
        empty.data.scalar.value = (yaml_char_t *)"";
        empty.data.scalar.style = YAML_PLAIN_SCALAR_STYLE;
        root = &empty;
    }
    rc = idx >= 0 ? assign_node(&w, idx, root) : apply_at(&w, key, NULL, root, 0);
    yaml_document_delete(&doc);
    return rc;
}

int cfg_apply_override(df_config *c, const char *arg)
{
    char place[PLACE_CAP];
    snprintf(place, sizeof place, "command line: '%s'", arg);
    const char *k = arg;
    if (*k == '~')
        return df_error(DF_EINVAL, "%s: deleting a key (~key) is not supported", place);
    k += k[0] == '+' ? (k[1] == '+' ? 2 : 1) : 0; /* Hydra's +key= / ++key= */
    const char *eq = strchr(k, '=');
    if (!eq)
        return df_error(DF_EINVAL, "%s: expected key=value", place);
    if (eq == k)
        return df_error(DF_EINVAL, "%s: missing key before '='", place);
    for (const char *q = k; q < eq; q++)
        if (*q == ' ' || *q == '\t' || *q == '\n')
            return df_error(DF_EINVAL, "%s: a key cannot contain spaces", place);
    char *key = strndup(k, (size_t)(eq - k));
    if (!key)
        return df_error(DF_ENOMEM, "%s: out of memory", place);
    cfg_src src = {.place = place, .where = "command line"};
    int rc = cfg_assign_text(c, -1, key, eq[1] ? eq + 1 : "''", &src); /* `key=` is "" */
    free(key);
    return rc;
}
