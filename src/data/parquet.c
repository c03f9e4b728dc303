/* A Parquet file's rows as JSON objects (data/parquet.h): the schema tree, then each row group's
 * columns assembled back into records from their repetition / definition levels (Dremel). */
#include "data/parquet.h"

#include "data/jsonl.h"
#include "data/parquet_internal.h"
#include "distflow/common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NESTING 64

enum { LEAF, STRUCT, LIST, MAP };

typedef struct node {
    const pq_schema_el *el;
    int kind;
    int def, rep;              /* maximum levels at this node (itself included) */
    int first_leaf, last_leaf; /* leaves under it: [first, last) */
    int *child, nchild;
    int repeated, element;     /* LIST: its repeated child and the element node (may be the same);
                                  MAP: the repeated key_value group, and its key (its value follows) */
    char *path;                /* dotted column path, for messages */
} node;

typedef struct tree {
    node *nodes;
    int n;
    int *leaf; /* leaf index -> node */
    int nleaves;
} tree;

typedef struct asm_ctx {
    const tree *t;
    pq_column *cols;
    int64_t *lv, *v; /* each leaf's cursor: next level pair, next value */
    const char *name;
    int64_t row;     /* 1-based row being assembled */
} asm_ctx;

/* ---- the schema tree ----------------------------------------------------------------- */

static bool is_list(const pq_schema_el *e) { return e->converted == PQ_CT_LIST || e->logical == PQ_LT_LIST; }

/* A MAP group (its repeated key_value child, once annotated MAP_KEY_VALUE, is read as a struct). */
static bool is_map(const pq_schema_el *e) { return e->converted == PQ_CT_MAP || e->logical == PQ_LT_MAP; }

static char *join_path(const char *parent, const char *name)
{
    size_t a = parent ? strlen(parent) : 0, b = strlen(name);
    char *p = malloc(a + b + 2);
    if (p)
        snprintf(p, a + b + 2, "%s%s%s", parent ? parent : "", a ? "." : "", name);
    return p;
}

/* The LIST element of parquet's LogicalTypes.md backward-compatibility rules: the repeated child
 * itself when it is a primitive, has several fields, or is named "array" / "<list>_tuple". */
static int list_element(const tree *t, const node *list, int r)
{
    const node *rn = &t->nodes[r];
    char tuple[512];
    snprintf(tuple, sizeof tuple, "%s_tuple", list->el->name);
    if (rn->kind == LEAF || rn->nchild != 1 || !strcmp(rn->el->name, "array") || !strcmp(rn->el->name, tuple))
        return r;
    return rn->child[0];
}

static int build(tree *t, const pq_meta *m, int *pos, const node *parent, int depth, const char *name)
{
    if (*pos >= m->nschema)
        return df_error(DF_EINVAL, "%s: corrupt Parquet schema (fewer elements than its groups name)", name);
    if (depth > MAX_NESTING)
        return df_error(DF_EUNSUPPORTED, "%s: schema nested deeper than %d levels", name, MAX_NESTING);
    const pq_schema_el *e = &m->schema[*pos];
    int me = t->n++;
    node *n = &t->nodes[me];
    *n = (node){.el = e, .first_leaf = t->nleaves, .repeated = -1, .element = -1};
    (*pos)++;
    bool root = !parent;
    n->def = root ? 0 : parent->def + (e->repetition != PQ_REQUIRED);
    n->rep = root ? 0 : parent->rep + (e->repetition == PQ_REPEATED);
    if (!(n->path = root ? strdup("") : join_path(parent->path, e->name)))
        return df_error(DF_ENOMEM, "out of memory");
    if (e->repetition < PQ_REQUIRED || e->repetition > PQ_REPEATED)
        return df_error(DF_EINVAL, "%s: column '%s': unknown repetition %d", name, n->path, e->repetition);
    if (e->num_children <= 0) {
        if (e->type < 0)
            return df_error(DF_EINVAL, "%s: column '%s': a group without fields", name, n->path);
        n->kind = LEAF;
        t->leaf[t->nleaves++] = me;
        n->last_leaf = t->nleaves;
        return DF_OK;
    }
    n->kind = is_list(e) ? LIST : is_map(e) ? MAP : STRUCT;
    if (e->num_children > m->nschema || !(n->child = malloc((size_t)e->num_children * sizeof(int))))
        return e->num_children > m->nschema ? df_error(DF_EINVAL, "%s: corrupt Parquet schema", name)
                                            : df_error(DF_ENOMEM, "out of memory");
    for (int i = 0; i < e->num_children; i++) {
        n->child[n->nchild++] = t->n;
        int rc = build(t, m, pos, &t->nodes[me], depth + 1, name);
        n = &t->nodes[me];
        if (rc)
            return rc;
    }
    n->last_leaf = t->nleaves;
    if (n->kind == LIST || n->kind == MAP) {
        const char *what = n->kind == LIST ? "a LIST" : "a MAP";
        if (n->nchild != 1 || t->nodes[n->child[0]].el->repetition != PQ_REPEATED)
            return df_error(DF_EINVAL, "%s: column '%s': %s whose only field is not repeated", name, n->path, what);
        n->repeated = n->child[0];
        const node *kv = &t->nodes[n->repeated];
        if (n->kind == MAP && (kv->kind == LEAF || kv->nchild != 2))
            return df_error(DF_EINVAL, "%s: column '%s': a MAP whose entries are not (key, value) pairs", name,
                            n->path);
        n->element = n->kind == LIST ? list_element(t, n, n->repeated) : kv->child[0];
    }
    return DF_OK;
}

static void tree_free(tree *t)
{
    for (int i = 0; i < t->n; i++) {
        free(t->nodes[i].child);
        free(t->nodes[i].path);
    }
    free(t->nodes);
    free(t->leaf);
}

static int tree_build(const pq_meta *m, const char *name, tree *t)
{
    *t = (tree){0};
    t->nodes = calloc((size_t)m->nschema, sizeof *t->nodes);
    t->leaf = calloc((size_t)m->nschema, sizeof *t->leaf);
    if (!t->nodes || !t->leaf)
        return df_error(DF_ENOMEM, "out of memory");
    int pos = 0;
    int rc = build(t, m, &pos, NULL, 0, name);
    if (!rc && pos != m->nschema)
        rc = df_error(DF_EINVAL, "%s: corrupt Parquet schema (%d elements after the root's fields)", name,
                      m->nschema - pos);
    if (!rc && t->nodes[0].kind != STRUCT)
        rc = df_error(DF_EINVAL, "%s: corrupt Parquet schema (the root is not a group)", name);
    return rc;
}

/* ---- record assembly ----------------------------------------------------------------------- */

static int corrupt_levels(const asm_ctx *a, const node *n)
{
    return df_error(DF_EINVAL, "%s: row %lld, column '%s': corrupt Parquet data (levels and values disagree)",
                    a->name, (long long)a->row, n->path);
}

/* The definition level of the next slot of n's first leaf; -1 when that column has ended. */
static int next_def(const asm_ctx *a, const node *n)
{
    int l = n->first_leaf;
    return a->lv[l] < a->cols[l].n_levels ? a->cols[l].def[a->lv[l]] : -1;
}

/* n is null or empty here: every leaf under it holds one slot without a value. */
static int skip_slot(asm_ctx *a, const node *n)
{
    for (int l = n->first_leaf; l < n->last_leaf; l++) {
        const node *leaf = &a->t->nodes[a->t->leaf[l]];
        if (a->lv[l] >= a->cols[l].n_levels || a->cols[l].def[a->lv[l]] >= leaf->def)
            return corrupt_levels(a, n);
        a->lv[l]++;
    }
    return DF_OK;
}

/* A DECIMAL's value, unscaled (big-endian two's complement, n bytes) / 10^scale, as the double
   nearest its decimal text: the text strtod reads, so it is the number DuckDB's or pandas' JSON of
   the same value parses to. */
static json_t *decimal_json(const uint8_t *be, size_t n, int scale)
{
    uint8_t mag[64];
    char digits[160], text[176];
    if (n == 0 || n > sizeof mag || scale < 0 || scale > 100)
        return NULL;
    bool neg = be[0] & 0x80;
    for (size_t i = 0; i < n; i++)
        mag[i] = neg ? (uint8_t)~be[i] : be[i];
    for (size_t i = n; neg && i-- > 0;) /* two's complement: invert, add one */
        if (++mag[i])
            break;
    int nd = 0;
    for (bool nonzero = true; nonzero && nd < (int)sizeof digits;) { /* divide by 10, digit by digit */
        unsigned rem = 0;
        nonzero = false;
        for (size_t i = 0; i < n; i++) {
            unsigned cur = rem << 8 | mag[i];
            mag[i] = (uint8_t)(cur / 10);
            rem = cur % 10;
            nonzero |= mag[i] != 0;
        }
        digits[nd++] = (char)('0' + rem);
    }
    while (nd <= scale) /* at least one digit before the point */
        digits[nd++] = '0';
    int k = 0;
    if (neg)
        text[k++] = '-';
    for (int i = nd - 1; i >= 0; i--) {
        text[k++] = digits[i];
        if (i == scale && scale > 0)
            text[k++] = '.';
    }
    text[k] = 0;
    return json_real(strtod(text, NULL));
}

static json_t *uuid_json(const uint8_t *b)
{
    char s[37];
    int k = 0;
    for (int i = 0; i < 16; i++) {
        k += snprintf(s + k, sizeof s - (size_t)k, "%02x", b[i]);
        if (i == 3 || i == 5 || i == 7 || i == 9)
            s[k++] = '-';
    }
    return json_stringn(s, 36);
}

/* IEEE half precision (little-endian, Parquet's FLOAT16) widened exactly. */
static double half_to_double(const uint8_t *b)
{
    unsigned h = b[0] | (unsigned)b[1] << 8, e = h >> 10 & 0x1f, m = h & 0x3ff;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m | 0x400, (int)e - 25);
    return h & 0x8000 ? -v : v;
}

static int leaf_json(const asm_ctx *a, const node *n, const pq_value *v, json_t **out)
{
    const pq_schema_el *e = n->el;
    bool is_unsigned = e->int_unsigned || (e->converted >= PQ_CT_UINT_8 && e->converted <= PQ_CT_UINT_64);
    bool decimal = e->converted == PQ_CT_DECIMAL || e->logical == PQ_LT_DECIMAL;
    switch (e->type) {
    case PQ_BOOLEAN:
        *out = json_boolean(v->i);
        break;
    case PQ_INT32:
    case PQ_INT64: {
        int64_t i = e->type == PQ_INT32 && is_unsigned ? (int64_t)(uint32_t)v->i : v->i;
        if (e->type == PQ_INT64 && is_unsigned && i < 0)
            return df_error(DF_EINVAL, "%s: row %lld, column '%s': unsigned value %llu is above INT64_MAX", a->name,
                            (long long)a->row, n->path, (unsigned long long)i);
        uint8_t be[8];
        for (int k = 0; k < 8; k++)
            be[k] = (uint8_t)((uint64_t)i >> (56 - 8 * k));
        *out = decimal ? decimal_json(be, 8, e->scale) : json_integer((json_int_t)i);
        break;
    }
    case PQ_FLOAT:
    case PQ_DOUBLE:
        *out = isfinite(v->d) ? json_real(v->d) : json_null();
        break;
    default: /* BYTE_ARRAY, FIXED_LEN_BYTE_ARRAY */
        if (decimal && !(*out = decimal_json(v->s, v->n, e->scale)))
            return df_error(DF_EUNSUPPORTED, "%s: row %lld, column '%s': a DECIMAL of %u bytes, scale %d", a->name,
                            (long long)a->row, n->path, v->n, e->scale);
        else if (decimal)
            break;
        if (e->logical == PQ_LT_UUID && v->n == 16)
            *out = uuid_json(v->s);
        else if (e->logical == PQ_LT_FLOAT16 && v->n == 2)
            *out = isfinite(half_to_double(v->s)) ? json_real(half_to_double(v->s)) : json_null();
        else if (!(*out = json_stringn((const char *)v->s, v->n)))
            return df_error(DF_EINVAL, "%s: row %lld, column '%s': a value that is not UTF-8 text (binary data?)",
                            a->name, (long long)a->row, n->path);
    }
    return *out ? DF_OK : df_error(DF_ENOMEM, "out of memory");
}

static int value(asm_ctx *a, int ni, bool as_element, json_t **out);

/* The list whose repeated node is r and element e: elements while the first leaf repeats at r. */
static int list(asm_ctx *a, int r, int e, json_t **out)
{
    const node *rn = &a->t->nodes[r];
    int l = rn->first_leaf;
    if (next_def(a, rn) < rn->def) { /* no element */
        int rc = skip_slot(a, rn);
        *out = rc ? NULL : json_array();
        return rc ? rc : *out ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    }
    json_t *arr = json_array();
    if (!arr)
        return df_error(DF_ENOMEM, "out of memory");
    do {
        json_t *item = NULL;
        int rc = value(a, e, e == r, &item);
        if (!rc && json_array_append_new(arr, item))
            rc = df_error(DF_ENOMEM, "out of memory");
        if (rc) {
            json_decref(arr);
            return rc;
        }
    } while (a->lv[l] < a->cols[l].n_levels && a->cols[l].rep[a->lv[l]] == rn->rep);
    *out = arr;
    return DF_OK;
}

/* A MAP's entries as an object: its key_value groups read as a list of {key, value} objects, then
   each key as text (a string as is; a number or boolean as JSON prints it, as DuckDB's to_json and
   pandas' do), a later entry of the same key winning. */
static int map_object(asm_ctx *a, const node *n, json_t **out)
{
    const node *kv = &a->t->nodes[n->repeated];
    const char *kname = a->t->nodes[kv->child[0]].el->name, *vname = a->t->nodes[kv->child[1]].el->name;
    json_t *pairs = NULL, *obj = NULL, *p;
    int rc = list(a, n->repeated, n->repeated, &pairs);
    if (!rc && !(obj = json_object()))
        rc = df_error(DF_ENOMEM, "out of memory");
    size_t i;
    json_array_foreach(rc ? NULL : pairs, i, p) {
        json_t *key = json_object_get(p, kname);
        char *text = NULL;
        if (!json_is_string(key) && (rc = df_jsonl_text(key, &text)))
            break;
        if (json_object_set(obj, text ? text : json_string_value(key), json_object_get(p, vname)))
            rc = df_error(DF_ENOMEM, "out of memory");
        free(text);
        if (rc)
            break;
    }
    json_decref(pairs);
    if (rc)
        json_decref(obj);
    else
        *out = obj;
    return rc;
}

static int object(asm_ctx *a, const node *n, json_t **out)
{
    json_t *obj = json_object();
    int rc = obj ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    for (int i = 0; !rc && i < n->nchild; i++) {
        json_t *item = NULL;
        rc = value(a, n->child[i], false, &item);
        if (!rc && json_object_set_new(obj, a->t->nodes[n->child[i]].el->name, item))
            rc = df_error(DF_ENOMEM, "out of memory");
    }
    if (rc)
        json_decref(obj);
    else
        *out = obj;
    return rc;
}

/* Node ni's value at its columns' cursors. `as_element`: ni is the repeated node of a list (its
 * presence already known), read as one element. */
static int value(asm_ctx *a, int ni, bool as_element, json_t **out)
{
    const node *n = &a->t->nodes[ni];
    int d = next_def(a, n);
    if (d < 0)
        return corrupt_levels(a, n);
    if (!as_element && n->el->repetition == PQ_REPEATED)
        return list(a, ni, ni, out); /* a bare repeated field: the list of its occurrences */
    if (!as_element && n->el->repetition == PQ_OPTIONAL && d < n->def) {
        int rc = skip_slot(a, n);
        *out = rc ? NULL : json_null();
        return rc;
    }
    if (n->kind == STRUCT)
        return object(a, n, out);
    if (n->kind == LIST)
        return list(a, n->repeated, n->element, out);
    if (n->kind == MAP)
        return map_object(a, n, out);
    int l = n->first_leaf;
    if (d != n->def || a->v[l] >= a->cols[l].n_values)
        return corrupt_levels(a, n);
    a->lv[l]++;
    return leaf_json(a, n, &a->cols[l].values[a->v[l]++], out);
}

/* ---- row groups -------------------------------------------------------------------------- */

static int check_chunk_path(const tree *t, const pq_chunk *c, int l, const char *name)
{
    const node *leaf = &t->nodes[t->leaf[l]];
    size_t off = 0, len = strlen(leaf->path);
    bool same = c->type == leaf->el->type;
    for (int k = 0; same && k < c->npath; k++) {
        size_t s = c->path[k] ? strlen(c->path[k]) : 0;
        same = c->path[k] && off + s <= len && !strncmp(leaf->path + off, c->path[k], s) &&
               (leaf->path[off + s] == (k + 1 < c->npath ? '.' : 0));
        off += s + 1;
    }
    if (!same || !c->npath)
        return df_error(DF_EINVAL, "%s: corrupt Parquet file (column chunk %d does not match the schema's column '%s')",
                        name, l, leaf->path);
    return DF_OK;
}

static int row_group(const char *buf, size_t len, const tree *t, const pq_row_group *g, int64_t first_row,
                     const char *name, json_t *rows)
{
    if (g->ncols != t->nleaves)
        return df_error(DF_EINVAL, "%s: corrupt Parquet file (a row group has %d columns, the schema %d)", name,
                        g->ncols, t->nleaves);
    asm_ctx a = {.t = t, .name = name, .row = first_row};
    a.cols = calloc((size_t)t->nleaves + 1, sizeof *a.cols);
    a.lv = calloc((size_t)t->nleaves + 1, sizeof *a.lv);
    a.v = calloc((size_t)t->nleaves + 1, sizeof *a.v);
    int rc = a.cols && a.lv && a.v ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    for (int l = 0; !rc && l < t->nleaves; l++) {
        const node *leaf = &t->nodes[t->leaf[l]];
        if (!(rc = check_chunk_path(t, &g->cols[l], l, name)))
            rc = pq_column_read((const uint8_t *)buf, len, &g->cols[l], leaf->el->type_length, leaf->rep, leaf->def,
                                name, leaf->path,
                                &a.cols[l]);
    }
    for (int64_t r = 0; !rc && r < g->num_rows; r++, a.row++) {
        for (int l = 0; !rc && l < t->nleaves; l++)
            if (a.lv[l] >= a.cols[l].n_levels || a.cols[l].rep[a.lv[l]] != 0)
                rc = corrupt_levels(&a, &t->nodes[t->leaf[l]]);
        json_t *obj = NULL;
        if (!rc && !(rc = object(&a, &t->nodes[0], &obj)) && json_array_append_new(rows, obj))
            rc = df_error(DF_ENOMEM, "out of memory");
    }
    for (int l = 0; !rc && l < t->nleaves; l++)
        if (a.lv[l] != a.cols[l].n_levels || a.v[l] != a.cols[l].n_values)
            rc = df_error(DF_EINVAL, "%s: corrupt Parquet file (column '%s' holds more values than its row group's "
                          "%lld rows)", name, t->nodes[t->leaf[l]].path, (long long)g->num_rows);
    for (int l = 0; a.cols && l < t->nleaves; l++)
        pq_column_free(&a.cols[l]);
    free(a.cols);
    free(a.lv);
    free(a.v);
    return rc;
}

bool df_parquet_is(const char *buf, size_t len) { return len >= 4 && !memcmp(buf, "PAR1", 4); }

int df_parquet_rows(const char *buf, size_t len, const char *name, json_t **out)
{
    if (len < 12 || !df_parquet_is(buf, len) || memcmp(buf + len - 4, "PAR1", 4))
        return df_error(DF_EINVAL, "%s: truncated Parquet file (%zu bytes; no \"PAR1\" footer magic at its end)",
                        name, len);
    const uint8_t *u = (const uint8_t *)buf;
    uint32_t flen = (uint32_t)u[len - 8] | (uint32_t)u[len - 7] << 8 | (uint32_t)u[len - 6] << 16 |
                    (uint32_t)u[len - 5] << 24;
    if (flen > len - 12)
        return df_error(DF_EINVAL, "%s: corrupt Parquet file (a %u-byte footer in a %zu-byte file)", name, flen, len);
    pq_meta m;
    int rc = pq_meta_parse(u + len - 8 - flen, flen, name, &m);
    if (rc)
        return rc;
    tree t;
    rc = tree_build(&m, name, &t);
    int64_t total = 0;
    for (int g = 0; !rc && g < m.nrgs; g++) {
        if (m.rgs[g].num_rows < 0)
            rc = df_error(DF_EINVAL, "%s: corrupt Parquet footer (a row group of %lld rows)", name,
                          (long long)m.rgs[g].num_rows);
        total += m.rgs[g].num_rows;
    }
    if (!rc && total != m.num_rows)
        rc = df_error(DF_EINVAL, "%s: corrupt Parquet footer (%lld rows stated, its row groups hold %lld)", name,
                      (long long)m.num_rows, (long long)total);
    json_t *rows = rc ? NULL : json_array();
    if (!rc && !rows)
        rc = df_error(DF_ENOMEM, "out of memory");
    int64_t first = 1;
    for (int g = 0; !rc && g < m.nrgs; first += m.rgs[g].num_rows, g++)
        rc = row_group(buf, len, &t, &m.rgs[g], first, name, rows);
    tree_free(&t);
    pq_meta_free(&m);
    if (rc)
        json_decref(rows);
    else
        *out = rows;
    return rc;
}
