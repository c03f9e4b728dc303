/* df_config_dump: the resolved config as nested block YAML (config.h). */
#include "config/config_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether entry i is the first, in table order, to reach component `comp`
 * (of length n) under `prefix`; later entries with the same component were
 * already written inside its group. */
static bool first_of_component(const df_config_schema *s, int i, const char *prefix, size_t plen,
                               const char *comp, size_t n)
{
    for (int j = 0; j < i; j++) {
        const char *k = s->entries[j].key;
        if (!strncmp(k, prefix, plen) && !strncmp(k + plen, comp, n) &&
            (k[plen + n] == '.' || k[plen + n] == '\0'))
            return false;
    }
    return true;
}

/* One `<indent><key>: <value>  # <where>` line per entry of an open group's map. */
typedef struct {
    df_sbuf *b;
    int indent;
    const char *prefix; /* dump_set: the line's prefix and the group's dotted key; NULL in the dump */
    const char *group;
    const cfg_slot *slot;
    int count;
} extra_lines;

static int extra_line(void *user, const char *key, const char *value)
{
    extra_lines *x = user;
    const char *where = cfg_slot_sub_where(x->slot, key, strlen(key)); /* a quoted key: the map's */
    if (x->group)
        df_sbuf_printf(x->b, "%s%s.%s: %s", x->prefix, x->group, key, value);
    else
        df_sbuf_printf(x->b, "%*s%s: %s", x->indent, "", key, value);
    if (strcmp(where, "default"))
        df_sbuf_printf(x->b, "  # %s", where);
    df_sbuf_puts(x->b, "\n");
    x->count++;
    return DF_OK;
}

static void emit_extras(const cfg_slot *slot, extra_lines *x)
{
    x->slot = slot;
    if (!slot->v.is_null && slot->v.s && cfg_map_each(slot->v.s, extra_line, x))
        x->b->failed = true;
}

static void emit_group(const df_config *c, df_sbuf *b, const char *prefix, int indent)
{
    const df_config_schema *s = c->schema;
    size_t plen = strlen(prefix);
    for (int i = 0; i < s->n; i++) {
        const char *k = s->entries[i].key;
        if (strncmp(k, prefix, plen))
            continue;
        const char *comp = k + plen;
        size_t n = strcspn(comp, ".");
        if (!first_of_component(s, i, prefix, plen, comp, n))
            continue;
        if (cfg_is_open(&s->entries[i])) { /* the group's other keys, as keys of the group */
            emit_extras(&c->slots[i], &(extra_lines){.b = b, .indent = indent});
            continue;
        }
        if (indent == 0 && b->len)
            df_sbuf_puts(b, "\n"); /* blank line between top-level groups */
        df_sbuf_printf(b, "%*s%.*s:", indent, "", (int)n, comp);
        if (comp[n] == '.') { /* a group: recurse with the longer prefix */
            df_sbuf_puts(b, "\n");
            char *sub = strndup(k, plen + n + 1);
            if (!sub) {
                b->failed = true;
                return;
            }
            emit_group(c, b, sub, indent + 2);
            free(sub);
            continue;
        }
        const cfg_slot *slot = &c->slots[i];
        df_sbuf_puts(b, " ");
        cfg_format_value(b, &s->entries[i], &slot->v);
        if (strcmp(slot->where, "default"))
            df_sbuf_printf(b, "  # %s", slot->where);
        df_sbuf_puts(b, "\n");
    }
}

/* b's text to f, b freed. */
static int write_out(df_sbuf *b, FILE *f)
{
    if (b->failed) {
        free(b->s);
        return df_error(DF_ENOMEM, "out of memory writing the config");
    }
    size_t w = b->len ? fwrite(b->s, 1, b->len, f) : 0;
    free(b->s);
    if (w != b->len || fflush(f))
        return df_error(DF_EIO, "writing the config failed");
    return DF_OK;
}

int df_config_dump(const df_config *c, FILE *f)
{
    df_sbuf b = {0};
    df_sbuf_printf(&b, "# distflow %s config (resolved)\n", c->schema->name);
    emit_group(c, &b, "", 0);
    return write_out(&b, f);
}

int df_config_dump_set(const df_config *c, const char *prefix, FILE *f, int *n)
{
    df_sbuf b = {0};
    int count = 0;
    for (int i = 0; i < c->schema->n; i++) {
        const char *where = c->slots[i].where;
        if (!cfg_slot_user_set(&c->slots[i]))
            continue;
        if (cfg_is_open(&c->schema->entries[i])) {
            char *group = strndup(c->schema->entries[i].key, strlen(c->schema->entries[i].key) - 2);
            extra_lines x = {.b = &b, .prefix = prefix ? prefix : "", .group = group};
            if (group)
                emit_extras(&c->slots[i], &x);
            else
                b.failed = true;
            free(group);
            count += x.count;
            continue;
        }
        df_sbuf_printf(&b, "%s%s: ", prefix ? prefix : "", c->schema->entries[i].key);
        cfg_format_value(&b, &c->schema->entries[i], &c->slots[i].v);
        df_sbuf_printf(&b, "  # %s\n", where);
        count++;
    }
    if (n)
        *n = count;
    return write_out(&b, f);
}
