/* Free-form map values (DF_CFG_MAP): canonical flow-YAML text of a libyaml
 * node, and setting one entry inside such a text (config_internal.h).
 *
 * The text is the only representation: it is what df_config_map_text()
 * returns, what the dump prints and what a copy or an interpolation re-parses,
 * so emitting the same node twice must give the same bytes. */
#include "config/config_internal.h"
#include "config/yaml_guard.h"
#include "config/yaml_json.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#define MAP_MAX_DEPTH 32
#define MAP_MAX_TEXT (1u << 20) /* aliases can multiply a small file; refuse huge texts */

/* Whether plain text `s` reads back as the same plain scalar inside a flow
 * collection: no flow indicators, comment or quote characters, no padding. */
static bool flow_plain_ok(const char *s)
{
    size_t n = strlen(s);
    if (!n || s[0] == ' ' || s[n - 1] == ' ')
        return false;
    if (strchr("-?:", s[0]) && (s[1] == ' ' || !s[1]))
        return false;
    if (!strcmp(s, "<<"))
        return true; /* a merge key stays a merge key */
    for (const char *p = s; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr("_./~+- ", *p))
            return false;
    return true;
}

static void emit_scalar(df_sbuf *b, const char *t, bool plain)
{
    if (plain && cfg_is_null_text(t, true))
        df_sbuf_puts(b, "null");
    else if (plain && flow_plain_ok(t))
        df_sbuf_puts(b, t); /* keeps its YAML type: 1, 1e-6, true, text */
    else
        cfg_quote(b, t);    /* a string: plain only when unambiguous */
}

static int too_big(const char *place)
{
    return df_error(DF_EINVAL, "%s: mapping text longer than %u bytes (aliases repeated too often?)", place,
                    MAP_MAX_TEXT);
}

static bool is_target(const yaml_node_t *k)
{
    return k->type == YAML_SCALAR_NODE && !strcmp((const char *)k->data.scalar.value, "_target_");
}

static int emit(df_sbuf *b, yaml_document_t *doc, yaml_node_t *n, int depth, const char *place)
{
    if (depth > MAP_MAX_DEPTH)
        return df_error(DF_EINVAL, "%s: mappings and lists nested deeper than %d levels", place, MAP_MAX_DEPTH);
    if (b->len > MAP_MAX_TEXT)
        return too_big(place);
    int rc = DF_OK;
    if (n->type == YAML_SCALAR_NODE) {
        const char *t = (const char *)n->data.scalar.value;
        if (strlen(t) != n->data.scalar.length)
            return df_error(DF_EINVAL, "%s: value contains a NUL character", place);
        emit_scalar(b, t, df_yaml_is_plain(n));
    } else if (n->type == YAML_SEQUENCE_NODE) {
        df_sbuf_puts(b, "[");
        for (yaml_node_item_t *it = n->data.sequence.items.start; !rc && it < n->data.sequence.items.top; it++) {
            if (it > n->data.sequence.items.start)
                df_sbuf_puts(b, ", ");
            rc = emit(b, doc, yaml_document_get_node(doc, *it), depth + 1, place);
        }
        df_sbuf_puts(b, "]");
    } else if (n->type == YAML_MAPPING_NODE) {
        df_sbuf_puts(b, "{");
        bool first = true;
        for (yaml_node_pair_t *p = n->data.mapping.pairs.start; !rc && p < n->data.mapping.pairs.top; p++) {
            yaml_node_t *k = yaml_document_get_node(doc, p->key);
            if (is_target(k)) /* verl's dataclass hint, as the loader skips it outside maps */
                continue;
            if (!first)
                df_sbuf_puts(b, ", ");
            first = false;
            if (k->type != YAML_SCALAR_NODE)
                return df_error(DF_EINVAL, "%s: a key inside a mapping value must be a scalar, got %s",
                                place, k->type == YAML_MAPPING_NODE ? "a mapping" : "a list");
            rc = emit(b, doc, k, depth + 1, place);
            df_sbuf_puts(b, ": ");
            if (!rc)
                rc = emit(b, doc, yaml_document_get_node(doc, p->value), depth + 1, place);
        }
        df_sbuf_puts(b, "}");
    }
    return rc;
}

int cfg_map_text(struct yaml_document_s *doc, struct yaml_node_s *map, const char *place, char **out)
{
    *out = NULL;
    df_sbuf b = {0};
    int rc = emit(&b, doc, map, 0, place);
    if (!rc && b.len > MAP_MAX_TEXT)
        rc = too_big(place);
    if (rc) {
        df_sbuf_free(&b);
        return rc;
    }
    rc = df_sbuf_finish(&b, out);
    return rc ? df_error_wrap(rc, "%s", place) : DF_OK;
}

/* `on` (a mapping of `od`, or NULL for none) with path[0..np) set to `vn`. */
static int emit_patched(df_sbuf *b, yaml_document_t *od, yaml_node_t *on, char *const *path, int np,
                        yaml_document_t *vd, yaml_node_t *vn, const char *place)
{
    int rc = DF_OK;
    bool found = false;
    df_sbuf_puts(b, "{");
    for (yaml_node_pair_t *p = on ? on->data.mapping.pairs.start : NULL; on && !rc && p < on->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = yaml_document_get_node(od, p->key), *v = yaml_document_get_node(od, p->value);
        if (p > on->data.mapping.pairs.start)
            df_sbuf_puts(b, ", ");
        rc = emit(b, od, k, 1, place);
        df_sbuf_puts(b, ": ");
        bool hit = !found && k->type == YAML_SCALAR_NODE && !strcmp((const char *)k->data.scalar.value, path[0]);
        if (rc)
            break;
        if (!hit)
            rc = emit(b, od, v, 1, place);
        else if (np > 1)
            rc = emit_patched(b, od, v->type == YAML_MAPPING_NODE ? v : NULL, path + 1, np - 1, vd, vn, place);
        else
            rc = emit(b, vd, vn, 1, place);
        found = found || hit;
    }
    if (!rc && !found) {
        if (on && on->data.mapping.pairs.top > on->data.mapping.pairs.start)
            df_sbuf_puts(b, ", ");
        emit_scalar(b, path[0], true);
        df_sbuf_puts(b, ": ");
        rc = np > 1 ? emit_patched(b, od, NULL, path + 1, np - 1, vd, vn, place) : emit(b, vd, vn, 1, place);
    }
    df_sbuf_puts(b, "}");
    return rc;
}

int cfg_map_patch(const char *old, const char *sub, struct yaml_document_s *vdoc, struct yaml_node_s *val,
                  const char *place, char **out)
{
    *out = NULL;
    char *path[MAP_MAX_DEPTH], *dup = strdup(sub);
    int np = 0, rc = DF_OK;
    if (!dup)
        return df_error(DF_ENOMEM, "%s: out of memory", place);
    for (char *save = NULL, *c = strtok_r(dup, ".", &save); c && !rc; c = strtok_r(NULL, ".", &save))
        if (np == MAP_MAX_DEPTH)
            rc = df_error(DF_EINVAL, "%s: key nested deeper than %d levels", place, MAP_MAX_DEPTH);
        else
            path[np++] = c;
    if (!rc && (!np || sub[0] == '.' || sub[strlen(sub) - 1] == '.' || strstr(sub, "..")))
        rc = df_error(DF_EINVAL, "%s: empty key component in '%s'", place, sub);
    yaml_document_t od;
    bool loaded = false;
    if (!rc) { /* `old` is text this file produced: it parses */
        const char *text = old ? old : "{}";
        loaded = !(rc = df_yaml_load(text, strlen(text), place, DF_YAML_VALUE, &od));
        if (rc && rc != DF_ENOMEM)
            rc = df_error(DF_EINTERNAL, "%s: stored mapping text does not parse", place);
    }
    df_sbuf b = {0};
    if (!rc) {
        yaml_node_t *root = yaml_document_get_root_node(&od);
        rc = emit_patched(&b, &od, root && root->type == YAML_MAPPING_NODE ? root : NULL, path, np, vdoc, val,
                          place);
    }
    if (loaded)
        yaml_document_delete(&od);
    if (!rc && b.len > MAP_MAX_TEXT)
        rc = too_big(place);
    free(dup);
    if (rc) {
        df_sbuf_free(&b);
        return rc;
    }
    rc = df_sbuf_finish(&b, out);
    return rc ? df_error_wrap(rc, "%s", place) : DF_OK;
}

int cfg_map_each(const char *text, int (*fn)(void *user, const char *key, const char *value), void *user)
{
    yaml_document_t doc;
    int rc = df_yaml_load(text, strlen(text), "map text", DF_YAML_VALUE, &doc);
    if (rc) /* text this file produced parses */
        return rc == DF_ENOMEM ? rc : df_error(DF_EINTERNAL, "stored mapping text does not parse");
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    for (yaml_node_pair_t *p = root && root->type == YAML_MAPPING_NODE ? root->data.mapping.pairs.start : NULL;
         p && !rc && p < root->data.mapping.pairs.top; p++) {
        df_sbuf k = {0}, v = {0};
        rc = emit(&k, &doc, yaml_document_get_node(&doc, p->key), 1, "map text");
        if (!rc)
            rc = emit(&v, &doc, yaml_document_get_node(&doc, p->value), 1, "map text");
        char *ks = NULL, *vs = NULL;
        if (!rc)
            rc = df_sbuf_finish(&k, &ks);
        if (!rc)
            rc = df_sbuf_finish(&v, &vs);
        if (!rc)
            rc = fn(user, ks, vs);
        df_sbuf_free(&k); /* a no-op once finished */
        df_sbuf_free(&v);
        free(ks);
        free(vs);
    }
    yaml_document_delete(&doc);
    return rc;
}
