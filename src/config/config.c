/* df_config: loading order, resolution of `${...}` and null_from, getters (config.h). */
#include "config/config_internal.h"
#include "util/fsutil.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PLACE_CAP 1024

void cfg_value_clear(cfg_value *v)
{
    free(v->s);
    for (int i = 0; v->items && i < v->n_items; i++)
        free(v->items[i]);
    free(v->items);
    free(v->fitems);
    memset(v, 0, sizeof *v);
}

static void subs_free(cfg_slot *s);

static void slots_free(cfg_slot *slots, int n)
{
    for (int i = 0; slots && i < n; i++) {
        cfg_value_clear(&slots[i].v);
        free(slots[i].raw);
        free(slots[i].where);
        subs_free(&slots[i]);
    }
    free(slots);
}

void df_config_free(df_config *c)
{
    if (!c)
        return;
    slots_free(c->slots, c->schema->n);
    free(c);
}

static int sub_find(const cfg_slot *s, const char *name, size_t n)
{
    for (int k = 0; k < s->n_subs; k++)
        if (strlen(s->subs[2 * k]) == n && !strncmp(s->subs[2 * k], name, n))
            return k;
    return -1;
}

int cfg_slot_note_sub(cfg_slot *s, const char *name, size_t n, const char *where)
{
    int k = sub_find(s, name, n);
    char *w = strdup(where);
    if (!w)
        return df_error(DF_ENOMEM, "%s: out of memory", where);
    if (k >= 0) {
        free(s->subs[2 * k + 1]);
        s->subs[2 * k + 1] = w;
        return DF_OK;
    }
    char **d = realloc(s->subs, (size_t)(s->n_subs + 1) * 2 * sizeof *d);
    char *nm = d ? strndup(name, n) : NULL;
    if (d)
        s->subs = d;
    if (!nm) {
        free(w);
        return df_error(DF_ENOMEM, "%s: out of memory", where);
    }
    s->subs[2 * s->n_subs] = nm;
    s->subs[2 * s->n_subs + 1] = w;
    s->n_subs++;
    return DF_OK;
}

const char *cfg_slot_sub_where(const cfg_slot *s, const char *name, size_t n)
{
    int k = sub_find(s, name, n);
    return k >= 0 ? s->subs[2 * k + 1] : s->where;
}

static void subs_free(cfg_slot *s)
{
    for (int k = 0; k < 2 * s->n_subs; k++)
        free(s->subs[k]);
    free(s->subs);
    s->subs = NULL;
    s->n_subs = 0;
}

int cfg_commit(df_config *c, int idx, cfg_value *v, char *raw, const char *where)
{
    cfg_slot *s = &c->slots[idx];
    char *w = strdup(where);
    if (!w) {
        cfg_value_clear(v);
        free(raw);
        return df_error(DF_ENOMEM, "%s: out of memory", where);
    }
    cfg_value_clear(&s->v);
    free(s->raw);
    free(s->where);
    s->v = *v;
    s->raw = raw;
    s->where = w;
    s->state = CFG_PENDING;
    return DF_OK;
}

/* ---- resolution ---- */

static int resolve_slot(df_config *c, int i);

/* Absolute key named by `${ref}` inside the value of `owner` (OmegaConf's
 * relative form `${.x}` is a sibling, `${..x}` a sibling of the parent). */
static char *ref_key(const char *owner, const char *ref, size_t n)
{
    size_t dots = 0;
    while (dots < n && ref[dots] == '.')
        dots++;
    if (!dots)
        return strndup(ref, n);
    size_t base = strlen(owner);
    for (size_t d = 0; d < dots; d++) {
        while (base > 0 && owner[base - 1] != '.')
            base--;
        if (base == 0)
            return NULL;
        base--; /* drop the dot */
    }
    char *k = malloc(base + 1 + (n - dots) + 1);
    if (k)
        sprintf(k, "%.*s.%.*s", (int)base, owner, (int)(n - dots), ref + dots);
    return k;
}

/* Resolve the key of `${...}` text [ref, ref+n) for slot `owner`; index or error. */
static int lookup_ref(df_config *c, int owner, const char *ref, size_t n, int *out)
{
    const df_config_entry *e = &c->schema->entries[owner];
    const char *where = c->slots[owner].where;
    if (memchr(ref, ':', n))
        return df_error(DF_EINVAL, "%s: %s: resolvers such as '${%.*s}' are not supported", where, e->key,
                        (int)n, ref);
    char *k = ref_key(e->key, ref, n);
    if (!k)
        return df_error(DF_EINVAL, "%s: %s: '${%.*s}' goes above the top level", where, e->key, (int)n, ref);
    int j = cfg_find(c->schema, k);
    if (j < 0) {
        char hint[256];
        int rc = cfg_suggest_key(c->schema, k, hint, sizeof hint)
                     ? df_error(DF_EINVAL, "%s: %s: '${%.*s}' names an unknown key '%s' (did you mean '%s'?)",
                                where, e->key, (int)n, ref, k, hint)
                     : df_error(DF_EINVAL, "%s: %s: '${%.*s}' names an unknown key '%s'", where, e->key,
                                (int)n, ref, k);
        free(k);
        return rc;
    }
    free(k);
    *out = j;
    return resolve_slot(c, j);
}

/* Assign the resolved value of slot j to slot i as YAML text (checks i's type). */
static int copy_from(df_config *c, int i, int j, const char *place, const char *where)
{
    df_sbuf b = {0};
    cfg_format_value(&b, &c->schema->entries[j], &c->slots[j].v);
    if (b.failed) {
        free(b.s);
        return df_error(DF_ENOMEM, "%s: out of memory", place);
    }
    cfg_src src = {.place = place, .where = where, .no_interp = true};
    int rc = cfg_assign_text(c, i, NULL, b.s, &src);
    free(b.s);
    return rc;
}

/* A string with `${...}` pieces: splice in the referenced values' text. */
static int splice(df_config *c, int i, const char *raw, const char *where)
{
    const df_config_entry *e = &c->schema->entries[i];
    df_sbuf b = {0};
    int rc = DF_OK;
    for (const char *p = raw; *p && !rc;) {
        const char *open = strstr(p, "${");
        if (!open) {
            df_sbuf_puts(&b, p);
            break;
        }
        df_sbuf_put(&b, p, (size_t)(open - p));
        const char *close = strchr(open + 2, '}');
        if (!close) {
            rc = df_error(DF_EINVAL, "%s: %s: unterminated '${' in \"%s\"", where, e->key, raw);
            break;
        }
        int j;
        rc = lookup_ref(c, i, open + 2, (size_t)(close - open - 2), &j);
        if (!rc) {
            const cfg_slot *r = &c->slots[j];
            if (c->schema->entries[j].type == DF_CFG_STR && !r->v.is_null)
                df_sbuf_puts(&b, r->v.s);
            else
                cfg_format_value(&b, &c->schema->entries[j], &r->v);
        }
        p = close + 1;
    }
    if (!rc && b.failed)
        rc = df_error(DF_ENOMEM, "%s: out of memory", where);
    cfg_value v = {.s = b.s ? b.s : strdup("")};
    if (!rc && !v.s)
        rc = df_error(DF_ENOMEM, "%s: out of memory", where);
    if (!rc)
        rc = cfg_check(e, &v, where);
    if (rc) {
        cfg_value_clear(&v);
        return rc;
    }
    return cfg_commit(c, i, &v, NULL, where);
}

#define OC_SELECT "oc.select:"

/* Whole-value `${oc.select:key}` / `${oc.select:key,default}` (verl's generated configs): the key's
 * value when the table has that key (relative forms as in `${.key}`), else the default's YAML text
 * (null without one), as OmegaConf's resolver does for a key the config lacks. A group or a path inside
 * a free-form map is not a key: it takes the default too. */
static int resolve_select(df_config *c, int i, const char *body, size_t n, const char *where)
{
    const char *comma = memchr(body, ',', n);
    size_t kn = comma ? (size_t)(comma - body) : n;
    while (kn && *body == ' ')
        body++, kn--;
    while (kn && body[kn - 1] == ' ')
        kn--;
    char *k = kn ? ref_key(c->schema->entries[i].key, body, kn) : NULL;
    if (!k)
        return df_error(DF_EINVAL, "%s: %s: '${" OC_SELECT "%.*s}' names no key", where,
                        c->schema->entries[i].key, (int)n, body);
    int j = cfg_find(c->schema, k);
    free(k);
    if (j >= 0) {
        int rc = resolve_slot(c, j);
        return rc ? rc : copy_from(c, i, j, where, where);
    }
    char *def = comma ? strndup(comma + 1, (size_t)(body + n - comma - 1)) : strdup("null");
    if (!def)
        return df_error(DF_ENOMEM, "%s: out of memory", where);
    cfg_src src = {.place = where, .where = where, .no_interp = true};
    int rc = cfg_assign_text(c, i, NULL, def, &src);
    free(def);
    return rc;
}

static int resolve_raw(df_config *c, int i)
{
    cfg_slot *s = &c->slots[i];
    char *raw = s->raw, *where = strdup(s->where);
    s->raw = NULL;
    int rc = where ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    size_t n = strlen(raw);
    bool whole = !strncmp(raw, "${", 2) && raw[n - 1] == '}' && strchr(raw, '}') == raw + n - 1;
    int j;
    size_t sel = strlen(OC_SELECT);
    if (!rc && whole && !strncmp(raw + 2, OC_SELECT, sel)) {
        rc = resolve_select(c, i, raw + 2 + sel, n - 3 - sel, where);
    } else if (!rc && whole) {
        rc = lookup_ref(c, i, raw + 2, n - 3, &j);
        if (!rc)
            rc = copy_from(c, i, j, where, where);
    } else if (!rc) {
        rc = splice(c, i, raw, where);
    }
    free(raw);
    free(where);
    return rc;
}

static int resolve_slot(df_config *c, int i)
{
    cfg_slot *s = &c->slots[i];
    const df_config_entry *e = &c->schema->entries[i];
    if (s->state == CFG_DONE)
        return DF_OK;
    if (s->state == CFG_RESOLVING)
        return df_error(DF_EINVAL, "%s: %s: interpolation cycle through this key", s->where, e->key);
    s->state = CFG_RESOLVING;
    int rc = s->raw ? resolve_raw(c, i) : DF_OK;
    s->state = CFG_RESOLVING; /* resolve_raw's commit reset it */
    if (!rc && s->v.is_null && e->null_from) {
        int j = cfg_find(c->schema, e->null_from);
        assert(j >= 0); /* df_config_schema_check */
        rc = j < 0 ? DF_EINTERNAL : resolve_slot(c, j);
        char place[PLACE_CAP], where[300];
        snprintf(place, sizeof place, "%s (default of %s)", c->slots[j].where, e->key);
        snprintf(where, sizeof where, "derived from %s", e->null_from);
        if (!rc)
            rc = copy_from(c, i, j, place, where);
    }
    s->state = rc ? CFG_PENDING : CFG_DONE;
    return rc;
}

int cfg_resolve(df_config *c)
{
    for (int i = 0; i < c->schema->n; i++) {
        int rc = resolve_slot(c, i);
        if (rc)
            return rc;
    }
    return DF_OK;
}

/* ---- loading ---- */

/* Finish a config built with status rc: resolve interpolations into *out, or free it. */
static int resolved(df_config *c, int rc, df_config **out)
{
    if (!rc)
        rc = cfg_resolve(c);
    if (rc) {
        df_config_free(c);
        return rc;
    }
    *out = c;
    return DF_OK;
}

static int load(const df_config_schema *s, const char *text, size_t len, const char *name,
                const char *const *overrides, int n_overrides, df_config **out)
{
    *out = NULL;
    df_config *c = calloc(1, sizeof *c);
    if (c)
        c->slots = calloc((size_t)s->n, sizeof *c->slots);
    if (!c || !c->slots) {
        free(c);
        return df_error(DF_ENOMEM, "out of memory creating the %s config", s->name);
    }
    c->schema = s;
    int rc = DF_OK;
    char place[PLACE_CAP];
    for (int i = 0; i < s->n && !rc; i++) {
        snprintf(place, sizeof place, "schema %s: default of %s", s->name, s->entries[i].key);
        cfg_src src = {.place = place, .where = "default"};
        if ((rc = cfg_assign_text(c, i, NULL, s->entries[i].dflt, &src)))
            rc = df_error_wrap(DF_EINTERNAL, "bad schema default");
    }
    if (!rc && text)
        rc = cfg_apply_document(c, text, len, name);
    for (int i = 0; i < n_overrides && !rc; i++)
        rc = cfg_apply_override(c, overrides[i]);
    return resolved(c, rc, out);
}

int df_config_load_text(const df_config_schema *s, const char *yaml_text, const char *name,
                        const char *const *overrides, int n_overrides, df_config **out)
{
    return load(s, yaml_text, yaml_text ? strlen(yaml_text) : 0, name ? name : "<string>", overrides,
                n_overrides, out);
}

int df_config_load(const df_config_schema *s, const char *yaml_path, const char *const *overrides,
                   int n_overrides, df_config **out)
{
    *out = NULL;
    if (!yaml_path)
        return load(s, NULL, 0, NULL, overrides, n_overrides, out);
    char *text;
    size_t len;
    int rc = df_read_file(yaml_path, &text, &len);
    if (rc)
        return df_error_wrap(rc, "config");
    rc = load(s, text, len, yaml_path, overrides, n_overrides, out);
    free(text);
    return rc;
}

const df_config_schema *df_config_get_schema(const df_config *c) { return c->schema; }

/* ---- getters ---- */

static const cfg_slot *slot_of(const df_config *c, const char *key, df_config_type want,
                               df_config_type also)
{
    int i = cfg_find(c->schema, key);
    assert(i >= 0 && "config key not in the schema");
    if (i < 0)
        return NULL;
    df_config_type t = c->schema->entries[i].type;
    assert((t == want || t == also) && "config getter of the wrong type");
    return t == want || t == also ? &c->slots[i] : NULL;
}

int64_t df_config_int(const df_config *c, const char *key)
{
    const cfg_slot *s = slot_of(c, key, DF_CFG_INT, DF_CFG_INT);
    assert(s && !s->v.is_null);
    return s ? s->v.i : 0;
}

double df_config_float(const df_config *c, const char *key)
{
    const cfg_slot *s = slot_of(c, key, DF_CFG_FLOAT, DF_CFG_INT);
    assert(s && !s->v.is_null);
    if (!s)
        return 0;
    return c->schema->entries[s - c->slots].type == DF_CFG_INT ? (double)s->v.i : s->v.f;
}

bool df_config_bool(const df_config *c, const char *key)
{
    const cfg_slot *s = slot_of(c, key, DF_CFG_BOOL, DF_CFG_BOOL);
    assert(s && !s->v.is_null);
    return s ? s->v.b : false;
}

const char *df_config_str(const df_config *c, const char *key)
{
    const cfg_slot *s = slot_of(c, key, DF_CFG_STR, DF_CFG_STR);
    return s && !s->v.is_null ? s->v.s : NULL;
}

const char *df_config_map_text(const df_config *c, const char *key)
{
    const cfg_slot *s = slot_of(c, key, DF_CFG_MAP, DF_CFG_MAP);
    return s && !s->v.is_null ? s->v.s : NULL;
}

int df_config_list_len(const df_config *c, const char *key)
{
    const cfg_slot *s = slot_of(c, key, DF_CFG_STR_LIST, DF_CFG_FLOAT_LIST);
    return s && !s->v.is_null ? s->v.n_items : 0;
}

const char *df_config_list_at(const df_config *c, const char *key, int i)
{
    const cfg_slot *s = slot_of(c, key, DF_CFG_STR_LIST, DF_CFG_STR_LIST);
    assert(s && i >= 0 && i < s->v.n_items);
    return s && i >= 0 && i < s->v.n_items ? s->v.items[i] : NULL;
}

double df_config_list_float_at(const df_config *c, const char *key, int i)
{
    const cfg_slot *s = slot_of(c, key, DF_CFG_FLOAT_LIST, DF_CFG_FLOAT_LIST);
    assert(s && i >= 0 && i < s->v.n_items);
    return s && i >= 0 && i < s->v.n_items ? s->v.fitems[i] : 0;
}

bool df_config_is_null(const df_config *c, const char *key)
{
    int i = cfg_find(c->schema, key);
    assert(i >= 0 && "config key not in the schema");
    return i >= 0 && c->slots[i].v.is_null;
}

const char *df_config_where(const df_config *c, const char *key)
{
    int i = cfg_find(c->schema, key);
    int o = i < 0 ? cfg_open_owner(c->schema, key) : -1;
    if (o >= 0) { /* another name in an open group: where that name was last set */
        const char *name = key + strlen(c->schema->entries[o].key) - 1;
        return cfg_slot_sub_where(&c->slots[o], name, strcspn(name, "."));
    }
    assert(i >= 0 && "config key not in the schema");
    return i >= 0 ? c->slots[i].where : "";
}

/* ---- df_config_set: all or nothing, so work on a copy of the slots ---- */

static int value_copy(cfg_value *dst, const cfg_value *src)
{
    *dst = *src;
    dst->s = NULL;
    dst->items = NULL;
    dst->fitems = NULL;
    bool ok = true;
    if (src->s)
        ok = (dst->s = strdup(src->s)) != NULL;
    if (ok && src->items) {
        ok = (dst->items = calloc((size_t)src->n_items + 1, sizeof *dst->items)) != NULL;
        for (int i = 0; ok && i < src->n_items; i++)
            ok = (dst->items[i] = strdup(src->items[i])) != NULL;
    }
    if (ok && src->fitems) {
        ok = (dst->fitems = malloc(((size_t)src->n_items + 1) * sizeof *dst->fitems)) != NULL;
        if (ok)
            memcpy(dst->fitems, src->fitems, (size_t)src->n_items * sizeof *dst->fitems);
    }
    if (!ok)
        cfg_value_clear(dst);
    return ok ? DF_OK : DF_ENOMEM;
}

static cfg_slot *slots_copy(const df_config *c)
{
    int n = c->schema->n;
    cfg_slot *d = calloc((size_t)n, sizeof *d);
    for (int i = 0; d && i < n; i++) {
        const cfg_slot *s = &c->slots[i];
        d[i].file_line = s->file_line;
        d[i].state = s->state;
        bool ok = !value_copy(&d[i].v, &s->v) && (d[i].where = strdup(s->where)) &&
                  (!s->raw || (d[i].raw = strdup(s->raw)));
        for (int k = 0; ok && k < s->n_subs; k++)
            ok = !cfg_slot_note_sub(&d[i], s->subs[2 * k], strlen(s->subs[2 * k]), s->subs[2 * k + 1]);
        if (!ok) {
            slots_free(d, n);
            return NULL;
        }
    }
    return d;
}

int df_config_set(df_config *c, const char *key, const char *yaml_value)
{
    char place[PLACE_CAP];
    snprintf(place, sizeof place, "df_config_set: '%s=%s'", key, yaml_value);
    cfg_slot *saved = slots_copy(c);
    if (!saved)
        return df_error(DF_ENOMEM, "%s: out of memory", place);
    cfg_src src = {.place = place, .where = "set by program"};
    int rc = cfg_assign_text(c, -1, key, *yaml_value ? yaml_value : "''", &src);
    if (!rc)
        rc = cfg_resolve(c);
    if (rc) {
        slots_free(c->slots, c->schema->n);
        c->slots = saved;
        return rc;
    }
    slots_free(saved, c->schema->n);
    return DF_OK;
}

/* ---- copies with overrides (per-node configs of workflow files) ---- */

int df_config_copy(const df_config *c, df_config **out)
{
    *out = NULL;
    df_config *d = calloc(1, sizeof *d);
    if (!d || !(d->slots = slots_copy(c))) {
        free(d);
        return df_error(DF_ENOMEM, "out of memory copying a config");
    }
    d->schema = c->schema;
    *out = d;
    return DF_OK;
}

int df_config_with_overrides(const df_config *base, const char *const *keys,
                             const char *const *values, int n, const char *where,
                             df_config **out)
{
    *out = NULL;
    if (n < 0 || (n > 0 && (!keys || !values)))
        return df_error(DF_EINVAL, "df_config_with_overrides: bad override list");
    const char *origin = where && where[0] ? where : "override";
    df_config *c = NULL;
    int rc = df_config_copy(base, &c);
    for (int i = 0; !rc && i < n; i++) {
        char place[PLACE_CAP];
        snprintf(place, sizeof place, "%s: '%s=%s'", origin, keys[i], values[i]);
        cfg_src src = {.place = place, .where = origin};
        rc = cfg_assign_text(c, -1, keys[i], values[i][0] ? values[i] : "''", &src);
    }
    return resolved(c, rc, out);
}

bool df_config_strs_has(const df_config_strs *l, const char *item)
{
    for (int i = 0; i < l->n; i++)
        if (!strcmp(l->items[i], item))
            return true;
    return false;
}

bool cfg_slot_user_set(const cfg_slot *s)
{
    return strcmp(s->where, "default") && strncmp(s->where, "derived from ", 13);
}

bool df_config_is_set(const df_config *c, const char *key)
{
    int i = cfg_find(c->schema, key);
    assert(i >= 0 && "config key not in the schema");
    return i >= 0 && cfg_slot_user_set(&c->slots[i]);
}
