/* Schema accessors, help printing and the table self-check (config.h). */
#include "config/config_internal.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *df_config_schema_name(const df_config_schema *s) { return s->name; }

int df_config_schema_count(const df_config_schema *s) { return s->n; }

const df_config_entry *df_config_schema_at(const df_config_schema *s, int i)
{
    return i >= 0 && i < s->n ? &s->entries[i] : NULL;
}

int cfg_find(const df_config_schema *s, const char *key)
{
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->entries[i].key, key))
            return i;
    return -1;
}

const df_config_entry *df_config_schema_find(const df_config_schema *s, const char *key)
{
    int i = cfg_find(s, key);
    return i < 0 ? NULL : &s->entries[i];
}

bool cfg_is_group(const df_config_schema *s, const char *key)
{
    size_t n = strlen(key);
    for (int i = 0; i < s->n; i++)
        if (!strncmp(s->entries[i].key, key, n) && s->entries[i].key[n] == '.')
            return true;
    return false;
}

bool cfg_is_open(const df_config_entry *e)
{
    size_t n = strlen(e->key);
    return n > 2 && !strcmp(e->key + n - 2, ".*");
}

int cfg_open_owner(const df_config_schema *s, const char *key)
{
    for (int i = 0; i < s->n; i++) {
        if (!cfg_is_open(&s->entries[i]))
            continue;
        size_t g = strlen(s->entries[i].key) - 1; /* "grp." */
        if (strncmp(key, s->entries[i].key, g) || !key[g] || key[g] == '.')
            continue;
        /* the first component below the group: a typed key or group of it is not "other" */
        size_t n = g + strcspn(key + g, ".");
        char *head = strndup(key, n);
        if (!head)
            return -1;
        bool typed = cfg_find(s, head) >= 0 || cfg_is_group(s, head);
        free(head);
        return typed ? -1 : i;
    }
    return -1;
}

const char *df_config_type_name(df_config_type t)
{
    switch (t) {
    case DF_CFG_BOOL: return "bool";
    case DF_CFG_INT: return "int";
    case DF_CFG_FLOAT: return "float";
    case DF_CFG_STR: return "str";
    case DF_CFG_STR_LIST: return "list[str]";
    case DF_CFG_FLOAT_LIST: return "list[float]";
    case DF_CFG_MAP: return "map";
    }
    return "?";
}

const char *cfg_type_desc(df_config_type t)
{
    switch (t) {
    case DF_CFG_BOOL: return "a boolean (true/false)";
    case DF_CFG_INT: return "an integer";
    case DF_CFG_FLOAT: return "a number";
    case DF_CFG_STR: return "a string";
    case DF_CFG_STR_LIST: return "a list of strings";
    case DF_CFG_FLOAT_LIST: return "a list of numbers";
    case DF_CFG_MAP: return "a mapping";
    }
    return "?";
}

void cfg_bounds_text(const df_config_entry *e, char *buf, size_t cap)
{
    char lo[48], hi[48];
    buf[0] = '\0';
    if (e->type != DF_CFG_INT && e->type != DF_CFG_FLOAT && e->type != DF_CFG_FLOAT_LIST)
        return;
    cfg_format_float(e->min, lo, sizeof lo);
    cfg_format_float(e->max, hi, sizeof hi);
    if (e->type == DF_CFG_INT) { /* integral bounds print without ".0" */
        snprintf(lo, sizeof lo, "%.0f", e->min);
        snprintf(hi, sizeof hi, "%.0f", e->max);
    }
    if (isfinite(e->min) && isfinite(e->max))
        snprintf(buf, cap, "[%s, %s]", lo, hi);
    else if (isfinite(e->min))
        snprintf(buf, cap, ">= %s", lo);
    else if (isfinite(e->max))
        snprintf(buf, cap, "<= %s", hi);
}

static bool under_prefix(const char *key, const char *prefix)
{
    size_t n = strlen(prefix);
    return !n || (!strncmp(key, prefix, n) && (key[n] == '\0' || key[n] == '.'));
}

int df_config_schema_print(const df_config_schema *s, const char *prefix, FILE *f)
{
    if (!prefix)
        prefix = "";
    int shown = 0;
    for (int i = 0; i < s->n; i++) {
        const df_config_entry *e = &s->entries[i];
        if (!under_prefix(e->key, prefix))
            continue;
        if (cfg_is_open(e)) { /* not a key: the group's other names */
            fprintf(f, "%s  any other key: any YAML value\n    %s\n", e->key, e->help);
            shown++;
            continue;
        }
        char bounds[120];
        cfg_bounds_text(e, bounds, sizeof bounds);
        fprintf(f, "%s  %s%s  default: %s", e->key, df_config_type_name(e->type),
                e->nullable ? " or null" : "", e->dflt);
        if (bounds[0])
            fprintf(f, "  %s", bounds);
        if (e->list_len)
            fprintf(f, "  (%d items)", e->list_len);
        if (e->choices)
            fprintf(f, "  one of: %s", e->choices);
        if (e->null_from)
            fprintf(f, "  (null: value of %s)", e->null_from);
        fprintf(f, "\n    %s\n", e->help);
        df_config_compat cls = df_config_schema_compat(s, i);
        if (cls != DF_CFG_EFFECTIVE)
            fprintf(f, "    %s\n", cls == DF_CFG_NO_EFFECT
                                       ? "[no effect in distflow: accepted for verl / siiRL files; another value is "
                                         "named in a warning]"
                                       : "[not supported by distflow: a value other than the default is refused]");
        shown++;
    }
    if (ferror(f))
        return df_error(DF_EIO, "config help: write failed");
    if (!shown) {
        char hint[256];
        if (cfg_suggest_key(s, prefix, hint, sizeof hint))
            return df_error(DF_ENOTFOUND, "no %s config key under '%s' (did you mean '%s'?)",
                            s->name, prefix, hint);
        return df_error(DF_ENOTFOUND, "no %s config key under '%s'", s->name, prefix);
    }
    return DF_OK;
}

/* ---- self-check ---- */

static bool key_well_formed(const char *k)
{
    if (!*k)
        return false;
    for (const char *p = k; *p; p++) {
        if (*p == '.') {
            if (p == k || !p[1] || p[1] == '.')
                return false;
        } else if (!isalnum((unsigned char)*p) && *p != '_') {
            return false;
        }
    }
    return true;
}

static int check_entry_shape(const df_config_schema *s, int i)
{
    const df_config_entry *e = &s->entries[i];
    const char *name = s->name;
    bool open = e->key && cfg_is_open(e);
    char *group = open ? strndup(e->key, strlen(e->key) - 2) : NULL;
    bool formed = e->key && (open ? group && key_well_formed(group) : key_well_formed(e->key));
    free(group);
    if (!formed)
        return df_error(DF_EINTERNAL, "schema %s: entry %d: malformed key '%s'", name, i,
                        e->key ? e->key : "(null)");
    if (open && e->type != DF_CFG_MAP)
        return df_error(DF_EINTERNAL, "schema %s: %s: an open group's entry must be a map", name, e->key);
    if (!e->dflt || !e->help || !e->help[0])
        return df_error(DF_EINTERNAL, "schema %s: %s: missing default or help", name, e->key);
    if (!(e->min <= e->max))
        return df_error(DF_EINTERNAL, "schema %s: %s: min > max", name, e->key);
    bool list = e->type == DF_CFG_STR_LIST || e->type == DF_CFG_FLOAT_LIST;
    if (e->list_len && !list)
        return df_error(DF_EINTERNAL, "schema %s: %s: list_len on a scalar", name, e->key);
    if (e->choices && e->type != DF_CFG_STR && e->type != DF_CFG_STR_LIST)
        return df_error(DF_EINTERNAL, "schema %s: %s: choices on a non-string", name, e->key);
    for (int j = 0; j < i; j++) {
        const char *a = s->entries[j].key, *b = e->key;
        size_t na = strlen(a), nb = strlen(b);
        if (!strcmp(a, b))
            return df_error(DF_EINTERNAL, "schema %s: duplicate key %s", name, b);
        if ((na < nb && !strncmp(a, b, na) && b[na] == '.') ||
            (nb < na && !strncmp(a, b, nb) && a[nb] == '.'))
            return df_error(DF_EINTERNAL, "schema %s: %s and %s: a key cannot also be a group",
                            name, a, b);
    }
    if (e->null_from) {
        int f = cfg_find(s, e->null_from);
        if (f < 0 || f == i || s->entries[f].type != e->type || !e->nullable)
            return df_error(DF_EINTERNAL,
                            "schema %s: %s: null_from '%s' must name another key of the same "
                            "type, on a nullable entry",
                            name, e->key, e->null_from);
    }
    return DF_OK;
}

int df_config_schema_check(const df_config_schema *s)
{
    for (int i = 0; i < s->n; i++) {
        int rc = check_entry_shape(s, i);
        if (rc)
            return rc;
    }
    /* Every default must load (parse, bounds, choices, interpolations, null_from). */
    df_config *c = NULL;
    int rc = df_config_load(s, NULL, NULL, 0, &c);
    df_config_free(c);
    if (rc)
        return df_error_wrap(DF_EINTERNAL, "schema %s: defaults do not load", s->name);
    return DF_OK;
}
