/* Name -> function pointer tables (src/util/fn_registry.h). */
#include "util/fn_registry.h"

#include "distflow/common.h"

#include <stdlib.h>
#include <string.h>

static df_fn_entry *find_extra(const df_fn_registry *r, const char *name)
{
    for (size_t i = 0; i < r->n_extra; i++)
        if (!strcmp(r->extra[i].name, name))
            return &r->extra[i];
    return NULL;
}

const df_fn_entry *df_fn_registry_find_entry(const df_fn_registry *r, const char *name)
{
    if (!name)
        return NULL;
    const df_fn_entry *e = find_extra(r, name);
    if (e)
        return e;
    for (size_t i = 0; i < r->n_builtins; i++)
        if (!strcmp(r->builtins[i].name, name))
            return &r->builtins[i];
    return NULL;
}

df_any_fn df_fn_registry_find(const df_fn_registry *r, const char *name)
{
    const df_fn_entry *e = df_fn_registry_find_entry(r, name);
    return e ? e->fn : NULL;
}

static df_fn_registry_hook g_add_hook;

void df_fn_registry_set_add_hook(df_fn_registry_hook hook)
{
    g_add_hook = hook;
}

static int added(df_fn_registry *r, const char *name)
{
    if (g_add_hook)
        g_add_hook(r, name);
    return DF_OK;
}

int df_fn_registry_add(df_fn_registry *r, const char *name, df_any_fn fn)
{
    return df_fn_registry_add_data(r, name, fn, NULL, 0);
}

int df_fn_registry_add_data(df_fn_registry *r, const char *name, df_any_fn fn, const void *data, size_t size)
{
    if (!name || !name[0])
        return df_error(DF_EINVAL, "%s registry: empty name", r->kind);
    if (!fn)
        return df_error(DF_EINVAL, "%s registry: NULL function for '%s'", r->kind, name);
    void *copy_data = NULL;
    if (data && !(copy_data = malloc(size ? size : 1)))
        return df_error(DF_ENOMEM, "%s registry: out of memory adding '%s'", r->kind, name);
    if (data)
        memcpy(copy_data, data, size);
    df_fn_entry *e = find_extra(r, name);
    if (e) {
        free((void *)e->data);
        e->fn = fn;
        e->data = copy_data;
        return added(r, name);
    }
    if (r->n_extra == r->cap_extra) {
        size_t cap = r->cap_extra ? 2 * r->cap_extra : 16;
        df_fn_entry *nv = realloc(r->extra, cap * sizeof *nv);
        if (!nv) {
            free(copy_data);
            return df_error(DF_ENOMEM, "%s registry: out of memory adding '%s'", r->kind, name);
        }
        r->extra = nv;
        r->cap_extra = cap;
    }
    char *copy = strdup(name);
    if (!copy) {
        free(copy_data);
        return df_error(DF_ENOMEM, "%s registry: out of memory adding '%s'", r->kind, name);
    }
    r->extra[r->n_extra] = (df_fn_entry){copy, fn, copy_data};
    r->n_extra++;
    return added(r, name);
}

int df_fn_registry_remove(df_fn_registry *r, const char *name)
{
    df_fn_entry *e = find_extra(r, name);
    if (!e)
        return 0;
    free((char *)e->name);
    free((void *)e->data);
    size_t i = (size_t)(e - r->extra);
    memmove(e, e + 1, (r->n_extra - i - 1) * sizeof *e);
    r->n_extra--;
    return 1;
}

/* Append s at *len; output past cap is cut (the list is only for messages). */
static void append(char *buf, size_t cap, size_t *len, const char *s)
{
    if (*len + 1 >= cap)
        return;
    size_t n = strlen(s), room = cap - 1 - *len;
    if (n > room)
        n = room;
    memcpy(buf + *len, s, n);
    *len += n;
    buf[*len] = '\0';
}

void df_fn_registry_names(const df_fn_registry *r, char *buf, size_t cap)
{
    size_t len = 0;
    if (!cap)
        return;
    buf[0] = '\0';
    for (size_t i = 0; i < r->n_extra; i++) {
        if (len)
            append(buf, cap, &len, ", ");
        append(buf, cap, &len, r->extra[i].name);
    }
    for (size_t i = 0; i < r->n_builtins; i++) {
        if (find_extra(r, r->builtins[i].name))
            continue; /* shadowed: listed once */
        if (len)
            append(buf, cap, &len, ", ");
        append(buf, cap, &len, r->builtins[i].name);
    }
}

int df_fn_registry_lookup(const df_fn_registry *r, const char *name, int code, df_any_fn *out)
{
    df_any_fn f = df_fn_registry_find(r, name);
    if (f) {
        *out = f;
        return DF_OK;
    }
    char known[1024];
    df_fn_registry_names(r, known, sizeof known);
    return df_error(code, "unknown %s '%s' (known: %s)", r->kind, name ? name : "(null)",
                    known[0] ? known : "none");
}
